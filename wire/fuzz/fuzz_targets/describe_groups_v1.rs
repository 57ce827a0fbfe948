//! DescribeGroupsRequestV1 and DescribeGroupsResponseV1 decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::describe_groups::{DescribeGroupsRequestV1, DescribeGroupsResponseV1};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeGroupsRequestV1, DescribeGroupsResponseV1>(data, |_, _| {}, |_, _| {});
});
