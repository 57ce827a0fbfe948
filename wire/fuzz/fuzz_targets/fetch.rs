//! FetchRequest and FetchResponse decoders, and the split of a response's
//! raw section into per-partition records; see `common.rs` for the input
//! format.

#![no_main]

mod common;

use corelog_wire::message::fetch::{FetchRequest, FetchResponse, partition_records};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<FetchRequest, FetchResponse>(
        data,
        |_, _| {},
        |response, raw| {
            // A decoded response has a consistent raw section, so the split
            // cannot fail.
            let split = partition_records(response, raw).expect("decoded response splits");
            assert_eq!(
                split.iter().map(|p| p.records.len()).sum::<usize>(),
                raw.len()
            );
        },
    );
});
