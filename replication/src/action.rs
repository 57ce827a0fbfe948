//! The work a replica asks its shell to do, in order.

use corelog_wire::types::{LeaderEpoch, Offset};

use crate::ids::ReplicaId;
use crate::message::{Batch, Push, PushAck, QueryAnswer};
use crate::meta::ReplicaMeta;

/// One step of work for the shell. A call returns a `Vec<Action>`; the shell
/// carries them out in order, and an action that changes durable state
/// (`Persist`, `Truncate`, `Reset`) is durable before the shell acts on the
/// next one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write this metadata durably (atomically) before acting on anything
    /// after it, then call [`crate::Replica::on_persisted`] with it.
    Persist(ReplicaMeta),
    /// Leader only: append the epoch-start marker, a control batch of one
    /// record stamped `epoch`, at the log end, then call
    /// [`crate::Replica::on_local_append`] with it. Writes are accepted once
    /// it is appended (and the leadership's `Persist` is durable).
    AppendMarker {
        /// The new leader epoch.
        epoch: LeaderEpoch,
    },
    /// Leader only: read whole batches of the local log from `push.start`,
    /// at most `max_bytes` of them but at least one if there is any
    /// (`max_bytes == 0`: none, the push is a heartbeat or a probe), put them
    /// in `push.batches`, send the push to `to`, and report the end sent with
    /// [`crate::Replica::on_push_sent`].
    SendPush {
        /// The follower.
        to: ReplicaId,
        /// The push, complete but for its batches.
        push: Push,
        /// The byte budget for the batches.
        max_bytes: u64,
    },
    /// Follower only: append these batches at the log end (unsynced), then
    /// fsync as usual and report with
    /// [`crate::Replica::on_local_durable`].
    Append {
        /// Contiguous batches starting at the current log end.
        batches: Vec<Batch>,
    },
    /// Follower only: cut the log to end at `to`, durably, before the next
    /// action. A fsync that was in flight across the cut covers at most
    /// `to`.
    Truncate {
        /// The new log end. Never below the high watermark (asserted).
        to: Offset,
    },
    /// Follower only: discard the whole log, durably, and restart it empty
    /// at `log_start` (catch-up from below the leader's retention).
    Reset {
        /// The new log start and end.
        log_start: Offset,
    },
    /// Send an acknowledgement to the leader.
    SendAck {
        /// The leader.
        to: ReplicaId,
        /// The acknowledgement.
        ack: PushAck,
    },
    /// Send the answer to the controller.
    SendAnswer {
        /// The answer.
        answer: QueryAnswer,
    },
    /// The high watermark rose to this offset: records below it are
    /// committed (readable; on the leader, acknowledgeable to producers).
    HighWatermark(Offset),
    /// This replica stopped leading `epoch`: fail pending appends with a
    /// retriable not-leader error and refuse new ones.
    StepDown {
        /// The epoch it led.
        epoch: LeaderEpoch,
    },
}
