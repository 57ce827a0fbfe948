//! ReplicaStreamRequest and ReplicaStreamResponse decoders, and the request's
//! record batches in the raw section; see `common.rs` for the input format.

#![no_main]

mod common;

use corelog_wire::message::replica_stream::{
    ReplicaStreamRequest, ReplicaStreamResponse, push_records,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ReplicaStreamRequest, ReplicaStreamResponse>(
        data,
        |request, raw| {
            // A decoded frame's raw section cuts into exactly its pushes'.
            let pushes = push_records(request, raw).expect("decode checked the lengths");
            assert_eq!(pushes.len(), request.pushes.len());
            for (push, records) in pushes {
                assert_eq!(records.len() as u64, u64::from(push.records_len.to_native()));
            }
        },
        |_, _| {},
    );
});
