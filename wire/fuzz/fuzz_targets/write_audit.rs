//! WriteAuditRequest and WriteAuditResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::write_audit::{WriteAuditRequest, WriteAuditResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<WriteAuditRequest, WriteAuditResponse>(data, |_, _| {}, |_, _| {});
});
