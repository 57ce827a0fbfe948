//! Randomised fault schedules over many seeds: message loss, delay and
//! reordering, crashes (some leaving a torn log tail), restarts from disk,
//! network isolation, and proposals throughout. The cluster harness checks
//! election safety, state machine safety and equal states per version after
//! every Ready; at the end every node must converge, every answered
//! proposal must be the command committed at its index, and every node's
//! state must be the in-order replay of every command any node ever applied
//! (nothing committed is lost, not even across crashes and snapshots).
//!
//! `CONTROLLER_SEEDS=N` runs N seeds (default 200, under a second); `CONTROLLER_SEED=S`
//! replays one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use corelog_controller::{Command, NodeId, PlacementLoad, ProposalOutcome, place};
use support::{Cluster, Faults, Rng};

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("CONTROLLER_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("CONTROLLER_SEEDS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(200);
    (0..count).collect()
}

fn random_command(rng: &mut Rng, cluster: &Cluster, serial: u64) -> Command {
    let leader = cluster.leader().expect("leader");
    let state = cluster.node(leader).expect("leader").state();
    match rng.below(6) {
        0 => {
            let node = 1 + rng.below(4);
            let incarnation = state
                .brokers()
                .get(&NodeId(node))
                .map_or(1, |broker| broker.incarnation + rng.below(2));
            Command::RegisterBroker {
                node: NodeId(node),
                host: format!("broker-{node}"),
                port: 7100,
                rack: Some(format!("rack-{}", node % 2)),
                shard_count: 2,
                incarnation,
            }
        }
        1 => {
            let node = NodeId(1 + rng.below(4));
            let incarnation = state
                .brokers()
                .get(&node)
                .map_or(1, |broker| broker.incarnation);
            Command::UnfenceBroker { node, incarnation }
        }
        2 => Command::FenceBroker {
            node: NodeId(1 + rng.below(4)),
        },
        3 => {
            let assignments = place(
                state.brokers().values(),
                1 + rng.below(4) as u32,
                1 + rng.below(3) as u16,
                &PlacementLoad::from_state(state),
            )
            .unwrap_or_else(|_| vec![Vec::new()]);
            Command::CreateTopic {
                name: format!("topic-{}", rng.below(8)),
                internal: false,
                config: BTreeMap::new(),
                assignments,
                created_at_ms: serial as i64,
                owner: None,
            }
        }
        4 => match state.topics().values().next() {
            Some(topic) if rng.chance(300) => Command::DeleteTopic { topic_id: topic.id },
            Some(topic) => {
                let partition = &topic.partitions[0];
                Command::SetLeader {
                    topic_id: topic.id,
                    partition: 0,
                    leader: partition.replicas.last().map(|replica| replica.node),
                    epoch: corelog_controller::LeaderEpoch(partition.leader_epoch.0 + 1),
                }
            }
            None => Command::AllocateProducerIds { count: 1 },
        },
        _ => Command::AllocateProducerIds {
            count: 1 + rng.below(100) as u32,
        },
    }
}

/// Prints the seed and its replay command when a seed's run panics, also
/// for a panic inside the node rather than in an assertion of the harness.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "failed at seed {0}; replay: CONTROLLER_SEED={0} cargo test -p corelog-controller --test faults",
                self.0
            );
        }
    }
}

/// What one seed exercised.
#[derive(Debug, Default)]
struct Exercised {
    applied: u64,
    leaders: u64,
    kills: u64,
    restarts: u64,
    snapshots_sent: u64,
    refused_at_send: u64,
}

fn run_seed(seed: u64) -> Exercised {
    let _guard = SeedGuard(seed);
    let mut rng = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xC0DE);
    let size = if rng.chance(200) {
        1
    } else if rng.chance(250) {
        5
    } else {
        3
    };
    let mut cluster = Cluster::new(seed, size, 4 + rng.below(20));
    cluster.faults = Faults {
        drop_per_mille: rng.below(120),
        delay_per_mille: rng.below(200),
        duplicate_per_mille: rng.below(50),
    };
    let ids = cluster.ids();
    let mut serial = 0;
    for _ in 0..600 {
        let roll = rng.below(1000);
        let victim = ids[rng.below(ids.len() as u64) as usize];
        if roll < 8 && cluster.is_up(victim) {
            cluster.kill(victim);
            if rng.chance(500) {
                cluster.tear_tail(victim);
            }
        } else if roll < 30 && !cluster.is_up(victim) {
            cluster.restart(victim);
        } else if roll < 36 && size > 1 {
            if !cluster.isolated.insert(victim) {
                cluster.isolated.remove(&victim);
            }
        } else if roll < 40 {
            cluster.isolated.clear();
        }
        if cluster.leader().is_some() && rng.chance(300) {
            serial += 1;
            let command = random_command(&mut rng, &cluster, serial);
            let _ = cluster.propose(&command);
        }
        cluster.round();
    }
    // Heal: everything comes back and the cluster must converge.
    cluster.isolated.clear();
    cluster.faults = Faults::default();
    for id in cluster.ids() {
        if !cluster.is_up(id) {
            cluster.restart(id);
        }
    }
    cluster.wait_for_leader();
    // A final command proves the healed group still commits.
    let mut outcome = cluster.commit(&Command::AllocateProducerIds { count: 1 });
    for _ in 0..10 {
        if !matches!(outcome, ProposalOutcome::Lost | ProposalOutcome::Unknown) {
            break;
        }
        outcome = cluster.commit(&Command::AllocateProducerIds { count: 1 });
    }
    assert!(
        matches!(outcome, ProposalOutcome::Applied(_)),
        "{}: final command {outcome:?}",
        cluster.replay()
    );
    cluster.settle();
    cluster.assert_converged();
    cluster.assert_nothing_committed_was_lost();
    let version = cluster.node(ids[0]).expect("up").state().version();
    for (proposer, resolved) in &cluster.resolved {
        if matches!(
            resolved.outcome,
            ProposalOutcome::Applied(_) | ProposalOutcome::Refused(_)
        ) {
            assert!(
                resolved.id.index <= version,
                "{}: proposal of {proposer} at {} applied but the final version is {version}",
                cluster.replay(),
                resolved.id.index
            );
        }
    }
    let count = |word: &str| {
        cluster
            .trace
            .iter()
            .filter(|line| line.contains(word))
            .count() as u64
    };
    Exercised {
        applied: version,
        leaders: count("Leader term"),
        kills: count("kill"),
        restarts: count("restart"),
        snapshots_sent: cluster.snapshots_sent,
        refused_at_send: cluster.refused_at_send,
    }
}

#[test]
fn random_faults_never_break_agreement() {
    let mut total = Exercised::default();
    let seeds = seeds();
    for seed in &seeds {
        let exercised = run_seed(*seed);
        total.applied += exercised.applied;
        total.leaders += exercised.leaders;
        total.kills += exercised.kills;
        total.restarts += exercised.restarts;
        total.snapshots_sent += exercised.snapshots_sent;
        total.refused_at_send += exercised.refused_at_send;
    }
    eprintln!("{} seeds exercised {total:?}", seeds.len());
    assert!(total.applied > 0 && total.leaders >= seeds.len() as u64);
    if seeds.len() >= 50 {
        // The schedule must actually reach the paths it is meant to test.
        assert!(total.kills > 0 && total.restarts > 0, "{total:?}");
        assert!(
            total.snapshots_sent > 0 && total.refused_at_send > 0,
            "{total:?}"
        );
    }
}
