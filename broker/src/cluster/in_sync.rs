//! The controller leader's view of which replicas are in sync, from the
//! leaders' `PartitionReport`s, and the partition health it implies.
//! Pure: the controller service feeds it reports and reads it for
//! `DescribeCluster` and the health gauges.
//!
//! A replica counts as in sync when the partition's current leader (as the
//! metadata publishes it, in the published epoch) last reported it so, and
//! its broker is not fenced: a fenced broker drops out at once, as in
//! Kafka, without waiting for the leader's lag timeout. A report older than
//! `stale_after` tells nothing. Commitment never reads any of this: the
//! high watermark counts a majority of acknowledgements.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use corelog_controller::{MetadataState, NodeId, PartitionRecord, TopicId};
use corelog_wire::message::partition_report::LedPartitionV1;

/// Why a report was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportRefusal {
    /// The node is not registered, or registered under another process.
    #[error("broker {node} incarnation {incarnation} is not registered; register again")]
    NotRegistered {
        /// The node.
        node: NodeId,
        /// The reporting process's incarnation.
        incarnation: u64,
    },
}

struct Report {
    received: Instant,
    /// Per partition, what its leader reported.
    partitions: HashMap<(TopicId, u32), Led>,
}

/// One partition of a report.
struct Led {
    /// The epoch led.
    epoch: u32,
    /// The replicas in sync, the leader included.
    in_sync: Vec<NodeId>,
    /// Whether the leader committed its epoch.
    epoch_committed: bool,
}

/// What a moving partition's leader last reported that its next step
/// needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// Its learners holding the leader's committed log, less fenced
    /// brokers.
    pub caught_up: BTreeSet<NodeId>,
    /// Whether the leader committed its epoch: the replica set's last
    /// change is committed.
    pub epoch_committed: bool,
}

/// The latest report of each leader.
pub struct InSyncBook {
    stale_after: Duration,
    reports: BTreeMap<NodeId, Report>,
}

impl std::fmt::Debug for InSyncBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InSyncBook")
            .field("stale_after", &self.stale_after)
            .field("reporters", &self.reports.len())
            .finish()
    }
}

/// Counts of partitions in trouble, from the controller's view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionHealth {
    /// Partitions in all.
    pub partitions: u64,
    /// No leader published.
    pub leaderless: u64,
    /// No leader that can serve: none published, or its broker is fenced
    /// or gone.
    pub offline: u64,
    /// Served, but with fewer in-sync replicas than replicas.
    pub under_replicated: u64,
    /// Served, but no fresh report of its in-sync replicas yet.
    pub in_sync_unknown: u64,
}

impl InSyncBook {
    /// No reports; a report counts for `stale_after`.
    #[must_use]
    pub fn new(stale_after: Duration) -> InSyncBook {
        InSyncBook {
            stale_after,
            reports: BTreeMap::new(),
        }
    }

    /// Takes `node`'s report of the partitions it leads, replacing its
    /// previous one.
    ///
    /// # Errors
    /// [`ReportRefusal::NotRegistered`] unless `incarnation` is the node's
    /// registered process.
    pub fn record(
        &mut self,
        state: &MetadataState,
        node: NodeId,
        incarnation: u64,
        partitions: &[LedPartitionV1],
        now: Instant,
    ) -> Result<(), ReportRefusal> {
        if state
            .brokers()
            .get(&node)
            .is_none_or(|broker| broker.incarnation != incarnation)
        {
            return Err(ReportRefusal::NotRegistered { node, incarnation });
        }
        let partitions = partitions
            .iter()
            .map(|reported| {
                let led = &reported.led;
                let in_sync = led
                    .in_sync
                    .iter()
                    .map(|node| NodeId(u64::from(*node)))
                    .collect();
                (
                    (TopicId(led.topic_id), led.partition),
                    Led {
                        epoch: led.leader_epoch,
                        in_sync,
                        epoch_committed: reported.epoch_committed,
                    },
                )
            })
            .collect();
        self.reports.insert(
            node,
            Report {
                received: now,
                partitions,
            },
        );
        Ok(())
    }

    /// Forgets every report: this node stopped leading the controller.
    pub fn clear(&mut self) {
        self.reports.clear();
    }

    /// The in-sync replicas of `partition` of `topic_id`, in replica
    /// order: those its published leader reported in sync in the published
    /// epoch, less fenced brokers. `None` when there is no leader or no
    /// fresh report of its epoch.
    #[must_use]
    pub fn in_sync(
        &self,
        state: &MetadataState,
        topic_id: TopicId,
        index: u32,
        record: &PartitionRecord,
        now: Instant,
    ) -> Option<Vec<NodeId>> {
        let reported = self.reported(topic_id, index, record, now)?;
        Some(
            record
                .replicas
                .iter()
                .map(|replica| replica.node)
                .filter(|node| reported.in_sync.contains(node) && !is_fenced(state, *node))
                .collect(),
        )
    }

    /// What the published leader of each moving partition reported in
    /// the published epoch, if its report is fresh: a move takes no step
    /// without it.
    #[must_use]
    pub fn move_reports(
        &self,
        state: &MetadataState,
        now: Instant,
    ) -> BTreeMap<(TopicId, u32), MoveReport> {
        let mut reports = BTreeMap::new();
        for topic in state.topics().values() {
            for (index, record) in (0u32..).zip(&topic.partitions) {
                let Some(moving) = &record.reassignment else {
                    continue;
                };
                let Some(led) = self.reported(topic.id, index, record, now) else {
                    continue;
                };
                let caught_up = moving
                    .learners(&record.replicas)
                    .iter()
                    .map(|learner| learner.node)
                    .filter(|node| led.in_sync.contains(node) && !is_fenced(state, *node))
                    .collect();
                reports.insert(
                    (topic.id, index),
                    MoveReport {
                        caught_up,
                        epoch_committed: led.epoch_committed,
                    },
                );
            }
        }
        reports
    }

    /// What the published leader of the partition last reported, if its
    /// report is fresh and of the published epoch.
    fn reported(
        &self,
        topic_id: TopicId,
        index: u32,
        record: &PartitionRecord,
        now: Instant,
    ) -> Option<&Led> {
        let leader = record.leader?;
        let report = self
            .reports
            .get(&leader)
            .filter(|report| now.saturating_duration_since(report.received) <= self.stale_after)?;
        let led = report.partitions.get(&(topic_id, index))?;
        (led.epoch == record.leader_epoch.0).then_some(led)
    }

    /// Every partition's health.
    #[must_use]
    pub fn health(&self, state: &MetadataState, now: Instant) -> PartitionHealth {
        let mut health = PartitionHealth::default();
        for topic in state.topics().values() {
            for (index, record) in (0u32..).zip(&topic.partitions) {
                health.partitions += 1;
                let Some(leader) = record.leader else {
                    health.leaderless += 1;
                    health.offline += 1;
                    continue;
                };
                if is_fenced(state, leader) {
                    health.offline += 1;
                    continue;
                }
                match self.in_sync(state, topic.id, index, record, now) {
                    Some(in_sync) if in_sync.len() < record.replicas.len() => {
                        health.under_replicated += 1;
                    }
                    Some(_) => {}
                    None if record
                        .replicas
                        .iter()
                        .any(|replica| is_fenced(state, replica.node)) =>
                    {
                        health.under_replicated += 1;
                    }
                    None => health.in_sync_unknown += 1,
                }
            }
        }
        health
    }
}

/// Whether `node` is fenced or not registered at all.
fn is_fenced(state: &MetadataState, node: NodeId) -> bool {
    state
        .brokers()
        .get(&node)
        .is_none_or(|broker| broker.fenced)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use corelog_controller::{Command, LeaderEpoch, Replica, ShardId};

    use super::*;

    const STALE: Duration = Duration::from_secs(4);

    fn apply(state: &mut MetadataState, command: &Command) {
        let index = state.version() + 1;
        if let Err(error) = state.apply(index, command) {
            panic!("{command:?} refused: {error}");
        }
    }

    /// Brokers 1–4 (unfenced, incarnation 7) and topic `t` of two
    /// partitions over 1–3, partition 0 led by 1 in epoch 1 and partition
    /// 1 leaderless.
    fn cluster() -> (MetadataState, TopicId) {
        let mut state = MetadataState::default();
        for node in 1..=4 {
            apply(
                &mut state,
                &Command::RegisterBroker {
                    node: NodeId(node),
                    host: "127.0.0.1".to_owned(),
                    port: 9000,
                    rack: None,
                    shard_count: 1,
                    incarnation: 7,
                },
            );
            apply(
                &mut state,
                &Command::UnfenceBroker {
                    node: NodeId(node),
                    incarnation: 7,
                },
            );
        }
        let replicas: Vec<Replica> = (1..=3)
            .map(|node| Replica {
                node: NodeId(node),
                shard: ShardId(0),
            })
            .collect();
        apply(
            &mut state,
            &Command::CreateTopic {
                name: "t".to_owned(),
                internal: false,
                config: BTreeMap::new(),
                assignments: vec![replicas.clone(), replicas],
                created_at_ms: 0,
                owner: None,
            },
        );
        let topic = state.topic_by_name("t").expect("created").id;
        for (partition, leader) in [(0, Some(NodeId(1))), (1, None)] {
            apply(
                &mut state,
                &Command::SetLeader {
                    topic_id: topic,
                    partition,
                    leader,
                    epoch: LeaderEpoch(1),
                },
            );
        }
        (state, topic)
    }

    fn led(topic: TopicId, epoch: u32, in_sync: &[u32]) -> LedPartitionV1 {
        LedPartitionV1 {
            led: corelog_wire::message::partition_report::LedPartition {
                topic_id: topic.0,
                partition: 0,
                leader_epoch: epoch,
                in_sync: in_sync.to_vec(),
            },
            epoch_committed: true,
        }
    }

    fn in_sync_of(
        book: &InSyncBook,
        state: &MetadataState,
        topic: TopicId,
        now: Instant,
    ) -> Option<Vec<u64>> {
        let record = state.partition(topic, 0).expect("partition 0");
        book.in_sync(state, topic, 0, record, now)
            .map(|nodes| nodes.into_iter().map(|node| node.0).collect())
    }

    #[test]
    fn without_a_report_a_led_partition_is_unknown_and_a_leaderless_one_offline() {
        let (state, topic) = cluster();
        let book = InSyncBook::new(STALE);
        let now = Instant::now();
        assert_eq!(in_sync_of(&book, &state, topic, now), None);
        let health = book.health(&state, now);
        assert_eq!(
            health,
            PartitionHealth {
                partitions: 2,
                leaderless: 1,
                offline: 1,
                under_replicated: 0,
                in_sync_unknown: 1,
            }
        );
    }

    #[test]
    fn the_leaders_report_in_its_epoch_decides_and_a_short_set_is_under_replicated() {
        let (state, topic) = cluster();
        let mut book = InSyncBook::new(STALE);
        let now = Instant::now();
        book.record(&state, NodeId(1), 7, &[led(topic, 1, &[1, 2, 3])], now)
            .unwrap();
        assert_eq!(in_sync_of(&book, &state, topic, now), Some(vec![1, 2, 3]));
        assert_eq!(book.health(&state, now).under_replicated, 0);
        // The next report replaces it.
        book.record(&state, NodeId(1), 7, &[led(topic, 1, &[1, 3])], now)
            .unwrap();
        assert_eq!(in_sync_of(&book, &state, topic, now), Some(vec![1, 3]));
        assert_eq!(book.health(&state, now).under_replicated, 1);
        // A report of another epoch, or from a follower, tells nothing.
        book.record(&state, NodeId(1), 7, &[led(topic, 2, &[1, 2, 3])], now)
            .unwrap();
        assert_eq!(in_sync_of(&book, &state, topic, now), None);
        book.record(&state, NodeId(2), 7, &[led(topic, 1, &[1, 2, 3])], now)
            .unwrap();
        assert_eq!(in_sync_of(&book, &state, topic, now), None);
    }

    #[test]
    fn a_stale_report_tells_nothing_and_clear_forgets_all() {
        let (state, topic) = cluster();
        let mut book = InSyncBook::new(STALE);
        let then = Instant::now();
        book.record(&state, NodeId(1), 7, &[led(topic, 1, &[1, 2, 3])], then)
            .unwrap();
        assert!(in_sync_of(&book, &state, topic, then + STALE).is_some());
        assert_eq!(in_sync_of(&book, &state, topic, then + STALE * 2), None);
        book.clear();
        assert_eq!(in_sync_of(&book, &state, topic, then), None);
    }

    #[test]
    fn a_fenced_broker_drops_out_at_once_and_a_fenced_leader_makes_the_partition_offline() {
        let (mut state, topic) = cluster();
        let mut book = InSyncBook::new(STALE);
        let now = Instant::now();
        book.record(&state, NodeId(1), 7, &[led(topic, 1, &[1, 2, 3])], now)
            .unwrap();
        apply(&mut state, &Command::FenceBroker { node: NodeId(3) });
        assert_eq!(in_sync_of(&book, &state, topic, now), Some(vec![1, 2]));
        assert_eq!(book.health(&state, now).under_replicated, 1);
        apply(&mut state, &Command::FenceBroker { node: NodeId(1) });
        let health = book.health(&state, now);
        assert_eq!((health.offline, health.leaderless), (2, 1));
    }

    #[test]
    fn a_report_from_another_process_of_the_node_is_refused() {
        let (state, topic) = cluster();
        let mut book = InSyncBook::new(STALE);
        let refused = book.record(&state, NodeId(1), 6, &[led(topic, 1, &[1])], Instant::now());
        assert_eq!(
            refused,
            Err(ReportRefusal::NotRegistered {
                node: NodeId(1),
                incarnation: 6
            })
        );
        assert!(
            book.record(&state, NodeId(9), 7, &[], Instant::now())
                .is_err()
        );
    }

    #[test]
    fn a_moving_partition_steps_on_its_leaders_report_of_learners_and_commit() {
        let (mut state, topic) = cluster();
        apply(
            &mut state,
            &Command::StartReassignment {
                topic_id: topic,
                partition: 0,
                target: [1, 2, 4]
                    .map(|node| Replica {
                        node: NodeId(node),
                        shard: ShardId(0),
                    })
                    .to_vec(),
                throttle_bytes_per_s: 0,
                started_at_ms: 0,
            },
        );
        let mut book = InSyncBook::new(STALE);
        let now = Instant::now();
        assert!(
            book.move_reports(&state, now).is_empty(),
            "no report: no step"
        );
        let mut report = led(topic, 1, &[1, 2, 3]);
        report.epoch_committed = false;
        book.record(&state, NodeId(1), 7, &[report.clone()], now)
            .expect("taken");
        let pending = MoveReport {
            caught_up: BTreeSet::new(),
            epoch_committed: false,
        };
        assert_eq!(
            book.move_reports(&state, now),
            BTreeMap::from([((topic, 0), pending)])
        );
        report.led.in_sync.push(4);
        report.epoch_committed = true;
        book.record(&state, NodeId(1), 7, &[report], now)
            .expect("taken");
        let ready = MoveReport {
            caught_up: BTreeSet::from([NodeId(4)]),
            epoch_committed: true,
        };
        assert_eq!(
            book.move_reports(&state, now),
            BTreeMap::from([((topic, 0), ready)])
        );
        assert!(
            book.move_reports(&state, now + STALE * 2).is_empty(),
            "a stale report: no step"
        );
    }
}
