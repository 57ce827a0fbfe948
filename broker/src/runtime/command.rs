//! Commands one shard sends another. Everything in them is owned and
//! `Send` — batches travel as the bytes they arrived as, never re-encoded —
//! and each carries a one-shot reply channel.

use std::sync::Arc;

use bytes::BytesMut;
use corelog_wire::types::{Offset, TimestampMs};
use futures::channel::oneshot;

use crate::metadata::MetadataSnapshot;
use crate::metadata::topic_config::TopicConfig;
use crate::partition::{OffsetQuery, PartitionError, PartitionSummary, Produced};
use crate::storage::ReadOutcome;

/// A partition, named by topic id so that a re-created topic is never
/// mistaken for its predecessor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId {
    /// The topic's id.
    pub topic_id: u64,
    /// The partition index.
    pub partition: u32,
}

/// Reply of a partition operation.
pub type PartitionReply<T> = oneshot::Sender<Result<T, PartitionError>>;

/// A request to create one topic.
#[derive(Clone, Debug)]
pub struct TopicToCreate {
    /// Name.
    pub name: String,
    /// Partition count.
    pub partitions: u32,
    /// Replication factor asked for.
    pub replication_factor: u16,
    /// Settings, already merged with the defaults and validated.
    pub config: TopicConfig,
}

/// The outcome for one topic of an admin change.
#[derive(Clone, Debug)]
pub struct TopicOutcome {
    /// The topic.
    pub name: String,
    /// `Ok` or the error with its code.
    pub result: Result<(), PartitionError>,
}

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
        reply: PartitionReply<PartitionSummary>,
    },
    /// Adopt a new metadata snapshot: open partitions newly owned, close and
    /// delete partitions of deleted topics.
    ApplySnapshot {
        /// The snapshot.
        snapshot: Arc<MetadataSnapshot>,
        /// Answered once the shard's partitions match the snapshot.
        reply: oneshot::Sender<()>,
    },
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
    /// To shard 0: allocate a producer id (or bump an existing one's epoch).
    InitProducerId {
        /// Existing id to bump, or -1 for a new one.
        producer_id: i64,
        /// Its current epoch.
        producer_epoch: i16,
        /// Where to answer.
        reply: oneshot::Sender<Result<(i64, i16), PartitionError>>,
    },
    /// Finish in-flight work, close every partition, stop.
    Shutdown,
}
