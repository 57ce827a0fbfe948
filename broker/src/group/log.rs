//! The log a group coordinator persists to: its `__groups` partition,
//! standalone or replicated. The coordinator needs only these four
//! operations; for a replicated partition every append waits for a quorum
//! and reads stop at the high watermark, so group state is rebuilt from
//! committed records only and survives the coordinator's broker dying.

use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use corelog_wire::types::Offset;
use futures::future::LocalBoxFuture;

use crate::partition::{Partition, PartitionError, PartitionSummary, Produced};
use crate::replica::{Acks, ReplicatedPartition};
use crate::storage::disk::Disk;
use crate::storage::{DeletedRange, DeletionCause, ReadOutcome};

/// How long a replicated `__groups` append may wait for its quorum.
const REPLICATED_APPEND_TIMEOUT: Duration = Duration::from_secs(10);

/// What a coordinator does with its partition.
pub trait GroupLog {
    /// Offsets and size; `high_watermark` is the committed end.
    fn summary(&self) -> PartitionSummary;
    /// Reads committed batches from `from`.
    fn read(
        &self,
        from: Offset,
        max_bytes: usize,
    ) -> LocalBoxFuture<'_, Result<ReadOutcome, PartitionError>>;
    /// Appends a batch durably (on a quorum when replicated).
    fn append(&self, batch: BytesMut) -> LocalBoxFuture<'_, Result<Produced, PartitionError>>;
    /// Deletes the oldest closed segment if it lies wholly below `offset`
    /// (compaction by snapshot).
    fn delete_segment_below(
        &self,
        offset: Offset,
    ) -> LocalBoxFuture<'_, Result<Option<DeletedRange>, PartitionError>>;
}

impl<D: Disk> GroupLog for Partition<D> {
    fn summary(&self) -> PartitionSummary {
        Partition::summary(self)
    }

    fn read(
        &self,
        from: Offset,
        max_bytes: usize,
    ) -> LocalBoxFuture<'_, Result<ReadOutcome, PartitionError>> {
        Box::pin(Partition::read(self, from, max_bytes))
    }

    fn append(&self, batch: BytesMut) -> LocalBoxFuture<'_, Result<Produced, PartitionError>> {
        Box::pin(self.produce(batch))
    }

    fn delete_segment_below(
        &self,
        offset: Offset,
    ) -> LocalBoxFuture<'_, Result<Option<DeletedRange>, PartitionError>> {
        Box::pin(async move {
            Ok(Partition::delete_segment_below(self, offset, DeletionCause::Compaction).await?)
        })
    }
}

/// A replicated `__groups` partition, as its leader's coordinator uses it.
#[derive(Debug)]
pub struct ReplicatedGroupLog<D: Disk>(pub Rc<ReplicatedPartition<D>>);

impl<D: Disk> GroupLog for ReplicatedGroupLog<D> {
    fn summary(&self) -> PartitionSummary {
        self.0.summary()
    }

    fn read(
        &self,
        from: Offset,
        max_bytes: usize,
    ) -> LocalBoxFuture<'_, Result<ReadOutcome, PartitionError>> {
        Box::pin(async move { Ok(self.0.read(from, max_bytes).await?) })
    }

    fn append(&self, batch: BytesMut) -> LocalBoxFuture<'_, Result<Produced, PartitionError>> {
        Box::pin(async move {
            Ok(self
                .0
                .produce(batch, Acks::Quorum, REPLICATED_APPEND_TIMEOUT)
                .await?)
        })
    }

    fn delete_segment_below(
        &self,
        offset: Offset,
    ) -> LocalBoxFuture<'_, Result<Option<DeletedRange>, PartitionError>> {
        Box::pin(async move { Ok(self.0.compact_below(offset).await?) })
    }
}
