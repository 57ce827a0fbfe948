//! Identities the controller hands out or refers to, as distinct types so
//! that a broker id is never passed where a topic id was meant.

use corelog_wire::newtype;
pub use corelog_wire::types::{LeaderEpoch, ShardId};

newtype!(
    /// A broker, which is also its Raft peer id when it has the controller
    /// role. Never 0: Raft reserves 0 for "no node".
    NodeId(u64)
);
newtype!(
    /// A topic. Handed out by the controller in increasing order and never
    /// reused, so that a topic deleted and created again under the same
    /// name is a different topic to every broker and client that held the
    /// old id.
    TopicId(u64)
);

/// One replica of a partition: the broker holding it and the shard on that
/// broker that owns its log (DESIGN §3: exactly one owner per replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Replica {
    /// The broker.
    pub node: NodeId,
    /// The owning shard on that broker.
    pub shard: ShardId,
}

/// Identifies one proposal by the Raft position it was appended at. A
/// committed entry at `index` with the same `term` is this proposal; a
/// committed entry at `index` with another term means it was lost (Raft's
/// log matching property), so the proposer can answer its caller either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalId {
    /// Raft term the leader appended it in.
    pub term: u64,
    /// Raft log index it was appended at.
    pub index: u64,
}
