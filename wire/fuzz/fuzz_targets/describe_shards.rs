//! DescribeShardsRequest and DescribeShardsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::describe_shards::{DescribeShardsRequest, DescribeShardsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DescribeShardsRequest, DescribeShardsResponse>(data, |_, _| {}, |_, _| {});
});
