//! OffsetFetchRequest and OffsetFetchResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::offset_fetch::{OffsetFetchRequest, OffsetFetchResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<OffsetFetchRequest, OffsetFetchResponse>(data, |_, _| {}, |_, _| {});
});
