//! DescribeCluster: the brokers, the controller quorum, and each partition's
//! leader, replicas and in-sync replicas, for `corelog cluster info|health`
//! and `corelog topic describe|list`.
//!
//! Any broker answers from what it knows. Only the controller leader knows
//! which brokers still heartbeat and which replicas are in sync (leaders
//! report them to it with `PartitionReport`), so its answer is the
//! authoritative one ([`DescribeClusterResponse::authoritative`]); another
//! broker answers with its metadata, names the controller leader it knows,
//! and leaves those fields empty. A broker that knows no controller leader
//! says so: the controller has no quorum, or has not formed one yet.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Asks for the cluster's state.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeClusterRequest {
    /// Topics whose partitions to include: `None` for every topic, an empty
    /// list for none (brokers and controller only).
    pub topics: Option<Vec<String>>,
}

/// The controller quorum as the answering broker sees it.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ControllerStatus {
    /// The controller voters' node ids.
    pub voters: Vec<u32>,
    /// The controller leader the answering broker knows, if any.
    pub leader: Option<u32>,
    /// The answering voter's Raft term (0 from a broker that is no voter).
    pub term: u64,
    /// The answering voter's Raft commit index (0 from a non-voter).
    pub commit_index: u64,
    /// The metadata version the answering broker has applied.
    pub metadata_version: u64,
}

/// One registered broker.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerStatus {
    /// Node id.
    pub node_id: u32,
    /// Advertised host.
    pub host: String,
    /// Client port.
    pub port: u16,
    /// Failure domain, if set.
    pub rack: Option<String>,
    /// Fenced: registered but leading nothing and getting no new replicas
    /// (its session expired, or it has not caught up yet).
    pub fenced: bool,
    /// Whether it is a controller voter.
    pub voter: bool,
    /// Milliseconds since the controller leader last heard its heartbeat;
    /// `None` in a non-authoritative answer, or if not heard since this
    /// leader took over.
    pub heartbeat_age_ms: Option<u64>,
}

/// One partition's leadership and replicas.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionStatus {
    /// Partition index.
    pub partition: u32,
    /// The published leader; `None` while the partition has none.
    pub leader: Option<u32>,
    /// The published leader epoch.
    pub leader_epoch: u32,
    /// Replica node ids, preferred leader first.
    pub replicas: Vec<u32>,
    /// In-sync replicas (leader included) as the current leader last
    /// reported them; `None` when unknown: a non-authoritative answer, no
    /// leader, or no report from this leader and epoch yet.
    pub in_sync: Option<Vec<u32>>,
}

/// One topic's partitions.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct TopicStatus {
    /// Topic name.
    pub name: String,
    /// `NONE` (0), or `UNKNOWN_TOPIC_OR_PARTITION` for a name not found.
    pub error_code: u16,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionStatus>,
}

/// The cluster's state.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeClusterResponse {
    /// `NONE` (0), or why nothing could be described.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// The answering broker's node id.
    pub node_id: u32,
    /// Whether the answer is the controller leader's: broker liveness and
    /// in-sync replicas are known only there.
    pub authoritative: bool,
    /// The controller quorum.
    pub controller: ControllerStatus,
    /// Registered brokers, by node id.
    pub brokers: Vec<BrokerStatus>,
    /// The requested topics, by name.
    pub topics: Vec<TopicStatus>,
}

/// [`DescribeClusterRequest`] of version 1, answered with
/// [`DescribeClusterResponseV1`]: also brokers in maintenance and
/// partitions moving to other brokers.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeClusterRequestV1 {
    /// As in version 0.
    pub topics: Option<Vec<String>>,
}

/// [`BrokerStatus`] of version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerStatusV1 {
    /// The version 0 fields.
    pub status: BrokerStatus,
    /// In maintenance: leads nothing until taken out of it.
    pub maintenance: bool,
}

/// A partition moving to another replica set (`corelog partition
/// reassign`), as the controller's metadata holds it.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ReassignmentStatus {
    /// The set the move started from, where a cancel returns.
    pub original: Vec<u32>,
    /// The set it was asked to reach.
    pub target: Vec<u32>,
    /// Brokers copying the log now, outside the commit quorum.
    pub learners: Vec<u32>,
    /// Bytes a second each learner copies at most; 0 for no limit.
    pub throttle_bytes_per_s: u64,
    /// When the move started (ms since the epoch).
    pub started_at_ms: i64,
    /// Cancelled: it is returning to `original`.
    pub cancelled: bool,
}

/// [`PartitionStatus`] of version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionStatusV1 {
    /// The version 0 fields.
    pub status: PartitionStatus,
    /// The move in progress, if any.
    pub reassignment: Option<ReassignmentStatus>,
}

/// [`TopicStatus`] of version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct TopicStatusV1 {
    /// Topic name.
    pub name: String,
    /// As in version 0.
    pub error_code: u16,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionStatusV1>,
}

/// [`DescribeClusterResponse`] of version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeClusterResponseV1 {
    /// `NONE` (0), or why nothing could be described.
    pub error_code: u16,
    /// Detail for people.
    pub error_message: Option<String>,
    /// The answering broker's node id.
    pub node_id: u32,
    /// As in version 0.
    pub authoritative: bool,
    /// The controller quorum.
    pub controller: ControllerStatus,
    /// Registered brokers, by node id.
    pub brokers: Vec<BrokerStatusV1>,
    /// The requested topics, by name.
    pub topics: Vec<TopicStatusV1>,
}

/// [`DescribeClusterRequest`] of version 2, answered with
/// [`DescribeClusterResponseV2`]: also brokers being decommissioned.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeClusterRequestV2 {
    /// As in version 0.
    pub topics: Option<Vec<String>>,
}

/// How a broker being decommissioned has its replicas moved.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DecommissionStatus {
    /// Bytes a second each new replica copies at most; 0 for no limit.
    pub throttle_bytes_per_s: u64,
    /// Moves off the broker running at once.
    pub max_moves: u16,
}

/// [`BrokerStatus`] of version 2.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerStatusV2 {
    /// The version 1 fields.
    pub status: BrokerStatusV1,
    /// Being decommissioned: its replicas move to other brokers.
    pub decommission: Option<DecommissionStatus>,
}

/// [`DescribeClusterResponse`] of version 2.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeClusterResponseV2 {
    /// `NONE` (0), or why nothing could be described.
    pub error_code: u16,
    /// Detail for people.
    pub error_message: Option<String>,
    /// The answering broker's node id.
    pub node_id: u32,
    /// As in version 0.
    pub authoritative: bool,
    /// The controller quorum.
    pub controller: ControllerStatus,
    /// Registered brokers, by node id.
    pub brokers: Vec<BrokerStatusV2>,
    /// The requested topics, by name, as in version 1.
    pub topics: Vec<TopicStatusV1>,
}

api!(ApiKey::DescribeCluster, DescribeClusterRequest => DescribeClusterResponse);
api!(ApiKey::DescribeCluster, version 1, DescribeClusterRequestV1 => DescribeClusterResponseV1);
api!(ApiKey::DescribeCluster, version 2, DescribeClusterRequestV2 => DescribeClusterResponseV2);
no_raw_section!(
    DescribeClusterRequest,
    ArchivedDescribeClusterRequest,
    DescribeClusterResponse,
    ArchivedDescribeClusterResponse,
    DescribeClusterRequestV1,
    ArchivedDescribeClusterRequestV1,
    DescribeClusterResponseV1,
    ArchivedDescribeClusterResponseV1,
    DescribeClusterRequestV2,
    ArchivedDescribeClusterRequestV2,
    DescribeClusterResponseV2,
    ArchivedDescribeClusterResponseV2,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = DescribeClusterRequest> {
        prop::option::of(few(name())).prop_map(|topics| DescribeClusterRequest { topics })
    }

    fn controller() -> impl Strategy<Value = ControllerStatus> {
        (few(any::<u32>()), any::<Option<u32>>(), any::<[u64; 3]>()).prop_map(
            |(voters, leader, [term, commit_index, metadata_version])| ControllerStatus {
                voters,
                leader,
                term,
                commit_index,
                metadata_version,
            },
        )
    }

    fn broker() -> impl Strategy<Value = BrokerStatus> {
        (
            any::<u32>(),
            name(),
            any::<u16>(),
            optional_name(),
            any::<[bool; 2]>(),
            any::<Option<u64>>(),
        )
            .prop_map(
                |(node_id, host, port, rack, [fenced, voter], heartbeat_age_ms)| BrokerStatus {
                    node_id,
                    host,
                    port,
                    rack,
                    fenced,
                    voter,
                    heartbeat_age_ms,
                },
            )
    }

    fn partition() -> impl Strategy<Value = PartitionStatus> {
        (
            any::<u32>(),
            any::<Option<u32>>(),
            any::<u32>(),
            few(any::<u32>()),
            prop::option::of(few(any::<u32>())),
        )
            .prop_map(|(partition, leader, leader_epoch, replicas, in_sync)| {
                PartitionStatus {
                    partition,
                    leader,
                    leader_epoch,
                    replicas,
                    in_sync,
                }
            })
    }

    fn topic() -> impl Strategy<Value = TopicStatus> {
        (name(), any::<u16>(), few(partition())).prop_map(|(name, error_code, partitions)| {
            TopicStatus {
                name,
                error_code,
                partitions,
            }
        })
    }

    pub(crate) fn response() -> impl Strategy<Value = DescribeClusterResponse> {
        (
            any::<u16>(),
            optional_name(),
            any::<u32>(),
            any::<bool>(),
            controller(),
            few(broker()),
            few(topic()),
        )
            .prop_map(
                |(
                    error_code,
                    error_message,
                    node_id,
                    authoritative,
                    controller,
                    brokers,
                    topics,
                )| {
                    DescribeClusterResponse {
                        error_code,
                        error_message,
                        node_id,
                        authoritative,
                        controller,
                        brokers,
                        topics,
                    }
                },
            )
    }

    pub(crate) fn request_v1() -> impl Strategy<Value = DescribeClusterRequestV1> {
        prop::option::of(few(name())).prop_map(|topics| DescribeClusterRequestV1 { topics })
    }

    fn reassignment() -> impl Strategy<Value = ReassignmentStatus> {
        (
            [few(any::<u32>()), few(any::<u32>()), few(any::<u32>())],
            any::<u64>(),
            any::<i64>(),
            any::<bool>(),
        )
            .prop_map(
                |([original, target, learners], throttle_bytes_per_s, started_at_ms, cancelled)| {
                    ReassignmentStatus {
                        original,
                        target,
                        learners,
                        throttle_bytes_per_s,
                        started_at_ms,
                        cancelled,
                    }
                },
            )
    }

    fn topic_v1() -> impl Strategy<Value = TopicStatusV1> {
        let partition =
            (partition(), prop::option::of(reassignment())).prop_map(|(status, reassignment)| {
                PartitionStatusV1 {
                    status,
                    reassignment,
                }
            });
        (name(), any::<u16>(), few(partition)).prop_map(|(name, error_code, partitions)| {
            TopicStatusV1 {
                name,
                error_code,
                partitions,
            }
        })
    }

    pub(crate) fn response_v1() -> impl Strategy<Value = DescribeClusterResponseV1> {
        let broker = (broker(), any::<bool>()).prop_map(|(status, maintenance)| BrokerStatusV1 {
            status,
            maintenance,
        });
        (response(), few(broker), few(topic_v1())).prop_map(|(v0, brokers, topics)| {
            DescribeClusterResponseV1 {
                error_code: v0.error_code,
                error_message: v0.error_message,
                node_id: v0.node_id,
                authoritative: v0.authoritative,
                controller: v0.controller,
                brokers,
                topics,
            }
        })
    }

    pub(crate) fn request_v2() -> impl Strategy<Value = DescribeClusterRequestV2> {
        prop::option::of(few(name())).prop_map(|topics| DescribeClusterRequestV2 { topics })
    }

    pub(crate) fn response_v2() -> impl Strategy<Value = DescribeClusterResponseV2> {
        let decommission =
            (any::<u64>(), any::<u16>()).prop_map(|(throttle_bytes_per_s, max_moves)| {
                DecommissionStatus {
                    throttle_bytes_per_s,
                    max_moves,
                }
            });
        let broker = (broker(), any::<bool>(), prop::option::of(decommission)).prop_map(
            |(status, maintenance, decommission)| BrokerStatusV2 {
                status: BrokerStatusV1 {
                    status,
                    maintenance,
                },
                decommission,
            },
        );
        (response_v1(), few(broker)).prop_map(|(v1, brokers)| DescribeClusterResponseV2 {
            error_code: v1.error_code,
            error_message: v1.error_message,
            node_id: v1.node_id,
            authoritative: v1.authoritative,
            controller: v1.controller,
            brokers,
            topics: v1.topics,
        })
    }

    proptest! {
        #[test]
        fn request_v2_round_trips(msg in request_v2()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_v2_round_trips(msg in response_v2()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_v2_bytes_never_panic(q in request_v2(), s in response_v2(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }

        #[test]
        fn request_v1_round_trips(msg in request_v1()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_v1_round_trips(msg in response_v1()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_v1_bytes_never_panic(q in request_v1(), s in response_v1(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }

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
