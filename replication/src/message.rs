//! The replication messages as plain Rust values. Their wire forms (the
//! inter-broker APIs) are in [`crate::wire`].

use bytes::Bytes;
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId};

use crate::error::ProtocolError;
use crate::ids::ReplicaId;

/// Where a batch sits in the log and which epoch wrote it: what the state
/// machine needs to know about a batch. The bytes stay with the shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMeta {
    /// The offset of the batch's first record.
    pub base: Offset,
    /// The offset of the batch's last record (`last >= base`).
    pub last: Offset,
    /// The leader epoch stamped on the batch.
    pub epoch: LeaderEpoch,
}

impl BatchMeta {
    /// The offset after the batch.
    #[must_use]
    pub fn end(&self) -> Offset {
        self.last.plus(1)
    }
}

/// A batch as it travels in a push: its place, its epoch and its bytes,
/// which are opaque here (the broker sends the stored RecordBatch bytes; the
/// simulator small fake payloads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The offset of the batch's first record.
    pub base: Offset,
    /// The offset of the batch's last record.
    pub last: Offset,
    /// The leader epoch stamped on the batch.
    pub epoch: LeaderEpoch,
    /// The batch as stored.
    pub bytes: Bytes,
}

impl Batch {
    /// The offset after the batch.
    #[must_use]
    pub fn end(&self) -> Offset {
        self.last.plus(1)
    }

    /// The batch without its bytes.
    #[must_use]
    pub fn meta(&self) -> BatchMeta {
        BatchMeta {
            base: self.base,
            last: self.last,
            epoch: self.epoch,
        }
    }
}

/// Leader to follower: records from `start`, plus the high watermark.
///
/// A push with no batches is a heartbeat or a probe: it still carries the
/// high watermark and still gets an acknowledgement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    /// The partition.
    pub partition: PartitionId,
    /// The sender's leader epoch.
    pub epoch: LeaderEpoch,
    /// The sender.
    pub leader: ReplicaId,
    /// The offset of the first batch (or, without batches, the point the
    /// push vouches for: the leader's log up to `start` is what
    /// `prev_epoch` describes).
    pub start: Offset,
    /// The epoch of the leader's record at `start - 1`; `None` when `start`
    /// is 0. The follower appends only when its own record there has the
    /// same epoch (log matching), or when it holds nothing below `start`.
    pub prev_epoch: Option<LeaderEpoch>,
    /// Catch-up from below retention: the follower discards its whole log
    /// and restarts it, empty, at this offset (the leader's log start).
    /// Sent when the follower's log ends below what the leader still has.
    pub reset_to: Option<Offset>,
    /// The leader's high watermark.
    pub hw: Offset,
    /// The leader's log start. Informational: the follower's own retention
    /// decides its log start; this lets it report how far behind it is.
    pub log_start: Offset,
    /// Whole batches from `start`, contiguous.
    pub batches: Vec<Batch>,
}

impl Push {
    /// The offset after the last batch, or `start` without batches.
    #[must_use]
    pub fn end(&self) -> Offset {
        self.batches
            .last()
            .map_or(self.start, |batch| batch.last.plus(1))
    }

    /// Checks what a push must be whatever the receiver's log holds: a
    /// reset starts where it resets to; batches are whole, contiguous from
    /// `start`, of the push's epoch or older, and their epochs never go
    /// back (from `prev_epoch` on). [`Replica::on_push`] runs it first.
    ///
    /// [`Replica::on_push`]: crate::Replica::on_push
    ///
    /// # Errors
    /// The first [`ProtocolError`] found.
    pub fn check_shape(&self) -> Result<(), ProtocolError> {
        if let Some(reset_to) = self.reset_to
            && reset_to != self.start
        {
            return Err(ProtocolError::ResetNotAtStart {
                reset_to,
                start: self.start,
            });
        }
        let mut expected = self.start;
        let mut previous = self.prev_epoch;
        for batch in &self.batches {
            if batch.base != expected || batch.last < batch.base {
                return Err(ProtocolError::NotContiguous {
                    base: batch.base,
                    last: batch.last,
                    expected,
                });
            }
            if batch.epoch > self.epoch {
                return Err(ProtocolError::BatchEpochAbovePush {
                    base: batch.base,
                    batch_epoch: batch.epoch,
                    push_epoch: self.epoch,
                });
            }
            if let Some(previous) = previous
                && batch.epoch < previous
            {
                return Err(ProtocolError::EpochGoesBack {
                    base: batch.base,
                    epoch: batch.epoch,
                    previous,
                });
            }
            previous = Some(batch.epoch);
            expected = Offset(batch.last.0.checked_add(1).ok_or(
                ProtocolError::OffsetOverflow {
                    base: batch.base,
                    last: batch.last,
                },
            )?);
        }
        Ok(())
    }
}

/// Follower to leader: the answer to a push, or (`Ok`) news of durability.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushAck {
    /// The partition.
    pub partition: PartitionId,
    /// The epoch of the push answered (for `Ok`, the epoch the follower
    /// follows). A leader ignores acknowledgements of other epochs.
    pub epoch: LeaderEpoch,
    /// The follower.
    pub from: ReplicaId,
    /// What happened.
    pub result: PushResult,
}

impl PushAck {
    /// Checks an acknowledgement that came back for a push sent to `to`:
    /// it names that replica, and is consistent ([`Self::check_consistent`]).
    ///
    /// # Errors
    /// [`ProtocolError::AckFromElsewhere`] or
    /// [`ProtocolError::AckDurablePastLogEnd`].
    pub fn check_against(&self, to: ReplicaId) -> Result<(), ProtocolError> {
        if self.from != to {
            return Err(ProtocolError::AckFromElsewhere {
                to,
                from: self.from,
            });
        }
        self.check_consistent()
    }

    /// Checks what an acknowledgement must be whatever the leader's log
    /// holds: an `Ok` counts no more durable than it matches.
    /// [`crate::Replica::on_push_ack`] runs it first.
    ///
    /// # Errors
    /// [`ProtocolError::AckDurablePastLogEnd`].
    pub fn check_consistent(&self) -> Result<(), ProtocolError> {
        if let PushResult::Ok {
            durable_end,
            log_end,
        } = self.result
            && durable_end > log_end
        {
            return Err(ProtocolError::AckDurablePastLogEnd {
                durable_end,
                log_end,
            });
        }
        Ok(())
    }
}

/// The outcome of a push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushResult {
    /// The follower's log matches the leader's up to `log_end`, and is
    /// durable up to `durable_end` (never above `log_end`). Only records
    /// the follower has checked against this leader are counted: a durable
    /// but divergent tail left by an older leader is not.
    Ok {
        /// Durable and matching end.
        durable_end: Offset,
        /// Matching end.
        log_end: Offset,
    },
    /// The push's `start`/`prev_epoch` do not match the follower's log.
    /// `(last_epoch, log_end)` describes a prefix of the follower's log at
    /// which the leader should try again: the leader answers with a push
    /// starting at `min(end of its largest epoch <= last_epoch, log_end)`.
    Mismatch {
        /// The epoch of the follower's record at `log_end - 1`.
        last_epoch: Option<LeaderEpoch>,
        /// The end of that prefix.
        log_end: Offset,
    },
    /// The follower has promised `epoch`, above the push's.
    Fenced {
        /// The follower's fenced epoch.
        epoch: LeaderEpoch,
    },
}

/// Controller to replica, during an election for `new_epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    /// The partition.
    pub partition: PartitionId,
    /// The epoch the controller will assign.
    pub new_epoch: LeaderEpoch,
}

/// Replica to controller: the answer to a [`Query`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryAnswer {
    /// The partition.
    pub partition: PartitionId,
    /// The `new_epoch` of the query answered. The election counts only
    /// answers to its own epoch: an answer to an earlier query promised
    /// less and may describe a log that has grown since (an addition to the
    /// spec's message; see the crate docs).
    pub epoch: LeaderEpoch,
    /// The replica answering.
    pub from: ReplicaId,
    /// Its state, or its refusal.
    pub result: QueryResult,
}

/// What a replica tells the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryResult {
    /// The replica has promised the queried epoch. Its durable log ends at
    /// `log_end` and the record at `log_end - 1` has `last_epoch`.
    State {
        /// The epoch of the last durable record.
        last_epoch: Option<LeaderEpoch>,
        /// The durable log end.
        log_end: Offset,
    },
    /// The replica had already promised `fenced_epoch`, at or above the
    /// queried epoch: the controller must query again with a higher epoch.
    Fenced {
        /// The replica's fenced epoch.
        fenced_epoch: LeaderEpoch,
    },
}
