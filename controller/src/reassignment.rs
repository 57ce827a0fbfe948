//! Replica reassignment: moving a partition from one replica set to another
//! while no two disjoint majorities can ever commit.
//!
//! corelog commits a record once a majority of the replica set holds it, so
//! Kafka's one-step move to the union of the old and new sets is unsafe
//! here: from {1,2,3} to {1,2,3,4,5,6}, the old leader can still commit on
//! {1,2} while a new leader commits on {3,4,5,6}. A move instead goes one
//! replica at a time, and every majority of a set meets every majority of
//! that set with one replica added or removed:
//!
//! 1. each replica of the target that is not in the set joins as a
//!    *learner*: the leader replicates to it, and never counts it toward the
//!    high watermark, until it holds the leader's log end;
//! 2. learners join the set one at a time, then the replicas outside the
//!    target leave it one at a time (add before remove); each change is a
//!    new leader epoch through the election rule
//!    ([`crate::Command::ChangeReplicaSet`]);
//! 3. a change waits until the one before it is committed: the leader's
//!    marker of the current epoch is committed on a majority of the current
//!    set ([`MoveProgress::committed`]);
//! 4. the leader leaves last, and only after its leadership moved to a
//!    replica of the target.
//!
//! A cancel walks back the same way, to the set the move started from.
//! This module holds the move's state and the pure rules: which change is
//! next ([`next_step`]) and which the state machine accepts
//! ([`check_change`]).

use std::collections::BTreeSet;

use crate::placement::{PlacementLoad, shard_for};
use crate::state::{MetadataState, PartitionRecord};
use crate::types::{NodeId, Replica, ShardId};

/// A move in progress, kept in its [`PartitionRecord`] until the replica
/// set is its goal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reassignment {
    /// The set the move started from, where a cancel returns.
    pub original: Vec<Replica>,
    /// The set it was asked to reach, preferred leader first.
    pub target: Vec<Replica>,
    /// Bytes a second each learner copies at most; 0 for no limit.
    pub throttle_bytes_per_s: u64,
    /// When it started (stamped by the proposer), for progress reports.
    pub started_at_ms: i64,
    /// Cancelled: it returns to `original`.
    pub cancelled: bool,
}

impl Reassignment {
    /// The set the move goes to now: the target, or after a cancel the
    /// original set.
    #[must_use]
    pub fn goal(&self) -> &[Replica] {
        if self.cancelled {
            &self.original
        } else {
            &self.target
        }
    }

    /// Replicas of the goal not in `current`: the learners, in goal order.
    #[must_use]
    pub fn learners(&self, current: &[Replica]) -> Vec<Replica> {
        self.goal()
            .iter()
            .copied()
            .filter(|replica| !holds(current, replica.node))
            .collect()
    }

    /// Whether `current` holds exactly the goal's brokers.
    #[must_use]
    pub fn reached(&self, current: &[Replica]) -> bool {
        same_brokers(current, self.goal())
    }
}

/// The replica set on `nodes` (preferred leader first) for a move of
/// `record`: a broker that holds a replica keeps its shard; a new one
/// gets the shard placement would pick ([`crate::placement::shard_for`]),
/// counting the new replicas before it. An unregistered broker gets shard
/// 0, and the state machine refuses the move.
#[must_use]
pub fn target_replicas(
    state: &MetadataState,
    record: &PartitionRecord,
    nodes: &[NodeId],
) -> Vec<Replica> {
    let mut load = PlacementLoad::from_state(state);
    nodes
        .iter()
        .enumerate()
        .map(|(position, node)| {
            if let Some(replica) = record.replica_on(*node) {
                return replica;
            }
            let preferred_leader = position == 0;
            let shard = state.brokers().get(node).map_or(ShardId(0), |broker| {
                shard_for(broker, preferred_leader, &load)
            });
            let replica = Replica { node: *node, shard };
            load.add_one(replica, preferred_leader);
            replica
        })
        .collect()
}

/// Turns the move on `record` back toward its original set: at once when
/// no change was made yet (only learners were added, and they are
/// dropped). Returns whether this cancel turned it, or `None` when no move
/// is in progress.
pub(crate) fn cancel(record: &mut PartitionRecord) -> Option<bool> {
    let reassignment = record.reassignment.as_mut()?;
    let changed = !reassignment.cancelled;
    reassignment.cancelled = true;
    if reassignment.reached(&record.replicas) {
        record.replicas = reassignment.original.clone();
        record.reassignment = None;
    }
    Some(changed)
}

/// What a move waits for or does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The last change is not known committed yet.
    AwaitCommit,
    /// The learner on this broker is still catching up.
    CatchUp {
        /// Its broker.
        learner: NodeId,
    },
    /// Propose the set with this caught-up learner added.
    Add(Replica),
    /// The leader is the last replica to leave: move its leadership to
    /// this replica of the goal first.
    MoveLeader {
        /// The new leader.
        to: NodeId,
    },
    /// Propose the set without the replica on this broker.
    Remove(NodeId),
    /// The set is the goal: nothing is left to do.
    Finished,
}

/// What the partition's leader reported of a move.
#[derive(Clone, Copy, Debug)]
pub struct MoveProgress<'a> {
    /// The leader's marker of the current epoch is committed: a majority of
    /// the current set holds the current epoch, so the change that started
    /// it is committed and the next may begin.
    pub committed: bool,
    /// Learners that hold the leader's log end.
    pub caught_up: &'a BTreeSet<NodeId>,
}

/// The next step of the move on `record` given `progress`; `Finished` when
/// no move is in progress.
#[must_use]
pub fn next_step(record: &PartitionRecord, progress: &MoveProgress<'_>) -> Step {
    let Some(reassignment) = &record.reassignment else {
        return Step::Finished;
    };
    let current = &record.replicas;
    if reassignment.reached(current) {
        return Step::Finished;
    }
    if !progress.committed {
        return Step::AwaitCommit;
    }
    if let Some(learner) = reassignment.learners(current).first() {
        return if progress.caught_up.contains(&learner.node) {
            Step::Add(*learner)
        } else {
            Step::CatchUp {
                learner: learner.node,
            }
        };
    }
    let goal = reassignment.goal();
    let leaving: Vec<NodeId> = current
        .iter()
        .map(|replica| replica.node)
        .filter(|node| !holds(goal, *node))
        .collect();
    if let Some(node) = leaving.iter().find(|node| Some(**node) != record.leader) {
        return Step::Remove(*node);
    }
    // Only the leader is left to leave. Every replica of the goal is in the
    // set by now (learners join before anyone leaves).
    Step::MoveLeader { to: goal[0].node }
}

/// Why the state machine refuses a change of a moving partition's set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// No move is in progress on the partition.
    #[error("no reassignment is in progress")]
    NoReassignment,
    /// The change is not one replica added or removed.
    #[error(
        "a replica set changes by one replica at a time, not {added} added and {removed} removed"
    )]
    NotOneReplica {
        /// Brokers added.
        added: usize,
        /// Brokers removed.
        removed: usize,
    },
    /// The added replica is not a learner of the move (or on another shard).
    #[error("broker {0} is not a learner of the reassignment")]
    NotALearner(NodeId),
    /// The removed replica is in the move's goal.
    #[error("broker {0} is in the reassignment's goal and cannot leave the set")]
    InGoal(NodeId),
    /// A replica kept in the set changed shard.
    #[error("the replica on broker {0} cannot change shard")]
    ShardChanged(NodeId),
}

/// Checks that `replicas` is the set of the moving `record` with one
/// learner of the goal added or one replica outside the goal removed.
///
/// # Errors
/// [`ChangeError`] naming the rule broken.
pub fn check_change(record: &PartitionRecord, replicas: &[Replica]) -> Result<(), ChangeError> {
    let reassignment = record
        .reassignment
        .as_ref()
        .ok_or(ChangeError::NoReassignment)?;
    let current = &record.replicas;
    let added: Vec<&Replica> = replicas
        .iter()
        .filter(|replica| !holds(current, replica.node))
        .collect();
    let removed: Vec<&Replica> = current
        .iter()
        .filter(|replica| !holds(replicas, replica.node))
        .collect();
    if added.len() + removed.len() != 1 {
        return Err(ChangeError::NotOneReplica {
            added: added.len(),
            removed: removed.len(),
        });
    }
    for replica in &added {
        if !reassignment.learners(current).contains(replica) {
            return Err(ChangeError::NotALearner(replica.node));
        }
    }
    for replica in &removed {
        if holds(reassignment.goal(), replica.node) {
            return Err(ChangeError::InGoal(replica.node));
        }
    }
    for replica in replicas {
        if let Some(kept) = current.iter().find(|kept| kept.node == replica.node)
            && kept.shard != replica.shard
        {
            return Err(ChangeError::ShardChanged(replica.node));
        }
    }
    Ok(())
}

/// Whether two sets hold the same brokers, in any order.
#[must_use]
pub fn same_brokers(left: &[Replica], right: &[Replica]) -> bool {
    left.len() == right.len() && left.iter().all(|replica| holds(right, replica.node))
}

fn holds(replicas: &[Replica], node: NodeId) -> bool {
    replicas.iter().any(|replica| replica.node == node)
}

#[cfg(test)]
#[path = "reassignment_tests.rs"]
pub(crate) mod tests;
