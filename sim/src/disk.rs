//! A simulated disk for one node: the partition's log (batches) and the
//! persisted replica metadata.
//!
//! Appends go to an unsynced tail; an fsync covers the log as it was when
//! it started and completes after a simulated delay (group commit: appends
//! during an fsync wait for the next one). A crash keeps only what an
//! fsync completed, plus the metadata, which is written durably at once
//! (the shell's contract for `Action::Persist`). Truncation, reset and
//! retention are durable at once too.

use corelog_replication::{Batch, ReplicaMeta};
use corelog_wire::types::{LeaderEpoch, Offset};

/// An fsync in flight.
#[derive(Clone, Copy, Debug)]
struct Fsync {
    /// The log end it covers.
    covers: Offset,
    /// When it completes.
    done_at_ms: u64,
}

/// One node's disk.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    log_start: Offset,
    batches: Vec<Batch>,
    durable_end: Offset,
    fsync: Option<Fsync>,
    /// The encoded `ReplicaMeta`, as persisted.
    meta: Option<Vec<u8>>,
    /// The fenced epoch of the persisted metadata, kept decoded for the
    /// checker.
    persisted_fence: LeaderEpoch,
}

impl Disk {
    /// The first offset held.
    #[must_use]
    pub fn log_start(&self) -> Offset {
        self.log_start
    }

    /// The offset after the last batch.
    #[must_use]
    pub fn log_end(&self) -> Offset {
        self.batches.last().map_or(self.log_start, Batch::end)
    }

    /// The offset after the last durable batch.
    #[must_use]
    pub fn durable_end(&self) -> Offset {
        self.durable_end
    }

    /// The batches, oldest first.
    #[must_use]
    pub fn batches(&self) -> &[Batch] {
        &self.batches
    }

    /// The fenced epoch last persisted.
    #[must_use]
    pub fn persisted_fence(&self) -> LeaderEpoch {
        self.persisted_fence
    }

    /// The batch starting at `base`, if any.
    #[must_use]
    pub fn batch_at(&self, base: Offset) -> Option<&Batch> {
        self.index_of(base).map(|index| &self.batches[index])
    }

    fn index_of(&self, base: Offset) -> Option<usize> {
        self.batches
            .binary_search_by(|batch| batch.base.cmp(&base))
            .ok()
    }

    /// Whether `batch` is held durably, byte for byte.
    #[must_use]
    pub fn holds_durably(&self, batch: &Batch) -> bool {
        batch.last < self.durable_end && self.batch_at(batch.base) == Some(batch)
    }

    /// Appends at the log end (unsynced).
    ///
    /// # Panics
    /// If the batch does not start at the log end.
    pub fn append(&mut self, batch: Batch) {
        assert_eq!(batch.base, self.log_end(), "append not at the log end");
        self.batches.push(batch);
    }

    /// Starts an fsync of everything appended, if none is in flight and
    /// something is unsynced.
    pub fn start_fsync(&mut self, now_ms: u64, delay_ms: u64) {
        if self.fsync.is_none() && self.durable_end < self.log_end() {
            self.fsync = Some(Fsync {
                covers: self.log_end(),
                done_at_ms: now_ms + delay_ms,
            });
        }
    }

    /// When the fsync in flight completes.
    #[must_use]
    pub fn fsync_due(&self) -> Option<u64> {
        self.fsync.map(|fsync| fsync.done_at_ms)
    }

    /// Completes the fsync in flight if due; returns the new durable end if
    /// it moved.
    pub fn complete_fsync(&mut self, now_ms: u64) -> Option<Offset> {
        let fsync = self.fsync?;
        if fsync.done_at_ms > now_ms {
            return None;
        }
        self.fsync = None;
        if fsync.covers > self.durable_end {
            self.durable_end = fsync.covers;
            Some(self.durable_end)
        } else {
            None
        }
    }

    /// Reads whole batches from `start` within `max_bytes` (at least one if
    /// there is any; none for `max_bytes == 0`).
    ///
    /// # Panics
    /// If `start` is not a batch boundary of this log.
    #[must_use]
    pub fn read(&self, start: Offset, max_bytes: u64) -> Vec<Batch> {
        if max_bytes == 0 || start >= self.log_end() {
            return Vec::new();
        }
        let Some(first) = self.index_of(start) else {
            panic!("push start {start} is not a batch boundary");
        };
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for batch in &self.batches[first..] {
            let size = batch.bytes.len() as u64;
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            out.push(batch.clone());
        }
        out
    }

    /// Cuts the log to end at `to`, durably.
    ///
    /// # Panics
    /// If `to` is not a batch boundary.
    pub fn truncate(&mut self, to: Offset) {
        let keep = self.batches.partition_point(|batch| batch.base < to);
        let boundary = keep
            .checked_sub(1)
            .map_or(self.log_start, |last| self.batches[last].end());
        assert_eq!(boundary, to, "truncation to {to} not at a batch boundary");
        self.batches.truncate(keep);
        self.durable_end = self.durable_end.min(to);
        if let Some(fsync) = &mut self.fsync {
            fsync.covers = fsync.covers.min(to);
        }
    }

    /// Discards the log and restarts it empty at `log_start`, durably.
    pub fn reset(&mut self, log_start: Offset) {
        self.batches.clear();
        self.log_start = log_start;
        self.durable_end = log_start;
        self.fsync = None;
    }

    /// Deletes batches below `log_start` (a batch boundary), durably.
    pub fn delete_before(&mut self, log_start: Offset) {
        let drop = self.batches.partition_point(|batch| batch.base < log_start);
        self.batches.drain(..drop);
        self.log_start = log_start;
    }

    /// Writes the metadata durably.
    pub fn persist(&mut self, meta: &ReplicaMeta) {
        self.meta = Some(meta.encode());
        self.persisted_fence = meta.fenced_epoch;
    }

    /// The persisted metadata bytes.
    #[must_use]
    pub fn meta_bytes(&self) -> Option<&[u8]> {
        self.meta.as_deref()
    }

    /// A crash: the unsynced tail and the fsync in flight are lost.
    pub fn crash(&mut self) {
        let durable_end = self.durable_end;
        self.batches.retain(|batch| batch.last < durable_end);
        self.fsync = None;
    }
}
