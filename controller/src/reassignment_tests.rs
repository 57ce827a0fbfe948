//! The move rules: each step changes one replica, learners join before
//! anyone leaves, the leader leaves last, a cancel walks back; and the
//! state machine refuses every other change.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::command::{Command, Outcome};
use crate::state::{CommandError, MetadataState};
use crate::types::{LeaderEpoch, ShardId, TopicId};

const TOPIC: TopicId = TopicId(0);

pub(crate) fn replica(node: u64) -> Replica {
    Replica {
        node: NodeId(node),
        shard: ShardId((node % 2) as u16),
    }
}

pub(crate) fn set(nodes: &[u64]) -> Vec<Replica> {
    nodes.iter().copied().map(replica).collect()
}

pub(crate) fn nodes(replicas: &[Replica]) -> Vec<u64> {
    replicas.iter().map(|replica| replica.node.0).collect()
}

/// Applies commands one index after another.
pub(crate) struct Cluster {
    pub(crate) state: MetadataState,
    index: u64,
    /// The partition of topic 0 that `record`, `start`, `change` and
    /// `run_to_end` act on.
    pub(crate) focus: u32,
}

impl Cluster {
    /// Brokers 1 to 6, two shards each, live; topic 0 with one partition
    /// on `replicas`, led by the first.
    pub(crate) fn new(replicas: &[u64]) -> Self {
        Cluster::with_partitions(&[replicas])
    }

    /// As [`Cluster::new`], with one partition on each of `partitions`.
    pub(crate) fn with_partitions(partitions: &[&[u64]]) -> Self {
        let mut cluster = Cluster {
            state: MetadataState::default(),
            index: 0,
            focus: 0,
        };
        for node in 1..=6 {
            cluster.ok(&Command::RegisterBroker {
                node: NodeId(node),
                host: format!("broker-{node}"),
                port: 7100,
                rack: None,
                shard_count: 2,
                incarnation: 1,
            });
            cluster.ok(&Command::UnfenceBroker {
                node: NodeId(node),
                incarnation: 1,
            });
        }
        cluster.ok(&Command::CreateTopic {
            name: "moving".to_owned(),
            internal: false,
            config: BTreeMap::new(),
            assignments: partitions.iter().map(|replicas| set(replicas)).collect(),
            created_at_ms: 0,
            owner: None,
        });
        cluster
    }

    pub(crate) fn apply(&mut self, command: &Command) -> Result<Outcome, CommandError> {
        self.index += 1;
        let result = self.state.apply(self.index, command);
        assert_eq!(self.state.check_invariants(), Ok(()), "after {command:?}");
        result
    }

    pub(crate) fn ok(&mut self, command: &Command) -> Outcome {
        self.apply(command)
            .unwrap_or_else(|error| panic!("{command:?} refused: {error}"))
    }

    pub(crate) fn record(&self) -> &PartitionRecord {
        &self.state.topics()[&TOPIC].partitions[self.focus as usize]
    }

    pub(crate) fn start(&mut self, target: &[u64]) -> Result<Outcome, CommandError> {
        self.apply(&Command::StartReassignment {
            topic_id: TOPIC,
            partition: self.focus,
            target: set(target),
            throttle_bytes_per_s: 0,
            started_at_ms: 5,
        })
    }

    fn change(
        &mut self,
        replicas: Vec<Replica>,
        leader: Option<NodeId>,
    ) -> Result<Outcome, CommandError> {
        let epoch = LeaderEpoch(self.record().leader_epoch.0 + 1);
        self.apply(&Command::ChangeReplicaSet {
            topic_id: TOPIC,
            partition: self.focus,
            replicas,
            leader,
            epoch,
        })
    }

    /// Carries out `step` as the controller would, with the election
    /// keeping the leader when it stays and taking the first replica
    /// otherwise. Returns whether it changed the set.
    fn take(&mut self, step: Step) -> bool {
        let record = self.record().clone();
        match step {
            Step::Add(learner) => {
                let mut replicas = record.replicas.clone();
                replicas.push(learner);
                self.ok_change(replicas, record.leader);
                true
            }
            Step::Remove(node) => {
                let replicas: Vec<Replica> = record
                    .replicas
                    .iter()
                    .copied()
                    .filter(|replica| replica.node != node)
                    .collect();
                let leader = record
                    .leader
                    .filter(|leader| *leader != node)
                    .or(Some(replicas[0].node));
                self.ok_change(replicas, leader);
                true
            }
            Step::MoveLeader { to } => {
                self.ok(&Command::SetLeader {
                    topic_id: TOPIC,
                    partition: self.focus,
                    leader: Some(to),
                    epoch: LeaderEpoch(record.leader_epoch.0 + 1),
                });
                false
            }
            Step::AwaitCommit | Step::CatchUp { .. } | Step::Finished => false,
        }
    }

    fn ok_change(&mut self, replicas: Vec<Replica>, leader: Option<NodeId>) {
        let command_replicas = replicas.clone();
        if let Err(error) = self.change(command_replicas, leader) {
            panic!("change to {:?} refused: {error}", nodes(&replicas));
        }
    }

    /// Runs the move to its end with every learner caught up and every
    /// change committed; returns the sets it went through.
    pub(crate) fn run_to_end(&mut self) -> Vec<Vec<u64>> {
        let mut sets = vec![nodes(&self.record().replicas)];
        let everyone: BTreeSet<NodeId> = (1..=6).map(NodeId).collect();
        for _ in 0..32 {
            let step = next_step(
                self.record(),
                &MoveProgress {
                    committed: true,
                    caught_up: &everyone,
                },
            );
            if step == Step::Finished {
                return sets;
            }
            if self.take(step) {
                sets.push(nodes(&self.record().replicas));
            }
        }
        panic!("the move did not finish: {sets:?}");
    }
}

/// Consecutive sets differ by exactly one broker.
fn one_change_at_a_time(sets: &[Vec<u64>]) {
    for pair in sets.windows(2) {
        let before: BTreeSet<u64> = pair[0].iter().copied().collect();
        let after: BTreeSet<u64> = pair[1].iter().copied().collect();
        assert_eq!(
            before.symmetric_difference(&after).count(),
            1,
            "{:?} to {:?} is not one replica",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn a_move_adds_every_learner_then_removes_and_ends_in_the_targets_order() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    assert_eq!(
        cluster.start(&[4, 2, 5]),
        Ok(Outcome::ReassignmentStarted {
            topic_id: TOPIC,
            partition: 0
        })
    );
    let sets = cluster.run_to_end();
    // The last set is in the target's order: preferred leader first.
    assert_eq!(
        sets,
        vec![
            vec![1, 2, 3],
            vec![1, 2, 3, 4],
            vec![1, 2, 3, 4, 5],
            vec![1, 2, 4, 5],
            vec![4, 2, 5],
        ]
    );
    one_change_at_a_time(&sets);
    let record = cluster.record();
    assert_eq!(
        nodes(&record.replicas),
        vec![4, 2, 5],
        "preferred leader first"
    );
    assert_eq!(record.reassignment, None);
    assert!(
        record
            .leader
            .is_some_and(|leader| [2, 4, 5].contains(&leader.0))
    );
}

#[test]
fn the_leader_leaves_last_and_only_after_its_leadership_moved() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    cluster.start(&[2, 3, 4]).unwrap();
    let everyone: BTreeSet<NodeId> = (1..=6).map(NodeId).collect();
    let progress = MoveProgress {
        committed: true,
        caught_up: &everyone,
    };
    assert_eq!(
        next_step(cluster.record(), &progress),
        Step::Add(replica(4))
    );
    cluster.take(Step::Add(replica(4)));
    // Leader 1 is the only replica leaving: it hands off to the goal's
    // first replica before the set changes.
    assert_eq!(
        next_step(cluster.record(), &progress),
        Step::MoveLeader { to: NodeId(2) }
    );
    cluster.take(Step::MoveLeader { to: NodeId(2) });
    assert_eq!(
        next_step(cluster.record(), &progress),
        Step::Remove(NodeId(1))
    );
    // The state machine would refuse a set without its leader.
    let without_leader = set(&[2, 3, 4]);
    assert!(matches!(
        cluster.change(without_leader, Some(NodeId(1))),
        Err(CommandError::NotAReplica { .. })
    ));
}

#[test]
fn a_move_waits_for_the_last_change_to_commit_and_for_each_learner() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    cluster.start(&[1, 2, 4]).unwrap();
    let nobody = BTreeSet::new();
    let waiting = |committed, caught_up| MoveProgress {
        committed,
        caught_up,
    };
    assert_eq!(
        next_step(cluster.record(), &waiting(false, &nobody)),
        Step::AwaitCommit
    );
    assert_eq!(
        next_step(cluster.record(), &waiting(true, &nobody)),
        Step::CatchUp { learner: NodeId(4) }
    );
    let four = BTreeSet::from([NodeId(4)]);
    assert_eq!(
        next_step(cluster.record(), &waiting(true, &four)),
        Step::Add(replica(4))
    );
    assert_eq!(
        next_step(&cluster.record().clone(), &waiting(true, &four)),
        Step::Add(replica(4))
    );
    let mut still = cluster.record().clone();
    still.reassignment = None;
    assert_eq!(next_step(&still, &waiting(false, &nobody)), Step::Finished);
}

#[test]
fn a_cancel_walks_back_to_the_original_set_in_its_order() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    cluster.start(&[4, 5, 6]).unwrap();
    cluster.take(Step::Add(replica(4)));
    cluster.take(Step::Add(replica(5)));
    let cancel = Command::CancelReassignment {
        topic_id: TOPIC,
        partition: 0,
    };
    assert_eq!(
        cluster.apply(&cancel),
        Ok(Outcome::ReassignmentCancelled { changed: true })
    );
    assert_eq!(
        cluster.apply(&cancel),
        Ok(Outcome::ReassignmentCancelled { changed: false })
    );
    // A learner of the abandoned target no longer joins.
    assert!(matches!(
        cluster.change(set(&[1, 2, 3, 4, 5, 6]), Some(NodeId(1))),
        Err(CommandError::BadReplicaChange {
            reason: ChangeError::NotALearner(NodeId(6)),
            ..
        })
    ));
    let sets = cluster.run_to_end();
    assert_eq!(
        sets,
        vec![vec![1, 2, 3, 4, 5], vec![1, 2, 3, 5], vec![1, 2, 3]]
    );
    assert_eq!(nodes(&cluster.record().replicas), vec![1, 2, 3]);
    assert_eq!(cluster.record().reassignment, None);
}

#[test]
fn a_cancel_before_the_first_change_ends_the_move_at_once() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    cluster.start(&[4, 5, 6]).unwrap();
    cluster.ok(&Command::CancelReassignment {
        topic_id: TOPIC,
        partition: 0,
    });
    assert_eq!(cluster.record().reassignment, None);
    assert_eq!(nodes(&cluster.record().replicas), vec![1, 2, 3]);
    assert_eq!(cluster.record().leader_epoch, LeaderEpoch(0));
}

#[test]
fn a_change_of_more_than_one_replica_or_outside_the_move_is_refused() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    let refusal = |result: Result<Outcome, CommandError>| match result {
        Err(CommandError::BadReplicaChange { reason, .. }) => reason,
        other => panic!("not refused as a bad change: {other:?}"),
    };
    // No move: no change.
    assert_eq!(
        refusal(cluster.change(set(&[1, 2, 3, 4]), Some(NodeId(1)))),
        ChangeError::NoReassignment
    );
    cluster.start(&[4, 5, 6]).unwrap();
    // Kafka's one-step union: two disjoint majorities could commit.
    assert_eq!(
        refusal(cluster.change(set(&[1, 2, 3, 4, 5, 6]), Some(NodeId(1)))),
        ChangeError::NotOneReplica {
            added: 3,
            removed: 0
        }
    );
    assert_eq!(
        refusal(cluster.change(set(&[1, 2, 4]), Some(NodeId(1)))),
        ChangeError::NotOneReplica {
            added: 1,
            removed: 1
        }
    );
    assert_eq!(
        refusal(cluster.change(set(&[1, 2, 3]), Some(NodeId(1)))),
        ChangeError::NotOneReplica {
            added: 0,
            removed: 0
        }
    );
    let mut other_shard = set(&[1, 2, 3]);
    other_shard.push(Replica {
        node: NodeId(4),
        shard: ShardId(1),
    });
    assert_eq!(
        refusal(cluster.change(other_shard, Some(NodeId(1)))),
        ChangeError::NotALearner(NodeId(4))
    );
    // Nothing above changed the partition.
    assert_eq!(nodes(&cluster.record().replicas), vec![1, 2, 3]);
    assert_eq!(cluster.record().leader_epoch, LeaderEpoch(0));

    let mut cluster = Cluster::new(&[1, 2, 3]);
    cluster.start(&[1, 2, 3, 4]).unwrap();
    assert_eq!(
        refusal(cluster.change(set(&[1, 2]), Some(NodeId(1)))),
        ChangeError::InGoal(NodeId(3))
    );
}

#[test]
fn a_move_is_refused_while_another_runs_or_when_there_is_nothing_to_move() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    assert!(matches!(
        cluster.start(&[3, 2, 1]),
        Err(CommandError::NothingToMove { .. })
    ));
    assert!(matches!(
        cluster.start(&[1, 2, 9]),
        Err(CommandError::UnknownBroker(NodeId(9)))
    ));
    assert!(matches!(
        cluster.start(&[1, 2, 2]),
        Err(CommandError::InvalidAssignment { .. })
    ));
    // A broker that is down cannot be a target.
    cluster.ok(&Command::FenceBroker { node: NodeId(6) });
    assert_eq!(
        cluster.start(&[1, 2, 6]),
        Err(CommandError::BrokerFenced(NodeId(6)))
    );
    cluster.start(&[1, 2, 5]).unwrap();
    assert!(matches!(
        cluster.start(&[1, 2, 4]),
        Err(CommandError::ReassignmentInProgress { .. })
    ));
    // A broker cannot drop the shard a move is to use (5's replica goes on
    // its shard 1).
    assert!(matches!(
        cluster.apply(&Command::RegisterBroker {
            node: NodeId(5),
            host: "broker-5".to_owned(),
            port: 7100,
            rack: None,
            shard_count: 1,
            incarnation: 2,
        }),
        Err(CommandError::ShardsInUse { .. })
    ));
}

#[test]
fn a_move_in_progress_survives_a_snapshot_and_only_it_needs_version_7() {
    let mut cluster = Cluster::new(&[1, 2, 3]);
    assert!(cluster.state.encode()[4] < 7, "nothing needs version 7 yet");
    cluster.start(&[2, 3, 4]).unwrap();
    cluster.take(Step::Add(replica(4)));
    let bytes = cluster.state.encode();
    assert_eq!(bytes[4], 7);
    let decoded = MetadataState::decode(&bytes).expect("decodes");
    assert_eq!(decoded, cluster.state);
    assert!(
        decoded.topics()[&TOPIC].partitions[0]
            .reassignment
            .is_some()
    );
}

#[test]
fn a_new_replica_takes_the_shard_placement_picks_and_a_staying_one_keeps_its_own() {
    // Broker 4 leads partition 1 on shard 0, broker 5 holds it on shard 1.
    let cluster = Cluster::with_partitions(&[&[1, 2, 3], &[4, 5, 6]]);
    let record = cluster.record().clone();
    let target = target_replicas(&cluster.state, &record, &[4, 2, 5].map(NodeId));
    let placed: Vec<(u64, u16)> = target
        .iter()
        .map(|replica| (replica.node.0, replica.shard.0))
        .collect();
    assert_eq!(placed, vec![(4, 1), (2, 0), (5, 0)]);
    // Unknown brokers get shard 0 (and the move is refused).
    let unknown = target_replicas(&cluster.state, &record, &[NodeId(9)]);
    assert_eq!(unknown[0].shard, ShardId(0));
}

proptest! {
    /// Whatever the learners and commits do, and wherever a cancel comes,
    /// every step changes one replica, every added one was caught up,
    /// nothing changes while the last change is uncommitted, and the move
    /// ends at its goal.
    #[test]
    fn every_move_goes_one_replica_at_a_time_to_its_goal(
        original in proptest::sample::subsequence((1u64..=6).collect::<Vec<_>>(), 1..=4),
        target in proptest::sample::subsequence((1u64..=6).collect::<Vec<_>>(), 1..=4),
        rounds in proptest::collection::vec((any::<bool>(), 0u8..64), 1..80),
        cancel_at in proptest::option::of(0usize..80),
    ) {
        let mut cluster = Cluster::new(&original);
        if cluster.start(&target).is_err() {
            prop_assert_eq!(BTreeSet::from_iter(&original), BTreeSet::from_iter(&target));
            return Ok(());
        }
        let mut sets = vec![nodes(&cluster.record().replicas)];
        let mut cancelled = false;
        for (round, (committed, caught_up_bits)) in rounds.iter().enumerate() {
            if cancel_at == Some(round) && cluster.record().reassignment.is_some() {
                cluster.ok(&Command::CancelReassignment { topic_id: TOPIC, partition: 0 });
                cancelled = true;
            }
            let caught_up: BTreeSet<NodeId> = (1..=6u64)
                .filter(|node| caught_up_bits & (1 << (node - 1)) != 0)
                .map(NodeId)
                .collect();
            let step = next_step(cluster.record(), &MoveProgress { committed: *committed, caught_up: &caught_up });
            match step {
                Step::Add(learner) => prop_assert!(*committed && caught_up.contains(&learner.node)),
                Step::Remove(_) | Step::MoveLeader { .. } => prop_assert!(*committed),
                _ => {}
            }
            if cluster.take(step) {
                sets.push(nodes(&cluster.record().replicas));
            }
        }
        one_change_at_a_time(&sets);
        // Then with everything caught up and committed, it finishes.
        let rest = cluster.run_to_end();
        sets.extend(rest.into_iter().skip(1));
        one_change_at_a_time(&sets);
        let goal = if cancelled { &original } else { &target };
        prop_assert_eq!(nodes(&cluster.record().replicas), goal.clone());
        prop_assert!(cluster.record().reassignment.is_none());
    }
}
