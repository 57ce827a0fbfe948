//! The replication messages on the wire: `ReplicaPush` (alone, or many in
//! one `ReplicaStream` frame) and `ReplicaQuery` with their answers, as
//! `corelog_wire` encodes them, to and from this crate's [`Push`],
//! [`PushAck`], [`Query`] and [`QueryAnswer`]. Everything a peer sends is
//! checked here or by the state machine, never trusted: bytes come in,
//! typed values or typed errors ([`ProtocolError`], [`Refusal`]) go out, and
//! the broker's shell only carries them.
//!
//! A push's batches travel in the request's raw section exactly as the
//! leader stored them; the receiver cuts them apart again by their headers
//! (checking each one's CRC once, here), so nothing but the bytes crosses
//! the wire for them.

use bytes::Bytes;
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::replica_push::{
    PushResult as WirePushResult, ReplicaPushRequest, ReplicaPushResponse,
};
use corelog_wire::message::replica_query::{
    QueryResult as WireQueryResult, ReplicaQueryRequest, ReplicaQueryResponse,
};
use corelog_wire::message::replica_stream::{
    PUSHES_PER_FRAME_MAX, ReplicaStreamRequest, ReplicaStreamResponse,
};
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId};

use crate::error::ProtocolError;
use crate::ids::ReplicaId;
use crate::message::{Batch, Push, PushAck, PushResult, Query, QueryAnswer, QueryResult};

/// A peer's error answer instead of an acknowledgement: it is not a replica
/// of the partition, or it refused the message (fenced after an I/O
/// failure, malformed, not open yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    /// The peer's error code.
    pub code: ErrorCode,
    /// Its message.
    pub message: String,
}

impl Refusal {
    fn from_answer(error_code: u16, error_message: Option<String>) -> Self {
        Self {
            code: ErrorCode::from_code(error_code).unwrap_or(ErrorCode::UnknownServerError),
            message: error_message.unwrap_or_default(),
        }
    }

    fn not_replica() -> Self {
        Self {
            code: ErrorCode::UnknownTopicOrPartition,
            message: "the broker holds no replica of the partition".to_owned(),
        }
    }
}

impl Push {
    /// The push as a `ReplicaPush` request; its raw section is the push's
    /// batches' bytes, one after another.
    #[must_use]
    pub fn to_wire(&self) -> ReplicaPushRequest {
        let raw_len: usize = self.batches.iter().map(|batch| batch.bytes.len()).sum();
        ReplicaPushRequest {
            topic_id: self.partition.topic_id,
            partition: self.partition.partition,
            epoch: self.epoch.0,
            leader: self.leader.0,
            start: self.start.0,
            prev_epoch: self.prev_epoch.map(|epoch| epoch.0),
            // Truncation is the follower's decision from its epoch history
            // (see the crate docs): never sent, ignored when received.
            truncate_to: None,
            reset_to: self.reset_to.map(|offset| offset.0),
            hw: self.hw.0,
            log_start: self.log_start.0,
            records_len: u32::try_from(raw_len).unwrap_or(u32::MAX),
        }
    }

    /// A received `ReplicaPush` with its raw section: the batches cut apart
    /// by their headers, each checked whole (structure, bounds, CRC) and
    /// stamped with a leader epoch, and the push's shape checked
    /// ([`Push::check_shape`]). What it returns is safe to hand to the state
    /// machine and, batch by batch, to the log.
    ///
    /// # Errors
    /// [`ProtocolError::BadBatch`] or [`ProtocolError::UnstampedBatch`] for
    /// bytes that are not whole, valid, stamped batches; the shape's errors.
    pub fn from_wire(
        request: &ReplicaPushRequest,
        raw: Bytes,
        limits: &BatchLimits,
    ) -> Result<Push, ProtocolError> {
        let mut batches = Vec::new();
        for found in batch::batches(&raw, limits) {
            let found = found.map_err(|error| ProtocolError::BadBatch {
                start: Offset(request.start),
                error,
            })?;
            let base = found.header.base_offset;
            let epoch = found
                .header
                .leader_epoch()
                .ok_or(ProtocolError::UnstampedBatch { base })?;
            batches.push(Batch {
                base,
                last: found.header.last_offset(),
                epoch,
                bytes: raw.slice_ref(found.bytes),
            });
        }
        let push = Push {
            partition: PartitionId {
                topic_id: request.topic_id,
                partition: request.partition,
            },
            epoch: LeaderEpoch(request.epoch),
            leader: ReplicaId(request.leader),
            start: Offset(request.start),
            prev_epoch: request.prev_epoch.map(LeaderEpoch),
            reset_to: request.reset_to.map(Offset),
            hw: Offset(request.hw),
            log_start: Offset(request.log_start),
            batches,
        };
        push.check_shape()?;
        Ok(push)
    }
}

impl PushAck {
    /// A follower's answer to a push.
    #[must_use]
    pub fn to_wire(&self) -> ReplicaPushResponse {
        let result = match self.result {
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

    /// The answer of follower `to` to a push of `partition` in `epoch`, as
    /// the state machine's acknowledgement (which
    /// [`crate::Replica::on_push_ack`] checks against the leader's log).
    ///
    /// # Errors
    /// [`Refusal`] for an error answer or "not a replica".
    pub fn from_wire(
        to: ReplicaId,
        partition: PartitionId,
        epoch: LeaderEpoch,
        response: ReplicaPushResponse,
    ) -> Result<PushAck, Refusal> {
        if response.error_code != ErrorCode::None.code() {
            return Err(Refusal::from_answer(
                response.error_code,
                response.error_message,
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
            WirePushResult::NotReplica => return Err(Refusal::not_replica()),
        };
        Ok(PushAck {
            partition,
            epoch,
            from: to,
            result,
        })
    }
}

/// A refused push: an error answer instead of an acknowledgement.
#[must_use]
pub fn push_refusal(code: ErrorCode, message: String) -> ReplicaPushResponse {
    ReplicaPushResponse {
        error_code: code.code(),
        error_message: Some(message),
        result: WirePushResult::NotReplica,
    }
}

impl Query {
    /// A received `ReplicaQuery`.
    #[must_use]
    pub fn from_wire(request: &ReplicaQueryRequest) -> Query {
        Query {
            partition: PartitionId {
                topic_id: request.topic_id,
                partition: request.partition,
            },
            new_epoch: LeaderEpoch(request.new_epoch),
        }
    }

    /// The query as a `ReplicaQuery` request.
    #[must_use]
    pub fn to_wire(&self) -> ReplicaQueryRequest {
        ReplicaQueryRequest {
            topic_id: self.partition.topic_id,
            partition: self.partition.partition,
            new_epoch: self.new_epoch.0,
        }
    }
}

impl QueryAnswer {
    /// A replica's answer to an election query.
    #[must_use]
    pub fn to_wire(&self) -> ReplicaQueryResponse {
        let result = match self.result {
            QueryResult::State {
                last_epoch,
                log_end,
            } => WireQueryResult::State {
                last_epoch: last_epoch.map(|epoch| epoch.0),
                log_end: log_end.0,
            },
            QueryResult::Fenced { fenced_epoch } => WireQueryResult::Fenced {
                fenced_epoch: fenced_epoch.0,
            },
        };
        ReplicaQueryResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            result,
        }
    }

    /// Replica `from`'s answer to the query of `partition` for `epoch`, as
    /// the election counts it.
    ///
    /// # Errors
    /// [`Refusal`] for an answer that does not count: an error code, or
    /// "not a replica".
    pub fn from_wire(
        partition: PartitionId,
        epoch: LeaderEpoch,
        from: ReplicaId,
        response: &ReplicaQueryResponse,
    ) -> Result<QueryAnswer, Refusal> {
        if response.error_code != ErrorCode::None.code() {
            return Err(Refusal::from_answer(
                response.error_code,
                response.error_message.clone(),
            ));
        }
        let result = match response.result {
            WireQueryResult::State {
                last_epoch,
                log_end,
            } => QueryResult::State {
                last_epoch: last_epoch.map(LeaderEpoch),
                log_end: Offset(log_end),
            },
            WireQueryResult::Fenced { fenced_epoch } => QueryResult::Fenced {
                fenced_epoch: LeaderEpoch(fenced_epoch),
            },
            WireQueryResult::NotReplica => return Err(Refusal::not_replica()),
        };
        Ok(QueryAnswer {
            partition,
            epoch,
            from,
            result,
        })
    }
}

/// A refused election query.
#[must_use]
pub fn query_refusal(code: ErrorCode, message: String) -> ReplicaQueryResponse {
    ReplicaQueryResponse {
        error_code: code.code(),
        error_message: Some(message),
        result: WireQueryResult::NotReplica,
    }
}

/// A frame of a leader's replication stream, cut into its pushes: each
/// push's request with its batches (a slice of `raw`, not a copy), in
/// frame order. Every length is checked before any push is handed out: a
/// frame is served whole or not at all.
///
/// # Errors
/// The answer refusing the frame (`INVALID_REQUEST`): more than
/// [`PUSHES_PER_FRAME_MAX`] pushes, or record lengths that do not add up
/// to the frame's bytes.
pub fn split_stream_frame(
    request: ReplicaStreamRequest,
    raw: &Bytes,
) -> Result<Vec<(ReplicaPushRequest, Bytes)>, ReplicaStreamResponse> {
    let refuse = |message: String| ReplicaStreamResponse {
        error_code: ErrorCode::InvalidRequest.code(),
        error_message: Some(message),
        answers: Vec::new(),
    };
    if request.pushes.len() > PUSHES_PER_FRAME_MAX {
        return Err(refuse(format!(
            "a frame of {} pushes; at most {PUSHES_PER_FRAME_MAX} are allowed",
            request.pushes.len()
        )));
    }
    let declared = request.pushes.iter().fold(0usize, |sum, push| {
        sum.saturating_add(push.records_len as usize)
    });
    if declared != raw.len() {
        return Err(refuse(format!(
            "the pushes declare {declared} record bytes, the frame carries {}",
            raw.len()
        )));
    }
    let mut start = 0usize;
    Ok(request
        .pushes
        .into_iter()
        .map(|push| {
            let end = start + push.records_len as usize;
            let records = raw.slice(start..end);
            start = end;
            (push, records)
        })
        .collect())
}

/// The answer to a frame whose pushes were answered `answers`, in frame
/// order.
#[must_use]
pub fn stream_answer(answers: Vec<ReplicaPushResponse>) -> ReplicaStreamResponse {
    ReplicaStreamResponse {
        error_code: ErrorCode::None.code(),
        error_message: None,
        answers,
    }
}

#[cfg(test)]
mod tests;
