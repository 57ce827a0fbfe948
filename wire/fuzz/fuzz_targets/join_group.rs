//! JoinGroupRequest and JoinGroupResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<JoinGroupRequest, JoinGroupResponse>(data, |_, _| {}, |_, _| {});
});
