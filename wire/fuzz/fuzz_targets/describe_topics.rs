//! DescribeTopicsRequest and DescribeTopicsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::describe_topics::{DescribeTopicsRequest, DescribeTopicsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeTopicsRequest, DescribeTopicsResponse>(data, |_, _| {}, |_, _| {});
});
