//! AlterClusterRequest and AlterClusterResponse decoders; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::alter_cluster::{AlterClusterRequest, AlterClusterResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<AlterClusterRequest, AlterClusterResponse>(data, |_, _| {}, |_, _| {});
});
