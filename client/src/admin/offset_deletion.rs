//! Deleting a group's committed offsets of one topic name (issue 35, item
//! 17): the offsets it holds of deleted topics of that name and, unless
//! only those are asked for, the live topic's. Privileged (`group-admin`)
//! and audited like a reset; see `corelog_wire::message::delete_offsets`.

use std::time::Duration;

use corelog_wire::message::delete_offsets::DeleteOffsetsRequest;
use serde::Serialize;

use super::Admin;
use super::groups::check;
use crate::error::ClientError;

/// A deletion of a group's committed offsets of one topic name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteOffsets {
    /// Group id.
    pub group: String,
    /// Topic name.
    pub topic: String,
    /// Partitions whose offsets go; `None` for all.
    pub partitions: Option<Vec<u32>>,
    /// Only the offsets of deleted topics of that name, never the live
    /// topic's (allowed while members consume the live one).
    pub deleted_topics_only: bool,
    /// Why: required, written to the audit log.
    pub reason: String,
    /// Who asks (the broker records the login instead when there is one).
    pub principal: String,
}

/// One offset deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OffsetDeleted {
    /// Whether it was a deleted topic's (else the live topic's).
    pub topic_deleted: bool,
    /// The topic's id; `None` if unknown (committed before offsets carried
    /// topic ids).
    pub topic_id: Option<u64>,
    /// Partition index.
    pub partition: u32,
    /// The committed next offset it held.
    pub committed_offset: u64,
}

/// What a deletion did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeleteOffsetsOutcome {
    /// Offset of the audit record in `__audit`; `None` when nothing was
    /// deleted.
    pub audit_offset: Option<u64>,
    /// The offsets deleted.
    pub deleted: Vec<OffsetDeleted>,
}

impl Admin {
    /// Deletes a group's committed offsets of one topic name (see
    /// [`DeleteOffsets`]).
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] before sending anything for a blank
    /// reason or principal; `GROUP_SUBSCRIBED_TO_TOPIC` for the live
    /// topic's offsets while members consume it, `UNKNOWN_GROUP`,
    /// `GROUP_AUTHORIZATION_FAILED` without `group-admin`; connection
    /// errors. Not repeated automatically after a lost answer: check with
    /// `corelog group describe`.
    pub async fn delete_offsets(
        &self,
        deletion: &DeleteOffsets,
    ) -> Result<DeleteOffsetsOutcome, ClientError> {
        if deletion.reason.trim().is_empty() {
            return Err(ClientError::InvalidArgument(
                "deleting offsets needs a reason (--reason): it is written to the audit log"
                    .to_owned(),
            ));
        }
        if deletion.principal.trim().is_empty() {
            return Err(ClientError::InvalidArgument(
                "deleting offsets needs a principal: who asks is written to the audit log"
                    .to_owned(),
            ));
        }
        let coordinator = self.coordinator(&deletion.group)?;
        let request = DeleteOffsetsRequest {
            group: deletion.group.clone(),
            topic: deletion.topic.clone(),
            partitions: deletion.partitions.clone(),
            deleted_topics_only: deletion.deleted_topics_only,
            reason: deletion.reason.clone(),
            principal: deletion.principal.clone(),
        };
        let result = async {
            let connection = coordinator.connection().await?;
            let reply = connection
                .call(&request, Vec::new(), Duration::ZERO)
                .await?;
            let (response, _) = reply.decode()?;
            check(
                response.error_code.to_native(),
                response.error_message.as_ref().map(|m| m.to_string()),
                || {
                    format!(
                        "delete offsets of group {} on {}",
                        deletion.group, deletion.topic
                    )
                },
            )?;
            let mut deleted: Vec<OffsetDeleted> = response
                .deleted
                .iter()
                .map(|offset| OffsetDeleted {
                    topic_deleted: offset.topic_deleted,
                    topic_id: u64::try_from(offset.topic_id.to_native()).ok(),
                    partition: offset.partition.to_native(),
                    committed_offset: offset.committed_offset.to_native(),
                })
                .collect();
            deleted.sort_by_key(|offset| (offset.partition, !offset.topic_deleted));
            Ok(DeleteOffsetsOutcome {
                audit_offset: u64::try_from(response.audit_offset.to_native()).ok(),
                deleted,
            })
        }
        .await;
        coordinator.observe(result)
    }
}
