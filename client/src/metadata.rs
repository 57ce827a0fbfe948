//! Cluster metadata as the client keeps it: brokers and their addresses,
//! topics, and each partition's leader. The producer routes batches and the
//! consumer routes fetches with it; leader errors refresh it (see
//! [`crate::cluster`]).
//!
//! A snapshot is immutable and shared (`Arc`): a refresh builds a new one
//! and swaps it in, so a reader never sees half of an update.

use std::collections::BTreeMap;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::metadata::ArchivedMetadataResponse;
use serde::Serialize;

use crate::error::ClientError;

/// One broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BrokerMetadata {
    /// Node id.
    pub node_id: u32,
    /// Host clients connect to, as the broker advertises it.
    pub host: String,
    /// Client port.
    pub port: u16,
    /// Failure-domain label.
    pub rack: Option<String>,
}

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionMetadata {
    /// Partition index.
    pub partition: u32,
    /// `None`, or the error the broker reported for this partition (for
    /// example `LEADER_NOT_AVAILABLE`).
    #[serde(serialize_with = "serialize_code")]
    pub error: Option<ErrorCode>,
    /// Node id of the leader; `None` while leaderless.
    pub leader: Option<u32>,
    /// The leader's epoch.
    pub leader_epoch: u32,
    /// Node ids of the replica set.
    pub replicas: Vec<u32>,
    /// Node ids of the replicas in sync with the leader.
    pub in_sync: Vec<u32>,
    /// The leader's shard that owns the partition.
    pub owner_shard: u16,
}

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicMetadata {
    /// Topic name.
    pub name: String,
    /// `None`, or the error for the whole topic (for example
    /// `UNKNOWN_TOPIC_OR_PARTITION`).
    #[serde(serialize_with = "serialize_code")]
    pub error: Option<ErrorCode>,
    /// Partitions, sorted by index.
    pub partitions: Vec<PartitionMetadata>,
}

impl TopicMetadata {
    /// Number of partitions. The partitioner divides by it (C3).
    #[must_use]
    pub fn partition_count(&self) -> u32 {
        // Partition indexes are u32 on the wire, so the count fits.
        u32::try_from(self.partitions.len()).unwrap_or(u32::MAX)
    }

    /// One partition's metadata.
    #[must_use]
    pub fn partition(&self, partition: u32) -> Option<&PartitionMetadata> {
        self.partitions
            .binary_search_by_key(&partition, |p| p.partition)
            .ok()
            .map(|index| &self.partitions[index])
    }
}

/// A snapshot of cluster metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterMetadata {
    /// Live brokers, by node id.
    pub brokers: BTreeMap<u32, BrokerMetadata>,
    /// Node id of the controller leader, if known.
    pub controller_id: Option<u32>,
    /// Version of the broker's metadata snapshot this was built from.
    pub metadata_version: u64,
    /// Topics, by name.
    pub topics: BTreeMap<String, TopicMetadata>,
}

fn serialize_code<S: serde::Serializer>(
    code: &Option<ErrorCode>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match code {
        Some(code) => serializer.serialize_some(code.name()),
        None => serializer.serialize_none(),
    }
}

fn error_of(code: u16) -> Option<ErrorCode> {
    match ErrorCode::from_code(code) {
        Some(ErrorCode::None) => None,
        Some(code) => Some(code),
        None => Some(ErrorCode::UnknownServerError),
    }
}

/// The `host:port` to connect to for an advertised host and port. A
/// wildcard host (`0.0.0.0`, `::` or nothing) is replaced by
/// `fallback_host`, the host the client bootstrapped from; IPv6 hosts are
/// bracketed.
pub(crate) fn connect_addr(host: &str, port: u16, fallback_host: &str) -> String {
    let host = match host {
        "" | "0.0.0.0" | "::" | "[::]" => fallback_host,
        host => host,
    };
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl ClusterMetadata {
    /// Copies a validated response into owned form.
    pub(crate) fn from_archived(response: &ArchivedMetadataResponse) -> ClusterMetadata {
        let brokers = response
            .brokers
            .iter()
            .map(|broker| {
                let node_id = broker.node_id.to_native();
                let metadata = BrokerMetadata {
                    node_id,
                    host: broker.host.to_string(),
                    port: broker.port.to_native(),
                    rack: broker.rack.as_ref().map(|rack| rack.to_string()),
                };
                (node_id, metadata)
            })
            .collect();
        let topics = response
            .topics
            .iter()
            .map(|topic| {
                let mut partitions: Vec<PartitionMetadata> = topic
                    .partitions
                    .iter()
                    .map(|partition| PartitionMetadata {
                        partition: partition.partition.to_native(),
                        error: error_of(partition.error_code.to_native()),
                        leader: partition.leader.as_ref().map(|leader| leader.to_native()),
                        leader_epoch: partition.leader_epoch.to_native(),
                        replicas: partition.replicas.iter().map(|r| r.to_native()).collect(),
                        in_sync: partition.in_sync.iter().map(|r| r.to_native()).collect(),
                        owner_shard: partition.owner_shard.to_native(),
                    })
                    .collect();
                partitions.sort_by_key(|partition| partition.partition);
                partitions.dedup_by_key(|partition| partition.partition);
                let metadata = TopicMetadata {
                    name: topic.name.to_string(),
                    error: error_of(topic.error_code.to_native()),
                    partitions,
                };
                (metadata.name.clone(), metadata)
            })
            .collect();
        ClusterMetadata {
            brokers,
            controller_id: response.controller_id.as_ref().map(|id| id.to_native()),
            metadata_version: response.metadata_version.to_native(),
            topics,
        }
    }

    /// The address to connect to for `node_id`. A broker that advertises a
    /// wildcard host (`0.0.0.0`, `::` or nothing) is reached at
    /// `fallback_host`, the host the client bootstrapped from: a local
    /// broker listening on every interface still works.
    #[must_use]
    pub fn broker_addr(&self, node_id: u32, fallback_host: &str) -> Option<String> {
        let broker = self.brokers.get(&node_id)?;
        Some(connect_addr(&broker.host, broker.port, fallback_host))
    }

    /// A topic whose metadata the broker returned without a topic-level
    /// error.
    ///
    /// # Errors
    /// The topic's error (`UNKNOWN_TOPIC_OR_PARTITION` when it does not
    /// exist), or [`ClientError::Broker`] with that code when the snapshot
    /// does not mention the topic at all.
    pub fn topic(&self, name: &str) -> Result<&TopicMetadata, ClientError> {
        match self.topics.get(name) {
            Some(topic) if topic.error.is_none() => Ok(topic),
            Some(topic) => Err(ClientError::Broker {
                code: topic.error.unwrap_or(ErrorCode::UnknownServerError),
                context: format!("topic {name}"),
                detail: None,
            }),
            None => Err(ClientError::Broker {
                code: ErrorCode::UnknownTopicOrPartition,
                context: format!("topic {name}"),
                detail: None,
            }),
        }
    }

    /// The leader of a partition and the leader's shard that owns it, if
    /// the snapshot knows a leader.
    #[must_use]
    pub fn leader_shard(&self, topic: &str, partition: u32) -> Option<(u32, u16)> {
        let partition = self.topics.get(topic)?.partition(partition)?;
        if partition.error.is_some_and(|code| code != ErrorCode::None) {
            return None;
        }
        Some((partition.leader?, partition.owner_shard))
    }

    /// The leader epoch of a partition, if the snapshot knows a leader:
    /// fetches name it, so that a broker with newer (or older) metadata
    /// fences them instead of serving them (C11).
    #[must_use]
    pub fn leader_epoch(&self, topic: &str, partition: u32) -> Option<u32> {
        self.leader(topic, partition)?;
        Some(self.topics.get(topic)?.partition(partition)?.leader_epoch)
    }

    /// The leader of a partition, if the snapshot knows one.
    #[must_use]
    pub fn leader(&self, topic: &str, partition: u32) -> Option<u32> {
        let partition = self.topics.get(topic)?.partition(partition)?;
        if partition.error.is_some_and(|code| code != ErrorCode::None) {
            return None;
        }
        partition.leader
    }
}

#[cfg(test)]
mod tests {
    use corelog_wire::message::metadata::{
        BrokerInfo, MetadataResponse, PartitionMetadata as WirePartition,
        TopicMetadata as WireTopic,
    };
    use corelog_wire::message::{copy_aligned, decode_response, encode_response};

    use super::*;

    fn snapshot(host: &str) -> ClusterMetadata {
        let response = MetadataResponse {
            brokers: vec![BrokerInfo {
                node_id: 1,
                host: host.to_owned(),
                port: 7100,
                rack: None,
            }],
            controller_id: Some(1),
            metadata_version: 9,
            topics: vec![
                WireTopic {
                    name: "orders".to_owned(),
                    error_code: 0,
                    partitions: [1_u32, 0]
                        .iter()
                        .map(|&partition| WirePartition {
                            partition,
                            error_code: 0,
                            leader: Some(1),
                            leader_epoch: 3,
                            replicas: vec![1],
                            in_sync: vec![1],
                            owner_shard: 0,
                        })
                        .collect(),
                },
                WireTopic {
                    name: "missing".to_owned(),
                    error_code: ErrorCode::UnknownTopicOrPartition.code(),
                    partitions: Vec::new(),
                },
            ],
        };
        let body = copy_aligned(&encode_response(&response, &[]).unwrap());
        let (archived, _) = decode_response::<MetadataResponse>(&body).unwrap();
        ClusterMetadata::from_archived(archived)
    }

    #[test]
    fn partitions_are_sorted_and_leaders_found() {
        let metadata = snapshot("broker-1");
        let orders = metadata.topic("orders").unwrap();
        assert_eq!(orders.partition_count(), 2);
        assert_eq!(orders.partitions[0].partition, 0);
        assert_eq!(metadata.leader("orders", 1), Some(1));
        assert_eq!(metadata.leader("orders", 2), None);
        assert_eq!(
            metadata.broker_addr(1, "127.0.0.1").as_deref(),
            Some("broker-1:7100")
        );
        let error = metadata.topic("missing").unwrap_err();
        assert_eq!(error.code(), Some(ErrorCode::UnknownTopicOrPartition));
        let error = metadata.topic("never-heard-of").unwrap_err();
        assert_eq!(error.code(), Some(ErrorCode::UnknownTopicOrPartition));
    }

    #[test]
    fn wildcard_advertised_host_falls_back_to_the_bootstrap_host() {
        let metadata = snapshot("0.0.0.0");
        assert_eq!(
            metadata.broker_addr(1, "10.1.2.3").as_deref(),
            Some("10.1.2.3:7100")
        );
        let metadata = snapshot("::1");
        assert_eq!(metadata.broker_addr(1, "x").as_deref(), Some("[::1]:7100"));
    }
}
