//! Failures the broker does not survive: it logs why and exits the whole
//! process with a per-reason code, rather than panicking one shard and
//! leaving the others half-alive.
//!
//! Exit codes (never reused for another reason): 1 start-up or run error,
//! 2 bad configuration, 5 a panicking thread (all three in `main.rs`),
//! 3 [`STORAGE_IO_EXIT_CODE`], 4 [`STORAGE_CORRUPT_EXIT_CODE`].

use std::path::Path;

use corelog_wire::error::ErrorCode;

use crate::cluster::raft_log::RaftLogError;
use crate::metrics::ShardMetrics;
use crate::replica::ReplicaError;
use corelog_storage::{StorageError, StorageObserver};

/// The storage observer of a broker's shard: the metrics count, then the
/// runtime decides whether the process survives ([`on_log_fenced`]).
#[derive(Debug)]
pub struct ExitOnFence(pub ShardMetrics);

impl StorageObserver for ExitOnFence {
    fn on_flush(&self, bytes: u64, elapsed: std::time::Duration) {
        self.0.on_flush(bytes, elapsed);
    }

    fn on_journal_commit(&self, data_bytes: u64, written_bytes: u64, elapsed: std::time::Duration) {
        self.0.on_journal_commit(data_bytes, written_bytes, elapsed);
    }

    fn on_fenced(&self, dir: &Path, error: &StorageError) {
        self.0.on_fenced(dir, error);
        on_log_fenced(dir, error);
    }
}

/// A partition log's write or fdatasync failed for a reason other than a
/// full disk.
pub const STORAGE_IO_EXIT_CODE: i32 = 3;

/// A replica's stored data (a segment, an index, the producer state, the
/// replica metadata) failed its checks when the replica was opened, or the
/// controller log did at start-up.
pub const STORAGE_CORRUPT_EXIT_CODE: i32 = 4;

/// What the operator is told when a replica's stored data is damaged:
/// `None` when `error` is not damage (an I/O error, a full disk), which
/// keeps the replica closed and the broker running as before.
///
/// Nothing repairs such a replica by itself, and it must not: a replica
/// truncated to its intact prefix and refetched could, before it caught
/// up, join a lagging replica in an election majority that loses
/// committed records. Serving around the damage is not possible either.
/// So the broker stops and an operator decides; the advice below is what
/// `tests/tests/corruption.rs` checks.
#[must_use]
pub fn corrupt_replica_advice(
    topic: &str,
    partition: u32,
    dir: &Path,
    error: &ReplicaError,
) -> Option<String> {
    if !matches!(
        error.code(),
        ErrorCode::CorruptSegment | ErrorCode::CorruptMessage
    ) {
        return None;
    }
    Some(format!(
        "replica {topic}/{partition} cannot be opened, its stored data is damaged: {error}. \
         Check the disk. If the partition's other replicas are healthy and in sync, move the \
         directory {dir} aside and restart: this broker then creates the replica empty and \
         copies it from the leader. Until it has caught up the partition has one copy fewer: \
         stop none of its other replicas meanwhile",
        dir = dir.display()
    ))
}

/// Called when a replica cannot be opened. When its stored data is
/// damaged ([`corrupt_replica_advice`]) the broker exits with
/// [`STORAGE_CORRUPT_EXIT_CODE`] rather than run on with the replica
/// closed forever, which would leave the partition one copy short without
/// anyone being told; other failures return and the replica stays closed.
pub fn on_replica_open_failed(topic: &str, partition: u32, dir: &Path, error: &ReplicaError) {
    let Some(advice) = corrupt_replica_advice(topic, partition, dir, error) else {
        return;
    };
    tracing::error!(
        topic,
        partition,
        dir = %dir.display(),
        code = STORAGE_CORRUPT_EXIT_CODE,
        "exiting: {advice}"
    );
    eprintln!("corelogd: {advice}; exiting with code {STORAGE_CORRUPT_EXIT_CODE}");
    std::process::exit(STORAGE_CORRUPT_EXIT_CODE);
}

/// Called when the controller log cannot be opened. A damaged or truncated
/// file exits with [`STORAGE_CORRUPT_EXIT_CODE`] (the error names the byte
/// and says what to do); an I/O failure returns, and start-up fails with
/// the ordinary run-error code.
pub fn on_controller_log_failed(error: &RaftLogError) {
    if !matches!(error, RaftLogError::Unrecoverable { .. }) {
        return;
    }
    tracing::error!(code = STORAGE_CORRUPT_EXIT_CODE, "exiting: {error}");
    eprintln!("corelogd: {error}; exiting with code {STORAGE_CORRUPT_EXIT_CODE}");
    std::process::exit(STORAGE_CORRUPT_EXIT_CODE);
}

/// Called when a partition log fenced itself. A full disk is survivable
/// (the shard reopens the log once space is back). Any other I/O failure
/// means data this replica wrote, and may have counted as durable, is
/// presumed lost: the replica must not lead or acknowledge again from this
/// state, and a fenced leader would otherwise keep its leadership (its
/// broker still heartbeats), leaving the partition unavailable. Exiting
/// moves its leaderships to replicas whose disks work, and a restart
/// recovers the log from what the disk really holds.
pub fn on_log_fenced(dir: &Path, error: &StorageError) {
    // Running out of descriptors is not a failed disk: nothing was written
    // (`on_fenced` sees it from a replica whose metadata could not be
    // stored; the shard reopens that replica).
    if error.is_no_space() || error.is_out_of_descriptors() {
        return;
    }
    tracing::error!(
        dir = %dir.display(),
        %error,
        code = STORAGE_IO_EXIT_CODE,
        "exiting: a partition log's write or fdatasync failed; its data is presumed lost, so this broker stops before it leads or acknowledges again. Check the disk, then restart: recovery reads back what the disk holds"
    );
    eprintln!(
        "corelogd: storage I/O failure in {}: {error}; exiting with code {STORAGE_IO_EXIT_CODE}",
        dir.display()
    );
    std::process::exit(STORAGE_IO_EXIT_CODE);
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn running_out_of_descriptors_or_space_never_stops_the_broker() {
        // Before, EMFILE was an I/O error: this call exited the test process.
        for error in [
            StorageError::OutOfDescriptors {
                path: PathBuf::from("/data/topics/t.1/0/replica-meta"),
                message: "Too many open files (os error 24)".to_owned(),
            },
            StorageError::Fenced {
                reason: "ENOSPC".to_owned(),
                no_space: true,
            },
        ] {
            on_log_fenced(Path::new("/data/topics/t.1/0"), &error);
        }
    }

    use super::*;
    use crate::partition::PartitionError;

    #[test]
    fn damage_found_at_open_is_fatal_with_advice_and_other_failures_are_not() {
        let dir = Path::new("/data/topics/t.1/0");
        let corrupt = ReplicaError::from(StorageError::Corrupt {
            path: PathBuf::from("/data/topics/t.1/0/00000000000000000000.log"),
            position: 17,
            reason: "crc mismatch".to_owned(),
        });
        let advice = corrupt_replica_advice("t", 0, dir, &corrupt).expect("damage is fatal");
        assert!(
            advice.contains("00000000000000000000.log at byte 17"),
            "{advice}"
        );
        assert!(
            advice.contains("move the directory /data/topics/t.1/0 aside"),
            "{advice}"
        );

        let meta = ReplicaError::Meta {
            path: dir.join("replica-meta"),
            reason: "checksum".to_owned(),
        };
        assert!(corrupt_replica_advice("t", 0, dir, &meta).is_some());

        let io = ReplicaError::from(StorageError::Io {
            path: dir.join("x"),
            kind: std::io::ErrorKind::PermissionDenied,
            message: "denied".to_owned(),
        });
        assert_eq!(corrupt_replica_advice("t", 0, dir, &io), None);
        let other =
            ReplicaError::Partition(PartitionError::new(ErrorCode::UnknownServerError, "x"));
        assert_eq!(corrupt_replica_advice("t", 0, dir, &other), None);
    }
}
