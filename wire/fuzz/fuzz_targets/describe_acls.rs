//! DescribeAclsRequest and DescribeAclsResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::describe_acls::{DescribeAclsRequest, DescribeAclsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeAclsRequest, DescribeAclsResponse>(data, |_, _| {}, |_, _| {});
});
