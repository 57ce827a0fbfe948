//! The controller leader's partition elections, pure: which partitions need
//! a new leader now and why, and what to publish from the replicas' answers.
//!
//! Time comes in as an argument and work goes out as data; the controller
//! service does the queries (`ReplicaQuery`) and the proposals. The safety
//! of an election is `corelog_replication::election::decide`'s: a majority
//! of the replica set must answer after durably promising the new epoch,
//! and the greatest `(last_epoch, log_end)` wins. Nothing here can elect
//! without that.
//!
//! An election is due when:
//! - the partition has no leader, or its leader's broker is fenced or no
//!   longer registered (retried every [`ELECTION_RETRY_INTERVAL`] while it
//!   fails);
//! - an earlier attempt published nothing and the epoch has not moved since
//!   (its queries may have made the leader step down);
//! - the preferred leader (first replica) is back: unfenced for
//!   [`PREFERRED_SETTLE_TIME`], not the leader, and the leader is healthy.
//!   Tried at most every [`PREFERRED_RETRY_INTERVAL`], doubling while it
//!   keeps electing someone else (a lagging preferred replica loses the
//!   round, and each round costs the partition a leader change).
//!
//! - the leader's broker is in maintenance (its leaderships go elsewhere);
//! - an operator asked for the leadership to move to one replica
//!   ([`ElectionBook::request_transfer`]): one round, once one can run
//!   (the target and a majority of the other replicas up) within
//!   [`TRANSFER_TIMEOUT`]. A round the target loses (another replica's log
//!   was longer) ends the request: retrying would move the leadership
//!   again each time.
//!
//! - a reassignment is in progress (see `corelog_controller::reassignment`):
//!   its next step adds a caught-up learner or removes a replica outside
//!   its goal. Such a round runs over the *new* set and publishes
//!   `ChangeReplicaSet`; it concludes only if a majority of the current set
//!   answered holding the current epoch (the change before it committed:
//!   two changes in flight at once could let disjoint majorities commit).
//!   When the leader must leave, the step is a transfer to the goal's
//!   first replica.
//!
//! A round that moves a leadership away from a live leader (a transfer,
//! maintenance) does not query that leader, so that it cannot win: a
//! majority of the others must answer, and the new leader, the one with
//! the greatest log among them, holds every committed record all the same.
//! Without that majority it publishes nothing (not "no leader"): the old
//! leader keeps leading if it still can.
//! The old leader learns of the new epoch from its followers, which
//! promised it and refuse its pushes, and from the metadata; its
//! unacknowledged appends fail with a retriable `NOT_LEADER`. A broker in
//! maintenance is never queried in such a round; in a round that replaces
//! a lost leader, only when the others cannot form a majority without it,
//! and last in the tie order.
//!
//! The bookkeeping ([`ElectionBook`]) lives only on the controller leader
//! and starts empty in each Raft term.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use corelog_controller::reassignment::{self, MoveProgress, Step};

use super::in_sync::MoveReport;
use corelog_controller::{
    BrokerRecord, Command, LeaderEpoch, MetadataState, NodeId, PartitionRecord, Replica, TopicId,
};
use corelog_replication::election::{Decision, decide};
use corelog_replication::{Query, QueryAnswer, QueryResult, ReplicaId};
use corelog_wire::message::replica_query::ReplicaQueryRequest;
use corelog_wire::types::PartitionId;
use futures::future::LocalBoxFuture;

/// Shortest time between two attempts on one partition that needs a
/// leader: quick enough that a lost leader is replaced within a second,
/// slow enough that an unreachable majority does not make the replicas
/// fsync a promise on every controller tick.
pub const ELECTION_RETRY_INTERVAL: Duration = Duration::from_millis(500);
/// How long the preferred leader's broker must have been unfenced before it
/// is given its leadership back: time to catch up as a follower, so that it
/// can win the round.
pub const PREFERRED_SETTLE_TIME: Duration = Duration::from_secs(3);
/// Shortest time between two preferred-leader attempts on one partition;
/// doubled after each attempt that elected someone else, up to
/// [`PREFERRED_BACKOFF_SHIFT_MAX`] doublings (160 s).
pub const PREFERRED_RETRY_INTERVAL: Duration = Duration::from_secs(10);
/// See [`PREFERRED_RETRY_INTERVAL`].
pub const PREFERRED_BACKOFF_SHIFT_MAX: u32 = 4;
/// Deadline of one replica query; a replica that misses it counts as not
/// answering.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a requested leadership transfer waits for a round that can
/// run.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);
/// Elections in flight at once, over all partitions: bounds the
/// connections, fsyncs and memory a mass failure costs.
pub const ELECTIONS_IN_FLIGHT_MAX: usize = 64;

/// The bookkeeping's intervals: the constants above in production; the
/// simulator scales them down to its short runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionTimings {
    /// See [`ELECTION_RETRY_INTERVAL`].
    pub retry_interval: Duration,
    /// See [`PREFERRED_SETTLE_TIME`].
    pub preferred_settle_time: Duration,
    /// See [`PREFERRED_RETRY_INTERVAL`].
    pub preferred_retry_interval: Duration,
    /// See [`TRANSFER_TIMEOUT`].
    pub transfer_timeout: Duration,
}

impl ElectionTimings {
    /// The production intervals.
    pub const DEFAULT: ElectionTimings = ElectionTimings {
        retry_interval: ELECTION_RETRY_INTERVAL,
        preferred_settle_time: PREFERRED_SETTLE_TIME,
        preferred_retry_interval: PREFERRED_RETRY_INTERVAL,
        transfer_timeout: TRANSFER_TIMEOUT,
    };
}

impl Default for ElectionTimings {
    fn default() -> Self {
        ElectionTimings::DEFAULT
    }
}

/// A broker id as a replica id; `None` for an id beyond `u32` (broker ids
/// come from a `u32` setting, so only a corrupt state gives one).
#[must_use]
pub fn replica_id(node: NodeId) -> Option<ReplicaId> {
    u32::try_from(node.0).ok().map(ReplicaId)
}

/// Why an election runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionReason {
    /// The partition is leaderless.
    NoLeader,
    /// The leader's broker is fenced (session expired or restarted).
    LeaderFenced,
    /// The leader's broker is no longer registered.
    LeaderUnregistered,
    /// An earlier attempt published nothing at the current epoch.
    Retry,
    /// The preferred leader is back and caught up.
    PreferredReturn,
    /// The leader's broker is in maintenance.
    Maintenance,
    /// An operator asked for the leadership to move to this broker.
    Transfer {
        /// The broker to lead.
        to: NodeId,
    },
    /// A step of a reassignment changes the replica set by one.
    Reassignment,
    /// A reassignment's leader leaves the set: the leadership goes to the
    /// goal's first replica first.
    MoveLeader {
        /// The broker to lead.
        to: NodeId,
    },
}

impl ElectionReason {
    /// Whether the round moves the leadership away from a live leader, which
    /// is then not queried.
    #[must_use]
    pub fn moves_away(self) -> bool {
        matches!(
            self,
            ElectionReason::Maintenance
                | ElectionReason::Transfer { .. }
                | ElectionReason::MoveLeader { .. }
        )
    }

    /// The broker the round means to elect, if it names one.
    #[must_use]
    pub fn target(self) -> Option<NodeId> {
        match self {
            ElectionReason::Transfer { to } | ElectionReason::MoveLeader { to } => Some(to),
            _ => None,
        }
    }
}

impl fmt::Display for ElectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ElectionReason::NoLeader => "no leader",
            ElectionReason::LeaderFenced => "leader fenced",
            ElectionReason::LeaderUnregistered => "leader unregistered",
            ElectionReason::Retry => "retry",
            ElectionReason::PreferredReturn => "preferred leader return",
            ElectionReason::Maintenance => "leader in maintenance",
            ElectionReason::Transfer { .. } => "leadership transfer",
            ElectionReason::Reassignment => "reassignment step",
            ElectionReason::MoveLeader { .. } => "reassignment leader move",
        })
    }
}

/// One replica to query: registered and unfenced when the round was planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryTarget {
    /// The replica (its broker's id).
    pub replica: ReplicaId,
    /// Where its broker is reached.
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// One election round to run, planned by [`ElectionBook::plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueElection {
    /// The topic.
    pub topic_id: TopicId,
    /// The partition.
    pub partition: u32,
    /// Why.
    pub reason: ElectionReason,
    /// The leader when planned.
    pub leader: Option<NodeId>,
    /// The epoch when planned: the result is dropped if it moved.
    pub epoch: LeaderEpoch,
    /// The round's epoch, above `epoch` and every epoch a replica reported
    /// promising.
    pub new_epoch: LeaderEpoch,
    /// The whole replica set, preferred first: the majority is of this
    /// (the new set, for a reassignment step).
    pub replicas: Vec<ReplicaId>,
    /// For a reassignment step: the set it publishes, and the current set,
    /// a majority of which must answer holding the current epoch.
    pub change: Option<ReplicaChange>,
    /// The replicas to query.
    pub targets: Vec<QueryTarget>,
    /// The bookkeeping generation that planned it (see
    /// [`ElectionBook::finish`]).
    pub generation: u64,
}

/// The two sets of a reassignment step's round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaChange {
    /// The set the step publishes.
    pub replicas: Vec<Replica>,
    /// The set before it.
    pub current: Vec<ReplicaId>,
}

impl ReplicaChange {
    /// Whether `answers` (to the round of `epoch`, planned at
    /// `current_epoch`) show the change before this one committed: a
    /// majority of the current set answered with a log of the current
    /// epoch, or with an empty log (nothing was ever committed).
    #[must_use]
    pub fn previous_committed(
        &self,
        epoch: LeaderEpoch,
        current_epoch: LeaderEpoch,
        answers: &[QueryAnswer],
    ) -> bool {
        let mut holding = BTreeSet::new();
        let mut empty = BTreeSet::new();
        for answer in answers {
            if answer.epoch != epoch || !self.current.contains(&answer.from) {
                continue;
            }
            if let QueryResult::State {
                last_epoch,
                log_end,
            } = answer.result
            {
                if last_epoch.is_some_and(|last| last >= current_epoch) {
                    holding.insert(answer.from);
                }
                if log_end.0 == 0 {
                    empty.insert(answer.from);
                }
            }
        }
        let majority = self.current.len() / 2 + 1;
        holding.len() >= majority || empty.len() >= majority
    }
}

impl DueElection {
    /// The partition.
    #[must_use]
    pub fn partition_id(&self) -> PartitionId {
        PartitionId {
            topic_id: self.topic_id.0,
            partition: self.partition,
        }
    }

    /// The query the round sends every target.
    #[must_use]
    pub fn query_request(&self) -> ReplicaQueryRequest {
        Query {
            partition: self.partition_id(),
            new_epoch: self.new_epoch,
        }
        .to_wire()
    }
}

/// Whether broker `node` is in maintenance.
fn in_maintenance(state: &MetadataState, node: NodeId) -> bool {
    state
        .brokers()
        .get(&node)
        .is_some_and(|broker| broker.maintenance)
}

/// What to do with a round's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Propose this `SetLeader`.
    Publish(Command),
    /// Publish nothing; retry later, above `fenced_epoch` if given.
    Retry {
        /// The highest epoch a replica reported promising.
        fenced_epoch: Option<LeaderEpoch>,
    },
}

/// Turns `decision` for the round `due` into what to publish.
///
/// `Elect` publishes the winner. `NoQuorum` publishes "no leader" when the
/// partition had one, so that a dead or isolated leader's clients and
/// followers learn it lost leadership (appends get `NOT_ENOUGH_REPLICAS`);
/// a leaderless partition stays as it is. `Superseded` publishes nothing
/// and the next round goes above the reported epoch.
#[must_use]
pub fn resolve(due: &DueElection, decision: Decision) -> Resolution {
    match decision {
        Decision::Elect { leader, epoch } => {
            assert_eq!(epoch, due.new_epoch, "decided another round's epoch");
            assert!(due.replicas.contains(&leader), "elected a stranger");
            let leader = Some(NodeId(u64::from(leader.0)));
            Resolution::Publish(match &due.change {
                Some(change) => Command::ChangeReplicaSet {
                    topic_id: due.topic_id,
                    partition: due.partition,
                    replicas: change.replicas.clone(),
                    leader,
                    epoch,
                },
                None => Command::SetLeader {
                    topic_id: due.topic_id,
                    partition: due.partition,
                    leader,
                    epoch,
                },
            })
        }
        // A step that found no majority of the new set publishes nothing:
        // the set stays as it is, and a plain election follows if the
        // queries stopped the leader.
        Decision::NoQuorum { .. } if due.change.is_some() => {
            Resolution::Retry { fenced_epoch: None }
        }
        // A round that left a live leader out: it may still lead.
        Decision::NoQuorum { .. } if due.reason.moves_away() => {
            Resolution::Retry { fenced_epoch: None }
        }
        Decision::NoQuorum { .. } if due.leader.is_some() => {
            Resolution::Publish(Command::SetLeader {
                topic_id: due.topic_id,
                partition: due.partition,
                leader: None,
                epoch: due.new_epoch,
            })
        }
        Decision::NoQuorum { .. } => Resolution::Retry { fenced_epoch: None },
        Decision::Superseded { fenced_epoch } => Resolution::Retry {
            fenced_epoch: Some(fenced_epoch),
        },
    }
}

/// What an election round needs from the controller leader running it:
/// the broker's controller service over the inter-broker RPC and Raft, the
/// simulator's controller over its simulated network.
pub trait RoundHost {
    /// Queries one replica for the round; `None` when it gives no useful
    /// answer in time (unreachable, refused, another partition).
    fn query<'a>(
        &'a self,
        due: &'a DueElection,
        target: &'a QueryTarget,
    ) -> LocalBoxFuture<'a, Option<QueryAnswer>>;

    /// The partition's leader epoch in the applied metadata, while this
    /// node still leads the controller; `None` otherwise (the partition
    /// was deleted, or leadership moved).
    fn current_epoch(&self, due: &DueElection) -> Option<LeaderEpoch>;

    /// Proposes `command` and waits until it applied.
    ///
    /// # Errors
    /// Why it did not apply (refused, or leadership lost).
    fn propose(&self, command: Command) -> LocalBoxFuture<'_, Result<(), String>>;
}

/// One election round: query the targets, decide, check that the
/// partition did not move meanwhile, propose the result.
///
/// The targets are queried in parallel, but for a transfer's target, which
/// is queried once the others answered. Until it promises the new epoch it
/// still follows the old leader, which goes on pushing to it (and may
/// commit with it, if the two are a majority: its answer then holds those
/// records); so its answer covers everything the others hold, and it wins
/// the round unless it was lagging already. Queried at the same time, it
/// lost to whichever follower had synced a few records more.
pub async fn run_round(host: &impl RoundHost, due: &DueElection) -> AttemptOutcome {
    let last = due.reason.target().and_then(replica_id);
    let first = due
        .targets
        .iter()
        .filter(|target| Some(target.replica) != last)
        .map(|target| host.query(due, target));
    let mut answers: Vec<QueryAnswer> = futures::future::join_all(first)
        .await
        .into_iter()
        .flatten()
        .collect();
    if let Some(target) = due
        .targets
        .iter()
        .find(|target| Some(target.replica) == last)
        && let Some(answer) = host.query(due, target).await
    {
        answers.push(answer);
    }
    let answered = answers
        .iter()
        .filter(|answer| matches!(answer.result, QueryResult::State { .. }))
        .count();
    if let Some(change) = &due.change
        && !change.previous_committed(due.new_epoch, due.epoch, &answers)
    {
        tracing::debug!(
            topic_id = %due.topic_id, partition = due.partition, epoch = %due.new_epoch, answered,
            "the replica set's last change is not committed yet; the reassignment step waits"
        );
        return AttemptOutcome::Unpublished { fenced_epoch: None };
    }
    let decision = decide(due.new_epoch, &due.replicas, &answers);
    let command = match resolve(due, decision) {
        Resolution::Publish(command) => command,
        Resolution::Retry { fenced_epoch } => {
            tracing::debug!(
                topic_id = %due.topic_id, partition = due.partition, epoch = %due.new_epoch,
                reason = %due.reason, answered, ?decision,
                "election round published nothing; retrying"
            );
            return AttemptOutcome::Unpublished { fenced_epoch };
        }
    };
    let leader = match &command {
        Command::SetLeader { leader, .. } | Command::ChangeReplicaSet { leader, .. } => *leader,
        other => unreachable!("resolve published {other:?}"),
    };
    if host.current_epoch(due) != Some(due.epoch) {
        tracing::debug!(topic_id = %due.topic_id, partition = due.partition, "partition changed during its election round; result dropped");
        return AttemptOutcome::Dropped;
    }
    match host.propose(command).await {
        Ok(()) => {
            if leader.is_some() {
                tracing::info!(
                    topic_id = %due.topic_id, partition = due.partition,
                    old_leader = ?due.leader.map(|node| node.0), new_leader = ?leader.map(|node| node.0),
                    epoch = %due.new_epoch, reason = %due.reason, answered,
                    "partition leader elected"
                );
            } else {
                tracing::warn!(
                    topic_id = %due.topic_id, partition = due.partition,
                    old_leader = ?due.leader.map(|node| node.0), epoch = %due.new_epoch,
                    reason = %due.reason, answered, replicas = due.replicas.len(),
                    "no majority of the partition's replicas answered: it stays leaderless and refuses appends until one does"
                );
            }
            AttemptOutcome::Published { leader }
        }
        Err(error) => {
            // A stale epoch or a fenced winner: the next round sees the
            // newer state.
            tracing::debug!(topic_id = %due.topic_id, partition = due.partition, %error, "election result not applied; retrying");
            AttemptOutcome::Unpublished { fenced_epoch: None }
        }
    }
}

/// How an attempt ended, for the bookkeeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A `SetLeader` for the round applied.
    Published {
        /// The leader published.
        leader: Option<NodeId>,
    },
    /// Nothing was published (no quorum on a leaderless partition, a
    /// superseded round, or a refused proposal): retried while the epoch
    /// stays where it was.
    Unpublished {
        /// The highest epoch a replica reported promising, if any.
        fenced_epoch: Option<LeaderEpoch>,
    },
    /// The partition changed meanwhile (new epoch, deleted): nothing to do.
    Dropped,
}

/// Per-partition bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct PartitionBook {
    last_attempt: Option<Instant>,
    last_preferred_attempt: Option<Instant>,
    /// Preferred-leader attempts in a row that elected someone else.
    preferred_misses: u32,
    /// The highest epoch a replica reported promising.
    fenced_epoch: Option<LeaderEpoch>,
    /// The epoch at which an attempt published nothing.
    retry_at_epoch: Option<LeaderEpoch>,
}

/// The controller leader's election bookkeeping. Not replicated: a new
/// leader starts from nothing ([`ElectionBook::follow_term`]), which only
/// delays preferred-leader returns and costs a superseded round or two.
#[derive(Debug, Default)]
pub struct ElectionBook {
    timings: ElectionTimings,
    term: u64,
    /// Bumped at every reset: rounds planned before it finish into nothing.
    generation: u64,
    partitions: BTreeMap<(TopicId, u32), PartitionBook>,
    /// Since when each unfenced broker (at this incarnation) has been seen
    /// unfenced.
    unfenced_since: BTreeMap<NodeId, (u64, Instant)>,
    in_flight: BTreeSet<(TopicId, u32)>,
    /// Requested leadership transfers: to whom, since when.
    transfers: BTreeMap<(TopicId, u32), (NodeId, Instant)>,
}

impl ElectionBook {
    /// Empty bookkeeping with the production intervals.
    #[must_use]
    pub fn new() -> ElectionBook {
        ElectionBook::default()
    }

    /// Empty bookkeeping with other intervals.
    #[must_use]
    pub fn with_timings(timings: ElectionTimings) -> ElectionBook {
        ElectionBook {
            timings,
            ..ElectionBook::default()
        }
    }

    /// Starts over when `term` is not the term the bookkeeping was kept in:
    /// leadership was (re)gained. Returns whether it reset.
    pub fn follow_term(&mut self, term: u64) -> bool {
        if term == self.term {
            return false;
        }
        *self = ElectionBook {
            timings: self.timings,
            term,
            generation: self.generation.wrapping_add(1),
            ..ElectionBook::default()
        };
        true
    }

    /// The intervals it keeps.
    #[must_use]
    pub fn timings(&self) -> ElectionTimings {
        self.timings
    }

    /// Rounds in flight.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Asks for the leadership of `partition` of `topic_id` to move to
    /// `to`: a round is planned at once, or as soon as one can run within
    /// the transfer timeout; the request ends with the first round that
    /// publishes (won by `to` or not). Replaces an earlier request for the
    /// partition.
    pub fn request_transfer(
        &mut self,
        topic_id: TopicId,
        partition: u32,
        to: NodeId,
        now: Instant,
    ) {
        self.transfers.insert((topic_id, partition), (to, now));
        if let Some(book) = self.partitions.get_mut(&(topic_id, partition)) {
            book.last_attempt = None;
        }
    }

    /// The broker a transfer of the partition was asked to, while it is
    /// being tried.
    #[must_use]
    pub fn transfer(&self, topic_id: TopicId, partition: u32) -> Option<NodeId> {
        self.transfers
            .get(&(topic_id, partition))
            .map(|(to, _)| *to)
    }

    /// Plans the rounds due at `now`, at most up to
    /// [`ELECTIONS_IN_FLIGHT_MAX`] in flight, and records them as started.
    /// Each must be handed back to [`ElectionBook::finish`].
    pub fn plan(&mut self, state: &MetadataState, now: Instant) -> Vec<DueElection> {
        self.plan_with_moves(state, now, &BTreeMap::new())
    }

    /// [`ElectionBook::plan`], with what the leaders of moving partitions
    /// reported in the current epoch (`reports`: their caught-up learners
    /// and whether the epoch committed): the steps of reassignments are
    /// planned too. A moving partition without a report takes no step.
    pub fn plan_with_moves(
        &mut self,
        state: &MetadataState,
        now: Instant,
        reports: &BTreeMap<(TopicId, u32), MoveReport>,
    ) -> Vec<DueElection> {
        self.observe_brokers(state, now);
        self.partitions.retain(|(topic_id, partition), _| {
            state
                .topics()
                .get(topic_id)
                .is_some_and(|topic| (*partition as usize) < topic.partitions.len())
        });
        let timeout = self.timings.transfer_timeout;
        self.transfers.retain(|(topic_id, partition), (to, since)| {
            let pending = state
                .topics()
                .get(topic_id)
                .and_then(|topic| topic.partitions.get(*partition as usize))
                .is_some_and(|record| record.leader != Some(*to));
            pending && now.saturating_duration_since(*since) < timeout
        });
        let mut planned = Vec::new();
        for topic in state.topics().values() {
            for (index, record) in topic.partitions.iter().enumerate() {
                if self.in_flight.len() >= ELECTIONS_IN_FLIGHT_MAX {
                    return planned;
                }
                let Ok(partition) = u32::try_from(index) else {
                    break;
                };
                let id = (topic.id, partition);
                if self.in_flight.contains(&id) {
                    continue;
                }
                let book = self.partitions.get(&id).copied().unwrap_or_default();
                let transfer = self.transfers.get(&id).map(|(to, _)| *to);
                let due = match self.reason(state, record, &book, transfer, now) {
                    Some(reason) => self.round(state, id, record, &book, reason),
                    None => reports
                        .get(&id)
                        .and_then(|report| self.move_step(state, id, record, &book, report, now)),
                };
                let Some(due) = due else {
                    continue;
                };
                let reason = due.reason;
                let entry = self.partitions.entry(id).or_default();
                entry.last_attempt = Some(now);
                if reason == ElectionReason::PreferredReturn {
                    entry.last_preferred_attempt = Some(now);
                }
                self.in_flight.insert(id);
                planned.push(due);
            }
        }
        planned
    }

    /// Records how the round `due` ended. A round planned before the last
    /// reset is ignored.
    pub fn finish(&mut self, due: &DueElection, outcome: AttemptOutcome) {
        if due.generation != self.generation {
            return;
        }
        let id = (due.topic_id, due.partition);
        self.in_flight.remove(&id);
        if matches!(due.reason, ElectionReason::Transfer { .. })
            && !matches!(outcome, AttemptOutcome::Unpublished { .. })
        {
            self.transfers.remove(&id);
        }
        let entry = self.partitions.entry(id).or_default();
        match outcome {
            AttemptOutcome::Published { leader } => {
                entry.retry_at_epoch = None;
                if due.reason == ElectionReason::PreferredReturn {
                    let preferred = due.replicas.first().map(|first| u64::from(first.0));
                    if leader.map(|node| node.0) == preferred {
                        entry.preferred_misses = 0;
                    } else {
                        entry.preferred_misses = entry.preferred_misses.saturating_add(1);
                    }
                }
            }
            AttemptOutcome::Unpublished { fenced_epoch } => {
                entry.retry_at_epoch = Some(due.epoch);
                entry.fenced_epoch = entry.fenced_epoch.max(fenced_epoch);
            }
            AttemptOutcome::Dropped => entry.retry_at_epoch = None,
        }
    }

    /// Tracks since when each broker has been unfenced; a new incarnation
    /// starts over.
    fn observe_brokers(&mut self, state: &MetadataState, now: Instant) {
        let brokers = state.brokers();
        self.unfenced_since.retain(|node, (incarnation, _)| {
            brokers
                .get(node)
                .is_some_and(|broker| !broker.fenced && broker.incarnation == *incarnation)
        });
        for broker in brokers.values().filter(|broker| !broker.fenced) {
            self.unfenced_since
                .entry(broker.id)
                .or_insert((broker.incarnation, now));
        }
    }

    fn reason(
        &self,
        state: &MetadataState,
        record: &PartitionRecord,
        book: &PartitionBook,
        transfer: Option<NodeId>,
        now: Instant,
    ) -> Option<ElectionReason> {
        let retry_allowed = book
            .last_attempt
            .is_none_or(|last| now.saturating_duration_since(last) >= self.timings.retry_interval);
        let lost = match record.leader {
            None => Some(ElectionReason::NoLeader),
            Some(leader) => match state.brokers().get(&leader) {
                None => Some(ElectionReason::LeaderUnregistered),
                Some(broker) if broker.fenced => Some(ElectionReason::LeaderFenced),
                Some(_) => None,
            },
        };
        if let Some(reason) = lost {
            return retry_allowed.then_some(reason);
        }
        let in_maintenance = |node: NodeId| in_maintenance(state, node);
        if record.leader.is_some_and(in_maintenance) {
            return retry_allowed.then_some(ElectionReason::Maintenance);
        }
        if let Some(to) = transfer {
            return retry_allowed.then_some(ElectionReason::Transfer { to });
        }
        if book.retry_at_epoch == Some(record.leader_epoch) {
            return retry_allowed.then_some(ElectionReason::Retry);
        }
        // A move puts the leadership where its goal wants it: giving it back
        // to the old set's first replica would only undo a step's transfer.
        if record.reassignment.is_some() {
            return None;
        }
        let preferred = record.replicas.first()?.node;
        let settled = self
            .unfenced_since
            .get(&preferred)
            .is_some_and(|(_, since)| {
                now.saturating_duration_since(*since) >= self.timings.preferred_settle_time
            });
        let interval = self.timings.preferred_retry_interval
            * (1u32 << book.preferred_misses.min(PREFERRED_BACKOFF_SHIFT_MAX));
        let preferred_allowed = book
            .last_preferred_attempt
            .is_none_or(|last| now.saturating_duration_since(last) >= interval);
        (record.leader != Some(preferred)
            && !in_maintenance(preferred)
            && settled
            && preferred_allowed
            && retry_allowed)
            .then_some(ElectionReason::PreferredReturn)
    }

    /// The round of a reassignment's next step, when one is due: a
    /// change of the set by one replica, or a transfer when the leader is
    /// the one to leave.
    ///
    /// It waits for the leader to report its epoch committed: a step's
    /// queries fence the replicas, so a step tried only to find the last
    /// change uncommitted would stop the leader that was committing it,
    /// again at every retry, and a lagging replica might never catch up
    /// (simulator seeds 25, 30 and 93 before this wait).
    fn move_step(
        &self,
        state: &MetadataState,
        id: (TopicId, u32),
        record: &PartitionRecord,
        book: &PartitionBook,
        report: &MoveReport,
        now: Instant,
    ) -> Option<DueElection> {
        let moving = record.reassignment.as_ref()?;
        let retry_allowed = book
            .last_attempt
            .is_none_or(|last| now.saturating_duration_since(last) >= self.timings.retry_interval);
        if !retry_allowed {
            return None;
        }
        // The round checks again from its answers: the report is the
        // leader's word, and a version 0 report (a broker predating it)
        // says committed without knowing.
        let progress = MoveProgress {
            committed: report.epoch_committed,
            caught_up: &report.caught_up,
        };
        let mut replicas = record.replicas.clone();
        match reassignment::next_step(record, &progress) {
            Step::Add(learner) => replicas.push(learner),
            Step::Remove(node) => replicas.retain(|replica| replica.node != node),
            Step::MoveLeader { to } => {
                // The goal's first replica, or the first one up and not in
                // maintenance: one in maintenance would be moved away again
                // at once, and back, and away (simulator seed 503).
                let to = moving
                    .goal()
                    .iter()
                    .map(|replica| replica.node)
                    .find(|node| {
                        !in_maintenance(state, *node)
                            && state
                                .brokers()
                                .get(node)
                                .is_some_and(|broker| !broker.fenced)
                    })
                    .unwrap_or(to);
                return self.round(state, id, record, book, ElectionReason::MoveLeader { to });
            }
            Step::AwaitCommit | Step::CatchUp { .. } | Step::Finished => return None,
        }
        let current = record
            .replicas
            .iter()
            .map(|replica| replica_id(replica.node))
            .collect::<Option<Vec<_>>>()?;
        let mut due = self.round(
            state,
            id,
            &PartitionRecord {
                replicas: replicas.clone(),
                ..record.clone()
            },
            book,
            ElectionReason::Reassignment,
        )?;
        // Every replica of both sets is asked, in maintenance or not:
        // whether the last change committed is a majority of the current
        // set, which may need the leaving replica's answer, or one in
        // maintenance (sets of four waited for ever: simulator seeds 5 and
        // 360). A broker in maintenance wins only holding more than the
        // others, and is then moved away at once; the leaving one cannot.
        due.targets = record
            .replicas
            .iter()
            .chain(&replicas)
            .filter_map(|replica| {
                let broker = state
                    .brokers()
                    .get(&replica.node)
                    .filter(|broker| !broker.fenced)?;
                Some(QueryTarget {
                    replica: replica_id(broker.id)?,
                    host: broker.host.clone(),
                    port: broker.port,
                })
            })
            .collect();
        due.targets.sort_by_key(|target| target.replica);
        due.targets.dedup_by_key(|target| target.replica);
        due.change = Some(ReplicaChange { replicas, current });
        Some(due)
    }

    fn round(
        &self,
        state: &MetadataState,
        (topic_id, partition): (TopicId, u32),
        record: &PartitionRecord,
        book: &PartitionBook,
        reason: ElectionReason,
    ) -> Option<DueElection> {
        let in_maintenance = |node: NodeId| in_maintenance(state, node);
        // Tie order: the transfer's target first, then the preferred order
        // with a broker in maintenance last.
        let mut order: Vec<NodeId> = record.replicas.iter().map(|replica| replica.node).collect();
        order.sort_by_key(|node| match reason {
            _ if reason.target() == Some(*node) => 0,
            // A step keeps the leader if its log is as long as any.
            ElectionReason::Reassignment if Some(*node) == record.leader => 0,
            _ if in_maintenance(*node) => 2,
            _ => 1,
        });
        let replicas = order
            .iter()
            .map(|node| replica_id(*node))
            .collect::<Option<Vec<_>>>()?;
        let mut members = replicas.clone();
        members.sort_unstable();
        members.dedup();
        let majority = members.len() / 2 + 1;
        let mut live: Vec<&BrokerRecord> = order
            .iter()
            .filter_map(|node| state.brokers().get(node))
            .filter(|broker| !broker.fenced)
            .filter(|broker| !(reason.moves_away() && Some(broker.id) == record.leader))
            .collect();
        // A broker in maintenance is asked only when the others are no
        // majority without it: a lost leader must be replaced, and a move
        // whose leader leaves a set of four with one in maintenance needs
        // its answer (it waited for the maintenance to end: simulator seed
        // 5). It wins only holding more than the others, and is then moved
        // away at once. An operator's transfer or maintenance waits.
        let operator_move =
            reason.moves_away() && !matches!(reason, ElectionReason::MoveLeader { .. });
        if operator_move || live.iter().filter(|broker| !broker.maintenance).count() >= majority {
            live.retain(|broker| !broker.maintenance);
        }
        if reason.moves_away() {
            // Without a majority of the others the old leader would have
            // to answer and could win again: leave it leading.
            let target_answers = match reason.target() {
                Some(to) => live.iter().any(|broker| broker.id == to),
                None => true,
            };
            if live.len() < majority || !target_answers {
                return None;
            }
        }
        let targets = live
            .into_iter()
            .filter_map(|broker| {
                Some(QueryTarget {
                    replica: replica_id(broker.id)?,
                    host: broker.host.clone(),
                    port: broker.port,
                })
            })
            .collect();
        let floor = record
            .leader_epoch
            .max(book.fenced_epoch.unwrap_or_default());
        let new_epoch = LeaderEpoch(floor.0.checked_add(1)?);
        Some(DueElection {
            topic_id,
            partition,
            reason,
            leader: record.leader,
            epoch: record.leader_epoch,
            new_epoch,
            replicas,
            change: None,
            targets,
            generation: self.generation,
        })
    }
}

#[cfg(test)]
mod tests {
    use corelog_controller::{Outcome, Replica};
    use corelog_wire::error::ErrorCode;
    use corelog_wire::message::replica_query::{
        QueryResult as WireQueryResult, ReplicaQueryResponse,
    };
    use corelog_wire::types::Offset;

    use super::*;

    const TOPIC: TopicId = TopicId(0);

    fn register(state: &mut MetadataState, node: u64) {
        let index = state.version() + 1;
        let outcome = state.apply(
            index,
            &Command::RegisterBroker {
                node: NodeId(node),
                host: "127.0.0.1".to_owned(),
                port: 9000 + node as u16,
                rack: None,
                shard_count: 1,
                incarnation: 1,
            },
        );
        assert!(outcome.is_ok(), "{outcome:?}");
        apply(
            state,
            Command::UnfenceBroker {
                node: NodeId(node),
                incarnation: 1,
            },
        );
    }

    fn apply(state: &mut MetadataState, command: Command) -> Outcome {
        let index = state.version() + 1;
        match state.apply(index, &command) {
            Ok(outcome) => outcome,
            Err(error) => panic!("{command:?} refused: {error}"),
        }
    }

    /// Brokers 1-3 unfenced, one topic with one partition on [1, 2, 3]
    /// led by 1 at epoch 0.
    fn cluster() -> MetadataState {
        let mut state = MetadataState::default();
        for node in 1..=3 {
            register(&mut state, node);
        }
        let outcome = apply(
            &mut state,
            Command::CreateTopic {
                name: "orders".to_owned(),
                internal: false,
                config: BTreeMap::new(),
                assignments: vec![
                    (1..=3)
                        .map(|node| Replica {
                            node: NodeId(node),
                            shard: corelog_controller::ShardId(0),
                        })
                        .collect(),
                ],
                created_at_ms: 0,
                owner: None,
            },
        );
        assert_eq!(outcome, Outcome::TopicCreated { topic_id: TOPIC });
        state
    }

    fn set_leader(state: &mut MetadataState, leader: Option<u64>, epoch: u32) {
        apply(
            state,
            Command::SetLeader {
                topic_id: TOPIC,
                partition: 0,
                leader: leader.map(NodeId),
                epoch: LeaderEpoch(epoch),
            },
        );
    }

    fn record(state: &MetadataState) -> &PartitionRecord {
        &state.topics()[&TOPIC].partitions[0]
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn state_answer(due: &DueElection, from: u32, last: Option<u32>, end: u64) -> QueryAnswer {
        QueryAnswer {
            partition: due.partition_id(),
            epoch: due.new_epoch,
            from: ReplicaId(from),
            result: QueryResult::State {
                last_epoch: last.map(LeaderEpoch),
                log_end: Offset(end),
            },
        }
    }

    #[test]
    fn healthy_leader_needs_no_election() {
        let state = cluster();
        let mut book = ElectionBook::new();
        let start = Instant::now();
        for step in 0..100 {
            assert!(book.plan(&state, start + ms(step * 100)).is_empty());
        }
    }

    #[test]
    fn leaderless_partition_is_due_and_retried_at_the_retry_interval() {
        let mut state = cluster();
        set_leader(&mut state, None, 1);
        let mut book = ElectionBook::new();
        let start = Instant::now();
        let planned = book.plan(&state, start);
        assert_eq!(planned.len(), 1);
        let due = &planned[0];
        assert_eq!(due.reason, ElectionReason::NoLeader);
        assert_eq!(due.new_epoch, LeaderEpoch(2));
        assert_eq!(due.targets.len(), 3);
        // In flight: not planned twice.
        assert!(book.plan(&state, start + ms(600)).is_empty());
        book.finish(due, AttemptOutcome::Unpublished { fenced_epoch: None });
        assert!(book.plan(&state, start + ms(400)).is_empty());
        assert_eq!(book.plan(&state, start + ms(500)).len(), 1);
    }

    #[test]
    fn fenced_leader_is_due_and_its_broker_not_queried() {
        let mut state = cluster();
        apply(&mut state, Command::FenceBroker { node: NodeId(1) });
        let mut book = ElectionBook::new();
        let planned = book.plan(&state, Instant::now());
        assert_eq!(planned.len(), 1);
        assert_eq!(planned[0].reason, ElectionReason::LeaderFenced);
        assert_eq!(planned[0].leader, Some(NodeId(1)));
        let queried: Vec<ReplicaId> = planned[0].targets.iter().map(|t| t.replica).collect();
        assert_eq!(queried, vec![ReplicaId(2), ReplicaId(3)]);
        // The majority is still of all three.
        assert_eq!(planned[0].replicas.len(), 3);
    }

    #[test]
    fn elected_winner_is_published_with_the_round_epoch() {
        let mut state = cluster();
        apply(&mut state, Command::FenceBroker { node: NodeId(1) });
        let mut book = ElectionBook::new();
        let due = book.plan(&state, Instant::now()).remove(0);
        let answers = [
            state_answer(&due, 2, Some(0), 10),
            state_answer(&due, 3, Some(0), 12),
        ];
        let decision = decide(due.new_epoch, &due.replicas, &answers);
        assert_eq!(
            resolve(&due, decision),
            Resolution::Publish(Command::SetLeader {
                topic_id: TOPIC,
                partition: 0,
                leader: Some(NodeId(3)),
                epoch: LeaderEpoch(1),
            })
        );
    }

    #[test]
    fn no_quorum_with_a_dead_leader_publishes_no_leader() {
        let mut state = cluster();
        apply(&mut state, Command::FenceBroker { node: NodeId(1) });
        apply(&mut state, Command::FenceBroker { node: NodeId(2) });
        let mut book = ElectionBook::new();
        let start = Instant::now();
        let due = book.plan(&state, start).remove(0);
        let answers = [state_answer(&due, 3, Some(0), 10)];
        let decision = decide(due.new_epoch, &due.replicas, &answers);
        let resolution = resolve(&due, decision);
        assert_eq!(
            resolution,
            Resolution::Publish(Command::SetLeader {
                topic_id: TOPIC,
                partition: 0,
                leader: None,
                epoch: LeaderEpoch(1),
            })
        );
        // Applied, the partition is leaderless; the next round without a
        // quorum publishes nothing.
        if let Resolution::Publish(command) = resolution {
            apply(&mut state, command);
        }
        book.finish(&due, AttemptOutcome::Published { leader: None });
        let later = start + ELECTION_RETRY_INTERVAL;
        let due = book.plan(&state, later).remove(0);
        assert_eq!(due.reason, ElectionReason::NoLeader);
        assert_eq!(due.new_epoch, LeaderEpoch(2));
        let decision = decide(due.new_epoch, &due.replicas, &[]);
        assert_eq!(
            resolve(&due, decision),
            Resolution::Retry { fenced_epoch: None }
        );
    }

    #[test]
    fn a_superseded_round_retries_above_the_fenced_epoch() {
        let mut state = cluster();
        set_leader(&mut state, None, 1);
        let mut book = ElectionBook::new();
        let start = Instant::now();
        let due = book.plan(&state, start).remove(0);
        assert_eq!(due.new_epoch, LeaderEpoch(2));
        let answers = [QueryAnswer {
            partition: due.partition_id(),
            epoch: due.new_epoch,
            from: ReplicaId(2),
            result: QueryResult::Fenced {
                fenced_epoch: LeaderEpoch(7),
            },
        }];
        let resolution = resolve(&due, decide(due.new_epoch, &due.replicas, &answers));
        assert_eq!(
            resolution,
            Resolution::Retry {
                fenced_epoch: Some(LeaderEpoch(7))
            }
        );
        book.finish(
            &due,
            AttemptOutcome::Unpublished {
                fenced_epoch: Some(LeaderEpoch(7)),
            },
        );
        let retry = book.plan(&state, start + ELECTION_RETRY_INTERVAL).remove(0);
        assert_eq!(retry.new_epoch, LeaderEpoch(8));
    }

    #[test]
    fn an_unpublished_round_on_a_led_partition_is_retried_until_the_epoch_moves() {
        let mut state = cluster();
        set_leader(&mut state, Some(2), 1);
        let mut book = ElectionBook::new();
        let start = Instant::now();
        assert!(book.plan(&state, start).is_empty());
        let due = book.plan(&state, start + PREFERRED_SETTLE_TIME).remove(0);
        assert_eq!(due.reason, ElectionReason::PreferredReturn);
        book.finish(
            &due,
            AttemptOutcome::Unpublished {
                fenced_epoch: Some(LeaderEpoch(3)),
            },
        );
        let later = start + PREFERRED_SETTLE_TIME + ELECTION_RETRY_INTERVAL;
        let retry = book.plan(&state, later).remove(0);
        assert_eq!(retry.reason, ElectionReason::Retry);
        assert_eq!(retry.new_epoch, LeaderEpoch(4));
        book.finish(&retry, AttemptOutcome::Unpublished { fenced_epoch: None });
        set_leader(&mut state, Some(1), 5);
        assert!(
            book.plan(&state, later + ELECTION_RETRY_INTERVAL)
                .is_empty()
        );
    }

    #[test]
    fn preferred_leader_returns_only_after_settling_and_at_the_rate_limit() {
        let mut state = cluster();
        set_leader(&mut state, Some(2), 1);
        let mut book = ElectionBook::new();
        let start = Instant::now();
        // Broker 1 was first seen unfenced at `start`.
        assert!(book.plan(&state, start).is_empty());
        assert!(
            book.plan(&state, start + PREFERRED_SETTLE_TIME - ms(1))
                .is_empty()
        );
        let settled = start + PREFERRED_SETTLE_TIME;
        let due = book.plan(&state, settled).remove(0);
        assert_eq!(due.reason, ElectionReason::PreferredReturn);
        assert_eq!(due.new_epoch, LeaderEpoch(2));
        // The lagging preferred replica loses the round: the leader stays.
        let answers = [
            state_answer(&due, 1, Some(1), 5),
            state_answer(&due, 2, Some(1), 9),
        ];
        let resolution = resolve(&due, decide(due.new_epoch, &due.replicas, &answers));
        let Resolution::Publish(command) = resolution else {
            panic!("{resolution:?}");
        };
        apply(&mut state, command);
        assert_eq!(record(&state).leader, Some(NodeId(2)));
        book.finish(
            &due,
            AttemptOutcome::Published {
                leader: Some(NodeId(2)),
            },
        );
        // Not again before the (doubled) interval.
        assert!(
            book.plan(&state, settled + PREFERRED_RETRY_INTERVAL)
                .is_empty()
        );
        let again = settled + PREFERRED_RETRY_INTERVAL * 2;
        let due = book.plan(&state, again).remove(0);
        assert_eq!(due.reason, ElectionReason::PreferredReturn);
        book.finish(
            &due,
            AttemptOutcome::Published {
                leader: Some(NodeId(1)),
            },
        );
        set_leader(&mut state, Some(1), 3);
        assert!(
            book.plan(&state, again + PREFERRED_RETRY_INTERVAL * 4)
                .is_empty()
        );
    }

    #[test]
    fn a_refenced_preferred_leader_settles_again() {
        let mut state = cluster();
        set_leader(&mut state, Some(2), 1);
        let mut book = ElectionBook::new();
        let start = Instant::now();
        assert!(book.plan(&state, start).is_empty());
        apply(&mut state, Command::FenceBroker { node: NodeId(1) });
        assert!(book.plan(&state, start + ms(1_000)).is_empty());
        apply(
            &mut state,
            Command::UnfenceBroker {
                node: NodeId(1),
                incarnation: 1,
            },
        );
        let back = start + ms(2_000);
        assert!(book.plan(&state, back).is_empty());
        assert!(
            book.plan(&state, back + PREFERRED_SETTLE_TIME - ms(1))
                .is_empty()
        );
        assert_eq!(book.plan(&state, back + PREFERRED_SETTLE_TIME).len(), 1);
    }

    #[test]
    fn a_new_term_forgets_rounds_in_flight() {
        let mut state = cluster();
        set_leader(&mut state, None, 1);
        let mut book = ElectionBook::new();
        assert!(book.follow_term(4));
        assert!(!book.follow_term(4));
        let start = Instant::now();
        let old = book.plan(&state, start).remove(0);
        assert_eq!(book.in_flight(), 1);
        assert!(book.follow_term(6));
        assert_eq!(book.in_flight(), 0);
        let new = book.plan(&state, start).remove(0);
        // The old round finishing does not clear the new one.
        book.finish(&old, AttemptOutcome::Dropped);
        assert_eq!(book.in_flight(), 1);
        book.finish(&new, AttemptOutcome::Dropped);
        assert_eq!(book.in_flight(), 0);
    }

    #[test]
    fn wire_answers_convert_and_errors_do_not_count() {
        let key = PartitionId {
            topic_id: 0,
            partition: 0,
        };
        let epoch = LeaderEpoch(3);
        let state = ReplicaQueryResponse {
            error_code: 0,
            error_message: None,
            result: WireQueryResult::State {
                last_epoch: Some(2),
                log_end: 40,
            },
        };
        assert_eq!(
            QueryAnswer::from_wire(key, epoch, ReplicaId(2), &state).map(|answer| answer.result),
            Ok(QueryResult::State {
                last_epoch: Some(LeaderEpoch(2)),
                log_end: Offset(40)
            })
        );
        let failed = ReplicaQueryResponse {
            error_code: ErrorCode::UnknownServerError.code(),
            ..state.clone()
        };
        assert!(QueryAnswer::from_wire(key, epoch, ReplicaId(2), &failed).is_err());
        let stranger = ReplicaQueryResponse {
            result: WireQueryResult::NotReplica,
            ..state
        };
        assert!(QueryAnswer::from_wire(key, epoch, ReplicaId(2), &stranger).is_err());
    }

    #[test]
    fn rounds_in_flight_are_bounded() {
        let mut state = cluster();
        apply(
            &mut state,
            Command::CreateTopic {
                name: "wide".to_owned(),
                internal: false,
                config: BTreeMap::new(),
                assignments: vec![
                    vec![Replica {
                        node: NodeId(2),
                        shard: corelog_controller::ShardId(0),
                    }];
                    100
                ],
                created_at_ms: 0,
                owner: None,
            },
        );
        apply(&mut state, Command::FenceBroker { node: NodeId(2) });
        let mut book = ElectionBook::new();
        let start = Instant::now();
        assert_eq!(book.plan(&state, start).len(), ELECTIONS_IN_FLIGHT_MAX);
        assert!(
            book.plan(&state, start + ELECTION_RETRY_INTERVAL)
                .is_empty()
        );
    }

    fn queried(due: &DueElection) -> Vec<u32> {
        due.targets.iter().map(|target| target.replica.0).collect()
    }

    fn maintenance(state: &mut MetadataState, node: u64, enabled: bool) {
        apply(
            state,
            Command::SetBrokerMaintenance {
                node: NodeId(node),
                enabled,
            },
        );
    }

    #[test]
    fn a_transfer_queries_the_others_with_its_target_first() {
        let mut state = cluster();
        let mut book = ElectionBook::new();
        let start = Instant::now();
        book.request_transfer(TOPIC, 0, NodeId(3), start);
        let due = book.plan(&state, start).remove(0);
        assert_eq!(due.reason, ElectionReason::Transfer { to: NodeId(3) });
        // The leader is not asked, so it cannot win again.
        assert_eq!(queried(&due), vec![3, 2]);
        assert_eq!(due.replicas, vec![ReplicaId(3), ReplicaId(1), ReplicaId(2)]);
        // Equal logs: the target wins the tie.
        let answers = [
            state_answer(&due, 2, Some(0), 10),
            state_answer(&due, 3, Some(0), 10),
        ];
        assert_eq!(
            decide(due.new_epoch, &due.replicas, &answers),
            Decision::Elect {
                leader: ReplicaId(3),
                epoch: due.new_epoch,
            }
        );
        book.finish(
            &due,
            AttemptOutcome::Published {
                leader: Some(NodeId(3)),
            },
        );
        set_leader(&mut state, Some(3), due.new_epoch.0);
        assert_eq!(book.transfer(TOPIC, 0), None, "done");
        assert!(book.plan(&state, start + ms(600)).is_empty());
    }

    #[test]
    fn a_transfer_that_cannot_reach_its_target_or_a_majority_waits_and_expires() {
        let mut state = cluster();
        apply(&mut state, Command::FenceBroker { node: NodeId(2) });
        let mut book = ElectionBook::new();
        let start = Instant::now();
        // Without the leader, 3 alone is no majority of three.
        book.request_transfer(TOPIC, 0, NodeId(3), start);
        assert!(book.plan(&state, start).is_empty());
        // The target fenced: nothing to ask.
        let mut state = cluster();
        apply(&mut state, Command::FenceBroker { node: NodeId(3) });
        assert!(book.plan(&state, start + ms(100)).is_empty());
        assert_eq!(book.transfer(TOPIC, 0), Some(NodeId(3)));
        assert!(book.plan(&state, start + TRANSFER_TIMEOUT).is_empty());
        assert_eq!(book.transfer(TOPIC, 0), None, "expired");
        // The other replica in maintenance: 3 alone is no majority either,
        // and a move never counts on a broker in maintenance (it could
        // win).
        let mut state = cluster();
        maintenance(&mut state, 2, true);
        book.request_transfer(TOPIC, 0, NodeId(3), start);
        assert!(book.plan(&state, start).is_empty());
    }

    #[test]
    fn a_transfer_is_one_round_and_publishes_no_leaderless_partition() {
        let state = cluster();
        let mut book = ElectionBook::new();
        let start = Instant::now();
        book.request_transfer(TOPIC, 0, NodeId(3), start);
        let due = book.plan(&state, start).remove(0);
        // 2's log is longer: it wins, and the request ends there rather
        // than moving the leadership again and again.
        let answers = [
            state_answer(&due, 2, Some(0), 11),
            state_answer(&due, 3, Some(0), 10),
        ];
        let decision = decide(due.new_epoch, &due.replicas, &answers);
        assert_eq!(
            decision,
            Decision::Elect {
                leader: ReplicaId(2),
                epoch: due.new_epoch,
            }
        );
        book.finish(
            &due,
            AttemptOutcome::Published {
                leader: Some(NodeId(2)),
            },
        );
        assert_eq!(book.transfer(TOPIC, 0), None);
        // Without a majority of answers, nothing is published: the old
        // leader was not asked and may still lead.
        book.request_transfer(TOPIC, 0, NodeId(3), start + ms(600));
        let due = book.plan(&state, start + ms(600)).remove(0);
        let answers = [state_answer(&due, 3, Some(0), 10)];
        let decision = decide(due.new_epoch, &due.replicas, &answers);
        assert_eq!(
            resolve(&due, decision),
            Resolution::Retry { fenced_epoch: None }
        );
        book.finish(&due, AttemptOutcome::Unpublished { fenced_epoch: None });
        assert_eq!(book.transfer(TOPIC, 0), Some(NodeId(3)), "tried again");
    }

    #[test]
    fn a_leader_in_maintenance_hands_over_and_its_broker_leads_nothing_again() {
        let mut state = cluster();
        maintenance(&mut state, 1, true);
        let mut book = ElectionBook::new();
        let start = Instant::now();
        let due = book.plan(&state, start).remove(0);
        assert_eq!(due.reason, ElectionReason::Maintenance);
        assert_eq!(queried(&due), vec![2, 3]);
        assert_eq!(due.replicas, vec![ReplicaId(2), ReplicaId(3), ReplicaId(1)]);
        book.finish(
            &due,
            AttemptOutcome::Published {
                leader: Some(NodeId(2)),
            },
        );
        set_leader(&mut state, Some(2), due.new_epoch.0);
        // The preferred leader in maintenance gets no leadership back, and
        // a new election does not ask it while the others can answer.
        for step in 1..100 {
            assert!(book.plan(&state, start + ms(step * 1_000)).is_empty());
        }
        set_leader(&mut state, None, due.new_epoch.0 + 1);
        let due = book.plan(&state, start + ms(200_000)).remove(0);
        assert_eq!(queried(&due), vec![2, 3]);
        // Out of maintenance, it is preferred again once settled.
        book.finish(
            &due,
            AttemptOutcome::Published {
                leader: Some(NodeId(2)),
            },
        );
        set_leader(&mut state, Some(2), due.new_epoch.0);
        maintenance(&mut state, 1, false);
        let due = book.plan(&state, start + ms(300_000)).remove(0);
        assert_eq!(due.reason, ElectionReason::PreferredReturn);
    }

    #[test]
    fn a_broker_in_maintenance_is_asked_when_the_others_are_no_majority() {
        let mut state = cluster();
        maintenance(&mut state, 1, true);
        apply(&mut state, Command::FenceBroker { node: NodeId(3) });
        let mut book = ElectionBook::new();
        // Led by 1 in maintenance, 3 down: moving away needs 2 and 3, so
        // 1 keeps leading rather than the partition losing its leader.
        assert!(book.plan(&state, Instant::now()).is_empty());
        set_leader(&mut state, None, 1);
        let due = book.plan(&state, Instant::now()).remove(0);
        assert_eq!(due.reason, ElectionReason::NoLeader);
        assert_eq!(queried(&due), vec![2, 1]);
    }

    /// A round host whose replicas keep taking the old leader's pushes
    /// until queried: the later one is asked, the longer its log.
    struct PushedUntilAsked {
        asked: std::cell::RefCell<Vec<u32>>,
        published: std::cell::RefCell<Vec<Command>>,
        epoch: LeaderEpoch,
    }

    impl RoundHost for PushedUntilAsked {
        fn query<'a>(
            &'a self,
            due: &'a DueElection,
            target: &'a QueryTarget,
        ) -> LocalBoxFuture<'a, Option<QueryAnswer>> {
            let order = {
                let mut asked = self.asked.borrow_mut();
                asked.push(target.replica.0);
                asked.len() as u64
            };
            // Replica 2 synced a little more than 3 when the round began.
            let base = if target.replica.0 == 2 { 12 } else { 10 };
            let end = if order == 1 {
                base
            } else {
                base + 5 * (order - 1)
            };
            Box::pin(async move { Some(state_answer(due, target.replica.0, Some(0), end)) })
        }

        fn current_epoch(&self, _due: &DueElection) -> Option<LeaderEpoch> {
            Some(self.epoch)
        }

        fn propose(&self, command: Command) -> LocalBoxFuture<'_, Result<(), String>> {
            self.published.borrow_mut().push(command);
            Box::pin(async { Ok(()) })
        }
    }

    #[test]
    fn a_transfers_target_is_asked_last_so_it_holds_what_the_others_hold() {
        let state = cluster();
        let mut book = ElectionBook::new();
        book.request_transfer(TOPIC, 0, NodeId(3), Instant::now());
        let due = book.plan(&state, Instant::now()).remove(0);
        let host = PushedUntilAsked {
            asked: std::cell::RefCell::default(),
            published: std::cell::RefCell::default(),
            epoch: record(&state).leader_epoch,
        };
        let outcome = futures::executor::block_on(run_round(&host, &due));
        assert_eq!(*host.asked.borrow(), vec![2, 3], "the target last");
        assert_eq!(
            outcome,
            AttemptOutcome::Published {
                leader: Some(NodeId(3))
            }
        );
        // Any other round asks in the preferred order, all at once.
        let mut state = cluster();
        apply(&mut state, Command::FenceBroker { node: NodeId(1) });
        let due = ElectionBook::new().plan(&state, Instant::now()).remove(0);
        host.asked.borrow_mut().clear();
        let _ = futures::executor::block_on(run_round(&host, &due));
        assert_eq!(*host.asked.borrow(), vec![2, 3]);
    }

    /// Brokers 1-4 unfenced; the partition on [1, 2, 3] led by 1 is moving
    /// to [1, 2, 4].
    fn moving_cluster() -> MetadataState {
        let mut state = cluster();
        register(&mut state, 4);
        apply(
            &mut state,
            Command::StartReassignment {
                topic_id: TOPIC,
                partition: 0,
                target: [1, 2, 4]
                    .into_iter()
                    .map(|node| Replica {
                        node: NodeId(node),
                        shard: corelog_controller::ShardId(0),
                    })
                    .collect(),
                throttle_bytes_per_s: 0,
                started_at_ms: 0,
            },
        );
        state
    }

    /// A round host whose replicas answer with fixed logs.
    struct FixedLogs {
        logs: BTreeMap<u32, (Option<u32>, u64)>,
        published: std::cell::RefCell<Vec<Command>>,
    }

    impl FixedLogs {
        /// Replicas answering with `(last epoch, log end)`.
        fn new<const N: usize>(logs: [(u32, (Option<u32>, u64)); N]) -> FixedLogs {
            FixedLogs {
                logs: BTreeMap::from(logs),
                published: std::cell::RefCell::default(),
            }
        }
    }

    impl RoundHost for FixedLogs {
        fn query<'a>(
            &'a self,
            due: &'a DueElection,
            target: &'a QueryTarget,
        ) -> LocalBoxFuture<'a, Option<QueryAnswer>> {
            let answer = self
                .logs
                .get(&target.replica.0)
                .map(|(last, end)| state_answer(due, target.replica.0, *last, *end));
            Box::pin(async move { answer })
        }

        fn current_epoch(&self, due: &DueElection) -> Option<LeaderEpoch> {
            Some(due.epoch)
        }

        fn propose(&self, command: Command) -> LocalBoxFuture<'_, Result<(), String>> {
            self.published.borrow_mut().push(command);
            Box::pin(async { Ok(()) })
        }
    }

    /// The leader's report that learner 4 is caught up, in an epoch
    /// `committed` or not.
    fn caught_up(committed: bool) -> BTreeMap<(TopicId, u32), MoveReport> {
        BTreeMap::from([(
            (TOPIC, 0),
            MoveReport {
                caught_up: BTreeSet::from([NodeId(4)]),
                epoch_committed: committed,
            },
        )])
    }

    #[test]
    fn a_move_step_waits_for_the_leader_to_report_its_epoch_committed() {
        let state = moving_cluster();
        let mut book = ElectionBook::new();
        let now = Instant::now();
        // Learner 4 caught up, but the epoch is not committed: no round,
        // whose queries would fence the leader committing it.
        assert!(
            book.plan_with_moves(&state, now, &caught_up(false))
                .is_empty()
        );
        // Without a report of its leader, no step either.
        assert!(
            book.plan_with_moves(&state, now, &BTreeMap::new())
                .is_empty()
        );
        let due = book.plan_with_moves(&state, now, &caught_up(true));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].reason, ElectionReason::Reassignment);
    }

    #[test]
    fn a_move_adds_a_caught_up_learner_through_a_round_over_the_new_set() {
        let state = moving_cluster();
        let mut book = ElectionBook::new();
        // Not caught up: nothing to do yet.
        assert!(book.plan(&state, Instant::now()).is_empty());
        let due = book
            .plan_with_moves(&state, Instant::now(), &caught_up(true))
            .remove(0);
        assert_eq!(due.reason, ElectionReason::Reassignment);
        assert_eq!(
            due.replicas,
            vec![ReplicaId(1), ReplicaId(2), ReplicaId(3), ReplicaId(4)]
        );
        assert_eq!(queried(&due), vec![1, 2, 3, 4]);
        let change = due.change.clone().expect("a step");
        assert_eq!(
            change.current,
            vec![ReplicaId(1), ReplicaId(2), ReplicaId(3)]
        );
        let host = FixedLogs::new([
            (1, (Some(0), 10)),
            (2, (Some(0), 10)),
            (3, (Some(0), 10)),
            (4, (Some(0), 10)),
        ]);
        let outcome = futures::executor::block_on(run_round(&host, &due));
        // The leader keeps leading: first in the tie order.
        assert_eq!(
            outcome,
            AttemptOutcome::Published {
                leader: Some(NodeId(1))
            }
        );
        assert_eq!(
            *host.published.borrow(),
            vec![Command::ChangeReplicaSet {
                topic_id: TOPIC,
                partition: 0,
                replicas: change.replicas,
                leader: Some(NodeId(1)),
                epoch: LeaderEpoch(1),
            }]
        );
    }

    #[test]
    fn a_moves_leader_leaves_a_set_of_four_with_one_in_maintenance() {
        let mut state = cluster();
        register(&mut state, 4);
        let replicas = |nodes: &[u64]| -> Vec<Replica> {
            nodes
                .iter()
                .map(|node| Replica {
                    node: NodeId(*node),
                    shard: corelog_controller::ShardId(0),
                })
                .collect()
        };
        apply(
            &mut state,
            Command::StartReassignment {
                topic_id: TOPIC,
                partition: 0,
                target: replicas(&[4, 2, 3]),
                throttle_bytes_per_s: 0,
                started_at_ms: 0,
            },
        );
        apply(
            &mut state,
            Command::ChangeReplicaSet {
                topic_id: TOPIC,
                partition: 0,
                replicas: replicas(&[1, 2, 3, 4]),
                leader: Some(NodeId(1)),
                epoch: LeaderEpoch(2),
            },
        );
        maintenance(&mut state, 3, true);
        let report = BTreeMap::from([(
            (TOPIC, 0),
            MoveReport {
                caught_up: BTreeSet::new(),
                epoch_committed: true,
            },
        )]);
        // Without the leader, 2 and 4 are no majority of four: 3 is asked
        // too, though in maintenance, or the move would wait for it.
        let due = ElectionBook::new()
            .plan_with_moves(&state, Instant::now(), &report)
            .remove(0);
        assert_eq!(due.reason, ElectionReason::MoveLeader { to: NodeId(4) });
        assert_eq!(queried(&due), vec![4, 2, 3]);
        // An operator's transfer there waits for the maintenance to end.
        let mut book = ElectionBook::new();
        book.request_transfer(TOPIC, 0, NodeId(4), Instant::now());
        assert!(book.plan(&state, Instant::now()).is_empty());
        // The goal's first replica in maintenance: the leadership goes to
        // the next, not to one it would at once be moved away from.
        maintenance(&mut state, 3, false);
        maintenance(&mut state, 4, true);
        let due = ElectionBook::new()
            .plan_with_moves(&state, Instant::now(), &report)
            .remove(0);
        assert_eq!(due.reason, ElectionReason::MoveLeader { to: NodeId(2) });
    }

    #[test]
    fn a_step_asks_every_replica_of_both_sets_whether_the_last_change_committed() {
        // [1, 2, 3] moving to [1, 2, 4], with 4 added and in maintenance:
        // 3 leaves, and 1 and 2 alone are no majority of the current four
        // to show the change that added 4 committed.
        let mut state = moving_cluster();
        apply(
            &mut state,
            Command::ChangeReplicaSet {
                topic_id: TOPIC,
                partition: 0,
                replicas: [1, 2, 3, 4]
                    .into_iter()
                    .map(|node| Replica {
                        node: NodeId(node),
                        shard: corelog_controller::ShardId(0),
                    })
                    .collect(),
                leader: Some(NodeId(1)),
                epoch: LeaderEpoch(2),
            },
        );
        maintenance(&mut state, 4, true);
        let due = ElectionBook::new()
            .plan_with_moves(&state, Instant::now(), &caught_up(true))
            .remove(0);
        assert_eq!(due.reason, ElectionReason::Reassignment);
        assert_eq!(queried(&due), vec![1, 2, 3, 4]);
        let change = due.change.clone().expect("a step");
        assert_eq!(change.replicas.len(), 3, "{change:?}");
        // 2 lags behind the change's marker: 1, 3 and 4 show it.
        let host = FixedLogs::new([
            (1, (Some(2), 11)),
            (2, (Some(1), 10)),
            (3, (Some(2), 11)),
            (4, (Some(2), 11)),
        ]);
        let outcome = futures::executor::block_on(run_round(&host, &due));
        assert_eq!(
            outcome,
            AttemptOutcome::Published {
                leader: Some(NodeId(1))
            }
        );
    }

    #[test]
    fn a_moving_partition_gets_no_preferred_leader_return() {
        let mut state = moving_cluster();
        let mut book = ElectionBook::new();
        let start = Instant::now();
        let _ = book.plan(&state, start);
        // Broker 2 leads; 1 is the preferred replica and settled.
        set_leader(&mut state, Some(2), 1);
        let later = start + ms(60_000);
        assert!(book.plan(&state, later).is_empty());
    }

    #[test]
    fn a_move_step_waits_while_the_last_change_is_not_held_by_a_majority() {
        let mut state = moving_cluster();
        // The epoch moved to 3 (say, the change that added a replica), and
        // only the leader holds a record of it yet.
        set_leader(&mut state, Some(1), 3);
        let due = ElectionBook::new()
            .plan_with_moves(&state, Instant::now(), &caught_up(true))
            .remove(0);
        let host = FixedLogs::new([
            (1, (Some(3), 11)),
            (2, (Some(0), 10)),
            (3, (Some(0), 10)),
            (4, (Some(0), 10)),
        ]);
        let outcome = futures::executor::block_on(run_round(&host, &due));
        assert_eq!(outcome, AttemptOutcome::Unpublished { fenced_epoch: None });
        assert!(host.published.borrow().is_empty());
        // Once a majority of the current set holds epoch 3, it goes on.
        let host = FixedLogs::new([
            (1, (Some(3), 11)),
            (2, (Some(3), 11)),
            (3, (Some(0), 10)),
            (4, (Some(0), 10)),
        ]);
        let outcome = futures::executor::block_on(run_round(&host, &due));
        assert!(
            matches!(outcome, AttemptOutcome::Published { .. }),
            "{outcome:?}"
        );
    }
}
