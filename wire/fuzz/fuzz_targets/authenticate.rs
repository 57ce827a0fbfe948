//! AuthenticateRequest and AuthenticateResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::authenticate::{AuthenticateRequest, AuthenticateResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<AuthenticateRequest, AuthenticateResponse>(data, |_, _| {}, |_, _| {});
});
