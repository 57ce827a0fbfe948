//! DescribeClusterRequestV1 and DescribeClusterResponseV1 decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::describe_cluster::{DescribeClusterRequestV1, DescribeClusterResponseV1};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeClusterRequestV1, DescribeClusterResponseV1>(data, |_, _| {}, |_, _| {});
});
