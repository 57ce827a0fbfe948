//! Group requests on the coordinator's shard: the glue between the wire
//! messages, the coordinator, and the rest of the broker, reached through
//! [`GroupHost`] (high watermarks, the `__audit` topic, lag lookups).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::audit::{AuditKind, AuditRecord};
use corelog_wire::message::delete_offsets::{DeleteOffsetsRequest, DeleteOffsetsResponse};
use corelog_wire::message::describe_groups::{
    DeletedTopicOffset, GroupDescription, GroupDescriptionV1, MemberDescription,
};
use corelog_wire::message::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use corelog_wire::message::join_group::{JoinGroupRequest, JoinGroupResponse};
use corelog_wire::message::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use corelog_wire::message::offset_commit::{OffsetCommitRequest, OffsetCommitResponse};
use corelog_wire::message::offset_fetch::{OffsetFetchRequest, OffsetFetchResponse};
use corelog_wire::message::reset_offsets::{
    ResetOffsetsRequest, ResetOffsetsResponse, ResetPartition, ResetTarget,
};
use corelog_wire::message::write_audit::{AuditAction, WriteAuditRequest, WriteAuditResponse};
use corelog_wire::types::{Offset, TimestampMs};

use super::budget::GroupBudget;
use super::coordinator::{
    AuditedMove, GroupCoordinator, ManualCommitAudit, TopicView, audit_batch,
};
use super::host::{GroupHost, Host};
use super::lag::partition_lag;
use super::offset_deletion;
use super::offsets::TopicIdentity;
use super::records;
use super::state::JoinRequest;
use crate::metadata::MetadataSnapshot;
use crate::partition::{OffsetQuery, PartitionError};

pub use corelog_wire::message::audit::AUDIT_TOPIC;
pub use corelog_wire::message::group_records::GROUPS_TOPIC;

/// The coordinator of one shard.
pub type Coordinator = GroupCoordinator;

impl TopicView for MetadataSnapshot {
    fn partition_count(&self, topic: &str) -> Option<u32> {
        self.topics.get(topic).map(|view| view.record.partitions)
    }

    fn topic_identity(&self, topic: &str) -> Option<TopicIdentity> {
        self.topics.get(topic).map(|view| TopicIdentity {
            id: view.record.id,
            created_at_ms: view.record.created_at_ms,
        })
    }
}

/// The `__groups` partition that coordinates `group`: `xxh3_64(group) % N`.
#[must_use]
pub fn groups_partition_for(group: &str, partitions: u32) -> u32 {
    (xxhash_rust::xxh3::xxh3_64(group.as_bytes()) % u64::from(partitions.max(1))) as u32
}

// The operations below run on the coordinator's shard, reached with
// `Shard::on_coordinator`: each takes its request and returns its own
// response type, so no caller can receive another operation's answer.

/// JoinGroup; a new group counts against `creator`'s group limit.
pub async fn join_group(
    host: &Host,
    coordinator: &Rc<Coordinator>,
    request: JoinGroupRequest,
    client_host: String,
    creator: Option<String>,
) -> JoinGroupResponse {
    let budget = creator.map(|creator| GroupBudget::of(&host.snapshot(), &creator));
    join(host, coordinator, request, client_host, budget).await
}

/// Heartbeat.
#[must_use]
pub fn heartbeat(
    host: &Host,
    coordinator: &Coordinator,
    request: &HeartbeatRequest,
) -> HeartbeatResponse {
    let result = coordinator.heartbeat(
        &request.group,
        &request.member_id,
        request.generation,
        host.now(),
    );
    HeartbeatResponse {
        error_code: result.err().unwrap_or(ErrorCode::None).code(),
        error_message: None,
    }
}

/// LeaveGroup.
pub async fn leave_group(
    host: &Host,
    coordinator: &Coordinator,
    request: &LeaveGroupRequest,
) -> LeaveGroupResponse {
    let result = coordinator
        .leave(&request.group, &request.member_id, host.now())
        .await;
    LeaveGroupResponse {
        error_code: result.err().unwrap_or(ErrorCode::None).code(),
        error_message: None,
    }
}

/// OffsetCommit, by `principal` (the login, for the audit record of a
/// commit outside a generation); a new group counts against `creator`'s
/// group limit.
pub async fn commit_offsets(
    host: &Host,
    coordinator: &Coordinator,
    request: OffsetCommitRequest,
    principal: Option<String>,
    creator: Option<String>,
) -> OffsetCommitResponse {
    let budget = creator.map(|creator| GroupBudget::of(&host.snapshot(), &creator));
    let manual = request.generation == -1 && request.member_id.is_empty();
    let audit = manual.then(|| manual_commit_audit(host, &request.group, principal));
    let lookup = host.clone();
    let high_watermark = move |topic: &str, partition: u32| {
        let host = lookup.clone();
        let topic = topic.to_owned();
        let future: futures::future::LocalBoxFuture<'static, Result<Offset, PartitionError>> =
            Box::pin(async move {
                let found = host.offset(&topic, partition, OffsetQuery::Latest).await?;
                Ok(found.map_or(Offset(0), |(offset, _)| offset))
            });
        future
    };
    let snapshot = host.snapshot();
    coordinator
        .commit(
            request,
            &*snapshot,
            &high_watermark,
            audit.as_deref(),
            budget.as_ref(),
            host.now(),
        )
        .await
}

/// OffsetFetch.
#[must_use]
pub fn fetch_offsets(
    host: &Host,
    coordinator: &Coordinator,
    request: &OffsetFetchRequest,
) -> OffsetFetchResponse {
    coordinator.fetch_offsets(request, &*host.snapshot())
}

/// DeleteGroups, one group; its series go with it.
///
/// # Errors
/// Why the group cannot be deleted.
pub async fn delete_group(
    host: &Host,
    coordinator: &Coordinator,
    group: &str,
) -> Result<(), PartitionError> {
    coordinator.delete(group, host.now()).await?;
    let partitions: Vec<(String, u32)> = coordinator.take_published_of(group).into_iter().collect();
    host.forget_group(group, &partitions, true);
    Ok(())
}

/// DeleteOffsets.
pub async fn delete_offsets(
    host: &Host,
    coordinator: &Rc<Coordinator>,
    request: DeleteOffsetsRequest,
) -> DeleteOffsetsResponse {
    offset_deletion::serve(host, coordinator, request).await
}

async fn join(
    host: &Host,
    coordinator: &Rc<Coordinator>,
    request: JoinGroupRequest,
    client_host: String,
    budget: Option<GroupBudget>,
) -> JoinGroupResponse {
    // A tenth of the session: members learn of a rebalance within it.
    let heartbeat_interval_ms = (request.session_timeout_ms / 10).max(100);
    let refused = |code: ErrorCode, message: Option<String>| JoinGroupResponse {
        error_code: code.code(),
        error_message: message,
        member_id: String::new(),
        generation: -1,
        assignment: Vec::new(),
        heartbeat_interval_ms,
        members: 0,
    };
    // The group id was checked by the handler (`net::handlers::groups`),
    // by the one rule of every group API.
    // Bounded above too: the largest rebalance timeout among a group's
    // members is how long every later join waits for it (C9).
    let timeout_max_ms = host.group_timeout_max_ms();
    let timeouts = 1_000..=timeout_max_ms;
    if !timeouts.contains(&request.session_timeout_ms)
        || !timeouts.contains(&request.rebalance_timeout_ms)
    {
        return refused(
            ErrorCode::InvalidRequest,
            Some(format!(
                "session and rebalance timeouts must be between 1000 and {timeout_max_ms} ms"
            )),
        );
    }
    let topics: BTreeSet<String> = request.topics.iter().cloned().collect();
    let snapshot = host.snapshot();
    if let Some(unknown) = topics
        .iter()
        .find(|topic| !snapshot.topics.contains_key(*topic))
    {
        return refused(
            ErrorCode::UnknownTopicOrPartition,
            Some(format!("topic {unknown:?} does not exist; create it first")),
        );
    }
    let join_request = JoinRequest {
        member_id: request.member_id.clone(),
        instance_id: request.instance_id.clone(),
        client_id: request.client_id.clone(),
        client_host,
        topics,
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: request.rebalance_timeout_ms,
    };
    match coordinator
        .join(
            &request.group,
            join_request,
            budget.as_ref(),
            &*snapshot,
            host.now(),
        )
        .await
    {
        Ok(joined) => JoinGroupResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            member_id: joined.member_id,
            generation: joined.generation,
            assignment: joined.assignment,
            heartbeat_interval_ms,
            members: joined.members,
        },
        Err(error) => refused(error.code, Some(error.message).filter(|m| !m.is_empty())),
    }
}

/// A group's description, with the offsets it holds of deleted topics
/// (which DescribeGroups version 0 leaves out).
/// DescribeGroups, one group, with the offsets of deleted topics (which
/// version 0 leaves out).
pub async fn describe_group(
    host: &Host,
    coordinator: &Rc<Coordinator>,
    name: &str,
) -> GroupDescriptionV1 {
    coordinator.set_apart_deleted_topic_offsets(Some(name), &*host.snapshot());
    let Some(group) = coordinator.group(name) else {
        return GroupDescriptionV1 {
            description: GroupDescription {
                group: name.to_owned(),
                error_code: ErrorCode::UnknownGroup.code(),
                error_message: Some(format!("group {name:?} does not exist")),
                state: "Dead".to_owned(),
                generation: -1,
                members: Vec::new(),
                partitions: Vec::new(),
            },
            deleted_topic_offsets: Vec::new(),
        };
    };
    let now = host.now();
    let mut partitions: BTreeSet<(String, u32)> = group.offsets.keys().cloned().collect();
    partitions.extend(group.assignment.values().flatten().cloned());
    let mut lags = Vec::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        let committed = group
            .offsets
            .get(&(topic.clone(), partition))
            .map(|committed| (committed.next_offset, committed.metadata.clone()));
        lags.push(
            partition_lag(&**host, &topic, partition, committed, now)
                .await
                .0,
        );
    }
    let deleted_topic_offsets = group
        .deleted_topic_offsets
        .iter()
        .map(
            |((topic, partition, topic_id), committed)| DeletedTopicOffset {
                topic: topic.clone(),
                topic_id: topic_id.map_or(-1, |id| i64::try_from(id).unwrap_or(i64::MAX)),
                partition: *partition,
                committed_offset: committed.next_offset,
                metadata: committed.metadata.clone(),
                committed_at_ms: committed.committed_at.0,
            },
        )
        .collect();
    let description = GroupDescription {
        group: group.name.clone(),
        error_code: ErrorCode::None.code(),
        error_message: None,
        state: group.state.name().to_owned(),
        generation: group.generation,
        members: group
            .members
            .values()
            .map(|member| MemberDescription {
                member_id: member.id.clone(),
                instance_id: member.instance_id.clone(),
                client_id: member.client_id.clone(),
                client_host: member.client_host.clone(),
                assignment: records::to_wire(group.assignment.get(&member.id)),
            })
            .collect(),
        partitions: lags,
    };
    GroupDescriptionV1 {
        description,
        deleted_topic_offsets,
    }
}

/// Appends an audit record to `__audit` and returns its offset.
pub(super) async fn append_audit(
    host: &Host,
    record: &AuditRecord,
) -> Result<Offset, PartitionError> {
    host.append_audit(audit_batch(&record.group, record.encode(), host.now()))
        .await
}

/// ResetOffsets.
pub async fn reset_offsets(
    host: &Host,
    coordinator: &Rc<Coordinator>,
    request: ResetOffsetsRequest,
) -> ResetOffsetsResponse {
    let refused = |error: PartitionError| ResetOffsetsResponse {
        error_code: error.code.code(),
        error_message: Some(error.message),
        audit_offset: -1,
        partitions: Vec::new(),
    };
    if request.reason.trim().is_empty() {
        return refused(PartitionError::new(
            ErrorCode::AuditReasonRequired,
            "an offset reset is audited and needs a reason; pass --reason",
        ));
    }
    if let Err(error) = coordinator.check_empty(&request.group) {
        return refused(error);
    }
    let snapshot = host.snapshot();
    let Some(view) = snapshot.topics.get(&request.topic) else {
        return refused(PartitionError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("topic {:?} does not exist", request.topic),
        ));
    };
    coordinator.set_apart_deleted_topic_offsets(Some(request.group.as_str()), &*snapshot);
    let topic_id = view.record.id;
    let partitions = match reset_partitions(&request, view.record.partitions) {
        Ok(partitions) => partitions,
        Err(error) => return refused(error),
    };
    let current = coordinator.group(&request.group);
    let mut outcome = Vec::with_capacity(partitions.len());
    let mut changes = Vec::new();
    for partition in partitions {
        let before = current
            .as_ref()
            .and_then(|group| group.offsets.get(&(request.topic.clone(), partition)))
            .map_or(-1, |committed| committed.next_offset as i64);
        match reset_target(&**host, &request.topic, partition, &request.to).await {
            Ok(after) => {
                changes.push((request.topic.clone(), partition, after.0));
                outcome.push(ResetPartition {
                    partition,
                    before,
                    after: after.0 as i64,
                    error_code: ErrorCode::None.code(),
                });
            }
            Err(error) => outcome.push(ResetPartition {
                partition,
                before,
                after: before,
                error_code: error.code.code(),
            }),
        }
    }
    if request.dry_run || changes.is_empty() {
        return ResetOffsetsResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            audit_offset: -1,
            partitions: outcome,
        };
    }
    let whole_topic = request.partitions.is_none();
    let record = AuditRecord {
        kind: AuditKind::OffsetReset,
        group: request.group.clone(),
        topic: request.topic.clone(),
        partition: if whole_topic {
            None
        } else {
            outcome.first().map(|entry| entry.partition)
        },
        principal: request.principal.clone(),
        reason: request.reason.clone(),
        at_ms: host.now().0,
        before: outcome
            .iter()
            .map(|entry| (entry.partition, entry.before))
            .collect(),
        after: outcome
            .iter()
            .map(|entry| (entry.partition, entry.after))
            .collect(),
        offset: None,
        dead_letter_topic: None,
        dead_letter_offset: None,
        error: None,
    };
    // The audit record first: a change nobody can account for never happens.
    let audit_offset = match append_audit(host, &record).await {
        Ok(offset) => offset,
        Err(error) => return refused(error),
    };
    if let Err(error) = coordinator
        .set_offsets(&request.group, topic_id, &changes, host.now())
        .await
    {
        return refused(error);
    }
    ResetOffsetsResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        audit_offset: audit_offset.0 as i64,
        partitions: outcome,
    }
}

/// Why a commit outside a generation is in the audit log: it moves the
/// group as a reset does, without a reason of its own.
const MANUAL_COMMIT_REASON: &str =
    "offset commit outside a group generation (OffsetCommit with generation -1)";

/// The audit of a commit outside a generation by `principal` (the login;
/// `anonymous` without one): one `OffsetReset` record per topic it moves.
fn manual_commit_audit(
    host: &Host,
    group: &str,
    principal: Option<String>,
) -> Box<ManualCommitAudit> {
    let host = host.clone();
    let group = group.to_owned();
    let principal = principal.unwrap_or_else(|| "anonymous".to_owned());
    Box::new(move |moves: Vec<AuditedMove>| {
        let host = host.clone();
        let group = group.clone();
        let principal = principal.clone();
        Box::pin(async move {
            let mut by_topic: BTreeMap<String, Vec<AuditedMove>> = BTreeMap::new();
            for moved in moves {
                by_topic.entry(moved.topic.clone()).or_default().push(moved);
            }
            for (topic, moves) in by_topic {
                let record = AuditRecord {
                    kind: AuditKind::OffsetReset,
                    group: group.clone(),
                    partition: match moves.as_slice() {
                        [only] => Some(only.partition),
                        _ => None,
                    },
                    topic,
                    principal: principal.clone(),
                    reason: MANUAL_COMMIT_REASON.to_owned(),
                    at_ms: host.now().0,
                    before: moves.iter().map(|m| (m.partition, m.before)).collect(),
                    after: moves
                        .iter()
                        .map(|m| (m.partition, i64::try_from(m.after).unwrap_or(i64::MAX)))
                        .collect(),
                    offset: None,
                    dead_letter_topic: None,
                    dead_letter_offset: None,
                    error: None,
                };
                append_audit(&host, &record).await?;
            }
            Ok(())
        })
    })
}

/// The partitions a reset moves: those its target lists, else those it
/// selects, else every partition of the topic.
fn reset_partitions(
    request: &ResetOffsetsRequest,
    partition_count: u32,
) -> Result<Vec<u32>, PartitionError> {
    match (&request.to, &request.partitions) {
        (ResetTarget::Offsets(_), Some(_)) => Err(PartitionError::new(
            ErrorCode::InvalidRequest,
            "a reset to per-partition offsets names its partitions in the offsets, not in partitions",
        )),
        (ResetTarget::Offsets(offsets), None) => {
            let listed: BTreeSet<u32> = offsets.iter().map(|target| target.partition).collect();
            if listed.len() == offsets.len() {
                Ok(listed.into_iter().collect())
            } else {
                Err(PartitionError::new(
                    ErrorCode::InvalidRequest,
                    "a reset lists a partition more than once",
                ))
            }
        }
        (_, Some(partitions)) => Ok(partitions.clone()),
        (_, None) => Ok((0..partition_count).collect()),
    }
}

async fn reset_target(
    host: &dyn GroupHost,
    topic: &str,
    partition: u32,
    to: &ResetTarget,
) -> Result<Offset, PartitionError> {
    let bound = |query| async move {
        let found = host.offset(topic, partition, query).await?;
        Ok::<Offset, PartitionError>(found.map_or(Offset(0), |(offset, _)| offset))
    };
    let log_start = bound(OffsetQuery::Earliest).await?;
    let high_watermark = bound(OffsetQuery::Latest).await?;
    let within_log = |offset: u64| {
        if (log_start.0..=high_watermark.0).contains(&offset) {
            Ok(Offset(offset))
        } else {
            Err(PartitionError::new(
                ErrorCode::OffsetOutOfRange,
                format!(
                    "offset {offset} is outside {topic}/{partition}'s log ({log_start}..{high_watermark})"
                ),
            ))
        }
    };
    match to {
        ResetTarget::Earliest => Ok(log_start),
        ResetTarget::Latest => Ok(high_watermark),
        ResetTarget::Offset(offset) => within_log(*offset),
        ResetTarget::Offsets(offsets) => {
            let listed = offsets
                .iter()
                .find(|target| target.partition == partition)
                .ok_or_else(|| {
                    PartitionError::new(
                        ErrorCode::InvalidRequest,
                        format!("no offset is given for {topic}/{partition}"),
                    )
                })?;
            within_log(listed.offset)
        }
        ResetTarget::Timestamp(time) => {
            let found = host
                .offset(topic, partition, OffsetQuery::Timestamp(TimestampMs(*time)))
                .await?;
            Ok(found.map_or(high_watermark, |(offset, _)| offset))
        }
    }
}

/// WriteAudit.
pub async fn write_audit_record(host: &Host, request: WriteAuditRequest) -> WriteAuditResponse {
    if request.reason.trim().is_empty() {
        return WriteAuditResponse {
            error_code: ErrorCode::AuditReasonRequired.code(),
            error_message: Some("a skipped record is audited and needs a reason".to_owned()),
            audit_offset: -1,
        };
    }
    let record = AuditRecord {
        kind: match request.action {
            AuditAction::Skip => AuditKind::Skip,
            AuditAction::Quarantine => AuditKind::Quarantine,
            AuditAction::Stop => AuditKind::Stop,
        },
        group: request.group,
        topic: request.topic,
        partition: Some(request.partition),
        principal: request.principal,
        reason: request.reason,
        at_ms: host.now().0,
        before: Vec::new(),
        after: Vec::new(),
        offset: Some(request.offset),
        dead_letter_topic: request.dead_letter_topic,
        dead_letter_offset: u64::try_from(request.dead_letter_offset).ok(),
        error: None,
    };
    match append_audit(host, &record).await {
        Ok(offset) => WriteAuditResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            audit_offset: offset.0 as i64,
        },
        Err(error) => WriteAuditResponse {
            error_code: error.code.code(),
            error_message: Some(error.message),
            audit_offset: -1,
        },
    }
}

/// Periodic work of a coordinator: expire silent members, complete due
/// rebalances, and (every few ticks) refresh the lag metrics.
pub async fn tick(host: &Host, coordinator: &Rc<Coordinator>) {
    let now = host.now();
    coordinator.expire(now).await;
    if let Err(error) = coordinator.compact_if_due(now).await {
        tracing::error!(partition = coordinator.partition_index, %error, "cannot compact __groups");
    }
    let snapshot = host.snapshot();
    for group in coordinator.rebalances_due(now) {
        coordinator.try_complete(&group, &*snapshot, now).await;
    }
    // Generations every 4 ticks (1 s), so that rebalances are counted
    // within a second.
    if coordinator.ticks() % 4 == 1 {
        for (group, _, _, generation) in coordinator.list() {
            coordinator.note_published(&group, None);
            host.observe_generation(&group, generation);
        }
    }
    // Lag metrics every 20 ticks (5 s): each needs lookups on other shards.
    if coordinator.ticks() % 20 == 1 {
        // A deleted topic's offsets have no lag (and no series).
        coordinator.set_apart_deleted_topic_offsets(None, &*snapshot);
        for (group, offsets) in coordinator.committed() {
            let mut lagging = BTreeSet::new();
            for ((topic, partition), committed) in offsets {
                let (lag, known) = partition_lag(
                    &**host,
                    &topic,
                    partition,
                    Some((committed.next_offset, None)),
                    now,
                )
                .await;
                host.observe_lag(&group, &lag, known);
                lagging.insert((topic, partition));
            }
            // A partition whose offset went since the last round (deleted
            // offsets) leaves no series behind.
            let gone = coordinator.note_published(&group, Some(lagging));
            if !gone.is_empty() {
                host.forget_group(&group, &gone, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use corelog_wire::message::reset_offsets::PartitionOffset;

    use super::*;

    fn request(to: ResetTarget, partitions: Option<Vec<u32>>) -> ResetOffsetsRequest {
        ResetOffsetsRequest {
            group: "g".to_owned(),
            topic: "t".to_owned(),
            partitions,
            to,
            reason: "test".to_owned(),
            principal: "ops".to_owned(),
            dry_run: true,
        }
    }

    fn offsets(pairs: &[(u32, u64)]) -> ResetTarget {
        ResetTarget::Offsets(
            pairs
                .iter()
                .map(|&(partition, offset)| PartitionOffset { partition, offset })
                .collect(),
        )
    }

    #[test]
    fn a_reset_moves_the_listed_the_selected_or_every_partition() {
        let every = reset_partitions(&request(ResetTarget::Earliest, None), 3).unwrap();
        assert_eq!(every, [0, 1, 2]);
        let selected = reset_partitions(&request(ResetTarget::Latest, Some(vec![2])), 3).unwrap();
        assert_eq!(selected, [2]);
        let listed = reset_partitions(&request(offsets(&[(2, 5), (0, 1)]), None), 3).unwrap();
        assert_eq!(listed, [0, 2]);
    }

    #[test]
    fn per_partition_offsets_name_each_partition_once_and_alone() {
        let twice = reset_partitions(&request(offsets(&[(1, 5), (1, 6)]), None), 3).unwrap_err();
        assert_eq!(twice.code, ErrorCode::InvalidRequest);
        let both = reset_partitions(&request(offsets(&[(1, 5)]), Some(vec![1])), 3).unwrap_err();
        assert_eq!(both.code, ErrorCode::InvalidRequest);
    }
}
