//! Replication over the inter-broker RPC: [`PeerFrameCarrier`] carries a
//! shard's replication stream frames (`ReplicaStream`, see
//! [`super::stream`]) to followers, and the conversions here turn pushes and
//! their acknowledgements into wire messages and back (on the sending and on
//! the receiving broker). The
//! election queries' conversions, which the controller shares, are
//! `corelog_replication::wire`'s.
//!
//! A push's batches travel in the request's raw section exactly as the
//! leader stored them; the receiver splits them again from their headers,
//! so nothing but the bytes crosses the wire for them.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corelog_replication::{PartitionKey, Push, PushAck, PushResult, ReplicaId};
use corelog_wire::batch::BatchLimits;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::replica_push::{
    PushResult as WirePushResult, ReplicaPushRequest, ReplicaPushResponse,
};
use corelog_wire::message::replica_stream::{ReplicaStreamRequest, ReplicaStreamResponse};
use corelog_wire::types::{LeaderEpoch, Offset};
use futures::future::LocalBoxFuture;

use corelog_replication::wire::partition_key;

use super::stream::FrameCarrier;
use super::{ReplicaError, TransportError, batches};
use crate::peer::Peers;

/// How long a frame may go unanswered before the carrier gives up (the
/// state machines resend on their own timeouts meanwhile). Covers a
/// follower's fsync under load.
const FRAME_TIMEOUT: Duration = Duration::from_secs(5);

/// Finds a broker's address in the current metadata.
pub type ResolveBroker = Rc<dyn Fn(ReplicaId) -> Option<SocketAddr>>;

/// Replication stream frames over [`Peers`], as `ReplicaStream` requests.
pub struct PeerFrameCarrier {
    peers: Rc<Peers>,
    resolve: ResolveBroker,
}

impl std::fmt::Debug for PeerFrameCarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerFrameCarrier").finish_non_exhaustive()
    }
}

impl PeerFrameCarrier {
    /// Frames to the brokers `resolve` finds, over `peers`.
    #[must_use]
    pub fn new(peers: Rc<Peers>, resolve: ResolveBroker) -> Self {
        Self { peers, resolve }
    }
}

impl FrameCarrier for PeerFrameCarrier {
    fn carry(
        &self,
        to: ReplicaId,
        request: ReplicaStreamRequest,
        raw: Vec<Bytes>,
    ) -> LocalBoxFuture<'_, Result<ReplicaStreamResponse, String>> {
        Box::pin(async move {
            let addr =
                (self.resolve)(to).ok_or_else(|| "the broker is not in the metadata".to_owned())?;
            let parts: Vec<&[u8]> = raw.iter().map(|batch| &batch[..]).collect();
            self.peers
                .call_parts(addr, &request, &parts, FRAME_TIMEOUT)
                .await
                .map(|answer| answer.message)
                .map_err(|error| error.to_string())
        })
    }
}

/// A push as a `ReplicaPush` request; its raw section is the push's
/// batches' bytes, one after another.
#[must_use]
pub fn push_request(topic_id: u64, partition: u32, push: &Push) -> ReplicaPushRequest {
    let raw_len: usize = push.batches.iter().map(|batch| batch.bytes.len()).sum();
    ReplicaPushRequest {
        topic_id,
        partition,
        epoch: push.epoch.0,
        leader: push.leader.0,
        start: push.start.0,
        prev_epoch: push.prev_epoch.map(|epoch| epoch.0),
        // Truncation is the follower's decision from its epoch history.
        truncate_to: None,
        reset_to: push.reset_to.map(|offset| offset.0),
        hw: push.hw.0,
        log_start: push.log_start.0,
        records_len: u32::try_from(raw_len).unwrap_or(u32::MAX),
    }
}

/// A received `ReplicaPush` as the state machine's [`Push`]: the raw
/// section split into batches from their headers.
///
/// # Errors
/// [`ReplicaError::BadPush`] for bytes that are not whole, stamped batches.
pub fn push_from_wire(
    request: &ReplicaPushRequest,
    raw: Bytes,
    limits: &BatchLimits,
) -> Result<Push, ReplicaError> {
    // The CRCs are checked once, by `check_push`, before the state machine
    // sees the push.
    let batches = batches::split_trusted(&[raw], limits)
        .map_err(|error| ReplicaError::BadPush(error.to_string()))?;
    Ok(Push {
        partition: partition_key(request.topic_id, request.partition),
        epoch: LeaderEpoch(request.epoch),
        leader: ReplicaId(request.leader),
        start: Offset(request.start),
        prev_epoch: request.prev_epoch.map(LeaderEpoch),
        reset_to: request.reset_to.map(Offset),
        hw: Offset(request.hw),
        log_start: Offset(request.log_start),
        batches,
    })
}

/// A follower's answer to a push.
#[must_use]
pub fn ack_to_wire(ack: &PushAck) -> ReplicaPushResponse {
    let result = match ack.result {
        PushResult::Ok {
            durable_end,
            log_end,
        } => WirePushResult::Ok {
            durable_end: durable_end.0,
            log_end: log_end.0,
        },
        PushResult::Mismatch {
            last_epoch,
            log_end,
        } => WirePushResult::Mismatch {
            last_epoch: last_epoch.map(|epoch| epoch.0),
            log_end: log_end.0,
        },
        PushResult::Fenced { epoch } => WirePushResult::Fenced { epoch: epoch.0 },
    };
    ReplicaPushResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        result,
    }
}

/// A refusal of a push (or a query) as an error answer.
#[must_use]
pub fn push_refusal(code: ErrorCode, message: String) -> ReplicaPushResponse {
    ReplicaPushResponse {
        error_code: code.code(),
        error_message: Some(message),
        result: WirePushResult::NotReplica,
    }
}

/// A follower's answer to a push of `partition` in `epoch` (sent to `to`)
/// as the state machine's [`PushAck`].
///
/// # Errors
/// [`TransportError::Refused`] for an error answer.
pub fn ack_from_wire(
    to: ReplicaId,
    partition: PartitionKey,
    epoch: LeaderEpoch,
    response: ReplicaPushResponse,
) -> Result<PushAck, TransportError> {
    let refused = |code: ErrorCode, message: String| TransportError::Refused { to, code, message };
    if response.error_code != ErrorCode::None.code() {
        return Err(refused(
            ErrorCode::from_code(response.error_code).unwrap_or(ErrorCode::UnknownServerError),
            response.error_message.unwrap_or_default(),
        ));
    }
    let result = match response.result {
        WirePushResult::Ok {
            durable_end,
            log_end,
        } => PushResult::Ok {
            durable_end: Offset(durable_end),
            log_end: Offset(log_end),
        },
        WirePushResult::Mismatch {
            last_epoch,
            log_end,
        } => PushResult::Mismatch {
            last_epoch: last_epoch.map(LeaderEpoch),
            log_end: Offset(log_end),
        },
        WirePushResult::Fenced { epoch } => PushResult::Fenced {
            epoch: LeaderEpoch(epoch),
        },
        WirePushResult::NotReplica => {
            return Err(refused(
                ErrorCode::UnknownTopicOrPartition,
                "the broker holds no replica of the partition".to_owned(),
            ));
        }
    };
    Ok(PushAck {
        partition,
        epoch,
        from: to,
        result,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_cross_the_wire_unchanged() {
        let push = Push {
            partition: partition_key(2, 1),
            epoch: LeaderEpoch(4),
            leader: ReplicaId(1),
            start: Offset(10),
            prev_epoch: Some(LeaderEpoch(3)),
            reset_to: None,
            hw: Offset(8),
            log_start: Offset(0),
            batches: Vec::new(),
        };
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
                partition: push.partition,
                epoch: push.epoch,
                from: ReplicaId(2),
                result,
            };
            let back = ack_from_wire(ReplicaId(2), push.partition, push.epoch, ack_to_wire(&ack));
            assert_eq!(back, Ok(ack));
        }
        let refused = ack_from_wire(
            ReplicaId(2),
            push.partition,
            push.epoch,
            push_refusal(ErrorCode::StorageError, "fenced".to_owned()),
        );
        assert!(matches!(
            refused,
            Err(TransportError::Refused {
                code: ErrorCode::StorageError,
                ..
            })
        ));
    }

    /// A received push is cut apart by header before `check_push` runs, so
    /// a batch whose uncovered `base_offset` is negative or runs past the
    /// last offset must be refused there, not panic the follower's shard
    /// (issue 35, item 19).
    #[test]
    fn a_pushed_batch_whose_base_offset_overflows_is_refused_not_a_panic() {
        use corelog_wire::batch::{
            BatchBuilder, Compression, NewRecord, set_base_offset, set_leader_epoch,
        };
        for base_offset in [u64::MAX, u64::MAX - 1, 1 << 63, i64::MAX as u64] {
            let mut builder = BatchBuilder::new(Compression::None);
            for value in ["a", "b"] {
                builder
                    .push(&NewRecord {
                        value: Some(Bytes::from_static(value.as_bytes())),
                        ..NewRecord::default()
                    })
                    .expect("a record");
            }
            let mut batch = builder.build().expect("a batch").to_vec();
            set_base_offset(&mut batch, Offset(base_offset));
            set_leader_epoch(&mut batch, LeaderEpoch(3));
            let push = Push {
                partition: partition_key(9, 2),
                epoch: LeaderEpoch(3),
                leader: ReplicaId(1),
                start: Offset(base_offset),
                prev_epoch: None,
                reset_to: None,
                hw: Offset(0),
                log_start: Offset(0),
                batches: Vec::new(),
            };
            let mut request = push_request(9, 2, &push);
            request.records_len = u32::try_from(batch.len()).expect("a small batch");
            let received = std::panic::catch_unwind(|| {
                push_from_wire(&request, Bytes::from(batch), &BatchLimits::default())
            })
            .unwrap_or_else(|_| panic!("base offset {base_offset:#x} panicked the follower"));
            assert!(
                matches!(&received, Err(ReplicaError::BadPush(reason)) if reason.contains("base offset")),
                "base offset {base_offset:#x}: {received:?}"
            );
        }
    }

    #[test]
    fn a_push_request_keeps_its_fields() {
        let push = Push {
            partition: partition_key(9, 2),
            epoch: LeaderEpoch(6),
            leader: ReplicaId(3),
            start: Offset(100),
            prev_epoch: None,
            reset_to: Some(Offset(50)),
            hw: Offset(90),
            log_start: Offset(50),
            batches: Vec::new(),
        };
        let request = push_request(9, 2, &push);
        assert_eq!(request.records_len, 0);
        let back = push_from_wire(&request, Bytes::new(), &BatchLimits::default());
        assert_eq!(back.ok(), Some(push));
    }
}
