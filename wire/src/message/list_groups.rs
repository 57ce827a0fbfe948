//! ListGroups: the consumer groups a coordinator knows, for `corelog group
//! list`. A client asks every broker (each coordinates some groups) and
//! merges the answers.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Lists groups.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListGroupsRequest {
    /// Only groups in one of these states (as [`GroupListing::state`]
    /// spells them); empty for every group.
    pub states: Vec<String>,
}

/// One group.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct GroupListing {
    /// Group id.
    pub group: String,
    /// The coordinator's name for the group's state, for example `Stable`,
    /// `Rebalancing` or `Empty`. Text, so that a new state does not need a
    /// new message version.
    pub state: String,
    /// How many members the group has.
    pub members: u32,
    /// The group's generation; `-1` for a group that never had members
    /// (offsets only).
    pub generation: i32,
}

/// The groups this broker coordinates.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListGroupsResponse {
    /// One entry per group.
    pub groups: Vec<GroupListing>,
}

api!(ApiKey::ListGroups, ListGroupsRequest => ListGroupsResponse);
no_raw_section!(
    ListGroupsRequest,
    ArchivedListGroupsRequest,
    ListGroupsResponse,
    ArchivedListGroupsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, round_trip_request, round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = ListGroupsRequest> {
        few(name()).prop_map(|states| ListGroupsRequest { states })
    }

    pub(crate) fn response() -> impl Strategy<Value = ListGroupsResponse> {
        let group = (name(), name(), any::<u32>(), any::<i32>()).prop_map(
            |(group, state, members, generation)| GroupListing {
                group,
                state,
                members,
                generation,
            },
        );
        few(group).prop_map(|groups| ListGroupsResponse { groups })
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
