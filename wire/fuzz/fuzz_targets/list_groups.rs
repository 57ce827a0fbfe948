//! ListGroupsRequest and ListGroupsResponse decoders; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::list_groups::{ListGroupsRequest, ListGroupsResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ListGroupsRequest, ListGroupsResponse>(data, |_, _| {}, |_, _| {});
});
