//! ReplicaQueryRequest and ReplicaQueryResponse decoders; see
//! `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::replica_query::{ReplicaQueryRequest, ReplicaQueryResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ReplicaQueryRequest, ReplicaQueryResponse>(data, |_, _| {}, |_, _| {});
});
