//! Storage fault hooks for the test build (cargo feature `fault-injection`,
//! off by default; never in a binary a user runs).
//!
//! The test build is its own binary, `target/fault-injection/corelogd`
//! (`cargo build --profile fault-injection -p corelog-broker --features
//! fault-injection`), so that cargo's feature unification can never hand
//! the hooks to `target/{debug,release}/corelogd`. It refuses to start
//! unless [`ALLOW_ENV`] is set, which only test harnesses do. The names
//! below exist in every build so that harnesses can use them.
//!
//! Every durable file operation of the broker calls in here: the DMA files
//! of [`super::glommio_disk`] (segments, indexes, checkpoints, replica and
//! group metadata, everything written through the `Disk` trait) and the
//! controller's Raft log (`cluster::raft_log`). The hooks do two things.
//!
//! # The durable ledger (power-loss simulation)
//!
//! When `CORELOG_DURABLE_LEDGER=<file>` is set, the broker appends one line
//! per event to `<file>`, each line written with a single `write` so that it
//! survives kill -9 (not power loss: it need not). A harness that kill -9s
//! the broker then cuts every file to the length its last fdatasync made
//! durable (`corelog_tests::power_loss::apply`). Fields are separated by one
//! tab; a path is always the last field(s) and contains no tab or newline
//! (events for such paths are not recorded):
//!
//! - `create\t<path>`: `<path>` did not exist and was created empty;
//! - `open\t<len>\t<path>`: the first time this process touched an
//!   existing `<path>`, it was `<len>` bytes long. A baseline for files the
//!   ledger has not seen before; for a file the ledger already knows it
//!   changes nothing (opening makes nothing durable);
//! - `sync\t<len>\t<path>`: an fdatasync of `<path>` succeeded, and it
//!   covered `<len>` bytes: the end of the writes and truncations that had
//!   completed (on any handle of the path) when the sync was issued;
//! - `rename\t<from>\t<to>`: `<from>` was renamed over `<to>`;
//! - `remove\t<path>`: `<path>` was unlinked.
//!
//! Directory syncs are not modelled: a name created or renamed counts as
//! durable at once. Lengths are tracked per path, in this process, because
//! fdatasync on any descriptor flushes the whole file.
//!
//! # EIO injection
//!
//! SIGUSR1 arms "fail the next fdatasync", SIGUSR2 "fail the next write":
//! the next such call returns EIO without touching the file (a write) or
//! after nothing is synced (a sync), once, and disarms. If the file named by
//! `CORELOG_FAULT_FILTER_FILE` exists and is not empty, only paths that
//! contain its (trimmed) text are eligible; the fault stays armed until one
//! matches. The file is read only while a fault is armed.

#[cfg(feature = "fault-injection")]
mod hooks;
#[cfg(feature = "fault-injection")]
pub use hooks::*;

/// Names the ledger file.
pub const LEDGER_ENV: &str = "CORELOG_DURABLE_LEDGER";
/// Names the file whose text restricts injected faults to matching paths.
pub const FILTER_FILE_ENV: &str = "CORELOG_FAULT_FILTER_FILE";
/// Set (to any value) by a test harness that means to run the test build;
/// without it the test build refuses to start.
pub const ALLOW_ENV: &str = "CORELOG_ALLOW_FAULT_HOOKS";
/// Text found in a corelogd binary built with the hooks (it is logged at
/// start-up): tests look for it to tell the test build from the others.
pub const BUILD_MARKER: &str = "corelog-fault-injection-hooks-v1";
/// Where the test build is, relative to the cargo target directory.
pub const TEST_BUILD_DIR: &str = "fault-injection";

/// Whether this binary carries the hooks.
#[must_use]
pub const fn compiled_in() -> bool {
    cfg!(feature = "fault-injection")
}

/// `Err` with what to do when this is the test build and no harness
/// allowed it: a user must never run a broker that fails its own writes
/// on a signal.
///
/// # Errors
/// The message to print before exiting with code 2.
pub fn refuse_unless_allowed(allowed: bool) -> Result<(), String> {
    if compiled_in() && !allowed {
        return Err(format!(
            "this is the test build of corelogd, with storage fault hooks ({BUILD_MARKER}); \
             it starts only under a test harness, which sets {ALLOW_ENV}. \
             Run the broker that `make build` puts in target/release/corelogd instead"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_test_build_needs_the_harness_to_allow_it() {
        assert!(refuse_unless_allowed(true).is_ok());
        assert_eq!(refuse_unless_allowed(false).is_err(), compiled_in());
    }
}
