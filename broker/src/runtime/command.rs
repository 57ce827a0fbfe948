//! Commands one shard sends another. Everything in them is owned and
//! `Send` — batches travel as the bytes they arrived as, never re-encoded —
//! and each carries a one-shot reply channel.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::partition_report::LedPartition;
use corelog_wire::message::produce::Acks;
use corelog_wire::message::replica_push::{ReplicaPushRequest, ReplicaPushResponse};
use corelog_wire::message::replica_query::{ReplicaQueryRequest, ReplicaQueryResponse};
use corelog_wire::types::{Offset, TimestampMs};
use futures::channel::oneshot;

use crate::api::Reply;
pub use crate::cluster::membership::{TopicOutcome, TopicToCreate};
use crate::group::requests::{GroupRequest, GroupResponse};
use crate::metadata::MetadataSnapshot;
use crate::partition::{OffsetQuery, PartitionError, Produced, ReplicaSummary};
use crate::storage::ReadOutcome;

pub use corelog_wire::types::PartitionId;

/// Reply of a partition operation.
pub type PartitionReply<T> = oneshot::Sender<Result<T, PartitionError>>;

/// What a shard can be asked to do.
#[derive(Debug)]
pub enum ShardCommand {
    /// Append a producer batch to an owned partition.
    Produce {
        /// Where.
        partition: PartitionId,
        /// The batch as received.
        batch: BytesMut,
        /// When the broker received it, for the latency metric.
        received: std::time::Instant,
        /// When to answer.
        acks: Acks,
        /// How long the produce may wait for its acknowledgement.
        timeout: std::time::Duration,
        /// Where to answer.
        reply: PartitionReply<Produced>,
    },
    /// Read committed batches of an owned partition.
    Read {
        /// Where.
        partition: PartitionId,
        /// From this offset.
        offset: Offset,
        /// At most this many bytes (at least one batch).
        max_bytes: usize,
        /// Where to answer.
        reply: PartitionReply<ReadOutcome>,
    },
    /// Look an offset up in an owned partition.
    ListOffset {
        /// Where.
        partition: PartitionId,
        /// Which offset.
        query: OffsetQuery,
        /// Where to answer.
        reply: PartitionReply<Option<(Offset, TimestampMs)>>,
    },
    /// Summarise an owned partition.
    Describe {
        /// Where.
        partition: PartitionId,
        /// Where to answer.
        reply: PartitionReply<ReplicaSummary>,
    },
    /// Adopt a new metadata snapshot: open replicas newly placed here,
    /// follow the published leadership, close and delete replicas of
    /// deleted topics.
    ApplySnapshot {
        /// The snapshot.
        snapshot: Arc<MetadataSnapshot>,
        /// Answered once the shard's partitions match the snapshot.
        reply: oneshot::Sender<()>,
    },
    /// Start serving clients: every shard applied a snapshot the node
    /// serves from (see [`MetadataSnapshot::serving`]).
    Serve,
    /// To shard 0: create topics.
    CreateTopics {
        /// The topics.
        topics: Vec<TopicToCreate>,
        /// Check only.
        validate_only: bool,
        /// Where to answer.
        reply: oneshot::Sender<Vec<TopicOutcome>>,
    },
    /// To shard 0: delete topics.
    DeleteTopics {
        /// Topic names.
        names: Vec<String>,
        /// Where to answer.
        reply: oneshot::Sender<Vec<TopicOutcome>>,
    },
    /// To shard 0: create, re-key or delete a user; add or remove an ACL.
    AlterSecurity {
        /// `PutUser`, `DeleteUser`, `PutAcl` or `DeleteAcl`.
        op: ControllerOp,
        /// Where to answer: whether a put created the user or rule.
        reply: oneshot::Sender<Result<bool, PartitionError>>,
    },
    /// To shard 0: allocate a producer id (or bump an existing one's epoch).
    InitProducerId {
        /// Existing id to bump, or -1 for a new one.
        producer_id: i64,
        /// Its current epoch.
        producer_epoch: i16,
        /// Where to answer.
        reply: oneshot::Sender<Result<(i64, i16), PartitionError>>,
    },
    /// To shard 0: this broker can no longer lead `partition` in `epoch`.
    ResignLeadership {
        /// The partition.
        partition: PartitionId,
        /// The epoch it led.
        epoch: corelog_wire::types::LeaderEpoch,
        /// Where to answer.
        reply: PartitionReply<()>,
    },
    /// A group request for the coordinator of `__groups` partition `partition_index`.
    Group {
        /// The `__groups` partition.
        partition_index: u32,
        /// The request.
        request: GroupRequest,
        /// Where to answer.
        reply: oneshot::Sender<GroupResponse>,
    },
    /// The partitions this shard leads, with their in-sync replicas, for
    /// the controller's report.
    LedPartitions {
        /// Where to answer.
        reply: oneshot::Sender<Vec<LedPartition>>,
    },
    /// List the groups of this shard's coordinators.
    ListGroups {
        /// Where to answer: (group, state, members, generation).
        reply: oneshot::Sender<Vec<(String, &'static str, u32, i32)>>,
    },
    /// To shard 0: a controller API request.
    Cluster {
        /// Which API.
        api_key: corelog_wire::frame::ApiKey,
        /// The request body as received.
        body: Vec<u8>,
        /// Where to answer.
        reply: oneshot::Sender<Result<Reply, ErrorCode>>,
    },
    /// A leader's push to an owned replica.
    ReplicaPush {
        /// Where.
        partition: PartitionId,
        /// The push as received.
        request: ReplicaPushRequest,
        /// Its batches.
        raw: Bytes,
        /// Where to answer.
        reply: oneshot::Sender<ReplicaPushResponse>,
    },
    /// The controller's election query to an owned replica.
    ReplicaQuery {
        /// Where.
        partition: PartitionId,
        /// The query.
        request: ReplicaQueryRequest,
        /// Where to answer.
        reply: oneshot::Sender<ReplicaQueryResponse>,
    },
    /// Finish in-flight work, close every partition, stop.
    Shutdown,
}
