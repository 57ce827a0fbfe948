//! ProduceRequest and ProduceResponse decoders, and the split of a request's
//! raw section into per-partition records; see `common.rs` for the input
//! format.

#![no_main]

mod common;

use corelog_wire::message::produce::{ProduceRequest, ProduceResponse, partition_records};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<ProduceRequest, ProduceResponse>(
        data,
        |request, raw| {
            // A decoded request has a consistent raw section, so the split
            // cannot fail.
            let split = partition_records(request, raw).expect("decoded request splits");
            assert_eq!(
                split.iter().map(|p| p.records.len()).sum::<usize>(),
                raw.len()
            );
        },
        |_, _| {},
    );
});
