//! corelog's storage engine: one append-only log per partition replica, on
//! glommio DMA files, owned by one shard. Its own crate under the broker
//! (DESIGN §5): it knows partitions only as directories of segments and
//! imports nothing of the broker; the broker's `partition` and `replica`
//! layers drive it, the simulator runs it on [`memory_disk`], and
//! `corelog-bench storage` measures it alone.
//!
//! - [`log::PartitionLog`] appends with group commit (an append resolves
//!   only after the fdatasync that covers it), reads by offset and by
//!   timestamp, rolls segments by size and age, and enforces retention.
//! - [`segment`], [`index`], [`time_index`]: a segment's files.
//! - [`appender`]: the group-commit state machine for the active segment.
//! - [`recovery`]: validating the log on open and cutting a torn tail.
//! - [`retention`], [`deletion_ledger`], [`checkpoint`]: what is deleted,
//!   the record of it, and the log start persisted before any unlink.
//! - [`journal`]: the shard journal, one group commit for all of a
//!   shard's partitions.
//! - [`tail_cache`], [`disk_space`]: per-shard resources shared by logs.
//! - [`sealed`]: the format of a partition directory's small files.
//! - [`disk`]: the file-system seam, with [`glommio_disk`] for production
//!   and [`memory_disk`] for tests that crash and inject faults;
//!   [`open_files`]: the bounded cache of open segment files each shard's
//!   disk keeps, so that partitions cost no descriptor while idle.
//! - [`clock`]: wall-clock time as an input, so tests move time instead of
//!   sleeping.

mod appender;
pub mod checkpoint;
pub mod clock;
pub mod deletion_ledger;
pub mod disk;
pub mod disk_space;
pub mod fault_hooks;
pub mod glommio_disk;
pub mod index;
pub mod journal;
pub mod log;
pub mod memory_disk;
pub mod open_files;
mod recovery;
pub mod retention;
pub mod sealed;
pub mod segment;
pub mod tail_cache;
pub mod time_index;

#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use corelog_wire::batch::{BatchError, BatchLimits};
use corelog_wire::types::Offset;

use crate::clock::Clock;
pub use deletion_ledger::{DeletedRange, DeletionCause};
pub use disk_space::{DiskSpace, ReserveExceeded};
pub use log::{AppendOutcome, LogStats, PartitionLog, PlacedBatch, ReadOutcome, ValidBatch};
pub use retention::RetentionPolicy;
pub use tail_cache::TailCache;

/// Upper bound on bytes one flush writes, and on a batch: recovery treats
/// damage followed by valid data further than this (plus two blocks) as
/// corruption rather than a torn write, so it must hold for every flush
/// the log ever made.
pub const FLUSH_BYTES_CAP: usize = 8 << 20;

/// Per-partition storage settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll the active segment before it exceeds this many bytes.
    pub segment_bytes: u64,
    /// Roll the active segment once it is this old (on the next append).
    pub segment_ms: i64,
    /// What retention keeps.
    pub retention: RetentionPolicy,
    /// Bytes of log between sparse index entries.
    pub index_interval_bytes: u64,
    /// Most bytes one group-commit flush writes before syncing.
    pub flush_bytes_max: usize,
    /// Bounds on each batch.
    pub batch_limits: BatchLimits,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: retention::DEFAULT_RETENTION_MS,
            retention: RetentionPolicy::default(),
            index_interval_bytes: 4096,
            flush_bytes_max: 4 << 20,
            batch_limits: BatchLimits::default(),
        }
    }
}

impl LogConfig {
    /// Checks the settings are usable together.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] naming the setting to change.
    pub fn validate(&self) -> Result<(), StorageError> {
        let invalid = |message: String| Err(StorageError::InvalidConfig(message));
        let batch_max = self.batch_limits.batch_bytes_max as u64;
        if self.segment_bytes < batch_max || self.segment_bytes > u64::from(u32::MAX) {
            return invalid(format!(
                "segment_bytes {} must be between the batch limit {batch_max} and 4 GiB",
                self.segment_bytes
            ));
        }
        if self.flush_bytes_max == 0 || self.flush_bytes_max > FLUSH_BYTES_CAP {
            return invalid(format!("flush_bytes_max must be in 1..={FLUSH_BYTES_CAP}"));
        }
        if self.batch_limits.batch_bytes_max > FLUSH_BYTES_CAP {
            return invalid(format!("batch_bytes_max must be at most {FLUSH_BYTES_CAP}"));
        }
        if self.index_interval_bytes == 0 {
            return invalid("index_interval_bytes must be positive".to_owned());
        }
        if self.segment_ms <= 0 {
            return invalid("segment_ms must be positive".to_owned());
        }
        Ok(())
    }
}

/// What a partition log shares with the other logs of its shard.
#[derive(Clone)]
pub struct ShardStorage {
    /// Wall-clock time.
    pub clock: Rc<dyn Clock>,
    /// The disk reserve.
    pub space: Rc<DiskSpace>,
    /// The tail cache.
    pub cache: TailCache,
    /// Told about disk work, for metrics.
    pub observer: Rc<dyn StorageObserver>,
    /// The shard journal: when set, logs acknowledge once their batches
    /// are durable in it and fill their segments lazily (see [`journal`]).
    pub journal: Option<Rc<dyn journal::Journal>>,
}

/// Receives measurements of the storage engine's disk work.
pub trait StorageObserver {
    /// A group commit wrote `bytes` of batches and synced them in `elapsed`.
    fn on_flush(&self, bytes: u64, elapsed: std::time::Duration);

    /// The shard journal synced a frame of `data_bytes` of batches,
    /// `written_bytes` with headers and padding, in `elapsed`.
    fn on_journal_commit(
        &self,
        _data_bytes: u64,
        _written_bytes: u64,
        _elapsed: std::time::Duration,
    ) {
    }

    /// A partition log in `dir` fenced itself after `error` (once per log).
    /// The broker's metrics count it; its runtime exits unless the disk is full.
    fn on_fenced(&self, _dir: &Path, _error: &StorageError) {}
}

/// An observer that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl StorageObserver for NoObserver {
    fn on_flush(&self, _bytes: u64, _elapsed: std::time::Duration) {}
}

impl std::fmt::Debug for ShardStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardStorage")
            .field("space", &self.space)
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

/// Why a storage operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The offset is below the log start or past the log end.
    #[error("offset {requested} is outside the log ({log_start}..{readable_end})")]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: Offset,
        /// First offset the log holds.
        log_start: Offset,
        /// Offset after the last record readers may see.
        readable_end: Offset,
        /// What was deleted between the requested offset and the log start,
        /// and why.
        deleted: Vec<DeletedRange>,
    },
    /// The append would cut into the disk reserve. Retriable once space is freed.
    #[error(
        "disk full: {} bytes free, {} reserved, append needs {}; free space or add disk",
        .0.free_bytes, .0.reserve_bytes, .0.needed_bytes
    )]
    DiskFull(ReserveExceeded),
    /// The batch offered for append is malformed.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// Stored data failed its checksum; it is not served.
    #[error("corrupt data in {} at byte {position}: {reason}", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte position of the damage.
        position: u64,
        /// What was wrong.
        reason: String,
    },
    /// An earlier write or sync failed; the log accepts nothing more, as
    /// data it wrote must be presumed lost. Reopen (recover) to continue.
    #[error("log fenced after an I/O failure: {reason}")]
    Fenced {
        /// The failure that fenced it.
        reason: String,
        /// The failure was a full disk (`ENOSPC`): the shard reopens the
        /// log by itself once space is back (see [`StorageError::is_no_space`]).
        no_space: bool,
    },
    /// An I/O operation failed.
    #[error("I/O error on {}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The kind of error.
        kind: io::ErrorKind,
        /// The error's text.
        message: String,
    },
    /// The settings cannot work together.
    #[error("invalid storage configuration: {0}")]
    InvalidConfig(String),
    /// A replicated batch does not continue the log.
    #[error("batch starts at offset {got} but the log continues at {expected}")]
    OutOfSequence {
        /// The log's next offset.
        expected: Offset,
        /// The batch's base offset.
        got: Offset,
    },
    /// The log is briefly unavailable (being truncated); retry.
    #[error("{0}")]
    Busy(String),
    /// The process or the system ran out of file descriptors (`EMFILE`,
    /// `ENFILE`) opening a file. Nothing on the disk changed and the disk
    /// is healthy: the log is not fenced, and the operation can be retried
    /// once descriptors are free again.
    #[error("out of file descriptors opening {}: {message}", path.display())]
    OutOfDescriptors {
        /// The file that could not be opened.
        path: PathBuf,
        /// The error's text.
        message: String,
    },
}

impl StorageError {
    /// Whether the failure leaves the log's files in an unknown state, so
    /// that the log must fence itself: an I/O error or damage. A refusal
    /// (busy, fenced already, bad arguments) changed nothing on disk.
    #[must_use]
    pub fn fences_the_log(&self) -> bool {
        matches!(self, StorageError::Io { .. } | StorageError::Corrupt { .. })
    }

    /// Whether the failure is a full disk: the reserve refused the append,
    /// a write or sync met `ENOSPC`, or the log was fenced by one. Such
    /// failures travel as the retriable `DISK_FULL`, and a log fenced by one
    /// is reopened (recovered from disk) once space is back.
    #[must_use]
    pub fn is_no_space(&self) -> bool {
        match self {
            StorageError::DiskFull(_) => true,
            StorageError::Fenced { no_space, .. } => *no_space,
            // A short write to a regular file is how a filesystem that
            // runs out mid-write answers (tmpfs does, for a DMA write):
            // the rest would get ENOSPC.
            StorageError::Io { kind, .. } => matches!(
                kind,
                io::ErrorKind::StorageFull
                    | io::ErrorKind::QuotaExceeded
                    | io::ErrorKind::WriteZero
            ),
            _ => false,
        }
    }

    /// Whether the failure is running out of file descriptors: a refusal
    /// that changed nothing on disk, never a reason to fence a log or stop
    /// the broker.
    #[must_use]
    pub fn is_out_of_descriptors(&self) -> bool {
        matches!(self, StorageError::OutOfDescriptors { .. })
    }

    /// The error as a client may read it: without the broker's paths
    /// (where its data directory is, how it is laid out), which only its
    /// log shows. A file is named by its name alone.
    #[must_use]
    pub fn client_message(&self) -> String {
        match self {
            StorageError::Corrupt {
                path,
                position,
                reason,
            } => format!(
                "corrupt data in {} at byte {position}: {reason}",
                file_name(path)
            ),
            StorageError::Io { path, kind, .. } => {
                format!("I/O error on {}: {kind}", file_name(path))
            }
            StorageError::OutOfDescriptors { path, .. } => {
                format!("out of file descriptors opening {}", file_name(path))
            }
            StorageError::Fenced { no_space: true, .. } => {
                "the log was fenced by a full disk; it reopens once space is freed".to_owned()
            }
            StorageError::Fenced { .. } => {
                "the log was fenced after an I/O failure (the broker's log names it)".to_owned()
            }
            StorageError::OffsetOutOfRange { .. }
            | StorageError::DiskFull(_)
            | StorageError::InvalidBatch(_)
            | StorageError::InvalidConfig(_)
            | StorageError::OutOfSequence { .. }
            | StorageError::Busy(_) => self.to_string(),
        }
    }

    /// An I/O error on `path`; running out of descriptors is
    /// [`StorageError::OutOfDescriptors`], not a disk failure.
    #[must_use]
    pub fn io(path: &Path, error: io::Error) -> Self {
        if is_out_of_descriptors(&error) {
            return StorageError::OutOfDescriptors {
                path: path.to_path_buf(),
                message: error.to_string(),
            };
        }
        StorageError::Io {
            path: path.to_path_buf(),
            kind: error.kind(),
            message: error.to_string(),
        }
    }
}

/// The last component of `path`, for messages that must not show where the
/// data directory is.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || "a file".to_owned(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// Whether `error` is the process (`EMFILE`) or the system (`ENFILE`)
/// running out of file descriptors: a resource running out, not a disk
/// failing.
#[must_use]
pub fn is_out_of_descriptors(error: &io::Error) -> bool {
    error.raw_os_error().is_some_and(|code| {
        code == rustix::io::Errno::MFILE.raw_os_error()
            || code == rustix::io::Errno::NFILE.raw_os_error()
    })
}
