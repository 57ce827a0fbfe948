//! Recovery of the controller's Raft log file
//! (`corelog_controller::durable::recover`) from arbitrary bytes, alone and
//! behind a valid current-format header (so most inputs reach the record
//! scanner and the synced-length check rather than stopping at the magic).
//!
//! Checked for every input that recovers:
//!
//! - the intact length is within the file, and a torn tail is reported
//!   exactly when bytes beyond it were cut;
//! - nothing at or below the synced length the header records is ever cut
//!   (that would be silently losing records this node acknowledged);
//! - the compacted rewrite (`encode_log`) recovers to the same entries and
//!   hard state, and records its own whole length as synced.
//!
//! A panic anywhere is a crash.

#![no_main]

use corelog_controller::durable::{self, Header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut file = durable::new_log_file();
    file.extend_from_slice(data);
    check(&file);
});

fn check(file: &[u8]) {
    let Ok(recovery) = durable::recover(file) else {
        return;
    };
    let len = file.len() as u64;
    assert!(recovery.valid_len <= len);
    assert_eq!(recovery.torn_tail.is_some(), recovery.valid_len < len);
    if let Some(Header::Current { synced, .. }) = recovery.header {
        assert!(
            recovery.valid_len >= synced.len,
            "recovery cut below the synced length {} to {}",
            synced.len,
            recovery.valid_len
        );
    }
    let rewritten = durable::encode_log(&recovery.log);
    assert_eq!(
        durable::synced_length(&rewritten).map(|synced| synced.len),
        Some(rewritten.len() as u64)
    );
    let again = match durable::recover(&rewritten) {
        Ok(again) => again,
        Err(error) => panic!("the rewrite of a recovered log does not recover: {error}"),
    };
    assert_eq!(again.log.entries, recovery.log.entries);
    assert_eq!(again.log.hard_state, recovery.log.hard_state);
    assert_eq!(again.valid_len, rewritten.len() as u64);
}
