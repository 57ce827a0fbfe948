//! ReplicaPush: a partition leader sends record batches to a follower, and
//! the follower acknowledges what it made durable.
//!
//! Inter-broker: spoken by partition leaders to followers, never by clients.
//!
//! This is the wire form of the replication crate's `Push` and `PushAck`
//! (see the replication spec, "Leader" and "Follower"); the state machines
//! decide, this module only carries their fields. The record batches are
//! whole batches exactly as the leader stored them, in the body's raw section
//! (`records_len` bytes), so that they are never re-encoded on the way and the
//! follower checks their CRCs as it would a producer's. A push without
//! batches (`records_len` = 0) still carries the high watermark and the log
//! start offset.
//!
//! The follower answers after the appended batches are durable (fsynced), so
//! that `durable_end` in the answer counts toward the high watermark. The
//! leader pipelines pushes; correlation ids match answers to pushes.

use rkyv::{Archive, Deserialize, Serialize};

use super::{RawSectionLen, api, no_raw_section};
use crate::frame::ApiKey;

/// Record batches for one follower replica of one partition.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ReplicaPushRequest {
    /// The partition's topic, by id (names can be reused after a delete).
    pub topic_id: u64,
    /// Partition index.
    pub partition: u32,
    /// The leader's epoch. A follower that promised a higher epoch answers
    /// [`PushResult::Fenced`].
    pub epoch: u32,
    /// Node id of the leader sending the push.
    pub leader: u32,
    /// Offset of the first record in the raw section: the follower's log end,
    /// unless `truncate_to` or `reset_to` moves it first.
    pub start: u64,
    /// Epoch of the record before `start` in the leader's log; `None` when
    /// there is none. Must equal the epoch of the follower's last record
    /// (both `None` for an empty log), else the follower answers
    /// [`PushResult::Mismatch`].
    pub prev_epoch: Option<u32>,
    /// Truncate the follower's log to this offset before appending (the
    /// divergence point the leader computed from a mismatch); the follower
    /// asserts it is not below its high watermark. Skips the `prev_epoch`
    /// check.
    pub truncate_to: Option<u64>,
    /// Discard the follower's whole log and restart it at this offset (the
    /// follower is below the leader's log start). Skips the `prev_epoch`
    /// check.
    pub reset_to: Option<u64>,
    /// The leader's high watermark; the follower's becomes the smaller of
    /// this and its own log end, and never moves back.
    pub hw: u64,
    /// The leader's log start offset.
    pub log_start: u64,
    /// Bytes of whole record batches in the raw section, starting at `start`.
    pub records_len: u32,
}

/// How a follower handled a push. The tags are part of the protocol.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
#[repr(u8)]
pub enum PushResult {
    /// The batches were appended (or there were none) and made durable.
    Ok {
        /// End of the follower's durable (fsynced) log: what counts toward
        /// the high watermark.
        durable_end: u64,
        /// End of the follower's appended log.
        log_end: u64,
    } = 0,
    /// The push did not continue the follower's log (`start` is not its log
    /// end, or `prev_epoch` is not its last record's epoch); nothing was
    /// appended. The leader finds the divergence point from these and sends
    /// `truncate_to`.
    Mismatch {
        /// Epoch of the follower's last record; `None` for an empty log.
        last_epoch: Option<u32>,
        /// End of the follower's log.
        log_end: u64,
    } = 1,
    /// The follower promised a higher epoch than the push's; nothing was
    /// appended. A leader whose epoch is below `epoch` steps down.
    Fenced {
        /// The epoch the follower promised (its fenced epoch).
        epoch: u32,
    } = 2,
    /// This broker holds no replica of the partition (it has not applied
    /// the metadata that placed one here, or the topic was deleted).
    NotReplica = 3,
}

/// A follower's answer to a push.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ReplicaPushResponse {
    /// `NONE` (0) when the follower handled the push, with the outcome in
    /// `result`; otherwise (for example `STORAGE_ERROR`: the replica was
    /// fenced after an I/O failure) the push was not handled, `result` means
    /// nothing, and the leader sends again after its resend timeout.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// The outcome, with `NONE`.
    pub result: PushResult,
}

api!(ApiKey::ReplicaPush, ReplicaPushRequest => ReplicaPushResponse);
no_raw_section!(ReplicaPushResponse, ArchivedReplicaPushResponse);

impl RawSectionLen for ReplicaPushRequest {
    fn raw_section_len(&self) -> u64 {
        u64::from(self.records_len)
    }
}

impl RawSectionLen for ArchivedReplicaPushRequest {
    fn raw_section_len(&self) -> u64 {
        u64::from(self.records_len.to_native())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, archived_tag, noise, optional_name, raw_section,
        request_raw_section_mismatch_is_refused, round_trip_request, round_trip_response,
    };
    use crate::message::{copy_aligned, decode_response, encode_response};

    /// A request and its raw section (a stand-in for record batches, which
    /// this crate does not look into).
    pub(crate) fn request() -> impl Strategy<Value = (ReplicaPushRequest, Vec<u8>)> {
        (
            (any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>()),
            (
                any::<u64>(),
                any::<Option<u32>>(),
                any::<Option<u64>>(),
                any::<Option<u64>>(),
            ),
            (any::<u64>(), any::<u64>(), raw_section()),
        )
            .prop_map(
                |(
                    (topic_id, partition, epoch, leader),
                    (start, prev_epoch, truncate_to, reset_to),
                    (hw, log_start, records),
                )| {
                    (
                        ReplicaPushRequest {
                            topic_id,
                            partition,
                            epoch,
                            leader,
                            start,
                            prev_epoch,
                            truncate_to,
                            reset_to,
                            hw,
                            log_start,
                            records_len: records.len() as u32,
                        },
                        records,
                    )
                },
            )
    }

    fn result() -> impl Strategy<Value = PushResult> {
        prop_oneof![
            (any::<u64>(), any::<u64>()).prop_map(|(durable_end, log_end)| PushResult::Ok {
                durable_end,
                log_end
            }),
            (any::<Option<u32>>(), any::<u64>()).prop_map(|(last_epoch, log_end)| {
                PushResult::Mismatch {
                    last_epoch,
                    log_end,
                }
            }),
            any::<u32>().prop_map(|epoch| PushResult::Fenced { epoch }),
            Just(PushResult::NotReplica),
        ]
    }

    pub(crate) fn response() -> impl Strategy<Value = ReplicaPushResponse> {
        (any::<u16>(), optional_name(), result()).prop_map(|(error_code, error_message, result)| {
            ReplicaPushResponse {
                error_code,
                error_message,
                result,
            }
        })
    }

    /// A renumbered tag would make an old leader misread an acknowledgement.
    #[test]
    fn result_tags_are_pinned() {
        let ok = PushResult::Ok {
            durable_end: 1,
            log_end: 2,
        };
        let mismatch = PushResult::Mismatch {
            last_epoch: None,
            log_end: 0,
        };
        assert_eq!(archived_tag(&ok), 0);
        assert_eq!(archived_tag(&mismatch), 1);
        assert_eq!(archived_tag(&PushResult::Fenced { epoch: 4 }), 2);
        assert_eq!(archived_tag(&PushResult::NotReplica), 3);
    }

    #[test]
    fn push_without_batches_and_archived_result_compare() {
        let heartbeat = ReplicaPushRequest {
            topic_id: 9,
            partition: 0,
            epoch: 3,
            leader: 1,
            start: 100,
            prev_epoch: Some(3),
            truncate_to: None,
            reset_to: None,
            hw: 100,
            log_start: 0,
            records_len: 0,
        };
        round_trip_request(&heartbeat, &[]).unwrap();
        let answer = ReplicaPushResponse {
            error_code: 0,
            error_message: None,
            result: PushResult::Mismatch {
                last_epoch: Some(2),
                log_end: 90,
            },
        };
        let body = copy_aligned(&encode_response(&answer, &[]).unwrap());
        let (archived, _) = decode_response::<ReplicaPushResponse>(&body).unwrap();
        assert!(matches!(
            archived.result,
            ArchivedPushResult::Mismatch { last_epoch, log_end }
                if last_epoch.as_ref().map(|e| e.to_native()) == Some(2) && log_end == 90
        ));
    }

    proptest! {
        #[test]
        fn request_round_trips_with_records((msg, raw) in request()) {
            round_trip_request(&msg, &raw)?;
        }

        #[test]
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn records_len_must_match_the_raw_section((msg, raw) in request()) {
            request_raw_section_mismatch_is_refused(&msg, &raw)?;
        }

        #[test]
        fn arbitrary_bytes_never_panic((q, raw) in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &raw), (&s, &[]), &noise);
        }
    }
}
