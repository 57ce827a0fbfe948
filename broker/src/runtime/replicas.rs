//! A shard's replicated partitions (cluster mode): opening the replicas the
//! controller placed on this shard, following the leadership it publishes,
//! answering leaders' pushes and the controller's election queries, and the
//! timer that drives leaders' pushes.
//!
//! Leadership comes only from published metadata: a replica leads an epoch
//! when a snapshot names this broker leader in that epoch, and follows the
//! named leader otherwise. Each snapshot's role changes run on their own
//! task per partition; an older snapshot's change arriving late is refused
//! by the state machine (its epoch is below the fence), so order between
//! snapshots needs no coordination here.

use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_replication::{ReplicaConfig, ReplicaId, RoleView};
use corelog_wire::batch::BatchLimits;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::list_offsets::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic, OffsetSpec,
};
use corelog_wire::message::replica_push::{ReplicaPushRequest, ReplicaPushResponse};
use corelog_wire::message::replica_query::{ReplicaQueryRequest, ReplicaQueryResponse};
use corelog_wire::types::{LeaderEpoch, Offset, TimestampMs};
use futures::channel::oneshot;

use super::command::{PartitionId, ShardCommand};
use super::fatal;
use super::shard::{Shard, topic_dir};
use super::wait_until;
use crate::group::log::ReplicatedGroupLog;
use crate::group::service::GROUPS_TOPIC;
use crate::metadata::MetadataSnapshot;
use crate::metadata::snapshot::{PartitionView, ReplicationView, TopicView};
use crate::partition::{OffsetQuery, PartitionError, PartitionSpec};
use crate::replica::peer_transport::{self, PeerPushTransport, ResolveBroker};
use crate::replica::{ReplicaSpec, ReplicatedPartition};
use crate::storage::CacheKey;
use crate::storage::glommio_disk::GlommioDisk;

/// How often leaders are given the time (pushes due, resends, heartbeats)
/// and replication gauges are sampled.
const REPLICATION_TICK: Duration = Duration::from_millis(20);

/// How often a new `__groups` leader waiting for its quorum rechecks that
/// it still leads.
const COORDINATOR_LOAD_CHECK: Duration = Duration::from_secs(1);

/// How long a lookup on another broker may take.
const REMOTE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

type Replica = Rc<ReplicatedPartition<GlommioDisk>>;

impl Shard {
    /// Milliseconds since the shard started: the replication timers' clock.
    fn replication_now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Opens the replicas `snapshot` places on this shard and starts
    /// following the published leadership of each. Returns the partitions
    /// this shard should host.
    pub(super) async fn apply_replicas(
        &self,
        snapshot: &MetadataSnapshot,
    ) -> BTreeSet<PartitionId> {
        let mut wanted = BTreeSet::new();
        for (name, view) in &snapshot.topics {
            for (index, partition) in view.partitions.iter().enumerate() {
                let Some(replication) = &partition.replication else {
                    continue;
                };
                if !replication.local || partition.owner != self.id {
                    continue;
                }
                let index = index as u32;
                let id = PartitionId {
                    topic_id: view.record.id,
                    partition: index,
                };
                wanted.insert(id);
                let existing = self.replicas.borrow().get(&id).cloned();
                let replica = match existing {
                    Some(replica) => replica,
                    None => match self.open_replica(name, view, partition, id).await {
                        Some(opened) => opened,
                        None => continue,
                    },
                };
                self.follow_leadership(name, index, &replica, replication);
            }
        }
        wanted
    }

    /// Opens (recovering) this shard's replica of partition `id` of topic
    /// `name`; `None` (logged, and the reason kept for requests) when it
    /// cannot be opened.
    async fn open_replica(
        &self,
        name: &str,
        view: &TopicView,
        partition: &PartitionView,
        id: PartitionId,
    ) -> Option<Replica> {
        let index = id.partition;
        let dir = topic_dir(&self.config.data_dir, name, view.record.id).join(index.to_string());
        let spec = ReplicaSpec {
            id: ReplicaId(self.config.node_id),
            key: peer_transport::partition_key(view.record.id, index),
            config: ReplicaConfig::default(),
            partition: PartitionSpec {
                topic: name,
                index,
                dir: &dir,
                config: view.record.config,
                broker_log: self.config.log,
                cache_key: cache_key(id),
                data_signal: partition.data_signal.clone(),
                producer_state_retention_ms: self.config.producer_state_retention_ms,
            },
        };
        let transport = Rc::new(PeerPushTransport::new(
            self.brokers.clone(),
            self.broker_resolver(),
            view.record.id,
            index,
        ));
        match ReplicatedPartition::open(self.disk.clone(), spec, self.storage.clone(), transport)
            .await
        {
            Ok(opened) => {
                self.failed.borrow_mut().remove(&id);
                self.replicas.borrow_mut().insert(id, opened.clone());
                Some(opened)
            }
            Err(error) => {
                // Damaged stored data stops the broker (exit code 4).
                fatal::on_replica_open_failed(name, index, &dir, &error);
                tracing::error!(topic = %name, partition = index, %error, "cannot open replica");
                self.failed
                    .borrow_mut()
                    .insert(id, format!("replica failed to open: {error}"));
                None
            }
        }
    }

    /// Starts the role change `replication` asks of `replica`, if any, on
    /// its own task.
    fn follow_leadership(
        &self,
        topic: &str,
        index: u32,
        replica: &Replica,
        replication: &ReplicationView,
    ) {
        let me = self.config.node_id;
        let epoch = replication.epoch;
        let current = replica.role();
        let wanted_leader = replication.leader;
        let already = match (current, wanted_leader) {
            (RoleView::Leader { epoch: led, .. }, Some(leader)) => led == epoch && leader == me,
            (
                RoleView::Follower {
                    epoch: followed,
                    leader,
                },
                Some(wanted),
            ) => followed == epoch && leader.0 == wanted,
            (_, None) => true,
            _ => false,
        };
        if already {
            return;
        }
        let replica = replica.clone();
        let replicas: Vec<ReplicaId> = replication
            .replicas
            .iter()
            .copied()
            .map(ReplicaId)
            .collect();
        let now_ms = self.replication_now_ms();
        let topic = topic.to_owned();
        let groups = topic == GROUPS_TOPIC;
        if groups && wanted_leader != Some(me) {
            // The coordinator lives on the leader only.
            self.coordinators.borrow_mut().remove(&index);
        }
        let shard = self.me.clone();
        glommio::spawn_local(async move {
            let result = match wanted_leader {
                Some(leader) if leader == me => replica.become_leader(epoch, &replicas, now_ms).await,
                Some(leader) => replica.become_follower(epoch, ReplicaId(leader), now_ms).await,
                None => Ok(()),
            };
            match result {
                Ok(()) => tracing::info!(%topic, partition = index, epoch = epoch.0, leader = ?wanted_leader, "replica role follows metadata"),
                // A later snapshot (or query) already moved past this epoch,
                // or this replica led the epoch before a restart: the
                // controller elects again; nothing to do here.
                Err(error) => {
                    tracing::debug!(%topic, partition = index, epoch = epoch.0, %error, "role change refused");
                    return;
                }
            }
            if groups
                && wanted_leader == Some(me)
                && let Some(shard) = shard.upgrade()
            {
                shard.load_coordinator(index, replica, epoch).await;
            }
        })
        .detach();
    }

    /// A new leader of a `__groups` partition: once everything the log
    /// holds is committed (the high watermark passed this epoch's start
    /// marker, so every earlier epoch's records are committed too), replays
    /// it into a coordinator. Gives up when the leadership ends first.
    async fn load_coordinator(&self, index: u32, replica: Replica, epoch: LeaderEpoch) {
        let leads = |replica: &Replica| matches!(replica.role(), RoleView::Leader { epoch: led, .. } if led == epoch);
        let end = replica.log_end();
        let signal = replica.high_watermark_signal();
        loop {
            if !leads(&replica) || self.is_stopping() {
                return;
            }
            let deadline = Instant::now() + COORDINATOR_LOAD_CHECK;
            if wait_until(&signal, deadline, || replica.high_watermark() >= end).await {
                break;
            }
            tracing::info!(
                partition = index,
                epoch = epoch.0,
                "__groups leader waits for its quorum before loading groups"
            );
        }
        if leads(&replica) {
            self.start_coordinator(index, Rc::new(ReplicatedGroupLog(replica)))
                .await;
        }
    }

    /// Refuses group requests on a `__groups` replica that is not leading
    /// (it stepped down before the metadata said so): its coordinator's
    /// view may be stale.
    pub(super) fn check_coordinator_leads(&self, index: u32) -> Result<(), PartitionError> {
        let snapshot = self.snapshot();
        let Some((view, _)) = snapshot.partition(GROUPS_TOPIC, index) else {
            return Ok(());
        };
        let id = PartitionId {
            topic_id: view.record.id,
            partition: index,
        };
        match self.replicas.borrow().get(&id) {
            Some(replica)
                if !matches!(
                    replica.role(),
                    RoleView::Leader {
                        accepting_writes: true,
                        ..
                    }
                ) =>
            {
                Err(PartitionError::new(
                    ErrorCode::NotCoordinator,
                    "this broker no longer leads the group's __groups partition; find the coordinator again",
                ))
            }
            _ => Ok(()),
        }
    }

    /// Looks a broker's address up in the current metadata, for pushes.
    fn broker_resolver(&self) -> ResolveBroker {
        let me = self.me.clone();
        Rc::new(move |replica: ReplicaId| {
            let shard = me.upgrade()?;
            let snapshot = shard.snapshot();
            let cluster = snapshot.cluster.as_ref()?;
            let broker = cluster
                .state
                .brokers()
                .get(&corelog_controller::NodeId(u64::from(replica.0)))?;
            resolve_address(&broker.host, broker.port)
        })
    }

    /// Closes the replicas this shard should no longer host (their topic
    /// was deleted) and removes their files.
    pub(super) async fn close_replicas_not_in(&self, wanted: &BTreeSet<PartitionId>) {
        let gone: Vec<(PartitionId, Replica)> = self
            .replicas
            .borrow()
            .iter()
            .filter(|(id, _)| !wanted.contains(id))
            .map(|(id, replica)| (*id, replica.clone()))
            .collect();
        for (id, replica) in gone {
            self.replicas.borrow_mut().remove(&id);
            self.storage.cache.forget(cache_key(id));
            let partition = replica.partition();
            if let Err(error) = replica.close().await {
                tracing::warn!(topic = partition.topic(), partition = partition.index(), %error, "closing a deleted replica failed");
            }
            let dir = partition.dir();
            if let Err(error) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), %error, "cannot remove a deleted replica's directory");
            }
        }
    }

    /// Routes a leader's push to the shard owning the replica.
    pub async fn replica_push(
        &self,
        request: ReplicaPushRequest,
        raw: Bytes,
    ) -> ReplicaPushResponse {
        let (partition, owner) = match self.replica_owner(request.topic_id, request.partition) {
            Ok(found) => found,
            Err(message) => return peer_transport::push_refusal(ErrorCode::NotLeader, message),
        };
        if owner == self.id {
            return self.local_replica_push(partition, &request, raw).await;
        }
        let (reply, answer) = oneshot::channel();
        let command = ShardCommand::ReplicaPush {
            partition,
            request,
            raw,
            reply,
        };
        if let Err(error) = self.send_now(owner, command) {
            return peer_transport::push_refusal(error.code, error.message);
        }
        answer.await.unwrap_or_else(|_| {
            peer_transport::push_refusal(
                ErrorCode::LeaderNotAvailable,
                "the owning shard stopped".to_owned(),
            )
        })
    }

    /// Routes an election query to the shard owning the replica.
    pub async fn replica_query(&self, request: ReplicaQueryRequest) -> ReplicaQueryResponse {
        let (partition, owner) = match self.replica_owner(request.topic_id, request.partition) {
            Ok(found) => found,
            Err(message) => return peer_transport::query_refusal(ErrorCode::NotLeader, message),
        };
        if owner == self.id {
            return self.local_replica_query(partition, &request).await;
        }
        let (reply, answer) = oneshot::channel();
        let command = ShardCommand::ReplicaQuery {
            partition,
            request,
            reply,
        };
        if let Err(error) = self.send_now(owner, command) {
            return peer_transport::query_refusal(error.code, error.message);
        }
        answer.await.unwrap_or_else(|_| {
            peer_transport::query_refusal(
                ErrorCode::LeaderNotAvailable,
                "the owning shard stopped".to_owned(),
            )
        })
    }

    /// Where this broker's replica of `(topic_id, partition)` lives, or why
    /// there is none.
    fn replica_owner(&self, topic_id: u64, partition: u32) -> Result<(PartitionId, u16), String> {
        let snapshot = self.snapshot();
        let (_, view) = snapshot
            .partition_by_id(topic_id, partition)
            .ok_or_else(|| {
                format!(
                    "no partition {partition} of topic id {topic_id} in metadata version {}",
                    snapshot.version
                )
            })?;
        match &view.replication {
            Some(replication) if replication.local => Ok((
                PartitionId {
                    topic_id,
                    partition,
                },
                view.owner,
            )),
            _ => Err(format!(
                "this broker holds no replica of partition {partition} of topic id {topic_id}"
            )),
        }
    }

    /// Answers a push on the replica's own shard.
    pub(super) async fn local_replica_push(
        &self,
        partition: PartitionId,
        request: &ReplicaPushRequest,
        raw: Bytes,
    ) -> ReplicaPushResponse {
        let Some(replica) = self.replicas.borrow().get(&partition).cloned() else {
            return peer_transport::push_refusal(
                ErrorCode::LeaderNotAvailable,
                "the replica is not open yet; retry".to_owned(),
            );
        };
        let limits: BatchLimits = self.config.log.batch_limits;
        let push = match peer_transport::push_from_wire(request, raw, &limits) {
            Ok(push) => push,
            Err(error) => return peer_transport::push_refusal(error.code(), error.to_string()),
        };
        match replica.handle_push(push).await {
            Ok(ack) => peer_transport::ack_to_wire(&ack),
            Err(error) => peer_transport::push_refusal(error.code(), error.to_string()),
        }
    }

    /// Answers an election query on the replica's own shard.
    pub(super) async fn local_replica_query(
        &self,
        partition: PartitionId,
        request: &ReplicaQueryRequest,
    ) -> ReplicaQueryResponse {
        let Some(replica) = self.replicas.borrow().get(&partition).cloned() else {
            return peer_transport::query_refusal(
                ErrorCode::LeaderNotAvailable,
                "the replica is not open yet; retry".to_owned(),
            );
        };
        match replica
            .handle_query(peer_transport::query_from_wire(request))
            .await
        {
            Ok(answer) => peer_transport::answer_to_wire(&answer),
            Err(error) => peer_transport::query_refusal(error.code(), error.to_string()),
        }
    }

    /// Looks an offset up in a partition wherever it is led: here through
    /// its owning shard, or (cluster mode, led by another broker) by asking
    /// the leader with `ListOffsets`. Group coordinators use it to bound
    /// commits and resets by partitions they do not lead.
    ///
    /// # Errors
    /// The partition's error, or `NOT_LEADER` / `LEADER_NOT_AVAILABLE` when
    /// the leader cannot be asked.
    pub async fn offset_anywhere(
        &self,
        topic: &str,
        partition: u32,
        query: OffsetQuery,
    ) -> Result<Option<(Offset, TimestampMs)>, PartitionError> {
        let leader = match self.locate(topic, partition) {
            Ok((id, owner)) => return self.list_offset(id, owner, query).await,
            Err(error) if error.code == ErrorCode::NotLeader => self
                .snapshot()
                .partition(topic, partition)
                .and_then(|(_, view)| view.replication.as_ref()?.leader)
                .ok_or(error)?,
            Err(error) => return Err(error),
        };
        let addr = (self.broker_resolver())(ReplicaId(leader)).ok_or_else(|| {
            PartitionError::new(
                ErrorCode::LeaderNotAvailable,
                format!("the leader of {topic}/{partition}, broker {leader}, has no known address"),
            )
        })?;
        let spec = match query {
            OffsetQuery::Earliest => OffsetSpec::Earliest,
            OffsetQuery::Latest => OffsetSpec::Latest,
            OffsetQuery::Timestamp(time) => OffsetSpec::Timestamp(time.0),
        };
        let request = ListOffsetsRequest {
            topics: vec![ListOffsetsTopic {
                name: topic.to_owned(),
                partitions: vec![ListOffsetsPartition { partition, spec }],
            }],
        };
        let answer = self
            .brokers
            .call(addr, &request, &[], REMOTE_LOOKUP_TIMEOUT)
            .await
            .map_err(|error| {
                PartitionError::new(ErrorCode::LeaderNotAvailable, error.to_string())
            })?;
        let found = answer
            .message
            .topics
            .into_iter()
            .flat_map(|topic| topic.partitions)
            .find(|found| found.partition == partition)
            .ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::UnknownServerError,
                    format!("broker {leader} did not answer for {topic}/{partition}"),
                )
            })?;
        if found.error_code != ErrorCode::None.code() {
            let code =
                ErrorCode::from_code(found.error_code).unwrap_or(ErrorCode::UnknownServerError);
            return Err(PartitionError::new(
                code,
                format!("broker {leader} answered {code} for {topic}/{partition}"),
            ));
        }
        Ok(u64::try_from(found.offset)
            .ok()
            .map(|offset| (Offset(offset), TimestampMs(found.timestamp))))
    }

    /// Gives every replica the time (leaders push what is due) and samples
    /// the replication gauges, until shutdown.
    pub async fn run_replication_timers(self: Rc<Self>) {
        while !self.is_stopping() {
            glommio::timer::sleep(REPLICATION_TICK).await;
            let now_ms = self.replication_now_ms();
            let replicas: Vec<Replica> = self.replicas.borrow().values().cloned().collect();
            let mut lag = 0u64;
            let mut leading = 0i64;
            for replica in &replicas {
                replica.tick(now_ms);
                if let Some(behind) = replica.follower_lag() {
                    lag = lag.saturating_add(behind);
                    leading += 1;
                }
            }
            self.metrics
                .replica_lag_records
                .set(i64::try_from(lag).unwrap_or(i64::MAX));
            self.metrics.replica_leader_partitions.set(leading);
        }
    }

    /// Housekeeping of every replica (retention below the high watermark).
    pub(super) async fn maintain_replicas(&self) {
        let replicas: Vec<Replica> = self.replicas.borrow().values().cloned().collect();
        for replica in replicas {
            if self.is_stopping() {
                break;
            }
            if let Err(error) = replica.maintain().await {
                let partition = replica.partition();
                tracing::error!(topic = partition.topic(), partition = partition.index(), %error, "replica housekeeping failed");
            }
        }
    }

    /// Closes every replica (shutdown).
    pub(super) async fn close_replicas(&self) {
        let replicas: Vec<Replica> = self
            .replicas
            .borrow_mut()
            .drain()
            .map(|(_, replica)| replica)
            .collect();
        for replica in replicas {
            if let Err(error) = replica.close().await {
                let partition = replica.partition();
                tracing::error!(topic = partition.topic(), partition = partition.index(), %error, "closing replica failed");
            }
        }
    }
}

/// The tail-cache key of a partition.
pub(super) fn cache_key(id: PartitionId) -> CacheKey {
    CacheKey((id.topic_id << 20) | u64::from(id.partition))
}

/// A broker's advertised host and port as a socket address: parsed when
/// the host is an address, resolved otherwise.
fn resolve_address(host: &str, port: u16) -> Option<SocketAddr> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Some(SocketAddr::new(ip, port));
    }
    (host, port).to_socket_addrs().ok()?.next()
}
