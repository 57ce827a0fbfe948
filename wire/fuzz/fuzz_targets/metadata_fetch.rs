//! MetadataFetchRequest and MetadataFetchResponse decoders, and the
//! response's metadata state in the raw section; see `common.rs` for the
//! input format.

#![no_main]

mod common;

use corelog_wire::message::metadata_fetch::{MetadataFetchRequest, MetadataFetchResponse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::run::<MetadataFetchRequest, MetadataFetchResponse>(
        data,
        |_, _| {},
        |response, raw| {
            // A decoded response's raw section is exactly the declared state.
            assert_eq!(raw.len() as u64, u64::from(response.state_len.to_native()));
        },
    );
});
