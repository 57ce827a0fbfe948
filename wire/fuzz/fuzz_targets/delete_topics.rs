//! DeleteTopicsRequest and DeleteTopicsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::delete_topics::{DeleteTopicsRequest, DeleteTopicsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DeleteTopicsRequest, DeleteTopicsResponse>(data, |_, _| {}, |_, _| {});
});
