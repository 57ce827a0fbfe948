//! ReplicaPushRequest and ReplicaPushResponse decoders, and the request's
//! record batches in the raw section; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::replica_push::{ReplicaPushRequest, ReplicaPushResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ReplicaPushRequest, ReplicaPushResponse>(
        data,
        |request, raw| {
            // A decoded request's raw section is exactly the declared records.
            assert_eq!(raw.len() as u64, u64::from(request.records_len.to_native()));
        },
        |_, _| {},
    );
});
