//! ControllerRaftRequest and ControllerRaftResponse decoders, and the
//! request's raft message in the raw section; see `common.rs` for the input
//! format.

#![no_main]

mod common;

use corelog_wire::message::controller_raft::{ControllerRaftRequest, ControllerRaftResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ControllerRaftRequest, ControllerRaftResponse>(
        data,
        |request, raw| {
            // A decoded request's raw section is exactly the declared message.
            assert_eq!(raw.len() as u64, u64::from(request.message_len.to_native()));
        },
        |_, _| {},
    );
});
