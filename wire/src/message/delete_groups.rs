//! DeleteGroups: forget groups without active members, with their committed
//! offsets. Never deletes topic data (C6). A group with members is refused
//! with `GROUP_NOT_EMPTY`.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Deletes groups.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeleteGroupsRequest {
    /// Group ids.
    pub groups: Vec<String>,
}

/// The outcome for one group.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct GroupResult {
    /// Group id, as in the request.
    pub group: String,
    /// `NONE` (0), or for example `GROUP_NOT_EMPTY`, `UNKNOWN_GROUP` or
    /// `NOT_COORDINATOR`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
}

/// One result per requested group.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeleteGroupsResponse {
    /// Results, in request order.
    pub results: Vec<GroupResult>,
}

api!(ApiKey::DeleteGroups, DeleteGroupsRequest => DeleteGroupsResponse);
no_raw_section!(
    DeleteGroupsRequest,
    ArchivedDeleteGroupsRequest,
    DeleteGroupsResponse,
    ArchivedDeleteGroupsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = DeleteGroupsRequest> {
        few(name()).prop_map(|groups| DeleteGroupsRequest { groups })
    }

    pub(crate) fn response() -> impl Strategy<Value = DeleteGroupsResponse> {
        let result = (name(), any::<u16>(), optional_name()).prop_map(
            |(group, error_code, error_message)| GroupResult {
                group,
                error_code,
                error_message,
            },
        );
        few(result).prop_map(|results| DeleteGroupsResponse { results })
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
