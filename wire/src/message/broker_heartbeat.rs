//! BrokerHeartbeat: a registered broker's periodic liveness signal to the
//! controller leader.
//!
//! Inter-broker: spoken by brokers to the controller, never by clients.
//!
//! Two kinds of fencing are kept apart. `fenced: true` with `NONE` means the
//! broker is registered but may not lead or receive new replicas yet (for
//! example it has not caught up with the metadata); it keeps heartbeating and
//! is unfenced by a later answer. `BROKER_FENCED` means the controller fenced
//! the broker for missing its heartbeats; it registers again.
//! `STALE_BROKER_INCARNATION` means a newer process of the same node
//! registered; this one must stop.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// A broker's liveness signal.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerHeartbeatRequest {
    /// The broker's node id.
    pub node_id: u32,
    /// The incarnation this process registered with.
    pub incarnation: u64,
    /// The newest metadata version this broker has applied, so that the
    /// controller can keep a broker fenced until it has caught up.
    pub metadata_version: u64,
}

/// Whether the broker is still registered, and whether it is fenced.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerHeartbeatResponse {
    /// `NONE` (0); `NOT_CONTROLLER` (retry at `leader_hint`),
    /// `BROKER_FENCED` (register again), `STALE_BROKER_INCARNATION` (stop), …
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// With `NONE`: whether the broker is fenced (registered, but it leads
    /// nothing and gets no new replicas until a later answer says `false`).
    pub fenced: bool,
    /// With `NOT_CONTROLLER`: node id of the controller leader, if the
    /// answering voter knows it.
    pub leader_hint: Option<u32>,
}

api!(ApiKey::BrokerHeartbeat, BrokerHeartbeatRequest => BrokerHeartbeatResponse);
no_raw_section!(
    BrokerHeartbeatRequest,
    ArchivedBrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    ArchivedBrokerHeartbeatResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, noise, optional_name, round_trip_request, round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = BrokerHeartbeatRequest> {
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(node_id, incarnation, metadata_version)| BrokerHeartbeatRequest {
                node_id,
                incarnation,
                metadata_version,
            },
        )
    }

    pub(crate) fn response() -> impl Strategy<Value = BrokerHeartbeatResponse> {
        (
            any::<u16>(),
            optional_name(),
            any::<bool>(),
            any::<Option<u32>>(),
        )
            .prop_map(|(error_code, error_message, fenced, leader_hint)| {
                BrokerHeartbeatResponse {
                    error_code,
                    error_message,
                    fenced,
                    leader_hint,
                }
            })
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_bytes_never_panic(q in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }
    }
}
