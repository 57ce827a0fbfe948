//! The controller role on shard 0 of a voter: the I/O shell around
//! [`ControllerNode`].
//!
//! One driver task owns the Raft log file and handles every Ready in the
//! order Raft's safety needs: append (and fsync when Raft asks) the records,
//! then send the messages, then act on what committed, then `advance`.
//! Requests (raft messages, registrations, heartbeats, operations) only
//! feed the node and wake the driver; proposals wait for their outcome on
//! a one-shot channel keyed by proposal id.
//!
//! The leader also watches broker sessions: a broker silent past the
//! session timeout is fenced, and a fenced broker whose heartbeat shows it
//! caught up with the metadata of its registration is unfenced.
//!
//! And it runs partition elections: every tick it plans the rounds due
//! ([`ElectionBook::plan`]: lost leaders, preferred leaders back), queries
//! each round's live replicas in parallel, decides with
//! `corelog_replication::election::decide` and proposes the `SetLeader`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corelog_controller::decommission::Decommission;
use corelog_controller::durable::RecoveredLog;
use corelog_controller::{
    Command, ControllerConfig, ControllerNode, MetadataState, NodeId, OutboundMessage, Outcome,
    PlacementError, PlacementLoad, ProposalId, ProposalOutcome, ProposeError, Resolved, TopicId,
    place_within, reassignment,
};
use corelog_replication::QueryAnswer;
use corelog_storage::clock::Clock;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::controller_raft::ControllerRaftRequest;
use corelog_wire::message::partition_report::LedPartitionV1;
use corelog_wire::sasl::scram::StoredCredential;
use corelog_wire::types::LeaderEpoch;
use event_listener::Event;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;

use super::election::{DueElection, ElectionTimings, QUERY_TIMEOUT, QueryTarget, RoundHost};
use super::in_sync::{InSyncBook, MoveReport, PartitionHealth};
use super::leader_work::{LeaderHost, LeaderWork};
use super::raft_log::RaftLogFile;
use super::ready_loop::{ReadyHost, handle_readies};
use super::sessions::SessionBook;
use crate::executor::{Executor, GlommioExecutor, wait_until};
use crate::peer::Peers;

/// Raft tick; `election_tick` 10 makes an election timeout of 1–2 s.
const TICK: Duration = Duration::from_millis(100);
/// Deadline of one raft message; raft resends what is lost.
const RAFT_SEND_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest a proposal is waited for before the caller is told to retry.
const PROPOSAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a controller request was not carried out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControllerRequestError {
    /// This node is not the controller leader; `leader` is the hint.
    #[error("this node is not the controller leader (leader: {leader:?})")]
    NotController {
        /// The leader as this node knows it.
        leader: Option<u32>,
    },
    /// The command was refused, with the code to answer and why.
    #[error("{code}: {message}")]
    Refused {
        /// The wire code.
        code: ErrorCode,
        /// What to do.
        message: String,
    },
}

impl ControllerRequestError {
    pub(crate) fn refused(code: ErrorCode, message: impl Into<String>) -> Self {
        ControllerRequestError::Refused {
            code,
            message: message.into(),
        }
    }

    /// The code to answer with.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            ControllerRequestError::NotController { .. } => ErrorCode::NotController,
            ControllerRequestError::Refused { code, .. } => *code,
        }
    }

    /// What to tell the client beside the code: the refusal's reason
    /// alone, since the client shows the code (with its own advice) next
    /// to it.
    #[must_use]
    pub fn detail(&self) -> String {
        match self {
            ControllerRequestError::NotController { .. } => self.to_string(),
            ControllerRequestError::Refused { message, .. } => message.clone(),
        }
    }

    /// The leader hint, if any.
    #[must_use]
    pub fn leader_hint(&self) -> Option<u32> {
        match self {
            ControllerRequestError::NotController { leader } => *leader,
            ControllerRequestError::Refused { .. } => None,
        }
    }
}

/// A topic the cluster creates for itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InternalTopicSpec {
    /// Its name (`__…`).
    pub name: String,
    /// Partitions.
    pub partitions: u32,
    /// Settings as `key=value` entries.
    pub config: BTreeMap<String, String>,
}

/// A topic to create, as the controller leader is asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopic {
    /// Its name.
    pub name: String,
    /// Whether it is internal (`__groups`, `__audit`); only the controller
    /// itself creates those.
    pub internal: bool,
    /// Partitions.
    pub partitions: u32,
    /// Replicas per partition; 0 for the default (as many as there are
    /// brokers, up to 3).
    pub replication_factor: u16,
    /// Settings as `key=value` entries, defaults included.
    pub config: BTreeMap<String, String>,
    /// The principal whose topic and partition limits it counts against;
    /// `None` for nobody (internal topics, super users, no login).
    pub owner: Option<String>,
}

/// How often a leadership transfer's requester looks whether its round
/// ended.
const TRANSFER_POLL: Duration = Duration::from_millis(20);

/// How much older than a session timeout a partition report may be and
/// still count.
const REPORT_FRESHNESS: Duration = Duration::from_secs(2);

/// What only the controller leader knows: broker liveness and in-sync
/// replicas, borrowed for one answer.
#[derive(Debug)]
pub struct LeaderView<'a> {
    sessions: std::cell::Ref<'a, SessionBook>,
    in_sync: std::cell::Ref<'a, InSyncBook>,
    now: Instant,
}

impl LeaderView<'_> {
    /// How long since `node`'s last heartbeat reached this leader.
    #[must_use]
    pub fn heartbeat_age(&self, node: NodeId) -> Option<Duration> {
        self.sessions.heartbeat_age(node, self.now)
    }

    /// The in-sync replicas of one partition (see [`InSyncBook::in_sync`]).
    #[must_use]
    pub fn in_sync(
        &self,
        state: &corelog_controller::MetadataState,
        topic_id: corelog_controller::TopicId,
        index: u32,
        record: &corelog_controller::PartitionRecord,
    ) -> Option<Vec<NodeId>> {
        self.in_sync
            .in_sync(state, topic_id, index, record, self.now)
    }

    /// Every partition's health.
    #[must_use]
    pub fn health(&self, state: &corelog_controller::MetadataState) -> PartitionHealth {
        self.in_sync.health(state, self.now)
    }
}

/// The controller role of this node.
pub struct ControllerService {
    id: NodeId,
    voters: BTreeMap<NodeId, SocketAddr>,
    node: RefCell<ControllerNode>,
    peers: Rc<Peers>,
    /// Woken when the node may have a Ready.
    work: Event,
    /// Woken when the applied metadata version moves.
    applied: Event,
    /// Woken after each `advance`: proposals refused mid-Ready retry then.
    advanced: Event,
    waiting: RefCell<BTreeMap<ProposalId, oneshot::Sender<ProposalOutcome>>>,
    /// Broker sessions and partition elections (leader only).
    leader_work: LeaderWork,
    /// The partition leaders' reports of their in-sync replicas (leader
    /// only).
    in_sync: RefCell<InSyncBook>,
    /// Topics the cluster creates for itself.
    internal_topics: RefCell<Vec<InternalTopicSpec>>,
    /// An internal-topic creation is in flight.
    creating_internal: Cell<bool>,
    halted: RefCell<Option<String>>,
    /// Partition replicas each shard of a broker may hold (user topics).
    partitions_per_shard_max: u32,
    /// Held from planning a topic to its commit: a second creation plans
    /// against the first one's replicas, so that two cannot together pass
    /// a broker's partition limit.
    creating: async_lock::Mutex<()>,
    /// Stamps topics' creation times.
    clock: Rc<dyn Clock>,
}

impl std::fmt::Debug for ControllerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerService")
            .field("id", &self.id)
            .field("node", &*self.node.borrow())
            .finish_non_exhaustive()
    }
}

impl ControllerService {
    /// Starts the role: builds the node from the recovered log and spawns
    /// the driver and the ticker on the current executor.
    ///
    /// # Errors
    /// A message when the recovered log or the configuration is unusable.
    pub fn start(
        id: u32,
        voters: BTreeMap<NodeId, SocketAddr>,
        log: RaftLogFile,
        recovered: RecoveredLog,
        session_timeout: Duration,
        partitions_per_shard_max: u32,
        clock: Rc<dyn Clock>,
    ) -> Result<Rc<ControllerService>, String> {
        // Each process draws other election jitter than its predecessor's.
        let seed = u64::from(id) ^ clock.now().0.unsigned_abs().rotate_left(17);
        let config = ControllerConfig::new(
            NodeId(u64::from(id)),
            voters.keys().copied().collect(),
            seed,
        );
        let node = ControllerNode::new(config, recovered).map_err(|error| error.to_string())?;
        let service = Rc::new(ControllerService {
            id: NodeId(u64::from(id)),
            voters,
            node: RefCell::new(node),
            peers: Peers::new(),
            work: Event::new(),
            applied: Event::new(),
            advanced: Event::new(),
            waiting: RefCell::new(BTreeMap::new()),
            leader_work: LeaderWork::new(session_timeout, ElectionTimings::default()),
            // Leaders report every second; a report a session timeout
            // older than that is from a leader that went quiet.
            in_sync: RefCell::new(InSyncBook::new(session_timeout + REPORT_FRESHNESS)),
            internal_topics: RefCell::new(Vec::new()),
            creating_internal: Cell::new(false),
            halted: RefCell::new(None),
            partitions_per_shard_max,
            creating: async_lock::Mutex::new(()),
            clock,
        });
        glommio::spawn_local(service.clone().drive(log)).detach();
        glommio::spawn_local(service.clone().tick_forever()).detach();
        Ok(service)
    }

    /// This voter's node id.
    #[must_use]
    pub fn id(&self) -> u32 {
        u32::try_from(self.id.0).unwrap_or(u32::MAX)
    }

    /// The applied metadata, encoded, with its version.
    #[must_use]
    pub fn encoded_state(&self) -> (u64, Vec<u8>) {
        let node = self.node.borrow();
        (node.state().version(), node.state().encode())
    }

    /// The applied metadata version.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.node.borrow().state().version()
    }

    /// The controller leader as this node knows it.
    #[must_use]
    pub fn leader(&self) -> Option<u32> {
        self.node
            .borrow()
            .leader_id()
            .and_then(|leader| u32::try_from(leader.0).ok())
    }

    /// Whether this node leads.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.node.borrow().is_leader() && self.halted.borrow().is_none()
    }

    /// Hands a raft message from another voter to the node.
    ///
    /// # Errors
    /// `INVALID_REQUEST` for a message that does not decode.
    pub fn step(&self, bytes: &[u8]) -> Result<(), ErrorCode> {
        let stepped = self.node.borrow_mut().step(bytes);
        self.work.notify(1);
        stepped.map_err(|error| {
            tracing::debug!(%error, "raft message refused");
            ErrorCode::InvalidRequest
        })
    }

    /// Waits until the applied version passes `known` or `wait` elapses;
    /// returns the version then.
    pub async fn wait_for_version(&self, known: u64, wait: Duration) -> u64 {
        wait_until(&self.applied, Instant::now() + wait, || {
            self.version() > known
        })
        .await;
        self.version()
    }

    /// Proposes `command` (leader only) and waits for it to apply.
    ///
    /// # Errors
    /// [`ControllerRequestError`]: not the leader, refused by the state
    /// machine, or lost in a leader change (retriable).
    pub async fn propose(&self, command: Command) -> Result<Outcome, ControllerRequestError> {
        if !self.is_leader() {
            return Err(ControllerRequestError::NotController {
                leader: self.leader(),
            });
        }
        let id = self.propose_now(&command).await?;
        let (sender, receiver) = oneshot::channel();
        self.waiting.borrow_mut().insert(id, sender);
        self.work.notify(1);
        let timeout = glommio::timer::sleep(PROPOSAL_TIMEOUT);
        let outcome = match futures::future::select(receiver, Box::pin(timeout)).await {
            futures::future::Either::Left((Ok(outcome), _)) => outcome,
            futures::future::Either::Left((Err(_), _)) | futures::future::Either::Right(_) => {
                self.waiting.borrow_mut().remove(&id);
                ProposalOutcome::Unknown
            }
        };
        match outcome {
            ProposalOutcome::Applied(outcome) => Ok(outcome),
            ProposalOutcome::Refused(error) => Err(refused(&error)),
            ProposalOutcome::Lost | ProposalOutcome::Unknown => {
                Err(ControllerRequestError::NotController {
                    leader: self.leader(),
                })
            }
        }
    }

    /// Proposes, waiting out a Ready being handled (the node takes no
    /// proposal between `ready` and `advance`).
    async fn propose_now(&self, command: &Command) -> Result<ProposalId, ControllerRequestError> {
        let deadline = Instant::now() + PROPOSAL_TIMEOUT;
        loop {
            let listener = self.advanced.listen();
            let proposed = self.node.borrow_mut().propose(command);
            match proposed {
                Ok(id) => return Ok(id),
                Err(ProposeError::ReadyInProgress) if Instant::now() < deadline => {
                    let _woken =
                        futures::future::select(listener, Box::pin(glommio::timer::sleep(TICK)))
                            .await;
                }
                Err(ProposeError::NotLeader { .. }) => {
                    return Err(ControllerRequestError::NotController {
                        leader: self.leader(),
                    });
                }
                Err(error) => {
                    return Err(ControllerRequestError::refused(
                        ErrorCode::NotController,
                        format!("the controller cannot take the change now ({error}); retry"),
                    ));
                }
            }
        }
    }

    /// Registers a broker (leader only).
    ///
    /// # Errors
    /// See [`ControllerService::propose`].
    pub async fn register(&self, command: Command) -> Result<(), ControllerRequestError> {
        let Command::RegisterBroker { node, .. } = &command else {
            return Err(ControllerRequestError::refused(
                ErrorCode::InvalidRequest,
                "not a registration",
            ));
        };
        let node = *node;
        self.propose(command).await?;
        LeaderWork::registered(self, node, self.version());
        Ok(())
    }

    /// Records a heartbeat (leader only) and returns whether the broker is
    /// fenced. Unfences a fenced broker that caught up.
    ///
    /// # Errors
    /// `NOT_CONTROLLER`, or `STALE_BROKER_INCARNATION` when the broker must
    /// register again (unknown, or an older process).
    pub fn heartbeat(
        self: &Rc<Self>,
        node: NodeId,
        incarnation: u64,
        metadata_version: u64,
    ) -> Result<bool, ControllerRequestError> {
        if !self.is_leader() {
            return Err(ControllerRequestError::NotController {
                leader: self.leader(),
            });
        }
        LeaderWork::heartbeat(self, node, incarnation, metadata_version)
            .map(|heartbeat| heartbeat.fenced)
            .map_err(|refusal| {
                ControllerRequestError::refused(
                    ErrorCode::StaleBrokerIncarnation,
                    refusal.to_string(),
                )
            })
    }

    /// `node` (process `incarnation`) is shutting down (leader only):
    /// fences it now and keeps it fenced, so that its leaderships move
    /// while it still replicates (see [`LeaderWork::leave`]).
    ///
    /// # Errors
    /// `NOT_CONTROLLER`, or `STALE_BROKER_INCARNATION` when that process is
    /// not the registered one.
    pub fn leave(
        self: &Rc<Self>,
        node: NodeId,
        incarnation: u64,
    ) -> Result<(), ControllerRequestError> {
        if !self.is_leader() {
            return Err(ControllerRequestError::NotController {
                leader: self.leader(),
            });
        }
        LeaderWork::leave(self, node, incarnation).map_err(|refusal| {
            ControllerRequestError::refused(ErrorCode::StaleBrokerIncarnation, refusal.to_string())
        })
    }

    /// The creation of `topic` as this leader would propose it: placed
    /// over the live brokers and checked against the metadata by the state
    /// machine's own rules. Changes nothing (`validate_only` requests stop
    /// here).
    ///
    /// # Errors
    /// `NOT_CONTROLLER`; the state machine's refusal (name, settings,
    /// existing topic); `INVALID_REPLICATION_FACTOR` when there are not
    /// enough live brokers.
    pub fn plan_topic(&self, topic: &NewTopic) -> Result<Command, ControllerRequestError> {
        if !self.is_leader() {
            return Err(ControllerRequestError::NotController {
                leader: self.leader(),
            });
        }
        let node = self.node.borrow();
        let state = node.state();
        // 0 asks for the default: three replicas where there are three
        // brokers (C2 needs a majority of three to survive one loss).
        let replication_factor = match topic.replication_factor {
            0 => u16::try_from(state.brokers().len().clamp(1, 3)).unwrap_or(3),
            chosen => chosen,
        };
        state
            .check_new_topic(&topic.name, topic.internal, &topic.config)
            .map_err(|error| refused(&error))?;
        // Before the placement, which costs more; the state machine checks
        // again when the command applies.
        if let Some(owner) = &topic.owner {
            state
                .check_owner_limits(owner, topic.partitions)
                .map_err(|error| refused(&error))?;
        }
        // The cluster's own topics are small and it cannot work without
        // them: they count against the limit but are never refused by it.
        let per_shard = if topic.internal {
            u32::MAX
        } else {
            self.partitions_per_shard_max
        };
        let assignments = place_within(
            state.brokers().values(),
            topic.partitions,
            replication_factor,
            &PlacementLoad::from_state(state),
            per_shard,
        )
        .map_err(|error| {
            let code = match error {
                PlacementError::InvalidPartitions(_) => ErrorCode::InvalidPartitions,
                PlacementError::InvalidReplicationFactor { .. } => {
                    ErrorCode::InvalidReplicationFactor
                }
                PlacementError::PartitionLimit { .. } => ErrorCode::PartitionLimitReached,
            };
            ControllerRequestError::refused(code, error.to_string())
        })?;
        let command = Command::CreateTopic {
            name: topic.name.clone(),
            internal: topic.internal,
            config: topic.config.clone(),
            assignments,
            created_at_ms: self.clock.now().0,
            owner: topic.owner.clone(),
        };
        state.check(&command).map_err(|error| refused(&error))?;
        Ok(command)
    }

    /// Creates a topic (leader only) as [`ControllerService::plan_topic`]
    /// plans it; returns its id.
    ///
    /// # Errors
    /// As [`ControllerService::plan_topic`] and
    /// [`ControllerService::propose`].
    pub async fn create_topic(&self, topic: &NewTopic) -> Result<u64, ControllerRequestError> {
        let _creating = self.creating.lock().await;
        let command = self.plan_topic(topic)?;
        match self.propose(command).await? {
            Outcome::TopicCreated { topic_id } => Ok(topic_id.0),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes a topic by name (leader only).
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; `UNKNOWN_TOPIC_OR_PARTITION`;
    /// `INTERNAL_TOPIC` for `__groups` and `__audit`.
    pub async fn delete_topic(&self, name: &str) -> Result<(), ControllerRequestError> {
        let command = {
            let node = self.node.borrow();
            let topic_id = node
                .state()
                .topic_by_name(name)
                .map(|topic| topic.id)
                .ok_or_else(|| {
                    ControllerRequestError::refused(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("topic {name:?} does not exist"),
                    )
                })?;
            let command = Command::DeleteTopic { topic_id };
            node.state()
                .check(&command)
                .map_err(|error| refused(&error))?;
            command
        };
        self.propose(command).await?;
        Ok(())
    }

    /// Checks `command` against the applied state, so that a request the
    /// state machine would refuse costs no log entry, then proposes it as
    /// [`ControllerService::propose`] does.
    ///
    /// # Errors
    /// The state machine's refusal, or as [`ControllerService::propose`].
    async fn propose_checked(&self, command: Command) -> Result<Outcome, ControllerRequestError> {
        self.node
            .borrow()
            .state()
            .check(&command)
            .map_err(|error| refused(&error))?;
        self.propose(command).await
    }

    /// Creates a user or replaces its credentials (leader only); returns
    /// whether the user is new.
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; the state machine's refusal of
    /// a bad name or credential.
    pub async fn put_user(
        &self,
        name: String,
        credentials: Vec<StoredCredential>,
    ) -> Result<bool, ControllerRequestError> {
        let command = Command::PutUser { name, credentials };
        match self.propose_checked(command).await? {
            Outcome::UserPut { created } => Ok(created),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes a user (leader only).
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; `USER_NOT_FOUND`.
    pub async fn delete_user(&self, name: String) -> Result<(), ControllerRequestError> {
        let command = Command::DeleteUser { name };
        match self.propose_checked(command).await? {
            Outcome::UserDeleted => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Adds or removes an access rule, or sets or removes a quota (leader
    /// only); for an add or a set, whether the rule or entity is new.
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; `ACL_NOT_FOUND`,
    /// `QUOTA_NOT_FOUND`, or the state machine's refusal of a malformed
    /// rule or quota.
    pub async fn alter_access(&self, command: Command) -> Result<bool, ControllerRequestError> {
        match self.propose_checked(command).await? {
            Outcome::AclPut { created } | Outcome::QuotaPut { created } => Ok(created),
            Outcome::AclDeleted | Outcome::QuotaDeleted => Ok(false),
            other => Err(unexpected(&other)),
        }
    }

    /// Moves the leadership of `partition` of `topic_id` to `to` (the
    /// preferred replica when `None`), if that broker can lead: a live,
    /// in-sync replica not in maintenance. Asks the election bookkeeping
    /// for a transfer (see
    /// [`super::election::ElectionBook::request_transfer`]) and waits for
    /// its round; returns the new leader.
    ///
    /// # Errors
    /// `NOT_CONTROLLER`; `UNKNOWN_TOPIC_OR_PARTITION`; `INVALID_REQUEST`
    /// for a broker that holds no replica; `BROKER_FENCED`,
    /// `BROKER_IN_MAINTENANCE` or `REPLICA_NOT_IN_SYNC` for one that
    /// cannot lead now; `REPLICA_NOT_IN_SYNC` as well when another
    /// replica's longer log won the round; `REQUEST_TIMED_OUT` when no
    /// round could run (the target or a majority of the other replicas
    /// unreachable).
    pub async fn elect_leader(
        self: &Rc<Self>,
        topic_id: corelog_controller::TopicId,
        partition: u32,
        to: Option<NodeId>,
    ) -> Result<NodeId, ControllerRequestError> {
        if !self.is_leader() {
            return Err(ControllerRequestError::NotController {
                leader: self.leader(),
            });
        }
        let (to, name, leads_already) = self.transfer_target(topic_id, partition, to)?;
        if leads_already {
            return Ok(to);
        }
        LeaderWork::request_transfer(self, topic_id, partition, to);
        let deadline = Instant::now() + self.leader_work.transfer_timeout();
        let pending = || self.leader_work.transfer_pending(topic_id, partition) == Some(to);
        let leader = || {
            self.node
                .borrow()
                .state()
                .topics()
                .get(&topic_id)
                .and_then(|topic| topic.partitions.get(partition as usize))
                .and_then(|record| record.leader)
        };
        // The round ends its request only after its result applied, so
        // a lost round is seen by looking again shortly, not by a wake-up.
        while pending() && leader() != Some(to) && Instant::now() < deadline {
            let next = (Instant::now() + TRANSFER_POLL).min(deadline);
            wait_until(&self.applied, next, || leader() == Some(to)).await;
        }
        match leader() {
            Some(leader) if leader == to => Ok(to),
            _ if pending() => Err(ControllerRequestError::refused(
                ErrorCode::RequestTimedOut,
                format!(
                    "no election could move {name} to broker {to}: it or a majority of the other replicas did not answer"
                ),
            )),
            leader => Err(ControllerRequestError::refused(
                ErrorCode::ReplicaNotInSync,
                format!(
                    "the election for {name} was won by broker {}: its log was longer than broker {to}'s",
                    leader.map_or_else(|| "none".to_owned(), |leader| leader.to_string())
                ),
            )),
        }
    }

    /// The broker a transfer of `partition` of `topic_id` goes to (`to`,
    /// or the preferred replica), the partition's name, and whether it
    /// leads already, once checked that it can lead.
    fn transfer_target(
        &self,
        topic_id: corelog_controller::TopicId,
        partition: u32,
        to: Option<NodeId>,
    ) -> Result<(NodeId, String, bool), ControllerRequestError> {
        let node = self.node.borrow();
        let state = node.state();
        let unknown = || {
            ControllerRequestError::refused(
                ErrorCode::UnknownTopicOrPartition,
                format!("topic id {topic_id} has no partition {partition}"),
            )
        };
        let topic = state.topics().get(&topic_id).ok_or_else(unknown)?;
        let record = topic
            .partitions
            .get(partition as usize)
            .ok_or_else(unknown)?;
        let name = format!("{}/{partition}", topic.name);
        let to = match to {
            Some(to) => to,
            None => record.replicas.first().ok_or_else(unknown)?.node,
        };
        if !record.replicas.iter().any(|replica| replica.node == to) {
            let replicas: Vec<String> = record
                .replicas
                .iter()
                .map(|replica| replica.node.to_string())
                .collect();
            return Err(ControllerRequestError::refused(
                ErrorCode::InvalidRequest,
                format!(
                    "broker {to} holds no replica of {name}; its replicas are on brokers {}",
                    replicas.join(",")
                ),
            ));
        }
        match state.brokers().get(&to) {
            None => {
                return Err(ControllerRequestError::refused(
                    ErrorCode::BrokerFenced,
                    format!("broker {to} is not registered; it cannot lead {name}"),
                ));
            }
            Some(broker) if broker.fenced => {
                return Err(ControllerRequestError::refused(
                    ErrorCode::BrokerFenced,
                    format!("broker {to} is fenced (down or restarting); it cannot lead {name}"),
                ));
            }
            Some(broker) if broker.maintenance => {
                return Err(ControllerRequestError::refused(
                    ErrorCode::BrokerInMaintenance,
                    format!("broker {to} is in maintenance; it cannot lead {name}"),
                ));
            }
            Some(_) => {}
        }
        if record.leader == Some(to) {
            return Ok((to, name, true));
        }
        let now = Instant::now();
        let in_sync = self
            .in_sync
            .borrow()
            .in_sync(state, topic_id, partition, record, now);
        if in_sync.is_some_and(|in_sync| !in_sync.contains(&to)) {
            return Err(ControllerRequestError::refused(
                ErrorCode::ReplicaNotInSync,
                format!("broker {to} is not in sync for {name}; it would lose the election"),
            ));
        }
        Ok((to, name, false))
    }

    /// Starts moving `partition` of `topic_id` to the brokers `nodes`
    /// (preferred leader first; leader only): a broker that holds a replica
    /// keeps its shard, a new one gets shard `partition % shards`. The
    /// election rounds run the move's steps from here on.
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; `UNKNOWN_TOPIC_OR_PARTITION`;
    /// `REASSIGNMENT_IN_PROGRESS`; `INVALID_REQUEST` for an unknown or
    /// repeated broker, or a target equal to the current set;
    /// `BROKER_FENCED`.
    pub async fn start_reassignment(
        self: &Rc<Self>,
        topic_id: TopicId,
        partition: u32,
        nodes: &[NodeId],
        throttle_bytes_per_s: u64,
    ) -> Result<(), ControllerRequestError> {
        let target = {
            let node = self.node.borrow();
            let state = node.state();
            let record = state
                .topics()
                .get(&topic_id)
                .and_then(|topic| topic.partitions.get(partition as usize))
                .ok_or_else(|| {
                    ControllerRequestError::refused(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("topic {topic_id} has no partition {partition}"),
                    )
                })?;
            reassignment::target_replicas(state, record, nodes)
        };
        let command = Command::StartReassignment {
            topic_id,
            partition,
            target,
            throttle_bytes_per_s,
            started_at_ms: self.clock.now().0,
        };
        match self.propose_checked(command).await? {
            Outcome::ReassignmentStarted { .. } => {
                tracing::info!(%topic_id, partition, ?nodes, throttle_bytes_per_s, "reassignment started");
                Ok(())
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Turns a partition's move back to its original set (leader only).
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; `NO_REASSIGNMENT_IN_PROGRESS`.
    pub async fn cancel_reassignment(
        self: &Rc<Self>,
        topic_id: TopicId,
        partition: u32,
    ) -> Result<(), ControllerRequestError> {
        let command = Command::CancelReassignment {
            topic_id,
            partition,
        };
        match self.propose_checked(command).await? {
            Outcome::ReassignmentCancelled { changed } => {
                tracing::info!(%topic_id, partition, changed, "reassignment cancelled");
                Ok(())
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Puts `node` in maintenance or takes it out (leader only), and starts
    /// the elections that move its leaderships at once. Returns whether it
    /// changed.
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; `BROKER_IN_MAINTENANCE` when
    /// another broker is in maintenance.
    pub async fn set_maintenance(
        self: &Rc<Self>,
        node: NodeId,
        enabled: bool,
    ) -> Result<bool, ControllerRequestError> {
        let command = Command::SetBrokerMaintenance { node, enabled };
        match self.propose_checked(command).await? {
            Outcome::BrokerMaintenance { changed, .. } => {
                if changed {
                    tracing::info!(%node, enabled, "broker maintenance changed");
                    LeaderWork::run_elections(self);
                }
                Ok(changed)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Starts decommissioning `node` (`plan`) or recommissions it (leader
    /// only), and starts the first moves off it at once. Returns how many
    /// moves a recommission turned back.
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; `INVALID_REQUEST` when too few
    /// brokers would stay.
    pub async fn set_decommission(
        self: &Rc<Self>,
        node: NodeId,
        plan: Option<Decommission>,
    ) -> Result<u32, ControllerRequestError> {
        let command = Command::SetBrokerDecommission {
            node,
            decommission: plan,
        };
        match self.propose_checked(command).await? {
            Outcome::BrokerDecommission {
                changed, cancelled, ..
            } => {
                if changed {
                    tracing::info!(%node, ?plan, cancelled, "broker decommission changed");
                    LeaderWork::start_decommission_moves(self);
                }
                Ok(cancelled)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Applies a leader's resignation (leader only); returns whether the
    /// partition became leaderless.
    ///
    /// # Errors
    /// See [`ControllerService::propose`].
    pub async fn resign_leader(&self, command: Command) -> Result<bool, ControllerRequestError> {
        match self.propose(command).await? {
            Outcome::LeaderResigned { changed } => {
                if changed {
                    // Elect at once rather than at the next tick.
                    self.work.notify(1);
                }
                Ok(changed)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Imports a standalone broker's topics (leader only; the migration).
    ///
    /// # Errors
    /// See [`ControllerService::propose`]; the state machine's refusal of a
    /// conflicting import.
    pub async fn import_topics(&self, command: Command) -> Result<u32, ControllerRequestError> {
        match self.propose_checked(command).await? {
            Outcome::TopicsImported { imported } => Ok(imported),
            other => Err(unexpected(&other)),
        }
    }

    /// Takes a leader's report of the partitions it leads (leader only).
    ///
    /// # Errors
    /// `NOT_CONTROLLER`, or `STALE_BROKER_INCARNATION` for a process that
    /// must register (again).
    pub fn partition_report(
        &self,
        node: NodeId,
        incarnation: u64,
        partitions: &[LedPartitionV1],
    ) -> Result<(), ControllerRequestError> {
        if !self.is_leader() {
            return Err(ControllerRequestError::NotController {
                leader: self.leader(),
            });
        }
        let node_ref = self.node.borrow();
        self.in_sync
            .borrow_mut()
            .record(
                node_ref.state(),
                node,
                incarnation,
                partitions,
                Instant::now(),
            )
            .map_err(|refusal| {
                ControllerRequestError::refused(
                    ErrorCode::StaleBrokerIncarnation,
                    refusal.to_string(),
                )
            })
    }

    /// This voter's Raft term and commit index.
    #[must_use]
    pub fn raft_position(&self) -> (u64, u64) {
        let node = self.node.borrow();
        (node.term(), node.commit_index())
    }

    /// The leader's view of the cluster, for `DescribeCluster` and the
    /// health gauges; `None` unless this node leads.
    #[must_use]
    pub fn leader_view(&self) -> Option<LeaderView<'_>> {
        self.is_leader().then(|| LeaderView {
            sessions: self.leader_work.sessions(),
            in_sync: self.in_sync.borrow(),
            now: Instant::now(),
        })
    }

    /// Every partition's health from this leader's view; `None` unless
    /// this node leads.
    #[must_use]
    pub fn partition_health(&self) -> Option<PartitionHealth> {
        let view = self.leader_view()?;
        let node = self.node.borrow();
        Some(view.health(node.state()))
    }

    /// The applied metadata (a copy).
    #[must_use]
    pub fn state(&self) -> corelog_controller::MetadataState {
        self.node.borrow().state().clone()
    }

    /// Woken whenever the applied metadata version moves.
    #[must_use]
    pub fn applied_signal(&self) -> &Event {
        &self.applied
    }

    /// Reserves `count` producer ids (leader only); returns the first.
    ///
    /// # Errors
    /// See [`ControllerService::propose`].
    pub async fn allocate_producer_ids(&self, count: u32) -> Result<i64, ControllerRequestError> {
        match self.propose(Command::AllocateProducerIds { count }).await? {
            Outcome::ProducerIdsAllocated { start, .. } => Ok(start),
            other => Err(unexpected(&other)),
        }
    }

    async fn tick_forever(self: Rc<Self>) {
        loop {
            glommio::timer::sleep(TICK).await;
            if self.halted.borrow().is_some() {
                return;
            }
            self.node.borrow_mut().tick();
            self.work.notify(1);
            if self.is_leader() {
                LeaderWork::tick(&self);
                self.ensure_internal_topics();
            }
        }
    }

    /// The topics the cluster creates for itself (`__groups`, `__audit`),
    /// created by the leader once enough brokers are up for their full
    /// replication factor.
    pub fn set_internal_topics(&self, topics: Vec<InternalTopicSpec>) {
        *self.internal_topics.borrow_mut() = topics;
    }

    /// Leader: creates the internal topics that do not exist yet, with
    /// replication factor `min(3, voters)`, once that many brokers are
    /// registered and unfenced (a replica set placed on fewer would stay
    /// under-replicated for good).
    fn ensure_internal_topics(self: &Rc<Self>) {
        if self.creating_internal.get() {
            return;
        }
        let replication_factor = self.voters.len().min(3);
        let missing: Vec<InternalTopicSpec> = {
            let node = self.node.borrow();
            let state = node.state();
            let live = state
                .brokers()
                .values()
                .filter(|broker| !broker.fenced)
                .count();
            if live < replication_factor {
                return;
            }
            self.internal_topics
                .borrow()
                .iter()
                .filter(|topic| state.topic_by_name(&topic.name).is_none())
                .cloned()
                .collect()
        };
        if missing.is_empty() {
            return;
        }
        self.creating_internal.set(true);
        let service = self.clone();
        glommio::spawn_local(async move {
            for topic in missing {
                let name = topic.name.clone();
                let new = NewTopic {
                    name: topic.name,
                    internal: true,
                    partitions: topic.partitions,
                    replication_factor: u16::try_from(replication_factor).unwrap_or(3),
                    config: topic.config,
                    owner: None,
                };
                match service.create_topic(&new).await
                {
                    Ok(id) => tracing::info!(topic = %name, id, replication_factor, "internal topic created"),
                    Err(error) => tracing::debug!(topic = %name, %error, "internal topic not created yet; the next tick retries"),
                }
            }
            service.creating_internal.set(false);
        })
        .detach();
    }

    async fn drive(self: Rc<Self>, mut log: RaftLogFile) {
        loop {
            let listener = self.work.listen();
            if let Err(error) = handle_readies(&self, &mut log).await {
                tracing::error!(%error, "controller stopped: this node no longer takes part in the controller quorum; restart it after fixing the cause");
                *self.halted.borrow_mut() = Some(error);
                self.applied.notify(usize::MAX);
                for (_, waiter) in std::mem::take(&mut *self.waiting.borrow_mut()) {
                    let _answered = waiter.send(ProposalOutcome::Unknown);
                }
                return;
            }
            listener.await;
        }
    }

    fn send(self: &Rc<Self>, message: OutboundMessage) {
        let Some(addr) = self.voters.get(&message.to).copied() else {
            tracing::error!(to = %message.to, "raft message to a node that is not a voter");
            return;
        };
        let service = self.clone();
        let peers = self.peers.clone();
        let from = u32::try_from(self.id.0).unwrap_or(u32::MAX);
        glommio::spawn_local(async move {
            let request = ControllerRaftRequest {
                from,
                to: u32::try_from(message.to.0).unwrap_or(u32::MAX),
                message_len: u32::try_from(message.bytes.len()).unwrap_or(u32::MAX),
            };
            let delivered = peers
                .call(addr, &request, &message.bytes, RAFT_SEND_TIMEOUT)
                .await
                .is_ok_and(|answer| answer.message.error_code == ErrorCode::None.code());
            let mut node = service.node.borrow_mut();
            if !delivered {
                node.report_unreachable(message.to);
            }
            if message.carries_snapshot {
                node.report_snapshot(message.to, delivered);
            }
        })
        .detach();
    }
}

/// The Ready loop's shell: sends over the inter-broker RPC, answers the
/// waiting proposals, wakes the waiters of `advanced` and `applied`.
impl ReadyHost for Rc<ControllerService> {
    fn node(&self) -> &RefCell<ControllerNode> {
        &self.node
    }

    fn send(&self, message: OutboundMessage) {
        ControllerService::send(self, message);
    }

    fn resolve(&self, resolved: Resolved) {
        if let Some(waiter) = self.waiting.borrow_mut().remove(&resolved.id) {
            let _answered = waiter.send(resolved.outcome);
        }
    }

    fn not_leading(&self) {
        self.leader_work.stop_leading();
        self.in_sync.borrow_mut().clear();
    }

    fn advanced(&self, applied_moved: bool) {
        self.advanced.notify(usize::MAX);
        if applied_moved {
            self.applied.notify(usize::MAX);
        }
    }
}

impl LeaderHost for ControllerService {
    fn with_node<R>(&self, read: impl FnOnce(&ControllerNode) -> R) -> R {
        read(&self.node.borrow())
    }

    fn executor(&self) -> &dyn Executor {
        &GlommioExecutor
    }

    fn leader_work(&self) -> &LeaderWork {
        &self.leader_work
    }

    fn wall_clock_ms(&self) -> i64 {
        self.clock.now().0
    }

    fn move_reports(
        &self,
        state: &MetadataState,
        now: Instant,
    ) -> BTreeMap<(TopicId, u32), MoveReport> {
        self.in_sync.borrow().move_reports(state, now)
    }
}

/// Election rounds run over the inter-broker RPC and Raft.
impl RoundHost for ControllerService {
    fn query<'a>(
        &'a self,
        due: &'a DueElection,
        target: &'a QueryTarget,
    ) -> LocalBoxFuture<'a, Option<QueryAnswer>> {
        Box::pin(async move {
            let request = due.query_request();
            let Some(addr) = broker_addr(&target.host, target.port) else {
                tracing::warn!(host = %target.host, port = target.port, "cannot resolve a replica's broker address");
                return None;
            };
            match self
                .peers
                .call_node(target.replica.0, addr, &request, &[], QUERY_TIMEOUT)
                .await
            {
                Ok(answer) => QueryAnswer::from_wire(
                    due.partition_id(),
                    due.new_epoch,
                    target.replica,
                    &answer.message,
                )
                .ok(),
                Err(error) => {
                    tracing::debug!(replica = %target.replica, %error, "replica query failed");
                    None
                }
            }
        })
    }

    fn current_epoch(&self, due: &DueElection) -> Option<LeaderEpoch> {
        if !self.is_leader() {
            return None;
        }
        self.node
            .borrow()
            .state()
            .topics()
            .get(&due.topic_id)
            .and_then(|topic| topic.partitions.get(due.partition as usize))
            .map(|record| record.leader_epoch)
    }

    fn propose(&self, command: Command) -> LocalBoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            ControllerService::propose(self, command)
                .await
                .map(|_| ())
                .map_err(|error| error.to_string())
        })
    }
}

/// A registered broker's address. Brokers register an IP address in
/// practice; a name is resolved by the system resolver, which blocks the
/// executor for as long as the lookup takes.
fn broker_addr(host: &str, port: u16) -> Option<SocketAddr> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Some(SocketAddr::new(ip, port));
    }
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .ok()
        .and_then(|mut addrs| addrs.next())
}

fn unexpected(outcome: &Outcome) -> ControllerRequestError {
    ControllerRequestError::refused(
        ErrorCode::UnknownServerError,
        format!("unexpected controller outcome {outcome:?}"),
    )
}

/// A refusal of the state machine, as the request is answered.
fn refused(error: &corelog_controller::CommandError) -> ControllerRequestError {
    ControllerRequestError::refused(refusal_code(error), error.to_string())
}

fn refusal_code(error: &corelog_controller::CommandError) -> ErrorCode {
    use corelog_controller::CommandError;
    match error {
        CommandError::StaleIncarnation { .. } => ErrorCode::StaleBrokerIncarnation,
        CommandError::UnknownTopic(_) | CommandError::UnknownPartition { .. } => {
            ErrorCode::UnknownTopicOrPartition
        }
        CommandError::TopicExists(_) => ErrorCode::TopicAlreadyExists,
        CommandError::LimitExceeded(_) => ErrorCode::PrincipalLimitReached,
        CommandError::InvalidTopicName(_) => ErrorCode::InvalidTopicName,
        CommandError::InternalTopic(_) => ErrorCode::InternalTopic,
        CommandError::InvalidConfig { .. } => ErrorCode::InvalidConfig,
        CommandError::InvalidPartitions(_) => ErrorCode::InvalidPartitions,
        CommandError::UnknownUser(_) => ErrorCode::UserNotFound,
        CommandError::UnknownAcl(_) => ErrorCode::AclNotFound,
        CommandError::UnknownQuota(_) => ErrorCode::QuotaNotFound,
        CommandError::MaintenanceBusy { .. } => ErrorCode::BrokerInMaintenance,
        CommandError::BrokerFenced(_) => ErrorCode::BrokerFenced,
        CommandError::ReassignmentInProgress { .. } => ErrorCode::ReassignmentInProgress,
        CommandError::BadReplicaChange {
            reason: corelog_controller::reassignment::ChangeError::NoReassignment,
            ..
        } => ErrorCode::NoReassignmentInProgress,
        _ => ErrorCode::InvalidRequest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_tells_the_client_its_reason_without_the_code_again() {
        let error = ControllerRequestError::refused(
            ErrorCode::InvalidReplicationFactor,
            "replication factor 3 is not possible with 1 live broker(s)",
        );
        assert_eq!(
            error.detail(),
            "replication factor 3 is not possible with 1 live broker(s)"
        );
        assert!(error.to_string().starts_with("INVALID_REPLICATION_FACTOR"));
    }
}
