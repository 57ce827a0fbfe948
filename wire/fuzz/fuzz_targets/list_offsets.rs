//! ListOffsetsRequest and ListOffsetsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::list_offsets::{ListOffsetsRequest, ListOffsetsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ListOffsetsRequest, ListOffsetsResponse>(data, |_, _| {}, |_, _| {});
});
