//! The `corelog` command-line tool's crate. Its binary, `corelog`
//! (`src/bin/corelog/`), manages topics, groups, users, ACLs and quotas and
//! produces and consumes records, on the client library `corelog-client`.
//!
//! Its library holds [`verify`], the history checker: the pure checker
//! that proves from a recorded history whether the log kept its contracts,
//! and the workload that records such histories against a live cluster.
//! `corelog verify` runs it, and so does the fault-injection rig
//! (`tests/src/bin/nemesis`). It lives here rather than in the client
//! library because no application needs it: the library is producer,
//! consumer, groups and admin.

pub mod verify;
