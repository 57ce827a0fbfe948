//! Replication over the inter-broker RPC: [`PeerFrameCarrier`] carries a
//! shard's replication stream frames (`ReplicaStream`, see
//! [`super::stream`]) to followers. The messages' wire forms and their
//! checks are `corelog_replication::wire`'s.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corelog_replication::ReplicaId;
use corelog_wire::message::replica_stream::{ReplicaStreamRequest, ReplicaStreamResponse};
use futures::future::LocalBoxFuture;

use super::stream::FrameCarrier;
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
