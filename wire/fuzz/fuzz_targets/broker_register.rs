//! BrokerRegisterRequest and BrokerRegisterResponse decoders; see
//! `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::broker_register::{BrokerRegisterRequest, BrokerRegisterResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<BrokerRegisterRequest, BrokerRegisterResponse>(data, |_, _| {}, |_, _| {});
});
