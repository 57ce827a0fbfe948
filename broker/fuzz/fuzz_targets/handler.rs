//! Arbitrary frames against a real corelogd's request handling.
//!
//! One standalone broker (one shard, real storage on a temporary data
//! directory) is started in this process on the first input and reused; it
//! is replaced by a fresh one every `harness::INPUTS_PER_BROKER` inputs so that the
//! topics, records and groups the fuzzer creates stay bounded. Each input
//! is written as one byte stream on a new loopback connection, so the
//! broker's real `serve` — header checks, handshake, backpressure,
//! `dispatch` and every handler — runs on it.
//!
//! # Input
//!
//! ```text
//! input := control:u8 item*
//! control bit 0: 1 skips the ApiVersions handshake the harness sends first
//! item := kind:u8 ...
//!   kind bit 7 = 1: raw bytes, written as they are:  len:u16 bytes
//!   kind bit 7 = 0: one framed request of API ApiKey::ALL[kind % 27]:
//!       options:u8 [version:u16 if options bit 2]
//!       [raw_len:u16 if options bit 0] len:u16 payload
//!     options bit 0: the payload is the archive + raw section behind a valid
//!       body prefix (else it is the whole body);
//!     options bit 1: fix up the CRC of every record batch in the body's raw
//!       section, so that produce and replica-push reach storage;
//!     options bit 2: an explicit API version (else the newest supported).
//! ```
//!
//! Integers are big-endian; a field cut short by the end of the input
//! reads as zero. Framed requests get correlation ids 1, 2, …; raw bytes
//! carry whatever the fuzzer wrote.
//!
//! # Invariants checked
//!
//! - No panic anywhere in the broker (libFuzzer's panic hook aborts).
//! - Every complete frame is answered exactly once, with its correlation id,
//!   before the broker closes the connection; the expected answers are
//!   worked out by walking the stream with the broker's own header decoder.
//!   After a frame the broker must refuse by closing (too large, too
//!   short), only a subset is required: responses still in flight are
//!   dropped with the connection by design.
//! - Every response body is well-formed for its API: it decodes as that
//!   API's response, or is a bare top-level refusal with a known code.
//! - No hang: all answers and the close arrive within `harness::ANSWER_DEADLINE`.
//! - The broker still answers ApiVersions and Metadata afterwards.

#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;

mod harness;
mod seeds;

use harness::Harness;

/// The broker in use; replaced every [`harness::INPUTS_PER_BROKER`] inputs.
static HARNESS: Mutex<Option<Harness>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut harness = HARNESS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if harness
        .as_ref()
        .is_some_and(|running| running.inputs() >= harness::INPUTS_PER_BROKER)
    {
        // Dropping stops the broker and deletes its data.
        *harness = None;
    }
    let running = harness.get_or_insert_with(|| {
        if let Ok(seed_dir) = std::env::var("CORELOG_HANDLER_SEEDS") {
            seeds::write(std::path::Path::new(&seed_dir));
        }
        Harness::start()
    });
    running.run(data);
});
