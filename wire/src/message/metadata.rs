//! Metadata: brokers, topics, partitions, their leaders and owning shards.
//! Clients route produce and fetch requests with it.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Asks for cluster metadata.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct MetadataRequest {
    /// Topics to describe; `None` for all topics.
    pub topics: Option<Vec<String>>,
}

/// One broker of the cluster.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerInfo {
    /// The broker's node id.
    pub node_id: u32,
    /// Host name or address clients connect to.
    pub host: String,
    /// Client port.
    pub port: u16,
    /// Failure-domain label; replicas of a partition are spread across racks.
    pub rack: Option<String>,
}

/// One partition of a topic.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionMetadata {
    /// Partition index.
    pub partition: u32,
    /// `NONE` (0), or for example `LEADER_NOT_AVAILABLE`.
    pub error_code: u16,
    /// Node id of the leader; `None` while leaderless.
    pub leader: Option<u32>,
    /// The leader's epoch; fetches name it (`current_leader_epoch`) so that
    /// a broker whose metadata differs fences them.
    pub leader_epoch: u32,
    /// Node ids of the replica set.
    pub replicas: Vec<u32>,
    /// Node ids of the replicas in sync with the leader.
    pub in_sync: Vec<u32>,
    /// Shard of the leader that owns this partition, for shard-aware
    /// clients.
    pub owner_shard: u16,
}

/// One topic.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct TopicMetadata {
    /// Topic name.
    pub name: String,
    /// `NONE` (0), or for example `UNKNOWN_TOPIC_OR_PARTITION`.
    pub error_code: u16,
    /// The topic's partitions.
    pub partitions: Vec<PartitionMetadata>,
}

/// Cluster metadata.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct MetadataResponse {
    /// Live brokers.
    pub brokers: Vec<BrokerInfo>,
    /// Node id of the controller leader, if known.
    pub controller_id: Option<u32>,
    /// Version of the metadata snapshot this was built from; grows with each
    /// change.
    pub metadata_version: u64,
    /// Requested topics (all topics for a `None` request).
    pub topics: Vec<TopicMetadata>,
}

api!(ApiKey::Metadata, MetadataRequest => MetadataResponse);
no_raw_section!(
    MetadataRequest,
    ArchivedMetadataRequest,
    MetadataResponse,
    ArchivedMetadataResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = MetadataRequest> {
        prop::option::of(few(name())).prop_map(|topics| MetadataRequest { topics })
    }

    fn broker() -> impl Strategy<Value = BrokerInfo> {
        (any::<u32>(), name(), any::<u16>(), optional_name()).prop_map(
            |(node_id, host, port, rack)| BrokerInfo {
                node_id,
                host,
                port,
                rack,
            },
        )
    }

    fn partition() -> impl Strategy<Value = PartitionMetadata> {
        (
            any::<u32>(),
            any::<u16>(),
            any::<Option<u32>>(),
            any::<u32>(),
            few(any::<u32>()),
            few(any::<u32>()),
            any::<u16>(),
        )
            .prop_map(
                |(partition, error_code, leader, leader_epoch, replicas, in_sync, owner_shard)| {
                    PartitionMetadata {
                        partition,
                        error_code,
                        leader,
                        leader_epoch,
                        replicas,
                        in_sync,
                        owner_shard,
                    }
                },
            )
    }

    pub(crate) fn response() -> impl Strategy<Value = MetadataResponse> {
        let topic =
            (name(), any::<u16>(), few(partition())).prop_map(|(name, error_code, partitions)| {
                TopicMetadata {
                    name,
                    error_code,
                    partitions,
                }
            });
        (
            few(broker()),
            any::<Option<u32>>(),
            any::<u64>(),
            few(topic),
        )
            .prop_map(|(brokers, controller_id, metadata_version, topics)| {
                MetadataResponse {
                    brokers,
                    controller_id,
                    metadata_version,
                    topics,
                }
            })
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_bytes_never_panic(q in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }
    }
}
