//! A partition replica on its owning shard: the log plus what the broker
//! keeps beside it (idempotent-producer state), and the produce, read and
//! offset-lookup operations with their checks.
//!
//! - [`producer_state`]: the pure idempotence table (C5).
//! - [`producer_snapshot`]: its snapshot file.
//! - [`PartitionError`]: the error every partition operation returns,
//!   carrying the stable wire code, so that local and cross-shard callers
//!   handle one type.

pub mod producer_snapshot;
pub mod producer_state;

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

use bytes::BytesMut;
use corelog_wire::batch::{self, BatchError, BatchHeader, BatchLimits, HEADER_BYTES};
use corelog_wire::error::ErrorCode;
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId, TimestampMs};

use crate::log_limit::LogLimit;
use crate::metadata::TopicConfig;
use crate::metadata::topic_config::log_config;
use corelog_storage::disk::Disk;
use corelog_storage::{
    AppendOutcome, DeletedRange, LogConfig, PartitionLog, PlacedBatch, ReadOutcome, ShardStorage,
    StorageError, ValidBatch,
};
use producer_state::{BatchRecord, ProducerStateTable, SequenceCheck, SequenceError};

/// Take a producer-state snapshot after this many bytes appended.
const SNAPSHOT_EVERY_BYTES: u64 = 64 << 20;

/// A failed partition operation, as it travels between shards and to clients.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct PartitionError {
    /// The stable wire code.
    pub code: ErrorCode,
    /// What happened, for the client's error message.
    pub message: String,
    /// For `OFFSET_OUT_OF_RANGE` below the log start: what was deleted.
    pub gap: Option<GapInfo>,
    /// For `OFFSET_OUT_OF_RANGE`: where the log is, so that a reader told
    /// it asked past the end learns where the end is.
    pub bounds: Option<LogBounds>,
}

/// The offsets a reader may ask for: `log_start..=high_watermark`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBounds {
    /// The first offset the partition holds.
    pub log_start: Offset,
    /// One past the last record readers may see.
    pub high_watermark: Offset,
}

/// Why a read below the log start found nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GapInfo {
    /// The offset asked for.
    pub requested: Offset,
    /// The first offset the partition holds.
    pub log_start: Offset,
    /// The deletions between them.
    pub deleted: Vec<DeletedRange>,
}

impl PartitionError {
    /// An error with a code and message.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        PartitionError {
            code,
            message: message.into(),
            gap: None,
            bounds: None,
        }
    }
}

impl From<StorageError> for PartitionError {
    fn from(error: StorageError) -> Self {
        let code = match &error {
            // ENOSPC from a write or sync, and the fence it leaves, say
            // what the operator must do (free space), not just "I/O error".
            error if error.is_no_space() => ErrorCode::DiskFull,
            StorageError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            StorageError::DiskFull(_) => ErrorCode::DiskFull,
            StorageError::InvalidBatch(inner) => return PartitionError::from(inner.clone()),
            StorageError::Corrupt { .. } => ErrorCode::CorruptSegment,
            StorageError::Fenced { .. } | StorageError::Io { .. } => ErrorCode::StorageError,
            StorageError::InvalidConfig(_) => ErrorCode::UnknownServerError,
            StorageError::OutOfSequence { .. } => ErrorCode::InvalidRequest,
            StorageError::Busy(_) => ErrorCode::LeaderNotAvailable,
            StorageError::OutOfDescriptors { .. } => ErrorCode::OutOfFileDescriptors,
        };
        let gap = match &error {
            StorageError::OffsetOutOfRange {
                requested,
                log_start,
                deleted,
                ..
            } if requested < log_start => Some(GapInfo {
                requested: *requested,
                log_start: *log_start,
                deleted: deleted.clone(),
            }),
            _ => None,
        };
        let bounds = match &error {
            StorageError::OffsetOutOfRange {
                log_start,
                readable_end,
                ..
            } => Some(LogBounds {
                log_start: *log_start,
                high_watermark: *readable_end,
            }),
            _ => None,
        };
        if matches!(
            code,
            ErrorCode::StorageError | ErrorCode::CorruptSegment | ErrorCode::OutOfFileDescriptors
        ) && let Some(left_out) =
            STORAGE_FAILURE_LOG.with(|limit| limit.borrow_mut().admit(std::time::Instant::now()))
        {
            // The client is told without the broker's paths; the log keeps them.
            tracing::warn!(%error, %code, similar_lines_left_out = left_out, "storage failure answered to a request");
        }
        PartitionError {
            code,
            message: error.client_message(),
            gap,
            bounds,
        }
    }
}

thread_local! {
    /// Storage failures answered to clients: a client retrying against a
    /// damaged segment would otherwise write a line per request.
    static STORAGE_FAILURE_LOG: std::cell::RefCell<LogLimit> =
        std::cell::RefCell::new(LogLimit::default());
}

impl From<BatchError> for PartitionError {
    fn from(error: BatchError) -> Self {
        let code = match &error {
            BatchError::TooLarge { .. } => ErrorCode::MessageTooLarge,
            BatchError::DecompressedTooLarge { .. } => ErrorCode::DecompressedTooLarge,
            BatchError::CrcMismatch { .. }
            | BatchError::Truncated { .. }
            | BatchError::TrailingBytes { .. }
            | BatchError::BadLength(_)
            | BatchError::BadBaseOffset(_)
            | BatchError::UnsupportedMagic(_) => ErrorCode::CorruptMessage,
            BatchError::UnsupportedCompression(_)
            | BatchError::BadRecordCount(_)
            | BatchError::BadOffsetDelta(_)
            | BatchError::Compression(_)
            | BatchError::MalformedRecord(_)
            | BatchError::ReservedHeader(_)
            | BatchError::Empty => ErrorCode::InvalidRecord,
        };
        PartitionError::new(code, error.to_string())
    }
}

impl From<SequenceError> for PartitionError {
    fn from(error: SequenceError) -> Self {
        let code = match error {
            SequenceError::StaleEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            SequenceError::OutOfOrder { .. } => ErrorCode::OutOfOrderSequence,
            SequenceError::DuplicateConflict { .. } => ErrorCode::DuplicateSequenceConflict,
            SequenceError::UnknownProducer { .. } => ErrorCode::UnknownProducerId,
        };
        PartitionError::new(code, error.to_string())
    }
}

/// Where a produced batch landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Produced {
    /// Offset of its first record.
    pub base_offset: Offset,
    /// When the partition accepted it.
    pub log_append_time: TimestampMs,
    /// The partition's log start offset.
    pub log_start: Offset,
    /// Records in the batch.
    pub record_count: u32,
    /// Whether this was a retry of a batch already stored (nothing appended).
    pub duplicate: bool,
}

/// What [`Partition::start_produce`] did with a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProduceStart {
    /// Appended (not yet durable) at these offsets.
    Appended {
        /// Where it landed.
        outcome: AppendOutcome,
        /// Records in the batch.
        record_count: u32,
    },
    /// A retry of an idempotent batch already in the log at these offsets
    /// (possibly not yet durable or committed): nothing appended.
    Duplicate {
        /// Where the original landed.
        original: BatchRecord,
        /// Records in the batch.
        record_count: u32,
    },
}

/// A summary of the partition, for `DescribeTopics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionSummary {
    /// First offset held.
    pub log_start: Offset,
    /// Committed end: readers see offsets below it.
    pub high_watermark: Offset,
    /// Offset after the last record appended.
    pub log_end: Offset,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// Segments.
    pub segment_count: u32,
}

/// A replica's summary for `DescribeTopics` and consumer lag: the log's,
/// with the high watermark as the committed end, and where each leader
/// epoch's run of committed records starts (the newest
/// [`EPOCH_STARTS_MAX`](corelog_wire::message::describe_topics::EPOCH_STARTS_MAX),
/// oldest first). Every run after the first on a non-empty log begins with
/// the epoch-start marker, a control record lag must not count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaSummary {
    /// Offsets and size.
    pub log: PartitionSummary,
    /// Starts of the epoch runs in `[log_start, high_watermark)`.
    pub epoch_starts: Vec<Offset>,
}

/// How to pick an offset for `ListOffsets`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetQuery {
    /// The log start.
    Earliest,
    /// The high watermark.
    Latest,
    /// The first record at or after this time.
    Timestamp(TimestampMs),
}

/// One partition replica, owned by one shard.
pub struct Partition<D: Disk> {
    topic: String,
    index: u32,
    disk: D,
    log: PartitionLog<D>,
    producers: RefCell<ProducerStateTable>,
    config: TopicConfig,
    limits: BatchLimits,
    producer_state_retention_ms: i64,
    bytes_since_snapshot: Cell<u64>,
    shard: ShardStorage,
}

impl<D: Disk> std::fmt::Debug for Partition<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("topic", &self.topic)
            .field("index", &self.index)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

/// Where and how to open a partition.
#[derive(Debug)]
pub struct PartitionSpec<'a> {
    /// Topic name, for errors and logs.
    pub topic: &'a str,
    /// The partition: its index, and its identity in the shard's tail
    /// cache and journal and in replication messages.
    pub id: PartitionId,
    /// The partition directory.
    pub dir: &'a Path,
    /// The topic's settings.
    pub config: TopicConfig,
    /// The broker's storage settings.
    pub broker_log: LogConfig,
    /// Forget idempotent producers idle this long.
    pub producer_state_retention_ms: i64,
}

impl<D: Disk> Partition<D> {
    /// Opens (recovering) or creates a partition, and rebuilds its producer
    /// state from the latest snapshot and the log after it.
    ///
    /// # Errors
    /// [`StorageError`] from opening the log or reading it back.
    pub async fn open(
        disk: D,
        spec: PartitionSpec<'_>,
        shard: ShardStorage,
    ) -> Result<Self, StorageError> {
        let log_config = log_config(&spec.config, &spec.broker_log);
        let log =
            PartitionLog::open(disk.clone(), spec.dir, log_config, shard.clone(), spec.id).await?;
        let partition = Partition {
            topic: spec.topic.to_owned(),
            index: spec.id.partition,
            disk,
            limits: log_config.batch_limits,
            log,
            producers: RefCell::new(ProducerStateTable::default()),
            config: spec.config,
            producer_state_retention_ms: spec.producer_state_retention_ms,
            bytes_since_snapshot: Cell::new(0),
            shard,
        };
        partition.rebuild_producer_state().await?;
        Ok(partition)
    }

    async fn rebuild_producer_state(&self) -> Result<(), StorageError> {
        let loaded = producer_snapshot::load(&self.disk, self.log.dir()).await?;
        let log_end = self.log.durable_end();
        let (mut table, mut position) = match loaded {
            Some((table, offset)) if offset <= log_end => (table, offset.max(self.log.log_start())),
            _ => (ProducerStateTable::default(), self.log.log_start()),
        };
        let now = self.shard.clock.now();
        let mut replayed = 0u64;
        while position < log_end {
            let read = self.log.read(position, 1 << 20, None).await?;
            if read.next_offset <= position {
                break;
            }
            for chunk in &read.chunks {
                for found in batch::batches(chunk, &self.limits) {
                    let found = found.map_err(|error| StorageError::Corrupt {
                        path: self.log.dir().to_path_buf(),
                        position: 0,
                        reason: error.to_string(),
                    })?;
                    if found.header.next_offset() > position {
                        table.replay(&found.header, now);
                        replayed += 1;
                    }
                }
            }
            position = read.next_offset;
        }
        tracing::debug!(topic = %self.topic, partition = self.index, replayed, producers = table.len(), "producer state rebuilt");
        *self.producers.borrow_mut() = table;
        Ok(())
    }

    /// Checks a producer batch and its producer sequence, stamps `epoch`,
    /// assigns offsets and records the producer's state, without waiting
    /// for durability: everything up to the offset assignment is
    /// synchronous, so batches of one partition are ordered as this is
    /// called and an idempotent producer's pipelined batches stay in
    /// sequence. The replica calls this and then waits for its own
    /// acknowledgement condition (its high watermark).
    ///
    /// # Errors
    /// A [`PartitionError`] with the wire code: malformed or oversized batch,
    /// sequence or epoch refusal, disk full, storage failure.
    pub(crate) fn start_produce(
        &self,
        batch: BytesMut,
        epoch: LeaderEpoch,
    ) -> Result<ProduceStart, PartitionError> {
        let mut batch = self.check_batch(batch)?;
        let header = *batch.header();
        let now = self.shard.clock.now();
        let verdict = if header.producer.is_idempotent() {
            self.producers.borrow().check(&header)
        } else {
            SequenceCheck::Append
        };
        match verdict {
            SequenceCheck::Reject(error) => Err(error.into()),
            SequenceCheck::Duplicate(original) => Ok(ProduceStart::Duplicate {
                original,
                record_count: header.record_count,
            }),
            SequenceCheck::Append => {
                batch.set_leader_epoch(epoch);
                let bytes = batch.bytes().len() as u64;
                let appended = self.log.start_append_valid(batch)?;
                if header.producer.is_idempotent() {
                    let stored = BatchHeader {
                        base_offset: appended.base_offset,
                        ..header
                    };
                    self.producers.borrow_mut().record(&stored, now);
                }
                self.bytes_since_snapshot
                    .set(self.bytes_since_snapshot.get() + bytes);
                Ok(ProduceStart::Appended {
                    outcome: appended,
                    record_count: header.record_count,
                })
            }
        }
    }

    /// Appends a batch a leader already placed and stamped (a follower's
    /// append), keeping the producer state in step with the log so that
    /// this replica can answer idempotent retries if it becomes leader.
    ///
    /// # Errors
    /// As [`PartitionLog::start_append_replicated`].
    pub(crate) fn append_replicated(
        &self,
        batch: PlacedBatch,
    ) -> Result<AppendOutcome, StorageError> {
        let header = *batch.header();
        let bytes = batch.bytes().len() as u64;
        let appended = self.log.start_append_replicated(batch)?;
        self.producers
            .borrow_mut()
            .replay(&header, self.shard.clock.now());
        self.bytes_since_snapshot
            .set(self.bytes_since_snapshot.get() + bytes);
        Ok(appended)
    }

    /// Cuts the log to end at `offset` (see [`PartitionLog::truncate_to`])
    /// and rebuilds the producer state from what remains, storing a fresh
    /// snapshot so that none describing the cut records survives a restart.
    ///
    /// # Errors
    /// As [`PartitionLog::truncate_to`], or the snapshot write.
    pub(crate) async fn truncate_to(&self, offset: Offset) -> Result<Offset, StorageError> {
        let end = self.log.truncate_to(offset).await?;
        self.rebuild_producer_state().await?;
        self.snapshot_producers().await?;
        Ok(end)
    }

    /// Discards the log and restarts it empty at `offset` (see
    /// [`PartitionLog::reset_to`]), with empty producer state.
    ///
    /// # Errors
    /// As [`PartitionLog::reset_to`], or the snapshot write.
    pub(crate) async fn reset_to(&self, offset: Offset) -> Result<(), StorageError> {
        self.log.reset_to(offset).await?;
        self.rebuild_producer_state().await?;
        self.snapshot_producers().await
    }

    /// Journal mode: fills the segment with what the shard journal holds
    /// for this log ([`PartitionLog::flush_segment`]), for a segment
    /// flusher outside the crate (the simulator's).
    ///
    /// # Errors
    /// As [`PartitionLog::flush_segment`].
    pub async fn flush_segment(&self) -> Result<(), StorageError> {
        self.log.flush_segment().await
    }

    /// The log, for a replicated partition's reads, pushes and markers.
    pub(crate) fn log(&self) -> &PartitionLog<D> {
        &self.log
    }

    /// The bounds batches of this partition are checked against.
    pub(crate) fn batch_limits(&self) -> BatchLimits {
        self.limits
    }

    /// Checks a producer batch before anything is stored: one well-formed
    /// batch with a correct CRC, within the topic's size, every record
    /// decodable within the decompression bound, not a control batch.
    fn check_batch(&self, batch: BytesMut) -> Result<ValidBatch, PartitionError> {
        if batch.len() < HEADER_BYTES {
            return Err(PartitionError::new(
                ErrorCode::CorruptMessage,
                format!("{} bytes is not a record batch", batch.len()),
            ));
        }
        let max = self.config.max_message_bytes as usize;
        if batch.len() > max {
            return Err(PartitionError::new(
                ErrorCode::MessageTooLarge,
                format!(
                    "batch of {} bytes exceeds the topic's max.message.bytes {max}; send smaller batches",
                    batch.len()
                ),
            ));
        }
        let batch = ValidBatch::check(batch, &self.limits)?;
        let header = *batch.header();
        if header.is_control() {
            return Err(PartitionError::new(
                ErrorCode::InvalidRecord,
                "producers may not send control batches",
            ));
        }
        if header.record_count == 0 || header.last_offset_delta + 1 != header.record_count {
            return Err(PartitionError::new(
                ErrorCode::InvalidRecord,
                "a produced batch must hold records with consecutive offset deltas from 0",
            ));
        }
        // The topic's bound on what a batch inflates to applies here, at
        // produce, within the broker's (`self.limits`): a batch of a few
        // hundred bytes that inflates to megabytes would otherwise reach
        // every consumer. Reads keep the broker's bound, so batches stored
        // under an older, larger setting still read back.
        let max_uncompressed = (self.config.max_uncompressed_message_bytes as usize)
            .min(self.limits.decompressed_bytes_max);
        let produce_limits = BatchLimits {
            decompressed_bytes_max: max_uncompressed,
            ..self.limits
        };
        batch::validate_records(batch.bytes(), &header, &produce_limits).map_err(|error| {
            match error {
                BatchError::DecompressedTooLarge { .. } => PartitionError::new(
                    ErrorCode::DecompressedTooLarge,
                    format!(
                        "the batch decompresses to more than the topic's max.uncompressed.message.bytes ({max_uncompressed}); send smaller batches"
                    ),
                ),
                other => PartitionError::from(other),
            }
        })?;
        Ok(batch)
    }

    /// Reads committed batches from `offset`, at most `max_bytes` (at least
    /// one batch).
    ///
    /// # Errors
    /// `OFFSET_OUT_OF_RANGE` (with the gap below the log start),
    /// `CORRUPT_SEGMENT`, `STORAGE_ERROR`.
    pub async fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<ReadOutcome, PartitionError> {
        Ok(self.log.read(offset, max_bytes, None).await?)
    }

    /// Answers a `ListOffsets` query: the offset and, for timestamps, the
    /// record's time; `None` when no record is at or after the time.
    ///
    /// # Errors
    /// `CORRUPT_SEGMENT` or `STORAGE_ERROR` from the time lookup.
    pub async fn list_offset(
        &self,
        query: OffsetQuery,
    ) -> Result<Option<(Offset, TimestampMs)>, PartitionError> {
        match query {
            OffsetQuery::Earliest => Ok(Some((self.log.log_start(), TimestampMs(-1)))),
            OffsetQuery::Latest => Ok(Some((self.log.durable_end(), TimestampMs(-1)))),
            OffsetQuery::Timestamp(target) => Ok(self.log.offset_for_timestamp(target).await?),
        }
    }

    /// The partition's offsets and size.
    #[must_use]
    pub fn summary(&self) -> PartitionSummary {
        PartitionSummary {
            log_start: self.log.log_start(),
            high_watermark: self.log.durable_end(),
            log_end: self.log.next_offset(),
            size_bytes: self.log.size_bytes(),
            segment_count: u32::try_from(self.log.segment_count()).unwrap_or(u32::MAX),
        }
    }

    /// Housekeeping: delete one segment if retention says so, expire idle
    /// producers, and snapshot producer state when enough was appended.
    ///
    /// # Errors
    /// [`StorageError`] when retention or the snapshot cannot be written.
    pub async fn maintain(&self) -> Result<Option<DeletedRange>, StorageError> {
        self.maintain_below(Offset(u64::MAX)).await
    }

    /// [`Partition::maintain`], deleting only segments wholly below `limit`
    /// (a replicated partition's committed, durable end).
    ///
    /// # Errors
    /// As [`Partition::maintain`].
    pub(crate) async fn maintain_below(
        &self,
        limit: Offset,
    ) -> Result<Option<DeletedRange>, StorageError> {
        let deleted = self.log.enforce_retention_below(limit).await?;
        let now = self.shard.clock.now();
        self.producers
            .borrow_mut()
            .expire(now, self.producer_state_retention_ms);
        if self.bytes_since_snapshot.get() >= SNAPSHOT_EVERY_BYTES {
            self.snapshot_producers().await?;
        }
        Ok(deleted)
    }

    async fn snapshot_producers(&self) -> Result<(), StorageError> {
        let (table, offset) = (self.producers.borrow().clone(), self.log.next_offset());
        self.bytes_since_snapshot.set(0);
        producer_snapshot::store(&self.disk, self.log.dir(), &table, offset).await
    }

    /// Deletes the oldest closed segment if it lies wholly below `offset`
    /// (compaction of an internal topic by a newer snapshot of its state).
    ///
    /// # Errors
    /// [`StorageError`] when the deletion cannot be made durable.
    pub async fn delete_segment_below(
        &self,
        offset: Offset,
        cause: corelog_storage::DeletionCause,
    ) -> Result<Option<DeletedRange>, StorageError> {
        self.log.delete_segment_below(offset, cause).await
    }

    /// Flushes, seals the log and snapshots producer state, for a clean
    /// shutdown or before deletion.
    ///
    /// # Errors
    /// [`StorageError`] when the log cannot be made durable.
    pub async fn close(&self) -> Result<(), StorageError> {
        self.log.close().await?;
        self.snapshot_producers().await
    }

    /// Stops the partition for good without saving anything (its topic was
    /// deleted): see [`PartitionLog::discard`].
    pub async fn discard(&self) {
        self.log.discard().await;
    }

    /// The partition directory.
    #[must_use]
    pub fn dir(&self) -> PathBuf {
        self.log.dir().to_path_buf()
    }

    /// Topic name.
    #[must_use]
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Partition index.
    #[must_use]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Idempotent producers with state.
    #[must_use]
    pub fn producer_count(&self) -> usize {
        self.producers.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::PathBuf;

    use corelog_storage::StorageError;
    use corelog_wire::error::ErrorCode;

    use super::PartitionError;

    /// A write that met ENOSPC, and the fence it leaves, reach the client
    /// as the retriable `DISK_FULL` that says what to do, not as a bare
    /// storage error.
    #[test]
    fn a_full_disk_is_disk_full_whether_met_or_fenced() {
        let met = StorageError::Io {
            path: PathBuf::from("00000000000000000000.log"),
            kind: io::ErrorKind::StorageFull,
            message: "No space left on device".to_owned(),
        };
        assert_eq!(PartitionError::from(met).code, ErrorCode::DiskFull);
        let other = StorageError::Io {
            path: PathBuf::from("00000000000000000000.log"),
            kind: io::ErrorKind::PermissionDenied,
            message: "Permission denied".to_owned(),
        };
        assert_eq!(PartitionError::from(other).code, ErrorCode::StorageError);
    }
}
