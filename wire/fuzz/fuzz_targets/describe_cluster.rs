//! DescribeClusterRequest and DescribeClusterResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::describe_cluster::{DescribeClusterRequest, DescribeClusterResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeClusterRequest, DescribeClusterResponse>(data, |_, _| {}, |_, _| {});
});
