//! The replica identity the replication protocol names. A partition is
//! named by `corelog_wire::types::PartitionId`, the one partition identity
//! of the broker, its storage and this protocol.

use corelog_wire::newtype;

newtype!(
    /// A member of a partition's replica set: the broker (node) id that
    /// hosts the replica. One broker holds at most one replica of a
    /// partition, so the node id identifies the replica.
    ReplicaId(u32)
);
