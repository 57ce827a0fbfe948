//! corelog's broker, `corelogd`.
//!
//! The broker is the I/O shell around corelog's pure parts: it owns files,
//! sockets and executors and drives the wire codec and (later) the
//! replication state machines. One folder per concern:
//!
//! - [`storage`]: the partition log on disk — segments, indexes, group-commit
//!   appends, recovery, retention, the tail cache.
//! - [`clock`]: wall-clock time as an input, so that tests control it.

pub mod clock;
pub mod storage;
