//! FindCoordinatorRequest and FindCoordinatorResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::find_coordinator::{FindCoordinatorRequest, FindCoordinatorResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<FindCoordinatorRequest, FindCoordinatorResponse>(data, |_, _| {}, |_, _| {});
});
