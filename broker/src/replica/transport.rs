//! How a leader's pushes reach its followers: a small trait, so that the
//! shell runs over the inter-broker RPC (`crate::peer`) in production and
//! over direct calls in tests.

use corelog_replication::{Push, PushAck, ReplicaId};
use corelog_wire::error::ErrorCode;
use futures::future::LocalBoxFuture;

/// Carries a push to a follower and brings back its acknowledgement.
///
/// Contract: the returned future resolves with the follower's answer to
/// this push (sent after the follower made the push's batches durable), or
/// with an error once the transport gives up (it must give up within a
/// bounded time: a deadline, as `crate::peer` calls have). The leader may
/// call `send_push` again for the same follower before an earlier future
/// resolved (pipelining); an implementation should deliver pushes to one
/// follower in the order of the calls where it can (one connection does),
/// but reordering, loss and duplication are safe: the state machine answers
/// them with mismatches and resends.
pub trait PushTransport {
    /// Sends `push` to `to`.
    fn send_push(
        &self,
        to: ReplicaId,
        push: Push,
    ) -> LocalBoxFuture<'_, Result<PushAck, TransportError>>;
}

/// Why a push got no acknowledgement. The leader does nothing on it: the
/// state machine resends after its resend timeout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The follower could not be reached, or did not answer in time.
    #[error("replica {to} unreachable: {reason}")]
    Unreachable {
        /// The follower.
        to: ReplicaId,
        /// Why.
        reason: String,
    },
    /// The follower answered with an error instead of an acknowledgement
    /// (it is not a replica of the partition, or it is fenced after an I/O
    /// failure).
    #[error("replica {to} refused the push: {code}: {message}")]
    Refused {
        /// The follower.
        to: ReplicaId,
        /// Its error code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
}
