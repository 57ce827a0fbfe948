//! LeaveGroup: a member leaves on shutdown, so that its partitions move at
//! once instead of after its session timeout.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Leaves a group.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct LeaveGroupRequest {
    /// Group id.
    pub group: String,
    /// The member id from JoinGroup.
    pub member_id: String,
}

/// Whether the member left.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct LeaveGroupResponse {
    /// `NONE` (0), or for example `UNKNOWN_MEMBER_ID` (already removed) or
    /// `NOT_COORDINATOR`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
}

api!(ApiKey::LeaveGroup, LeaveGroupRequest => LeaveGroupResponse);
no_raw_section!(
    LeaveGroupRequest,
    ArchivedLeaveGroupRequest,
    LeaveGroupResponse,
    ArchivedLeaveGroupResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = LeaveGroupRequest> {
        (name(), name()).prop_map(|(group, member_id)| LeaveGroupRequest { group, member_id })
    }

    pub(crate) fn response() -> impl Strategy<Value = LeaveGroupResponse> {
        (any::<u16>(), optional_name()).prop_map(|(error_code, error_message)| LeaveGroupResponse {
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
