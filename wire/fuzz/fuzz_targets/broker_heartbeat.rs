//! BrokerHeartbeatRequest and BrokerHeartbeatResponse decoders; see
//! `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::broker_heartbeat::{BrokerHeartbeatRequest, BrokerHeartbeatResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<BrokerHeartbeatRequest, BrokerHeartbeatResponse>(data, |_, _| {}, |_, _| {});
});
