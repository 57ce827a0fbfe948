//! What a replicated partition's operations return when they fail, and the
//! wire code each failure travels as.

use std::path::PathBuf;
use std::time::Duration;

use corelog_replication::{ReplicationError, RoleView};
use corelog_wire::error::ErrorCode;
use corelog_wire::types::LeaderEpoch;

use crate::partition::PartitionError;
use corelog_storage::StorageError;

/// A failed replicated-partition operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    /// Produce on a replica that is not leading. The client refreshes
    /// metadata and retries on the leader.
    #[error("this replica is not the partition's leader (it is {role:?})")]
    NotLeader {
        /// What the replica is.
        role: RoleView,
    },
    /// The leader of `epoch` was elected a moment ago: it has not appended
    /// its epoch-start marker yet (writes), or not committed it (reads: its
    /// high watermark may still be below what readers saw). Retriable.
    #[error("the leader of epoch {epoch} was elected a moment ago and is not serving yet; retry")]
    LeaderNotReady {
        /// The epoch being taken.
        epoch: LeaderEpoch,
    },
    /// The replica stopped leading `epoch` before the append reached the
    /// high watermark: it may or may not survive; the producer retries on
    /// the new leader (an idempotent producer keeps its sequence).
    #[error("leadership of epoch {epoch} ended before the append was committed")]
    SteppedDown {
        /// The epoch that ended.
        epoch: LeaderEpoch,
    },
    /// A push's acknowledgement could not be produced because this replica
    /// stopped following while the push was being made durable. The leader
    /// sends again after its resend timeout.
    #[error("this replica stopped following while handling the push")]
    NotFollower,
    /// The append was not committed in time, and a majority of the replica
    /// set has been acknowledging recently: it is slow, not cut off.
    #[error("the append was not committed within {timeout:?}")]
    TimedOut {
        /// How long the produce waited.
        timeout: Duration,
    },
    /// The append was not committed in time, and fewer than a majority of
    /// the replica set acknowledged anything during the wait.
    #[error("the append was not committed within {timeout:?}: too few replicas are reachable")]
    NotEnoughReplicas {
        /// How long the produce waited.
        timeout: Duration,
    },
    /// The replication state machine refused the request; nothing changed.
    #[error("replication refused the request: {0}")]
    Refused(#[from] ReplicationError),
    /// The partition (batch checks, producer sequences, storage) failed.
    #[error("{0}")]
    Partition(#[from] PartitionError),
    /// The durable replica metadata is damaged or unreadable.
    #[error("replica metadata {}: {reason}", path.display())]
    Meta {
        /// The metadata file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An earlier failure (a metadata write, an append the state machine
    /// had already counted) left the disk and the state machine apart: the
    /// replica refuses everything until it is reopened, which recovers from
    /// what the disk really holds.
    #[error("replica fenced after a failure: {reason}; reopen it")]
    Broken {
        /// The failure.
        reason: String,
    },
}

impl From<StorageError> for ReplicaError {
    fn from(error: StorageError) -> Self {
        ReplicaError::Partition(PartitionError::from(error))
    }
}

impl ReplicaError {
    /// The wire code this failure travels as.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            ReplicaError::NotLeader { .. }
            | ReplicaError::SteppedDown { .. }
            | ReplicaError::NotFollower => ErrorCode::NotLeader,
            ReplicaError::LeaderNotReady { .. } => ErrorCode::LeaderNotAvailable,
            ReplicaError::TimedOut { .. } => ErrorCode::RequestTimedOut,
            ReplicaError::NotEnoughReplicas { .. } => ErrorCode::NotEnoughReplicas,
            ReplicaError::Refused(refused) => refused_code(refused),
            ReplicaError::Partition(error) => error.code,
            ReplicaError::Meta { .. } => ErrorCode::CorruptSegment,
            ReplicaError::Broken { .. } => ErrorCode::StorageError,
        }
    }
}

fn refused_code(error: &ReplicationError) -> ErrorCode {
    match error {
        ReplicationError::Fenced { .. } => ErrorCode::FencedLeaderEpoch,
        ReplicationError::WrongPartition { .. } => ErrorCode::UnknownTopicOrPartition,
        // The controller asked for something the replica cannot do; it
        // elects again with a new epoch.
        ReplicationError::AlreadyLed { .. }
        | ReplicationError::ConflictingLeader { .. }
        | ReplicationError::EpochInLog { .. }
        | ReplicationError::NotInReplicaSet { .. } => ErrorCode::InvalidRequest,
        // A peer sent what no correct replica sends.
        ReplicationError::Protocol(_) => ErrorCode::InvalidRequest,
        // The metadata and the log do not fit together: damage.
        ReplicationError::HistoryMismatch { .. }
        | ReplicationError::HistoryAboveFence { .. }
        | ReplicationError::BadLogBounds { .. } => ErrorCode::CorruptSegment,
    }
}

impl ReplicaError {
    /// The error as a client may read it: without the broker's paths or a
    /// fenced replica's cause, which the broker's log names (it logged them
    /// when the replica was fenced or its metadata failed).
    #[must_use]
    pub fn client_message(&self) -> String {
        match self {
            ReplicaError::Partition(inner) => inner.message.clone(),
            ReplicaError::Meta { .. } => {
                "the replica's metadata file is damaged or unreadable (the broker's log names it)"
                    .to_owned()
            }
            ReplicaError::Broken { .. } => {
                "this replica was fenced after a failure (the broker's log names it); another replica serves the partition"
                    .to_owned()
            }
            other => other.to_string(),
        }
    }
}

impl From<ReplicaError> for PartitionError {
    fn from(error: ReplicaError) -> Self {
        match error {
            ReplicaError::Partition(inner) => inner,
            other => PartitionError::new(other.code(), other.client_message()),
        }
    }
}
