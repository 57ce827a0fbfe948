//! The immutable view of metadata every shard works from. Shard 0 builds a
//! new snapshot after each catalog change and sends it to every shard;
//! shards never share mutable metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use corelog_wire::types::LeaderEpoch;
use event_listener::Event;

use super::catalog::{Catalog, TopicRecord};
use super::topic_config::TopicConfig;

/// Index of a shard (an executor) on this node.
pub type ShardId = u16;

/// One partition as shards see it.
#[derive(Debug)]
pub struct PartitionView {
    /// The shard that owns the partition's log.
    pub owner: ShardId,
    /// Notified by the owner whenever the partition's committed end moves;
    /// long-polling fetches on any shard listen to it.
    pub data_signal: Arc<Event>,
    /// Cluster mode: the replica set and leadership the controller
    /// published. `None` on a standalone broker.
    pub replication: Option<ReplicationView>,
}

/// A replicated partition as the controller published it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationView {
    /// Replica brokers, preferred leader first.
    pub replicas: Vec<u32>,
    /// The leader; `None` while leaderless (no majority could be queried).
    pub leader: Option<u32>,
    /// The leadership's epoch.
    pub epoch: LeaderEpoch,
    /// Whether this broker holds a replica (on shard `owner`).
    pub local: bool,
}

/// One topic as shards see it.
#[derive(Debug)]
pub struct TopicView {
    /// The catalog record.
    pub record: TopicRecord,
    /// Partitions by index.
    pub partitions: Vec<PartitionView>,
}

/// Everything a shard needs to know about topics.
#[derive(Debug, Default)]
pub struct MetadataSnapshot {
    /// The catalog version this snapshot shows.
    pub version: u64,
    /// Executors on this node.
    pub shard_count: u16,
    /// Topics by name.
    pub topics: BTreeMap<String, Arc<TopicView>>,
    /// Cluster mode: the controller's metadata this snapshot was built from.
    pub cluster: Option<ClusterView>,
}

/// The cluster metadata behind a cluster-mode snapshot.
#[derive(Debug, Clone)]
pub struct ClusterView {
    /// The controller's applied state.
    pub state: Arc<corelog_controller::MetadataState>,
    /// The controller leader as last heard.
    pub controller: Option<u32>,
    /// This broker.
    pub node_id: u32,
}

/// The shard that owns partition `partition` of topic `topic_id`: spread
/// round-robin, offset by the topic id so that small topics do not all
/// start on shard 0.
#[must_use]
pub fn owner_shard(topic_id: u64, partition: u32, shard_count: u16) -> ShardId {
    assert!(shard_count > 0);
    ((topic_id + u64::from(partition)) % u64::from(shard_count)) as ShardId
}

impl MetadataSnapshot {
    /// A snapshot of `catalog`, reusing the views (and their signals) of
    /// topics that `previous` already had.
    #[must_use]
    pub fn build(
        catalog: &Catalog,
        shard_count: u16,
        previous: &MetadataSnapshot,
    ) -> MetadataSnapshot {
        let topics = catalog
            .topics
            .iter()
            .map(|(name, record)| {
                let reused = previous
                    .topics
                    .get(name)
                    .filter(|view| view.record == *record && previous.shard_count == shard_count)
                    .cloned();
                let view = reused.unwrap_or_else(|| {
                    Arc::new(TopicView {
                        record: record.clone(),
                        partitions: (0..record.partitions)
                            .map(|partition| PartitionView {
                                owner: owner_shard(record.id, partition, shard_count),
                                data_signal: Arc::new(Event::new()),
                                replication: None,
                            })
                            .collect(),
                    })
                });
                (name.clone(), view)
            })
            .collect();
        MetadataSnapshot {
            version: catalog.version,
            shard_count,
            topics,
            cluster: None,
        }
    }

    /// A cluster-mode snapshot of the controller's `state`: every topic,
    /// each partition with its replica set and leadership, owned (when this
    /// broker holds a replica) by the shard the placement gave it. Data
    /// signals carry over from `previous`, so long-polls survive leadership
    /// changes. A topic whose settings do not parse over `topic_defaults`
    /// is left out (and logged): serving it with other settings would be
    /// worse than not serving it.
    #[must_use]
    pub fn for_cluster(
        state: Arc<corelog_controller::MetadataState>,
        controller: Option<u32>,
        node_id: u32,
        previous: &MetadataSnapshot,
        topic_defaults: &TopicConfig,
    ) -> MetadataSnapshot {
        let node = corelog_controller::NodeId(u64::from(node_id));
        let as_u32 = |node: corelog_controller::NodeId| u32::try_from(node.0).unwrap_or(u32::MAX);
        let mut topics = BTreeMap::new();
        for topic in state.topics().values() {
            let config = match TopicConfig::with_entries(topic_defaults, topic.config_entries()) {
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
                    let local = partition.replica_on(node);
                    let data_signal = before
                        .and_then(|view| view.partitions.get(index))
                        .map_or_else(|| Arc::new(Event::new()), |view| view.data_signal.clone());
                    PartitionView {
                        owner: local.map_or(0, |replica| replica.shard.0),
                        data_signal,
                        replication: Some(ReplicationView {
                            replicas: partition
                                .replicas
                                .iter()
                                .map(|replica| as_u32(replica.node))
                                .collect(),
                            leader: partition.leader.map(as_u32),
                            epoch: partition.leader_epoch,
                            local: local.is_some(),
                        }),
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
            cluster: Some(ClusterView {
                state,
                controller,
                node_id,
            }),
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
    use super::*;

    #[test]
    fn partitions_spread_over_shards() {
        let owners: Vec<ShardId> = (0..4)
            .map(|partition| owner_shard(5, partition, 2))
            .collect();
        assert_eq!(owners, vec![1, 0, 1, 0]);
        assert!((0..100).all(|partition| owner_shard(9, partition, 3) < 3));
    }
}
