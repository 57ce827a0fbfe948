//! DescribeUsers: the users a cluster knows, with the mechanisms and
//! iteration counts of their credentials; never a key or a salt.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Every user, or the named ones.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeUsersRequest {
    /// `None`: every user.
    pub names: Option<Vec<String>>,
}

/// One user.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct UserDescription {
    /// Its name.
    pub name: String,
    /// Its credentials' mechanisms (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub mechanisms: Vec<String>,
    /// Each credential's PBKDF2 iterations, in the same order.
    pub iterations: Vec<u32>,
}

/// The users, by name.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeUsersResponse {
    /// `NONE` (0).
    pub error_code: u16,
    /// The users found, in name order; a named user that does not exist is
    /// left out.
    pub users: Vec<UserDescription>,
}

api!(ApiKey::DescribeUsers, DescribeUsersRequest => DescribeUsersResponse);
no_raw_section!(
    DescribeUsersRequest,
    ArchivedDescribeUsersRequest,
    DescribeUsersResponse,
    ArchivedDescribeUsersResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, round_trip_request, round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = DescribeUsersRequest> {
        prop::option::of(few(name())).prop_map(|names| DescribeUsersRequest { names })
    }

    pub(crate) fn response() -> impl Strategy<Value = DescribeUsersResponse> {
        let user =
            (name(), few(name()), few(any::<u32>())).prop_map(|(name, mechanisms, iterations)| {
                UserDescription {
                    name,
                    mechanisms,
                    iterations,
                }
            });
        (any::<u16>(), few(user))
            .prop_map(|(error_code, users)| DescribeUsersResponse { error_code, users })
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
