//! DescribeGroupsRequest and DescribeGroupsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::describe_groups::{DescribeGroupsRequest, DescribeGroupsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeGroupsRequest, DescribeGroupsResponse>(data, |_, _| {}, |_, _| {});
});
