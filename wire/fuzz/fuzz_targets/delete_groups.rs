//! DeleteGroupsRequest and DeleteGroupsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::delete_groups::{DeleteGroupsRequest, DeleteGroupsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<DeleteGroupsRequest, DeleteGroupsResponse>(data, |_, _| {}, |_, _| {});
});
