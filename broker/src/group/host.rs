//! What a group coordinator needs from the broker it runs on, as a trait:
//! the group layer sits below the runtime (`net` → `runtime` → `group`),
//! so the runtime's shard implements this and hands itself in.

use std::rc::Rc;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use corelog_wire::message::describe_groups::PartitionLag;
use corelog_wire::types::{Offset, TimestampMs};
use futures::future::LocalBoxFuture;

use crate::metadata::MetadataSnapshot;
use crate::partition::{OffsetQuery, PartitionError, ReplicaSummary};

/// An offset found by a lookup, with the record's time for time queries.
pub type FoundOffset = Option<(Offset, TimestampMs)>;

/// The broker around a coordinator.
pub trait GroupHost {
    /// The wall clock: session expiry, commit and audit times.
    fn now(&self) -> TimestampMs;

    /// The metadata the coordinator judges topics and partitions by.
    fn snapshot(&self) -> Arc<MetadataSnapshot>;

    /// Longest session and rebalance timeout a member may ask for.
    fn group_timeout_max_ms(&self) -> u32;

    /// An offset of a partition wherever it is led (a commit or reset is
    /// bounded by its high watermark).
    fn offset<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        query: OffsetQuery,
    ) -> LocalBoxFuture<'a, Result<FoundOffset, PartitionError>>;

    /// The offsets, size and epoch runs of a partition wherever it is led
    /// (lag).
    fn summary<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
    ) -> LocalBoxFuture<'a, Result<ReplicaSummary, PartitionError>>;

    /// Committed batches of a partition wherever it is led, from
    /// `offset`: at least one batch, about `max_bytes` (lag's age).
    fn read<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> LocalBoxFuture<'a, Result<Vec<Bytes>, PartitionError>>;

    /// Appends an audit batch to `__audit` (on a quorum) and returns its
    /// offset.
    fn append_audit(&self, batch: BytesMut) -> LocalBoxFuture<'_, Result<Offset, PartitionError>>;

    /// Publishes a group's lag on one partition (metrics); `known` is
    /// false when it could not be measured.
    fn observe_lag(&self, group: &str, lag: &PartitionLag, known: bool);

    /// Publishes a group's current generation (metrics: generation and
    /// rebalances).
    fn observe_generation(&self, group: &str, generation: i32);

    /// Removes the series published of `group`: the lag of `partitions`,
    /// and with `whole_group` the generation and rebalances too.
    fn forget_group(&self, group: &str, partitions: &[(String, u32)], whole_group: bool);
}

/// The host as coordinators hold it.
pub type Host = Rc<dyn GroupHost>;
