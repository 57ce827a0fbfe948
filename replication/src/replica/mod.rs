//! The per-partition replica state machine: one value per replica, driven
//! by the shell's calls, answering with [`Action`]s.
//!
//! - `mod.rs` (this file): the state, recovery, queries, durability and the
//!   invariants every change checks.
//! - [`leader`](self::leader): the leader role (marker, pushes, acknowledgements,
//!   high watermark).
//! - [`follower`](self::follower): the follower role (consistency check,
//!   truncation, reset, acknowledgements).

mod follower;
mod leader;

use std::collections::BTreeMap;

use corelog_wire::types::{LeaderEpoch, Offset, PartitionId};

use crate::action::Action;
use crate::error::ReplicationError;
use crate::ids::ReplicaId;
use crate::message::{PushAck, PushResult, Query, QueryAnswer, QueryResult};
use crate::meta::ReplicaMeta;

/// Tunables of a replica. Times are in milliseconds of the shell's clock,
/// which comes in as `now_ms` arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// A leader resends to a follower from its acknowledged end when this
    /// long passed without an acknowledgement that moved it forward while
    /// records were outstanding, and no push to it is still on its way
    /// (see [`Replica::on_push_failed`]: a slow follower is waited for, a
    /// lost push is resent).
    pub resend_timeout_ms: u64,
    /// A leader sends a push (empty if there is nothing new) to a follower
    /// at least this often, so the high watermark travels and lost
    /// acknowledgements are repeated.
    pub heartbeat_interval_ms: u64,
    /// Pipelining bound, in records (offsets): a leader sends new batches
    /// to a follower while fewer than this many are sent but not yet
    /// acknowledged durable. Counted in offsets because the state machine
    /// knows offsets exactly and bytes only through the shell.
    pub max_inflight_records: u64,
    /// Byte budget of one push, passed to the shell in
    /// [`Action::SendPush`].
    pub max_push_bytes: u64,
    /// A follower is in sync while it caught up with the leader's log end
    /// within this long (Kafka's `replica.lag.time.max.ms`). Reported, not
    /// used for commitment: the high watermark counts a majority.
    pub in_sync_lag_ms: u64,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            resend_timeout_ms: 500,
            heartbeat_interval_ms: 100,
            max_inflight_records: 100_000,
            max_push_bytes: 1 << 20,
            in_sync_lag_ms: 10_000,
        }
    }
}

/// The state of the local log as recovery found it. After a crash only the
/// durable prefix survives, so the log end is the durable end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveredLog {
    /// The first offset held.
    pub log_start: Offset,
    /// The offset after the last valid, durable batch.
    pub log_end: Offset,
    /// The epoch stamped on the last batch (`None` for an empty log), to
    /// cross-check the persisted history.
    pub last_epoch: Option<LeaderEpoch>,
}

/// The role of a replica, as the shell sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleView {
    /// Neither leading nor following: new, restarted, stepped down, or
    /// fenced by a query and waiting for the election's outcome.
    Offline,
    /// Leading `epoch`; writes are accepted once the epoch-start marker is
    /// appended.
    Leader {
        /// The epoch led.
        epoch: LeaderEpoch,
        /// Whether client appends may be accepted now.
        accepting_writes: bool,
    },
    /// Following `leader` in `epoch`.
    Follower {
        /// The epoch followed.
        epoch: LeaderEpoch,
        /// The leader.
        leader: ReplicaId,
    },
}

/// Per-follower bookkeeping of a leader.
#[derive(Clone, Copy, Debug)]
struct Progress {
    /// Durable, matching end the follower reported in this epoch. Only
    /// grows within the epoch.
    acked_end: Offset,
    /// Where the next push with new batches starts.
    sent_end: Offset,
    /// The high watermark last sent.
    sent_hw: Offset,
    /// A mismatch moved `sent_end`: send a push there even without batches.
    probe_pending: bool,
    /// When `acked_end` last moved, or the last resend.
    last_progress_ms: u64,
    /// Pushes of this epoch sent ([`Replica::on_push_sent`]) and neither
    /// answered nor reported failed yet. While any is on its way the
    /// follower is slow, not gone: nothing is resent on a timer (the
    /// transport gives every push up within a bounded time).
    outstanding: u32,
    /// When the follower last answered a push of this epoch (any answer).
    last_answer_ms: Option<u64>,
    /// When a push of this epoch to it last failed in transport.
    last_failure_ms: Option<u64>,
    /// When a push was last sent.
    last_send_ms: u64,
    /// When the follower last held everything the leader's log held at
    /// some earlier moment: the base of its lag in time.
    caught_up_ms: u64,
    /// The oldest push not yet acknowledged that carried the log up to its
    /// end: (that end, when it was sent). Acknowledging it means the
    /// follower caught up with the log as of the send, which a follower
    /// under steady load never does with the log as of the ack.
    full_send: Option<(Offset, u64)>,
}

impl Progress {
    /// A follower (or learner) a leader knows nothing of yet in its epoch,
    /// as of `now_ms` with its log ending at `log_end`.
    fn fresh(log_end: Offset, now_ms: u64) -> Self {
        Progress {
            // Nothing is known durable on the follower in this epoch yet;
            // zero is the safe lower bound for counting.
            acked_end: Offset(0),
            // Optimistic: a caught-up follower takes the marker directly;
            // any other answers with a mismatch.
            sent_end: log_end,
            sent_hw: Offset(0),
            probe_pending: false,
            last_progress_ms: now_ms,
            outstanding: 0,
            last_answer_ms: None,
            last_failure_ms: None,
            last_send_ms: 0,
            // Presumed in sync until it fails to catch up for the in-sync
            // lag.
            caught_up_ms: now_ms,
            full_send: None,
        }
    }
}

/// A leader's view of one follower, for reports and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerStatus {
    /// The follower.
    pub replica: ReplicaId,
    /// The end of its log known durable and matching, in this epoch.
    pub acked_end: Offset,
    /// Offsets of the leader's log it has not acknowledged.
    pub lag_records: u64,
    /// How long since it last caught up with the leader's log end; 0 when
    /// it holds all of it.
    pub lag_ms: u64,
    /// Whether it caught up within [`ReplicaConfig::in_sync_lag_ms`].
    pub in_sync: bool,
    /// Whether it is in the replica set (counted toward the high
    /// watermark), not a learner.
    pub voter: bool,
}

#[derive(Clone, Debug)]
struct LeaderState {
    epoch: LeaderEpoch,
    /// The replica set, sorted: the high watermark counts a majority of it.
    replicas: Vec<ReplicaId>,
    /// Replicas outside the set that get pushes and are never counted
    /// ([`Replica::set_learners`]), sorted.
    learners: Vec<ReplicaId>,
    /// The offset of this epoch's marker: records below it are older
    /// epochs'; the high watermark may only pass it by counting, never
    /// stop between older records by counting (Raft fig. 8).
    epoch_start: Offset,
    marker_appended: bool,
    /// The shell reported the `Persist` naming this leadership durable
    /// ([`Replica::on_persisted`]). Until then no record may be appended:
    /// after a crash the replica would hold records of an epoch its
    /// metadata does not know it led, and could lead that epoch again.
    leadership_durable: bool,
    followers: BTreeMap<ReplicaId, Progress>,
}

impl LeaderState {
    /// The leadership is durable and its marker appended (an empty log
    /// needs none): client appends may take offsets.
    fn accepts_writes(&self) -> bool {
        self.marker_appended && self.leadership_durable
    }
}

#[derive(Clone, Copy, Debug)]
struct FollowerState {
    epoch: LeaderEpoch,
    leader: ReplicaId,
    /// The end of the prefix of the local log known to equal the leader's:
    /// established by pushes that passed the consistency check in this
    /// epoch (or committed before it). Only this prefix is acknowledged and
    /// only this prefix may carry the high watermark.
    verified_end: Offset,
}

#[derive(Clone, Debug)]
enum Role {
    Offline,
    Leader(LeaderState),
    Follower(FollowerState),
}

/// One replica of one partition.
///
/// Pure: every input is an argument (including the time, `now_ms`), every
/// effect is a returned [`Action`]. The shell owns the log bytes, the disk
/// and the network; it tells the replica what it appended and what became
/// durable, and carries out the actions in order.
///
/// Invariants asserted on every change, in release builds too:
/// `log_start <= high_watermark <= log_end`, `durable_end <= log_end`; the
/// high watermark never decreases (within one incarnation: it is soft state
/// and restarts at the log start); truncation and reset never go below it;
/// the fenced epoch never decreases and the history never names an epoch
/// above it.
#[derive(Clone, Debug)]
pub struct Replica {
    id: ReplicaId,
    partition: PartitionId,
    config: ReplicaConfig,
    meta: ReplicaMeta,
    log_start: Offset,
    log_end: Offset,
    durable_end: Offset,
    high_watermark: Offset,
    role: Role,
    /// Resends on the timer so far, in every epoch led.
    resends: u64,
}

impl Replica {
    /// A replica with an empty log and no promises: a new assignment.
    #[must_use]
    pub fn new(id: ReplicaId, partition: PartitionId, config: ReplicaConfig) -> Self {
        Self {
            id,
            partition,
            config,
            meta: ReplicaMeta::new(),
            log_start: Offset(0),
            log_end: Offset(0),
            durable_end: Offset(0),
            high_watermark: Offset(0),
            role: Role::Offline,
            resends: 0,
        }
    }

    /// A replica restarted from its persisted metadata and recovered log.
    /// It starts `Offline` with its high watermark at the log start.
    ///
    /// History runs at or past the log end are forgotten (their records
    /// were not durable); if the log is empty the whole history is
    /// forgotten, since no record remains whose epoch it could vouch for
    /// (this keeps a reset that crashed before its metadata was written from
    /// answering an election with a stale epoch). When that changes the
    /// history, the returned actions hold a `Persist`.
    ///
    /// # Errors
    /// [`ReplicationError::HistoryMismatch`],
    /// [`ReplicationError::HistoryAboveFence`] or
    /// [`ReplicationError::BadLogBounds`] when the metadata and the log do
    /// not fit together: damage; the shell fences the replica.
    pub fn recover(
        id: ReplicaId,
        partition: PartitionId,
        config: ReplicaConfig,
        mut meta: ReplicaMeta,
        log: RecoveredLog,
    ) -> Result<(Self, Vec<Action>), ReplicationError> {
        if log.log_start > log.log_end {
            return Err(ReplicationError::BadLogBounds {
                log_start: log.log_start,
                log_end: log.log_end,
            });
        }
        if let Some(history_epoch) = meta.history.last_epoch()
            && history_epoch > meta.fenced_epoch
        {
            return Err(ReplicationError::HistoryAboveFence {
                history_epoch,
                fenced_epoch: meta.fenced_epoch,
            });
        }
        let mut changed = meta.history.truncate_from(log.log_end);
        if log.log_start == log.log_end {
            changed |= meta.history.clear();
        } else {
            let history_epoch = meta.history.epoch_before(log.log_end);
            if history_epoch != log.last_epoch {
                return Err(ReplicationError::HistoryMismatch {
                    log_end: log.log_end,
                    log_epoch: log.last_epoch,
                    history_epoch,
                });
            }
        }
        let replica = Self {
            id,
            partition,
            config,
            meta,
            log_start: log.log_start,
            log_end: log.log_end,
            durable_end: log.log_end,
            high_watermark: log.log_start,
            role: Role::Offline,
            resends: 0,
        };
        replica.check_invariants();
        let actions = if changed {
            vec![replica.persist()]
        } else {
            Vec::new()
        };
        Ok((replica, actions))
    }

    /// This replica.
    #[must_use]
    pub fn id(&self) -> ReplicaId {
        self.id
    }

    /// Its partition.
    #[must_use]
    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    /// Its durable metadata as last emitted in a `Persist` (the in-memory
    /// copy is always what was, or is about to be, persisted).
    #[must_use]
    pub fn meta(&self) -> &ReplicaMeta {
        &self.meta
    }

    /// The first offset of the local log.
    #[must_use]
    pub fn log_start(&self) -> Offset {
        self.log_start
    }

    /// The offset after the last appended batch.
    #[must_use]
    pub fn log_end(&self) -> Offset {
        self.log_end
    }

    /// The offset after the last durable batch.
    #[must_use]
    pub fn durable_end(&self) -> Offset {
        self.durable_end
    }

    /// Records below this offset are committed.
    #[must_use]
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// The current role.
    #[must_use]
    pub fn role(&self) -> RoleView {
        match &self.role {
            Role::Offline => RoleView::Offline,
            Role::Leader(leader) => RoleView::Leader {
                epoch: leader.epoch,
                accepting_writes: leader.accepts_writes(),
            },
            Role::Follower(follower) => RoleView::Follower {
                epoch: follower.epoch,
                leader: follower.leader,
            },
        }
    }

    /// A leader's replication lag: for each follower in the replica set,
    /// how many offsets of the log are not yet acknowledged durable by it,
    /// summed (a learner catching up is a move's progress, not lag). `None`
    /// when not leading.
    #[must_use]
    pub fn follower_lag(&self) -> Option<u64> {
        match &self.role {
            Role::Leader(leader) => Some(
                leader
                    .followers
                    .iter()
                    .filter(|(replica, _)| leader.replicas.contains(replica))
                    .map(|(_, progress)| self.log_end.0.saturating_sub(progress.acked_end.0))
                    .sum(),
            ),
            Role::Offline | Role::Follower(_) => None,
        }
    }

    /// How often, in all, this replica as leader resent to a follower from
    /// its acknowledged end because nothing acknowledged it for
    /// [`ReplicaConfig::resend_timeout_ms`] after a push was lost. Under
    /// pure overload it stays put: late answers are waited for.
    #[must_use]
    pub fn resends(&self) -> u64 {
        self.resends
    }

    /// A leader's view of each of its followers at `now_ms`; `None` when
    /// not leading.
    #[must_use]
    pub fn follower_status(&self, now_ms: u64) -> Option<Vec<FollowerStatus>> {
        let Role::Leader(leader) = &self.role else {
            return None;
        };
        let status = leader
            .followers
            .iter()
            .map(|(&replica, progress)| {
                let lag_ms = if progress.acked_end >= self.log_end {
                    0
                } else {
                    now_ms.saturating_sub(progress.caught_up_ms)
                };
                FollowerStatus {
                    replica,
                    acked_end: progress.acked_end,
                    lag_records: self.log_end.0.saturating_sub(progress.acked_end.0),
                    lag_ms,
                    in_sync: lag_ms <= self.config.in_sync_lag_ms,
                    voter: leader.replicas.contains(&replica),
                }
            })
            .collect();
        Some(status)
    }

    /// The learners a leader pushes to ([`Replica::set_learners`]), sorted;
    /// none when not leading.
    #[must_use]
    pub fn learners(&self) -> &[ReplicaId] {
        match &self.role {
            Role::Leader(leader) => &leader.learners,
            Role::Offline | Role::Follower(_) => &[],
        }
    }

    /// Whether this replica leads with followers to push to. A sole
    /// voter's leader has none: its shell need not poll for sends.
    #[must_use]
    pub fn has_followers(&self) -> bool {
        matches!(&self.role, Role::Leader(leader) if !leader.followers.is_empty())
    }

    /// Whether the shell may assign offsets to a client append now: the
    /// leadership is durable and its marker appended (an empty log needs
    /// none).
    #[must_use]
    pub fn accepting_writes(&self) -> bool {
        matches!(&self.role, Role::Leader(leader) if leader.accepts_writes())
    }

    /// A leader that has not yet committed its epoch's marker: `Some(epoch)`.
    /// Until its high watermark reaches the marker it does not know how
    /// much of its log older leaders committed (Raft §5.4.2; a restarted
    /// replica starts at its log start), so its committed end can be below
    /// what readers already saw. The shell serves no reads until then.
    #[must_use]
    pub fn leader_catching_up(&self) -> Option<LeaderEpoch> {
        match &self.role {
            Role::Leader(leader) if self.high_watermark < leader.epoch_start => Some(leader.epoch),
            _ => None,
        }
    }

    /// A leader that has committed its epoch: its high watermark passed the
    /// epoch's start marker (an empty log has none to commit). A majority of
    /// the replica set then holds the epoch, so the set it was led with is
    /// committed, and a replica move may take its next step.
    #[must_use]
    pub fn epoch_committed(&self) -> bool {
        matches!(&self.role, Role::Leader(leader)
            if self.high_watermark > leader.epoch_start || self.log_end.0 == 0)
    }

    /// The shell carried out an [`Action::Persist`]: `meta` is durable.
    /// A leader whose leadership it names starts accepting writes (once
    /// its marker, if any, is appended).
    pub fn on_persisted(&mut self, meta: &ReplicaMeta) {
        if let Role::Leader(leader) = &mut self.role
            && meta.led_epoch >= Some(leader.epoch)
        {
            leader.leadership_durable = true;
        }
    }

    /// A controller query for an election of `query.new_epoch`.
    ///
    /// If the epoch is not above the fence, the answer is `Fenced` (except
    /// for a repeat of the query last promised, while nothing has happened
    /// in that epoch here: it is answered again, so that a lost answer can
    /// be recovered by asking again). Otherwise the replica promises it
    /// (`Persist` first), stops leading or following (it can no longer help
    /// an older epoch commit anything, so it must not acknowledge its pushes
    /// either), and answers with its
    /// DURABLE log end and the epoch of its last durable record. Durable,
    /// because the answer is a claim about what this replica will still
    /// hold after a crash: the election picks the greatest claim, and a
    /// claim that included an unsynced tail could elect a replica that
    /// comes back from a crash without committed records it was counted on
    /// to have.
    ///
    /// # Errors
    /// [`ReplicationError::WrongPartition`].
    pub fn on_query(&mut self, query: &Query) -> Result<Vec<Action>, ReplicationError> {
        self.check_partition(query.partition)?;
        let mut actions = Vec::new();
        // A repeated query of the epoch already promised (the controller
        // retries when an answer is lost) gets the same kind of answer, as
        // long as nothing happened in that epoch here yet.
        let repeated = query.new_epoch == self.meta.fenced_epoch
            && matches!(self.role, Role::Offline)
            && self.meta.led_epoch != Some(query.new_epoch);
        if query.new_epoch <= self.meta.fenced_epoch && !repeated {
            actions.push(self.answer(
                query.new_epoch,
                QueryResult::Fenced {
                    fenced_epoch: self.meta.fenced_epoch,
                },
            ));
            return Ok(actions);
        }
        if !repeated {
            self.step_down(&mut actions);
            // Stop following too: the old epoch's leader must get no more
            // acknowledgements, and the new epoch's leader is not known
            // until the controller publishes it.
            self.role = Role::Offline;
            self.raise_fence(query.new_epoch);
            actions.push(self.persist());
        }
        let result = QueryResult::State {
            last_epoch: self.meta.history.epoch_before(self.durable_end),
            log_end: self.durable_end,
        };
        actions.push(self.answer(query.new_epoch, result));
        self.check_invariants();
        Ok(actions)
    }

    /// The shell's fsync completed: everything below `durable_end` is
    /// durable. A follower acknowledges it; a leader counts it.
    ///
    /// # Panics
    /// If `durable_end` is above the log end or below the previous durable
    /// end (a shell bug).
    pub fn on_local_durable(&mut self, durable_end: Offset) -> Vec<Action> {
        assert!(
            durable_end <= self.log_end,
            "durable end {durable_end} above the log end {}",
            self.log_end
        );
        assert!(
            durable_end >= self.durable_end,
            "durable end moved back from {} to {durable_end}",
            self.durable_end
        );
        self.durable_end = durable_end;
        let mut actions = Vec::new();
        match &self.role {
            Role::Leader(_) => self.advance_leader_high_watermark(&mut actions),
            Role::Follower(follower) => actions.push(self.ok_ack(*follower)),
            Role::Offline => {}
        }
        self.check_invariants();
        actions
    }

    /// Timers: a leader resends to followers that made no progress and
    /// sends heartbeats; then whatever [`poll_sends`](Self::poll_sends)
    /// would send.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Action> {
        self.poll_sends(now_ms)
    }

    /// Retention deleted the log below `log_start` (the shell deletes
    /// first, then calls this). Only committed, durable records may be
    /// deleted. Returns a `Persist` when the history was pruned.
    ///
    /// # Panics
    /// If `log_start` is above the high watermark or the durable end, or
    /// below the current log start.
    pub fn advance_log_start(&mut self, log_start: Offset) -> Vec<Action> {
        assert!(log_start >= self.log_start, "log start moved back");
        assert!(
            log_start <= self.high_watermark && log_start <= self.durable_end,
            "retention to {log_start} beyond the committed, durable prefix"
        );
        self.log_start = log_start;
        let mut actions = Vec::new();
        if self.meta.history.retain_from(log_start) {
            actions.push(self.persist());
        }
        self.check_invariants();
        actions
    }

    fn check_partition(&self, partition: PartitionId) -> Result<(), ReplicationError> {
        if partition == self.partition {
            Ok(())
        } else {
            Err(ReplicationError::WrongPartition {
                expected: self.partition,
                got: partition,
            })
        }
    }

    fn persist(&self) -> Action {
        Action::Persist(self.meta.clone())
    }

    fn answer(&self, epoch: LeaderEpoch, result: QueryResult) -> Action {
        Action::SendAnswer {
            answer: QueryAnswer {
                partition: self.partition,
                epoch,
                from: self.id,
                result,
            },
        }
    }

    fn ack(&self, to: ReplicaId, epoch: LeaderEpoch, result: PushResult) -> Action {
        Action::SendAck {
            to,
            ack: PushAck {
                partition: self.partition,
                epoch,
                from: self.id,
                result,
            },
        }
    }

    /// The acknowledgement a follower sends: only the prefix checked
    /// against this leader counts, even if more is durable.
    fn ok_ack(&self, follower: FollowerState) -> Action {
        let log_end = follower.verified_end;
        self.ack(
            follower.leader,
            follower.epoch,
            PushResult::Ok {
                durable_end: self.durable_end.min(log_end),
                log_end,
            },
        )
    }

    fn raise_fence(&mut self, epoch: LeaderEpoch) {
        assert!(
            epoch >= self.meta.fenced_epoch,
            "fence moved back from {} to {epoch}",
            self.meta.fenced_epoch
        );
        self.meta.fenced_epoch = epoch;
    }

    /// Leaves the leader role, if held, with a `StepDown`.
    fn step_down(&mut self, actions: &mut Vec<Action>) {
        if let Role::Leader(leader) = &self.role {
            actions.push(Action::StepDown {
                epoch: leader.epoch,
            });
            self.role = Role::Offline;
        }
    }

    fn set_high_watermark(&mut self, high_watermark: Offset, actions: &mut Vec<Action>) {
        assert!(
            high_watermark > self.high_watermark,
            "high watermark moved back from {} to {high_watermark}",
            self.high_watermark
        );
        assert!(
            high_watermark <= self.log_end,
            "high watermark {high_watermark} above the log end {}",
            self.log_end
        );
        self.high_watermark = high_watermark;
        actions.push(Action::HighWatermark(high_watermark));
    }

    /// Checks the invariants that hold between calls.
    fn check_invariants(&self) {
        assert!(
            self.log_start <= self.high_watermark && self.high_watermark <= self.log_end,
            "expected log start {} <= high watermark {} <= log end {}",
            self.log_start,
            self.high_watermark,
            self.log_end
        );
        assert!(
            self.durable_end <= self.log_end,
            "durable end {} above log end {}",
            self.durable_end,
            self.log_end
        );
        if let Some(epoch) = self.meta.history.last_epoch() {
            assert!(
                epoch <= self.meta.fenced_epoch,
                "history reaches epoch {epoch} above the fence {}",
                self.meta.fenced_epoch
            );
        }
        match &self.role {
            Role::Leader(leader) => {
                assert!(leader.epoch == self.meta.fenced_epoch, "leader below fence");
                assert!(
                    leader
                        .learners
                        .iter()
                        .all(|learner| *learner != self.id && !leader.replicas.contains(learner)),
                    "learners {:?} overlap the replica set {:?}",
                    leader.learners,
                    leader.replicas
                );
                assert!(
                    leader.followers.keys().all(|follower| {
                        leader.replicas.contains(follower) || leader.learners.contains(follower)
                    }) && leader.followers.len() + 1
                        == leader.replicas.len() + leader.learners.len(),
                    "followers {:?} are not the replica set {:?} and learners {:?} but the leader",
                    leader.followers.keys(),
                    leader.replicas,
                    leader.learners
                );
                assert!(
                    leader.epoch_start <= self.log_end,
                    "epoch start past log end"
                );
            }
            Role::Follower(follower) => {
                assert!(
                    follower.epoch == self.meta.fenced_epoch,
                    "follower below fence"
                );
                assert!(
                    self.meta
                        .history
                        .last()
                        .is_none_or(|run| run.start_offset < self.log_end),
                    "a follower's history {:?} has a run without records at its log end {}",
                    self.meta.history,
                    self.log_end
                );
                assert!(
                    follower.verified_end <= self.log_end,
                    "verified end {} past log end {}",
                    follower.verified_end,
                    self.log_end
                );
            }
            Role::Offline => {}
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod protocol_tests;
