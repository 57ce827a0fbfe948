//! The cluster's state for people: brokers, the controller quorum, each
//! partition's leader and in-sync replicas ([`Admin::describe_cluster`]),
//! and what is wrong with it ([`ClusterStatus::problems`]), for `corelog
//! cluster info|health` and `corelog topic describe|list`.

use std::time::Duration;

use corelog_wire::frame::ApiKey;
use corelog_wire::message::describe_cluster::{
    ArchivedBrokerStatus, ArchivedControllerStatus, ArchivedPartitionStatus,
    ArchivedReassignmentStatus, ArchivedTopicStatusV1, DescribeClusterRequest,
    DescribeClusterRequestV1, DescribeClusterRequestV2,
};
use serde::Serialize;

use super::Admin;
use crate::error::ClientError;

/// The controller quorum, as the answering broker sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ControllerState {
    /// The voters' node ids.
    pub voters: Vec<u32>,
    /// The controller leader, if the answering broker knows one.
    pub leader: Option<u32>,
    /// The answering voter's Raft term (0 from a non-voter).
    pub term: u64,
    /// The answering voter's Raft commit index (0 from a non-voter).
    pub commit_index: u64,
    /// The metadata version the answering broker applied.
    pub metadata_version: u64,
}

/// One registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BrokerState {
    /// Node id.
    pub node_id: u32,
    /// `host:port` it advertises.
    pub address: String,
    /// Failure domain.
    pub rack: Option<String>,
    /// Leads nothing and gets no new replicas (session expired, or not
    /// caught up yet).
    pub fenced: bool,
    /// A controller voter.
    pub voter: bool,
    /// Milliseconds since the controller leader heard from it; `None`
    /// unless the answer is authoritative.
    pub heartbeat_age_ms: Option<u64>,
    /// In maintenance: leads nothing until taken out of it (always false
    /// from a broker of the release before, which does not say).
    pub maintenance: bool,
    /// Being decommissioned: its replicas are moving to other brokers
    /// (always `None` from a broker of a release before, which does not
    /// say).
    pub decommission: Option<DecommissionState>,
}

/// How a broker being decommissioned has its replicas moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DecommissionState {
    /// Bytes a second each new replica copies at most; 0 for no limit.
    pub throttle_bytes_per_s: u64,
    /// Moves off the broker running at once.
    pub max_moves: u16,
}

/// A partition moving to another replica set (`corelog partition
/// reassign`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionMove {
    /// The set it started from, where a cancel returns.
    pub original: Vec<u32>,
    /// The set it was asked to reach.
    pub target: Vec<u32>,
    /// Brokers copying the log now, outside the commit quorum.
    pub learners: Vec<u32>,
    /// Bytes a second each learner copies at most; 0 for no limit.
    pub throttle_bytes_per_s: u64,
    /// When it started (ms since the epoch).
    pub started_at_ms: i64,
    /// Cancelled: it is returning to `original`.
    pub cancelled: bool,
}

/// One partition's leadership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    /// Index.
    pub partition: u32,
    /// Leader, if one is published.
    pub leader: Option<u32>,
    /// Leader epoch.
    pub leader_epoch: u32,
    /// Replicas, preferred leader first.
    pub replicas: Vec<u32>,
    /// In-sync replicas; `None` when unknown (see
    /// [`ClusterStatus::authoritative`]).
    pub in_sync: Option<Vec<u32>>,
    /// The move in progress, if any (always `None` from a broker of the
    /// release before, which does not say).
    pub moving: Option<PartitionMove>,
}

/// One topic's partitions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicStatus {
    /// Name.
    pub name: String,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionStatus>,
}

/// The cluster as one broker described it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// The broker that answered.
    pub answered_by: u32,
    /// Whether it is the controller leader's view. Only the leader knows
    /// which brokers still heartbeat and which replicas are in sync.
    pub authoritative: bool,
    /// The controller quorum.
    pub controller: ControllerState,
    /// Registered brokers, by node id.
    pub brokers: Vec<BrokerState>,
    /// The topics asked for, by name.
    pub topics: Vec<TopicStatus>,
}

/// Something wrong with the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum Problem {
    /// No controller leader: the voters lost their quorum, or have not
    /// formed one yet. Metadata cannot change and brokers are not fenced.
    NoControllerLeader {
        /// The voters.
        voters: Vec<u32>,
    },
    /// The controller leader could not be asked; liveness and in-sync
    /// replicas are unknown.
    ControllerUnreachable {
        /// The leader named.
        leader: u32,
        /// Why it could not be asked.
        reason: String,
    },
    /// The controller leader has not heard from these unfenced brokers
    /// since it took over (a failover just happened): whether they are
    /// alive is unknown until they heartbeat, or until their session times
    /// out and they are fenced.
    LivenessUnknown {
        /// The controller leader that answered.
        leader: u32,
        /// The brokers it has not heard from.
        nodes: Vec<u32>,
    },
    /// A broker is fenced.
    FencedBroker {
        /// Its id.
        node_id: u32,
    },
    /// A partition has no leader: it takes no writes and serves no reads.
    Leaderless {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
    },
    /// A partition's leader is fenced: it is offline until another is
    /// elected.
    LeaderFenced {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// The fenced leader.
        leader: u32,
    },
    /// A partition has fewer in-sync replicas than replicas.
    UnderReplicated {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// In sync.
        in_sync: Vec<u32>,
        /// All replicas.
        replicas: Vec<u32>,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NoControllerLeader { voters } => write!(
                f,
                "the controller has no leader: no quorum among voters {}; metadata cannot change until a majority of them runs",
                ids(voters)
            ),
            Problem::ControllerUnreachable { leader, reason } => write!(
                f,
                "controller leader {leader} could not be asked ({reason}); broker liveness and in-sync replicas are unknown"
            ),
            Problem::LivenessUnknown { leader, nodes } => write!(
                f,
                "controller leader {leader} has not heard from broker{} {} since it took over: {} alive is unknown until {} heartbeat{} or {} fenced after the session timeout",
                if nodes.len() == 1 { "" } else { "s" },
                ids(nodes),
                if nodes.len() == 1 {
                    "whether it is"
                } else {
                    "whether they are"
                },
                if nodes.len() == 1 { "it" } else { "they" },
                if nodes.len() == 1 { "s" } else { "" },
                if nodes.len() == 1 { "is" } else { "are" },
            ),
            Problem::FencedBroker { node_id } => write!(
                f,
                "broker {node_id} is fenced: it stopped heartbeating (or has not caught up) and leads nothing"
            ),
            Problem::Leaderless { topic, partition } => {
                write!(f, "{topic}/{partition} has no leader: it is offline")
            }
            Problem::LeaderFenced {
                topic,
                partition,
                leader,
            } => write!(
                f,
                "{topic}/{partition} is led by fenced broker {leader}: it is offline until another leader is elected"
            ),
            Problem::UnderReplicated {
                topic,
                partition,
                in_sync,
                replicas,
            } => write!(
                f,
                "{topic}/{partition} is under-replicated: in sync {} of replicas {}",
                ids(in_sync),
                ids(replicas)
            ),
        }
    }
}

/// `[1, 2, 3]` as `1,2,3`.
fn ids(nodes: &[u32]) -> String {
    nodes
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// How a partition is doing, for `topic list` and `topic describe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionHealth {
    /// Led by a live broker with every replica in sync.
    Ok,
    /// Led by a live broker; in-sync replicas not known.
    Unknown,
    /// Fewer in-sync replicas than replicas.
    UnderReplicated,
    /// No leader, or a fenced one.
    Offline,
}

impl PartitionHealth {
    /// The word `topic list` shows.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionHealth::Ok => "ok",
            PartitionHealth::Unknown => "unknown",
            PartitionHealth::UnderReplicated => "under-replicated",
            PartitionHealth::Offline => "offline",
        }
    }
}

impl ClusterStatus {
    /// How many of the described partitions hold a replica on `node`.
    #[must_use]
    pub fn replicas_on(&self, node: u32) -> usize {
        self.topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .filter(|partition| partition.replicas.contains(&node))
            .count()
    }

    /// Whether `node` is decommissioned: marked so, and no described
    /// partition holds a replica on it. Such a broker being fenced (shut
    /// down, or dead for good) is what the operator asked for.
    #[must_use]
    pub fn decommissioned(&self, node: u32) -> bool {
        self.brokers
            .iter()
            .any(|broker| broker.node_id == node && broker.decommission.is_some())
            && self.replicas_on(node) == 0
    }

    fn fenced(&self, node: u32) -> bool {
        self.brokers
            .iter()
            .find(|broker| broker.node_id == node)
            .is_none_or(|broker| broker.fenced)
    }

    /// How `partition` is doing.
    #[must_use]
    pub fn partition_health(&self, partition: &PartitionStatus) -> PartitionHealth {
        match partition.leader {
            None => PartitionHealth::Offline,
            Some(leader) if self.fenced(leader) => PartitionHealth::Offline,
            Some(_) => match &partition.in_sync {
                Some(in_sync) if in_sync.len() < partition.replicas.len() => {
                    PartitionHealth::UnderReplicated
                }
                Some(_) => PartitionHealth::Ok,
                None if partition.replicas.iter().any(|node| self.fenced(*node)) => {
                    PartitionHealth::UnderReplicated
                }
                None => PartitionHealth::Unknown,
            },
        }
    }

    /// The worst of a topic's partitions.
    #[must_use]
    pub fn topic_health(&self, topic: &TopicStatus) -> PartitionHealth {
        let rank = |health: PartitionHealth| match health {
            PartitionHealth::Ok => 0,
            PartitionHealth::Unknown => 1,
            PartitionHealth::UnderReplicated => 2,
            PartitionHealth::Offline => 3,
        };
        topic
            .partitions
            .iter()
            .map(|partition| self.partition_health(partition))
            .max_by_key(|health| rank(*health))
            .unwrap_or(PartitionHealth::Ok)
    }

    /// Everything wrong or not known, worst first: the controller,
    /// brokers whose liveness the controller leader does not know yet,
    /// fenced brokers (but not decommissioned ones), offline partitions,
    /// under-replicated ones. Empty when healthy.
    #[must_use]
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.controller.leader.is_none() {
            problems.push(Problem::NoControllerLeader {
                voters: self.controller.voters.clone(),
            });
        }
        // Only the controller leader knows heartbeats; in its answer an
        // unfenced broker without one has not been heard since it took
        // over, and may be dead.
        let unheard: Vec<u32> = self
            .brokers
            .iter()
            .filter(|broker| !broker.fenced && broker.heartbeat_age_ms.is_none())
            .map(|broker| broker.node_id)
            .collect();
        if self.authoritative && !unheard.is_empty() {
            problems.push(Problem::LivenessUnknown {
                leader: self.answered_by,
                nodes: unheard,
            });
        }
        problems.extend(
            self.brokers
                .iter()
                .filter(|broker| broker.fenced && !self.decommissioned(broker.node_id))
                .map(|broker| Problem::FencedBroker {
                    node_id: broker.node_id,
                }),
        );
        let mut under_replicated = Vec::new();
        for topic in &self.topics {
            for partition in &topic.partitions {
                let topic_name = topic.name.clone();
                match (self.partition_health(partition), partition.leader) {
                    (PartitionHealth::Offline, None) => problems.push(Problem::Leaderless {
                        topic: topic_name,
                        partition: partition.partition,
                    }),
                    (PartitionHealth::Offline, Some(leader)) => {
                        problems.push(Problem::LeaderFenced {
                            topic: topic_name,
                            partition: partition.partition,
                            leader,
                        });
                    }
                    (PartitionHealth::UnderReplicated, _) => {
                        let in_sync = partition.in_sync.clone().unwrap_or_else(|| {
                            partition
                                .replicas
                                .iter()
                                .copied()
                                .filter(|node| !self.fenced(*node))
                                .collect()
                        });
                        under_replicated.push(Problem::UnderReplicated {
                            topic: topic_name,
                            partition: partition.partition,
                            in_sync,
                            replicas: partition.replicas.clone(),
                        });
                    }
                    (PartitionHealth::Ok | PartitionHealth::Unknown, _) => {}
                }
            }
        }
        problems.extend(under_replicated);
        problems
    }

    /// Decodes an answer of any version into the same status: the parts
    /// the versions share are read alike.
    fn from_reply(reply: Answer<'_>) -> ClusterStatus {
        let controller_state = |controller: &ArchivedControllerStatus| ControllerState {
            voters: archived_u32s(&controller.voters),
            leader: controller.leader.as_ref().map(|id| id.to_native()),
            term: controller.term.to_native(),
            commit_index: controller.commit_index.to_native(),
            metadata_version: controller.metadata_version.to_native(),
        };
        let broker_state = |broker: &ArchivedBrokerStatus, maintenance: bool| BrokerState {
            node_id: broker.node_id.to_native(),
            address: format!("{}:{}", broker.host, broker.port.to_native()),
            rack: broker.rack.as_ref().map(ToString::to_string),
            fenced: broker.fenced,
            voter: broker.voter,
            heartbeat_age_ms: broker.heartbeat_age_ms.as_ref().map(|age| age.to_native()),
            maintenance,
            decommission: None,
        };
        match reply {
            Answer::V0(response) => ClusterStatus {
                answered_by: response.node_id.to_native(),
                authoritative: response.authoritative,
                controller: controller_state(&response.controller),
                brokers: response
                    .brokers
                    .iter()
                    .map(|broker| broker_state(broker, false))
                    .collect(),
                topics: response
                    .topics
                    .iter()
                    .filter(|topic| topic.error_code.to_native() == 0)
                    .map(|topic| TopicStatus {
                        name: topic.name.to_string(),
                        partitions: topic
                            .partitions
                            .iter()
                            .map(|partition| partition_status(partition, None))
                            .collect(),
                    })
                    .collect(),
            },
            Answer::V1(response) => ClusterStatus {
                answered_by: response.node_id.to_native(),
                authoritative: response.authoritative,
                controller: controller_state(&response.controller),
                brokers: response
                    .brokers
                    .iter()
                    .map(|broker| broker_state(&broker.status, broker.maintenance))
                    .collect(),
                topics: topics_v1(&response.topics),
            },
            Answer::V2(response) => ClusterStatus {
                answered_by: response.node_id.to_native(),
                authoritative: response.authoritative,
                controller: controller_state(&response.controller),
                brokers: response
                    .brokers
                    .iter()
                    .map(|broker| BrokerState {
                        decommission: broker.decommission.as_ref().map(|plan| DecommissionState {
                            throttle_bytes_per_s: plan.throttle_bytes_per_s.to_native(),
                            max_moves: plan.max_moves.to_native(),
                        }),
                        ..broker_state(&broker.status.status, broker.status.maintenance)
                    })
                    .collect(),
                topics: topics_v1(&response.topics),
            },
        }
    }
}

/// A DescribeCluster answer of any version.
enum Answer<'a> {
    V0(&'a corelog_wire::message::describe_cluster::ArchivedDescribeClusterResponse),
    V1(&'a corelog_wire::message::describe_cluster::ArchivedDescribeClusterResponseV1),
    V2(&'a corelog_wire::message::describe_cluster::ArchivedDescribeClusterResponseV2),
}

fn archived_u32s(ids: &rkyv::vec::ArchivedVec<rkyv::rend::u32_le>) -> Vec<u32> {
    ids.iter().map(|id| id.to_native()).collect()
}

fn partition_status(
    partition: &ArchivedPartitionStatus,
    moving: Option<PartitionMove>,
) -> PartitionStatus {
    PartitionStatus {
        partition: partition.partition.to_native(),
        leader: partition.leader.as_ref().map(|id| id.to_native()),
        leader_epoch: partition.leader_epoch.to_native(),
        replicas: archived_u32s(&partition.replicas),
        in_sync: partition.in_sync.as_ref().map(archived_u32s),
        moving,
    }
}

/// The topics of a version 1 or 2 answer, moves included.
fn topics_v1(topics: &rkyv::vec::ArchivedVec<ArchivedTopicStatusV1>) -> Vec<TopicStatus> {
    let partition_move = |moving: &ArchivedReassignmentStatus| PartitionMove {
        original: archived_u32s(&moving.original),
        target: archived_u32s(&moving.target),
        learners: archived_u32s(&moving.learners),
        throttle_bytes_per_s: moving.throttle_bytes_per_s.to_native(),
        started_at_ms: moving.started_at_ms.to_native(),
        cancelled: moving.cancelled,
    };
    topics
        .iter()
        .filter(|topic| topic.error_code.to_native() == 0)
        .map(|topic| TopicStatus {
            name: topic.name.to_string(),
            partitions: topic
                .partitions
                .iter()
                .map(|partition| {
                    let moving = partition.reassignment.as_ref().map(partition_move);
                    partition_status(&partition.status, moving)
                })
                .collect(),
        })
        .collect()
}

impl Admin {
    /// The cluster's state: brokers, controller quorum, and the partitions
    /// of `topics` (`None`: every topic; an empty list: none). Asks any
    /// broker, then the controller leader it names, whose answer is the
    /// authoritative one; when the leader cannot be asked (or there is
    /// none) the answer is the first broker's (see
    /// [`Admin::describe_cluster_with_reach`] for why).
    ///
    /// # Errors
    /// Connection errors when no broker answers; `UNSUPPORTED_VERSION`
    /// from a broker too old to describe the cluster.
    pub async fn describe_cluster(
        &self,
        topics: Option<Vec<String>>,
    ) -> Result<ClusterStatus, ClientError> {
        Ok(self.describe_cluster_with_reach(topics).await?.0)
    }

    /// Like [`Admin::describe_cluster`], and why the controller leader's
    /// view could not be had, if it could not.
    ///
    /// # Errors
    /// As [`Admin::describe_cluster`].
    pub async fn describe_cluster_with_reach(
        &self,
        topics: Option<Vec<String>>,
    ) -> Result<(ClusterStatus, Option<Problem>), ClientError> {
        let connection = self.cluster.any_connection().await?;
        let first = ask(&connection, &topics).await?;
        if first.authoritative {
            return Ok((first, None));
        }
        let Some(leader) = first.controller.leader else {
            return Ok((first, None));
        };
        let unreachable = |reason: String| Problem::ControllerUnreachable { leader, reason };
        // The leader may be missing from the cached metadata of a client
        // that connected before it registered.
        if let Err(error) = self.cluster.refresh_metadata(&[]).await {
            tracing::debug!(%error, "metadata refresh before asking the controller leader");
        }
        let answer = match self.cluster.connection_to(leader).await {
            Ok(connection) => ask(&connection, &topics).await,
            Err(error) => Err(error),
        };
        match answer {
            Ok(status) if status.authoritative => Ok((status, None)),
            Ok(status) => Ok((
                first,
                Some(unreachable(format!(
                    "broker {} answered but is no longer the leader (it names {:?})",
                    status.answered_by, status.controller.leader
                ))),
            )),
            Err(error) => Ok((first, Some(unreachable(error.to_string())))),
        }
    }
}

/// Asks `connection` in the newest version the broker speaks: 2, 1 (a
/// broker without decommissions) or 0 (one without maintenance and
/// moves).
async fn ask(
    connection: &crate::connection::Connection,
    topics: &Option<Vec<String>>,
) -> Result<ClusterStatus, ClientError> {
    // One call in the version given, the answer checked and read the same
    // way in each.
    macro_rules! ask_in {
        ($request:expr, $answer:path) => {{
            let reply = connection
                .call(&$request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            let detail = response.error_message.as_ref().map(ToString::to_string);
            if let Some(error) = ClientError::from_wire(
                response.error_code.to_native(),
                || "describe the cluster".to_owned(),
                detail,
            ) {
                return Err(error);
            }
            Ok(ClusterStatus::from_reply($answer(response)))
        }};
    }
    let topics = topics.clone();
    if connection.supports(ApiKey::DescribeCluster, 2) {
        ask_in!(DescribeClusterRequestV2 { topics }, Answer::V2)
    } else if connection.supports(ApiKey::DescribeCluster, 1) {
        ask_in!(DescribeClusterRequestV1 { topics }, Answer::V1)
    } else {
        ask_in!(DescribeClusterRequest { topics }, Answer::V0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(node_id: u32, fenced: bool) -> BrokerState {
        BrokerState {
            node_id,
            address: format!("127.0.0.1:{}", 7200 + node_id),
            rack: None,
            fenced,
            voter: true,
            heartbeat_age_ms: Some(10),
            maintenance: false,
            decommission: None,
        }
    }

    fn partition(partition: u32, leader: Option<u32>, in_sync: Option<&[u32]>) -> PartitionStatus {
        PartitionStatus {
            partition,
            leader,
            leader_epoch: 3,
            replicas: vec![1, 2, 3],
            in_sync: in_sync.map(<[u32]>::to_vec),
            moving: None,
        }
    }

    fn status(
        fenced: &[u32],
        leader: Option<u32>,
        partitions: Vec<PartitionStatus>,
    ) -> ClusterStatus {
        ClusterStatus {
            answered_by: 1,
            authoritative: true,
            controller: ControllerState {
                voters: vec![1, 2, 3],
                leader,
                term: 4,
                commit_index: 40,
                metadata_version: 40,
            },
            brokers: (1..=3)
                .map(|node| broker(node, fenced.contains(&node)))
                .collect(),
            topics: vec![TopicStatus {
                name: "orders".to_owned(),
                partitions,
            }],
        }
    }

    #[test]
    fn a_healthy_cluster_has_no_problems() {
        let healthy = status(&[], Some(1), vec![partition(0, Some(1), Some(&[1, 2, 3]))]);
        assert_eq!(healthy.problems(), Vec::new());
        assert_eq!(
            healthy.topic_health(&healthy.topics[0]),
            PartitionHealth::Ok
        );
    }

    #[test]
    fn every_kind_of_trouble_is_named_worst_first() {
        let sick = status(
            &[3],
            Some(1),
            vec![
                partition(0, Some(1), Some(&[1, 2])),
                partition(1, None, None),
                partition(2, Some(3), Some(&[3])),
                // No report yet, but a replica's broker is fenced.
                partition(3, Some(2), None),
                partition(4, Some(2), Some(&[2, 1, 3])),
            ],
        );
        let problems = sick.problems();
        assert_eq!(
            problems,
            vec![
                Problem::FencedBroker { node_id: 3 },
                Problem::Leaderless {
                    topic: "orders".to_owned(),
                    partition: 1
                },
                Problem::LeaderFenced {
                    topic: "orders".to_owned(),
                    partition: 2,
                    leader: 3
                },
                Problem::UnderReplicated {
                    topic: "orders".to_owned(),
                    partition: 0,
                    in_sync: vec![1, 2],
                    replicas: vec![1, 2, 3]
                },
                Problem::UnderReplicated {
                    topic: "orders".to_owned(),
                    partition: 3,
                    in_sync: vec![1, 2],
                    replicas: vec![1, 2, 3]
                },
            ]
        );
        assert_eq!(sick.topic_health(&sick.topics[0]), PartitionHealth::Offline);
        let health: Vec<&str> = sick.topics[0]
            .partitions
            .iter()
            .map(|p| sick.partition_health(p).as_str())
            .collect();
        assert_eq!(
            health,
            [
                "under-replicated",
                "offline",
                "offline",
                "under-replicated",
                "ok"
            ]
        );
    }

    #[test]
    fn a_fenced_broker_is_no_problem_once_decommissioned_and_holding_nothing() {
        let plan = DecommissionState {
            throttle_bytes_per_s: 0,
            max_moves: 4,
        };
        let mut moving_off = status(&[3], Some(1), vec![partition(0, Some(1), Some(&[1, 2]))]);
        moving_off.brokers[2].decommission = Some(plan);
        // Still holding a replica: fenced is still trouble.
        assert_eq!(moving_off.replicas_on(3), 1);
        assert!(!moving_off.decommissioned(3));
        assert!(
            moving_off
                .problems()
                .contains(&Problem::FencedBroker { node_id: 3 })
        );
        let mut done = moving_off.clone();
        done.topics[0].partitions[0].replicas = vec![1, 2, 4];
        done.topics[0].partitions[0].in_sync = Some(vec![1, 2, 4]);
        assert!(done.decommissioned(3));
        assert_eq!(done.problems(), Vec::new());
        // Not marked: a fenced broker holding nothing is still trouble.
        done.brokers[2].decommission = None;
        assert_eq!(done.problems(), vec![Problem::FencedBroker { node_id: 3 }]);
    }

    /// Right after a controller failover the new leader has heard from
    /// no broker: a dead one is not fenced yet, and must not count as
    /// alive (issue 35, item 21).
    #[test]
    fn brokers_a_new_controller_leader_has_not_heard_are_of_unknown_liveness() {
        let mut after_failover =
            status(&[], Some(1), vec![partition(0, Some(1), Some(&[1, 2, 3]))]);
        after_failover.brokers[1].heartbeat_age_ms = None;
        after_failover.brokers[2].heartbeat_age_ms = None;
        let problems = after_failover.problems();
        assert_eq!(
            problems,
            vec![Problem::LivenessUnknown {
                leader: 1,
                nodes: vec![2, 3]
            }]
        );
        assert!(
            problems[0]
                .to_string()
                .contains("has not heard from brokers 2,3 since it took over"),
            "{}",
            problems[0]
        );
        // A broker's own view knows no heartbeats at all: not a problem
        // of its own (`describe_cluster_with_reach` asks the leader).
        after_failover.authoritative = false;
        assert_eq!(after_failover.problems(), Vec::new());
    }

    #[test]
    fn a_controller_without_a_leader_is_a_problem_and_unknown_in_sync_is_not() {
        let lost = status(&[], None, vec![partition(0, Some(1), None)]);
        assert_eq!(
            lost.problems(),
            vec![Problem::NoControllerLeader {
                voters: vec![1, 2, 3]
            }]
        );
        assert_eq!(lost.topic_health(&lost.topics[0]), PartitionHealth::Unknown);
        assert!(
            lost.problems()[0]
                .to_string()
                .contains("no quorum among voters 1,2,3")
        );
    }
}
