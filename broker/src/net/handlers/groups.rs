//! Consumer-group APIs. Each request is decoded (validated), turned into an
//! owned request and sent to the coordinator of its group, which may live
//! on another shard; the coordinator's answer is encoded here.

use std::net::SocketAddr;
use std::rc::Rc;

use corelog_controller::acls::{Operation, ResourceType};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::delete_groups::{
    DeleteGroupsRequest, DeleteGroupsResponse, GroupResult,
};
use corelog_wire::message::describe_groups::{
    DescribeGroupsRequest, DescribeGroupsResponse, GroupDescription,
};
use corelog_wire::message::find_coordinator::{FindCoordinatorRequest, FindCoordinatorResponse};
use corelog_wire::message::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use corelog_wire::message::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use corelog_wire::message::list_groups::{GroupListing, ListGroupsRequest, ListGroupsResponse};
use corelog_wire::message::offset_commit::{OffsetCommitRequest, OffsetCommitResponse};
use corelog_wire::message::offset_fetch::{OffsetFetchRequest, OffsetFetchResponse};
use corelog_wire::message::reset_offsets::{ResetOffsetsRequest, ResetOffsetsResponse};
use corelog_wire::message::write_audit::{WriteAuditRequest, WriteAuditResponse};

use crate::api::{Reply, owned, unencodable};
use crate::group::requests::{GroupRequest, GroupResponse};
use crate::group::service::{self, GROUPS_TOPIC};
use crate::metadata::MetadataSnapshot;
use crate::net::access::Access;
use crate::partition::PartitionError;
use crate::runtime::shard::Shard;

fn unavailable_message(error: &PartitionError) -> (u16, Option<String>) {
    (error.code.code(), Some(error.message.clone()))
}

pub(super) fn find_coordinator(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: FindCoordinatorRequest = owned(body)?;
    if let Err(error) = valid_group_id(&request.group)
        .and_then(|()| access.group(Operation::Describe, &request.group))
    {
        shard.metrics.error(error.code);
        return Reply::encode(
            &FindCoordinatorResponse {
                error_code: error.code.code(),
                error_message: Some(error.message),
                node_id: 0,
                host: String::new(),
                port: 0,
                owner_shard: 0,
            },
            Vec::new(),
        );
    }
    let snapshot = shard.snapshot();
    let partitions = snapshot
        .topics
        .get(GROUPS_TOPIC)
        .map_or(0, |view| view.record.partitions);
    let index = service::groups_partition_for(&request.group, partitions);
    Reply::encode(&coordinator(&snapshot, index), Vec::new())
}

/// The coordinator is the leader of the group's `__groups` partition,
/// wherever it is.
fn coordinator(snapshot: &MetadataSnapshot, index: u32) -> FindCoordinatorResponse {
    let unavailable = |message: String| FindCoordinatorResponse {
        error_code: ErrorCode::CoordinatorNotAvailable.code(),
        error_message: Some(message),
        node_id: 0,
        host: String::new(),
        port: 0,
        owner_shard: 0,
    };
    let cluster = &snapshot.cluster;
    let Some((view, partition)) = snapshot.partition(GROUPS_TOPIC, index) else {
        return unavailable("the __groups topic is not created yet; retry".to_owned());
    };
    let Some(leader) = partition.replication.leader else {
        return unavailable(format!(
            "__groups partition {index} has no leader (fewer than a majority of its replicas are reachable); retry"
        ));
    };
    let node = corelog_controller::NodeId(u64::from(leader));
    let broker = cluster.state.brokers().get(&node);
    let owner_shard = cluster
        .state
        .partition(corelog_controller::TopicId(view.record.id), index)
        .and_then(|record| record.replica_on(node))
        .map_or(0, |replica| replica.shard.0);
    match broker {
        Some(broker) => FindCoordinatorResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            node_id: leader,
            host: broker.host.clone(),
            port: broker.port,
            owner_shard,
        },
        None => unavailable(format!(
            "the coordinator's broker {leader} is not registered"
        )),
    }
}

pub(super) async fn join(
    shard: &Rc<Shard>,
    body: &[u8],
    peer: Option<SocketAddr>,
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: JoinGroupRequest = owned(body)?;
    let group = request.group.clone();
    let client_host = peer.map_or_else(String::new, |peer| peer.ip().to_string());
    let join = GroupRequest::Join {
        request,
        client_host,
    };
    let response = match guarded(shard, access, Operation::GroupRead, &group, join).await {
        GroupResponse::Join(response) => response,
        other => {
            let (error_code, error_message) = failure(other);
            JoinGroupResponse {
                error_code,
                error_message,
                member_id: String::new(),
                generation: -1,
                assignment: Vec::new(),
                heartbeat_interval_ms: 1_000,
                members: 0,
            }
        }
    };
    count_error(shard, response.error_code);
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn heartbeat(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: HeartbeatRequest = owned(body)?;
    let group = request.group.clone();
    let response = match guarded(
        shard,
        access,
        Operation::GroupRead,
        &group,
        GroupRequest::Heartbeat(request),
    )
    .await
    {
        GroupResponse::Heartbeat(response) => response,
        other => {
            let (error_code, error_message) = failure(other);
            HeartbeatResponse {
                error_code,
                error_message,
            }
        }
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn leave(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: LeaveGroupRequest = owned(body)?;
    let group = request.group.clone();
    let response = match guarded(
        shard,
        access,
        Operation::GroupRead,
        &group,
        GroupRequest::Leave(request),
    )
    .await
    {
        GroupResponse::Leave(response) => response,
        other => {
            let (error_code, error_message) = failure(other);
            LeaveGroupResponse {
                error_code,
                error_message,
            }
        }
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn commit(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: OffsetCommitRequest = owned(body)?;
    let group = request.group.clone();
    let response = match guarded(
        shard,
        access,
        Operation::GroupRead,
        &group,
        GroupRequest::Commit(request),
    )
    .await
    {
        GroupResponse::Commit(response) => response,
        other => {
            let (error_code, error_message) = failure(other);
            OffsetCommitResponse {
                error_code,
                error_message,
                topics: Vec::new(),
            }
        }
    };
    count_error(shard, response.error_code);
    for partition in response.topics.iter().flat_map(|topic| &topic.partitions) {
        count_error(shard, partition.error_code);
    }
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn fetch_offsets(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: OffsetFetchRequest = owned(body)?;
    let group = request.group.clone();
    let response = match guarded(
        shard,
        access,
        Operation::Describe,
        &group,
        GroupRequest::Fetch(request),
    )
    .await
    {
        GroupResponse::Fetch(response) => response,
        other => {
            let (error_code, error_message) = failure(other);
            OffsetFetchResponse {
                error_code,
                error_message,
                topics: Vec::new(),
            }
        }
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn list(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: ListGroupsRequest = owned(body)?;
    let groups = shard
        .list_groups()
        .await
        .into_iter()
        .filter(|(group, _, _, _)| access.allows(Operation::Describe, ResourceType::Group, group))
        .filter(|(_, state, _, _)| {
            request.states.is_empty() || request.states.iter().any(|wanted| wanted == state)
        })
        .map(|(group, state, members, generation)| GroupListing {
            group,
            state: state.to_owned(),
            members,
            generation,
        })
        .collect();
    Reply::message(&ListGroupsResponse { groups }, Vec::new()).map_err(unencodable)
}

pub(super) async fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: DescribeGroupsRequest = owned(body)?;
    let mut groups = Vec::with_capacity(request.groups.len());
    for group in request.groups {
        let description = match guarded(
            shard,
            access,
            Operation::Describe,
            &group,
            GroupRequest::Describe(group.clone()),
        )
        .await
        {
            GroupResponse::Describe(description) => description,
            other => {
                let (error_code, error_message) = failure(other);
                GroupDescription {
                    group,
                    error_code,
                    error_message,
                    state: "Unknown".to_owned(),
                    generation: -1,
                    members: Vec::new(),
                    partitions: Vec::new(),
                }
            }
        };
        groups.push(description);
    }
    Reply::message(&DescribeGroupsResponse { groups }, Vec::new()).map_err(unencodable)
}

pub(super) async fn delete(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: DeleteGroupsRequest = owned(body)?;
    let mut results = Vec::with_capacity(request.groups.len());
    for group in request.groups {
        let (error_code, error_message) = match guarded(
            shard,
            access,
            Operation::GroupAdmin,
            &group,
            GroupRequest::Delete(group.clone()),
        )
        .await
        {
            GroupResponse::Delete(None) => (ErrorCode::None.code(), None),
            GroupResponse::Delete(Some(error)) => unavailable_message(&error),
            other => failure(other),
        };
        count_error(shard, error_code);
        results.push(GroupResult {
            group,
            error_code,
            error_message,
        });
    }
    Reply::message(&DeleteGroupsResponse { results }, Vec::new()).map_err(unencodable)
}

pub(super) async fn reset(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let mut request: ResetOffsetsRequest = owned(body)?;
    record_authenticated_principal(&mut request.principal, access);
    let group = request.group.clone();
    let response = match guarded(
        shard,
        access,
        Operation::GroupAdmin,
        &group,
        GroupRequest::Reset(request),
    )
    .await
    {
        GroupResponse::Reset(response) => response,
        other => {
            let (error_code, error_message) = failure(other);
            ResetOffsetsResponse {
                error_code,
                error_message,
                audit_offset: -1,
                partitions: Vec::new(),
            }
        }
    };
    count_error(shard, response.error_code);
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn write_audit(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let mut request: WriteAuditRequest = owned(body)?;
    record_authenticated_principal(&mut request.principal, access);
    let group = request.group.clone();
    let response = match guarded(
        shard,
        access,
        Operation::GroupAdmin,
        &group,
        GroupRequest::Audit(request),
    )
    .await
    {
        GroupResponse::Audit(response) => response,
        other => {
            let (error_code, error_message) = failure(other);
            WriteAuditResponse {
                error_code,
                error_message,
                audit_offset: -1,
            }
        }
    };
    count_error(shard, response.error_code);
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

/// The code and message of a response that is not the one asked for: the
/// coordinator was unavailable.
/// The audit record names the principal the connection proved, not the
/// one the client declares; without a login, the declared name stands
/// (unverified, as the README says).
fn record_authenticated_principal(principal: &mut String, access: &Access) {
    if let Some(authenticated) = access.principal() {
        authenticated.clone_into(principal);
    }
}

/// Sends `request` to the group's coordinator if the group id is valid
/// and the principal may do `operation` to the group; otherwise answers
/// `INVALID_GROUP_ID` or `GROUP_AUTHORIZATION_FAILED` without a trip.
async fn guarded(
    shard: &Rc<Shard>,
    access: &Access,
    operation: Operation,
    group: &str,
    request: GroupRequest,
) -> GroupResponse {
    match valid_group_id(group).and_then(|()| access.group(operation, group)) {
        Ok(()) => shard.group_request(group, request).await,
        Err(error) => GroupResponse::Unavailable(error),
    }
}

/// The one group id rule ([`corelog_wire::group::check_group_id`]), on
/// every group API: any of them can create a group.
fn valid_group_id(group: &str) -> Result<(), PartitionError> {
    corelog_wire::group::check_group_id(group)
        .map_err(|invalid| PartitionError::new(ErrorCode::InvalidGroupId, invalid.to_string()))
}

fn failure(response: GroupResponse) -> (u16, Option<String>) {
    match response {
        GroupResponse::Unavailable(error) => unavailable_message(&error),
        other => {
            tracing::error!(?other, "group response of the wrong kind");
            (ErrorCode::UnknownServerError.code(), None)
        }
    }
}

fn count_error(shard: &Rc<Shard>, code: u16) {
    if let Some(code) = ErrorCode::from_code(code) {
        shard.metrics.error(code);
    }
}
