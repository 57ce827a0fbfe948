//! One shard: an executor that owns some partitions, serves connections,
//! and talks to the other shards only through [`ShardCommand`]s.
//!
//! A request for a partition owned elsewhere becomes a command to the
//! owner; the reply comes back on a one-shot channel. Nothing on the data
//! path takes a lock. Commands queue in a bounded channel per shard: a full
//! queue answers `QUEUE_FULL` (retriable) rather than waiting unboundedly.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahash::AHashMap;
use bytes::BytesMut;
use corelog_wire::error::ErrorCode;
use corelog_wire::types::{Offset, TimestampMs};
use event_listener::Event;
use futures::channel::oneshot;

use super::authority::MetadataAuthority;
use super::command::{
    GroupRequest, GroupResponse, PartitionId, PartitionReply, ShardCommand, TopicOutcome,
    TopicToCreate,
};
use crate::cluster::ClusterRole;
use crate::config::BrokerConfig;
use crate::group::log::GroupLog;
use crate::group::service::{self, Coordinator, GROUPS_TOPIC};
use crate::metadata::snapshot::ReplicationView;
use crate::metadata::{MetadataSnapshot, ShardId};
use crate::metrics::ShardMetrics;
use crate::partition::{
    OffsetQuery, Partition, PartitionError, PartitionSpec, PartitionSummary, Produced,
};
use crate::peer::Peers;
use crate::replica::{Acks, ReplicatedPartition};
use crate::storage::glommio_disk::GlommioDisk;
use crate::storage::{CacheKey, ReadOutcome, ShardStorage};

/// How often group coordinators expire silent members and complete overdue
/// rebalances: a fraction of the shortest session timeout (1 s).
const GROUP_TICK: Duration = Duration::from_millis(250);

/// A shard's state. Lives on its executor's thread, behind an `Rc`.
pub struct Shard {
    /// This shard, for tasks and callbacks that outlive a borrow.
    pub(super) me: Weak<Shard>,
    /// This shard's index.
    pub id: ShardId,
    /// The broker's settings.
    pub config: Rc<BrokerConfig>,
    /// Metric handles.
    pub metrics: ShardMetrics,
    pub(super) disk: GlommioDisk,
    pub(super) storage: ShardStorage,
    pub(super) partitions: RefCell<AHashMap<PartitionId, Rc<Partition<GlommioDisk>>>>,
    /// Cluster mode: the replicas of replicated partitions placed here.
    pub(super) replicas: RefCell<AHashMap<PartitionId, Rc<ReplicatedPartition<GlommioDisk>>>>,
    /// Connections to other brokers (replication pushes).
    pub(super) brokers: Rc<Peers>,
    /// The shard's start, the origin of the milliseconds replication timers use.
    pub(super) started: Instant,
    /// Group coordinators of the `__groups` partitions this shard owns, by index.
    pub(super) coordinators: RefCell<AHashMap<u32, Rc<Coordinator>>>,
    /// Partitions this shard should own but could not open, with why.
    pub(super) failed: RefCell<AHashMap<PartitionId, String>>,
    snapshot: RefCell<Arc<MetadataSnapshot>>,
    peers: Vec<flume::Sender<ShardCommand>>,
    inbox: flume::Receiver<ShardCommand>,
    authority: Option<MetadataAuthority>,
    /// Shard 0 in cluster mode: the controller role and membership.
    cluster: RefCell<Option<ClusterRole>>,
    /// Connections and requests being served, and a signal when one ends.
    pub connections: Cell<u32>,
    in_flight: Cell<u64>,
    drained: Event,
    /// Notified once when shutdown begins; connections stop reading.
    pub stopping: Event,
    is_stopping: Cell<bool>,
    /// Notified when the first metadata snapshot is applied: until then the
    /// shard does not accept connections, so no client sees a broker that
    /// does not yet know its topics.
    ready: Event,
    is_ready: Cell<bool>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("partitions", &self.partitions.borrow().len())
            .finish_non_exhaustive()
    }
}

/// What a shard is built from.
#[derive(Debug)]
pub struct ShardParts {
    /// Index.
    pub id: ShardId,
    /// Settings.
    pub config: Rc<BrokerConfig>,
    /// Metric handles.
    pub metrics: ShardMetrics,
    /// The shard's disk.
    pub disk: GlommioDisk,
    /// Resources shared by the shard's logs.
    pub storage: ShardStorage,
    /// Senders to every shard, by index (this one included).
    pub peers: Vec<flume::Sender<ShardCommand>>,
    /// This shard's queue.
    pub inbox: flume::Receiver<ShardCommand>,
    /// Shard 0's metadata authority.
    pub authority: Option<MetadataAuthority>,
}

/// Counts a request as in flight until dropped.
#[derive(Debug)]
pub struct InFlight {
    shard: Rc<Shard>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let left = self.shard.in_flight.get() - 1;
        self.shard.in_flight.set(left);
        self.shard.metrics.in_flight_requests.set(left as i64);
        if left == 0 {
            self.shard.drained.notify(usize::MAX);
        }
    }
}

impl Shard {
    /// Assembles a shard.
    #[must_use]
    pub fn new(parts: ShardParts) -> Rc<Shard> {
        Rc::new_cyclic(|me| Shard {
            me: me.clone(),
            id: parts.id,
            config: parts.config,
            metrics: parts.metrics,
            disk: parts.disk,
            storage: parts.storage,
            partitions: RefCell::new(AHashMap::new()),
            replicas: RefCell::new(AHashMap::new()),
            brokers: Peers::new(),
            started: Instant::now(),
            coordinators: RefCell::new(AHashMap::new()),
            failed: RefCell::new(AHashMap::new()),
            snapshot: RefCell::new(Arc::new(MetadataSnapshot::default())),
            peers: parts.peers,
            inbox: parts.inbox,
            authority: parts.authority,
            cluster: RefCell::new(None),
            connections: Cell::new(0),
            in_flight: Cell::new(0),
            drained: Event::new(),
            stopping: Event::new(),
            is_stopping: Cell::new(false),
            ready: Event::new(),
            is_ready: Cell::new(false),
        })
    }

    /// The metadata snapshot this shard works from.
    /// Shard 0 in cluster mode: installs the cluster role.
    pub fn set_cluster(&self, role: ClusterRole) {
        assert!(self.id == 0, "the cluster role lives on shard 0");
        *self.cluster.borrow_mut() = Some(role);
    }

    /// The cluster role (shard 0 in cluster mode).
    #[must_use]
    pub fn cluster(&self) -> Option<ClusterRole> {
        self.cluster.borrow().clone()
    }

    /// Sends a controller API request to shard 0 and awaits its reply.
    ///
    /// # Errors
    /// `QUEUE_FULL` or `LEADER_NOT_AVAILABLE` when shard 0 cannot take it.
    pub async fn forward_cluster(
        &self,
        api_key: corelog_wire::frame::ApiKey,
        body: Vec<u8>,
    ) -> Result<crate::net::Reply, ErrorCode> {
        let (reply, answer) = oneshot::channel();
        self.send_now(
            0,
            ShardCommand::Cluster {
                api_key,
                body,
                reply,
            },
        )
        .map_err(|error| error.code)?;
        answer.await.unwrap_or(Err(ErrorCode::LeaderNotAvailable))
    }

    #[must_use]
    pub fn snapshot(&self) -> Arc<MetadataSnapshot> {
        self.snapshot.borrow().clone()
    }

    /// Resolves once the shard has applied its first metadata snapshot.
    pub async fn wait_ready(&self) {
        while !self.is_ready.get() {
            let listener = self.ready.listen();
            if self.is_ready.get() {
                break;
            }
            listener.await;
        }
    }

    /// Whether shutdown has begun.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.is_stopping.get()
    }

    /// Marks a request in flight until the guard drops.
    #[must_use]
    pub fn begin_request(self: &Rc<Self>) -> InFlight {
        let count = self.in_flight.get() + 1;
        self.in_flight.set(count);
        self.metrics.in_flight_requests.set(count as i64);
        InFlight {
            shard: self.clone(),
        }
    }

    /// Receives and runs commands from other shards until shutdown.
    pub async fn run_inbox(self: Rc<Self>) {
        while let Ok(command) = self.inbox.recv_async().await {
            if let ShardCommand::Shutdown = command {
                self.shutdown().await;
                return;
            }
            // Spawned in arrival order, so commands for one partition start in order.
            glommio::spawn_local(self.clone().handle(command)).detach();
        }
    }

    async fn handle(self: Rc<Self>, command: ShardCommand) {
        match command {
            ShardCommand::Produce {
                partition,
                batch,
                received,
                acks,
                timeout,
                reply,
            } => {
                let result = self
                    .local_produce(partition, batch, received, acks, timeout)
                    .await;
                let _answered = reply.send(result);
            }
            ShardCommand::Read {
                partition,
                offset,
                max_bytes,
                reply,
            } => {
                let _answered = reply.send(self.local_read(partition, offset, max_bytes).await);
            }
            ShardCommand::ListOffset {
                partition,
                query,
                reply,
            } => {
                let _answered = reply.send(self.local_list_offset(partition, query).await);
            }
            ShardCommand::Describe { partition, reply } => {
                let _answered = reply.send(self.owned(partition).map(|owned| owned.summary()));
            }
            ShardCommand::ApplySnapshot { snapshot, reply } => {
                self.apply_snapshot(snapshot).await;
                let _answered = reply.send(());
            }
            ShardCommand::CreateTopics {
                topics,
                validate_only,
                reply,
            } => {
                let _answered = reply.send(self.create_topics(topics, validate_only).await);
            }
            ShardCommand::DeleteTopics { names, reply } => {
                let _answered = reply.send(self.delete_topics(names).await);
            }
            ShardCommand::InitProducerId {
                producer_id,
                producer_epoch,
                reply,
            } => {
                let _answered =
                    reply.send(self.init_producer_id(producer_id, producer_epoch).await);
            }
            ShardCommand::Group {
                partition_index,
                request,
                reply,
            } => {
                let _answered =
                    reply.send(self.local_group_request(partition_index, request).await);
            }
            ShardCommand::ListGroups { reply } => {
                let _answered = reply.send(self.local_groups());
            }
            ShardCommand::Cluster {
                api_key,
                body,
                reply,
            } => {
                let result =
                    crate::net::handlers::cluster_on_shard_zero(&self, api_key, &body).await;
                let _answered = reply.send(result);
            }
            ShardCommand::ReplicaPush {
                partition,
                request,
                raw,
                reply,
            } => {
                let _answered = reply.send(self.local_replica_push(partition, &request, raw).await);
            }
            ShardCommand::ReplicaQuery {
                partition,
                request,
                reply,
            } => {
                let _answered = reply.send(self.local_replica_query(partition, &request).await);
            }
            ShardCommand::Shutdown => {}
        }
    }

    /// Sends a group request to its coordinator's shard and awaits the answer.
    pub async fn group_request(
        self: &Rc<Self>,
        group: &str,
        request: GroupRequest,
    ) -> GroupResponse {
        let partitions = self
            .snapshot()
            .topics
            .get(GROUPS_TOPIC)
            .map_or(0, |view| view.record.partitions);
        if partitions == 0 {
            return GroupResponse::Unavailable(PartitionError::new(
                ErrorCode::CoordinatorNotAvailable,
                "the broker is still starting its group coordinators; retry",
            ));
        }
        let index = service::groups_partition_for(group, partitions);
        let owner = match self.locate(GROUPS_TOPIC, index) {
            Ok((_, owner)) => owner,
            // Another broker leads the group's `__groups` partition: the
            // client finds the coordinator again.
            Err(error) if error.code == ErrorCode::NotLeader => {
                return GroupResponse::Unavailable(PartitionError::new(
                    ErrorCode::NotCoordinator,
                    error.message,
                ));
            }
            Err(error) if error.code == ErrorCode::NotEnoughReplicas => {
                return GroupResponse::Unavailable(PartitionError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    error.message,
                ));
            }
            Err(error) => return GroupResponse::Unavailable(error),
        };
        if owner == self.id {
            return self.local_group_request(index, request).await;
        }
        let (reply, answer) = oneshot::channel();
        let command = ShardCommand::Group {
            partition_index: index,
            request,
            reply,
        };
        if let Err(error) = self.send_now(owner, command) {
            return GroupResponse::Unavailable(error);
        }
        answer.await.unwrap_or_else(|_| {
            GroupResponse::Unavailable(PartitionError::new(
                ErrorCode::CoordinatorNotAvailable,
                "the coordinator's shard stopped",
            ))
        })
    }

    async fn local_group_request(
        self: &Rc<Self>,
        index: u32,
        request: GroupRequest,
    ) -> GroupResponse {
        if let Err(error) = self.check_coordinator_leads(index) {
            return GroupResponse::Unavailable(error);
        }
        let coordinator = self.coordinators.borrow().get(&index).cloned();
        match coordinator {
            Some(coordinator) => service::serve(self, &coordinator, request).await,
            None => GroupResponse::Unavailable(PartitionError::new(
                ErrorCode::CoordinatorNotAvailable,
                "the group coordinator is loading; retry",
            )),
        }
    }

    fn local_groups(&self) -> Vec<(String, &'static str, u32, i32)> {
        self.coordinators
            .borrow()
            .values()
            .flat_map(|coordinator| coordinator.list())
            .collect()
    }

    /// Every group on every shard: (group, state, members, generation).
    pub async fn list_groups(&self) -> Vec<(String, &'static str, u32, i32)> {
        let mut groups = self.local_groups();
        for (index, peer) in self.peers.iter().enumerate() {
            if index == usize::from(self.id) {
                continue;
            }
            let (reply, answer) = oneshot::channel();
            if peer.try_send(ShardCommand::ListGroups { reply }).is_ok()
                && let Ok(listed) = answer.await
            {
                groups.extend(listed);
            }
        }
        groups.sort();
        groups
    }

    /// Sends a command to shard `owner` and awaits the reply.
    async fn ask<T>(
        &self,
        owner: ShardId,
        command: impl FnOnce(PartitionReply<T>) -> ShardCommand,
    ) -> Result<T, PartitionError> {
        let (reply, answer) = oneshot::channel();
        self.send_now(owner, command(reply))?;
        answer.await.unwrap_or_else(|_| {
            Err(PartitionError::new(
                ErrorCode::LeaderNotAvailable,
                "the owning shard stopped",
            ))
        })
    }

    /// The partition's owner and id, or `UNKNOWN_TOPIC_OR_PARTITION`. A
    /// replicated partition is served by its leader only: elsewhere the
    /// answer is `NOT_LEADER` (the client refreshes metadata and goes to
    /// the leader), and while it has no leader `NOT_ENOUGH_REPLICAS`.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION` when the topic or partition does not
    /// exist; `NOT_LEADER` / `NOT_ENOUGH_REPLICAS` as above.
    pub fn locate(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<(PartitionId, ShardId), PartitionError> {
        let snapshot = self.snapshot.borrow();
        let (view, partition_view) = snapshot.partition(topic, partition).ok_or_else(|| {
            PartitionError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("topic {topic:?} has no partition {partition}; create the topic or check its partition count"),
            )
        })?;
        if let Some(replication) = &partition_view.replication {
            check_leads(replication, self.config.node_id, topic, partition)?;
        }
        Ok((
            PartitionId {
                topic_id: view.record.id,
                partition,
            },
            partition_view.owner,
        ))
    }

    pub(super) fn owned(&self, partition: PartitionId) -> Result<Hosted, PartitionError> {
        if let Some(found) = self.replicas.borrow().get(&partition) {
            return Ok(Hosted::Replicated(found.clone()));
        }
        if let Some(found) = self.partitions.borrow().get(&partition) {
            return Ok(Hosted::Standalone(found.clone()));
        }
        if let Some(reason) = self.failed.borrow().get(&partition) {
            return Err(PartitionError::new(ErrorCode::StorageError, reason.clone()));
        }
        Err(PartitionError::new(
            ErrorCode::LeaderNotAvailable,
            "the partition is not open on its shard yet; retry",
        ))
    }

    /// Appends a producer batch to a partition, on whichever shard owns it.
    /// Synchronous up to the point where the batch's offsets are assigned
    /// (or the command is queued to the owner), so calls made in order
    /// append in order.
    pub fn produce(
        self: &Rc<Self>,
        partition: PartitionId,
        owner: ShardId,
        batch: BytesMut,
        received: Instant,
        acks: Acks,
        timeout: Duration,
    ) -> impl Future<Output = Result<Produced, PartitionError>> + use<> {
        enum Route {
            Local(BytesMut),
            Remote(oneshot::Receiver<Result<Produced, PartitionError>>),
            Refused(PartitionError),
        }
        let shard = self.clone();
        let route = if owner == self.id {
            Route::Local(batch)
        } else {
            let (reply, answer) = oneshot::channel();
            let command = ShardCommand::Produce {
                partition,
                batch,
                received,
                acks,
                timeout,
                reply,
            };
            match self.send_now(owner, command) {
                Ok(()) => Route::Remote(answer),
                Err(error) => Route::Refused(error),
            }
        };
        async move {
            match route {
                Route::Local(batch) => {
                    shard
                        .local_produce(partition, batch, received, acks, timeout)
                        .await
                }
                Route::Remote(answer) => answer.await.unwrap_or_else(|_| {
                    Err(PartitionError::new(
                        ErrorCode::LeaderNotAvailable,
                        "the owning shard stopped",
                    ))
                }),
                Route::Refused(error) => Err(error),
            }
        }
    }

    pub(super) fn send_now(
        &self,
        owner: ShardId,
        command: ShardCommand,
    ) -> Result<(), PartitionError> {
        let sender = self.peers.get(usize::from(owner)).ok_or_else(|| {
            PartitionError::new(ErrorCode::UnknownServerError, format!("no shard {owner}"))
        })?;
        sender.try_send(command).map_err(|error| match error {
            flume::TrySendError::Full(_) => PartitionError::new(
                ErrorCode::QueueFull,
                format!(
                    "shard {owner} has {} commands queued; retry",
                    self.config.shard_queue_depth
                ),
            ),
            flume::TrySendError::Disconnected(_) => {
                PartitionError::new(ErrorCode::LeaderNotAvailable, "the broker is shutting down")
            }
        })
    }

    async fn local_produce(
        &self,
        partition: PartitionId,
        batch: BytesMut,
        received: Instant,
        acks: Acks,
        timeout: Duration,
    ) -> Result<Produced, PartitionError> {
        let owned = self.owned(partition)?;
        let bytes = batch.len() as u64;
        let produced = owned.produce(batch, acks, timeout).await?;
        if !produced.duplicate {
            self.metrics
                .records_in
                .inc_by(u64::from(produced.record_count));
            self.metrics.bytes_in.inc_by(bytes);
        }
        self.metrics
            .append_latency
            .observe(received.elapsed().as_secs_f64());
        Ok(produced)
    }

    /// Reads committed batches of a partition, on whichever shard owns it.
    ///
    /// # Errors
    /// The partition's [`PartitionError`].
    pub async fn read(
        &self,
        partition: PartitionId,
        owner: ShardId,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<ReadOutcome, PartitionError> {
        if owner == self.id {
            return self.local_read(partition, offset, max_bytes).await;
        }
        self.ask(owner, |reply| ShardCommand::Read {
            partition,
            offset,
            max_bytes,
            reply,
        })
        .await
    }

    async fn local_read(
        &self,
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<ReadOutcome, PartitionError> {
        self.owned(partition)?.read(offset, max_bytes).await
    }

    /// Looks an offset up, on whichever shard owns the partition.
    ///
    /// # Errors
    /// The partition's [`PartitionError`].
    pub async fn list_offset(
        &self,
        partition: PartitionId,
        owner: ShardId,
        query: OffsetQuery,
    ) -> Result<Option<(Offset, TimestampMs)>, PartitionError> {
        if owner == self.id {
            return self.local_list_offset(partition, query).await;
        }
        self.ask(owner, |reply| ShardCommand::ListOffset {
            partition,
            query,
            reply,
        })
        .await
    }

    async fn local_list_offset(
        &self,
        partition: PartitionId,
        query: OffsetQuery,
    ) -> Result<Option<(Offset, TimestampMs)>, PartitionError> {
        self.owned(partition)?.list_offset(query).await
    }

    /// Summarises a partition, on whichever shard owns it.
    ///
    /// # Errors
    /// The partition's [`PartitionError`].
    pub async fn describe(
        &self,
        partition: PartitionId,
        owner: ShardId,
    ) -> Result<PartitionSummary, PartitionError> {
        if owner == self.id {
            return self.owned(partition).map(|owned| owned.summary());
        }
        self.ask(owner, |reply| ShardCommand::Describe { partition, reply })
            .await
    }

    /// Creates topics through shard 0 and waits until every shard has opened
    /// its partitions.
    pub async fn create_topics(
        &self,
        topics: Vec<TopicToCreate>,
        validate_only: bool,
    ) -> Vec<TopicOutcome> {
        if let Some(role) = self.cluster() {
            return role.member.create_topics(topics, validate_only).await;
        }
        let Some(authority) = &self.authority else {
            let names: Vec<String> = topics.iter().map(|topic| topic.name.clone()).collect();
            let (reply, answer) = oneshot::channel();
            let command = ShardCommand::CreateTopics {
                topics,
                validate_only,
                reply,
            };
            return self.forward_admin(command, answer, names).await;
        };
        let (outcomes, snapshot) = authority
            .create_topics(
                topics,
                validate_only,
                crate::clock::Clock::now(&crate::clock::SystemClock).0,
            )
            .await;
        if let Some(snapshot) = snapshot {
            self.broadcast(snapshot).await;
        }
        outcomes
    }

    /// Deletes topics through shard 0 and waits until every shard has
    /// closed and removed its partitions.
    pub async fn delete_topics(&self, names: Vec<String>) -> Vec<TopicOutcome> {
        if let Some(role) = self.cluster() {
            return role.member.delete_topics(names).await;
        }
        let Some(authority) = &self.authority else {
            let (reply, answer) = oneshot::channel();
            let command = ShardCommand::DeleteTopics {
                names: names.clone(),
                reply,
            };
            return self.forward_admin(command, answer, names).await;
        };
        let before = self.snapshot();
        let (outcomes, snapshot) = authority.delete_topics(names).await;
        if let Some(snapshot) = snapshot {
            self.broadcast(snapshot.clone()).await;
            for (name, view) in &before.topics {
                if !snapshot.topics.contains_key(name) {
                    let dir = topic_dir(&self.config.data_dir, name, view.record.id);
                    if let Err(error) = std::fs::remove_dir_all(&dir) {
                        tracing::warn!(dir = %dir.display(), %error, "cannot remove a deleted topic's directory");
                    }
                }
            }
        }
        outcomes
    }

    async fn forward_admin(
        &self,
        command: ShardCommand,
        answer: oneshot::Receiver<Vec<TopicOutcome>>,
        names: Vec<String>,
    ) -> Vec<TopicOutcome> {
        let failed = |error: PartitionError| {
            names
                .iter()
                .map(|name| TopicOutcome {
                    name: name.clone(),
                    result: Err(error.clone()),
                })
                .collect()
        };
        if let Err(error) = self.send_now(0, command) {
            return failed(error);
        }
        answer.await.unwrap_or_else(|_| {
            failed(PartitionError::new(
                ErrorCode::LeaderNotAvailable,
                "shard 0 stopped",
            ))
        })
    }

    /// A producer id, from shard 0.
    ///
    /// # Errors
    /// `STORAGE_ERROR` when the id block cannot be persisted.
    pub async fn init_producer_id(
        &self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(i64, i16), PartitionError> {
        if let Some(role) = self.cluster() {
            return role
                .member
                .init_producer_id(producer_id, producer_epoch)
                .await;
        }
        match &self.authority {
            Some(authority) => {
                authority
                    .init_producer_id(producer_id, producer_epoch)
                    .await
            }
            None => {
                let (reply, answer) = oneshot::channel();
                self.send_now(
                    0,
                    ShardCommand::InitProducerId {
                        producer_id,
                        producer_epoch,
                        reply,
                    },
                )?;
                answer.await.unwrap_or_else(|_| {
                    Err(PartitionError::new(
                        ErrorCode::LeaderNotAvailable,
                        "shard 0 stopped",
                    ))
                })
            }
        }
    }

    /// Sends `snapshot` to every shard (this one included) and waits until
    /// all have applied it.
    pub async fn broadcast(&self, snapshot: Arc<MetadataSnapshot>) {
        let mut answers = Vec::new();
        for (index, peer) in self.peers.iter().enumerate() {
            if index == usize::from(self.id) {
                continue;
            }
            let (reply, answer) = oneshot::channel();
            let command = ShardCommand::ApplySnapshot {
                snapshot: snapshot.clone(),
                reply,
            };
            if peer.send_async(command).await.is_ok() {
                answers.push(answer);
            }
        }
        self.apply_snapshot(snapshot).await;
        for answer in answers {
            let _applied = answer.await;
        }
    }

    /// Opens the partitions `snapshot` gives this shard and closes (and
    /// deletes) those of topics it no longer has.
    pub async fn apply_snapshot(&self, snapshot: Arc<MetadataSnapshot>) {
        if snapshot.version < self.snapshot.borrow().version {
            return;
        }
        let mut wanted = BTreeSet::new();
        for (name, view) in &snapshot.topics {
            for (index, partition) in view.partitions.iter().enumerate() {
                if partition.owner != self.id || partition.replication.is_some() {
                    continue;
                }
                let id = PartitionId {
                    topic_id: view.record.id,
                    partition: index as u32,
                };
                wanted.insert(id);
                if self.partitions.borrow().contains_key(&id) {
                    continue;
                }
                let dir =
                    topic_dir(&self.config.data_dir, name, view.record.id).join(index.to_string());
                let spec = PartitionSpec {
                    topic: name,
                    index: index as u32,
                    dir: &dir,
                    config: view.record.config,
                    broker_log: self.config.log,
                    cache_key: CacheKey((view.record.id << 20) | index as u64),
                    data_signal: partition.data_signal.clone(),
                    producer_state_retention_ms: self.config.producer_state_retention_ms,
                };
                match Partition::open(self.disk.clone(), spec, self.storage.clone()).await {
                    Ok(opened) => {
                        let opened = Rc::new(opened);
                        self.failed.borrow_mut().remove(&id);
                        self.partitions.borrow_mut().insert(id, opened.clone());
                        if name == GROUPS_TOPIC {
                            self.start_coordinator(index as u32, opened).await;
                        }
                    }
                    Err(error) => {
                        tracing::error!(topic = %name, partition = index, %error, "cannot open partition");
                        self.failed
                            .borrow_mut()
                            .insert(id, format!("partition failed to open: {error}"));
                    }
                }
            }
        }
        let replicated = self.apply_replicas(&snapshot).await;
        self.close_replicas_not_in(&replicated).await;
        wanted.extend(replicated);
        let gone: Vec<(PartitionId, Rc<Partition<GlommioDisk>>)> = self
            .partitions
            .borrow()
            .iter()
            .filter(|(id, _)| !wanted.contains(id))
            .map(|(id, partition)| (*id, partition.clone()))
            .collect();
        for (id, partition) in gone {
            self.partitions.borrow_mut().remove(&id);
            self.storage
                .cache
                .forget(CacheKey((id.topic_id << 20) | u64::from(id.partition)));
            if let Err(error) = partition.close().await {
                tracing::warn!(topic = partition.topic(), partition = partition.index(), %error, "closing a deleted partition failed");
            }
            let dir = partition.dir();
            if let Err(error) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), %error, "cannot remove a deleted partition's directory");
            }
        }
        self.failed.borrow_mut().retain(|id, _| wanted.contains(id));
        self.metrics
            .partitions
            .set((self.partitions.borrow().len() + self.replicas.borrow().len()) as i64);
        *self.snapshot.borrow_mut() = snapshot;
        if !self.is_ready.replace(true) {
            self.ready.notify(usize::MAX);
        }
    }

    pub(super) async fn start_coordinator(&self, index: u32, log: Rc<dyn GroupLog>) {
        let now = crate::clock::Clock::now(&*self.storage.clock);
        match Coordinator::load(index, log, now).await {
            Ok(coordinator) => {
                self.coordinators
                    .borrow_mut()
                    .insert(index, Rc::new(coordinator));
            }
            Err(error) => {
                tracing::error!(partition = index, %error, "cannot load the group coordinator");
            }
        }
    }

    /// Shard 0 at start-up: adopt the persisted metadata everywhere.
    pub async fn publish_initial_snapshot(&self) {
        if let Some(authority) = &self.authority {
            self.broadcast(authority.snapshot()).await;
        } else {
            // Cluster mode: serve at once with no topics; the metadata
            // follower publishes the controller's as soon as it has it.
            let empty = MetadataSnapshot {
                shard_count: self.config.shards,
                ..MetadataSnapshot::default()
            };
            self.broadcast(Arc::new(empty)).await;
        }
    }

    /// Runs every group coordinator's tick (session expiry, rebalance
    /// deadlines, compaction, lag metrics) every [`GROUP_TICK`] until shutdown.
    pub async fn run_group_maintenance(self: Rc<Self>) {
        while !self.is_stopping() {
            glommio::timer::sleep(GROUP_TICK).await;
            let coordinators: Vec<_> = self.coordinators.borrow().values().cloned().collect();
            for coordinator in coordinators {
                service::tick(&self, &coordinator).await;
            }
        }
    }

    /// Runs retention and housekeeping on every owned partition, and samples
    /// gauges, every maintenance interval until shutdown.
    pub async fn run_maintenance(self: Rc<Self>) {
        let interval = Duration::from_millis(self.config.maintenance_interval_ms);
        while !self.is_stopping() {
            glommio::timer::sleep(interval).await;
            let partitions: Vec<_> = self.partitions.borrow().values().cloned().collect();
            for partition in partitions {
                if self.is_stopping() {
                    break;
                }
                if let Err(error) = partition.maintain().await {
                    tracing::error!(topic = partition.topic(), partition = partition.index(), %error, "partition housekeeping failed");
                }
            }
            self.maintain_replicas().await;
            self.reopen_after_disk_full().await;
            self.metrics
                .disk_free_bytes
                .set(self.storage.space.free_bytes() as i64);
            self.metrics
                .disk_reserve_bytes
                .set(self.storage.space.reserve_bytes() as i64);
            self.metrics
                .tail_cache_bytes
                .set(self.storage.cache.used_bytes() as i64);
            self.metrics.queue_depth.set(self.inbox.len() as i64);
        }
    }

    /// Graceful shutdown of this shard: stop taking requests, let in-flight
    /// ones finish (bounded by the shutdown timeout), then close every
    /// partition so that the next start needs no recovery scan.
    async fn shutdown(&self) {
        self.is_stopping.set(true);
        self.stopping.notify(usize::MAX);
        let deadline = Instant::now() + Duration::from_millis(self.config.shutdown_timeout_ms);
        if !super::wait_until(&self.drained, deadline, || self.in_flight.get() == 0).await {
            tracing::warn!(
                shard = self.id,
                in_flight = self.in_flight.get(),
                "shutdown timeout with requests in flight"
            );
        }
        let partitions: Vec<_> = self
            .partitions
            .borrow_mut()
            .drain()
            .map(|(_, partition)| partition)
            .collect();
        for partition in partitions {
            if let Err(error) = partition.close().await {
                tracing::error!(topic = partition.topic(), partition = partition.index(), %error, "closing partition failed");
            }
        }
        self.close_replicas().await;
        tracing::info!(shard = self.id, "shard stopped");
    }
}

/// Directory of one topic: `<data_dir>/topics/<name>.<id>`. The id keeps a
/// re-created topic from ever reading its predecessor's files.
#[must_use]
pub fn topic_dir(data_dir: &std::path::Path, name: &str, topic_id: u64) -> PathBuf {
    data_dir.join("topics").join(format!("{name}.{topic_id}"))
}

/// Refuses an operation on a replicated partition this broker does not
/// lead, naming who does.
fn check_leads(
    replication: &ReplicationView,
    node_id: u32,
    topic: &str,
    partition: u32,
) -> Result<(), PartitionError> {
    match replication.leader {
        Some(leader) if leader == node_id && replication.local => Ok(()),
        Some(leader) => Err(PartitionError::new(
            ErrorCode::NotLeader,
            format!(
                "broker {leader} leads {topic}/{partition} (epoch {}); refresh metadata",
                replication.epoch.0
            ),
        )),
        None => Err(PartitionError::new(
            ErrorCode::NotEnoughReplicas,
            format!(
                "{topic}/{partition} has no leader: fewer than a majority of its replicas {:?} answered the last election; retry",
                replication.replicas
            ),
        )),
    }
}

/// A partition a shard hosts: a standalone broker's, or one replica of a
/// replicated partition (cluster mode).
#[derive(Clone, Debug)]
pub(super) enum Hosted {
    Standalone(Rc<Partition<GlommioDisk>>),
    Replicated(Rc<ReplicatedPartition<GlommioDisk>>),
}

impl Hosted {
    async fn produce(
        &self,
        batch: BytesMut,
        acks: Acks,
        timeout: Duration,
    ) -> Result<Produced, PartitionError> {
        match self {
            Hosted::Standalone(partition) => partition.produce(batch).await,
            Hosted::Replicated(replica) => Ok(replica.produce(batch, acks, timeout).await?),
        }
    }

    async fn read(&self, offset: Offset, max_bytes: usize) -> Result<ReadOutcome, PartitionError> {
        match self {
            Hosted::Standalone(partition) => partition.read(offset, max_bytes).await,
            Hosted::Replicated(replica) => Ok(replica.read(offset, max_bytes).await?),
        }
    }

    async fn list_offset(
        &self,
        query: OffsetQuery,
    ) -> Result<Option<(Offset, TimestampMs)>, PartitionError> {
        match self {
            Hosted::Standalone(partition) => partition.list_offset(query).await,
            Hosted::Replicated(replica) => Ok(replica.list_offset(query).await?),
        }
    }

    fn summary(&self) -> PartitionSummary {
        match self {
            Hosted::Standalone(partition) => partition.summary(),
            Hosted::Replicated(replica) => replica.summary(),
        }
    }
}
