//! OffsetCommitRequest and OffsetCommitResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::offset_commit::{OffsetCommitRequest, OffsetCommitResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<OffsetCommitRequest, OffsetCommitResponse>(data, |_, _| {}, |_, _| {});
});
