//! ReplicaStream: one frame of a replication stream, the pushes a leader
//! shard has ready for one follower broker, of any number of partitions,
//! answered in one response with one acknowledgement per push.
//!
//! Inter-broker: spoken by partition leaders to followers, never by clients.
//!
//! Each push is a [`ReplicaPushRequest`] exactly as
//! [`replica_push`](super::replica_push) sends it alone; the raw section is
//! the pushes' record batches concatenated in push order, each push's
//! `records_len` bytes ([`push_records`] cuts them apart). One frame per
//! follower instead of one request per partition is what keeps the RPC rate,
//! and the follower's fdatasync rate, independent of how many partitions a
//! shard leads: the follower appends every push of the frame before it waits
//! for durability, so one journal commit covers them all.
//!
//! The answers are in push order: `answers[i]` answers `pushes[i]`, a
//! [`ReplicaPushResponse`] with its own error code, so one partition's
//! refusal does not fail the others. A frame may carry several pushes of the
//! same partition (the leader pipelines); the follower handles them in frame
//! order.

use rkyv::{Archive, Deserialize, Serialize};

use super::replica_push::{ArchivedReplicaPushRequest, ReplicaPushRequest, ReplicaPushResponse};
use super::{MessageError, RawSectionLen, api, no_raw_section, split_raw_section};
use crate::frame::ApiKey;

/// Most pushes one frame may carry; a follower refuses a larger frame as an
/// invalid request. Bounds the follower's work per frame (one task per
/// partition) whatever the byte size.
pub const PUSHES_PER_FRAME_MAX: usize = 4096;

/// The pushes of one frame, in order.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ReplicaStreamRequest {
    /// Node id of the leader broker sending the frame (each push names its
    /// own leader too; they are equal).
    pub leader: u32,
    /// The pushes; their record batches follow in the raw section.
    pub pushes: Vec<ReplicaPushRequest>,
}

/// The follower's answers, one per push of the frame, in frame order.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ReplicaStreamResponse {
    /// `NONE` (0) when the frame was handled (each push's outcome is in
    /// `answers`); otherwise no push of it was handled and `answers` is
    /// empty.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// One answer per push, in frame order.
    pub answers: Vec<ReplicaPushResponse>,
}

api!(ApiKey::ReplicaStream, ReplicaStreamRequest => ReplicaStreamResponse);
no_raw_section!(ReplicaStreamResponse, ArchivedReplicaStreamResponse);

impl RawSectionLen for ReplicaStreamRequest {
    fn raw_section_len(&self) -> u64 {
        self.pushes
            .iter()
            .map(|push| u64::from(push.records_len))
            .sum()
    }
}

impl RawSectionLen for ArchivedReplicaStreamRequest {
    fn raw_section_len(&self) -> u64 {
        record_lengths(self).map(u64::from).sum()
    }
}

fn record_lengths(
    request: &ArchivedReplicaStreamRequest,
) -> impl Iterator<Item = u32> + Clone + '_ {
    request
        .pushes
        .iter()
        .map(|push| push.records_len.to_native())
}

/// Cuts a decoded frame's raw section into each push's record batches, in
/// push order, paired with the push.
///
/// # Errors
/// [`MessageError::RawSectionMismatch`] if the `records_len` fields do not
/// add up to the raw section's length (never after a successful
/// [`decode_request`](super::decode_request), which checks it).
pub fn push_records<'a>(
    request: &'a ArchivedReplicaStreamRequest,
    raw: &'a [u8],
) -> Result<Vec<(&'a ArchivedReplicaPushRequest, &'a [u8])>, MessageError> {
    let slices = split_raw_section(ApiKey::ReplicaStream, raw, record_lengths(request))?;
    Ok(request.pushes.iter().zip(slices).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::replica_push::PushResult;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, noise, optional_name,
        request_raw_section_mismatch_is_refused, round_trip_request, round_trip_response,
    };
    use crate::message::{copy_aligned, decode_request, encode_request};

    /// A frame and its raw section, built from pushes with their records.
    pub(crate) fn request() -> impl Strategy<Value = (ReplicaStreamRequest, Vec<u8>)> {
        (
            any::<u32>(),
            few(super::super::replica_push::tests::request()),
        )
            .prop_map(|(leader, pushes)| {
                let mut raw = Vec::new();
                let pushes = pushes
                    .into_iter()
                    .map(|(push, records)| {
                        raw.extend_from_slice(&records);
                        push
                    })
                    .collect();
                (ReplicaStreamRequest { leader, pushes }, raw)
            })
    }

    pub(crate) fn response() -> impl Strategy<Value = ReplicaStreamResponse> {
        (
            any::<u16>(),
            optional_name(),
            few(super::super::replica_push::tests::response()),
        )
            .prop_map(
                |(error_code, error_message, answers)| ReplicaStreamResponse {
                    error_code,
                    error_message,
                    answers,
                },
            )
    }

    fn push(topic_id: u64, partition: u32, records_len: u32) -> ReplicaPushRequest {
        ReplicaPushRequest {
            topic_id,
            partition,
            epoch: 2,
            leader: 1,
            start: 10,
            prev_epoch: Some(2),
            truncate_to: None,
            reset_to: None,
            hw: 8,
            log_start: 0,
            records_len,
        }
    }

    #[test]
    fn each_push_gets_its_own_records_in_order() {
        let request = ReplicaStreamRequest {
            leader: 1,
            pushes: vec![push(7, 0, 3), push(7, 1, 0), push(8, 0, 2), push(7, 0, 1)],
        };
        let raw = b"aaabbc";
        let body = copy_aligned(&encode_request(&request, raw).unwrap());
        let (archived, raw) = decode_request::<ReplicaStreamRequest>(&body).unwrap();
        let pieces: Vec<(u64, u32, &[u8])> = push_records(archived, raw)
            .unwrap()
            .into_iter()
            .map(|(push, records)| {
                (
                    push.topic_id.to_native(),
                    push.partition.to_native(),
                    records,
                )
            })
            .collect();
        assert_eq!(
            pieces,
            vec![
                (7, 0, &b"aaa"[..]),
                (7, 1, &b""[..]),
                (8, 0, &b"bb"[..]),
                (7, 0, &b"c"[..])
            ]
        );
    }

    #[test]
    fn answers_keep_their_order_and_outcomes() {
        let response = ReplicaStreamResponse {
            error_code: 0,
            error_message: None,
            answers: vec![
                ReplicaPushResponse {
                    error_code: 0,
                    error_message: None,
                    result: PushResult::Ok {
                        durable_end: 4,
                        log_end: 5,
                    },
                },
                ReplicaPushResponse {
                    error_code: 3,
                    error_message: Some("no such partition".to_owned()),
                    result: PushResult::NotReplica,
                },
            ],
        };
        round_trip_response(&response, &[]).unwrap();
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
        fn records_lengths_must_match_the_raw_section((msg, raw) in request()) {
            request_raw_section_mismatch_is_refused(&msg, &raw)?;
        }

        #[test]
        fn arbitrary_bytes_never_panic((q, raw) in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &raw), (&s, &[]), &noise);
        }
    }
}
