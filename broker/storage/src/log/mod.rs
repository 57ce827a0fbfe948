//! The log of one partition replica: group-commit appends, reads, rolls and
//! retention over a run of segments.
//!
//! Lives on one shard (`!Send`); methods take `&self` so that many requests
//! can be in flight at once, and state is borrowed only between awaits.
//!
//! Durability: [`PartitionLog::append`] resolves only after an fdatasync
//! covering the batch returned. Appends arriving while a flush is in flight
//! wait for the next one, which takes all of them (group commit): whichever
//! waiting append finds no flush running performs the next. After a failed
//! write or sync the log is fenced: nothing more is acknowledged, and it
//! must be reopened, which recovers from what the disk really holds.
//!
//! In journal mode (the shard has a [`super::journal`]), durable means
//! durable in the journal: the flush a waiting append performs is a
//! journal commit shared with the shard's other logs, and the segment is
//! filled later, in large runs, by [`PartitionLog::flush_segment`]. Reads
//! of batches not yet in the segment are served from memory.
//!
//! Offsets: `log_start <= durable_end <= next_offset`, asserted on change.
//! Reads see only offsets below `durable_end` (and below the caller's bound,
//! such as a replicated high watermark).

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use corelog_wire::batch::{self, BatchHeader};
use corelog_wire::types::{Offset, PartitionId, TimestampMs};
use event_listener::Event;

mod prune;
mod replay;

pub use replay::{JournalReplay, recover_shard_journal, replay_shard_journal};

use super::appender::{Appender, FlushPlan, PendingBatch};
use super::checkpoint::Checkpoint;
use super::deletion_ledger::{DeletedRange, DeletionLedger};
use super::disk::{Disk, DiskFile};
use super::index::SegmentSummary;
use super::journal::{Journal, JournalEntry, Ticket};
use super::recovery;
use super::segment::Segment;
use super::{LogConfig, ShardStorage, StorageError};

/// A batch whose structure and CRC were checked: the only thing the log
/// appends. Obtained from [`ValidBatch::check`], so that a caller that
/// validated a batch (the broker, on produce) hands it over without a
/// second pass over its bytes.
#[derive(Debug)]
pub struct ValidBatch {
    bytes: BytesMut,
    header: BatchHeader,
}

impl ValidBatch {
    /// Checks that `bytes` is exactly one batch within `limits` with a
    /// correct CRC.
    ///
    /// # Errors
    /// [`StorageError::InvalidBatch`] describing the first problem.
    pub fn check(bytes: BytesMut, limits: &batch::BatchLimits) -> Result<ValidBatch, StorageError> {
        let header = batch::validate(&bytes, limits)?;
        Ok(ValidBatch { bytes, header })
    }

    /// The batch's header.
    #[must_use]
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Stamps the leader epoch; the CRC does not cover it.
    pub fn set_leader_epoch(&mut self, epoch: corelog_wire::types::LeaderEpoch) {
        batch::set_leader_epoch(&mut self.bytes, epoch);
        self.header.partition_leader_epoch = i32::try_from(epoch.0).unwrap_or(i32::MAX);
    }
}

/// A batch a leader already placed and stamped, whose structure was
/// checked and whose CRC was checked once on its way here: what a
/// follower's log appends ([`PartitionLog::start_append_replicated`]),
/// kept in the bytes it arrived in (no copy).
#[derive(Debug)]
pub struct PlacedBatch {
    bytes: Bytes,
    header: BatchHeader,
}

impl PlacedBatch {
    /// Checks that `bytes` is exactly one batch within `limits` with a
    /// correct CRC.
    ///
    /// # Errors
    /// [`StorageError::InvalidBatch`] describing the first problem.
    pub fn check(bytes: Bytes, limits: &batch::BatchLimits) -> Result<PlacedBatch, StorageError> {
        let header = batch::validate(&bytes, limits)?;
        Ok(PlacedBatch { bytes, header })
    }

    /// Checks that `bytes` is exactly one batch within `limits`, without
    /// recomputing its CRC: for a pushed batch, which was validated whole
    /// (CRC included) when the push was received, before the state machine
    /// took it (`corelog_replication::Push::from_wire`).
    ///
    /// # Errors
    /// [`StorageError::InvalidBatch`] describing the first problem.
    pub fn of_checked_push(
        bytes: Bytes,
        limits: &batch::BatchLimits,
    ) -> Result<PlacedBatch, StorageError> {
        let mut found = batch::batches_trusted(&bytes, limits);
        let header = match found.next() {
            Some(Ok(at)) if at.bytes.len() == bytes.len() => at.header,
            Some(Ok(at)) => {
                return Err(StorageError::InvalidBatch(
                    batch::BatchError::TrailingBytes {
                        extra: bytes.len() - at.bytes.len(),
                    },
                ));
            }
            Some(Err(error)) => return Err(StorageError::InvalidBatch(error)),
            None => {
                return Err(StorageError::InvalidBatch(batch::BatchError::Truncated {
                    needed: 1,
                    available: 0,
                }));
            }
        };
        Ok(PlacedBatch { bytes, header })
    }

    /// The batch's header.
    #[must_use]
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Where an appended batch landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Offset of its first record.
    pub base_offset: Offset,
    /// Offset of its last record.
    pub last_offset: Offset,
    /// When the log accepted it.
    pub log_append_time: TimestampMs,
}

/// Batches returned by a read.
#[derive(Clone, Debug, Default)]
pub struct ReadOutcome {
    /// Whole batches in offset order; the first may start before the
    /// requested offset (it contains it).
    pub chunks: Vec<Bytes>,
    /// Where the next read should start.
    pub next_offset: Offset,
    /// First offset the log holds.
    pub log_start: Offset,
    /// Offset after the last record readers may see: the durable end, or
    /// a replicated partition's high watermark.
    pub readable_end: Offset,
}

impl ReadOutcome {
    /// Bytes returned.
    #[must_use]
    pub fn byte_len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

struct LogState<D: Disk> {
    /// Every segment, the active one last.
    segments: BTreeMap<Offset, Rc<Segment<D>>>,
    log_start: Offset,
    /// Every offset below is written and synced.
    durable_end: Offset,
    /// Next offset to assign.
    next_offset: Offset,
    appender: Appender,
    /// Whether some append is performing a flush now.
    flushing: bool,
    /// The batches of the flush under way, put back if it is cancelled.
    in_flight: Option<FlushPlan>,
    fenced: Option<String>,
    /// The fence came from a full disk (see [`StorageError::is_no_space`]).
    fenced_no_space: bool,
    closed: bool,
    /// A truncation or reset is rewriting the log: appends wait it out.
    rewriting: bool,
    ledger: DeletionLedger,
    stats: LogStats,
    /// Journal mode: batches below this were handed to the journal (or
    /// went around it, straight to the segment).
    journaled_end: Offset,
    /// Journal mode: while a run of batches too large for the journal goes
    /// straight to the segment, the offset it ends at.
    bypass_end: Option<Offset>,
    /// Journal mode: submissions not yet known durable, with the offset
    /// each makes durable, oldest first.
    tickets: VecDeque<(Ticket, Offset)>,
    /// Bumped (and checkpointed) by every truncation: see [`super::journal`].
    journal_generation: u64,
}

/// Counters of the log's disk work since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Group-commit flushes (one write and one fdatasync each).
    pub flushes: u64,
    /// Batches those flushes made durable.
    pub batches_flushed: u64,
    /// Bytes of batches those flushes made durable.
    pub bytes_flushed: u64,
    /// Segments rolled.
    pub rolls: u64,
    /// Journal mode: flushes of runs that went around the journal.
    pub bypassed_flushes: u64,
}

/// Journal mode: bytes of the pending batches not yet handed to the journal.
fn unjournaled_bytes<D: Disk>(state: &LogState<D>) -> usize {
    state
        .appender
        .pending_from(state.journaled_end)
        .map(|pending| pending.bytes.len())
        .sum()
}

impl<D: Disk> LogState<D> {
    /// Offset after the last batch written and synced into the segments.
    fn segment_end(&self) -> Offset {
        self.active().next_offset()
    }

    fn active(&self) -> &Rc<Segment<D>> {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn check_offsets(&self) {
        assert!(
            self.log_start <= self.durable_end && self.durable_end <= self.next_offset,
            "offset order broken: start {} durable {} next {}",
            self.log_start,
            self.durable_end,
            self.next_offset
        );
    }

    fn writable(&self) -> Result<(), StorageError> {
        if let Some(reason) = &self.fenced {
            return Err(StorageError::Fenced {
                reason: reason.clone(),
                no_space: self.fenced_no_space,
            });
        }
        if self.closed {
            return Err(StorageError::Fenced {
                reason: "log is closed".to_owned(),
                no_space: false,
            });
        }
        if self.rewriting {
            return Err(StorageError::Busy(
                "the log is being truncated to match its leader; retry".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The log of one partition replica.
pub struct PartitionLog<D: Disk> {
    disk: D,
    dir: PathBuf,
    config: LogConfig,
    shard: ShardStorage,
    partition: PartitionId,
    state: RefCell<LogState<D>>,
    /// Signalled whenever `durable_end` moves, a flush ends or the log is
    /// fenced. Readers wait on the replica's high watermark instead.
    durable_changed: Event,
    /// Serialises checkpoint and ledger writes (roll, retention, close).
    /// `futures`' mutex: its hand-over order does not depend on wall-clock
    /// time (see the replica shell's `apply`).
    metadata: futures::lock::Mutex<()>,
    /// The shard journal, in journal mode.
    journal: Option<Rc<dyn Journal>>,
    /// `dir`, shared with journal entries.
    journal_dir: Rc<Path>,
}

impl<D: Disk> std::fmt::Debug for PartitionLog<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .field("log_start", &state.log_start)
            .field("durable_end", &state.durable_end)
            .field("next_offset", &state.next_offset)
            .field("segments", &state.segments.len())
            .field("fenced", &state.fenced)
            .finish_non_exhaustive()
    }
}

/// Resets the flushing flag when a flush ends or its future is dropped, and
/// puts a cancelled flush's batches back so that no offset is skipped.
struct FlushGuard<'a, D: Disk> {
    log: &'a PartitionLog<D>,
}

impl<D: Disk> Drop for FlushGuard<'_, D> {
    fn drop(&mut self) {
        let mut state = self.log.state.borrow_mut();
        if let Some(plan) = state.in_flight.take() {
            state.appender.restore(plan);
        }
        state.flushing = false;
        state.bypass_end = None;
        drop(state);
        self.log.durable_changed.notify(usize::MAX);
    }
}

impl<D: Disk> PartitionLog<D> {
    /// Opens (recovering) or creates the log in `dir`.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`], [`StorageError::Corrupt`] when the
    /// active segment is damaged in a way a crash cannot explain, or
    /// [`StorageError::Io`].
    pub async fn open(
        disk: D,
        dir: &Path,
        config: LogConfig,
        shard: ShardStorage,
        partition: PartitionId,
    ) -> Result<Self, StorageError> {
        config.validate()?;
        let recovered = recovery::recover(&disk, dir, &config, shard.clock.now()).await?;
        let active = recovered
            .segments
            .values()
            .next_back()
            .expect("recovery leaves a segment");
        let durable_end = active.next_offset();
        let alignment = active.alignment();
        let appender = Appender::new(alignment, active.size(), recovered.tail_block);
        shard.cache.truncate_from(partition, Offset(0));
        let state = LogState {
            log_start: recovered.log_start.min(durable_end),
            durable_end,
            next_offset: durable_end,
            segments: recovered.segments,
            appender,
            flushing: false,
            in_flight: None,
            fenced: None,
            fenced_no_space: false,
            closed: false,
            rewriting: false,
            ledger: recovered.ledger,
            stats: LogStats::default(),
            journaled_end: durable_end,
            bypass_end: None,
            tickets: VecDeque::new(),
            journal_generation: recovered.journal_generation,
        };
        state.check_offsets();
        let journal = shard.journal.clone();
        let log = PartitionLog {
            disk,
            dir: dir.to_path_buf(),
            config,
            shard,
            partition,
            state: RefCell::new(state),
            durable_changed: Event::new(),
            metadata: futures::lock::Mutex::new(()),
            journal: None,
            journal_dir: Rc::from(dir),
        };
        // A log reopened while the shard runs (after a full disk) gets back
        // what the journal holds for it beyond its segments.
        if let Some(journal) = &journal {
            log.replay_journal(journal.unreleased(partition)).await?;
        }
        // From here on the log is open: a crash is not a clean shutdown.
        log.store_checkpoint(false).await?;
        Ok(PartitionLog { journal, ..log })
    }

    /// Appends the batches a journal holds for this log past its end
    /// (recovery): `entries` as `(generation, batches)` in journal order.
    /// Entries of a generation older than the newest are from before a
    /// truncation and are skipped. Returns how many batches were appended;
    /// they are durable in the segment when this returns.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] when the journal does not continue the log
    /// (a gap); otherwise as [`PartitionLog::append`].
    pub async fn replay_journal(&self, entries: Vec<(u64, Bytes)>) -> Result<u64, StorageError> {
        assert!(
            self.journal.is_none(),
            "replay appends straight to the segment"
        );
        let stored_generation = self.state.borrow().journal_generation;
        let generation = entries
            .iter()
            .map(|(generation, _)| *generation)
            .max()
            .unwrap_or(0)
            .max(stored_generation);
        let limits = batch::BatchLimits {
            batch_bytes_max: super::FLUSH_BYTES_CAP,
            decompressed_bytes_max: usize::MAX,
        };
        let mut applied = 0;
        for (_, data) in entries
            .iter()
            .filter(|(entry_generation, _)| *entry_generation == generation)
        {
            for found in batch::batches(data, &limits) {
                let found = found.map_err(|error| self.journal_damage(error.to_string()))?;
                let end = self.next_offset();
                if found.header.next_offset() <= end {
                    continue;
                }
                if found.header.base_offset != end {
                    return Err(self.journal_damage(format!(
                        "the journal continues at offset {} but the log ends at {end}",
                        found.header.base_offset
                    )));
                }
                let batch = PlacedBatch {
                    bytes: data.slice_ref(found.bytes),
                    header: found.header,
                };
                self.start_append_replicated(batch)?;
                applied += 1;
            }
        }
        self.wait_durable(self.next_offset()).await?;
        if generation != stored_generation {
            self.state.borrow_mut().journal_generation = generation;
            self.store_checkpoint(false).await?;
        }
        if applied > 0 {
            tracing::info!(dir = %self.dir.display(), batches = applied, end = self.next_offset().0, "replayed the shard journal");
        }
        Ok(applied)
    }

    fn journal_damage(&self, reason: String) -> StorageError {
        StorageError::Corrupt {
            path: self.dir.clone(),
            position: 0,
            reason: format!("shard journal: {reason}"),
        }
    }

    /// Appends one batch: validates it (bounds and CRC), assigns its offsets
    /// in place, and resolves once it is durable.
    ///
    /// # Errors
    /// [`StorageError::InvalidBatch`] for malformed bytes (nothing stored);
    /// [`StorageError::DiskFull`] when the disk reserve would be used;
    /// [`StorageError::Fenced`] if the log failed or closed before the batch
    /// was durable — the batch must then be presumed not stored.
    pub async fn append(&self, batch: BytesMut) -> Result<AppendOutcome, StorageError> {
        let outcome = self.start_append(batch)?;
        self.wait_durable(outcome.last_offset.plus(1)).await?;
        Ok(outcome)
    }

    /// The synchronous half of [`PartitionLog::append`]: validates the batch,
    /// assigns its offsets and queues it for the next flush, without
    /// waiting. The batch is not durable until
    /// [`PartitionLog::wait_durable`] for its next offset returns; callers
    /// that must record where a batch landed before anything else is appended
    /// (idempotent-producer state) use this.
    ///
    /// # Errors
    /// As [`PartitionLog::append`], except that durability is not awaited.
    pub fn start_append(&self, batch: BytesMut) -> Result<AppendOutcome, StorageError> {
        let batch = ValidBatch::check(batch, &self.config.batch_limits)?;
        self.start_append_valid(batch)
    }

    /// [`PartitionLog::start_append`] for a batch the caller has already
    /// validated, so its CRC is not computed twice.
    ///
    /// # Errors
    /// [`StorageError::DiskFull`] or [`StorageError::Fenced`].
    pub fn start_append_valid(&self, batch: ValidBatch) -> Result<AppendOutcome, StorageError> {
        let ValidBatch { mut bytes, header } = batch;
        if bytes.len() > self.config.batch_limits.batch_bytes_max {
            return Err(StorageError::InvalidBatch(batch::BatchError::TooLarge {
                bytes: bytes.len() as u64,
                max: self.config.batch_limits.batch_bytes_max,
            }));
        }
        let mut state = self.state.borrow_mut();
        state.writable()?;
        self.claim_space(bytes.len())?;
        let base_offset = state.next_offset;
        batch::set_base_offset(&mut bytes, base_offset);
        let header = BatchHeader {
            base_offset,
            ..header
        };
        let bytes = bytes.freeze();
        state.next_offset = header.next_offset();
        state.check_offsets();
        self.shard.cache.insert(
            self.partition,
            base_offset,
            header.next_offset(),
            bytes.clone(),
        );
        state.appender.push(PendingBatch { header, bytes });
        Ok(AppendOutcome {
            base_offset,
            last_offset: header.last_offset(),
            log_append_time: self.shard.clock.now(),
        })
    }

    /// Claims room for `len` bytes of batch from the disk reserve: twice
    /// in journal mode, where the batch is written to the journal and then
    /// to its segment (the journal's copy is freed when its file is).
    fn claim_space(&self, len: usize) -> Result<(), StorageError> {
        let copies = if self.shard.journal.is_some() { 2 } else { 1 };
        self.shard
            .space
            .claim(len as u64 * copies)
            .map_err(StorageError::DiskFull)
    }

    /// Appends a batch a leader already placed: its base offset must be
    /// exactly the log's next offset (a follower's append). Nothing is
    /// restamped, so the batch stays byte-identical to the leader's.
    ///
    /// # Errors
    /// [`StorageError::OutOfSequence`] if the batch does not continue the
    /// log; otherwise as [`PartitionLog::start_append`].
    pub fn start_append_replicated(
        &self,
        batch: PlacedBatch,
    ) -> Result<AppendOutcome, StorageError> {
        let PlacedBatch { bytes, header } = batch;
        let mut state = self.state.borrow_mut();
        state.writable()?;
        if header.base_offset != state.next_offset {
            return Err(StorageError::OutOfSequence {
                expected: state.next_offset,
                got: header.base_offset,
            });
        }
        self.claim_space(bytes.len())?;
        state.next_offset = header.next_offset();
        state.check_offsets();
        self.shard.cache.insert(
            self.partition,
            header.base_offset,
            header.next_offset(),
            bytes.clone(),
        );
        state.appender.push(PendingBatch { header, bytes });
        Ok(AppendOutcome {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            log_append_time: self.shard.clock.now(),
        })
    }

    /// Resolves once every offset below `target` is durable, performing
    /// flushes while no other append is.
    ///
    /// # Errors
    /// [`StorageError::Fenced`] if the log failed before `target` became durable.
    pub async fn wait_durable(&self, target: Offset) -> Result<(), StorageError> {
        match &self.journal {
            Some(journal) => self.wait_journaled(journal.as_ref(), target).await,
            // Boxed: every produce waits in this future, and the flush's
            // own state would make each one larger than the journal's
            // path needs (one box per waiting append in this mode, beside
            // the fdatasync it waits for).
            None => Box::pin(self.wait_flushed(target)).await,
        }
    }

    /// [`PartitionLog::wait_durable`] without a journal: flushes rounds of
    /// the segment while no other append does.
    async fn wait_flushed(&self, target: Offset) -> Result<(), StorageError> {
        loop {
            let listener = {
                let mut state = self.state.borrow_mut();
                if state.durable_end >= target {
                    return Ok(());
                }
                if let Some(reason) = &state.fenced {
                    return Err(StorageError::Fenced {
                        reason: reason.clone(),
                        no_space: state.fenced_no_space,
                    });
                }
                if state.closed {
                    return Err(StorageError::Fenced {
                        reason: "log is closed".to_owned(),
                        no_space: false,
                    });
                }
                if state.flushing {
                    Some(self.durable_changed.listen())
                } else {
                    state.flushing = true;
                    None
                }
            };
            match listener {
                Some(listener) => listener.await,
                None => {
                    let guard = FlushGuard { log: self };
                    let result = self.flush_round(Offset(u64::MAX)).await;
                    drop(guard);
                    match result {
                        // Nothing was written: the batches stay pending.
                        Err(error) if error.is_out_of_descriptors() => return Err(error),
                        Err(error) => self.fence(&error),
                        Ok(()) => {}
                    }
                }
            }
        }
    }

    /// [`PartitionLog::wait_durable`] in journal mode: hands what is not yet
    /// in the journal to it and waits for the commit that covers `target`;
    /// or, when that is at least [`Journal::bypass_bytes`], writes it
    /// straight to the segment instead ([`PartitionLog::bypass_journal`]).
    async fn wait_journaled(
        &self,
        journal: &dyn Journal,
        target: Offset,
    ) -> Result<(), StorageError> {
        enum Step {
            Commit(Ticket),
            Wait(event_listener::EventListener),
            Bypass(Offset),
            Fail(StorageError),
        }
        loop {
            let step = {
                let mut state = self.state.borrow_mut();
                self.advance_durable(journal, &mut state);
                let target = target.min(state.next_offset);
                if state.durable_end >= target {
                    return Ok(());
                }
                if let Some(reason) = &state.fenced {
                    return Err(StorageError::Fenced {
                        reason: reason.clone(),
                        no_space: state.fenced_no_space,
                    });
                }
                if state.bypass_end.is_some() {
                    // The run under way covers every batch that waits.
                    Step::Wait(self.durable_changed.listen())
                } else if !state.flushing
                    && state.tickets.is_empty()
                    && unjournaled_bytes(&state) >= journal.bypass_bytes()
                {
                    state.flushing = true;
                    state.bypass_end = Some(state.next_offset);
                    Step::Bypass(state.next_offset)
                } else {
                    match self.submit_to_journal(journal, &mut state, target) {
                        Ok(ticket) => Step::Commit(ticket),
                        Err(error) => Step::Fail(error),
                    }
                }
            };
            match step {
                Step::Fail(error) => {
                    self.fence(&error);
                    return Err(error);
                }
                Step::Wait(listener) => listener.await,
                Step::Bypass(end) => {
                    let guard = FlushGuard { log: self };
                    // Boxed: rare, and its state would otherwise enlarge
                    // every waiting append's future.
                    let result = Box::pin(self.bypass_journal(end)).await;
                    drop(guard);
                    match result {
                        Err(error) if error.is_out_of_descriptors() => return Err(error),
                        // The next pass answers `Fenced`, as every waiter gets.
                        Err(error) => self.fence(&error),
                        Ok(()) => {}
                    }
                }
                Step::Commit(ticket) => match journal.commit(ticket).await {
                    // The journal keeps the entries queued for its next commit.
                    Err(error) if error.is_out_of_descriptors() => return Err(error),
                    Err(error) => {
                        self.fence(&error);
                        return Err(error);
                    }
                    Ok(()) => {}
                },
            }
        }
    }

    /// Hands the journal every batch below `target` it has not got yet, in
    /// entries of at most one flush's bytes (but at least one batch), and
    /// returns the ticket of the submission that covers `target`.
    fn submit_to_journal(
        &self,
        journal: &dyn Journal,
        state: &mut LogState<D>,
        target: Offset,
    ) -> Result<Ticket, StorageError> {
        while state.journaled_end < target {
            let journaled_end = state.journaled_end;
            let mut batches = Vec::new();
            let mut bytes = 0;
            let mut end = journaled_end;
            for pending in state.appender.pending_from(journaled_end) {
                let len = pending.bytes.len();
                if !batches.is_empty() && bytes + len > self.config.flush_bytes_max {
                    break;
                }
                bytes += len;
                end = pending.header.next_offset();
                batches.push(pending.bytes.clone());
            }
            assert!(
                end > journaled_end,
                "batches below the next offset are pending"
            );
            let entry = JournalEntry {
                key: self.partition,
                dir: self.journal_dir.clone(),
                generation: state.journal_generation,
                next_offset: end,
                batches,
            };
            let ticket = journal.submit(entry)?;
            state.tickets.push_back((ticket, end));
            state.journaled_end = end;
        }
        Ok(state
            .tickets
            .iter()
            .find(|(_, end)| *end >= target)
            .map(|(ticket, _)| *ticket)
            .expect("a submission covers every offset below the journaled end"))
    }

    /// Writes and syncs every pending batch below `end` into the segment
    /// (the journal's not yet segmented ones first), so that a large run
    /// is written once. Each flush round makes its batches durable
    /// ([`PartitionLog::flush_round`]); the journal gets nothing of them,
    /// and no submission starts until they are synced, so recovery never
    /// finds a journal entry past a torn segment tail. Stops early if a
    /// round takes nothing: the journal takes the rest.
    async fn bypass_journal(&self, end: Offset) -> Result<(), StorageError> {
        loop {
            let before = self.state.borrow().segment_end();
            if before >= end {
                return Ok(());
            }
            self.flush_round(end).await?;
            if self.state.borrow().segment_end() == before {
                return Ok(());
            }
        }
    }

    /// Moves `durable_end` over every submission the journal committed.
    fn advance_durable(&self, journal: &dyn Journal, state: &mut LogState<D>) {
        let mut moved = false;
        while let Some((ticket, end)) = state.tickets.front().copied() {
            if !journal.is_committed(ticket) {
                break;
            }
            state.tickets.pop_front();
            if end > state.durable_end {
                state.durable_end = end;
                moved = true;
            }
        }
        if moved {
            state.check_offsets();
            self.durable_changed.notify(usize::MAX);
        }
    }

    /// Journal mode: writes and syncs into the segment every batch that was
    /// durable in the journal when called, then releases them there, so the
    /// journal can drop its files. A no-op without a journal.
    ///
    /// # Errors
    /// [`StorageError::Fenced`] or the I/O error that fenced the log.
    pub async fn flush_segment(&self) -> Result<(), StorageError> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        let target = {
            let mut state = self.state.borrow_mut();
            self.advance_durable(journal.as_ref(), &mut state);
            state.durable_end
        };
        loop {
            let listener = {
                let mut state = self.state.borrow_mut();
                if state.segment_end() >= target {
                    return Ok(());
                }
                if let Some(reason) = &state.fenced {
                    return Err(StorageError::Fenced {
                        reason: reason.clone(),
                        no_space: state.fenced_no_space,
                    });
                }
                if state.flushing {
                    Some(self.durable_changed.listen())
                } else {
                    state.flushing = true;
                    None
                }
            };
            match listener {
                Some(listener) => listener.await,
                None => {
                    let guard = FlushGuard { log: self };
                    let result = self.flush_round(target).await;
                    drop(guard);
                    if let Err(error) = result {
                        if !error.is_out_of_descriptors() {
                            self.fence(&error);
                        }
                        return Err(error);
                    }
                }
            }
        }
    }

    /// Bytes durable in the journal but not yet in the segment.
    #[must_use]
    pub fn unsegmented_bytes(&self) -> usize {
        let state = self.state.borrow();
        let durable_end = state.durable_end;
        state
            .appender
            .pending()
            .take_while(|pending| pending.header.next_offset() <= durable_end)
            .map(|pending| pending.bytes.len())
            .sum()
    }

    /// One group commit: roll if due, then write and sync the next run of
    /// pending batches below `limit`. In journal mode the batches are
    /// durable already: this fills the segment and releases them.
    async fn flush_round(&self, limit: Offset) -> Result<(), StorageError> {
        if self.roll_due() {
            self.roll().await?;
        }
        let active = self.state.borrow().active().clone();
        // Opened (or taken from the shard's cache) before any batch is
        // taken: running out of descriptors leaves them pending.
        let file = active.file().await?;
        let (plan, alignment) = {
            let mut state = self.state.borrow_mut();
            assert!(
                Rc::ptr_eq(&active, state.active()),
                "a flush owns the log: nothing rolls or rewrites it meanwhile"
            );
            let size = active.size();
            let room = self.config.segment_bytes.saturating_sub(size);
            let Some(plan) = state
                .appender
                .take(size, room, self.config.flush_bytes_max, limit)
            else {
                return Ok(());
            };
            (plan, active_alignment(&state))
        };
        let mut buffer = file.alloc_buffer(plan.write_len(alignment));
        let new_tail_block = {
            let state = self.state.borrow();
            state.appender.fill(&plan, buffer.as_mut());
            state.appender.tail_block_after(&plan, buffer.as_ref())
        };
        let write_position = plan.write_position;
        self.state.borrow_mut().in_flight = Some(plan);
        let started = Instant::now();
        let path = &active.paths().log;
        file.write_at(buffer, write_position)
            .await
            .map_err(|error| StorageError::io(path, error))?;
        file.sync_data()
            .await
            .map_err(|error| StorageError::io(path, error))?;
        drop(file);

        let mut state = self.state.borrow_mut();
        let plan = state
            .in_flight
            .take()
            .expect("the flush under way owns its plan");
        let mut position = plan.first_batch_position;
        for pending in &plan.batches {
            active.record_durable_batch(position, &pending.header);
            position += pending.bytes.len() as u64;
        }
        state.appender.set_tail_block(new_tail_block);
        state.stats.flushes += 1;
        state.stats.batches_flushed += plan.batches.len() as u64;
        state.stats.bytes_flushed += plan.batch_bytes as u64;
        self.shard
            .observer
            .on_flush(plan.batch_bytes as u64, started.elapsed());
        let segment_end = plan
            .batches
            .last()
            .expect("a plan has batches")
            .header
            .next_offset();
        if let Some(journal) = &self.journal {
            if segment_end > state.durable_end {
                assert!(
                    state
                        .bypass_end
                        .is_some_and(|bypass_end| segment_end <= bypass_end),
                    "only a run around the journal puts batches not durable in it into the segment"
                );
                state.durable_end = segment_end;
                state.journaled_end = state.journaled_end.max(segment_end);
                state.stats.bypassed_flushes += 1;
                state.check_offsets();
            }
            drop(state);
            journal.release(self.partition, segment_end);
        } else {
            assert!(segment_end > state.durable_end, "durable end must grow");
            state.durable_end = segment_end;
            state.check_offsets();
            drop(state);
        }
        self.durable_changed.notify(usize::MAX);
        Ok(())
    }

    fn roll_due(&self) -> bool {
        let state = self.state.borrow();
        let active = state.active();
        let Some(first_pending) = state.appender.first_pending_bytes() else {
            return false;
        };
        let full = active.size() + first_pending as u64 > self.config.segment_bytes;
        let age_ms = self
            .shard
            .clock
            .now()
            .0
            .saturating_sub(active.created_at().0);
        active.size() > 0 && (full || age_ms >= self.config.segment_ms)
    }

    /// Closes the active segment (cut its padding, sync, seal its indexes)
    /// and starts a new one at the durable end.
    async fn roll(&self) -> Result<(), StorageError> {
        let old = self.state.borrow().active().clone();
        let size = old.size();
        let path = &old.paths().log;
        let file = old.file().await?;
        file.truncate(size)
            .await
            .map_err(|error| StorageError::io(path, error))?;
        file.sync_data()
            .await
            .map_err(|error| StorageError::io(path, error))?;
        drop(file);
        old.persist_indexes(&self.disk).await?;
        let base = old.next_offset();
        let segment = Segment::create(
            &self.disk,
            &self.dir,
            base,
            self.config.index_interval_bytes,
            self.shard.clock.now(),
        )
        .await?;
        self.disk
            .sync_dir(&self.dir)
            .await
            .map_err(|error| StorageError::io(&self.dir, error))?;
        {
            let mut state = self.state.borrow_mut();
            assert!(
                base <= state.durable_end && base >= state.log_start,
                "a new segment starts at the segments' end, at most the durable end"
            );
            state.segments.insert(base, Rc::new(segment));
            state.appender.reset_for_new_segment();
            state.stats.rolls += 1;
        }
        self.store_checkpoint(false).await
    }

    /// Fences the log after an I/O failure: nothing pending will be written
    /// and nothing more is acknowledged.
    fn fence(&self, error: &StorageError) {
        let mut state = self.state.borrow_mut();
        if state.fenced.is_none() {
            tracing::error!(dir = %self.dir.display(), %error, "partition log fenced after an I/O failure");
            self.shard.observer.on_fenced(&self.dir, error);
            state.fenced = Some(error.to_string());
            state.fenced_no_space = error.is_no_space();
        }
        if error.is_no_space() {
            // The shard's estimate of free space was wrong (another writer,
            // metadata): measure again, so the shard's other logs refuse
            // with DISK_FULL instead of meeting ENOSPC and fencing too.
            self.shard.space.remeasure();
        }
        // What the journal holds (or is committing) stays: it is durable, or
        // will be, and reads and a reopen serve it from here. Nothing else
        // pending will be written.
        let keep_below = if self.journal.is_some() {
            state.journaled_end
        } else {
            state.durable_end
        };
        let dropped = state.appender.abandon_from(keep_below);
        let durable_end = state.durable_end;
        drop(state);
        if dropped > 0 {
            tracing::warn!(dropped, "pending batches dropped unacknowledged");
        }
        self.shard.cache.truncate_from(self.partition, durable_end);
        self.durable_changed.notify(usize::MAX);
    }

    /// Persists the checkpoint from the current state.
    async fn store_checkpoint(&self, clean_shutdown: bool) -> Result<(), StorageError> {
        let _metadata = self.metadata.lock().await;
        let checkpoint = {
            let state = self.state.borrow();
            Checkpoint {
                log_start_offset: state.log_start,
                recovery_point: state.active().base(),
                clean_shutdown,
                journal_generation: state.journal_generation,
            }
        };
        checkpoint.store(&self.disk, &self.dir).await
    }

    /// Reads whole batches from `from`, at most `max_bytes` (at least one
    /// batch), below `upper` (or the durable end if lower or absent). Tail
    /// reads are served from the shard's cache.
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] below the log start (with what was
    /// deleted and why) or past the log end; [`StorageError::Corrupt`] when a
    /// stored batch fails its checksum; [`StorageError::Io`].
    pub async fn read(
        &self,
        from: Offset,
        max_bytes: usize,
        upper: Option<Offset>,
    ) -> Result<ReadOutcome, StorageError> {
        let (log_start, durable_end) = {
            let state = self.state.borrow();
            (state.log_start, state.durable_end)
        };
        if from < log_start || from > durable_end {
            return Err(self.out_of_range(from));
        }
        let upper = upper.map_or(durable_end, |upper| upper.min(durable_end));
        let mut outcome = ReadOutcome {
            chunks: Vec::new(),
            next_offset: from,
            log_start,
            readable_end: durable_end,
        };
        if from >= upper {
            return Ok(outcome);
        }
        if let Some(hit) = self
            .shard
            .cache
            .read(self.partition, from, upper, max_bytes)
        {
            outcome.chunks = hit.batches;
            outcome.next_offset = hit.next_offset;
            return Ok(outcome);
        }
        if let Some((chunks, next_offset)) = self.read_unsegmented(from, upper, max_bytes, 0) {
            outcome.chunks = chunks;
            outcome.next_offset = next_offset;
            return Ok(outcome);
        }
        let mut position = from;
        loop {
            let segment = {
                let state = self.state.borrow();
                let found = state
                    .segments
                    .range(..=position)
                    .next_back()
                    .map(|(_, segment)| segment.clone());
                match found {
                    Some(segment) => segment,
                    None => return Ok(outcome),
                }
            };
            let read = segment
                .read_batches(position, upper, max_bytes, &self.config.batch_limits)
                .await?;
            if let Some(next_offset) = read.next_offset {
                let taken = read.bytes.len();
                outcome.chunks.push(Bytes::from(read.bytes));
                outcome.next_offset = next_offset;
                // A read that reached the segment end goes on into what the
                // journal holds, as far as `max_bytes` allows: a consumer
                // does not pay a round trip for the segment flusher's lag.
                if let Some((chunks, next_offset)) =
                    self.read_unsegmented(next_offset, upper, max_bytes, taken)
                    && !chunks.is_empty()
                {
                    outcome.chunks.extend(chunks);
                    outcome.next_offset = next_offset;
                }
                return Ok(outcome);
            }
            if let Some(damage) = segment.damage() {
                // The offset lies in or after a damaged part of the segment.
                return Err(damage);
            }
            // Nothing at or after `position` in this segment: the next one.
            let next_base = self
                .state
                .borrow()
                .segments
                .range(position.plus(1)..)
                .next()
                .map(|(base, _)| *base);
            match next_base {
                Some(base) if base < upper => position = base,
                _ => return Ok(outcome),
            }
        }
    }

    /// Journal mode: batches from `from` below `upper` that are durable but
    /// not yet in the segment (or being written there), from memory; `None`
    /// when `from` is in the segments. `taken` bytes of the same read came
    /// before: with none, the first batch goes whatever its size.
    fn read_unsegmented(
        &self,
        from: Offset,
        upper: Offset,
        max_bytes: usize,
        taken: usize,
    ) -> Option<(Vec<Bytes>, Offset)> {
        self.journal.as_ref()?;
        let state = self.state.borrow();
        if from < state.segment_end() {
            return None;
        }
        let in_flight = state.in_flight.iter().flat_map(|plan| plan.batches.iter());
        let mut chunks = Vec::new();
        let mut bytes = taken;
        let mut next_offset = from;
        for pending in in_flight.chain(state.appender.pending()) {
            let header = &pending.header;
            if header.next_offset() <= from {
                continue;
            }
            if header.base_offset >= upper
                || header.next_offset() > upper
                || (bytes > 0 && bytes + pending.bytes.len() > max_bytes)
            {
                break;
            }
            bytes += pending.bytes.len();
            next_offset = header.next_offset();
            chunks.push(pending.bytes.clone());
        }
        Some((chunks, next_offset))
    }

    /// Whole batches from `from` that are appended but possibly not yet
    /// durable, from the tail cache only (where every append lands first);
    /// `None` when they are not cached (evicted) or `from` is outside the
    /// appended log. For a replication leader, whose followers make records
    /// durable in parallel with its own group commit.
    #[must_use]
    pub fn read_unsynced(&self, from: Offset, max_bytes: usize) -> Option<Vec<Bytes>> {
        let (log_start, next_offset) = {
            let state = self.state.borrow();
            (state.log_start, state.next_offset)
        };
        if from < log_start || from >= next_offset {
            return None;
        }
        self.shard
            .cache
            .read(self.partition, from, next_offset, max_bytes)
            .map(|hit| hit.batches)
    }

    fn out_of_range(&self, requested: Offset) -> StorageError {
        let state = self.state.borrow();
        let deleted = if requested < state.log_start {
            state.ledger.overlapping(requested, state.log_start)
        } else {
            Vec::new()
        };
        StorageError::OffsetOutOfRange {
            requested,
            log_start: state.log_start,
            readable_end: state.durable_end,
            deleted,
        }
    }

    /// The first durable record with a timestamp at or after `target`:
    /// its offset and timestamp, or `None` if every record is older. In
    /// journal mode that includes the durable batches the segment flusher
    /// has not written to the segment yet.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] or [`StorageError::Io`] from the reads.
    pub async fn offset_for_timestamp(
        &self,
        target: TimestampMs,
    ) -> Result<Option<(Offset, TimestampMs)>, StorageError> {
        let (segments, upper) = {
            let state = self.state.borrow();
            let segments: Vec<_> = state.segments.values().cloned().collect();
            (segments, state.durable_end)
        };
        let limits = &self.config.batch_limits;
        for segment in segments {
            let Some(found) = segment
                .find_batch_by_timestamp(target, upper, limits)
                .await?
            else {
                continue;
            };
            let path = segment.paths().log.clone();
            if let Some(found) =
                first_record_at_or_after(&Bytes::from(found), target, limits, &path)?
            {
                return Ok(Some(found));
            }
        }
        // Later than every segment: the journaled tail, in offset order.
        let unsegmented = self.unsegmented_batch_with_timestamp(target, upper);
        match unsegmented {
            Some(bytes) => {
                let path = self.state.borrow().active().paths().log.clone();
                first_record_at_or_after(&bytes, target, limits, &path)
            }
            None => Ok(None),
        }
    }

    /// Journal mode: the first durable batch below `upper` that is not in
    /// the segment yet and reaches `target`.
    fn unsegmented_batch_with_timestamp(
        &self,
        target: TimestampMs,
        upper: Offset,
    ) -> Option<Bytes> {
        self.journal.as_ref()?;
        let state = self.state.borrow();
        let in_flight = state.in_flight.iter().flat_map(|plan| plan.batches.iter());
        in_flight
            .chain(state.appender.pending())
            .take_while(|pending| pending.header.next_offset() <= upper)
            .find(|pending| {
                pending.header.next_offset() > state.segment_end()
                    && pending.header.max_timestamp >= target
            })
            .map(|pending| pending.bytes.clone())
    }

    /// Flushes everything pending, seals the active segment's indexes and
    /// records a clean shutdown, so the next open need not scan. Appends
    /// after this fail.
    ///
    /// # Errors
    /// [`StorageError::Fenced`] if pending appends could not be made durable,
    /// or [`StorageError::Io`].
    pub async fn close(&self) -> Result<(), StorageError> {
        let target = self.state.borrow().next_offset;
        self.wait_durable(target).await?;
        self.flush_segment().await?;
        self.state.borrow_mut().closed = true;
        let active = self.state.borrow().active().clone();
        let path = &active.paths().log;
        let file = active.file().await?;
        file.truncate(active.size())
            .await
            .map_err(|error| StorageError::io(path, error))?;
        file.sync_data()
            .await
            .map_err(|error| StorageError::io(path, error))?;
        drop(file);
        active.persist_indexes(&self.disk).await?;
        self.store_checkpoint(true).await
    }

    /// Stops the log for good without making anything more durable: its
    /// topic was deleted and its directory is about to be removed. Waits
    /// out a flush, rewrite or housekeeping step in progress (any may be
    /// creating files in that directory); every later one is refused, so
    /// nothing of this log touches the directory again. Idempotent.
    pub async fn discard(&self) {
        self.state.borrow_mut().closed = true;
        // Retention and checkpoints work under the metadata lock.
        drop(self.metadata.lock().await);
        loop {
            let listener = {
                let state = self.state.borrow();
                if !state.flushing && !state.rewriting {
                    return;
                }
                self.durable_changed.listen()
            };
            listener.await;
        }
    }

    /// First offset the log holds.
    #[must_use]
    pub fn log_start(&self) -> Offset {
        self.state.borrow().log_start
    }

    /// Offset after the last durable record (the replication state
    /// machine's `log_end` is the appended end: the other name keeps them
    /// apart).
    #[must_use]
    pub fn durable_end(&self) -> Offset {
        self.state.borrow().durable_end
    }

    /// Next offset an append will get.
    #[must_use]
    pub fn next_offset(&self) -> Offset {
        self.state.borrow().next_offset
    }

    /// Segments, active included.
    #[must_use]
    pub fn segment_count(&self) -> usize {
        self.state.borrow().segments.len()
    }

    /// Bytes the log holds: its segments, and the batches not in one yet
    /// (held in the shard journal, or waiting for their flush).
    #[must_use]
    pub fn size_bytes(&self) -> u64 {
        let state = self.state.borrow();
        // In journal mode the newest batches wait in the journal before
        // they fill a segment; leaving them out made a fresh partition's
        // size, and every lag in bytes derived from it, 0.
        let segments: u64 = state.segments.values().map(|segment| segment.size()).sum();
        segments + state.appender.pending_bytes() as u64
    }

    /// Summaries of every segment, oldest first.
    #[must_use]
    pub fn segments(&self) -> Vec<SegmentSummary> {
        self.state
            .borrow()
            .segments
            .values()
            .map(|segment| segment.summary())
            .collect()
    }

    /// Every deletion the ledger remembers, oldest first.
    #[must_use]
    pub fn deletions(&self) -> Vec<DeletedRange> {
        self.state.borrow().ledger.entries().copied().collect()
    }

    /// Whether the log is fenced by a full disk: it takes appends again
    /// only once reopened, which the shard does when space is back.
    #[must_use]
    pub fn fenced_no_space(&self) -> bool {
        let state = self.state.borrow();
        state.fenced.is_some() && state.fenced_no_space
    }

    /// Why the log is fenced, if it is.
    #[must_use]
    pub fn fenced(&self) -> Option<String> {
        self.state.borrow().fenced.clone()
    }

    /// Bytes appended but not yet durable.
    #[must_use]
    pub fn pending_bytes(&self) -> usize {
        self.state.borrow().appender.pending_bytes()
    }

    /// Counters of disk work since open.
    #[must_use]
    pub fn stats(&self) -> LogStats {
        self.state.borrow().stats
    }

    /// A handle on the segment holding `offset`, as a reader holds one.
    #[must_use]
    pub fn segment_holding(&self, offset: Offset) -> Option<Rc<Segment<D>>> {
        let state = self.state.borrow();
        state
            .segments
            .range(..=offset)
            .next_back()
            .map(|(_, segment)| segment.clone())
    }

    /// The partition directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn active_alignment<D: Disk>(state: &LogState<D>) -> u64 {
    state.active().alignment()
}

/// The first record of a batch whose timestamp reaches `target`, checking
/// the batch's CRC on the way.
///
/// # Errors
/// [`StorageError::Corrupt`], naming `path`, for a batch that fails.
fn first_record_at_or_after(
    batch_bytes: &Bytes,
    target: TimestampMs,
    limits: &batch::BatchLimits,
    path: &Path,
) -> Result<Option<(Offset, TimestampMs)>, StorageError> {
    let records =
        batch::decode_records(batch_bytes, limits).map_err(|error| StorageError::Corrupt {
            path: path.to_path_buf(),
            position: 0,
            reason: error.to_string(),
        })?;
    Ok(records
        .iter()
        .find(|record| record.timestamp >= target)
        .map(|record| (record.offset, record.timestamp)))
}
