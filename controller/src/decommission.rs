//! Decommissioning a broker: moving every replica off it, so that it can be
//! removed from the cluster, or replacing a broker that is dead for good.
//!
//! `SetBrokerDecommission` marks the broker; from then on placement gives
//! it nothing new, and the controller leader starts moves
//! ([`crate::reassignment`]) of the partitions it holds, each to the set
//! with that broker replaced by one chosen here. At most
//! [`Decommission::max_moves`] of them run at once, each learner copying
//! at most [`Decommission::throttle_bytes_per_s`]. A move copies from the
//! partition's leader, so a dead broker is replaced the same way: the
//! surviving replicas elect a leader, a new replica catches up from it, and
//! the set changes one replica at a time as in any move. A partition whose
//! only replica was on that broker has no leader to copy from; it waits
//! (and shows as such) until the broker comes back or the topic is deleted.
//!
//! Recommissioning clears the mark and turns back the moves still running
//! off the broker (a move that finished stays). This module is pure: the
//! leader calls [`next_moves`] and proposes what it returns.

use std::collections::BTreeSet;

use crate::command::Command;
use crate::placement::{PlacementLoad, domain, shard_for};
use crate::state::{BrokerRecord, MetadataState, PartitionRecord};
use crate::types::{NodeId, Replica, TopicId};

/// How a broker's replicas are moved off it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decommission {
    /// Bytes a second each new replica copies at most; 0 for no limit.
    pub throttle_bytes_per_s: u64,
    /// Moves off this broker running at once; at least 1.
    pub max_moves: u16,
}

/// Whether the move on `record` takes its replica off `node`: it started
/// from a set holding `node`, goes to one without, and is not cancelled.
#[must_use]
pub fn moves_off(record: &PartitionRecord, node: NodeId) -> bool {
    record.reassignment.as_ref().is_some_and(|reassignment| {
        !reassignment.cancelled
            && reassignment.original.iter().any(|r| r.node == node)
            && reassignment.target.iter().all(|r| r.node != node)
    })
}

/// The moves to start now for every decommissioning broker of `state`,
/// stamped `now_ms`: for each, up to its `max_moves` minus the moves off it
/// already running, over the partitions it holds that have a leader and no
/// move in progress, in topic and partition order.
#[must_use]
pub fn next_moves(state: &MetadataState, now_ms: i64) -> Vec<Command> {
    // Called every tick: no scan of the partitions unless needed.
    if state
        .brokers()
        .values()
        .all(|broker| broker.decommission.is_none())
    {
        return Vec::new();
    }
    let mut load = PlacementLoad::from_state(state);
    let mut chosen: BTreeSet<(TopicId, u32)> = BTreeSet::new();
    let mut moves = Vec::new();
    for broker in state.brokers().values() {
        let Some(decommission) = broker.decommission else {
            continue;
        };
        let running = state
            .partitions()
            .filter(|(_, _, record)| moves_off(record, broker.id))
            .count();
        let mut budget = usize::from(decommission.max_moves.max(1)).saturating_sub(running);
        for (topic_id, partition, record) in state.partitions() {
            if budget == 0 {
                break;
            }
            let movable = record.reassignment.is_none()
                && record.leader.is_some()
                && record.replica_on(broker.id).is_some()
                && !chosen.contains(&(topic_id, partition));
            if !movable {
                continue;
            }
            let Some((target, position)) = replace(state, &load, record, broker.id) else {
                continue;
            };
            load.add_one(target[position], position == 0);
            chosen.insert((topic_id, partition));
            budget -= 1;
            moves.push(Command::StartReassignment {
                topic_id,
                partition,
                target,
                throttle_bytes_per_s: decommission.throttle_bytes_per_s,
                started_at_ms: now_ms,
            });
        }
    }
    moves
}

/// What is left of a broker's decommission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remaining {
    /// Partitions that still hold a replica on it.
    pub replicas: u32,
    /// Of those, the ones moving off it now.
    pub moving: u32,
    /// Of those, the ones with no leader to copy from.
    pub leaderless: u32,
}

/// How far the decommission of `node` got in `state`.
#[must_use]
pub fn remaining(state: &MetadataState, node: NodeId) -> Remaining {
    let mut remaining = Remaining::default();
    for (_, _, record) in state.partitions() {
        if record.replica_on(node).is_none() {
            continue;
        }
        remaining.replicas += 1;
        remaining.moving += u32::from(moves_off(record, node));
        remaining.leaderless += u32::from(record.leader.is_none());
    }
    remaining
}

/// `record`'s set with the replica on `leaving` replaced by one on a live
/// broker that is not leaving and not in the set, and the replaced
/// position: on a failure domain the other replicas do not use whenever one
/// is left, then the broker with the fewest replicas, then the lowest id.
/// `None` when no broker qualifies.
fn replace(
    state: &MetadataState,
    load: &PlacementLoad,
    record: &PartitionRecord,
    leaving: NodeId,
) -> Option<(Vec<Replica>, usize)> {
    let brokers = state.brokers();
    let staying: Vec<&BrokerRecord> = record
        .replicas
        .iter()
        .filter(|replica| replica.node != leaving)
        .filter_map(|replica| brokers.get(&replica.node))
        .collect();
    let used_domains: BTreeSet<_> = staying.iter().map(|broker| domain(broker)).collect();
    let candidates = brokers
        .values()
        .filter(|broker| broker.takes_replicas() && record.replica_on(broker.id).is_none());
    let new_domain = candidates
        .clone()
        .any(|broker| !used_domains.contains(&domain(broker)));
    let chosen = candidates
        .filter(|broker| !new_domain || !used_domains.contains(&domain(broker)))
        .min_by_key(|broker| (load.replicas_on(broker.id), broker.id))?;
    let position = record
        .replicas
        .iter()
        .position(|replica| replica.node == leaving)?;
    let mut target = record.replicas.clone();
    target[position] = Replica {
        node: chosen.id,
        shard: shard_for(chosen, position == 0, load),
    };
    Some((target, position))
}

#[cfg(test)]
#[path = "decommission_tests.rs"]
mod tests;
