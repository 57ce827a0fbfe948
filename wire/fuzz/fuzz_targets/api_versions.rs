//! ApiVersionsRequest and ApiVersionsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::api_versions::{ApiVersionsRequest, ApiVersionsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ApiVersionsRequest, ApiVersionsResponse>(data, |_, _| {}, |_, _| {});
});
