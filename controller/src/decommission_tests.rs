//! Decommissioning: which moves start, how many at once, where replicas
//! go, and what recommissioning turns back.

use super::*;
use crate::command::Outcome;
use crate::placement::place;
use crate::reassignment::tests::{Cluster, nodes};
use crate::state::CommandError;
use crate::types::LeaderEpoch;

const TOPIC: TopicId = TopicId(0);

fn decommission(node: u64, max_moves: u16) -> Command {
    Command::SetBrokerDecommission {
        node: NodeId(node),
        decommission: Some(Decommission {
            throttle_bytes_per_s: 1 << 20,
            max_moves,
        }),
    }
}

fn recommission(node: u64) -> Command {
    Command::SetBrokerDecommission {
        node: NodeId(node),
        decommission: None,
    }
}

/// The partitions and target sets of `moves`.
fn targets(moves: &[Command]) -> Vec<(u32, Vec<u64>)> {
    moves
        .iter()
        .map(|command| match command {
            Command::StartReassignment {
                topic_id,
                partition,
                target,
                throttle_bytes_per_s,
                started_at_ms,
            } => {
                assert_eq!(*topic_id, TOPIC);
                assert_eq!(*throttle_bytes_per_s, 1 << 20);
                assert_eq!(*started_at_ms, 77);
                (*partition, nodes(target))
            }
            other => panic!("not a move: {other:?}"),
        })
        .collect()
}

/// Starts every move `next_moves` asks for and runs each to its end, until
/// none is left; returns how many moves ran.
fn drain(cluster: &mut Cluster) -> usize {
    let mut moved = 0;
    for _ in 0..64 {
        let moves = next_moves(&cluster.state, 77);
        if moves.is_empty() {
            return moved;
        }
        for command in &moves {
            cluster.ok(command);
        }
        for command in &moves {
            if let Command::StartReassignment { partition, .. } = command {
                cluster.focus = *partition;
                cluster.run_to_end();
                moved += 1;
            }
        }
    }
    panic!("the decommission did not end");
}

#[test]
fn a_decommission_replaces_the_broker_in_each_partition_a_few_at_a_time() {
    let mut cluster =
        Cluster::with_partitions(&[&[1, 2, 3], &[2, 3, 4], &[3, 1, 2], &[4, 5, 6], &[5, 3, 6]]);
    assert!(matches!(
        cluster.ok(&decommission(3, 2)),
        Outcome::BrokerDecommission { changed: true, .. }
    ));
    // Two at once, in partition order; each replaces broker 3 in place, on
    // the broker with the fewest replicas that the partition does not use
    // (counting the moves chosen before it), then the lowest id.
    let moves = next_moves(&cluster.state, 77);
    assert_eq!(
        targets(&moves),
        vec![(0, vec![1, 2, 4]), (1, vec![2, 1, 4])],
    );
    for command in &moves {
        cluster.ok(command);
    }
    assert_eq!(
        next_moves(&cluster.state, 77),
        Vec::new(),
        "two moves run already"
    );
    assert_eq!(
        remaining(&cluster.state, NodeId(3)),
        Remaining {
            replicas: 4,
            moving: 2,
            leaderless: 0
        }
    );
    cluster.focus = 0;
    cluster.run_to_end();
    // One finished: one more starts.
    assert_eq!(targets(&next_moves(&cluster.state, 77)).len(), 1);

    cluster.focus = 1;
    cluster.run_to_end();
    assert_eq!(drain(&mut cluster), 2);
    assert_eq!(remaining(&cluster.state, NodeId(3)), Remaining::default());
    for record in &cluster.state.topics()[&TOPIC].partitions {
        assert_eq!(record.replica_on(NodeId(3)), None);
        assert_eq!(record.replicas.len(), 3);
        assert_ne!(record.leader, Some(NodeId(3)));
    }
}

#[test]
fn a_replacement_goes_to_a_rack_the_partition_does_not_use() {
    let mut cluster = Cluster::with_partitions(&[&[1, 2, 3]]);
    // Racks: 1 and 4 in a, 2 and 5 in b, 3 and 6 in c.
    for node in 1..=6_u64 {
        cluster.ok(&Command::RegisterBroker {
            node: NodeId(node),
            host: format!("broker-{node}"),
            port: 7100,
            rack: Some(["a", "b", "c"][((node - 1) % 3) as usize].to_owned()),
            shard_count: 2,
            incarnation: 2,
        });
        cluster.ok(&Command::UnfenceBroker {
            node: NodeId(node),
            incarnation: 2,
        });
    }
    // A new incarnation of its leader left the partition leaderless.
    cluster.ok(&Command::SetLeader {
        topic_id: TOPIC,
        partition: 0,
        leader: Some(NodeId(1)),
        epoch: LeaderEpoch(1),
    });
    cluster.ok(&decommission(3, 4));
    // 4 and 5 hold fewer replicas, but only 6 is on rack c.
    assert_eq!(
        targets(&next_moves(&cluster.state, 77)),
        vec![(0, vec![1, 2, 6])]
    );
}

#[test]
fn a_dead_brokers_partitions_move_once_a_survivor_leads_and_a_lost_one_waits() {
    let mut cluster = Cluster::with_partitions(&[&[3, 1, 2], &[3]]);
    cluster.ok(&Command::FenceBroker { node: NodeId(3) });
    for partition in 0..2 {
        cluster.ok(&Command::SetLeader {
            topic_id: TOPIC,
            partition,
            leader: None,
            epoch: LeaderEpoch(2),
        });
    }
    cluster.ok(&decommission(3, 4));
    assert_eq!(
        next_moves(&cluster.state, 77),
        Vec::new(),
        "no leader to copy from"
    );
    assert_eq!(remaining(&cluster.state, NodeId(3)).leaderless, 2);
    cluster.ok(&Command::SetLeader {
        topic_id: TOPIC,
        partition: 0,
        leader: Some(NodeId(1)),
        epoch: LeaderEpoch(3),
    });
    // The replacement takes the dead broker's place, first.
    assert_eq!(
        targets(&next_moves(&cluster.state, 77)),
        vec![(0, vec![4, 1, 2])]
    );
    assert_eq!(drain(&mut cluster), 1);
    assert_eq!(
        remaining(&cluster.state, NodeId(3)),
        Remaining {
            replicas: 1,
            moving: 0,
            leaderless: 1
        }
    );
}

#[test]
fn recommissioning_turns_back_the_moves_off_the_broker_and_keeps_finished_ones() {
    let mut cluster = Cluster::with_partitions(&[&[1, 2, 3], &[2, 3, 4], &[4, 5, 6]]);
    cluster.ok(&decommission(3, 4));
    for command in next_moves(&cluster.state, 77) {
        cluster.ok(&command);
    }
    cluster.focus = 0;
    cluster.run_to_end();
    // An operator's move of another partition is left alone.
    cluster.focus = 2;
    cluster.start(&[4, 5, 1]).expect("starts");
    assert_eq!(
        cluster.ok(&recommission(3)),
        Outcome::BrokerDecommission {
            node: NodeId(3),
            changed: true,
            cancelled: 1,
        }
    );
    let partitions = &cluster.state.topics()[&TOPIC].partitions;
    assert_eq!(nodes(&partitions[0].replicas), vec![1, 2, 5], "finished");
    assert_eq!(
        partitions[1].reassignment, None,
        "cancelled before its first change"
    );
    assert_eq!(nodes(&partitions[1].replicas), vec![2, 3, 4]);
    assert!(
        partitions[2].reassignment.is_some(),
        "not a move off broker 3"
    );
    assert_eq!(cluster.state.brokers()[&NodeId(3)].decommission, None);
    assert_eq!(next_moves(&cluster.state, 77), Vec::new());
}

#[test]
fn a_decommissioning_broker_gets_no_new_replica_and_keeps_its_mark_across_restarts() {
    let mut cluster = Cluster::with_partitions(&[&[1, 2, 3]]);
    cluster.ok(&decommission(6, 1));
    cluster.ok(&Command::RegisterBroker {
        node: NodeId(6),
        host: "broker-6".to_owned(),
        port: 7100,
        rack: None,
        shard_count: 2,
        incarnation: 2,
    });
    cluster.ok(&Command::UnfenceBroker {
        node: NodeId(6),
        incarnation: 2,
    });
    assert!(cluster.state.brokers()[&NodeId(6)].decommission.is_some());
    let load = crate::placement::PlacementLoad::from_state(&cluster.state);
    let placed = place(cluster.state.brokers().values(), 12, 3, &load).expect("places");
    assert!(
        placed
            .iter()
            .flatten()
            .all(|replica| replica.node != NodeId(6))
    );
    // Nor from an operator's move.
    cluster.focus = 0;
    assert_eq!(
        cluster.start(&[1, 2, 6]),
        Err(CommandError::BrokerDecommissioning(NodeId(6)))
    );
    // Five brokers stay: a replica set of five still fits, six would not.
    assert!(place(cluster.state.brokers().values(), 1, 6, &load).is_err());
}

#[test]
fn a_decommission_that_leaves_too_few_brokers_is_refused() {
    let mut cluster = Cluster::with_partitions(&[&[1, 2, 3, 4, 5]]);
    cluster.ok(&decommission(6, 1));
    let refused = cluster.apply(&decommission(1, 1));
    assert!(
        matches!(refused, Err(CommandError::InvalidDecommission { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        cluster.apply(&decommission(2, 0)),
        Err(CommandError::InvalidDecommission { .. })
    ));
    assert!(matches!(
        cluster.apply(&decommission(9, 1)),
        Err(CommandError::UnknownBroker(_))
    ));
    // Recommissioning broker 6 makes room again.
    cluster.ok(&recommission(6));
    cluster.ok(&decommission(1, 1));
}
