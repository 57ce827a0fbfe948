//! The controller APIs (40–44, 48) as shard 0 serves them: raft messages
//! between voters, broker registration, heartbeats and partition reports,
//! metadata long-polls and operations; and `DescribeCluster`, which only
//! shard 0 can answer. They reach it from the network (other shards forward
//! them to shard 0) or in-process, when this broker calls its own
//! controller (a single node always does). A broker that is not the
//! controller leader answers `NOT_CONTROLLER` with the leader it knows.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corelog_controller::decommission::Decommission;
use corelog_controller::{Command, LeaderEpoch, NodeId, TopicId};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::broker_heartbeat::{BrokerHeartbeatRequest, BrokerHeartbeatResponse};
use corelog_wire::message::broker_register::{BrokerRegisterRequest, BrokerRegisterResponse};
use corelog_wire::message::controller_operation::{
    ControllerOp, ControllerOperationRequest, ControllerOperationResponse,
};
use corelog_wire::message::controller_raft::{ControllerRaftRequest, ControllerRaftResponse};
use corelog_wire::message::decode_request;
use corelog_wire::message::describe_cluster::{
    BrokerStatus, BrokerStatusV1, BrokerStatusV2, ControllerStatus, DecommissionStatus,
    DescribeClusterRequest, DescribeClusterRequestV1, DescribeClusterRequestV2,
    DescribeClusterResponse, DescribeClusterResponseV1, DescribeClusterResponseV2, PartitionStatus,
    PartitionStatusV1, ReassignmentStatus, TopicStatus, TopicStatusV1,
};
use corelog_wire::message::metadata_fetch::{MetadataFetchRequest, MetadataFetchResponse};
use corelog_wire::message::partition_report::{
    LedPartitionV1, PartitionReportRequest, PartitionReportRequestV1, PartitionReportResponse,
    PartitionReportResponseV1,
};

use super::{ClusterRole, ControllerRequestError, ControllerService, NewTopic};
use crate::api::{Reply, owned, refused, unencodable};

/// Longest metadata long-poll a broker may ask for.
const METADATA_WAIT_MAX: Duration = Duration::from_secs(30);

/// Serves controller API `api_key` with the cluster role of shard 0.
///
/// # Errors
/// The top-level refusal code (`INVALID_REQUEST` for a body that does not
/// decode, `UNSUPPORTED_VERSION` for an API that is not a controller one).
pub async fn serve(
    role: &ClusterRole,
    api_key: ApiKey,
    api_version: u16,
    body: &[u8],
) -> Result<Reply, ErrorCode> {
    match api_key {
        ApiKey::ControllerRaft => raft(role, body),
        ApiKey::BrokerRegister => register(role, body).await,
        ApiKey::BrokerHeartbeat => heartbeat(role, body),
        ApiKey::MetadataFetch => metadata_fetch(role, body).await,
        ApiKey::ControllerOperation => operation(role, body).await,
        ApiKey::PartitionReport => partition_report(role, api_version, body),
        ApiKey::DescribeCluster => describe_cluster(role, api_version, body),
        _ => Err(ErrorCode::UnsupportedVersion),
    }
}

/// The controller role, or the `NOT_CONTROLLER` error with this broker's hint.
fn controller(role: &ClusterRole) -> Result<&Rc<ControllerService>, ControllerRequestError> {
    role.controller
        .as_ref()
        .ok_or(ControllerRequestError::NotController {
            leader: role.member.controller_hint(),
        })
}

fn raft(role: &ClusterRole, body: &[u8]) -> Result<Reply, ErrorCode> {
    let (request, message) = decode_request::<ControllerRaftRequest>(body).map_err(refused)?;
    let error_code = match &role.controller {
        Some(controller) if request.to.to_native() == controller.id() => {
            match controller.step(message) {
                Ok(()) => ErrorCode::None,
                Err(code) => code,
            }
        }
        _ => ErrorCode::NotController,
    };
    let response = ControllerRaftResponse {
        error_code: error_code.code(),
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

fn split(result: Result<(), ControllerRequestError>) -> (u16, Option<String>, Option<u32>) {
    match result {
        Ok(()) => (ErrorCode::None.code(), None, None),
        Err(error) => (
            error.code().code(),
            Some(error.detail()),
            error.leader_hint(),
        ),
    }
}

async fn register(role: &ClusterRole, body: &[u8]) -> Result<Reply, ErrorCode> {
    let request = owned::<BrokerRegisterRequest>(body)?;
    let result = match controller(role) {
        Ok(controller) => {
            controller
                .register(Command::RegisterBroker {
                    node: NodeId(u64::from(request.node_id)),
                    host: request.host,
                    port: request.port,
                    rack: request.rack,
                    shard_count: request.shards,
                    incarnation: request.incarnation,
                })
                .await
        }
        Err(error) => Err(error),
    };
    let (error_code, error_message, leader_hint) = split(result);
    let response = BrokerRegisterResponse {
        error_code,
        error_message,
        leader_hint,
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

fn heartbeat(role: &ClusterRole, body: &[u8]) -> Result<Reply, ErrorCode> {
    let request = owned::<BrokerHeartbeatRequest>(body)?;
    let result = controller(role).and_then(|controller| {
        controller.heartbeat(
            NodeId(u64::from(request.node_id)),
            request.incarnation,
            request.metadata_version,
        )
    });
    let fenced = *result.as_ref().unwrap_or(&true);
    let (error_code, error_message, leader_hint) = split(result.map(|_| ()));
    let response = BrokerHeartbeatResponse {
        error_code,
        error_message,
        fenced,
        leader_hint,
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

/// Takes a leader's report. Version 0 does not say whether each epoch
/// committed: taken as committed, a move's step then finds out by its
/// round's queries (see `ReplicaChange::previous_committed`), as before.
fn partition_report(role: &ClusterRole, api_version: u16, body: &[u8]) -> Result<Reply, ErrorCode> {
    let request = if api_version == 0 {
        let request = owned::<PartitionReportRequest>(body)?;
        PartitionReportRequestV1 {
            node_id: request.node_id,
            incarnation: request.incarnation,
            partitions: request
                .partitions
                .into_iter()
                .map(|led| LedPartitionV1 {
                    led,
                    epoch_committed: true,
                })
                .collect(),
        }
    } else {
        owned::<PartitionReportRequestV1>(body)?
    };
    let result = controller(role).and_then(|controller| {
        controller.partition_report(
            NodeId(u64::from(request.node_id)),
            request.incarnation,
            &request.partitions,
        )
    });
    let (error_code, error_message, leader_hint) = split(result);
    if api_version == 0 {
        let response = PartitionReportResponse {
            error_code,
            error_message,
            leader_hint,
        };
        Reply::message(&response, Vec::new()).map_err(unencodable)
    } else {
        let response = PartitionReportResponseV1 {
            error_code,
            error_message,
            leader_hint,
        };
        Reply::message(&response, Vec::new()).map_err(unencodable)
    }
}

/// Answers from this broker's metadata; the controller leader adds what
/// only it knows (heartbeats, in-sync replicas) and says so with
/// `authoritative`. Version 0 leaves out maintenance and moves, version 1
/// decommissions.
fn describe_cluster(role: &ClusterRole, api_version: u16, body: &[u8]) -> Result<Reply, ErrorCode> {
    let asked = match api_version {
        0 => owned::<DescribeClusterRequest>(body)?.topics,
        1 => owned::<DescribeClusterRequestV1>(body)?.topics,
        _ => owned::<DescribeClusterRequestV2>(body)?.topics,
    };
    let member = &role.member;
    let state = member.state();
    let voters = member.voter_ids();
    let (leader, (term, commit_index)) = match &role.controller {
        Some(controller) => (controller.leader(), controller.raft_position()),
        None => (member.controller_hint(), (0, 0)),
    };
    let view = role
        .controller
        .as_ref()
        .and_then(|controller| controller.leader_view());
    let millis = |age: Duration| u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    let brokers = state
        .brokers()
        .values()
        .map(|broker| {
            let node_id = node_u32(broker.id);
            BrokerStatusV2 {
                status: BrokerStatusV1 {
                    status: BrokerStatus {
                        node_id,
                        host: broker.host.clone(),
                        port: broker.port,
                        rack: broker.rack.clone(),
                        fenced: broker.fenced,
                        voter: voters.contains(&node_id),
                        heartbeat_age_ms: view
                            .as_ref()
                            .and_then(|view| view.heartbeat_age(broker.id))
                            .map(millis),
                    },
                    maintenance: broker.maintenance,
                },
                decommission: broker.decommission.map(|plan| DecommissionStatus {
                    throttle_bytes_per_s: plan.throttle_bytes_per_s,
                    max_moves: plan.max_moves,
                }),
            }
        })
        .collect();
    let names: Vec<String> = match asked {
        Some(names) => names,
        // Every topic, the internal ones included: a group coordinator's
        // `__groups` partition offline or short of replicas is trouble
        // `cluster health` must name.
        None => state
            .topics()
            .values()
            .map(|topic| topic.name.clone())
            .collect(),
    };
    let topics = names
        .into_iter()
        .map(|name| match state.topic_by_name(&name) {
            None => TopicStatusV1 {
                name,
                error_code: ErrorCode::UnknownTopicOrPartition.code(),
                partitions: Vec::new(),
            },
            Some(topic) => TopicStatusV1 {
                partitions: (0u32..)
                    .zip(&topic.partitions)
                    .map(|(index, record)| PartitionStatusV1 {
                        status: PartitionStatus {
                            partition: index,
                            leader: record.leader.map(node_u32),
                            leader_epoch: record.leader_epoch.0,
                            replicas: nodes(&record.replicas),
                            in_sync: view.as_ref().and_then(|view| {
                                view.in_sync(&state, topic.id, index, record)
                                    .map(|nodes| nodes.into_iter().map(node_u32).collect())
                            }),
                        },
                        reassignment: record.reassignment.as_ref().map(|moving| {
                            ReassignmentStatus {
                                original: nodes(&moving.original),
                                target: nodes(&moving.target),
                                learners: nodes(&moving.learners(&record.replicas)),
                                throttle_bytes_per_s: moving.throttle_bytes_per_s,
                                started_at_ms: moving.started_at_ms,
                                cancelled: moving.cancelled,
                            }
                        }),
                    })
                    .collect(),
                name,
                error_code: ErrorCode::None.code(),
            },
        })
        .collect();
    let response = DescribeClusterResponseV2 {
        error_code: ErrorCode::None.code(),
        error_message: None,
        node_id: member.node_id(),
        authoritative: view.is_some(),
        controller: ControllerStatus {
            voters,
            leader,
            term,
            commit_index,
            metadata_version: state.version(),
        },
        brokers,
        topics,
    };
    match api_version {
        0 => Reply::message(&version_0(version_1(response)), Vec::new()),
        1 => Reply::message(&version_1(response), Vec::new()),
        _ => Reply::message(&response, Vec::new()),
    }
    .map_err(unencodable)
}

/// A version 2 answer as version 1 spells it: without decommissions.
fn version_1(response: DescribeClusterResponseV2) -> DescribeClusterResponseV1 {
    DescribeClusterResponseV1 {
        error_code: response.error_code,
        error_message: response.error_message,
        node_id: response.node_id,
        authoritative: response.authoritative,
        controller: response.controller,
        brokers: response
            .brokers
            .into_iter()
            .map(|broker| broker.status)
            .collect(),
        topics: response.topics,
    }
}

/// A version 1 answer as version 0 spells it: without maintenance and
/// moves.
fn version_0(response: DescribeClusterResponseV1) -> DescribeClusterResponse {
    DescribeClusterResponse {
        error_code: response.error_code,
        error_message: response.error_message,
        node_id: response.node_id,
        authoritative: response.authoritative,
        controller: response.controller,
        brokers: response
            .brokers
            .into_iter()
            .map(|broker| broker.status)
            .collect(),
        topics: response
            .topics
            .into_iter()
            .map(|topic| TopicStatus {
                name: topic.name,
                error_code: topic.error_code,
                partitions: topic
                    .partitions
                    .into_iter()
                    .map(|partition| partition.status)
                    .collect(),
            })
            .collect(),
    }
}

/// Node ids of `replicas` as the wire spells them.
fn nodes(replicas: &[corelog_controller::Replica]) -> Vec<u32> {
    replicas
        .iter()
        .map(|replica| node_u32(replica.node))
        .collect()
}

/// A controller node id as the wire spells it (ids come from `u32` flags).
fn node_u32(node: NodeId) -> u32 {
    u32::try_from(node.0).unwrap_or(u32::MAX)
}

async fn metadata_fetch(role: &ClusterRole, body: &[u8]) -> Result<Reply, ErrorCode> {
    let request = owned::<MetadataFetchRequest>(body)?;
    let controller = match controller(role) {
        Ok(controller) => controller.clone(),
        Err(error) => {
            let response = MetadataFetchResponse {
                error_code: error.code().code(),
                error_message: Some(error.detail()),
                leader_hint: error.leader_hint(),
                version: 0,
                state_len: 0,
            };
            return Reply::message(&response, Vec::new()).map_err(unencodable);
        }
    };
    let wait = Duration::from_millis(u64::from(request.max_wait_ms)).min(METADATA_WAIT_MAX);
    let version = controller
        .wait_for_version(request.known_version, wait)
        .await;
    let (version, state) = if version > request.known_version {
        controller.encoded_state()
    } else {
        (version, Vec::new())
    };
    let response = MetadataFetchResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        leader_hint: controller.leader(),
        version,
        state_len: u32::try_from(state.len()).map_err(|_| ErrorCode::UnknownServerError)?,
    };
    Reply::message(&response, vec![Bytes::from(state)]).map_err(unencodable)
}

/// A client's topic as the controller is asked for it: internal ones are
/// created by the controller itself, and `__` names are refused as
/// reserved.
fn client_topic(
    name: String,
    partitions: u32,
    replication_factor: u16,
    configs: Vec<corelog_wire::message::ConfigEntry>,
    owner: Option<String>,
) -> NewTopic {
    NewTopic {
        name,
        internal: false,
        partitions,
        replication_factor,
        config: configs
            .into_iter()
            .map(|entry| (entry.key, entry.value))
            .collect(),
        owner,
    }
}

/// Creates (or with `validate_only`, plans) `topic`; its id, or -1.
async fn create_topic(
    controller: &ControllerService,
    topic: &NewTopic,
    validate_only: bool,
) -> Result<i64, ControllerRequestError> {
    if validate_only {
        controller.plan_topic(topic).map(|_| -1)
    } else {
        controller
            .create_topic(topic)
            .await
            .map(|id| i64::try_from(id).unwrap_or(i64::MAX))
    }
}

async fn operation(role: &ClusterRole, body: &[u8]) -> Result<Reply, ErrorCode> {
    let request = owned::<ControllerOperationRequest>(body)?;
    let result = match controller(role) {
        Ok(controller) => match request.op {
            ControllerOp::CreateTopic {
                name,
                partitions,
                replication_factor,
                configs,
                validate_only,
            } => {
                let topic = client_topic(name, partitions, replication_factor, configs, None);
                create_topic(controller, &topic, validate_only).await
            }
            ControllerOp::CreateOwnedTopic {
                name,
                partitions,
                replication_factor,
                configs,
                validate_only,
                owner,
            } => {
                let topic =
                    client_topic(name, partitions, replication_factor, configs, Some(owner));
                create_topic(controller, &topic, validate_only).await
            }
            ControllerOp::DeleteTopic { name } => controller.delete_topic(&name).await.map(|()| 0),
            ControllerOp::AllocateProducerIds { count } => {
                controller.allocate_producer_ids(count).await
            }
            ControllerOp::ResignLeadership {
                topic_id,
                partition,
                node_id,
                epoch,
            } => controller
                .resign_leader(Command::ResignLeader {
                    topic_id: TopicId(topic_id),
                    partition,
                    leader: NodeId(u64::from(node_id)),
                    epoch: LeaderEpoch(epoch),
                })
                .await
                .map(i64::from),
            ControllerOp::PutUser { name, credentials } => {
                match super::credentials::stored(credentials) {
                    Ok(credentials) => controller.put_user(name, credentials).await.map(i64::from),
                    Err((code, reason)) => Err(ControllerRequestError::refused(code, reason)),
                }
            }
            ControllerOp::DeleteUser { name } => controller.delete_user(name).await.map(|()| 0),
            ControllerOp::PutAcl { acl } => match super::access_rules::binding(&acl) {
                Ok(binding) => controller
                    .alter_access(Command::PutAcl { binding })
                    .await
                    .map(i64::from),
                Err((code, reason)) => Err(ControllerRequestError::refused(code, reason)),
            },
            ControllerOp::PutQuota { quota } => match super::quota_entries::quota(&quota) {
                Ok((entity, limits)) => controller
                    .alter_access(Command::PutQuota { entity, limits })
                    .await
                    .map(i64::from),
                Err((code, reason)) => Err(ControllerRequestError::refused(code, reason)),
            },
            ControllerOp::PutQuotaV1 { quota } => match super::quota_entries::quota_v1(&quota) {
                Ok((entity, limits)) => controller
                    .alter_access(Command::PutQuota { entity, limits })
                    .await
                    .map(i64::from),
                Err((code, reason)) => Err(ControllerRequestError::refused(code, reason)),
            },
            ControllerOp::DeleteQuota { entity } => match super::quota_entries::entity(&entity) {
                Ok(entity) => controller
                    .alter_access(Command::DeleteQuota { entity })
                    .await
                    .map(|_| 0),
                Err((code, reason)) => Err(ControllerRequestError::refused(code, reason)),
            },
            ControllerOp::LeaveCluster {
                node_id,
                incarnation,
            } => controller
                .leave(NodeId(u64::from(node_id)), incarnation)
                .map(|()| 0),
            ControllerOp::ElectLeader {
                topic_id,
                partition,
                to,
            } => controller
                .elect_leader(
                    TopicId(topic_id),
                    partition,
                    to.map(|to| NodeId(u64::from(to))),
                )
                .await
                .map(|to| i64::try_from(to.0).unwrap_or(i64::MAX)),
            ControllerOp::SetBrokerMaintenance { node_id, enabled } => controller
                .set_maintenance(NodeId(u64::from(node_id)), enabled)
                .await
                .map(i64::from),
            ControllerOp::StartReassignment {
                topic_id,
                partition,
                replicas,
                throttle_bytes_per_s,
            } => {
                let nodes: Vec<NodeId> = replicas
                    .iter()
                    .map(|node| NodeId(u64::from(*node)))
                    .collect();
                controller
                    .start_reassignment(TopicId(topic_id), partition, &nodes, throttle_bytes_per_s)
                    .await
                    .map(|()| 0)
            }
            ControllerOp::CancelReassignment {
                topic_id,
                partition,
            } => controller
                .cancel_reassignment(TopicId(topic_id), partition)
                .await
                .map(|()| 0),
            ControllerOp::SetBrokerDecommission {
                node_id,
                enabled,
                throttle_bytes_per_s,
                max_moves,
            } => controller
                .set_decommission(
                    NodeId(u64::from(node_id)),
                    enabled.then_some(Decommission {
                        throttle_bytes_per_s,
                        max_moves,
                    }),
                )
                .await
                .map(i64::from),
            ControllerOp::DeleteAcl { acl } => match super::access_rules::binding(&acl) {
                Ok(binding) => controller
                    .alter_access(Command::DeleteAcl { binding })
                    .await
                    .map(|_| 0),
                Err((code, reason)) => Err(ControllerRequestError::refused(code, reason)),
            },
        },
        Err(error) => Err(error),
    };
    let value = *result.as_ref().unwrap_or(&0);
    let (error_code, error_message, leader_hint) = split(result.map(|_| ()));
    let response = ControllerOperationResponse {
        error_code,
        error_message,
        leader_hint,
        value,
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}
