//! AlterQuotasRequest and AlterQuotasResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::alter_quotas::{AlterQuotasRequest, AlterQuotasResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<AlterQuotasRequest, AlterQuotasResponse>(data, |_, _| {}, |_, _| {});
});
