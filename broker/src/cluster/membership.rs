//! This broker as a cluster member, on shard 0: it registers with the
//! controller leader, heartbeats, follows the metadata log by long-polling
//! the controller, and publishes each new metadata version to its shards.
//! It is also how shard 0 asks the controller for changes (topics,
//! producer ids) on behalf of clients. A single node is a member of its
//! own one-voter cluster, and reaches its controller in-process
//! (`crate::peer`'s loopback) through the same calls.
//!
//! Calls go to the controller leader as last known; a `NOT_CONTROLLER`
//! answer carries the new leader's id, and an unreachable voter makes the
//! call try the following one. While no voter answers as leader (an
//! election right after the cluster starts, or a failover), a call goes
//! round the voters again every [`RETRY_PAUSE`] for up to
//! [`LEADER_WAIT`] before it gives up.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_controller::decommission::{self, Decommission};
use corelog_controller::{BrokerRecord, LeaderEpoch, MetadataState, NodeId, TopicId};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::ConfigEntry;
use corelog_wire::message::Request;
use corelog_wire::message::audit::AUDIT_TOPIC;
use corelog_wire::message::broker_heartbeat::{BrokerHeartbeatRequest, BrokerHeartbeatResponse};
use corelog_wire::message::broker_register::{BrokerRegisterRequest, BrokerRegisterResponse};
use corelog_wire::message::controller_operation::{
    ControllerOp, ControllerOperationRequest, ControllerOperationResponse,
};
use corelog_wire::message::group_records::GROUPS_TOPIC;
use corelog_wire::message::metadata_fetch::{MetadataFetchRequest, MetadataFetchResponse};
use corelog_wire::message::partition_report::{
    LedPartitionV1, PartitionReportRequestV1, PartitionReportResponse, PartitionReportResponseV1,
};
use event_listener::Event;
use rkyv::rancor;

use futures::future::LocalBoxFuture;

use crate::cluster::election::TRANSFER_TIMEOUT;
use crate::executor::wait_until;
use crate::metadata::MetadataSnapshot;
use crate::partition::PartitionError;
use crate::peer::{Answer, PeerError, Peers};

/// Whether the metadata shows a change.
type ShownBy = dyn Fn(&MetadataState) -> bool;

/// What the membership needs of the shard it runs on (shard 0): the
/// cluster layer sits below the runtime, which implements this.
pub trait MemberHost {
    /// Whether the broker is shutting down.
    fn is_stopping(&self) -> bool;
    /// The snapshot the shards work from.
    fn snapshot(&self) -> Arc<MetadataSnapshot>;
    /// Hands `snapshot` to every shard; resolves once all applied it.
    fn publish(&self, snapshot: Arc<MetadataSnapshot>) -> LocalBoxFuture<'_, ()>;
    /// Records whether the controller keeps this broker fenced (a gauge).
    fn set_fenced(&self, fenced: bool);
    /// The partitions this broker leads, on every shard, with their
    /// in-sync replicas.
    fn led_partitions(&self) -> LocalBoxFuture<'_, Vec<LedPartitionV1>>;
}

/// A request to create one topic.
#[derive(Clone, Debug)]
pub struct TopicToCreate {
    /// Name.
    pub name: String,
    /// Partition count.
    pub partitions: u32,
    /// Replication factor asked for (0: the cluster's default).
    pub replication_factor: u16,
    /// Settings as `key=value` entries: the request's over the broker's
    /// defaults. The controller checks them.
    pub config: BTreeMap<String, String>,
    /// The principal whose topic and partition limits it counts against
    /// ([`crate::net::access::Access::limited_principal`]).
    pub owner: Option<String>,
}

/// The outcome for one topic of an admin change.
#[derive(Clone, Debug)]
pub struct TopicOutcome {
    /// The topic.
    pub name: String,
    /// `Ok` or the error with its code.
    pub result: Result<(), PartitionError>,
}

/// Deadline of one controller call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a metadata long-poll waits at the controller.
const METADATA_WAIT_MS: u32 = 2_000;
/// Pause after a failed round over every voter.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long a call keeps going round the voters while none answers as
/// leader. A Raft election takes well under this, so a call made just
/// after the cluster starts or during a failover waits for the new leader
/// instead of failing with `NOT_CONTROLLER`.
const LEADER_WAIT: Duration = Duration::from_secs(5);
/// How often a broker reports the partitions it leads, with their in-sync
/// replicas, to the controller leader.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// How long reports stay in version 0 after a controller refused version
/// 1 before version 1 is tried again: the refusal may have come from a
/// voter not upgraded yet, or the controller leader may be upgraded since.
const REPORT_V1_RETRY: Duration = Duration::from_secs(60);
/// How long a topic change waits to show up in this broker's metadata.
const PROPAGATION_TIMEOUT: Duration = Duration::from_secs(10);
/// Producer ids reserved from the controller at a time: one metadata change
/// serves this many `InitProducerId` requests (ids of a block not handed
/// out before a restart are never used).
const PRODUCER_ID_BLOCK: u32 = 1024;

/// The answer fields every controller response shares.
trait ControllerAnswer {
    fn error_code(&self) -> u16;
    fn error_message(&self) -> Option<&str>;
    fn leader_hint(&self) -> Option<u32>;
}

macro_rules! controller_answer {
    ($($response:ty),*) => {$(
        impl ControllerAnswer for $response {
            fn error_code(&self) -> u16 {
                self.error_code
            }
            fn error_message(&self) -> Option<&str> {
                self.error_message.as_deref()
            }
            fn leader_hint(&self) -> Option<u32> {
                self.leader_hint
            }
        }
    )*};
}

controller_answer!(
    BrokerRegisterResponse,
    BrokerHeartbeatResponse,
    MetadataFetchResponse,
    ControllerOperationResponse,
    PartitionReportResponse,
    PartitionReportResponseV1
);

/// Why a controller call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemberError {
    /// No voter answered as leader.
    #[error("no controller leader reachable: {0}")]
    NoController(String),
    /// The leader refused the call.
    #[error("{code}: {message}")]
    Refused {
        /// The code.
        code: ErrorCode,
        /// Why.
        message: String,
    },
}

impl From<MemberError> for PartitionError {
    fn from(error: MemberError) -> Self {
        match error {
            MemberError::NoController(message) => PartitionError::new(
                ErrorCode::NotController,
                format!("no controller leader reachable ({message}); retry"),
            ),
            MemberError::Refused { code, message } => PartitionError::new(code, message),
        }
    }
}

/// How long a leaving broker waits for the controller to fence it before
/// it gives up its controlled shutdown: one Raft commit and one metadata
/// fetch, with room for a loaded machine.
const FENCE_WAIT: Duration = Duration::from_secs(2);

/// This broker's membership in the cluster.
pub struct ClusterMember {
    node_id: u32,
    voters: BTreeMap<u32, SocketAddr>,
    peers: Rc<Peers>,
    leader_hint: Cell<Option<u32>>,
    /// Tried next when the hint is unknown or wrong.
    next_voter: Cell<usize>,
    registration: BrokerRegisterRequest,
    heartbeat_interval: Duration,
    state: RefCell<Arc<MetadataState>>,
    fenced: Cell<bool>,
    registered: Cell<bool>,
    /// Which version partition reports go in.
    report_version: Cell<ReportVersion>,
    /// Woken when a new metadata version is published to the shards.
    published: Event,
    /// A single node (no `--controller-voters`): it serves clients only
    /// once its own partitions are led here (see [`ClusterMember::serves`]).
    single_node: bool,
    /// Producer ids of the current block not handed out yet.
    producer_ids: RefCell<Range<i64>>,
    /// Held while a new block is reserved.
    allocating: async_lock::Mutex<()>,
    /// A controlled shutdown began: no more heartbeats, which could
    /// unfence this broker at a controller leader that does not know.
    leaving: Cell<bool>,
}

impl std::fmt::Debug for ClusterMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterMember")
            .field("node_id", &self.node_id)
            .field("leader_hint", &self.leader_hint.get())
            .field("version", &self.state.borrow().version())
            .finish_non_exhaustive()
    }
}

impl ClusterMember {
    /// Builds the member of `node_id`; nothing runs until [`ClusterMember::run`].
    #[must_use]
    pub fn new(
        node_id: u32,
        voters: BTreeMap<u32, SocketAddr>,
        registration: BrokerRegisterRequest,
        heartbeat_interval: Duration,
        single_node: bool,
    ) -> Rc<ClusterMember> {
        Rc::new(ClusterMember {
            node_id,
            voters,
            peers: Peers::new(),
            leader_hint: Cell::new(None),
            next_voter: Cell::new(0),
            registration,
            heartbeat_interval,
            state: RefCell::new(Arc::new(MetadataState::default())),
            fenced: Cell::new(true),
            registered: Cell::new(false),
            report_version: Cell::new(ReportVersion::default()),
            published: Event::new(),
            single_node,
            producer_ids: RefCell::new(0..0),
            allocating: async_lock::Mutex::new(()),
            leaving: Cell::new(false),
        })
    }

    /// Starts registration, heartbeats and metadata following on the
    /// current executor (shard 0).
    pub fn run(self: &Rc<Self>, host: Rc<dyn MemberHost>) {
        glommio::spawn_local(self.clone().keep_registered(host.clone())).detach();
        glommio::spawn_local(self.clone().report_partitions(host.clone())).detach();
        glommio::spawn_local(self.clone().follow_metadata(host)).detach();
    }

    /// The newest metadata this broker knows.
    #[must_use]
    pub fn state(&self) -> Arc<MetadataState> {
        self.state.borrow().clone()
    }

    /// This broker's node id.
    #[must_use]
    pub fn node_id(&self) -> u32 {
        self.node_id
    }

    /// The controller voters' node ids.
    #[must_use]
    pub fn voter_ids(&self) -> Vec<u32> {
        self.voters.keys().copied().collect()
    }

    /// The controller leader as last heard.
    #[must_use]
    pub fn controller_hint(&self) -> Option<u32> {
        self.leader_hint.get()
    }

    /// Whether the controller has this broker fenced (as of the last heartbeat).
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        self.fenced.get()
    }

    /// Calls the controller leader, following hints and trying every voter,
    /// with the usual deadline per attempt.
    async fn call<T>(&self, request: &T) -> Result<Answer<T::Response>, MemberError>
    where
        T: Request,
        T::Response: ControllerAnswer,
        <T::Response as rkyv::Archive>::Archived:
            rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rancor::Error>>,
    {
        self.call_with_timeout(request, CALL_TIMEOUT).await
    }

    /// Calls the controller leader with `timeout` per attempt. Rounds over
    /// the voters (each once, plus one hop per leader hint) until one
    /// answers as leader; after a round without a leader it pauses
    /// [`RETRY_PAUSE`] and goes round again, for up to [`LEADER_WAIT`] in
    /// all (an attempt already under way may run on by its own `timeout`).
    async fn call_with_timeout<T>(
        &self,
        request: &T,
        timeout: Duration,
    ) -> Result<Answer<T::Response>, MemberError>
    where
        T: Request,
        T::Response: ControllerAnswer,
        <T::Response as rkyv::Archive>::Archived:
            rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rancor::Error>>,
    {
        let started = Instant::now();
        let deadline = started + LEADER_WAIT;
        let mut last_error = String::from("no voter tried");
        let mut rounds = 0u32;
        'rounds: loop {
            rounds += 1;
            for _attempt in 0..self.voters.len() * 2 {
                if Instant::now() >= deadline {
                    break 'rounds;
                }
                let target = self.target();
                let Some(addr) = self.voters.get(&target).copied() else {
                    self.leader_hint.set(None);
                    continue;
                };
                match self
                    .peers
                    .call_node(target, addr, request, &[], timeout)
                    .await
                {
                    Ok(answer) => {
                        let code = answer.message.error_code();
                        if code == ErrorCode::NotController.code() {
                            let hint = answer.message.leader_hint().filter(|hint| *hint != target);
                            last_error = format!("voter {target} is not the leader");
                            self.leader_hint.set(hint);
                            if hint.is_none() {
                                self.skip_voter();
                            }
                            continue;
                        }
                        self.leader_hint.set(Some(target));
                        if code != ErrorCode::None.code() {
                            return Err(MemberError::Refused {
                                code: ErrorCode::from_code(code)
                                    .unwrap_or(ErrorCode::UnknownServerError),
                                message: answer
                                    .message
                                    .error_message()
                                    .unwrap_or("refused by the controller")
                                    .to_owned(),
                            });
                        }
                        return Ok(answer);
                    }
                    // Every voter refuses a version it does not speak: the
                    // caller may fall back to an older one.
                    Err(PeerError::Refused { code, .. })
                        if code == ErrorCode::UnsupportedVersion.code() =>
                    {
                        return Err(MemberError::Refused {
                            code: ErrorCode::UnsupportedVersion,
                            message: format!(
                                "controller voter {target} does not speak version {} of {:?}",
                                T::API_VERSION,
                                T::API_KEY
                            ),
                        });
                    }
                    Err(error) => {
                        last_error = error.to_string();
                        if matches!(error, PeerError::Refused { .. }) {
                            tracing::debug!(%error, "controller call refused");
                        }
                        self.forget_unreachable(target);
                    }
                }
            }
            if Instant::now() + RETRY_PAUSE >= deadline {
                break;
            }
            tracing::debug!(round = rounds, %last_error, "no controller leader yet; trying the voters again");
            glommio::timer::sleep(RETRY_PAUSE).await;
        }
        Err(MemberError::NoController(format!(
            "none of the {} controller voters answered as leader within {:.1} s ({rounds} rounds); last: {last_error}",
            self.voters.len(),
            started.elapsed().as_secs_f64(),
        )))
    }

    fn target(&self) -> u32 {
        if let Some(hint) = self.leader_hint.get() {
            return hint;
        }
        let ids: Vec<u32> = self.voters.keys().copied().collect();
        ids[self.next_voter.get() % ids.len()]
    }

    /// `target` did not answer. Calls run concurrently (heartbeats,
    /// reports, metadata polls, operations) and a call can fail on a voter
    /// seconds after another learned the new leader: only a hint that
    /// still names `target` is dropped, so that a late failure never sends
    /// the others back to an unreachable voter (whose timeouts could then
    /// starve heartbeats until the new leader fences this broker).
    fn forget_unreachable(&self, target: u32) {
        match self.leader_hint.get() {
            Some(hint) if hint != target => {}
            Some(_) => {
                self.leader_hint.set(None);
                self.skip_voter();
            }
            None => {
                let ids: Vec<u32> = self.voters.keys().copied().collect();
                if ids.get(self.next_voter.get() % ids.len()) == Some(&target) {
                    self.skip_voter();
                }
            }
        }
    }

    fn skip_voter(&self) {
        self.next_voter.set(self.next_voter.get().wrapping_add(1));
    }

    async fn keep_registered(self: Rc<Self>, host: Rc<dyn MemberHost>) {
        // A stopping cluster member goes silent, so that the controller
        // moves its leaderships at once. A single node's own controller
        // would only fence it and leave every partition leaderless while
        // it closes them (one warning and one Raft entry each): it
        // heartbeats until the process ends.
        while self.single_node || !(host.is_stopping() || self.leaving.get()) {
            if !self.registered.get() {
                match self.call(&self.registration).await {
                    Ok(_) => {
                        tracing::info!(
                            node = self.node_id,
                            incarnation = self.registration.incarnation,
                            "registered with the controller"
                        );
                        self.registered.set(true);
                    }
                    Err(error) => {
                        tracing::info!(%error, "registration with the controller failed; retrying");
                        glommio::timer::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                }
            }
            let heartbeat = BrokerHeartbeatRequest {
                node_id: self.node_id,
                incarnation: self.registration.incarnation,
                metadata_version: self.state.borrow().version(),
            };
            match self.call(&heartbeat).await {
                Ok(answer) => {
                    host.set_fenced(answer.message.fenced);
                    if self.fenced.replace(answer.message.fenced) != answer.message.fenced {
                        tracing::info!(
                            fenced = answer.message.fenced,
                            "controller changed this broker's fence"
                        );
                    }
                }
                Err(MemberError::Refused {
                    code: ErrorCode::StaleBrokerIncarnation,
                    message,
                }) => {
                    tracing::warn!(%message, "the controller does not know this process; registering again");
                    self.registered.set(false);
                    continue;
                }
                Err(error) => tracing::debug!(%error, "heartbeat failed"),
            }
            glommio::timer::sleep(self.heartbeat_interval).await;
        }
    }

    /// Tells the controller leader, every [`REPORT_INTERVAL`], which
    /// replicas of the partitions this broker leads are in sync. Reports
    /// are whole, so one lost costs only freshness; a failed one is retried
    /// at the next interval.
    async fn report_partitions(self: Rc<Self>, host: Rc<dyn MemberHost>) {
        while !host.is_stopping() {
            glommio::timer::sleep(REPORT_INTERVAL).await;
            if !self.registered.get() {
                continue;
            }
            let report = PartitionReportRequestV1 {
                node_id: self.node_id,
                incarnation: self.registration.incarnation,
                partitions: host.led_partitions().await,
            };
            let v0 = self.report_version.get().v0(Instant::now());
            let result = if v0 {
                self.call(&report.version_0()).await.map(|_| ())
            } else {
                self.call(&report).await.map(|_| ())
            };
            match result {
                Err(MemberError::Refused {
                    code: ErrorCode::UnsupportedVersion,
                    ..
                }) if !v0 => {
                    tracing::info!(
                        retry_in = ?REPORT_V1_RETRY,
                        "the controller refused partition report version 1; reporting in version 0"
                    );
                    let mut version = self.report_version.get();
                    version.refused_v1(Instant::now());
                    self.report_version.set(version);
                }
                Err(error) => tracing::debug!(%error, "partition report not taken"),
                Ok(()) => {}
            }
        }
    }

    async fn follow_metadata(self: Rc<Self>, host: Rc<dyn MemberHost>) {
        while !host.is_stopping() {
            let known = self.state.borrow().version();
            let request = MetadataFetchRequest {
                node_id: self.node_id,
                known_version: known,
                max_wait_ms: METADATA_WAIT_MS,
            };
            // The controller holds the request up to METADATA_WAIT_MS, so
            // the deadline covers that wait plus the usual call time.
            let timeout = CALL_TIMEOUT + Duration::from_millis(u64::from(METADATA_WAIT_MS));
            let answer = match self.call_with_timeout(&request, timeout).await {
                Ok(answer) => answer,
                Err(error) => {
                    tracing::debug!(%error, "metadata fetch failed");
                    glommio::timer::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            if answer.message.version <= known {
                continue;
            }
            let state = match MetadataState::decode(&answer.raw) {
                Ok(state) => state,
                Err(error) => {
                    tracing::error!(%error, "controller sent metadata that does not decode");
                    glommio::timer::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            if state.version() <= known {
                continue;
            }
            let state = Arc::new(state);
            let previous = host.snapshot();
            let serving = !self.single_node || self.serves(&state);
            let snapshot = MetadataSnapshot::from_state(
                state.clone(),
                self.leader_hint.get(),
                self.node_id,
                &previous,
                serving,
            );
            host.publish(Arc::new(snapshot)).await;
            // Known only once every shard applied it: a topic change waiting
            // for this version (and a heartbeat reporting it) means served.
            *self.state.borrow_mut() = state;
            self.published.notify(usize::MAX);
        }
    }

    /// Whether a single node can serve clients from `state`: this process
    /// is registered and unfenced, the internal topics exist, and every
    /// partition with a replica here is led here (a restart left them
    /// leaderless until the controller elected this broker again).
    fn serves(&self, state: &MetadataState) -> bool {
        let node = NodeId(u64::from(self.node_id));
        let registered = state.brokers().get(&node).is_some_and(|broker| {
            !broker.fenced && broker.incarnation == self.registration.incarnation
        });
        registered
            && [GROUPS_TOPIC, AUDIT_TOPIC]
                .iter()
                .all(|name| state.topic_by_name(name).is_some())
            && state
                .topics()
                .values()
                .flat_map(|topic| &topic.partitions)
                .filter(|partition| partition.replica_on(node).is_some())
                .all(|partition| partition.leader == Some(node))
    }

    /// Waits until published metadata satisfies `done`, or the timeout.
    async fn wait_for(&self, done: impl Fn(&MetadataState) -> bool) -> bool {
        let deadline = Instant::now() + PROPAGATION_TIMEOUT;
        wait_until(&self.published, deadline, || done(&self.state.borrow())).await
    }

    /// Creates topics through the controller and waits until this broker
    /// sees them (with `validate_only`, only asks the controller to check).
    pub async fn create_topics(
        &self,
        topics: Vec<TopicToCreate>,
        validate_only: bool,
    ) -> Vec<TopicOutcome> {
        let mut outcomes = Vec::with_capacity(topics.len());
        for topic in topics {
            let result = self.create_topic(&topic, validate_only).await;
            outcomes.push(TopicOutcome {
                name: topic.name,
                result,
            });
        }
        outcomes
    }

    async fn create_topic(
        &self,
        topic: &TopicToCreate,
        validate_only: bool,
    ) -> Result<(), PartitionError> {
        let configs: Vec<ConfigEntry> = topic
            .config
            .iter()
            .map(|(key, value)| ConfigEntry {
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        // A topic without an owner goes as the older operation, which a
        // controller of the release before serves.
        let op = match &topic.owner {
            None => ControllerOp::CreateTopic {
                name: topic.name.clone(),
                partitions: topic.partitions,
                replication_factor: topic.replication_factor,
                configs,
                validate_only,
            },
            Some(owner) => ControllerOp::CreateOwnedTopic {
                name: topic.name.clone(),
                partitions: topic.partitions,
                replication_factor: topic.replication_factor,
                configs,
                validate_only,
                owner: owner.clone(),
            },
        };
        let request = ControllerOperationRequest { op };
        let answer = self.call(&request).await?;
        if validate_only {
            return Ok(());
        }
        let topic_id = u64::try_from(answer.message.value).unwrap_or(0);
        let name = topic.name.clone();
        if self
            .wait_for(|state| {
                state
                    .topic_by_name(&name)
                    .is_some_and(|found| found.id.0 == topic_id)
            })
            .await
        {
            Ok(())
        } else {
            Err(PartitionError::new(
                ErrorCode::RequestTimedOut,
                format!(
                    "topic {name:?} was created but this broker has not seen it yet; it will appear shortly"
                ),
            ))
        }
    }

    /// Deletes topics through the controller and waits until this broker
    /// sees them gone.
    pub async fn delete_topics(&self, names: Vec<String>) -> Vec<TopicOutcome> {
        let mut outcomes = Vec::with_capacity(names.len());
        for name in names {
            let request = ControllerOperationRequest {
                op: ControllerOp::DeleteTopic { name: name.clone() },
            };
            let result = match self.call(&request).await {
                Ok(_) => {
                    if self
                        .wait_for(|state| state.topic_by_name(&name).is_none())
                        .await
                    {
                        Ok(())
                    } else {
                        Err(PartitionError::new(
                            ErrorCode::RequestTimedOut,
                            format!(
                                "topic {name:?} was deleted but this broker still sees it; it will disappear shortly"
                            ),
                        ))
                    }
                }
                Err(error) => Err(error.into()),
            };
            outcomes.push(TopicOutcome { name, result });
        }
        outcomes
    }

    /// Changes a user, an access rule or a quota through the controller
    /// (`PutUser`, `DeleteUser`, `PutAcl`, `DeleteAcl`, `PutQuota`,
    /// `DeleteQuota`), and waits until this broker's metadata shows the
    /// change. Returns whether a put created the user, rule or quota.
    ///
    /// # Errors
    /// The controller's refusal (`USER_NOT_FOUND`, `ACL_NOT_FOUND`,
    /// `INVALID_REQUEST`), or `REQUEST_TIMED_OUT` if the change does not
    /// show in time.
    pub async fn alter_security(&self, op: ControllerOp) -> Result<bool, PartitionError> {
        let invalid = |(code, reason)| PartitionError::new(code, reason);
        let (what, shown): (String, Box<ShownBy>) = match &op {
            ControllerOp::PutUser { name, credentials } => {
                let credentials =
                    crate::cluster::credentials::stored(credentials.clone()).map_err(invalid)?;
                let name = name.clone();
                (
                    format!("user {name:?}"),
                    Box::new(move |state| {
                        state
                            .users()
                            .get(&name)
                            .is_some_and(|user| user.credentials == credentials)
                    }),
                )
            }
            ControllerOp::DeleteUser { name } => {
                let name = name.clone();
                (
                    format!("user {name:?}"),
                    Box::new(move |state| !state.users().contains_key(&name)),
                )
            }
            ControllerOp::PutAcl { acl } | ControllerOp::DeleteAcl { acl } => {
                let binding = crate::cluster::access_rules::binding(acl).map_err(invalid)?;
                let added = matches!(op, ControllerOp::PutAcl { .. });
                (
                    format!("ACL {binding}"),
                    Box::new(move |state| state.acls().contains(&binding) == added),
                )
            }
            ControllerOp::PutQuota { quota } => {
                let (entity, limits) =
                    crate::cluster::quota_entries::quota(quota).map_err(invalid)?;
                (
                    format!("the quota of {entity}"),
                    Box::new(move |state| state.quotas().get(&entity) == Some(&limits)),
                )
            }
            ControllerOp::PutQuotaV1 { quota } => {
                let (entity, limits) =
                    crate::cluster::quota_entries::quota_v1(quota).map_err(invalid)?;
                (
                    format!("the quota of {entity}"),
                    Box::new(move |state| state.quotas().get(&entity) == Some(&limits)),
                )
            }
            ControllerOp::DeleteQuota { entity } => {
                let entity = crate::cluster::quota_entries::entity(entity).map_err(invalid)?;
                (
                    format!("the quota of {entity}"),
                    Box::new(move |state| !state.quotas().contains_key(&entity)),
                )
            }
            _ => {
                return Err(PartitionError::new(
                    ErrorCode::InvalidRequest,
                    "not a user, ACL or quota change",
                ));
            }
        };
        let created = self
            .call(&ControllerOperationRequest { op })
            .await?
            .message
            .value
            == 1;
        if self.wait_for(|state| shown(state)).await {
            Ok(created)
        } else {
            Err(PartitionError::new(
                ErrorCode::RequestTimedOut,
                format!("{what} was changed but this broker does not show it yet; it will shortly"),
            ))
        }
    }

    /// A controlled shutdown: asks the controller to fence this broker,
    /// so that its leaderships are elected on other replicas while it
    /// still serves them as a follower, and waits up to `timeout` until
    /// the metadata shows it leads nothing. Returns how many partitions it
    /// still leads (those with no other replica in sync stay leaderless
    /// until it is back).
    ///
    /// # Errors
    /// When the controller cannot be reached or refuses (one of an
    /// earlier release does not know the request), or does not fence this
    /// broker within [`FENCE_WAIT`]: the broker then stops as before, and
    /// its leaderships move once its session expires.
    pub async fn leave(&self, timeout: Duration) -> Result<usize, PartitionError> {
        self.leaving.set(true);
        let request = ControllerOperationRequest {
            op: ControllerOp::LeaveCluster {
                node_id: self.node_id,
                incarnation: self.registration.incarnation,
            },
        };
        self.call(&request).await?;
        let node = NodeId(u64::from(self.node_id));
        // The controller fences at once. If it cannot (no quorum of
        // voters: the rest of the cluster is stopping too), nothing will
        // move, and waiting the whole timeout would only delay the stop.
        let fenced = |state: &MetadataState| {
            state.brokers().get(&node).is_some_and(|broker| {
                broker.fenced && broker.incarnation == self.registration.incarnation
            })
        };
        let fence_deadline = Instant::now() + FENCE_WAIT.min(timeout);
        if !wait_until(&self.published, fence_deadline, || {
            fenced(&self.state.borrow())
        })
        .await
        {
            return Err(PartitionError::new(
                ErrorCode::RequestTimedOut,
                format!(
                    "the controller did not fence this broker within {FENCE_WAIT:?} (is a majority of the controller voters up?)"
                ),
            ));
        }
        let led = |state: &MetadataState| led_by(state, node);
        let deadline = Instant::now() + timeout;
        wait_until(&self.published, deadline, || led(&self.state.borrow()) == 0).await;
        Ok(led(&self.state.borrow()))
    }

    /// Moves the leadership of `partition` of `topic` to broker `to` (the
    /// preferred replica when `None`) through the controller, and waits up
    /// to `timeout` until this broker's metadata shows it. Returns the
    /// leader and its epoch.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION`; the controller's refusal (see
    /// `ControllerService::elect_leader`); `REQUEST_TIMED_OUT` when the
    /// leadership did not move in time.
    pub async fn elect_leader(
        &self,
        topic: &str,
        partition: u32,
        to: Option<u32>,
        timeout: Duration,
    ) -> Result<(NodeId, LeaderEpoch), PartitionError> {
        let topic_id = self.topic_id(topic)?;
        let request = ControllerOperationRequest {
            op: ControllerOp::ElectLeader {
                topic_id: topic_id.0,
                partition,
                to,
            },
        };
        // The controller answers once its round ran.
        let wait = TRANSFER_TIMEOUT + CALL_TIMEOUT;
        let value = self.call_with_timeout(&request, wait).await?.message.value;
        let to = NodeId(u64::try_from(value).unwrap_or_default());
        let leader = |state: &MetadataState| {
            state
                .topics()
                .get(&topic_id)
                .and_then(|record| record.partitions.get(partition as usize))
                .map(|record| (record.leader, record.leader_epoch))
        };
        let deadline = Instant::now() + timeout;
        wait_until(&self.published, deadline, || {
            leader(&self.state.borrow()).is_some_and(|(leader, _)| leader == Some(to))
        })
        .await;
        match leader(&self.state.borrow()) {
            Some((Some(leader), epoch)) if leader == to => Ok((leader, epoch)),
            now => Err(PartitionError::new(
                ErrorCode::RequestTimedOut,
                format!(
                    "the leadership of {topic}/{partition} did not move to broker {to} within {timeout:?} (leader now: {}); broker {to} may have been behind the other replicas: try again",
                    now.and_then(|(leader, _)| leader)
                        .map_or_else(|| "none".to_owned(), |leader| leader.to_string())
                ),
            )),
        }
    }

    /// The id of the topic named `topic` in this broker's metadata.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION`.
    fn topic_id(&self, topic: &str) -> Result<TopicId, PartitionError> {
        self.state
            .borrow()
            .topic_by_name(topic)
            .map(|record| record.id)
            .ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic {topic:?} does not exist"),
                )
            })
    }

    /// Starts moving `partition` of `topic` to the brokers `replicas`
    /// (preferred leader first) through the controller, or with `replicas`
    /// `None` cancels its move, and waits up to `timeout` until this
    /// broker's metadata shows the move started or turned back (or already
    /// over).
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION`; the controller's refusal (see
    /// `ControllerService::start_reassignment`, `cancel_reassignment`);
    /// `REQUEST_TIMED_OUT`.
    pub async fn reassign(
        &self,
        topic: &str,
        partition: u32,
        replicas: Option<Vec<u32>>,
        throttle_bytes_per_s: u64,
        timeout: Duration,
    ) -> Result<(), PartitionError> {
        let topic_id = self.topic_id(topic)?;
        let cancel = replicas.is_none();
        let op = match replicas {
            Some(replicas) => ControllerOp::StartReassignment {
                topic_id: topic_id.0,
                partition,
                replicas,
                throttle_bytes_per_s,
            },
            None => ControllerOp::CancelReassignment {
                topic_id: topic_id.0,
                partition,
            },
        };
        self.call_with_timeout(&ControllerOperationRequest { op }, CALL_TIMEOUT)
            .await?;
        let shows = |state: &MetadataState| {
            let moving = state
                .topics()
                .get(&topic_id)
                .and_then(|record| record.partitions.get(partition as usize))
                .and_then(|record| record.reassignment.as_ref());
            match moving {
                Some(moving) => moving.cancelled == cancel,
                None => true,
            }
        };
        let deadline = Instant::now() + timeout;
        if wait_until(&self.published, deadline, || shows(&self.state.borrow())).await {
            Ok(())
        } else {
            Err(PartitionError::new(
                ErrorCode::RequestTimedOut,
                format!(
                    "the controller took the change of {topic}/{partition}, but this broker's metadata did not show it within {timeout:?}"
                ),
            ))
        }
    }

    /// Puts broker `node` in maintenance or takes it out through the
    /// controller, and waits up to `timeout` until this broker's metadata
    /// shows it and, when enabled, until `node` leads nothing. Returns how
    /// many partitions it still leads (those whose other replicas are no
    /// majority stay with it).
    ///
    /// # Errors
    /// The controller's refusal (`BROKER_IN_MAINTENANCE` when another
    /// broker is in maintenance, `INVALID_REQUEST` for an unknown broker);
    /// `REQUEST_TIMED_OUT` when the change does not show in time.
    pub async fn set_maintenance(
        &self,
        node: u32,
        enabled: bool,
        timeout: Duration,
    ) -> Result<usize, PartitionError> {
        let request = ControllerOperationRequest {
            op: ControllerOp::SetBrokerMaintenance {
                node_id: node,
                enabled,
            },
        };
        self.call(&request).await?;
        let node = NodeId(u64::from(node));
        let deadline = Instant::now() + timeout;
        self.wait_broker_shows(node, "maintenance", deadline, |broker| {
            broker.maintenance == enabled
        })
        .await?;
        let led = |state: &MetadataState| led_by(state, node);
        if enabled {
            wait_until(&self.published, deadline, || led(&self.state.borrow()) == 0).await;
        }
        Ok(led(&self.state.borrow()))
    }

    /// Starts decommissioning broker `node` (`plan`) or recommissions it
    /// (`None`) through the controller, and waits up to `timeout` until
    /// this broker's metadata shows it. Returns, when decommissioning, how
    /// many partitions still hold a replica on `node`; when
    /// recommissioning, how many moves off it were turned back.
    ///
    /// # Errors
    /// The controller's refusal (`INVALID_REQUEST`: an unknown broker, or
    /// too few brokers would stay); `REQUEST_TIMED_OUT`.
    pub async fn set_decommission(
        &self,
        node: u32,
        plan: Option<Decommission>,
        timeout: Duration,
    ) -> Result<u32, PartitionError> {
        let request = ControllerOperationRequest {
            op: ControllerOp::SetBrokerDecommission {
                node_id: node,
                enabled: plan.is_some(),
                throttle_bytes_per_s: plan.map_or(0, |plan| plan.throttle_bytes_per_s),
                max_moves: plan.map_or(0, |plan| plan.max_moves),
            },
        };
        let cancelled = self.call(&request).await?.message.value;
        let node = NodeId(u64::from(node));
        let deadline = Instant::now() + timeout;
        self.wait_broker_shows(node, "decommission", deadline, |broker| {
            broker.decommission == plan
        })
        .await?;
        Ok(if plan.is_some() {
            decommission::remaining(&self.state.borrow(), node).replicas
        } else {
            u32::try_from(cancelled).unwrap_or(0)
        })
    }

    /// Waits until `deadline` for this broker's metadata to show `node`
    /// as `shows` asks, after the controller took a change of its `what`.
    ///
    /// # Errors
    /// `REQUEST_TIMED_OUT` when it does not show in time.
    async fn wait_broker_shows(
        &self,
        node: NodeId,
        what: &str,
        deadline: Instant,
        shows: impl Fn(&BrokerRecord) -> bool,
    ) -> Result<(), PartitionError> {
        let shown = || self.state.borrow().brokers().get(&node).is_some_and(&shows);
        if wait_until(&self.published, deadline, shown).await {
            return Ok(());
        }
        Err(PartitionError::new(
            ErrorCode::RequestTimedOut,
            format!(
                "the {what} of broker {node} was changed but this broker does not show it yet; it will shortly"
            ),
        ))
    }

    /// Tells the controller that this broker can no longer lead partition
    /// `partition` of topic `topic_id` in `epoch` (its log was fenced and
    /// reopened): the partition is elected again under a new epoch.
    ///
    /// # Errors
    /// When the controller cannot be reached or refuses.
    pub async fn resign_leadership(
        &self,
        topic_id: u64,
        partition: u32,
        epoch: LeaderEpoch,
    ) -> Result<(), PartitionError> {
        let request = ControllerOperationRequest {
            op: ControllerOp::ResignLeadership {
                topic_id,
                partition,
                node_id: self.node_id,
                epoch: epoch.0,
            },
        };
        self.call(&request).await?;
        Ok(())
    }

    /// A new producer id from the controller's blocks, or the next epoch of
    /// an existing one.
    ///
    /// # Errors
    /// When the controller cannot be reached or refuses.
    pub async fn init_producer_id(
        &self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(i64, i16), PartitionError> {
        if producer_id >= 0 {
            let epoch = producer_epoch.checked_add(1).ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::InvalidProducerEpoch,
                    "producer epoch exhausted; request a new producer id",
                )
            })?;
            return Ok((producer_id, epoch));
        }
        let _allocating = self.allocating.lock().await;
        if let Some(id) = self.producer_ids.borrow_mut().next() {
            return Ok((id, 0));
        }
        let request = ControllerOperationRequest {
            op: ControllerOp::AllocateProducerIds {
                count: PRODUCER_ID_BLOCK,
            },
        };
        let start = self.call(&request).await?.message.value;
        let end = start.saturating_add(i64::from(PRODUCER_ID_BLOCK));
        *self.producer_ids.borrow_mut() = start.saturating_add(1)..end;
        Ok((start, 0))
    }
}

/// How many partitions `node` leads.
fn led_by(state: &MetadataState, node: NodeId) -> usize {
    state
        .topics()
        .values()
        .flat_map(|topic| &topic.partitions)
        .filter(|partition| partition.leader == Some(node))
        .count()
}

/// The version partition reports go in: 1, or 0 for [`REPORT_V1_RETRY`]
/// after a controller refused 1 (a rolling upgrade).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ReportVersion {
    refused_v1_at: Option<Instant>,
}

impl ReportVersion {
    /// Whether a report sent at `now` goes in version 0.
    fn v0(self, now: Instant) -> bool {
        self.refused_v1_at
            .is_some_and(|at| now.saturating_duration_since(at) < REPORT_V1_RETRY)
    }

    /// A controller refused version 1 at `now`.
    fn refused_v1(&mut self, now: Instant) {
        self.refused_v1_at = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_fall_back_to_version_0_then_try_version_1_again() {
        let start = Instant::now();
        let mut version = ReportVersion::default();
        assert!(!version.v0(start), "version 1 first");
        version.refused_v1(start);
        assert!(version.v0(start));
        assert!(version.v0(start + REPORT_V1_RETRY - Duration::from_millis(1)));
        // Not for ever: the controller may be upgraded since.
        assert!(!version.v0(start + REPORT_V1_RETRY));
    }
}
