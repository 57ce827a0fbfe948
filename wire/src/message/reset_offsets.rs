//! ResetOffsets: move a group's committed offsets elsewhere (C6).
//!
//! The one privileged way to move a group other than by its own commits: the
//! group must have no active members (`GROUP_NOT_EMPTY` otherwise), a reason
//! is required (`AUDIT_REASON_REQUIRED`), and the change is appended to the
//! `__audit` topic as an [`AuditRecord`](super::audit::AuditRecord) before
//! the offsets move. A dry run computes the new offsets and changes nothing.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Where to move the offsets.
///
/// New variants go at the end: a variant's number is its archived tag.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum ResetTarget {
    /// Each partition's log start offset: replay everything retained.
    Earliest,
    /// Each partition's high watermark: skip everything committed so far.
    Latest,
    /// This offset in every selected partition. An offset outside a
    /// partition's log start and high watermark is refused for that
    /// partition with `OFFSET_OUT_OF_RANGE`.
    Offset(u64),
    /// The first offset whose timestamp is at or after this time (ms since
    /// the Unix epoch) in each partition.
    Timestamp(i64),
    /// Each listed partition to its own offset, in one audited step: for
    /// example another group's positions, or each position shifted by the
    /// client. The partitions moved are the listed ones, so the request's
    /// `partitions` must be `None` and a partition is listed once
    /// (`INVALID_REQUEST` otherwise); an offset outside its partition's log
    /// is refused for that partition as with [`ResetTarget::Offset`].
    Offsets(Vec<PartitionOffset>),
}

/// One partition's target in [`ResetTarget::Offsets`].
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct PartitionOffset {
    /// Partition index.
    pub partition: u32,
    /// The committed next offset to set.
    pub offset: u64,
}

/// Resets a group's offsets on one topic.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ResetOffsetsRequest {
    /// Group id.
    pub group: String,
    /// Topic whose offsets move.
    pub topic: String,
    /// Partitions to move; `None` for every partition of the topic.
    pub partitions: Option<Vec<u32>>,
    /// Where to move them.
    pub to: ResetTarget,
    /// Why, in a sentence; stored in the audit record. Empty is refused with
    /// `AUDIT_REASON_REQUIRED`.
    pub reason: String,
    /// Who asks, as the client identifies its user; stored in the audit
    /// record. Once authentication exists the broker records the
    /// authenticated principal instead.
    pub principal: String,
    /// Compute and return the new offsets without changing anything or
    /// writing an audit record.
    pub dry_run: bool,
}

/// One partition's move.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ResetPartition {
    /// Partition index.
    pub partition: u32,
    /// The committed next offset before the reset; `-1` if none.
    pub before: i64,
    /// The committed next offset after the reset (what it would be, for a
    /// dry run); `-1` on error.
    pub after: i64,
    /// `NONE` (0), or for example `UNKNOWN_TOPIC_OR_PARTITION`.
    pub error_code: u16,
}

/// The reset's outcome.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ResetOffsetsResponse {
    /// `NONE` (0), or a refusal of the whole reset, for example
    /// `GROUP_NOT_EMPTY`, `AUDIT_REASON_REQUIRED`, `UNKNOWN_TOPIC_OR_PARTITION`
    /// or `NOT_COORDINATOR`; nothing changed then.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// Offset of the audit record in the `__audit` topic; `-1` for a dry run
    /// or a refusal.
    pub audit_offset: i64,
    /// One entry per selected partition.
    pub partitions: Vec<ResetPartition>,
}

api!(ApiKey::ResetOffsets, ResetOffsetsRequest => ResetOffsetsResponse);
no_raw_section!(
    ResetOffsetsRequest,
    ArchivedResetOffsetsRequest,
    ResetOffsetsResponse,
    ArchivedResetOffsetsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    fn target() -> impl Strategy<Value = ResetTarget> {
        let offsets = few((any::<u32>(), any::<u64>())
            .prop_map(|(partition, offset)| PartitionOffset { partition, offset }));
        prop_oneof![
            Just(ResetTarget::Earliest),
            Just(ResetTarget::Latest),
            any::<u64>().prop_map(ResetTarget::Offset),
            any::<i64>().prop_map(ResetTarget::Timestamp),
            offsets.prop_map(ResetTarget::Offsets),
        ]
    }

    pub(crate) fn request() -> impl Strategy<Value = ResetOffsetsRequest> {
        (
            (
                name(),
                name(),
                prop::option::of(few(any::<u32>())),
                target(),
            ),
            (name(), name(), any::<bool>()),
        )
            .prop_map(
                |((group, topic, partitions, to), (reason, principal, dry_run))| {
                    ResetOffsetsRequest {
                        group,
                        topic,
                        partitions,
                        to,
                        reason,
                        principal,
                        dry_run,
                    }
                },
            )
    }

    pub(crate) fn response() -> impl Strategy<Value = ResetOffsetsResponse> {
        let partition = (any::<u32>(), any::<i64>(), any::<i64>(), any::<u16>()).prop_map(
            |(partition, before, after, error_code)| ResetPartition {
                partition,
                before,
                after,
                error_code,
            },
        );
        (any::<u16>(), optional_name(), any::<i64>(), few(partition)).prop_map(
            |(error_code, error_message, audit_offset, partitions)| ResetOffsetsResponse {
                error_code,
                error_message,
                audit_offset,
                partitions,
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
