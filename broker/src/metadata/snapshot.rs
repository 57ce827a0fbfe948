//! The immutable view of metadata every shard works from. Shard 0 follows
//! the controller's metadata log, builds a snapshot of each new version and
//! sends it to every shard; shards never share mutable metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use corelog_controller::{MetadataState, NodeId, TopicConfig};
use corelog_wire::types::LeaderEpoch;
use event_listener::Event;

pub use corelog_wire::types::ShardId;

/// One topic, as shards use it: its settings parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRecord {
    /// Never reused, so a re-created topic is distinguishable (its
    /// directory is named by it).
    pub id: u64,
    /// Name.
    pub name: String,
    /// Partition count.
    pub partitions: u32,
    /// Settings.
    pub config: TopicConfig,
    /// Creation time.
    pub created_at_ms: i64,
}

/// One partition as shards see it.
#[derive(Debug)]
pub struct PartitionView {
    /// The shard that owns this broker's replica (shard 0 when the broker
    /// holds none).
    pub owner: ShardId,
    /// Notified by the owner whenever the partition's committed end moves;
    /// long-polling fetches on any shard listen to it.
    pub data_signal: Arc<Event>,
    /// The replica set and leadership the controller published.
    pub replication: ReplicationView,
}

/// A partition's replica set and leadership, as the controller published it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationView {
    /// Replica brokers, preferred leader first.
    pub replicas: Vec<u32>,
    /// The leader; `None` while leaderless (no majority could be queried).
    pub leader: Option<u32>,
    /// The leadership's epoch.
    pub epoch: LeaderEpoch,
    /// Brokers catching up outside the set while a reassignment adds them
    /// (see `corelog_controller::reassignment`): the leader pushes to them
    /// and never counts them.
    pub learners: Vec<u32>,
    /// Bytes a second the leader copies to each learner at most; 0 for no
    /// limit.
    pub learner_throttle_bytes_per_s: u64,
    /// Whether this broker holds a replica (on shard `owner`), in the set
    /// or as a learner.
    pub local: bool,
}

/// One topic as shards see it.
#[derive(Debug)]
pub struct TopicView {
    /// The topic.
    pub record: TopicRecord,
    /// Partitions by index.
    pub partitions: Vec<PartitionView>,
}

/// Everything a shard needs to know about topics.
#[derive(Debug)]
pub struct MetadataSnapshot {
    /// The controller's metadata version this snapshot shows.
    pub version: u64,
    /// Executors on this node.
    pub shard_count: u16,
    /// Topics by name.
    pub topics: BTreeMap<String, Arc<TopicView>>,
    /// The controller's metadata this snapshot was built from.
    pub cluster: ClusterView,
    /// Whether the broker serves clients from this snapshot on. Shards
    /// accept connections only from the first snapshot that says so: in a
    /// cluster at once (peers reach the controller through the same
    /// listener), on a single node once its own partitions are led here.
    pub serving: bool,
}

/// The cluster metadata behind a snapshot.
#[derive(Debug, Clone)]
pub struct ClusterView {
    /// The controller's applied state.
    pub state: Arc<MetadataState>,
    /// The controller leader as last heard.
    pub controller: Option<u32>,
    /// This broker.
    pub node_id: u32,
}

/// A broker id as the wire carries it (ids come from a `u32` setting, so
/// only a corrupt state holds a larger one).
#[must_use]
pub fn broker_id(node: NodeId) -> u32 {
    u32::try_from(node.0).unwrap_or(u32::MAX)
}

impl MetadataSnapshot {
    /// The snapshot before any metadata arrived: no topics.
    #[must_use]
    pub fn empty(shard_count: u16, node_id: u32, serving: bool) -> MetadataSnapshot {
        MetadataSnapshot {
            version: 0,
            shard_count,
            topics: BTreeMap::new(),
            cluster: ClusterView {
                state: Arc::new(MetadataState::default()),
                controller: None,
                node_id,
            },
            serving,
        }
    }

    /// Whether this snapshot holds the controller's metadata at all: a
    /// member that has just started serves its peers at once but knows no
    /// user, ACL or topic until the controller answered (every state it
    /// sends has version 1 or later).
    #[must_use]
    pub fn is_loaded(&self) -> bool {
        self.version > 0
    }

    /// A snapshot of the controller's `state`: every topic, each partition
    /// with its replica set and leadership, owned (when this broker holds a
    /// replica) by the shard the placement gave it. Data signals carry
    /// over from `previous`, so long-polls survive leadership changes. A
    /// topic whose settings do not parse is left out (and logged): serving
    /// it with other settings would be worse than not serving it, and the
    /// controller's state machine admits none.
    #[must_use]
    pub fn from_state(
        state: Arc<MetadataState>,
        controller: Option<u32>,
        node_id: u32,
        previous: &MetadataSnapshot,
        serving: bool,
    ) -> MetadataSnapshot {
        let node = NodeId(u64::from(node_id));
        let mut topics = BTreeMap::new();
        for topic in state.topics().values() {
            let config = match TopicConfig::from_stored(&topic.config) {
                Ok(config) => config,
                Err(error) => {
                    tracing::error!(topic = %topic.name, %error, "topic settings do not parse; not serving the topic");
                    continue;
                }
            };
            let before = previous
                .topics
                .get(&topic.name)
                .filter(|view| view.record.id == topic.id.0);
            let partitions = topic
                .partitions
                .iter()
                .enumerate()
                .map(|(index, partition)| {
                    let learners = partition
                        .reassignment
                        .as_ref()
                        .map(|moving| moving.learners(&partition.replicas))
                        .unwrap_or_default();
                    let local = partition.replica_on(node).or_else(|| {
                        learners
                            .iter()
                            .copied()
                            .find(|learner| learner.node == node)
                    });
                    let data_signal = before
                        .and_then(|view| view.partitions.get(index))
                        .map_or_else(|| Arc::new(Event::new()), |view| view.data_signal.clone());
                    PartitionView {
                        owner: local.map_or(ShardId(0), |replica| replica.shard),
                        data_signal,
                        replication: ReplicationView {
                            replicas: partition
                                .replicas
                                .iter()
                                .map(|replica| broker_id(replica.node))
                                .collect(),
                            leader: partition.leader.map(broker_id),
                            epoch: partition.leader_epoch,
                            learners: learners
                                .iter()
                                .map(|learner| broker_id(learner.node))
                                .collect(),
                            learner_throttle_bytes_per_s: partition
                                .reassignment
                                .as_ref()
                                .map_or(0, |moving| moving.throttle_bytes_per_s),
                            local: local.is_some(),
                        },
                    }
                })
                .collect();
            let record = TopicRecord {
                id: topic.id.0,
                name: topic.name.clone(),
                partitions: topic.partition_count(),
                config,
                created_at_ms: topic.created_at_ms,
            };
            topics.insert(
                topic.name.clone(),
                Arc::new(TopicView { record, partitions }),
            );
        }
        MetadataSnapshot {
            version: state.version(),
            shard_count: previous.shard_count,
            topics,
            cluster: ClusterView {
                state,
                controller,
                node_id,
            },
            serving: serving || previous.serving,
        }
    }

    /// The topic and partition index of `(topic_id, partition)`.
    #[must_use]
    pub fn partition_by_id(
        &self,
        topic_id: u64,
        partition: u32,
    ) -> Option<(&Arc<TopicView>, &PartitionView)> {
        let view = self
            .topics
            .values()
            .find(|view| view.record.id == topic_id)?;
        Some((view, view.partitions.get(partition as usize)?))
    }

    /// The view of a partition, if the topic and partition exist.
    #[must_use]
    pub fn partition(
        &self,
        topic: &str,
        partition: u32,
    ) -> Option<(&Arc<TopicView>, &PartitionView)> {
        let view = self.topics.get(topic)?;
        let partition = view.partitions.get(partition as usize)?;
        Some((view, partition))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use corelog_controller::{Command, Replica, TopicId};

    use super::*;

    fn state(leader_registered_again: bool) -> MetadataState {
        let mut state = MetadataState::default();
        let mut index = 0;
        let mut apply = |state: &mut MetadataState, command: Command| {
            index += 1;
            state.apply(index, &command).unwrap();
        };
        let register = |incarnation| Command::RegisterBroker {
            node: NodeId(1),
            host: "127.0.0.1".to_owned(),
            port: 7100,
            rack: None,
            shard_count: 2,
            incarnation,
        };
        apply(&mut state, register(1));
        apply(
            &mut state,
            Command::UnfenceBroker {
                node: NodeId(1),
                incarnation: 1,
            },
        );
        apply(
            &mut state,
            Command::CreateTopic {
                name: "orders".to_owned(),
                internal: false,
                config: BTreeMap::from([("retention.ms".to_owned(), "60000".to_owned())]),
                assignments: vec![vec![Replica {
                    node: NodeId(1),
                    shard: ShardId(1),
                }]],
                created_at_ms: 7,
                owner: None,
            },
        );
        if leader_registered_again {
            apply(&mut state, register(2));
        }
        state
    }

    #[test]
    fn a_snapshot_shows_placement_leadership_and_parsed_settings() {
        let empty = MetadataSnapshot::empty(2, 1, false);
        let snapshot =
            MetadataSnapshot::from_state(Arc::new(state(false)), Some(1), 1, &empty, false);
        let (view, partition) = snapshot.partition("orders", 0).unwrap();
        assert_eq!(view.record.id, TopicId(0).0);
        assert_eq!(view.record.config.retention_ms, Some(60_000));
        assert_eq!(partition.owner, ShardId(1));
        assert_eq!(partition.replication.leader, Some(1));
        assert!(partition.replication.local);
        assert!(!snapshot.serving);

        let later =
            MetadataSnapshot::from_state(Arc::new(state(true)), Some(1), 1, &snapshot, true);
        let (_, again) = later.partition("orders", 0).unwrap();
        assert_eq!(again.replication.leader, None);
        assert!(
            Arc::ptr_eq(&partition.data_signal, &again.data_signal),
            "long-polls survive a leadership change"
        );
        let after = MetadataSnapshot::from_state(Arc::new(state(true)), Some(1), 1, &later, false);
        assert!(after.serving, "once serving, a broker stays serving");
    }
}
