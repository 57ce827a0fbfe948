//! Operating errors of the replication layer, kept apart from bugs (which
//! are assertions, see the crate docs) and from the wire error codes (which
//! the broker maps these to).

use corelog_wire::batch::BatchError;
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId};

use crate::ids::ReplicaId;

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
        expected: PartitionId,
        /// The partition the message names.
        got: PartitionId,
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
    /// A peer's message breaks the protocol (see [`ProtocolError`]).
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
}

/// A message from a peer (a leader's push, a follower's acknowledgement)
/// that no correct replica sends: malformed, or contradicting what the
/// protocol guarantees about this replica's log. Refused whole: the replica
/// is exactly as it was before the message, and the broker answers
/// `INVALID_REQUEST` (a push) or ignores it (an acknowledgement). A broken
/// or hostile peer must not stop this broker, so none of these is an
/// assertion.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A push's raw section is not whole, valid batches (structure,
    /// bounds, CRC).
    #[error("the batches of the push from {start}: {error}")]
    BadBatch {
        /// The push's start.
        start: Offset,
        /// The first problem found.
        error: BatchError,
    },
    /// A pushed batch carries no leader epoch: every batch of a replicated
    /// log is stamped.
    #[error("the batch at {base} has no leader epoch")]
    UnstampedBatch {
        /// The batch's first offset.
        base: Offset,
    },
    /// A reset push must start where it resets the log to.
    #[error("reset to {reset_to} but the push starts at {start}")]
    ResetNotAtStart {
        /// The push's reset point.
        reset_to: Offset,
        /// The push's start.
        start: Offset,
    },
    /// A push's batches must be whole and follow each other from its start.
    #[error("batch {base}..={last} where offset {expected} was expected")]
    NotContiguous {
        /// The batch's first offset.
        base: Offset,
        /// The batch's last offset.
        last: Offset,
        /// Where the batch should have started.
        expected: Offset,
    },
    /// A batch ends at the last representable offset: nothing could follow.
    #[error("batch {base}..={last} ends at the last offset there is")]
    OffsetOverflow {
        /// The batch's first offset.
        base: Offset,
        /// The batch's last offset.
        last: Offset,
    },
    /// A leader pushes only batches of its epoch or older.
    #[error("batch at {base} of epoch {batch_epoch} in a push of epoch {push_epoch}")]
    BatchEpochAbovePush {
        /// The batch's first offset.
        base: Offset,
        /// The batch's epoch.
        batch_epoch: LeaderEpoch,
        /// The push's epoch.
        push_epoch: LeaderEpoch,
    },
    /// Epochs never decrease along a log: a batch of an older epoch after
    /// a newer one (in the push, or after the record before it here).
    #[error("batch at {base} of epoch {epoch} follows a record of epoch {previous}")]
    EpochGoesBack {
        /// The batch's first offset.
        base: Offset,
        /// The batch's epoch.
        epoch: LeaderEpoch,
        /// The epoch of the record before it.
        previous: LeaderEpoch,
    },
    /// A batch begins below this replica's log start and ends at or after
    /// it: the leader's batch boundaries differ from this log's in the
    /// committed prefix, which every replica shares.
    #[error("batch {base}..={last} straddles the log start {log_start}")]
    StraddlesLogStart {
        /// The batch's first offset.
        base: Offset,
        /// The batch's last offset.
        last: Offset,
        /// This replica's log start.
        log_start: Offset,
    },
    /// A batch this log holds at its last offset but not at its first:
    /// batch boundaries that differ within one epoch.
    #[error("batch {base}..={last} of epoch {epoch} is held here only in part")]
    HeldInPart {
        /// The batch's first offset.
        base: Offset,
        /// The batch's last offset.
        last: Offset,
        /// The batch's epoch.
        epoch: LeaderEpoch,
    },
    /// A batch conflicts with records this replica holds as committed (below
    /// its high watermark) or already checked against this leader: taking
    /// it would truncate them.
    #[error("batch at {base} would truncate below {protected}, which is committed or checked")]
    TruncatesProtected {
        /// The conflicting batch's first offset.
        base: Offset,
        /// The end of the prefix that may not be cut.
        protected: Offset,
    },
    /// An acknowledgement counts more durable than its matching end.
    #[error("acknowledgement of durable end {durable_end} above its log end {log_end}")]
    AckDurablePastLogEnd {
        /// The claimed durable end.
        durable_end: Offset,
        /// The claimed log end.
        log_end: Offset,
    },
    /// An acknowledgement of this leader's epoch claims more than its log
    /// holds: no follower can have received it.
    #[error("{from} acknowledged {durable_end} past the leader's log end {log_end}")]
    AckPastLeaderLogEnd {
        /// The follower.
        from: ReplicaId,
        /// The claimed durable end.
        durable_end: Offset,
        /// The leader's log end.
        log_end: Offset,
    },
    /// An acknowledgement names another replica than the one the push went
    /// to.
    #[error("acknowledgement from {from} to a push sent to {to}")]
    AckFromElsewhere {
        /// Where the push went.
        to: ReplicaId,
        /// Who the acknowledgement names.
        from: ReplicaId,
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
