//! DescribeClusterRequestV2 and DescribeClusterResponseV2 decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::describe_cluster::{DescribeClusterRequestV2, DescribeClusterResponseV2};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeClusterRequestV2, DescribeClusterResponseV2>(data, |_, _| {}, |_, _| {});
});
