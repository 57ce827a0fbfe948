//! Replica placement: which brokers, and which shard on each, hold the
//! replicas of a new topic's partitions. Pure and deterministic: the leader
//! computes it and proposes the result inside `CreateTopic`, so followers
//! never re-run it (a placement rule can then change between releases
//! without making nodes disagree).
//!
//! Greedy, partition by partition, against the load already in the cluster
//! plus what this call placed so far:
//! - the preferred leader (first replica) is the live broker with the
//!   fewest preferred leaderships (then fewest replicas, then lowest id);
//! - each further replica goes to a live broker not yet in the partition,
//!   on a failure domain (rack) not yet in the partition whenever one is
//!   left, with the fewest replicas, then the MOST leaderships, then lowest
//!   id. Most leaderships because a broker with few leaderships is about to
//!   receive replicas as a leader: giving it follower replicas now is what
//!   unbalances replica counts (found by the balance property test). A
//!   broker without a rack label is its own failure domain;
//! - on its broker a replica goes to the shard with the fewest leaders,
//!   then fewest replicas (for the leader), or the fewest replicas, then
//!   most leaders (for a follower), then the lowest shard, for the same
//!   reason. This replaces the single-node rule `(topic_id +
//!   partition) % shards`, which cannot see load: it spreads per broker.
//!
//! Taking a new rack whenever one is left gives as many distinct racks as
//! `min(replication factor, racks)`, the most possible. Choosing by least
//! count keeps leaders within one of each other across brokers on a fresh
//! cluster (max − min ≤ 1), which the tests check.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::command::{PARTITIONS_MAX, REPLICAS_MAX};
use crate::state::{BrokerRecord, MetadataState};
use crate::types::{NodeId, Replica, ShardId};

/// Why no placement was produced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// Not enough live (registered, unfenced) brokers, or a factor of 0.
    #[error(
        "replication factor {requested} is not possible with {live} live broker(s) (at most {REPLICAS_MAX})"
    )]
    InvalidReplicationFactor {
        /// Asked for.
        requested: u16,
        /// Live brokers.
        live: usize,
    },
    /// Partition count out of range.
    #[error("partition count {0} must be between 1 and {PARTITIONS_MAX}")]
    InvalidPartitions(u32),
    /// The live brokers' shards would hold more replicas than they may.
    #[error(
        "{needed} partition replicas do not fit: the live brokers have room for {room} more, \
         at most {per_shard} per shard (broker {} holds {} of its {})",
        fullest.node.0, fullest.held, fullest.capacity
    )]
    PartitionLimit {
        /// Replicas the topic needs (partitions × replication factor).
        needed: u64,
        /// Replicas the live brokers can still take, at most one per
        /// partition each.
        room: u64,
        /// The limit per shard.
        per_shard: u32,
        /// The live broker with the least room left.
        fullest: BrokerRoom,
    },
}

/// How full one broker is against its partition limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokerRoom {
    /// The broker.
    pub node: NodeId,
    /// Replicas it holds.
    pub held: u64,
    /// Replicas it may hold: the limit per shard times its shards.
    pub capacity: u64,
}

/// Replicas and preferred leaderships already placed, per broker and per
/// shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementLoad {
    replicas: BTreeMap<NodeId, u32>,
    leaders: BTreeMap<NodeId, u32>,
    shard_replicas: BTreeMap<(NodeId, ShardId), u32>,
    shard_leaders: BTreeMap<(NodeId, ShardId), u32>,
}

impl PlacementLoad {
    /// The load of every partition in `state`. Preferred leaders (first
    /// replicas) count as leaderships, not current leaders: leadership
    /// returns to the preferred replica, so that is the load to balance.
    #[must_use]
    pub fn from_state(state: &MetadataState) -> PlacementLoad {
        let mut load = PlacementLoad::default();
        for topic in state.topics().values() {
            for partition in &topic.partitions {
                load.add(&partition.replicas);
            }
        }
        load
    }

    /// Counts one partition's replicas, the first as preferred leader.
    pub fn add(&mut self, replicas: &[Replica]) {
        for (position, replica) in replicas.iter().enumerate() {
            self.add_one(*replica, position == 0);
        }
    }

    /// Counts one replica, as a preferred leader or not.
    pub fn add_one(&mut self, replica: Replica, preferred_leader: bool) {
        *self.replicas.entry(replica.node).or_default() += 1;
        *self
            .shard_replicas
            .entry((replica.node, replica.shard))
            .or_default() += 1;
        if preferred_leader {
            *self.leaders.entry(replica.node).or_default() += 1;
            *self
                .shard_leaders
                .entry((replica.node, replica.shard))
                .or_default() += 1;
        }
    }

    /// Replicas on `node`.
    #[must_use]
    pub fn replicas_on(&self, node: NodeId) -> u32 {
        self.replicas.get(&node).copied().unwrap_or(0)
    }

    /// Preferred leaderships on `node`.
    #[must_use]
    pub fn leaders_on(&self, node: NodeId) -> u32 {
        self.leaders.get(&node).copied().unwrap_or(0)
    }

    /// Replicas on one shard of `node`.
    #[must_use]
    pub fn replicas_on_shard(&self, node: NodeId, shard: ShardId) -> u32 {
        self.shard_replicas
            .get(&(node, shard))
            .copied()
            .unwrap_or(0)
    }

    /// Preferred leaderships on one shard of `node`.
    #[must_use]
    pub fn leaders_on_shard(&self, node: NodeId, shard: ShardId) -> u32 {
        self.shard_leaders.get(&(node, shard)).copied().unwrap_or(0)
    }

    /// Replicas `broker` can still take with at most `per_shard` on each
    /// of its shards.
    #[must_use]
    pub fn room_on(&self, broker: &BrokerRecord, per_shard: u32) -> u64 {
        (0..broker.shard_count)
            .map(|shard| {
                u64::from(
                    per_shard.saturating_sub(self.replicas_on_shard(broker.id, ShardId(shard))),
                )
            })
            .sum()
    }
}

/// A failure domain: the rack, or the broker itself when it has no rack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Domain<'a> {
    Rack(&'a str),
    Node(NodeId),
}

pub(crate) fn domain(broker: &BrokerRecord) -> Domain<'_> {
    broker
        .rack
        .as_deref()
        .map_or(Domain::Node(broker.id), Domain::Rack)
}

/// Places `partition_count` partitions of `replication_factor` replicas on
/// the live (unfenced) brokers among `brokers`, given the existing `load`.
/// Returns one replica list per partition, preferred leader first.
///
/// # Errors
/// [`PlacementError`] when the factor is 0, above [`REPLICAS_MAX`] or above
/// the number of live brokers, or the partition count is out of range.
pub fn place<'a>(
    brokers: impl IntoIterator<Item = &'a BrokerRecord>,
    partition_count: u32,
    replication_factor: u16,
    load: &PlacementLoad,
) -> Result<Vec<Vec<Replica>>, PlacementError> {
    place_within(brokers, partition_count, replication_factor, load, u32::MAX)
}

/// [`place`], with no shard holding more than `per_shard` replicas (the
/// existing ones included): a topic that does not fit is refused whole.
///
/// # Errors
/// As [`place`]; [`PlacementError::PartitionLimit`] when the replicas do
/// not fit under the limit.
pub fn place_within<'a>(
    brokers: impl IntoIterator<Item = &'a BrokerRecord>,
    partition_count: u32,
    replication_factor: u16,
    load: &PlacementLoad,
    per_shard: u32,
) -> Result<Vec<Vec<Replica>>, PlacementError> {
    let live: BTreeMap<NodeId, &BrokerRecord> = brokers
        .into_iter()
        .filter(|broker| broker.takes_replicas())
        .map(|broker| (broker.id, broker))
        .collect();
    let factor = usize::from(replication_factor);
    if factor == 0 || factor > live.len() || factor > REPLICAS_MAX {
        return Err(PlacementError::InvalidReplicationFactor {
            requested: replication_factor,
            live: live.len(),
        });
    }
    if partition_count == 0 || partition_count > PARTITIONS_MAX {
        return Err(PlacementError::InvalidPartitions(partition_count));
    }
    let refusal = |load: &PlacementLoad| PlacementError::PartitionLimit {
        needed: u64::from(partition_count) * factor as u64,
        room: live
            .values()
            .map(|broker| {
                load.room_on(broker, per_shard)
                    .min(u64::from(partition_count))
            })
            .sum(),
        per_shard,
        fullest: live
            .values()
            .map(|broker| BrokerRoom {
                node: broker.id,
                held: u64::from(load.replicas_on(broker.id)),
                capacity: u64::from(per_shard) * u64::from(broker.shard_count),
            })
            .min_by_key(|room| (room.capacity.saturating_sub(room.held), room.node))
            .expect("at least one live broker"),
    };
    let mut placed = load.clone();
    let mut assignments = Vec::with_capacity(partition_count as usize);
    for _ in 0..partition_count {
        let replicas =
            place_partition(&live, factor, &placed, per_shard).ok_or_else(|| refusal(load))?;
        placed.add(&replicas);
        assignments.push(replicas);
    }
    Ok(assignments)
}

/// One partition's replicas, or `None` when fewer than `factor` brokers
/// have a shard with room under `per_shard`.
fn place_partition(
    live: &BTreeMap<NodeId, &BrokerRecord>,
    factor: usize,
    load: &PlacementLoad,
    per_shard: u32,
) -> Option<Vec<Replica>> {
    let has_room = |broker: &&&BrokerRecord| load.room_on(broker, per_shard) > 0;
    let mut chosen: Vec<&BrokerRecord> = Vec::with_capacity(factor);
    let leader = live
        .values()
        .filter(has_room)
        .min_by_key(|broker| {
            (
                load.leaders_on(broker.id),
                load.replicas_on(broker.id),
                broker.id,
            )
        })
        .copied();
    chosen.extend(leader);
    while chosen.len() < factor {
        let used_nodes: BTreeSet<NodeId> = chosen.iter().map(|broker| broker.id).collect();
        let used_domains: BTreeSet<Domain<'_>> =
            chosen.iter().map(|broker| domain(broker)).collect();
        let candidates = live
            .values()
            .filter(has_room)
            .filter(|broker| !used_nodes.contains(&broker.id));
        let new_domain = candidates
            .clone()
            .any(|broker| !used_domains.contains(&domain(broker)));
        let next = candidates
            .filter(|broker| !new_domain || !used_domains.contains(&domain(broker)))
            .min_by_key(|broker| {
                (
                    load.replicas_on(broker.id),
                    Reverse(load.leaders_on(broker.id)),
                    broker.id,
                )
            })
            .copied();
        // None left: the factor was checked against the live count, so
        // the others are full.
        chosen.push(next?);
    }
    Some(
        chosen
            .iter()
            .enumerate()
            .map(|(position, broker)| Replica {
                node: broker.id,
                shard: pick_shard(broker, position == 0, load, per_shard),
            })
            .collect(),
    )
}

/// The shard a new replica on `broker` takes, given `load`: the one
/// placement would pick for a new topic's replica (a preferred leader by
/// the shards' leaderships, another replica by their replicas), with no
/// limit per shard. A move's new replicas go where this says.
#[must_use]
pub fn shard_for(broker: &BrokerRecord, preferred_leader: bool, load: &PlacementLoad) -> ShardId {
    pick_shard(broker, preferred_leader, load, u32::MAX)
}

fn pick_shard(
    broker: &BrokerRecord,
    leader: bool,
    load: &PlacementLoad,
    per_shard: u32,
) -> ShardId {
    let shards = (0..broker.shard_count)
        .map(ShardId)
        .filter(|&shard| load.replicas_on_shard(broker.id, shard) < per_shard);
    let leaders = |shard| load.leaders_on_shard(broker.id, shard);
    let replicas = |shard| load.replicas_on_shard(broker.id, shard);
    let chosen = if leader {
        shards.min_by_key(|&shard| (leaders(shard), replicas(shard), shard))
    } else {
        shards.min_by_key(|&shard| (replicas(shard), Reverse(leaders(shard)), shard))
    };
    chosen.unwrap_or_default()
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
