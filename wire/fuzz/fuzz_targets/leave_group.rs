//! LeaveGroupRequest and LeaveGroupResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<LeaveGroupRequest, LeaveGroupResponse>(data, |_, _| {}, |_, _| {});
});
