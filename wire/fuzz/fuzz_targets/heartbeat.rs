//! HeartbeatRequest and HeartbeatResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<HeartbeatRequest, HeartbeatResponse>(data, |_, _| {}, |_, _| {});
});
