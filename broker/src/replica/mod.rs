//! One replica of a replicated partition: the I/O shell around the pure
//! replication state machine ([`corelog_replication::Replica`]).
//!
//! [`ReplicatedPartition`] owns a [`Partition`] (the log, the produce checks
//! and the idempotent-producer table), the state machine, and the durable
//! replica metadata file ([`meta_file`]). It lives on one shard (`!Send`);
//! its leader side sends pushes through a [`PushTransport`], and its follower
//! side answers [`Push`]es and [`Query`]s handed to it by the caller. Its
//! tasks, timeouts and clock come from an [`Executor`]: the shard's glommio
//! one in the broker, the simulator's deterministic one in `sim/`, which
//! runs this very code against a simulated disk, network and clock.
//!
//! Every partition of a broker is one of these, a single node's too: a
//! replica set of one commits what its own log made durable.
//!
//! - `leader.rs`: taking an epoch (the marker), produce and its
//!   acknowledgement conditions, the push pump, acknowledgements.
//! - `follower.rs`: following, pushes, election queries.
//! - `batches.rs`: stored bytes as replication batches, the epoch-start
//!   marker.
//! - `leadership.rs`: which role change published metadata asks for.
//! - [`stream`]: the pushes of all of a shard's partitions, to each
//!   follower broker in shared frames, and the follower's side of a frame.
//! - [`peer_transport`]: frames over the inter-broker RPC.
//!
//! The wire forms of pushes, queries and their answers, and the checks of
//! what a peer sends, are `corelog_replication::wire`'s and the state
//! machine's: a shard hands a received push or query to its replica once
//! ([`ReplicatedPartition::serve_push`], [`ReplicatedPartition::serve_query`])
//! and gets the answer to send back.
//!
//! # Ordering rules
//!
//! - **Durable before acting on.** The state machine's actions are carried
//!   out in order, and `Persist`, `Truncate` and `Reset` are durable (the
//!   metadata file written atomically, the log cut and synced) before the
//!   next action runs — in particular before a query answer or a push
//!   acknowledgement leaves this replica.
//! - **Acknowledge only what is durable.** A follower answers a push that
//!   appended batches only after an fsync covers them, with the ack
//!   [`Replica::on_local_durable`] produces; the leader counts its own
//!   durable end the same way.
//! - **One state-machine call at a time, with its I/O.** Every call that can
//!   emit a durable action (`become_*`, pushes, queries, durability reports,
//!   retention) holds the `apply` lock from the call until its actions are
//!   carried out, so the log and the state machine never disagree where
//!   another call can see it, and metadata writes never overtake each
//!   other. Waiting for an fsync happens outside the lock (pipelined pushes
//!   share group commits).
//! - **No cut under a waiter.** A truncation or reset first waits until no
//!   task is waiting for the log to become durable up to some offset, since
//!   a cut below that offset would leave the waiter with a target the log no
//!   longer reaches.
//! - **Committed means below the high watermark.** A produce with
//!   [`Acks::Quorum`] resolves once this replica, still leading the epoch
//!   that appended the batch, has its high watermark past the batch. If the
//!   replica stops leading first, the produce fails `NOT_LEADER` unless the
//!   high watermark had already passed it. Reads ([`ReplicatedPartition::read`])
//!   never return records at or above the high watermark.
//! - **Pushes may carry records the leader has not synced yet.** The pump
//!   runs after each local group commit and pushes everything appended so
//!   far, from the tail cache, so followers sync the next commit's records
//!   in parallel with the leader; the high watermark counts the leader only
//!   up to its durable end. A leader that crashes and loses that tail never
//!   leads the same epoch again (`led_epoch`), so the followers' copies are
//!   never contradicted within an epoch.
//!
//! # Failures
//!
//! A failure after the state machine already counted the effect (a
//! metadata write, an append, a truncation) leaves disk and state machine
//! apart; the replica is then fenced ([`ReplicaError::Broken`]) and must be
//! reopened, which recovers from what the disk really holds.

mod batches;
mod error;
mod follower;
mod leader;
mod leadership;
pub mod meta_file;
pub mod peer_transport;
pub mod stream;
mod throttle;
mod transport;

#[cfg(test)]
mod tests;

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use corelog_replication::{
    Action, PushAck, QueryAnswer, RecoveredLog, Replica, ReplicaConfig, ReplicaId, ReplicaMeta,
    RoleView,
};
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::describe_topics::EPOCH_STARTS_MAX;
use corelog_wire::message::partition_report::{LedPartition, LedPartitionV1};
use corelog_wire::types::{LeaderEpoch, Offset};
use event_listener::Event;

use crate::executor::Executor;
use crate::partition::{Partition, PartitionSpec, PartitionSummary, ReplicaSummary};
use corelog_storage::clock::Clock;
use corelog_storage::disk::Disk;
use corelog_storage::{
    DeletedRange, PartitionLog, ReadOutcome, ShardStorage, StorageError, StorageObserver,
};

pub use corelog_replication::{Push, Query};
pub use corelog_wire::message::produce::Acks;
pub use error::ReplicaError;
pub use follower::push_answer;
pub use leadership::{RoleChange, resignation, role_change};
pub use transport::{PushTransport, TransportError};

/// Where and how to open a replica.
#[derive(Debug)]
pub struct ReplicaSpec<'a> {
    /// This replica (its broker's node id).
    pub id: ReplicaId,
    /// Replication tunables.
    pub config: ReplicaConfig,
    /// The partition's directory and settings.
    pub partition: PartitionSpec<'a>,
    /// Notified whenever the high watermark moves (and when the replica
    /// fences or steps down): readers long-poll on it. Only the high
    /// watermark wakes them, not the local durable end, which on a leader
    /// moves before the high watermark does.
    pub high_watermark_signal: Arc<Event>,
}

/// How the last leadership of this replica ended: the epoch, and the high
/// watermark just before it ended (what that leader committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EndedTerm {
    epoch: LeaderEpoch,
    high_watermark: Offset,
}

/// The push pump's state: at most one task polls the state machine for
/// pushes at a time, so that a push's batches are read and reported sent
/// before the next poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pump {
    Idle,
    Running,
    /// Running, and woken again since its last poll.
    Again,
}

/// What carrying out one call's actions produced for the caller.
#[derive(Debug, Default)]
struct Carried {
    /// The end of what `AppendMarker` or `Append` appended (not yet durable).
    appended_end: Option<Offset>,
    /// A push acknowledgement to answer with.
    ack: Option<PushAck>,
    /// A query answer to answer with.
    answer: Option<QueryAnswer>,
}

/// One replica of one replicated partition, owned by one shard.
///
/// Durability: see the module docs. Every method that changes state is
/// fenced after a failure that could leave disk and state machine apart.
pub struct ReplicatedPartition<D: Disk> {
    id: ReplicaId,
    partition: Partition<D>,
    disk: D,
    dir: PathBuf,
    clock: Rc<dyn Clock>,
    limits: BatchLimits,
    replica: RefCell<Replica>,
    transport: Rc<dyn PushTransport>,
    /// Spawns the push pump and the pushes, times produces out, and
    /// gives the state machine its time.
    executor: Rc<dyn Executor>,
    /// The executor's time at open: the state machine counts milliseconds
    /// from it.
    origin: std::time::Instant,
    /// Told when the replica's metadata cannot be written.
    observer: Rc<dyn StorageObserver>,
    /// Held by each state-machine call that may emit durable actions, until
    /// they are carried out. `futures`' mutex, not `async_lock`'s: that one
    /// changes its hand-over order after 0.5 ms of wall-clock waiting, so
    /// the simulator's replays would depend on real time.
    apply: futures::lock::Mutex<()>,
    /// Tasks waiting for the log to become durable up to some offset.
    durability_waits: Cell<usize>,
    /// Notified when `durability_waits` drops to zero.
    durability_waits_done: Event,
    /// Notified when the high watermark moves, leadership ends, or the
    /// replica is fenced.
    high_watermark_changed: Arc<Event>,
    ended_term: Cell<Option<EndedTerm>>,
    /// The high watermark readers see: the state machine's, once the
    /// actions before it are carried out. A push can truncate a divergent
    /// tail and raise the high watermark past it in one step; until the
    /// truncation is on disk, a read below the state machine's high
    /// watermark would serve the old, uncommitted tail (sim seed 541).
    high_watermark: Cell<Offset>,
    pump: Cell<Pump>,
    /// The byte rate each throttled learner is copied at, at most.
    learner_rates: RefCell<std::collections::BTreeMap<ReplicaId, throttle::ByteRate>>,
    /// The learners (and their throttle) metadata named last, whether
    /// leading or not (see `set_learners`).
    wanted_learners: RefCell<(Vec<ReplicaId>, u64)>,
    broken: RefCell<Option<String>>,
    /// The fence came from a full disk: the shard reopens the replica once
    /// space is back.
    broken_no_space: Cell<bool>,
    /// The fence came from running out of file descriptors (its metadata
    /// or a rewrite could not open a file): the shard reopens the replica
    /// at its next maintenance round.
    broken_out_of_descriptors: Cell<bool>,
}

impl<D: Disk> std::fmt::Debug for ReplicatedPartition<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicatedPartition")
            .field("id", &self.id)
            .field("replica", &self.replica)
            .field("partition", &self.partition)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl<D: Disk> ReplicatedPartition<D> {
    /// Opens (recovering) or creates the replica: the partition and its
    /// log, then the metadata file (missing: a new replica), then the state
    /// machine from both ([`Replica::recover`], whose `Persist` is carried
    /// out before this returns). The replica starts with no role.
    ///
    /// # Errors
    /// [`ReplicaError::Partition`] from opening the log,
    /// [`ReplicaError::Meta`] for a damaged metadata file,
    /// [`ReplicaError::Refused`] when the metadata and the log do not fit
    /// together.
    pub async fn open(
        disk: D,
        spec: ReplicaSpec<'_>,
        shard: ShardStorage,
        transport: Rc<dyn PushTransport>,
        executor: Rc<dyn Executor>,
    ) -> Result<Rc<Self>, ReplicaError> {
        let dir = spec.partition.dir.to_path_buf();
        let partition_id = spec.partition.id;
        let clock = shard.clock.clone();
        let high_watermark_changed = spec.high_watermark_signal;
        let observer = shard.observer.clone();
        let partition = Partition::open(disk.clone(), spec.partition, shard).await?;
        let meta = meta_file::load(&disk, &dir).await?.unwrap_or_default();
        let limits = partition.batch_limits();
        let log = partition.log();
        let recovered = RecoveredLog {
            log_start: log.log_start(),
            log_end: log.durable_end(),
            last_epoch: last_epoch(log, &limits).await?,
        };
        let (replica, actions) =
            Replica::recover(spec.id, partition_id, spec.config, meta, recovered)?;
        let high_watermark = replica.high_watermark();
        let this = Rc::new(ReplicatedPartition {
            id: spec.id,
            partition,
            disk,
            dir,
            clock,
            limits,
            replica: RefCell::new(replica),
            transport,
            origin: executor.now(),
            executor,
            observer,
            apply: futures::lock::Mutex::new(()),
            durability_waits: Cell::new(0),
            durability_waits_done: Event::new(),
            high_watermark_changed,
            ended_term: Cell::new(None),
            high_watermark: Cell::new(high_watermark),
            pump: Cell::new(Pump::Idle),
            learner_rates: RefCell::default(),
            wanted_learners: RefCell::default(),
            broken: RefCell::new(None),
            broken_no_space: Cell::new(false),
            broken_out_of_descriptors: Cell::new(false),
        });
        this.carry_out(actions, high_watermark).await?;
        Ok(this)
    }

    /// This replica.
    #[must_use]
    pub fn id(&self) -> ReplicaId {
        self.id
    }

    /// The current role.
    #[must_use]
    pub fn role(&self) -> RoleView {
        self.replica.borrow().role()
    }

    /// Records below this offset are committed: readable, and (on the
    /// leader) acknowledged to producers.
    #[must_use]
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark.get()
    }

    /// Whether this replica leads and has committed its epoch
    /// ([`corelog_replication::Replica::epoch_committed`]).
    #[must_use]
    pub fn epoch_committed(&self) -> bool {
        self.replica.borrow().epoch_committed()
    }

    /// Timer resends to followers so far
    /// ([`corelog_replication::Replica::resends`]).
    #[must_use]
    pub fn resends(&self) -> u64 {
        self.replica.borrow().resends()
    }

    /// Notified whenever the high watermark moves (and when leadership ends
    /// or the replica is fenced). Listen before checking
    /// [`high_watermark`](Self::high_watermark) to long-poll without a race.
    #[must_use]
    pub fn high_watermark_signal(&self) -> Arc<Event> {
        self.high_watermark_changed.clone()
    }

    /// First offset the log holds.
    #[must_use]
    pub fn log_start(&self) -> Offset {
        self.partition.log().log_start()
    }

    /// Offset after the last durable record (committed or not).
    #[must_use]
    pub fn durable_end(&self) -> Offset {
        self.partition.log().durable_end()
    }

    /// Offset after the last appended record, durable or not.
    #[must_use]
    pub fn appended_end(&self) -> Offset {
        self.partition.log().next_offset()
    }

    /// The durable metadata as last persisted (or about to be).
    #[must_use]
    pub fn meta(&self) -> ReplicaMeta {
        self.replica.borrow().meta().clone()
    }

    /// The partition underneath (log, producer state).
    #[must_use]
    pub fn partition(&self) -> &Partition<D> {
        &self.partition
    }

    /// Why the replica is fenced, if it is.
    #[must_use]
    pub fn broken(&self) -> Option<String> {
        self.broken.borrow().clone()
    }

    /// Whether the replica (or its log) is fenced by a full disk, and so
    /// waits to be reopened — recovered from what its disk holds, then
    /// following again — once space is back.
    #[must_use]
    pub fn fenced_no_space(&self) -> bool {
        (self.broken.borrow().is_some() && self.broken_no_space.get())
            || self.partition.log().fenced_no_space()
    }

    /// Whether the replica is fenced for want of file descriptors, and so
    /// waits to be reopened.
    #[must_use]
    pub fn fenced_out_of_descriptors(&self) -> bool {
        self.broken.borrow().is_some() && self.broken_out_of_descriptors.get()
    }

    /// Leading: offsets not yet durable on a follower, summed over the
    /// followers. `None` when not leading.
    #[must_use]
    pub fn follower_lag(&self) -> Option<u64> {
        self.replica.borrow().follower_lag()
    }

    /// Leading: each follower's lag and whether it is in sync. `None` when
    /// not leading.
    #[must_use]
    pub fn follower_status(&self) -> Option<Vec<corelog_replication::FollowerStatus>> {
        self.replica.borrow().follower_status(self.now_ms())
    }

    /// What this replica, leading, tells the controller of its partition
    /// (`PartitionReport`): the replicas in sync, this one (`me`) first,
    /// and whether its epoch committed. A voter is in sync within the lag;
    /// a learner only once it holds the whole committed log, as a new one
    /// is presumed in sync for the lag, which would let a move add it
    /// empty. `None` when not leading.
    #[must_use]
    pub fn led_report(&self, me: u32) -> Option<LedPartitionV1> {
        let replica = self.replica.borrow();
        let RoleView::Leader { epoch, .. } = replica.role() else {
            return None;
        };
        let committed = replica.high_watermark();
        let followers = replica.follower_status(self.now_ms())?;
        let in_sync = std::iter::once(me)
            .chain(
                followers
                    .iter()
                    .filter(|follower| {
                        if follower.voter {
                            follower.in_sync
                        } else {
                            follower.acked_end >= committed
                        }
                    })
                    .map(|follower| follower.replica.0),
            )
            .collect();
        let id = replica.partition();
        Some(LedPartitionV1 {
            led: LedPartition {
                topic_id: id.topic_id,
                partition: id.partition,
                leader_epoch: epoch.0,
                in_sync,
            },
            epoch_committed: replica.epoch_committed(),
        })
    }

    /// Offsets and size, with the high watermark as the committed end.
    #[must_use]
    pub fn summary(&self) -> PartitionSummary {
        PartitionSummary {
            high_watermark: self.high_watermark(),
            ..self.partition.summary()
        }
    }

    /// [`summary`](Self::summary) with the starts of the committed epoch
    /// runs (where the epoch-start markers are).
    #[must_use]
    pub fn replica_summary(&self) -> ReplicaSummary {
        let log = self.summary();
        let replica = self.replica.borrow();
        let mut epoch_starts: Vec<Offset> = replica
            .meta()
            .history
            .entries()
            .iter()
            .map(|entry| entry.start_offset)
            .filter(|start| (log.log_start..log.high_watermark).contains(start))
            .collect();
        // Two epochs share a start when the earlier one's leader wrote
        // nothing that survived: one run, one marker at most.
        epoch_starts.dedup();
        let newest = epoch_starts.len().saturating_sub(EPOCH_STARTS_MAX);
        epoch_starts.drain(..newest);
        ReplicaSummary { log, epoch_starts }
    }

    /// Reads committed batches from `from`, at most `max_bytes` (at least
    /// one batch), never at or above the high watermark. The outcome's
    /// `readable_end` is the high watermark.
    ///
    /// # Errors
    /// [`ReplicaError::LeaderNotReady`] on a leader that has not committed
    /// its epoch's marker yet; `OFFSET_OUT_OF_RANGE` below the log start or
    /// above the high watermark, [`ReplicaError::NotLeader`] instead above
    /// it on a replica that does not lead (it cannot tell where the log
    /// ends); storage errors as [`Partition::read`].
    pub async fn read(&self, from: Offset, max_bytes: usize) -> Result<ReadOutcome, ReplicaError> {
        self.check_serves_reads()?;
        let high_watermark = self.high_watermark();
        let log = self.partition.log();
        if from > high_watermark {
            self.check_knows_the_end()?;
            return Err(StorageError::OffsetOutOfRange {
                requested: from,
                log_start: log.log_start(),
                readable_end: high_watermark,
                deleted: Vec::new(),
            }
            .into());
        }
        let mut outcome = log
            .read(from, max_bytes, Some(high_watermark))
            .await
            .map_err(|error| match error {
                // The log knows its durable end; readers see only up to
                // the high watermark, and are told that.
                StorageError::OffsetOutOfRange {
                    requested,
                    log_start,
                    deleted,
                    ..
                } => StorageError::OffsetOutOfRange {
                    requested,
                    log_start,
                    readable_end: high_watermark,
                    deleted,
                },
                other => other,
            })?;
        outcome.readable_end = high_watermark;
        Ok(outcome)
    }

    /// Looks an offset up among committed records: `Latest` is the high
    /// watermark, and a time that only uncommitted records reach finds
    /// nothing.
    ///
    /// # Errors
    /// As [`read`](Self::read) for a new leader; as
    /// [`Partition::list_offset`].
    pub async fn list_offset(
        &self,
        query: crate::partition::OffsetQuery,
    ) -> Result<Option<(Offset, corelog_wire::types::TimestampMs)>, ReplicaError> {
        use crate::partition::OffsetQuery;
        self.check_serves_reads()?;
        let high_watermark = self.high_watermark();
        match query {
            OffsetQuery::Latest => {
                self.check_knows_the_end()?;
                Ok(Some((high_watermark, corelog_wire::types::TimestampMs(-1))))
            }
            OffsetQuery::Earliest | OffsetQuery::Timestamp(_) => Ok(self
                .partition
                .list_offset(query)
                .await?
                .filter(|(offset, _)| *offset <= high_watermark)),
        }
    }

    /// Only the leader knows where the committed log ends: a follower's
    /// high watermark is what it last heard, and a replica that has just
    /// restarted has none (it starts at the log start). Told "the log ends
    /// at 0" in the moment before it takes a leadership the metadata
    /// already names it for, a reader would fail or start over from the
    /// beginning; told `NOT_LEADER`, it looks the leader up again.
    fn check_knows_the_end(&self) -> Result<(), ReplicaError> {
        match self.role() {
            RoleView::Leader { .. } => Ok(()),
            role => Err(ReplicaError::NotLeader { role }),
        }
    }

    /// A leader serves reads once its high watermark has reached its
    /// epoch's marker: before, a restarted or newly elected leader's
    /// committed end can be below what readers already saw, and a consumer
    /// at the tail would be told its position is out of range.
    fn check_serves_reads(&self) -> Result<(), ReplicaError> {
        match self.replica.borrow().leader_catching_up() {
            Some(epoch) => Err(ReplicaError::LeaderNotReady { epoch }),
            None => Ok(()),
        }
    }

    /// Housekeeping: retention (only of segments wholly below the high
    /// watermark and the durable end), then the state machine's log start
    /// follows what was deleted; producer expiry and snapshots as
    /// [`Partition::maintain`].
    ///
    /// # Errors
    /// Storage errors; [`ReplicaError::Broken`] when fenced.
    pub async fn maintain(&self) -> Result<Option<DeletedRange>, ReplicaError> {
        self.check_usable()?;
        let limit = {
            let replica = self.replica.borrow();
            self.high_watermark().min(replica.durable_end())
        };
        let deleted = self.partition.maintain_below(limit).await?;
        if deleted.is_some() {
            self.follow_log_start().await?;
        }
        Ok(deleted)
    }

    /// Compaction of an internal topic by a newer snapshot of its state:
    /// deletes the oldest closed segment if it lies wholly below `offset`,
    /// the high watermark and the durable end. Local, like retention: each
    /// replica compacts on its own schedule.
    ///
    /// # Errors
    /// Storage errors; [`ReplicaError::Broken`] when fenced.
    pub async fn compact_below(
        &self,
        offset: Offset,
    ) -> Result<Option<DeletedRange>, ReplicaError> {
        self.check_usable()?;
        let limit = {
            let replica = self.replica.borrow();
            offset.min(self.high_watermark()).min(replica.durable_end())
        };
        let deleted = self
            .partition
            .delete_segment_below(limit, corelog_storage::DeletionCause::Compaction)
            .await?;
        if deleted.is_some() {
            self.follow_log_start().await?;
        }
        Ok(deleted)
    }

    /// After segments were deleted: the state machine's log start follows
    /// the log's.
    async fn follow_log_start(&self) -> Result<(), ReplicaError> {
        let _apply = self.apply.lock().await;
        let log_start = self.partition.log().log_start();
        let before = self.high_watermark();
        let actions = {
            let mut replica = self.replica.borrow_mut();
            let bound = replica.high_watermark().min(replica.durable_end());
            if log_start > replica.log_start() && log_start <= bound {
                replica.advance_log_start(log_start)
            } else {
                Vec::new()
            }
        };
        self.carry_out(actions, before).await?;
        Ok(())
    }

    /// Flushes and closes the log (clean shutdown).
    ///
    /// # Errors
    /// As [`Partition::close`].
    pub async fn close(&self) -> Result<(), ReplicaError> {
        Ok(self.partition.close().await?)
    }

    /// Stops the replica for good without saving anything: its topic was
    /// deleted. Everything is refused from now on, and once this returns
    /// the log touches its directory no more. Idempotent.
    pub async fn discard(&self) {
        self.broken
            .borrow_mut()
            .get_or_insert_with(|| "the topic was deleted".to_owned());
        self.partition.discard().await;
    }

    /// Milliseconds on the executor's clock since the replica opened: the
    /// state machine's timers run on it.
    fn now_ms(&self) -> u64 {
        let elapsed = self.executor.now().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    }

    fn check_usable(&self) -> Result<(), ReplicaError> {
        match &*self.broken.borrow() {
            Some(reason) => Err(ReplicaError::Broken {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Fences the replica: everything is refused until it is reopened.
    fn fence(&self, error: &ReplicaError) {
        let mut broken = self.broken.borrow_mut();
        if broken.is_none() {
            tracing::error!(replica = self.id.0, dir = %self.dir.display(), %error, "replica fenced");
            *broken = Some(error.to_string());
            self.broken_no_space
                .set(error.code() == ErrorCode::DiskFull);
            self.broken_out_of_descriptors
                .set(error.code() == ErrorCode::OutOfFileDescriptors);
        }
        drop(broken);
        self.high_watermark_changed.notify(usize::MAX);
    }

    /// Carries out one call's actions in order (the caller holds `apply`,
    /// except during `open`), each durable one durable before the next.
    /// `high_watermark_before` is the high watermark before the call: what a
    /// leadership ending in this call had committed. Any failure fences the
    /// replica: the state machine already counted the effect.
    async fn carry_out(
        &self,
        actions: Vec<Action>,
        high_watermark_before: Offset,
    ) -> Result<Carried, ReplicaError> {
        // Disk work is rare (a new epoch, a divergence), and every waiting
        // append holds this future (through `report_durable`): it is boxed,
        // so that the common case stays small. With the disk work inline,
        // an append's future was 2.7 KiB (6 KiB as a produce boxes it),
        // past what glibc serves from its per-thread cache (1 KiB).
        if actions.iter().any(is_on_disk) {
            return Box::pin(self.carry_out_with_disk(actions, high_watermark_before)).await;
        }
        let mut carried = Carried::default();
        for action in actions {
            self.carried_out(self.carry_out_now(action, high_watermark_before, &mut carried))?;
        }
        Ok(carried)
    }

    /// [`carry_out`](Self::carry_out) of actions of which some wait for
    /// the disk.
    async fn carry_out_with_disk(
        &self,
        actions: Vec<Action>,
        high_watermark_before: Offset,
    ) -> Result<Carried, ReplicaError> {
        let mut carried = Carried::default();
        for action in actions {
            let result = match action {
                Action::Persist(meta) => self.persist(meta).await,
                Action::Truncate { to } => self.truncate(to).await,
                Action::Reset { log_start } => self.reset(log_start).await,
                other => self.carry_out_now(other, high_watermark_before, &mut carried),
            };
            self.carried_out(result)?;
        }
        Ok(carried)
    }

    /// Fences the replica when an action failed: the state machine already
    /// counted its effect.
    fn carried_out(&self, result: Result<(), ReplicaError>) -> Result<(), ReplicaError> {
        result.inspect_err(|error| self.fence(error))
    }

    /// Stores the replica's metadata (a new epoch, a new leader).
    async fn persist(&self, meta: ReplicaMeta) -> Result<(), ReplicaError> {
        if let Err(error) = meta_file::store(&self.disk, &self.dir, &meta).await {
            // As for a log write: what the disk holds is unknown, so the
            // broker stops (exit 3) unless the disk is full.
            self.observer.on_fenced(&self.dir, &error);
            return Err(error.into());
        }
        self.replica.borrow_mut().on_persisted(&meta);
        Ok(())
    }

    /// The actions carried out at once: appends (synchronous up to offset
    /// assignment), answers to hand back, notes.
    fn carry_out_now(
        &self,
        action: Action,
        high_watermark_before: Offset,
        carried: &mut Carried,
    ) -> Result<(), ReplicaError> {
        match action {
            Action::AppendMarker { epoch } => {
                carried.appended_end = Some(self.append_marker(epoch)?);
            }
            Action::Append { batches } => {
                carried.appended_end = Some(self.append_pushed(&batches)?);
            }
            Action::SendAck { ack, .. } => carried.ack = Some(ack),
            Action::SendAnswer { answer } => carried.answer = Some(answer),
            Action::SendPush { to, .. } => {
                // Only `poll_sends` asks for pushes, and the pump carries
                // those out; the resend timeout covers a stray one.
                tracing::error!(to = to.0, "push requested outside the push pump; dropped");
            }
            other => self.note(&other, high_watermark_before),
        }
        Ok(())
    }

    /// The actions that change no durable state: a new high watermark, or
    /// the end of a leadership.
    fn note(&self, action: &Action, high_watermark_before: Offset) {
        match action {
            Action::HighWatermark(high_watermark) => {
                self.high_watermark.set(*high_watermark);
                self.high_watermark_changed.notify(usize::MAX);
            }
            Action::StepDown { epoch } => {
                tracing::info!(replica = self.id.0, epoch = epoch.0, "stepped down");
                self.ended_term.set(Some(EndedTerm {
                    epoch: *epoch,
                    high_watermark: high_watermark_before,
                }));
                self.high_watermark_changed.notify(usize::MAX);
            }
            other => tracing::error!(?other, "durable action outside carry_out; dropped"),
        }
    }

    /// Waits until the log is durable up to `target`, registered so that no
    /// truncation or reset cuts below `target` meanwhile. The check and the
    /// registration run before the first await, so a caller that just
    /// appended (or just released `apply`) cannot be overtaken by a cut.
    async fn wait_durable_for(&self, target: Offset) -> Result<(), ReplicaError> {
        let log = self.partition.log();
        if target > log.next_offset() {
            // A cut already happened: the awaited records are gone.
            return Err(StorageError::Busy(format!(
                "the log was cut below offset {target} while waiting for it"
            ))
            .into());
        }
        self.durability_waits.set(self.durability_waits.get() + 1);
        let _registered = DurabilityWait { owner: self };
        log.wait_durable(target).await?;
        Ok(())
    }

    /// Resolves once no task waits for durability (see
    /// [`wait_durable_for`](Self::wait_durable_for)).
    async fn quiesce_durability_waits(&self) {
        loop {
            let listener = self.durability_waits_done.listen();
            if self.durability_waits.get() == 0 {
                return;
            }
            listener.await;
        }
    }

    /// Tells the state machine how far the log is durable (under `apply`,
    /// so the log and the state machine agree), and carries out what
    /// follows: an acknowledgement for a follower (returned), a new high
    /// watermark for a leader.
    async fn report_durable(&self) -> Result<Option<PushAck>, ReplicaError> {
        let _apply = self.apply.lock().await;
        self.check_usable()?;
        let durable = self.partition.log().durable_end();
        let before = self.high_watermark();
        let actions = {
            let mut replica = self.replica.borrow_mut();
            if durable < replica.durable_end() || durable > replica.log_end() {
                Vec::new()
            } else {
                replica.on_local_durable(durable)
            }
        };
        Ok(self.carry_out(actions, before).await?.ack)
    }
}

/// Whether `action` waits for the disk (see `carry_out`).
fn is_on_disk(action: &Action) -> bool {
    matches!(
        action,
        Action::Persist(_) | Action::Truncate { .. } | Action::Reset { .. }
    )
}

/// A registered durability wait; unregisters when dropped (also when the
/// waiting future is cancelled, as a produce timeout does).
struct DurabilityWait<'a, D: Disk> {
    owner: &'a ReplicatedPartition<D>,
}

impl<D: Disk> Drop for DurabilityWait<'_, D> {
    fn drop(&mut self) {
        let waits = self.owner.durability_waits.get() - 1;
        self.owner.durability_waits.set(waits);
        if waits == 0 {
            self.owner.durability_waits_done.notify(usize::MAX);
        }
    }
}

/// The epoch stamped on the log's last batch, for recovery's cross-check
/// with the epoch history; `None` for an empty log.
async fn last_epoch<D: Disk>(
    log: &PartitionLog<D>,
    limits: &BatchLimits,
) -> Result<Option<LeaderEpoch>, ReplicaError> {
    let (log_start, log_end) = (log.log_start(), log.durable_end());
    if log_start == log_end {
        return Ok(None);
    }
    let last = Offset(log_end.0 - 1);
    let read = log.read(last, 1, None).await?;
    let corrupt = |reason: String| StorageError::Corrupt {
        path: log.dir().to_path_buf(),
        position: 0,
        reason,
    };
    for chunk in &read.chunks {
        for found in batch::batches(chunk, limits) {
            let header = found.map_err(|error| corrupt(error.to_string()))?.header;
            if header.base_offset <= last && last <= header.last_offset() {
                return match header.leader_epoch() {
                    Some(epoch) => Ok(Some(epoch)),
                    None => Err(corrupt(format!(
                        "the last batch (offset {}) has no leader epoch",
                        header.base_offset
                    ))
                    .into()),
                };
            }
        }
    }
    Err(corrupt(format!("no batch holds the last offset {last}")).into())
}
