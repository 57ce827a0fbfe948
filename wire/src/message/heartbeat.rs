//! Heartbeat: keeps a group membership alive, and tells the member when the
//! group is rebalancing.
//!
//! A member that misses heartbeats for its session timeout is removed and its
//! partitions move. `REBALANCE_IN_PROGRESS` in the response tells the member
//! to send JoinGroup again to learn its new assignment.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// A member's periodic liveness signal.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct HeartbeatRequest {
    /// Group id.
    pub group: String,
    /// The member id from JoinGroup.
    pub member_id: String,
    /// The generation from JoinGroup.
    pub generation: i32,
}

/// Whether the membership is still current.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct HeartbeatResponse {
    /// `NONE` (0); `REBALANCE_IN_PROGRESS` (rejoin), `ILLEGAL_GENERATION`
    /// or `UNKNOWN_MEMBER_ID` (rejoin), `NOT_COORDINATOR`, …
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
}

api!(ApiKey::Heartbeat, HeartbeatRequest => HeartbeatResponse);
no_raw_section!(
    HeartbeatRequest,
    ArchivedHeartbeatRequest,
    HeartbeatResponse,
    ArchivedHeartbeatResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = HeartbeatRequest> {
        (name(), name(), any::<i32>()).prop_map(|(group, member_id, generation)| HeartbeatRequest {
            group,
            member_id,
            generation,
        })
    }

    pub(crate) fn response() -> impl Strategy<Value = HeartbeatResponse> {
        (any::<u16>(), optional_name()).prop_map(|(error_code, error_message)| HeartbeatResponse {
            error_code,
            error_message,
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
