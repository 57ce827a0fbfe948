//! The wire forms round-trip, and what a peer can send wrong is a typed
//! error, never a panic. (The push and acknowledgement tests moved here
//! from the broker's `replica/peer_transport.rs` with the conversions.)

use bytes::Bytes;
use corelog_wire::batch::{
    BatchBuilder, BatchError, BatchLimits, Compression, NewRecord, set_base_offset,
    set_leader_epoch,
};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::replica_push::{ReplicaPushRequest, ReplicaPushResponse};
use corelog_wire::message::replica_query::ReplicaQueryRequest;
use corelog_wire::message::replica_stream::{PUSHES_PER_FRAME_MAX, ReplicaStreamRequest};
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId};

use super::{Refusal, push_refusal, query_refusal, split_stream_frame, stream_answer};
use crate::error::ProtocolError;
use crate::ids::ReplicaId;
use crate::message::{Push, PushAck, PushResult, Query, QueryAnswer, QueryResult};

const PARTITION: PartitionId = PartitionId {
    topic_id: 9,
    partition: 2,
};

fn empty_push(start: u64) -> Push {
    Push {
        partition: PARTITION,
        epoch: LeaderEpoch(3),
        leader: ReplicaId(1),
        start: Offset(start),
        prev_epoch: None,
        reset_to: None,
        hw: Offset(0),
        log_start: Offset(0),
        batches: Vec::new(),
    }
}

/// A batch of `records` records at `base`, stamped with `epoch`.
fn stored_batch(base: u64, records: usize, epoch: Option<u32>) -> Vec<u8> {
    let mut builder = BatchBuilder::new(Compression::None);
    for _ in 0..records {
        builder
            .push(&NewRecord {
                value: Some(Bytes::from_static(b"v")),
                ..NewRecord::default()
            })
            .expect("a record");
    }
    let mut batch = builder.build().expect("a batch").to_vec();
    set_base_offset(&mut batch, Offset(base));
    if let Some(epoch) = epoch {
        set_leader_epoch(&mut batch, LeaderEpoch(epoch));
    }
    batch
}

fn received(push: &Push, raw: Vec<u8>) -> Result<Push, ProtocolError> {
    let mut request = push.to_wire();
    request.records_len = u32::try_from(raw.len()).expect("a small push");
    Push::from_wire(&request, Bytes::from(raw), &BatchLimits::default())
}

#[test]
fn a_push_request_keeps_its_fields() {
    let push = Push {
        epoch: LeaderEpoch(6),
        leader: ReplicaId(3),
        prev_epoch: None,
        reset_to: Some(Offset(100)),
        hw: Offset(90),
        log_start: Offset(50),
        ..empty_push(100)
    };
    let request = push.to_wire();
    assert_eq!(
        (request.topic_id, request.partition, request.records_len),
        (9, 2, 0)
    );
    let back = Push::from_wire(&request, Bytes::new(), &BatchLimits::default());
    assert_eq!(back, Ok(push));
}

#[test]
fn pushed_batches_are_cut_apart_by_their_headers() {
    let mut raw = stored_batch(10, 2, Some(3));
    raw.extend(stored_batch(12, 3, Some(3)));
    let push = Push {
        prev_epoch: Some(LeaderEpoch(2)),
        ..empty_push(10)
    };
    let back = received(&push, raw).expect("a valid push");
    let places: Vec<_> = back
        .batches
        .iter()
        .map(|batch| (batch.base, batch.last, batch.epoch))
        .collect();
    assert_eq!(
        places,
        vec![
            (Offset(10), Offset(11), LeaderEpoch(3)),
            (Offset(12), Offset(14), LeaderEpoch(3))
        ]
    );
    assert_eq!(back.end(), Offset(15));
}

/// A received push is cut apart by header, so a batch whose uncovered
/// `base_offset` is negative or runs past the last offset must be refused
/// there, not panic the follower's shard (issue 35, item 19).
#[test]
fn a_pushed_batch_whose_base_offset_overflows_is_refused_not_a_panic() {
    for base_offset in [u64::MAX, u64::MAX - 1, 1 << 63, i64::MAX as u64] {
        let raw = stored_batch(base_offset, 2, Some(3));
        let back = std::panic::catch_unwind(|| received(&empty_push(base_offset), raw))
            .unwrap_or_else(|_| panic!("base offset {base_offset:#x} panicked the follower"));
        assert!(
            matches!(&back, Err(error @ ProtocolError::BadBatch { .. }) if error.to_string().contains("base offset")),
            "base offset {base_offset:#x}: {back:?}"
        );
    }
}

/// Was `check_push` in the broker: a damaged batch is refused when the
/// push is received, before the state machine or the log sees it.
#[test]
fn a_pushed_batch_with_a_bad_crc_is_refused() {
    let mut raw = stored_batch(0, 2, Some(3));
    let last = raw.len() - 1;
    raw[last] ^= 1;
    assert!(matches!(
        received(&empty_push(0), raw),
        Err(ProtocolError::BadBatch {
            error: BatchError::CrcMismatch { .. },
            ..
        })
    ));
}

#[test]
fn a_pushed_batch_without_a_leader_epoch_is_refused() {
    assert_eq!(
        received(&empty_push(0), stored_batch(0, 1, None)),
        Err(ProtocolError::UnstampedBatch { base: Offset(0) })
    );
}

/// The request says where the batches start; the batches' headers say
/// where they are. They must agree.
#[test]
fn pushed_batches_elsewhere_than_the_push_says_are_refused() {
    assert_eq!(
        received(&empty_push(5), stored_batch(0, 3, Some(3))),
        Err(ProtocolError::NotContiguous {
            base: Offset(0),
            last: Offset(2),
            expected: Offset(5)
        })
    );
    let mut newer = stored_batch(0, 1, Some(3));
    newer.extend(stored_batch(1, 1, Some(4)));
    assert!(matches!(
        received(&empty_push(0), newer),
        Err(ProtocolError::BatchEpochAbovePush { .. })
    ));
}

#[test]
fn acks_cross_the_wire_unchanged() {
    for result in [
        PushResult::Ok {
            durable_end: Offset(10),
            log_end: Offset(12),
        },
        PushResult::Mismatch {
            last_epoch: Some(LeaderEpoch(2)),
            log_end: Offset(9),
        },
        PushResult::Fenced {
            epoch: LeaderEpoch(5),
        },
    ] {
        let ack = PushAck {
            partition: PARTITION,
            epoch: LeaderEpoch(4),
            from: ReplicaId(2),
            result,
        };
        let back = PushAck::from_wire(ReplicaId(2), PARTITION, LeaderEpoch(4), ack.to_wire());
        assert_eq!(back, Ok(ack));
    }
    let refused = PushAck::from_wire(
        ReplicaId(2),
        PARTITION,
        LeaderEpoch(4),
        push_refusal(ErrorCode::StorageError, "fenced".to_owned()),
    );
    assert_eq!(
        refused,
        Err(Refusal {
            code: ErrorCode::StorageError,
            message: "fenced".to_owned()
        })
    );
}

#[test]
fn answers_cross_the_wire_unchanged_and_refusals_do_not_count() {
    let epoch = LeaderEpoch(6);
    for result in [
        QueryResult::State {
            last_epoch: Some(LeaderEpoch(5)),
            log_end: Offset(40),
        },
        QueryResult::State {
            last_epoch: None,
            log_end: Offset(0),
        },
        QueryResult::Fenced {
            fenced_epoch: LeaderEpoch(7),
        },
    ] {
        let answer = QueryAnswer {
            partition: PARTITION,
            epoch,
            from: ReplicaId(3),
            result,
        };
        assert_eq!(
            QueryAnswer::from_wire(PARTITION, epoch, ReplicaId(3), &answer.to_wire()),
            Ok(answer)
        );
    }
    let refused = query_refusal(ErrorCode::NotLeader, "no replica".to_owned());
    assert!(QueryAnswer::from_wire(PARTITION, epoch, ReplicaId(3), &refused).is_err());
    let request = ReplicaQueryRequest {
        topic_id: 9,
        partition: 2,
        new_epoch: 6,
    };
    let query = Query::from_wire(&request);
    assert_eq!(
        query,
        Query {
            partition: PARTITION,
            new_epoch: epoch
        }
    );
    assert_eq!(query.to_wire(), request);
}

/// A stream frame of `(partition, records_len)` pushes.
fn frame(pushes: &[(u32, u32)]) -> ReplicaStreamRequest {
    ReplicaStreamRequest {
        leader: 1,
        pushes: pushes
            .iter()
            .map(|&(partition, records_len)| ReplicaPushRequest {
                topic_id: 7,
                partition,
                epoch: 3,
                leader: 1,
                start: 0,
                prev_epoch: None,
                truncate_to: None,
                reset_to: None,
                hw: 0,
                log_start: 0,
                records_len,
            })
            .collect(),
    }
}

#[test]
fn a_stream_frame_is_cut_into_its_pushes_in_frame_order() {
    let raw = Bytes::from_static(b"aaabbbbc");
    let pushes = split_stream_frame(frame(&[(0, 3), (1, 4), (2, 0), (3, 1)]), &raw).unwrap();
    let cut: Vec<(u32, &[u8])> = pushes
        .iter()
        .map(|(push, records)| (push.partition, records.as_ref()))
        .collect();
    assert_eq!(
        cut,
        [(0, &b"aaa"[..]), (1, b"bbbb"), (2, b""), (3, b"c")],
        "each push gets its own bytes, in frame order"
    );
    let answers: Vec<ReplicaPushResponse> = (0..4)
        .map(|_| push_refusal(ErrorCode::None, String::new()))
        .collect();
    let answer = stream_answer(answers);
    assert_eq!(answer.error_code, ErrorCode::None.code());
    assert_eq!(answer.answers.len(), 4);
}

#[test]
fn a_stream_frame_whose_lengths_do_not_add_up_is_refused_whole() {
    for pushes in [&[(0, 3), (1, 4)][..], &[(0, 1)], &[(0, 100)]] {
        let refused = split_stream_frame(frame(pushes), &Bytes::from_static(b"abcde"))
            .expect_err("lengths that do not add up");
        assert_eq!(
            refused.error_code,
            ErrorCode::InvalidRequest.code(),
            "{pushes:?}"
        );
        assert!(refused.answers.is_empty());
    }
    let too_many = vec![(0, 0); PUSHES_PER_FRAME_MAX + 1];
    let refused = split_stream_frame(frame(&too_many), &Bytes::new()).expect_err("too many");
    assert_eq!(refused.error_code, ErrorCode::InvalidRequest.code());
}
