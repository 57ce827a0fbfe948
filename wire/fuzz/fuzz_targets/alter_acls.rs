//! AlterAclsRequest and AlterAclsResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::alter_acls::{AlterAclsRequest, AlterAclsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<AlterAclsRequest, AlterAclsResponse>(data, |_, _| {}, |_, _| {});
});
