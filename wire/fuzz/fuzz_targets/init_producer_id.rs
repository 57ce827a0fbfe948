//! InitProducerIdRequest and InitProducerIdResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<InitProducerIdRequest, InitProducerIdResponse>(data, |_, _| {}, |_, _| {});
});
