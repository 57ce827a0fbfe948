//! FindCoordinator: which broker and shard coordinate a consumer group.
//!
//! The coordinator of group `g` is the leader of `__groups` partition
//! `xxh3_64(g) % N`, on that partition's owning shard (DESIGN §8). Clients
//! send every other group request there.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Asks for a group's coordinator.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FindCoordinatorRequest {
    /// Group id.
    pub group: String,
}

/// Where the group's coordinator is.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FindCoordinatorResponse {
    /// `NONE` (0), or for example `COORDINATOR_NOT_AVAILABLE` while
    /// `__groups` has no leader, or `INVALID_GROUP_ID`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// Node id of the coordinator.
    pub node_id: u32,
    /// Host name or address of the coordinator.
    pub host: String,
    /// Client port of the coordinator.
    pub port: u16,
    /// Shard that owns the group's `__groups` partition, for shard-aware
    /// clients.
    pub owner_shard: u16,
}

api!(ApiKey::FindCoordinator, FindCoordinatorRequest => FindCoordinatorResponse);
no_raw_section!(
    FindCoordinatorRequest,
    ArchivedFindCoordinatorRequest,
    FindCoordinatorResponse,
    ArchivedFindCoordinatorResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = FindCoordinatorRequest> {
        name().prop_map(|group| FindCoordinatorRequest { group })
    }

    pub(crate) fn response() -> impl Strategy<Value = FindCoordinatorResponse> {
        (
            any::<u16>(),
            optional_name(),
            any::<u32>(),
            name(),
            any::<u16>(),
            any::<u16>(),
        )
            .prop_map(
                |(error_code, error_message, node_id, host, port, owner_shard)| {
                    FindCoordinatorResponse {
                        error_code,
                        error_message,
                        node_id,
                        host,
                        port,
                        owner_shard,
                    }
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
