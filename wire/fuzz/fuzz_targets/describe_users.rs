//! DescribeUsersRequest and DescribeUsersResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::describe_users::{DescribeUsersRequest, DescribeUsersResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeUsersRequest, DescribeUsersResponse>(data, |_, _| {}, |_, _| {});
});
