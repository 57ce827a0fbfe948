//! DeleteOffsetsRequest and DeleteOffsetsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::delete_offsets::{DeleteOffsetsRequest, DeleteOffsetsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DeleteOffsetsRequest, DeleteOffsetsResponse>(data, |_, _| {}, |_, _| {});
});
