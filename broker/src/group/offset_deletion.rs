//! `corelog group delete-offsets` on the coordinator's shard (issue 35,
//! item 17): removes a group's committed offsets of one topic name, those
//! of deleted topics of that name (see [`super::offsets`]) and, unless
//! only those are asked for, the live topic's.
//!
//! It changes a group's position as a reset does, so it goes the same way:
//! privileged (`group-admin`, checked by the handler), a reason required,
//! the audit record written to `__audit` before the tombstones are
//! appended to `__groups`. The live topic's offsets are refused while a
//! member subscribes to it (`GROUP_SUBSCRIBED_TO_TOPIC`, as Kafka's
//! OffsetDelete): they are the members' to commit. A deleted topic's are
//! nobody's, and can go while the group runs.

use std::rc::Rc;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::audit::{AuditKind, AuditRecord};
use corelog_wire::message::delete_offsets::{
    DeleteOffsetsRequest, DeleteOffsetsResponse, DeletedOffset,
};
use corelog_wire::message::group_records::GroupRecord;
use corelog_wire::types::TimestampMs;

use super::coordinator::{GroupCoordinator, TopicView};
use super::host::Host;
use super::service::append_audit;
use crate::partition::PartitionError;

/// One offset a deletion removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoomedOffset {
    /// The topic's id; `None` for an offset written before ids.
    pub topic_id: Option<u64>,
    /// Whether it is a deleted topic's (else the live topic's).
    pub topic_deleted: bool,
    /// Partition.
    pub partition: u32,
    /// The committed next offset it holds.
    pub next_offset: u64,
}

impl GroupCoordinator {
    /// The offsets `request` would delete from its group. Call
    /// [`GroupCoordinator::set_apart_deleted_topic_offsets`] first.
    ///
    /// # Errors
    /// `UNKNOWN_GROUP`, or `GROUP_SUBSCRIBED_TO_TOPIC` when the live
    /// topic's offsets are asked for while a member subscribes to it.
    pub fn offsets_to_delete(
        &self,
        request: &DeleteOffsetsRequest,
    ) -> Result<Vec<DoomedOffset>, PartitionError> {
        let groups = self.groups.borrow();
        let group = groups.get(&request.group).ok_or_else(|| {
            PartitionError::new(
                ErrorCode::UnknownGroup,
                format!("group {:?} does not exist", request.group),
            )
        })?;
        let partitions = request.partitions.as_deref();
        let mut doomed: Vec<DoomedOffset> = group
            .deleted_topic_offsets_of(&request.topic, partitions)
            .into_iter()
            .map(|((_, partition, topic_id), committed)| DoomedOffset {
                topic_id,
                topic_deleted: true,
                partition,
                next_offset: committed.next_offset,
            })
            .collect();
        if request.deleted_topics_only {
            return Ok(doomed);
        }
        let live: Vec<DoomedOffset> = group
            .offsets
            .iter()
            .filter(|((topic, partition), _)| {
                *topic == request.topic
                    && partitions.is_none_or(|wanted| wanted.contains(partition))
            })
            .map(|((_, partition), committed)| DoomedOffset {
                topic_id: committed.topic_id,
                topic_deleted: false,
                partition: *partition,
                next_offset: committed.next_offset,
            })
            .collect();
        if !live.is_empty() && group.subscribed_topics().contains(&request.topic) {
            return Err(subscribed_error(&request.group, &request.topic));
        }
        doomed.extend(live);
        Ok(doomed)
    }

    /// Deletes `doomed` from `group` (its audit record written first by
    /// the caller): appends their tombstones, then forgets them.
    ///
    /// # Errors
    /// `GROUP_SUBSCRIBED_TO_TOPIC` if a member subscribed to the live topic
    /// meanwhile, or the append's error.
    pub async fn delete_offsets(
        &self,
        group: &str,
        topic: &str,
        doomed: &[DoomedOffset],
        now: TimestampMs,
    ) -> Result<(), PartitionError> {
        // The audit append awaited: judge the subscription again.
        let live = doomed.iter().any(|offset| !offset.topic_deleted);
        let subscribed = self
            .groups
            .borrow()
            .get(group)
            .is_some_and(|group| group.subscribed_topics().contains(topic));
        if live && subscribed {
            return Err(subscribed_error(group, topic));
        }
        let tombstones: Vec<GroupRecord> = doomed
            .iter()
            .map(|offset| GroupRecord::OffsetTombstone {
                group: group.to_owned(),
                topic: topic.to_owned(),
                topic_id: offset.topic_id,
                partition: offset.partition,
            })
            .collect();
        if tombstones.is_empty() {
            return Ok(());
        }
        self.append(&tombstones, now).await?;
        if let Some(group) = self.groups.borrow_mut().get_mut(group) {
            for offset in doomed {
                group.forget_offset(&(topic.to_owned(), offset.partition), offset.topic_id);
            }
        }
        Ok(())
    }
}

fn subscribed_error(group: &str, topic: &str) -> PartitionError {
    PartitionError::new(
        ErrorCode::GroupSubscribedToTopic,
        format!(
            "members of group {group:?} consume topic {topic:?}: stop them first, or delete only a deleted topic's offsets (--deleted-only)"
        ),
    )
}

/// Serves a DeleteOffsets request (the handler checked `group-admin`).
pub async fn serve(
    host: &Host,
    coordinator: &Rc<GroupCoordinator>,
    request: DeleteOffsetsRequest,
) -> DeleteOffsetsResponse {
    let refused = |error: PartitionError| DeleteOffsetsResponse {
        error_code: error.code.code(),
        error_message: Some(error.message),
        audit_offset: -1,
        deleted: Vec::new(),
    };
    if request.reason.trim().is_empty() {
        return refused(PartitionError::new(
            ErrorCode::AuditReasonRequired,
            "deleting offsets is audited and needs a reason; pass --reason",
        ));
    }
    let snapshot = host.snapshot();
    coordinator.set_apart_deleted_topic_offsets(Some(request.group.as_str()), &*snapshot);
    let doomed = match coordinator.offsets_to_delete(&request) {
        Ok(doomed) => doomed,
        Err(error) => return refused(error),
    };
    let deleted: Vec<DeletedOffset> = doomed
        .iter()
        .map(|offset| DeletedOffset {
            topic_deleted: offset.topic_deleted,
            topic_id: offset
                .topic_id
                .map_or(-1, |id| i64::try_from(id).unwrap_or(i64::MAX)),
            partition: offset.partition,
            committed_offset: offset.next_offset,
        })
        .collect();
    if doomed.is_empty() {
        return DeleteOffsetsResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            audit_offset: -1,
            deleted,
        };
    }
    // The audit record first: a change nobody can account for never happens.
    let record = audit_record(&request, &doomed, &*snapshot, host.now());
    let audit_offset = match append_audit(host, &record).await {
        Ok(offset) => offset,
        Err(error) => return refused(error),
    };
    if let Err(error) = coordinator
        .delete_offsets(&request.group, &request.topic, &doomed, host.now())
        .await
    {
        return refused(error);
    }
    DeleteOffsetsResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        audit_offset: i64::try_from(audit_offset.0).unwrap_or(i64::MAX),
        deleted,
    }
}

/// The audit record of a deletion: an offset reset whose positions after
/// are `-1` (none), so that every reader of the audit log, older ones
/// too, reads it; the reason says which topics' offsets went.
fn audit_record(
    request: &DeleteOffsetsRequest,
    doomed: &[DoomedOffset],
    topics: &dyn TopicView,
    now: TimestampMs,
) -> AuditRecord {
    let live_id = topics.topic_identity(&request.topic).map(|live| live.id);
    let which: Vec<String> = doomed
        .iter()
        .map(|offset| match (offset.topic_deleted, offset.topic_id) {
            (true, Some(id)) => format!(
                "{}/{} of deleted topic id {id}",
                request.topic, offset.partition
            ),
            (true, None) => format!("{}/{} of a deleted topic", request.topic, offset.partition),
            (false, _) => format!(
                "{}/{} of topic id {}",
                request.topic,
                offset.partition,
                live_id.map_or_else(|| "?".to_owned(), |id| id.to_string())
            ),
        })
        .collect();
    let partition = match doomed {
        [only] => Some(only.partition),
        _ => None,
    };
    AuditRecord {
        kind: AuditKind::OffsetReset,
        group: request.group.clone(),
        topic: request.topic.clone(),
        partition,
        principal: request.principal.clone(),
        reason: format!("offsets deleted ({}): {}", which.join(", "), request.reason),
        at_ms: now.0,
        before: doomed
            .iter()
            .map(|offset| {
                (
                    offset.partition,
                    i64::try_from(offset.next_offset).unwrap_or(i64::MAX),
                )
            })
            .collect(),
        after: doomed.iter().map(|offset| (offset.partition, -1)).collect(),
        offset: None,
        dead_letter_topic: None,
        dead_letter_offset: None,
        error: None,
    }
}
