//! Consumer-group APIs. Each request is decoded (validated), turned into an
//! owned request and sent to the coordinator of its group, which may live
//! on another shard; the coordinator's answer is encoded here.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;

use corelog_controller::acls::{Operation, ResourceType};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::delete_groups::{
    DeleteGroupsRequest, DeleteGroupsResponse, GroupResult,
};
use corelog_wire::message::delete_offsets::{DeleteOffsetsRequest, DeleteOffsetsResponse};
use corelog_wire::message::describe_groups::{
    DescribeGroupsRequest, DescribeGroupsRequestV1, DescribeGroupsResponse,
    DescribeGroupsResponseV1, GroupDescription, GroupDescriptionV1,
};
use corelog_wire::message::find_coordinator::{FindCoordinatorRequest, FindCoordinatorResponse};
use corelog_wire::message::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use corelog_wire::message::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use corelog_wire::message::list_groups::{GroupListing, ListGroupsRequest, ListGroupsResponse};
use corelog_wire::message::offset_commit::{
    OffsetCommitPartitionResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetCommitTopicResponse,
};
use corelog_wire::message::offset_fetch::{OffsetFetchRequest, OffsetFetchResponse};
use corelog_wire::message::reset_offsets::{ResetOffsetsRequest, ResetOffsetsResponse};
use corelog_wire::message::write_audit::{WriteAuditRequest, WriteAuditResponse};

use crate::api::{Reply, owned, unencodable};
use crate::group::host::Host;
use crate::group::service::Coordinator;
use crate::group::service::{self, GROUPS_TOPIC};
use crate::metadata::MetadataSnapshot;
use crate::net::access::Access;
use crate::partition::PartitionError;
use crate::runtime::shard::Shard;

/// The code and message a response carries for `error`.
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
    // A subscription names topics: one the principal may not describe is
    // refused as a missing one would be, before the coordinator would
    // assign (and so reveal) its partitions.
    let hidden = request
        .topics
        .iter()
        .find_map(|topic| access.topic(Operation::Describe, topic).err());
    let creator = access.limited_principal().map(str::to_owned);
    let answer = match naming_refusal(access, Operation::GroupRead, &group, hidden) {
        Some(refused) => Err(refused),
        None => {
            shard
                .on_coordinator(&group, move |host, coordinator| async move {
                    service::join_group(&host, &coordinator, request, client_host, creator).await
                })
                .await
        }
    };
    let response = answer.unwrap_or_else(|error| {
        let (error_code, error_message) = unavailable_message(&error);
        JoinGroupResponse {
            error_code,
            error_message,
            member_id: String::new(),
            generation: -1,
            assignment: Vec::new(),
            heartbeat_interval_ms: 1_000,
            members: 0,
        }
    });
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
    let answer = guarded(
        shard,
        access,
        Operation::GroupRead,
        &group,
        move |host, coordinator| async move { service::heartbeat(&host, &coordinator, &request) },
    )
    .await;
    let response = answer.unwrap_or_else(|error| {
        let (error_code, error_message) = unavailable_message(&error);
        HeartbeatResponse {
            error_code,
            error_message,
        }
    });
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn leave(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: LeaveGroupRequest = owned(body)?;
    let group = request.group.clone();
    let answer = guarded(
        shard,
        access,
        Operation::GroupRead,
        &group,
        move |host, coordinator| async move {
            service::leave_group(&host, &coordinator, &request).await
        },
    )
    .await;
    let response = answer.unwrap_or_else(|error| {
        let (error_code, error_message) = unavailable_message(&error);
        LeaveGroupResponse {
            error_code,
            error_message,
        }
    });
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn commit(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let mut request: OffsetCommitRequest = owned(body)?;
    let group = request.group.clone();
    // Outside a generation a commit moves the group anywhere, as a reset
    // does: it needs group-admin (and the coordinator audits it).
    let manual = request.generation == -1 && request.member_id.is_empty();
    let operation = if manual {
        Operation::GroupAdmin
    } else {
        Operation::GroupRead
    };
    if let Err(error) = valid_group_id(&group).and_then(|()| access.group(operation, &group)) {
        let message = if manual && error.code == ErrorCode::GroupAuthorizationFailed {
            format!(
                "{}: a commit outside a generation (generation -1, no member id) moves the group like a reset and needs group-admin",
                error.message
            )
        } else {
            error.message
        };
        count_error(shard, error.code.code());
        let refused = OffsetCommitResponse {
            error_code: error.code.code(),
            error_message: Some(message),
            topics: Vec::new(),
        };
        return Reply::message(&refused, Vec::new()).map_err(unencodable);
    }
    let hidden = undescribable(
        access,
        request.topics.iter().map(|topic| topic.name.as_str()),
    );
    let refused_topics = hidden_commit_results(&request, &hidden);
    request
        .topics
        .retain(|topic| !hidden.iter().any(|(name, _)| *name == topic.name));
    let response = if request.topics.is_empty() {
        OffsetCommitResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            topics: Vec::new(),
        }
    } else {
        let principal = access.principal().map(str::to_owned);
        let creator = access.limited_principal().map(str::to_owned);
        let answer = guarded(
            shard,
            access,
            operation,
            &group,
            move |host, coordinator| async move {
                service::commit_offsets(&host, &coordinator, request, principal, creator).await
            },
        )
        .await;
        answer.unwrap_or_else(|error| {
            let (error_code, error_message) = unavailable_message(&error);
            OffsetCommitResponse {
                error_code,
                error_message,
                topics: Vec::new(),
            }
        })
    };
    let response = with_refused_topics(response, refused_topics);
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
    let answer =
        guarded(
            shard,
            access,
            Operation::Describe,
            &group,
            move |host, coordinator| async move {
                service::fetch_offsets(&host, &coordinator, &request)
            },
        )
        .await;
    let mut response = answer.unwrap_or_else(|error| {
        let (error_code, error_message) = unavailable_message(&error);
        OffsetFetchResponse {
            error_code,
            error_message,
            topics: Vec::new(),
        }
    });
    hide_fetched_offsets(&mut response, access);
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

/// DescribeGroups; version 1 also lists the offsets groups hold of
/// deleted topics, which version 0 leaves out (its clients would show them
/// as the live topic's).
pub(super) async fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
    api_version: u16,
) -> Result<Reply, ErrorCode> {
    let names = if api_version >= 1 {
        owned::<DescribeGroupsRequestV1>(body)?.groups
    } else {
        owned::<DescribeGroupsRequest>(body)?.groups
    };
    let mut groups = Vec::with_capacity(names.len());
    for group in names {
        let described = group.clone();
        let answer = guarded(
            shard,
            access,
            Operation::Describe,
            &group,
            move |host, coordinator| async move {
                service::describe_group(&host, &coordinator, &described).await
            },
        )
        .await;
        let description = match answer {
            Ok(mut description) => {
                hide_described_topics(&mut description, access);
                description
            }
            Err(error) => {
                let (error_code, error_message) = unavailable_message(&error);
                GroupDescriptionV1 {
                    description: GroupDescription {
                        group,
                        error_code,
                        error_message,
                        state: "Unknown".to_owned(),
                        generation: -1,
                        members: Vec::new(),
                        partitions: Vec::new(),
                    },
                    deleted_topic_offsets: Vec::new(),
                }
            }
        };
        groups.push(description);
    }
    if api_version >= 1 {
        return Reply::message(&DescribeGroupsResponseV1 { groups }, Vec::new())
            .map_err(unencodable);
    }
    let groups = groups
        .into_iter()
        .map(|described| described.description)
        .collect();
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
        let deleted = group.clone();
        let answer = guarded(
            shard,
            access,
            Operation::GroupAdmin,
            &group,
            move |host, coordinator| async move {
                service::delete_group(&host, &coordinator, &deleted).await
            },
        )
        .await;
        let (error_code, error_message) = match answer.and_then(|deleted| deleted) {
            Ok(()) => (ErrorCode::None.code(), None),
            Err(error) => unavailable_message(&error),
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
    let hidden = access.topic(Operation::Describe, &request.topic).err();
    let answer = match naming_refusal(access, Operation::GroupAdmin, &group, hidden) {
        Some(refused) => Err(refused),
        None => {
            shard
                .on_coordinator(&group, move |host, coordinator| async move {
                    service::reset_offsets(&host, &coordinator, request).await
                })
                .await
        }
    };
    let response = answer.unwrap_or_else(|error| {
        let (error_code, error_message) = unavailable_message(&error);
        ResetOffsetsResponse {
            error_code,
            error_message,
            audit_offset: -1,
            partitions: Vec::new(),
        }
    });
    count_error(shard, response.error_code);
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

/// DeleteOffsets: moves a group's position as a reset does, so it needs
/// `group-admin` and is audited (with the login as principal); a topic
/// the principal may not describe is refused as a missing one.
pub(super) async fn delete_offsets(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let mut request: DeleteOffsetsRequest = owned(body)?;
    record_authenticated_principal(&mut request.principal, access);
    let group = request.group.clone();
    let hidden = access.topic(Operation::Describe, &request.topic).err();
    let answer = match naming_refusal(access, Operation::GroupAdmin, &group, hidden) {
        Some(refused) => Err(refused),
        None => {
            shard
                .on_coordinator(&group, move |host, coordinator| async move {
                    service::delete_offsets(&host, &coordinator, request).await
                })
                .await
        }
    };
    let response = answer.unwrap_or_else(|error| {
        let (error_code, error_message) = unavailable_message(&error);
        DeleteOffsetsResponse {
            error_code,
            error_message,
            audit_offset: -1,
            deleted: Vec::new(),
        }
    });
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
    // Its answer (an audit offset) names no topic, so it reveals nothing
    // of the topic it concerns: no describe check.
    let answer = guarded(
        shard,
        access,
        Operation::GroupAdmin,
        &group,
        move |host, _| async move { service::write_audit_record(&host, request).await },
    )
    .await;
    let response = answer.unwrap_or_else(|error| {
        let (error_code, error_message) = unavailable_message(&error);
        WriteAuditResponse {
            error_code,
            error_message,
            audit_offset: -1,
        }
    });
    count_error(shard, response.error_code);
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

/// The audit record names the principal the connection proved, not the
/// one the client declares; without a login, the declared name stands
/// (unverified, as the README says).
fn record_authenticated_principal(principal: &mut String, access: &Access) {
    if let Some(authenticated) = access.principal() {
        authenticated.clone_into(principal);
    }
}

/// Runs `work` on the group's coordinator if the group id is valid and
/// the principal may do `operation` to the group; otherwise refuses with
/// `INVALID_GROUP_ID` or `GROUP_AUTHORIZATION_FAILED` without a trip.
async fn guarded<T, F, Fut>(
    shard: &Rc<Shard>,
    access: &Access,
    operation: Operation,
    group: &str,
    work: F,
) -> Result<T, PartitionError>
where
    F: FnOnce(Host, Rc<Coordinator>) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    valid_group_id(group).and_then(|()| access.group(operation, group))?;
    shard.on_coordinator(group, work).await
}

/// The refusal of a request about `group` that names a topic, when the
/// group id is invalid, the principal may not do `operation` to the
/// group, or `hidden` holds the refusal of the topic it names (one the
/// principal may not describe: answered as a missing topic would be,
/// without a trip to the coordinator). `None`: serve it.
fn naming_refusal(
    access: &Access,
    operation: Operation,
    group: &str,
    hidden: Option<PartitionError>,
) -> Option<PartitionError> {
    valid_group_id(group)
        .and_then(|()| access.group(operation, group))
        .and_then(|()| hidden.map_or(Ok(()), Err))
        .err()
}

/// The topics among `names` the principal may not describe, each with
/// the refusal a missing topic gets (`TOPIC_AUTHORIZATION_FAILED`): group
/// answers leave them out or refuse them, so that a group reveals
/// nothing of another tenant's topics (their existence, partitions, high
/// watermarks, sizes, ages).
fn undescribable<'a>(
    access: &Access,
    names: impl Iterator<Item = &'a str>,
) -> Vec<(String, PartitionError)> {
    if !access.restricts() {
        return Vec::new();
    }
    let mut hidden: Vec<(String, PartitionError)> = Vec::new();
    for name in names {
        if hidden.iter().any(|(seen, _)| seen == name) {
            continue;
        }
        if let Err(error) = access.topic(Operation::Describe, name) {
            hidden.push((name.to_owned(), error));
        }
    }
    hidden
}

/// The answers of a commit's refused topics, each partition refused as it
/// would be for a missing topic.
fn hidden_commit_results(
    request: &OffsetCommitRequest,
    hidden: &[(String, PartitionError)],
) -> Vec<OffsetCommitTopicResponse> {
    request
        .topics
        .iter()
        .filter_map(|topic| {
            let (_, error) = hidden.iter().find(|(hidden, _)| *hidden == topic.name)?;
            Some(OffsetCommitTopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|entry| OffsetCommitPartitionResponse {
                        partition: entry.partition,
                        error_code: error.code.code(),
                        error_message: Some(error.message.clone()),
                    })
                    .collect(),
            })
        })
        .collect()
}

/// `response` with the refused topics' answers added, unless the whole
/// commit was refused.
fn with_refused_topics(
    mut response: OffsetCommitResponse,
    refused: Vec<OffsetCommitTopicResponse>,
) -> OffsetCommitResponse {
    if response.error_code == ErrorCode::None.code() {
        response.topics.extend(refused);
    }
    response
}

/// Committed offsets of topics the principal may not describe: left out
/// of a listing of all of them, refused when named.
fn hide_fetched_offsets(response: &mut OffsetFetchResponse, access: &Access) {
    let hidden = undescribable(
        access,
        response.topics.iter().map(|topic| topic.name.as_str()),
    );
    for topic in &mut response.topics {
        if let Some((_, error)) = hidden.iter().find(|(name, _)| *name == topic.name) {
            for partition in &mut topic.partitions {
                partition.next_offset = -1;
                partition.metadata = None;
                partition.committed_at_ms = -1;
                partition.error_code = error.code.code();
            }
        }
    }
}

/// A group's description without the topics the principal may not
/// describe: not in members' assignments, not in the lag.
fn hide_described_topics(described: &mut GroupDescriptionV1, access: &Access) {
    let GroupDescriptionV1 {
        description,
        deleted_topic_offsets,
    } = described;
    let named = description
        .partitions
        .iter()
        .map(|lag| lag.topic.as_str())
        .chain(
            deleted_topic_offsets
                .iter()
                .map(|offset| offset.topic.as_str()),
        )
        .chain(
            description
                .members
                .iter()
                .flat_map(|member| member.assignment.iter().map(|entry| entry.topic.as_str())),
        );
    let hidden: Vec<String> = undescribable(access, named)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    if hidden.is_empty() {
        return;
    }
    description
        .partitions
        .retain(|lag| !hidden.contains(&lag.topic));
    deleted_topic_offsets.retain(|offset| !hidden.contains(&offset.topic));
    for member in &mut description.members {
        member
            .assignment
            .retain(|entry| !hidden.contains(&entry.topic));
    }
}

/// The one group id rule ([`corelog_wire::group::check_group_id`]), on
/// every group API: any of them can create a group.
fn valid_group_id(group: &str) -> Result<(), PartitionError> {
    corelog_wire::group::check_group_id(group)
        .map_err(|invalid| PartitionError::new(ErrorCode::InvalidGroupId, invalid.to_string()))
}

fn count_error(shard: &Rc<Shard>, code: u16) {
    if let Some(code) = ErrorCode::from_code(code) {
        shard.metrics.error(code);
    }
}
