//! Identities the replication protocol names, as distinct types so that a
//! replica id is never passed where a partition key was meant.

use corelog_wire::newtype;

newtype!(
    /// A member of a partition's replica set: the broker (node) id that
    /// hosts the replica. One broker holds at most one replica of a
    /// partition, so the node id identifies the replica.
    ReplicaId(u32)
);
newtype!(
    /// The partition a replication message belongs to. The broker maps
    /// `(topic id, partition index)` to this key; the state machine only
    /// checks that a message is addressed to its own partition.
    PartitionKey(u64)
);
