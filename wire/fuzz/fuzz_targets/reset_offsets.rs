//! ResetOffsetsRequest and ResetOffsetsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::reset_offsets::{ResetOffsetsRequest, ResetOffsetsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ResetOffsetsRequest, ResetOffsetsResponse>(data, |_, _| {}, |_, _| {});
});
