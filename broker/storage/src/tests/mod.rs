//! Tests of the storage engine as a whole: a model-based property test,
//! crash and corruption tests, fault injection, retention, and the same
//! paths on real glommio DMA files.

mod crash;
mod faults;
mod journal;
mod model;
mod on_glommio;
mod retention;
mod truncation;

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use corelog_wire::batch::{self, BatchBuilder, BatchLimits, Compression, NewRecord};
use corelog_wire::types::{Offset, PartitionId, TimestampMs};

use super::disk::Disk;
use super::memory_disk::MemoryDisk;
use super::{DiskSpace, LogConfig, PartitionLog, ReadOutcome, ShardStorage, TailCache};
use crate::clock::{Clock, ManualClock};

/// Partition `index` of a test shard (of topic `index`, partition 0).
pub(super) fn test_partition(index: u64) -> PartitionId {
    PartitionId {
        topic_id: index,
        partition: 0,
    }
}

/// Start of test time: 2026-01-01.
pub(super) const T0: i64 = 1_767_225_600_000;

/// A memory disk, clock and shard resources for one partition log.
pub(super) struct Harness {
    pub disk: MemoryDisk,
    pub clock: Rc<ManualClock>,
    pub cache: TailCache,
    pub dir: PathBuf,
    pub config: LogConfig,
    pub reserve_bytes: u64,
}

impl Harness {
    pub fn new(config: LogConfig) -> Self {
        Harness {
            disk: MemoryDisk::new(512, 1 << 40),
            clock: Rc::new(ManualClock::new(TimestampMs(T0))),
            cache: TailCache::new(64 << 10),
            dir: PathBuf::from("/data/topic-0"),
            config,
            reserve_bytes: 0,
        }
    }

    pub fn shard_for<D: Disk>(&self, disk: &D, dir: &Path) -> ShardStorage {
        let probe_disk = disk.clone();
        let probe_dir = dir.parent().unwrap_or(dir).to_path_buf();
        ShardStorage {
            clock: self.clock.clone(),
            space: Rc::new(DiskSpace::new(self.reserve_bytes, move || {
                probe_disk.free_bytes(&probe_dir)
            })),
            cache: self.cache.clone(),
            observer: Rc::new(super::NoObserver),
            journal: None,
        }
    }

    pub async fn open(&self) -> PartitionLog<MemoryDisk> {
        self.try_open(&self.disk).await.expect("log opens")
    }

    pub async fn try_open(
        &self,
        disk: &MemoryDisk,
    ) -> Result<PartitionLog<MemoryDisk>, super::StorageError> {
        PartitionLog::open(
            disk.clone(),
            &self.dir,
            self.config,
            self.shard_for(disk, &self.dir),
            test_partition(1),
        )
        .await
    }
}

/// Small segments and indexes so that tests roll and index often.
pub(super) fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 8 << 10,
        segment_ms: 60_000,
        retention: super::RetentionPolicy {
            retention_ms: None,
            retention_bytes: None,
        },
        index_interval_bytes: 512,
        flush_bytes_max: 4 << 10,
        batch_limits: BatchLimits {
            batch_bytes_max: 4 << 10,
            decompressed_bytes_max: 1 << 20,
        },
    }
}

/// A batch of `records` records whose values identify it by `tag`.
pub(super) fn make_batch(tag: u64, records: usize, value_len: usize, timestamp: i64) -> BytesMut {
    let mut builder = BatchBuilder::new(Compression::None);
    for index in 0..records {
        let mut value = format!("{tag}:{index}:").into_bytes();
        value.resize(value_len.max(value.len()), b'x');
        builder
            .push(&NewRecord {
                key: Some(Bytes::from(format!("key-{}", tag % 7))),
                value: Some(Bytes::from(value)),
                timestamp: TimestampMs(timestamp + index as i64),
                ..NewRecord::default()
            })
            .expect("record encodes");
    }
    BytesMut::from(&builder.build().expect("batch builds")[..])
}

pub(super) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

/// Every batch a read returned, as (base offset, next offset, bytes).
pub(super) fn batches_of(outcome: &ReadOutcome) -> Vec<(Offset, Offset, Bytes)> {
    let limits = BatchLimits::default();
    let mut found = Vec::new();
    for chunk in &outcome.chunks {
        for item in batch::batches(chunk, &limits) {
            let item = item.expect("reads return valid batches");
            found.push((
                item.header.base_offset,
                item.header.next_offset(),
                chunk.slice_ref(item.bytes),
            ));
        }
    }
    found
}

/// Reads the whole log from its start.
pub(super) async fn read_all<D: Disk>(log: &PartitionLog<D>) -> Vec<(Offset, Offset, Bytes)> {
    let mut all = Vec::new();
    let mut position = log.log_start();
    while position < log.durable_end() {
        let outcome = log
            .read(position, 64 << 10, None)
            .await
            .expect("read succeeds");
        let batches = batches_of(&outcome);
        assert!(!batches.is_empty(), "read at {position} returned nothing");
        assert!(
            outcome.next_offset > position,
            "read at {position} made no progress"
        );
        position = outcome.next_offset;
        all.extend(batches);
    }
    all
}
