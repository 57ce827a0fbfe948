//! DeleteOffsets: remove a group's committed offsets of one topic (issue
//! 35, item 17), as Kafka's OffsetDelete does.
//!
//! Committed offsets belong to a topic, not to its name: when a topic is
//! deleted, the group keeps its offsets of it (shown by DescribeGroups
//! version 1 as a deleted topic's), and a topic created again under the
//! name starts each group afresh. This request removes such offsets, or
//! the offsets of a live topic the group no longer consumes.
//!
//! Like a reset it changes a group's position, so it is privileged
//! (`group-admin`), needs a reason (`AUDIT_REASON_REQUIRED`), and is
//! written to `__audit` before the offsets go. A live topic's offsets are
//! refused with `GROUP_SUBSCRIBED_TO_TOPIC` while a member of the group
//! subscribes to it.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Deletes a group's committed offsets of one topic name.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeleteOffsetsRequest {
    /// Group id.
    pub group: String,
    /// Topic name: the live topic of that name and every deleted one.
    pub topic: String,
    /// Partitions whose offsets go; `None` for all of them.
    pub partitions: Option<Vec<u32>>,
    /// Only the offsets of deleted topics of that name, never the live
    /// topic's (allowed while members consume the live one).
    pub deleted_topics_only: bool,
    /// Why, in a sentence; stored in the audit record. Empty is refused
    /// with `AUDIT_REASON_REQUIRED`.
    pub reason: String,
    /// Who asks, as the client identifies its user; the broker records the
    /// authenticated principal instead when there is one.
    pub principal: String,
}

/// One offset deleted.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeletedOffset {
    /// Whether it was a deleted topic's offset (else the live topic's).
    pub topic_deleted: bool,
    /// The topic's id; `-1` if unknown (an offset committed before
    /// offsets carried topic ids).
    pub topic_id: i64,
    /// Partition index.
    pub partition: u32,
    /// The committed next offset it held.
    pub committed_offset: u64,
}

/// What was deleted.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeleteOffsetsResponse {
    /// `NONE` (0), or a refusal of the whole request, for example
    /// `GROUP_SUBSCRIBED_TO_TOPIC`, `AUDIT_REASON_REQUIRED`,
    /// `UNKNOWN_GROUP` or `NOT_COORDINATOR`; nothing changed then.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// Offset of the audit record in the `__audit` topic; `-1` when
    /// nothing was deleted.
    pub audit_offset: i64,
    /// The offsets deleted; empty when the group had none that matched.
    pub deleted: Vec<DeletedOffset>,
}

api!(ApiKey::DeleteOffsets, DeleteOffsetsRequest => DeleteOffsetsResponse);
no_raw_section!(
    DeleteOffsetsRequest,
    ArchivedDeleteOffsetsRequest,
    DeleteOffsetsResponse,
    ArchivedDeleteOffsetsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = DeleteOffsetsRequest> {
        (
            (name(), name(), prop::option::of(few(any::<u32>()))),
            (any::<bool>(), name(), name()),
        )
            .prop_map(
                |((group, topic, partitions), (deleted_topics_only, reason, principal))| {
                    DeleteOffsetsRequest {
                        group,
                        topic,
                        partitions,
                        deleted_topics_only,
                        reason,
                        principal,
                    }
                },
            )
    }

    pub(crate) fn response() -> impl Strategy<Value = DeleteOffsetsResponse> {
        let deleted = (any::<bool>(), any::<i64>(), any::<u32>(), any::<u64>()).prop_map(
            |(topic_deleted, topic_id, partition, committed_offset)| DeletedOffset {
                topic_deleted,
                topic_id,
                partition,
                committed_offset,
            },
        );
        (any::<u16>(), optional_name(), any::<i64>(), few(deleted)).prop_map(
            |(error_code, error_message, audit_offset, deleted)| DeleteOffsetsResponse {
                error_code,
                error_message,
                audit_offset,
                deleted,
            },
        )
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
