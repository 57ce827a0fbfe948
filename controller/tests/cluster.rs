//! Controller groups of one and three nodes, driven deterministically.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use corelog_controller::durable;
use corelog_controller::{
    Command, ControllerConfig, ControllerError, ControllerNode, LeaderEpoch, MetadataState, NodeId,
    Outcome, PlacementLoad, ProposalOutcome, ProposeError, TopicId, place,
};
use support::Cluster;

fn register(node: u64) -> Command {
    Command::RegisterBroker {
        node: NodeId(node),
        host: format!("broker-{node}"),
        port: 7100,
        rack: Some(format!("rack-{node}")),
        shard_count: 2,
        incarnation: 1,
    }
}

fn unfence(node: u64) -> Command {
    Command::UnfenceBroker {
        node: NodeId(node),
        incarnation: 1,
    }
}

/// Registers and unfences brokers 1..=count.
fn bring_up_brokers(cluster: &mut Cluster, count: u64) {
    for node in 1..=count {
        assert!(matches!(
            cluster.commit(&register(node)),
            ProposalOutcome::Applied(Outcome::BrokerRegistered { .. })
        ));
        assert!(matches!(
            cluster.commit(&unfence(node)),
            ProposalOutcome::Applied(Outcome::BrokerUnfenced { changed: true, .. })
        ));
    }
}

/// A CreateTopic placed on the leader's current state.
fn create_topic(cluster: &Cluster, name: &str, partitions: u32, factor: u16) -> Command {
    let leader = cluster.leader().expect("leader");
    let state = cluster.node(leader).expect("leader").state();
    let assignments = place(
        state.brokers().values(),
        partitions,
        factor,
        &PlacementLoad::from_state(state),
    )
    .expect("placement");
    Command::CreateTopic {
        name: name.to_owned(),
        internal: name.starts_with("__"),
        config: BTreeMap::from([("retention.ms".to_owned(), "60000".to_owned())]),
        assignments,
        created_at_ms: 1_700_000_000_000,
        owner: None,
    }
}

#[test]
fn a_single_node_elects_itself_and_applies_commands() {
    let mut cluster = Cluster::new(1, 1, 1024);
    assert_eq!(cluster.wait_for_leader(), NodeId(1));
    bring_up_brokers(&mut cluster, 1);
    let command = create_topic(&cluster, "__groups", 4, 1);
    assert_eq!(
        cluster.commit(&command),
        ProposalOutcome::Applied(Outcome::TopicCreated {
            topic_id: TopicId(0)
        })
    );
    assert!(matches!(
        cluster.commit(&command),
        ProposalOutcome::Refused(corelog_controller::CommandError::TopicExists(_))
    ));
    assert_eq!(
        cluster.commit(&Command::AllocateProducerIds { count: 1000 }),
        ProposalOutcome::Applied(Outcome::ProducerIdsAllocated {
            start: 0,
            end: 1000
        })
    );
    let node = cluster.node(NodeId(1)).unwrap();
    let topic = node.state().topic_by_name("__groups").unwrap();
    assert_eq!(topic.partition_count(), 4);
    assert_eq!(node.state().version(), node.commit_index());
}

#[test]
fn a_single_voter_leads_from_its_first_ready_without_waiting_for_a_timeout() {
    for recovered in [false, true] {
        let mut node = ControllerNode::new(
            ControllerConfig::new(NodeId(1), vec![NodeId(1)], 7),
            durable::RecoveredLog::default(),
        )
        .unwrap();
        if recovered {
            // A restart: the node comes back from what it persisted.
            let ready = node.ready().unwrap().expect("a first ready");
            let records = ready.log_records();
            node.advance();
            let mut file = durable::new_log_file();
            file.extend_from_slice(&records);
            node = ControllerNode::from_log_file(
                ControllerConfig::new(NodeId(1), vec![NodeId(1)], 7),
                &file,
            )
            .unwrap()
            .0;
        }
        // No tick: an election timeout would be 1 to 2 s of a broker that
        // cannot serve.
        while let Some(ready) = node.ready().unwrap() {
            assert!(ready.messages.is_empty(), "a single voter sends nothing");
            node.advance();
        }
        assert!(node.is_leader(), "recovered: {recovered}");
        assert_eq!(node.leader_id(), Some(NodeId(1)));
        assert!(
            node.propose(&Command::AllocateProducerIds { count: 1 })
                .is_ok()
        );
    }
}

#[test]
fn three_nodes_elect_one_leader_and_apply_the_same_state() {
    let mut cluster = Cluster::new(7, 3, 1024);
    let leader = cluster.wait_for_leader();
    for id in cluster.ids() {
        let node = cluster.node(id).unwrap();
        assert_eq!(node.is_leader(), id == leader);
    }
    bring_up_brokers(&mut cluster, 3);
    for (index, name) in ["orders", "payments", "__audit"].into_iter().enumerate() {
        let command = create_topic(&cluster, name, 6, 3);
        assert_eq!(
            cluster.commit(&command),
            ProposalOutcome::Applied(Outcome::TopicCreated {
                topic_id: TopicId(index as u64)
            })
        );
    }
    let epoch_bump = Command::SetLeader {
        topic_id: TopicId(0),
        partition: 0,
        leader: None,
        epoch: LeaderEpoch(1),
    };
    assert!(matches!(
        cluster.commit(&epoch_bump),
        ProposalOutcome::Applied(_)
    ));
    assert!(matches!(
        cluster.commit(&epoch_bump),
        ProposalOutcome::Refused(corelog_controller::CommandError::StaleEpoch { .. })
    ));
    cluster.settle();
    cluster.assert_converged();
    let state = cluster.node(NodeId(2)).unwrap().state();
    assert_eq!(state.topics().len(), 3);
    assert_eq!(state.partition(TopicId(0), 0).unwrap().leader, None);
}

#[test]
fn a_follower_refuses_proposals_and_names_the_leader() {
    let mut cluster = Cluster::new(11, 3, 1024);
    let leader = cluster.wait_for_leader();
    cluster.run(10);
    let follower = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    let node = cluster.node_mut(follower).unwrap();
    assert_eq!(node.leader_id(), Some(leader));
    assert_eq!(
        node.propose(&Command::AllocateProducerIds { count: 1 }),
        Err(ProposeError::NotLeader {
            leader: Some(leader)
        })
    );
}

#[test]
fn killing_the_leader_elects_another_and_keeps_committed_state() {
    let mut cluster = Cluster::new(21, 3, 1024);
    let first = cluster.wait_for_leader();
    bring_up_brokers(&mut cluster, 3);
    let command = create_topic(&cluster, "orders", 3, 3);
    assert!(matches!(
        cluster.commit(&command),
        ProposalOutcome::Applied(_)
    ));
    cluster.settle();
    cluster.kill(first);
    cluster.run_until(1_000, "another leader", |cluster| {
        cluster.leader().is_some_and(|leader| leader != first)
    });
    let second = cluster.leader().unwrap();
    let state = cluster.node(second).unwrap().state();
    assert!(
        state.topic_by_name("orders").is_some(),
        "committed topic survives"
    );
    let command = create_topic(&cluster, "payments", 3, 3);
    assert!(matches!(
        cluster.commit(&command),
        ProposalOutcome::Applied(_)
    ));
    // The old leader comes back from its disk and catches up.
    cluster.restart(first);
    cluster.settle();
    cluster.assert_converged();
    assert!(
        cluster
            .node(first)
            .unwrap()
            .state()
            .topic_by_name("payments")
            .is_some()
    );
}

#[test]
fn an_isolated_leader_steps_down_and_rejoins_as_a_follower() {
    let mut cluster = Cluster::new(31, 3, 1024);
    let first = cluster.wait_for_leader();
    bring_up_brokers(&mut cluster, 2);
    cluster.isolated.insert(first);
    cluster.run_until(1_000, "a leader on the majority side", |cluster| {
        cluster.leader().is_some_and(|leader| leader != first)
    });
    // An isolated leader cannot commit: check_quorum makes it step down.
    cluster.run_until(200, "the isolated leader steps down", |cluster| {
        !cluster.node(first).unwrap().is_leader()
    });
    assert!(matches!(
        cluster.commit(&Command::AllocateProducerIds { count: 10 }),
        ProposalOutcome::Applied(_)
    ));
    cluster.isolated.clear();
    cluster.settle();
    cluster.assert_converged();
}

#[test]
fn a_restarted_node_recovers_from_its_log_even_with_a_torn_tail() {
    let mut cluster = Cluster::new(41, 3, 1024);
    let leader = cluster.wait_for_leader();
    bring_up_brokers(&mut cluster, 3);
    for name in ["a", "b", "c"] {
        let command = create_topic(&cluster, name, 2, 2);
        assert!(matches!(
            cluster.commit(&command),
            ProposalOutcome::Applied(_)
        ));
    }
    cluster.settle();
    let follower = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    let before = cluster.node(follower).unwrap().state().clone();
    cluster.kill(follower);
    cluster.tear_tail(follower);
    let recovery = cluster.restart(follower);
    assert!(recovery.torn_tail.is_some(), "the half record is cut off");
    // The first ready replays the committed entries from the log alone.
    cluster.run(1);
    let node = cluster.node(follower).unwrap();
    assert!(node.state().version() >= before.version());
    assert!(node.state().topic_by_name("c").is_some());
    cluster.settle();
    cluster.assert_converged();

    // Every node restarted at once still agrees (nothing but the disks).
    for id in cluster.ids() {
        cluster.kill(id);
    }
    for id in cluster.ids() {
        cluster.restart(id);
    }
    cluster.wait_for_leader();
    cluster.settle();
    cluster.assert_converged();
    assert!(
        cluster
            .node(NodeId(1))
            .unwrap()
            .state()
            .topic_by_name("c")
            .is_some()
    );
}

#[test]
fn snapshots_bound_the_log_and_a_lagging_node_catches_up_from_one() {
    let mut cluster = Cluster::new(51, 3, 8);
    let leader = cluster.wait_for_leader();
    let lagging = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    cluster.kill(lagging);
    bring_up_brokers(&mut cluster, 3);
    for round in 0..40u32 {
        let outcome = cluster.commit(&Command::AllocateProducerIds { count: 1 + round });
        assert!(matches!(outcome, ProposalOutcome::Applied(_)));
    }
    let node = cluster.node(leader).unwrap();
    assert!(
        node.snapshot_index() + 8 > node.state().version(),
        "the leader compacted its log: snapshot at {}, version {}",
        node.snapshot_index(),
        node.state().version()
    );
    // The rewritten log file holds a snapshot and only a few entries.
    let recovery = durable::recover(&cluster.disks[&leader]).unwrap();
    let snapshot = recovery.log.snapshot.as_ref().unwrap();
    assert!(snapshot.index >= node.snapshot_index());
    assert!(recovery.log.entries.len() <= 16);

    cluster.restart(lagging);
    cluster.settle();
    cluster.assert_converged();
    assert!(
        cluster.snapshots_sent > 0,
        "the lagging node got a snapshot"
    );
    let caught_up = cluster.node(lagging).unwrap();
    assert!(caught_up.snapshot_index() > 0);
    assert_eq!(
        caught_up.state().producer_id_block_end(),
        (1..=40).sum::<i64>()
    );

    // And it restarts from the snapshot it installed.
    cluster.kill(lagging);
    cluster.restart(lagging);
    cluster.settle();
    cluster.assert_converged();
}

#[test]
fn the_same_seed_gives_the_same_history() {
    let run = |seed: u64| {
        let mut cluster = Cluster::new(seed, 3, 16);
        cluster.faults.drop_per_mille = 50;
        cluster.faults.delay_per_mille = 100;
        cluster.wait_for_leader();
        bring_up_brokers(&mut cluster, 3);
        let leader = cluster.leader().unwrap();
        cluster.kill(leader);
        for count in 1..20 {
            cluster.commit(&Command::AllocateProducerIds { count });
        }
        cluster.restart(leader);
        cluster.settle();
        cluster.assert_converged();
        cluster.trace
    };
    let first = run(99);
    assert!(first.len() > 50);
    assert_eq!(first, run(99));
}

/// The metadata a log file alone commits to: its snapshot's state, then
/// every committed entry after it applied in order. No node involved.
fn state_from_disk(file: &[u8]) -> MetadataState {
    let recovery = durable::recover(file).expect("the log file recovers");
    let log = recovery.log;
    let mut state = log
        .snapshot
        .as_ref()
        .map_or_else(MetadataState::default, |snapshot| {
            MetadataState::decode(&snapshot.state).expect("snapshot state decodes")
        });
    for entry in log
        .entries
        .iter()
        .filter(|entry| entry.index <= log.hard_state.commit)
    {
        if entry.data.is_empty() {
            state.note_applied(entry.index);
        } else {
            let command = Command::decode(&entry.data).expect("committed command decodes");
            let _ = state.apply(entry.index, &command);
        }
    }
    state
}

/// What clients see of the metadata, whatever the version (a new leader
/// adds an empty entry, which moves the version but nothing else).
fn visible(state: &MetadataState) -> String {
    format!(
        "{:?} {:?} {}",
        state.brokers(),
        state.topics(),
        state.producer_id_block_end()
    )
}

#[test]
fn every_command_kind_survives_a_leader_crash_and_a_restarted_node_installs_a_snapshot() {
    let mut cluster = Cluster::new(61, 3, 16);
    let first = cluster.wait_for_leader();
    bring_up_brokers(&mut cluster, 3);
    let command = create_topic(&cluster, "orders", 3, 3);
    assert_eq!(
        cluster.commit(&command),
        ProposalOutcome::Applied(Outcome::TopicCreated {
            topic_id: TopicId(0)
        })
    );
    let partition = cluster
        .node(first)
        .unwrap()
        .state()
        .partition(TopicId(0), 1)
        .unwrap()
        .clone();
    let new_leader = partition.replicas[1].node;
    let set_leader = Command::SetLeader {
        topic_id: TopicId(0),
        partition: 1,
        leader: Some(new_leader),
        epoch: LeaderEpoch(partition.leader_epoch.0 + 1),
    };
    assert!(matches!(
        cluster.commit(&set_leader),
        ProposalOutcome::Applied(_)
    ));
    assert_eq!(
        cluster.commit(&Command::AllocateProducerIds { count: 500 }),
        ProposalOutcome::Applied(Outcome::ProducerIdsAllocated { start: 0, end: 500 })
    );
    cluster.settle();
    cluster.assert_converged();
    let before = cluster.node(first).unwrap().state().clone();
    assert_eq!(before.brokers().len(), 3);
    assert_eq!(
        before.partition(TopicId(0), 1).unwrap().leader,
        Some(new_leader)
    );

    // The leader crashes. Its log file alone holds everything it applied.
    cluster.kill(first);
    assert_eq!(state_from_disk(&cluster.disks[&first]), before);
    cluster.run_until(1_000, "another leader", |cluster| {
        cluster.leader().is_some_and(|leader| leader != first)
    });
    let second = cluster.leader().unwrap();
    cluster.settle();
    assert_eq!(
        visible(cluster.node(second).unwrap().state()),
        visible(&before),
        "the new leader has every committed command"
    );

    // The group goes on without the old leader, far enough for every live
    // node to compact its log past everything the old leader holds.
    for count in 1..=40u32 {
        assert!(matches!(
            cluster.commit(&Command::AllocateProducerIds { count }),
            ProposalOutcome::Applied(_)
        ));
    }
    cluster.settle();
    let leader_node = cluster.node(second).unwrap();
    assert!(leader_node.snapshot_index() > before.version());
    assert_eq!(
        state_from_disk(&cluster.disks[&second]),
        *leader_node.state()
    );

    // The old leader restarts from its bytes and catches up from a snapshot:
    // the entries it misses are gone from every log.
    let sent_before = cluster.snapshots_sent;
    let recovery = cluster.restart(first);
    assert!(recovery.torn_tail.is_none());
    cluster.run(1);
    assert!(cluster.node(first).unwrap().state().version() >= before.version());
    cluster.settle();
    cluster.assert_converged();
    cluster.assert_nothing_committed_was_lost();
    assert!(cluster.snapshots_sent > sent_before, "a snapshot was sent");
    let caught_up = cluster.node(first).unwrap();
    assert!(caught_up.snapshot_index() > before.version());
    assert_eq!(
        caught_up.state().producer_id_block_end(),
        500 + (1..=40).sum::<i64>()
    );
    assert_eq!(
        caught_up.state().partition(TopicId(0), 1).unwrap().leader,
        Some(new_leader)
    );
    // Its rewritten file recovers to the same state.
    assert_eq!(state_from_disk(&cluster.disks[&first]), *caught_up.state());
}

#[test]
fn a_node_built_from_a_corrupt_log_file_refuses_to_start() {
    let mut cluster = Cluster::new(71, 3, 1024);
    cluster.wait_for_leader();
    bring_up_brokers(&mut cluster, 2);
    cluster.settle();
    let id = NodeId(2);
    let mut file = cluster.disks[&id].clone();
    // Damage the first record's body: valid records follow, so this is
    // corruption, not a torn tail.
    file[durable::LOG_HEADER_BYTES + 14] ^= 0x40;
    let config = corelog_controller::ControllerConfig::new(id, cluster.ids(), 1);
    assert!(matches!(
        ControllerNode::from_log_file(config.clone(), &file),
        Err(ControllerError::Durable(
            durable::DurableError::Corrupt { .. }
        ))
    ));
    // An empty file is a new node.
    let (node, recovery) = ControllerNode::from_log_file(config, &[]).unwrap();
    assert_eq!(recovery.valid_len, 0);
    assert_eq!(node.state().version(), 0);
}

#[test]
fn a_node_whose_log_lost_acknowledged_records_refuses_to_start() {
    let mut cluster = Cluster::new(72, 3, 1024);
    cluster.wait_for_leader();
    bring_up_brokers(&mut cluster, 2);
    cluster.settle();
    let id = NodeId(2);
    let file = cluster.disks[&id].clone();
    let config = corelog_controller::ControllerConfig::new(id, cluster.ids(), 1);
    // The found case: 51 bytes cut from the end looked like a torn append,
    // and the node came back without an entry it had acknowledged.
    for cut in [1, 51, file.len() - durable::LOG_HEADER_BYTES] {
        let result = ControllerNode::from_log_file(config.clone(), &file[..file.len() - cut]);
        assert!(
            matches!(
                result,
                Err(ControllerError::Durable(durable::DurableError::Truncated { synced_len, .. }))
                    if synced_len == file.len() as u64
            ),
            "cut {cut}: {:?}",
            result.err()
        );
    }
    // Bytes beyond the synced length are a torn append, and cut.
    let mut torn = file.clone();
    torn.extend_from_slice(&[0x43, 0x4c, 0x43]);
    let (_, recovery) = ControllerNode::from_log_file(config, &torn).unwrap();
    assert_eq!(recovery.valid_len, file.len() as u64);
}
