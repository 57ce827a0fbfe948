use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::command::Command;

fn broker(id: u64, rack: Option<&str>, shard_count: u16) -> BrokerRecord {
    BrokerRecord {
        id: NodeId(id),
        host: format!("broker-{id}"),
        port: 7100,
        rack: rack.map(str::to_owned),
        shard_count,
        incarnation: 1,
        fenced: false,
        maintenance: false,
        decommission: None,
    }
}

fn spread(values: impl IntoIterator<Item = u32>) -> u32 {
    let values: Vec<u32> = values.into_iter().collect();
    values.iter().max().unwrap_or(&0) - values.iter().min().unwrap_or(&0)
}

fn load_of(assignments: &[Vec<Replica>]) -> PlacementLoad {
    let mut load = PlacementLoad::default();
    for replicas in assignments {
        load.add(replicas);
    }
    load
}

#[test]
fn replicas_take_distinct_racks_when_racks_allow() {
    let brokers: Vec<BrokerRecord> = (1..=6)
        .map(|id| broker(id, Some(["a", "b", "c"][(id % 3) as usize]), 2))
        .collect();
    let assignments = place(&brokers, 30, 3, &PlacementLoad::default()).unwrap();
    for replicas in &assignments {
        let racks: BTreeSet<_> = replicas
            .iter()
            .map(|replica| brokers[(replica.node.0 - 1) as usize].rack.clone())
            .collect();
        assert_eq!(racks.len(), 3, "{replicas:?}");
    }
}

#[test]
fn fewer_racks_than_replicas_still_uses_every_rack() {
    let brokers = [
        broker(1, Some("a"), 1),
        broker(2, Some("a"), 1),
        broker(3, Some("b"), 1),
        broker(4, Some("a"), 1),
    ];
    for replicas in place(&brokers, 12, 3, &PlacementLoad::default()).unwrap() {
        assert!(
            replicas.iter().any(|replica| replica.node == NodeId(3)),
            "rack b is in every partition: {replicas:?}"
        );
    }
}

#[test]
fn fenced_brokers_get_nothing_and_too_few_brokers_is_an_error() {
    let mut brokers = vec![broker(1, None, 1), broker(2, None, 1), broker(3, None, 1)];
    brokers[1].fenced = true;
    let assignments = place(&brokers, 10, 2, &PlacementLoad::default()).unwrap();
    assert!(
        assignments
            .iter()
            .flatten()
            .all(|replica| replica.node != NodeId(2))
    );
    assert_eq!(
        place(&brokers, 1, 3, &PlacementLoad::default()),
        Err(PlacementError::InvalidReplicationFactor {
            requested: 3,
            live: 2
        })
    );
    assert!(place(&brokers, 1, 0, &PlacementLoad::default()).is_err());
    assert_eq!(
        place(&brokers, 0, 1, &PlacementLoad::default()),
        Err(PlacementError::InvalidPartitions(0))
    );
}

#[test]
fn a_new_broker_takes_the_next_partitions() {
    let brokers = vec![broker(1, None, 1), broker(2, None, 1), broker(3, None, 1)];
    let first = place(&brokers, 6, 1, &PlacementLoad::default()).unwrap();
    let mut more = brokers.clone();
    more.push(broker(4, None, 1));
    let second = place(&more, 2, 1, &load_of(&first)).unwrap();
    assert!(
        second
            .iter()
            .flatten()
            .all(|replica| replica.node == NodeId(4))
    );
}

#[test]
fn placements_apply_to_the_state() {
    let mut state = MetadataState::default();
    let mut index = 0;
    for id in 1..=3 {
        for command in [
            Command::RegisterBroker {
                node: NodeId(id),
                host: format!("broker-{id}"),
                port: 7100,
                rack: None,
                shard_count: 3,
                incarnation: 1,
            },
            Command::UnfenceBroker {
                node: NodeId(id),
                incarnation: 1,
            },
        ] {
            index += 1;
            state.apply(index, &command).unwrap();
        }
    }
    for name in ["a", "b"] {
        let assignments = place(
            state.brokers().values(),
            8,
            3,
            &PlacementLoad::from_state(&state),
        )
        .unwrap();
        index += 1;
        state
            .apply(
                index,
                &Command::CreateTopic {
                    name: name.to_owned(),
                    internal: false,
                    config: BTreeMap::new(),
                    assignments,
                    created_at_ms: 0,
                    owner: None,
                },
            )
            .unwrap();
    }
    let load = PlacementLoad::from_state(&state);
    assert_eq!(spread((1..=3).map(|id| load.leaders_on(NodeId(id)))), 1);
    for id in 1..=3 {
        assert_eq!(load.replicas_on(NodeId(id)), 16);
        assert!(
            spread((0..3).map(|shard| load.replicas_on_shard(NodeId(id), ShardId(shard)))) <= 1
        );
    }
}

proptest! {
    #[test]
    fn fresh_clusters_are_balanced(
        broker_count in 1u64..8,
        factor in 1u16..4,
        partitions in 1u32..120,
        shard_count in 1u16..5,
    ) {
        let factor = factor.min(broker_count as u16);
        let brokers: Vec<BrokerRecord> =
            (1..=broker_count).map(|id| broker(id, None, shard_count)).collect();
        let assignments = place(&brokers, partitions, factor, &PlacementLoad::default()).unwrap();
        prop_assert_eq!(assignments.len(), partitions as usize);
        for replicas in &assignments {
            prop_assert_eq!(replicas.len(), usize::from(factor));
            let nodes: BTreeSet<NodeId> = replicas.iter().map(|replica| replica.node).collect();
            prop_assert_eq!(nodes.len(), replicas.len(), "replicas on distinct brokers");
            prop_assert!(replicas.iter().all(|replica| replica.shard.0 < shard_count));
        }
        let load = load_of(&assignments);
        let ids = || (1..=broker_count).map(NodeId);
        prop_assert!(spread(ids().map(|id| load.leaders_on(id))) <= 1, "leaders per broker");
        prop_assert!(spread(ids().map(|id| load.replicas_on(id))) <= 1, "replicas per broker");
        for id in ids() {
            let shards = || (0..shard_count).map(ShardId);
            prop_assert!(spread(shards().map(|shard| load.leaders_on_shard(id, shard))) <= 1);
            prop_assert!(spread(shards().map(|shard| load.replicas_on_shard(id, shard))) <= 1);
        }
    }

    #[test]
    fn placement_is_deterministic_and_ignores_input_order(
        broker_count in 1u64..8,
        partitions in 1u32..40,
        rotate in 0usize..8,
    ) {
        let brokers: Vec<BrokerRecord> = (1..=broker_count)
            .map(|id| broker(id, Some(["x", "y"][(id % 2) as usize]), 2))
            .collect();
        let mut rotated = brokers.clone();
        rotated.rotate_left(rotate % brokers.len());
        let factor = (broker_count as u16).min(3);
        let first = place(&brokers, partitions, factor, &PlacementLoad::default());
        prop_assert_eq!(&first, &place(&brokers, partitions, factor, &PlacementLoad::default()));
        prop_assert_eq!(&first, &place(&rotated, partitions, factor, &PlacementLoad::default()));
    }
}

#[test]
fn no_shard_is_given_more_than_its_partition_limit() {
    let brokers = [broker(1, None, 2), broker(2, None, 1), broker(3, None, 2)];
    // 10 per shard: rooms 20, 10 and 20; three-replica partitions fit 10
    // times (broker 2 is in every one).
    let assignments = place_within(&brokers, 10, 3, &PlacementLoad::default(), 10).unwrap();
    let load = load_of(&assignments);
    for broker in &brokers {
        for shard in 0..broker.shard_count {
            assert!(load.replicas_on_shard(broker.id, ShardId(shard)) <= 10);
        }
    }
    let error = place_within(&brokers, 1, 3, &load, 10).unwrap_err();
    let PlacementError::PartitionLimit {
        needed,
        room,
        per_shard,
        fullest,
    } = error.clone()
    else {
        panic!("{error:?}");
    };
    assert_eq!((needed, room, per_shard), (3, 2, 10));
    assert_eq!(
        fullest,
        BrokerRoom {
            node: NodeId(2),
            held: 10,
            capacity: 10
        }
    );
    let message = error.to_string();
    assert!(
        message.contains("room for 2 more") && message.contains("broker 2 holds 10 of its 10"),
        "{message}"
    );
    // Two-replica partitions still fit on the brokers with room.
    assert!(place_within(&brokers, 10, 2, &load, 10).is_ok());
}

#[test]
fn a_topic_that_does_not_fit_whole_is_refused_whole() {
    let brokers = [broker(1, None, 1)];
    let held = place_within(&brokers, 60, 1, &PlacementLoad::default(), 100).unwrap();
    let load = load_of(&held);
    let error = place_within(&brokers, 41, 1, &load, 100).unwrap_err();
    assert!(
        matches!(error, PlacementError::PartitionLimit { room: 40, .. }),
        "{error:?}"
    );
    assert_eq!(place_within(&brokers, 40, 1, &load, 100).unwrap().len(), 40);
}
