//! MetadataRequest and MetadataResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::metadata::{MetadataRequest, MetadataResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<MetadataRequest, MetadataResponse>(data, |_, _| {}, |_, _| {});
});
