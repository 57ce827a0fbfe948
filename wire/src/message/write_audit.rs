//! WriteAudit: a consumer records what its poison policy did with a record
//! it could not process (C8).
//!
//! Every skip is an audit record (group, topic, partition, offset, reason,
//! principal, time). The client cannot produce to `__audit` itself
//! (`INTERNAL_TOPIC`): the coordinator appends the
//! [`AuditRecord`](super::audit::AuditRecord), stamps the time, and answers
//! after the quorum commit, so the consumer commits past the record only
//! once the skip is on record.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// What the consumer's poison policy did with the record.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum AuditAction {
    /// Skipped after its retries ran out; the record is not processed.
    Skip,
    /// Copied to a dead-letter topic and skipped.
    Quarantine,
    /// The consumer stopped at the record and will not go past it until an
    /// operator acts.
    Stop,
}

/// Records a poison-record decision.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct WriteAuditRequest {
    /// Group id.
    pub group: String,
    /// Topic of the record.
    pub topic: String,
    /// Partition of the record.
    pub partition: u32,
    /// Offset of the record.
    pub offset: u64,
    /// What the policy did.
    pub action: AuditAction,
    /// Why, for example the processing error; empty is refused with
    /// `AUDIT_REASON_REQUIRED`.
    pub reason: String,
    /// Who decided: the consumer's identity (or the authenticated principal,
    /// once authentication exists).
    pub principal: String,
    /// Dead-letter topic the record was copied to, for
    /// [`AuditAction::Quarantine`].
    pub dead_letter_topic: Option<String>,
    /// Offset of the copy in the dead-letter topic; `-1` if none.
    pub dead_letter_offset: i64,
}

/// Where the decision was recorded.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct WriteAuditResponse {
    /// `NONE` (0), or for example `AUDIT_REASON_REQUIRED`,
    /// `NOT_ENOUGH_REPLICAS` or `NOT_COORDINATOR`: do not skip the record
    /// unless this is `NONE`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// Offset of the audit record in the `__audit` topic; `-1` on error.
    pub audit_offset: i64,
}

api!(ApiKey::WriteAudit, WriteAuditRequest => WriteAuditResponse);
no_raw_section!(
    WriteAuditRequest,
    ArchivedWriteAuditRequest,
    WriteAuditResponse,
    ArchivedWriteAuditResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn action() -> impl Strategy<Value = AuditAction> {
        prop_oneof![
            Just(AuditAction::Skip),
            Just(AuditAction::Quarantine),
            Just(AuditAction::Stop),
        ]
    }

    pub(crate) fn request() -> impl Strategy<Value = WriteAuditRequest> {
        (
            (name(), name(), any::<u32>(), any::<u64>(), action()),
            (name(), name(), optional_name(), any::<i64>()),
        )
            .prop_map(
                |(
                    (group, topic, partition, offset, action),
                    (reason, principal, dead_letter_topic, dead_letter_offset),
                )| WriteAuditRequest {
                    group,
                    topic,
                    partition,
                    offset,
                    action,
                    reason,
                    principal,
                    dead_letter_topic,
                    dead_letter_offset,
                },
            )
    }

    pub(crate) fn response() -> impl Strategy<Value = WriteAuditResponse> {
        (any::<u16>(), optional_name(), any::<i64>()).prop_map(
            |(error_code, error_message, audit_offset)| WriteAuditResponse {
                error_code,
                error_message,
                audit_offset,
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
