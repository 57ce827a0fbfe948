//! ControllerOperationRequest and ControllerOperationResponse decoders; see
//! `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::controller_operation::{
    ControllerOperationRequest, ControllerOperationResponse,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ControllerOperationRequest, ControllerOperationResponse>(
        data,
        |_, _| {},
        |_, _| {},
    );
});
