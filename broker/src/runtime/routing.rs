//! Where partition operations run: on the shard that owns this broker's
//! replica, reached over the cross-shard channels, and only while that
//! replica leads; or, for lookups a coordinator needs about partitions led
//! elsewhere, on the leading broker.
//!
//! A request for a partition owned by another shard runs there through
//! [`Shard::invoke_on`]. Calls are synchronous up to the point where a
//! produce's offsets are assigned (or its work is queued to the owner), so
//! calls made in order append in order.

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use corelog_replication::ReplicaId;
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::describe_topics::DescribeTopicsRequest;
use corelog_wire::message::fetch::{FetchPartition, FetchRequest, FetchTopic};
use corelog_wire::message::list_offsets::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic, OffsetSpec,
};
use corelog_wire::message::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use corelog_wire::types::{LeaderEpoch, Offset, TimestampMs};

use super::shard::{Replica, Shard};
use crate::api::Reply;
use crate::metadata::ShardId;
use crate::metadata::snapshot::ReplicationView;
use crate::partition::{OffsetQuery, PartitionError, PartitionSummary, Produced, ReplicaSummary};
use crate::replica::Acks;
use crate::replica::peer_transport::ResolveBroker;
use corelog_storage::ReadOutcome;
use corelog_wire::types::PartitionId;

/// How long a lookup on another broker may take.
const REMOTE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

impl Shard {
    /// The partition's owner and id, or why it cannot be served here: it
    /// is served by its leader only, so elsewhere the answer is
    /// `NOT_LEADER` (the client refreshes metadata and goes to the leader),
    /// and while it has no leader `NOT_ENOUGH_REPLICAS`.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION` when the topic or partition does not
    /// exist; `NOT_LEADER` / `NOT_ENOUGH_REPLICAS` as above.
    pub fn locate(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<(PartitionId, ShardId), PartitionError> {
        self.locate_at_epoch(topic, partition, None)
    }

    /// [`Shard::locate`] for a request that names the leader epoch its
    /// client believes current (C11): an older one is fenced, a newer one
    /// is one this broker has not learnt yet. Checked before leadership,
    /// as Kafka does, so that a client with stale metadata is told to
    /// refresh it whichever broker it reached.
    ///
    /// # Errors
    /// As [`Shard::locate`]; `FENCED_LEADER_EPOCH` or
    /// `UNKNOWN_LEADER_EPOCH` when `current_leader_epoch` is not the
    /// partition's epoch.
    pub fn locate_at_epoch(
        &self,
        topic: &str,
        partition: u32,
        current_leader_epoch: Option<LeaderEpoch>,
    ) -> Result<(PartitionId, ShardId), PartitionError> {
        let snapshot = self.snapshot.borrow();
        let (view, partition_view) = snapshot.partition(topic, partition).ok_or_else(|| {
            PartitionError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("topic {topic:?} has no partition {partition}; create the topic or check its partition count"),
            )
        })?;
        if let Some(requested) = current_leader_epoch {
            check_epoch(
                partition_view.replication.epoch,
                requested,
                topic,
                partition,
            )?;
        }
        check_leads(
            &partition_view.replication,
            self.config.node_id,
            topic,
            partition,
        )?;
        Ok((
            PartitionId {
                topic_id: view.record.id,
                partition,
            },
            partition_view.owner,
        ))
    }

    /// This shard's replica of `partition`, or why there is none.
    pub(super) fn owned(&self, partition: PartitionId) -> Result<Replica, PartitionError> {
        if let Some(found) = self.replicas.borrow().get(&partition) {
            return Ok(found.clone());
        }
        if let Some(failed) = self.failed.borrow().get(&partition) {
            return Err(failed.clone());
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
        if owner != self.id {
            self.metrics.forwarded_produce.inc();
        }
        self.try_invoke_on(owner, move |shard| async move {
            shard
                .local_produce(partition, batch, received, acks, timeout)
                .await
        })
    }

    pub(super) async fn local_produce(
        &self,
        partition: PartitionId,
        batch: BytesMut,
        received: Instant,
        acks: Acks,
        timeout: Duration,
    ) -> Result<Produced, PartitionError> {
        let replica = self.owned(partition)?;
        let bytes = batch.len() as u64;
        let produced = replica.produce(batch, acks, timeout).await?;
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
        if owner != self.id {
            self.metrics.forwarded_fetch.inc();
        }
        self.try_invoke_on(owner, move |shard| async move {
            shard.local_read(partition, offset, max_bytes).await
        })
        .await
    }

    pub(super) async fn local_read(
        &self,
        partition: PartitionId,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<ReadOutcome, PartitionError> {
        Ok(self.owned(partition)?.read(offset, max_bytes).await?)
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
        self.try_invoke_on(owner, move |shard| async move {
            shard.local_list_offset(partition, query).await
        })
        .await
    }

    pub(super) async fn local_list_offset(
        &self,
        partition: PartitionId,
        query: OffsetQuery,
    ) -> Result<Option<(Offset, TimestampMs)>, PartitionError> {
        Ok(self.owned(partition)?.list_offset(query).await?)
    }

    /// Summarises a partition, on whichever shard owns it.
    ///
    /// # Errors
    /// The partition's [`PartitionError`].
    pub async fn describe(
        &self,
        partition: PartitionId,
        owner: ShardId,
    ) -> Result<ReplicaSummary, PartitionError> {
        self.try_invoke_on(owner, move |shard| async move {
            shard.owned(partition).map(|owned| owned.replica_summary())
        })
        .await
    }

    /// Looks an offset up in a partition wherever it is led: here through
    /// its owning shard, or (led by another broker) by asking the leader
    /// with `ListOffsets`. Group coordinators use it to bound commits and
    /// resets by partitions they do not lead.
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
        let (leader, addr) = match self.locate(topic, partition) {
            Ok((id, owner)) => return self.list_offset(id, owner, query).await,
            Err(error) => self.remote_leader(topic, partition, error)?,
        };
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
        let answer = self.ask_leader(leader, addr, &request).await?;
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

    /// The leader of a partition this broker does not lead, and its
    /// address; `error` (why `locate` failed) unless that is `NOT_LEADER`.
    fn remote_leader(
        &self,
        topic: &str,
        partition: u32,
        error: PartitionError,
    ) -> Result<(u32, SocketAddr), PartitionError> {
        if error.code != ErrorCode::NotLeader {
            return Err(error);
        }
        let leader = self
            .snapshot()
            .partition(topic, partition)
            .and_then(|(_, view)| view.replication.leader)
            .ok_or(error)?;
        let addr = (self.broker_resolver())(ReplicaId(leader)).ok_or_else(|| {
            PartitionError::new(
                ErrorCode::LeaderNotAvailable,
                format!("the leader of {topic}/{partition}, broker {leader}, has no known address"),
            )
        })?;
        Ok((leader, addr))
    }

    /// Asks `leader` at `addr` about a partition it leads; a broker that
    /// cannot be asked is `LEADER_NOT_AVAILABLE` (retriable).
    async fn ask_leader<T>(
        &self,
        leader: u32,
        addr: SocketAddr,
        request: &T,
    ) -> Result<crate::peer::Answer<T::Response>, PartitionError>
    where
        T: corelog_wire::message::Request,
        <T::Response as rkyv::Archive>::Archived:
            rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
    {
        self.brokers
            .call_node(leader, addr, request, &[], REMOTE_LOOKUP_TIMEOUT)
            .await
            .map_err(|error| PartitionError::new(ErrorCode::LeaderNotAvailable, error.to_string()))
    }

    /// Appends `batch` with acks=quorum to a partition wherever it is led:
    /// through the leader's Produce API when that is another broker (for
    /// the broker's own records, such as `__audit`'s, which a broker may
    /// write to an internal topic); returns its base offset.
    ///
    /// # Errors
    /// As a local produce, or `LEADER_NOT_AVAILABLE` when the leader
    /// cannot be asked.
    pub async fn produce_anywhere(
        self: &Rc<Self>,
        topic: &str,
        partition: u32,
        batch: BytesMut,
        timeout: Duration,
    ) -> Result<Offset, PartitionError> {
        let (leader, addr) = match self.locate(topic, partition) {
            Ok((id, owner)) => {
                let produced = self
                    .produce(id, owner, batch, Instant::now(), Acks::Quorum, timeout)
                    .await?;
                return Ok(produced.base_offset);
            }
            Err(error) => self.remote_leader(topic, partition, error)?,
        };
        let request = ProduceRequest {
            acks: corelog_wire::message::produce::Acks::Quorum,
            timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            topics: vec![ProduceTopic {
                name: topic.to_owned(),
                partitions: vec![ProducePartition {
                    partition,
                    records_len: u32::try_from(batch.len()).unwrap_or(u32::MAX),
                }],
            }],
        };
        let answer = self
            .brokers
            .call_node(
                leader,
                addr,
                &request,
                &batch,
                timeout + REMOTE_LOOKUP_TIMEOUT,
            )
            .await
            .map_err(|error| {
                PartitionError::new(ErrorCode::LeaderNotAvailable, error.to_string())
            })?;
        let answered = answer
            .message
            .topics
            .into_iter()
            .flat_map(|topic| topic.partitions)
            .find(|answered| answered.partition == partition)
            .ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::UnknownServerError,
                    format!("broker {leader} did not answer for {topic}/{partition}"),
                )
            })?;
        match ErrorCode::from_code(answered.error_code) {
            Some(ErrorCode::None) => {
                u64::try_from(answered.base_offset)
                    .map(Offset)
                    .map_err(|_| {
                        PartitionError::new(
                            ErrorCode::UnknownServerError,
                            format!(
                                "broker {leader} answered offset {} for {topic}/{partition}",
                                answered.base_offset
                            ),
                        )
                    })
            }
            code => Err(PartitionError::new(
                code.unwrap_or(ErrorCode::UnknownServerError),
                format!(
                    "broker {leader} refused the append to {topic}/{partition}: {}",
                    answered.error_message.unwrap_or_default()
                ),
            )),
        }
    }

    /// A partition's offsets and size wherever it is led: from the leader
    /// (DescribeTopics) when that is another broker.
    ///
    /// # Errors
    /// As the local summary, or `LEADER_NOT_AVAILABLE` when the leader
    /// cannot be asked.
    pub async fn summary_anywhere(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<ReplicaSummary, PartitionError> {
        let (leader, addr) = match self.locate(topic, partition) {
            Ok((id, owner)) => return self.describe(id, owner).await,
            Err(error) => self.remote_leader(topic, partition, error)?,
        };
        let request = DescribeTopicsRequest {
            names: vec![topic.to_owned()],
        };
        let answer = self.ask_leader(leader, addr, &request).await?;
        answer
            .message
            .topics
            .into_iter()
            .filter(|described| described.name == topic)
            .flat_map(|described| described.partition_states)
            .find(|state| state.partition == partition)
            .map(|state| ReplicaSummary {
                log: PartitionSummary {
                    log_start: Offset(state.log_start_offset),
                    high_watermark: Offset(state.high_watermark),
                    log_end: Offset(state.log_end_offset),
                    size_bytes: state.size_bytes,
                    segment_count: state.segment_count,
                },
                epoch_starts: state.epoch_starts.into_iter().map(Offset).collect(),
            })
            .ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::LeaderNotAvailable,
                    format!("broker {leader} did not describe {topic}/{partition}"),
                )
            })
    }

    /// Committed record batches of a partition wherever it is led, from
    /// `offset` (at least one batch, about `max_bytes`): from the leader
    /// (Fetch) when that is another broker.
    ///
    /// # Errors
    /// As a local read, or `LEADER_NOT_AVAILABLE` when the leader cannot
    /// be asked.
    pub async fn read_anywhere(
        &self,
        topic: &str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, PartitionError> {
        let (leader, addr) = match self.locate(topic, partition) {
            Ok((id, owner)) => return Ok(self.read(id, owner, offset, max_bytes).await?.chunks),
            Err(error) => self.remote_leader(topic, partition, error)?,
        };
        let request = FetchRequest {
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: u32::try_from(max_bytes).unwrap_or(u32::MAX),
            topics: vec![FetchTopic {
                name: topic.to_owned(),
                partitions: vec![FetchPartition {
                    partition,
                    fetch_offset: offset.0,
                    partition_max_bytes: u32::try_from(max_bytes).unwrap_or(u32::MAX),
                    current_leader_epoch: None,
                }],
            }],
        };
        let answer = self.ask_leader(leader, addr, &request).await?;
        // The raw section holds each partition's records in response order.
        let mut start = 0usize;
        for answered in answer.message.topics.iter().flat_map(|t| &t.partitions) {
            let len = answered.records_len as usize;
            if answered.partition == partition {
                if answered.error_code != ErrorCode::None.code() {
                    let code = ErrorCode::from_code(answered.error_code)
                        .unwrap_or(ErrorCode::UnknownServerError);
                    return Err(PartitionError::new(
                        code,
                        format!("broker {leader} answered {code} for {topic}/{partition}"),
                    ));
                }
                let end = start.saturating_add(len).min(answer.raw.len());
                return Ok(vec![answer.raw.slice(start.min(end)..end)]);
            }
            start = start.saturating_add(len);
        }
        Err(PartitionError::new(
            ErrorCode::LeaderNotAvailable,
            format!("broker {leader} did not answer for {topic}/{partition}"),
        ))
    }

    /// Looks a broker's address up in the current metadata (pushes and
    /// lookups on other brokers).
    pub(super) fn broker_resolver(&self) -> ResolveBroker {
        let me = self.me.clone();
        Rc::new(move |replica: ReplicaId| {
            let shard = me.upgrade()?;
            let snapshot = shard.snapshot();
            let broker = snapshot
                .cluster
                .state
                .brokers()
                .get(&corelog_controller::NodeId(u64::from(replica.0)))?;
            resolve_address(&broker.host, broker.port)
        })
    }

    /// Serves a controller API request on shard 0, with its cluster role.
    ///
    /// # Errors
    /// `LEADER_NOT_AVAILABLE` before the role started; the API's refusal.
    pub async fn serve_cluster_api(
        &self,
        api_key: ApiKey,
        api_version: u16,
        body: &[u8],
    ) -> Result<Reply, ErrorCode> {
        match self.cluster() {
            Some(role) => crate::cluster::api::serve(&role, api_key, api_version, body).await,
            None => Err(ErrorCode::LeaderNotAvailable),
        }
    }
}

/// Refuses an operation on a partition this broker does not lead, naming
/// who does.
/// Whether a request's `current_leader_epoch` is the partition's.
fn check_epoch(
    current: LeaderEpoch,
    requested: LeaderEpoch,
    topic: &str,
    partition: u32,
) -> Result<(), PartitionError> {
    if requested < current {
        return Err(PartitionError::new(
            ErrorCode::FencedLeaderEpoch,
            format!(
                "{topic}/{partition} is in leader epoch {current}, the request names {requested}; refresh metadata"
            ),
        ));
    }
    if requested > current {
        return Err(PartitionError::new(
            ErrorCode::UnknownLeaderEpoch,
            format!(
                "the request names leader epoch {requested} of {topic}/{partition}, this broker knows {current}; retry"
            ),
        ));
    }
    Ok(())
}

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

/// A broker's advertised host and port as a socket address: parsed when
/// the host is an address, resolved otherwise.
fn resolve_address(host: &str, port: u16) -> Option<SocketAddr> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Some(SocketAddr::new(ip, port));
    }
    (host, port).to_socket_addrs().ok()?.next()
}
