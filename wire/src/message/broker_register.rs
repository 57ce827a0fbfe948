//! BrokerRegister: a broker announces itself to the controller leader when
//! its process starts.
//!
//! Inter-broker: spoken by brokers to the controller, never by clients.
//!
//! Registration records the broker's address, rack and shard count in the
//! metadata, with the incarnation of the process that registered. A newer
//! incarnation replaces an older one: the old process, if it still runs (a
//! hung process that came back, a second process started by mistake), is
//! answered `STALE_BROKER_INCARNATION` and must stop, so that two processes
//! never act as the same broker. The controller may keep a registered broker
//! fenced (no leadership, no new replicas) until its heartbeats show that it
//! has caught up with the metadata (see
//! [`broker_heartbeat`](super::broker_heartbeat)).

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Registers (or re-registers) a broker process.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerRegisterRequest {
    /// The broker's node id, from its configuration.
    pub node_id: u32,
    /// Host name or address clients and other brokers connect to.
    pub host: String,
    /// Port clients and other brokers connect to.
    pub port: u16,
    /// Failure-domain label; replicas of a partition are spread across racks.
    pub rack: Option<String>,
    /// How many shards (cores) the broker runs, for placing partitions on
    /// owner shards.
    pub shards: u16,
    /// Identifies this process start of the broker: different for every
    /// start and greater than the one before, so that the controller can tell
    /// a newer process from an older one.
    pub incarnation: u64,
}

/// The registration's outcome.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct BrokerRegisterResponse {
    /// `NONE` (0); `NOT_CONTROLLER` (retry at `leader_hint`),
    /// `STALE_BROKER_INCARNATION` (a newer process of this node registered:
    /// stop), `INVALID_REQUEST`, …
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// With `NOT_CONTROLLER`: node id of the controller leader, if the
    /// answering voter knows it.
    pub leader_hint: Option<u32>,
}

api!(ApiKey::BrokerRegister, BrokerRegisterRequest => BrokerRegisterResponse);
no_raw_section!(
    BrokerRegisterRequest,
    ArchivedBrokerRegisterRequest,
    BrokerRegisterResponse,
    ArchivedBrokerRegisterResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = BrokerRegisterRequest> {
        (
            any::<u32>(),
            name(),
            any::<u16>(),
            optional_name(),
            any::<u16>(),
            any::<u64>(),
        )
            .prop_map(|(node_id, host, port, rack, shards, incarnation)| {
                BrokerRegisterRequest {
                    node_id,
                    host,
                    port,
                    rack,
                    shards,
                    incarnation,
                }
            })
    }

    pub(crate) fn response() -> impl Strategy<Value = BrokerRegisterResponse> {
        (any::<u16>(), optional_name(), any::<Option<u32>>()).prop_map(
            |(error_code, error_message, leader_hint)| BrokerRegisterResponse {
                error_code,
                error_message,
                leader_hint,
            },
        )
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
