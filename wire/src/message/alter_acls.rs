//! AlterAcls: add or remove one access rule. The broker forwards the change
//! to the controller leader and answers once its own metadata shows it;
//! every broker decides requests by the new rules from then on, open
//! connections included.

use rkyv::{Archive, Deserialize, Serialize};

use super::describe_acls::AclEntry;
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// What to do with the rule. The tags are part of the protocol.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
#[repr(u8)]
pub enum AclChange {
    /// Add it (adding one that stands changes nothing).
    Add = 0,
    /// Remove it: it must stand exactly as given.
    Remove = 1,
}

/// One change to one rule.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterAclsRequest {
    /// Add or remove.
    pub change: AclChange,
    /// The rule.
    pub acl: AclEntry,
}

/// The change's outcome.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterAclsResponse {
    /// `NONE` (0), `INVALID_REQUEST` for a malformed rule,
    /// `ACL_NOT_FOUND` for removing one that does not stand,
    /// `CLUSTER_ADMIN_REQUIRED` without `cluster-admin`, or a
    /// controller error (`NOT_CONTROLLER`, retriable).
    pub error_code: u16,
    /// Detail for people.
    pub error_message: Option<String>,
    /// With `Add` and `NONE`: whether the rule is new.
    pub created: bool,
}

api!(ApiKey::AlterAcls, AlterAclsRequest => AlterAclsResponse);
no_raw_section!(
    AlterAclsRequest,
    ArchivedAlterAclsRequest,
    AlterAclsResponse,
    ArchivedAlterAclsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::describe_acls::tests::entry;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, archived_tag, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = AlterAclsRequest> {
        (
            prop_oneof![Just(AclChange::Add), Just(AclChange::Remove)],
            entry(),
        )
            .prop_map(|(change, acl)| AlterAclsRequest { change, acl })
    }

    pub(crate) fn response() -> impl Strategy<Value = AlterAclsResponse> {
        (any::<u16>(), optional_name(), any::<bool>()).prop_map(
            |(error_code, error_message, created)| AlterAclsResponse {
                error_code,
                error_message,
                created,
            },
        )
    }

    #[test]
    fn change_tags_are_pinned() {
        assert_eq!(archived_tag(&AclChange::Add), 0);
        assert_eq!(archived_tag(&AclChange::Remove), 1);
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
