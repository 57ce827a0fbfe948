//! AlterUsers: create a user or change its password, or delete it.
//!
//! The client derives the salted keys (RFC 5802 §3, see
//! [`crate::sasl::scram::StoredCredential`]) and sends only those: a
//! password never reaches a broker. The broker forwards the change to the
//! controller leader, which replicates it; every broker then checks logins
//! against it, and closes the connections of a deleted user, or of one
//! whose password changed, within a second.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One mechanism's salted keys.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ScramCredentialEntry {
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    /// The per-user random salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations (at least 4,096).
    pub iterations: u32,
    /// `H(ClientKey)`.
    pub stored_key: Vec<u8>,
    /// `ServerKey`.
    pub server_key: Vec<u8>,
}

/// What to do to the user. The tags are part of the protocol.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
#[repr(u8)]
pub enum UserChange {
    /// Create it, or replace its credentials (one per mechanism).
    Put {
        /// The salted keys.
        credentials: Vec<ScramCredentialEntry>,
    } = 0,
    /// Delete it.
    Delete = 1,
}

/// One change to one user.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterUsersRequest {
    /// The user.
    pub name: String,
    /// The change.
    pub change: UserChange,
}

/// The change's outcome, once every broker can see it... or at least the
/// answering one: it waits until its own metadata shows the change.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterUsersResponse {
    /// `NONE` (0), `INVALID_REQUEST` for a bad name or credential,
    /// `USER_NOT_FOUND` for deleting an unknown user, or a controller
    /// error (`NOT_CONTROLLER`, retriable).
    pub error_code: u16,
    /// Detail for people.
    pub error_message: Option<String>,
    /// With `Put` and `NONE`: whether the user is new (else its password
    /// changed).
    pub created: bool,
}

api!(ApiKey::AlterUsers, AlterUsersRequest => AlterUsersResponse);
no_raw_section!(
    AlterUsersRequest,
    ArchivedAlterUsersRequest,
    AlterUsersResponse,
    ArchivedAlterUsersResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, archived_tag, few, name, noise, optional_name,
        round_trip_request, round_trip_response,
    };

    pub(crate) fn credential() -> impl Strategy<Value = ScramCredentialEntry> {
        (
            name(),
            few(any::<u8>()),
            any::<u32>(),
            few(any::<u8>()),
            few(any::<u8>()),
        )
            .prop_map(|(mechanism, salt, iterations, stored_key, server_key)| {
                ScramCredentialEntry {
                    mechanism,
                    salt,
                    iterations,
                    stored_key,
                    server_key,
                }
            })
    }

    pub(crate) fn request() -> impl Strategy<Value = AlterUsersRequest> {
        let change = prop_oneof![
            few(credential()).prop_map(|credentials| UserChange::Put { credentials }),
            Just(UserChange::Delete),
        ];
        (name(), change).prop_map(|(name, change)| AlterUsersRequest { name, change })
    }

    pub(crate) fn response() -> impl Strategy<Value = AlterUsersResponse> {
        (any::<u16>(), optional_name(), any::<bool>()).prop_map(
            |(error_code, error_message, created)| AlterUsersResponse {
                error_code,
                error_message,
                created,
            },
        )
    }

    #[test]
    fn change_tags_are_pinned() {
        let put = UserChange::Put {
            credentials: Vec::new(),
        };
        assert_eq!(archived_tag(&put), 0);
        assert_eq!(archived_tag(&UserChange::Delete), 1);
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
