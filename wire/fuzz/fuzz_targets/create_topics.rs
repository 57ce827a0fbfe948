//! CreateTopicsRequest and CreateTopicsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::create_topics::{CreateTopicsRequest, CreateTopicsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<CreateTopicsRequest, CreateTopicsResponse>(data, |_, _| {}, |_, _| {});
});
