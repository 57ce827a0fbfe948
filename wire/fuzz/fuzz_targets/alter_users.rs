//! AlterUsersRequest and AlterUsersResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::alter_users::{AlterUsersRequest, AlterUsersResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<AlterUsersRequest, AlterUsersResponse>(data, |_, _| {}, |_, _| {});
});
