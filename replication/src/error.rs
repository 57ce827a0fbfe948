//! Operating errors of the replication layer, kept apart from bugs (which
//! are assertions, see the crate docs) and from the wire error codes (which
//! the broker maps these to).

use corelog_wire::types::{LeaderEpoch, Offset};

use crate::ids::{PartitionKey, ReplicaId};

/// A request the replica state machine refused. None of these change state:
/// the replica is exactly as it was before the call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplicationError {
    /// The epoch is below what this replica has promised. The sender is
    /// stale; the broker answers `FENCED_LEADER_EPOCH`.
    #[error("epoch {epoch} is fenced: this replica promised epoch {fenced_epoch}")]
    Fenced {
        /// The epoch of the refused request.
        epoch: LeaderEpoch,
        /// The epoch this replica has promised.
        fenced_epoch: LeaderEpoch,
    },
    /// This replica already led `epoch` (possibly before a restart) and may
    /// not lead it again: its unsynced tail from that term may be gone while
    /// followers still hold it, and a second term under the same epoch would
    /// write different records at the same offsets. The controller must
    /// elect again with a new epoch.
    #[error("this replica already led epoch {epoch}; a new epoch is needed")]
    AlreadyLed {
        /// The epoch that was asked for again.
        epoch: LeaderEpoch,
    },
    /// Two different replicas claim leadership of the same epoch. The
    /// controller never does this; seeing it means a bug above this layer.
    #[error("replica {claimed} claims epoch {epoch}, already led by {known}")]
    ConflictingLeader {
        /// The contested epoch.
        epoch: LeaderEpoch,
        /// The leader this replica knows for the epoch.
        known: ReplicaId,
        /// The other claimant.
        claimed: ReplicaId,
    },
    /// Asked to lead `epoch`, but the log already holds records of that
    /// epoch, which only another leader can have written.
    #[error("the log already holds records of epoch {epoch}")]
    EpochInLog {
        /// The epoch asked for.
        epoch: LeaderEpoch,
    },
    /// The replica is not a member of the replica set it was given.
    #[error("replica {replica} is not in the replica set")]
    NotInReplicaSet {
        /// This replica.
        replica: ReplicaId,
    },
    /// The message is for another partition.
    #[error("message for partition {got} delivered to partition {expected}")]
    WrongPartition {
        /// This replica's partition.
        expected: PartitionKey,
        /// The partition the message names.
        got: PartitionKey,
    },
    /// Recovery found a log whose last record's epoch disagrees with the
    /// persisted epoch history: the metadata or the log is damaged. The
    /// broker fences the replica and repairs it from a healthy one.
    #[error("log ends at {log_end} with epoch {log_epoch:?}, history says {history_epoch:?}")]
    HistoryMismatch {
        /// The recovered log end.
        log_end: Offset,
        /// The epoch of the last record according to the log.
        log_epoch: Option<LeaderEpoch>,
        /// The epoch of the last record according to the history.
        history_epoch: Option<LeaderEpoch>,
    },
    /// The persisted history names an epoch above the persisted fence,
    /// which the state machine never writes.
    #[error("history reaches epoch {history_epoch} above the fence {fenced_epoch}")]
    HistoryAboveFence {
        /// The last epoch of the history.
        history_epoch: LeaderEpoch,
        /// The persisted fence.
        fenced_epoch: LeaderEpoch,
    },
    /// The recovered log bounds are inverted.
    #[error("recovered log start {log_start} is after its end {log_end}")]
    BadLogBounds {
        /// The recovered log start.
        log_start: Offset,
        /// The recovered log end.
        log_end: Offset,
    },
}

/// Why an epoch history could not be built or extended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// Epochs must strictly increase along the history.
    #[error("epoch {epoch} does not follow epoch {last}")]
    EpochNotIncreasing {
        /// The last epoch in the history.
        last: LeaderEpoch,
        /// The epoch that was to be added.
        epoch: LeaderEpoch,
    },
    /// Start offsets must not decrease along the history.
    #[error("start offset {start} is before the previous start {last_start}")]
    StartDecreasing {
        /// The last start offset in the history.
        last_start: Offset,
        /// The start that was to be added.
        start: Offset,
    },
}

/// Why persisted replica metadata could not be decoded. The bytes are
/// damaged or not ours; the broker fences the replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the fixed fields need.
    #[error("{len} bytes is too short for replica metadata")]
    Truncated {
        /// The length that was given.
        len: usize,
    },
    /// The magic number is not ours.
    #[error("bad magic {found:#010x}")]
    BadMagic {
        /// The four bytes found, as a little-endian number.
        found: u32,
    },
    /// A format version this build does not know.
    #[error("unknown format version {version}")]
    UnknownVersion {
        /// The version byte found.
        version: u8,
    },
    /// The checksum does not match the contents.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The CRC32C stored in the bytes.
        stored: u32,
        /// The CRC32C of the contents.
        computed: u32,
    },
    /// The entry count does not match the length.
    #[error("{count} entries do not fit {len} bytes")]
    BadLength {
        /// The entry count read.
        count: u32,
        /// The total length given.
        len: usize,
    },
    /// A flag byte other than 0 or 1.
    #[error("bad flag byte {byte}")]
    BadFlag {
        /// The byte read.
        byte: u8,
    },
    /// The entries break the history's ordering rules.
    #[error("invalid history: {0}")]
    History(#[from] HistoryError),
}
