//! The log a group coordinator persists to: its `__groups` partition's
//! leader replica (`crate::runtime::groups::ReplicatedGroupLog`). The
//! coordinator needs only these four operations; every append waits for a
//! quorum and reads stop at the high watermark, so group state is rebuilt
//! from committed records only and survives the coordinator's broker
//! dying. A trait: the group layer does not reach into replicas.

use bytes::BytesMut;
use corelog_wire::types::Offset;
use futures::future::LocalBoxFuture;

use crate::partition::{PartitionError, PartitionSummary, Produced};
use corelog_storage::{DeletedRange, ReadOutcome};

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
