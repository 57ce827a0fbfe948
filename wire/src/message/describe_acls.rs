//! DescribeAcls: the access rules of a cluster, all or those matching a
//! filter.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One access rule, its kinds by their codes in [`crate::acl`].
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AclEntry {
    /// A principal's name, or `*` for every connection.
    pub principal: String,
    /// [`crate::acl::ResourceType`] code.
    pub resource_type: u8,
    /// [`crate::acl::PatternType`] code.
    pub pattern: u8,
    /// The resource name or prefix (`*` for the cluster).
    pub name: String,
    /// [`crate::acl::Operation`] code.
    pub operation: u8,
    /// [`crate::acl::Permission`] code.
    pub permission: u8,
}

/// Which rules to list: each field that is set must equal the rule's.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[rkyv(derive(Debug))]
pub struct DescribeAclsRequest {
    /// Only the rules of this principal (`*` lists the rules for everyone).
    pub principal: Option<String>,
    /// Only rules on this resource type (code).
    pub resource_type: Option<u8>,
    /// Only rules with this resource name or prefix.
    pub name: Option<String>,
}

/// The rules.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeAclsResponse {
    /// `NONE` (0), or `CLUSTER_ADMIN_REQUIRED` without
    /// `cluster-admin`.
    pub error_code: u16,
    /// The rules that match, in a stable order.
    pub acls: Vec<AclEntry>,
}

api!(ApiKey::DescribeAcls, DescribeAclsRequest => DescribeAclsResponse);
no_raw_section!(
    DescribeAclsRequest,
    ArchivedDescribeAclsRequest,
    DescribeAclsResponse,
    ArchivedDescribeAclsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn entry() -> impl Strategy<Value = AclEntry> {
        (
            name(),
            any::<u8>(),
            any::<u8>(),
            name(),
            any::<u8>(),
            any::<u8>(),
        )
            .prop_map(
                |(principal, resource_type, pattern, name, operation, permission)| AclEntry {
                    principal,
                    resource_type,
                    pattern,
                    name,
                    operation,
                    permission,
                },
            )
    }

    pub(crate) fn request() -> impl Strategy<Value = DescribeAclsRequest> {
        (
            optional_name(),
            prop::option::of(any::<u8>()),
            optional_name(),
        )
            .prop_map(|(principal, resource_type, name)| DescribeAclsRequest {
                principal,
                resource_type,
                name,
            })
    }

    pub(crate) fn response() -> impl Strategy<Value = DescribeAclsResponse> {
        (any::<u16>(), few(entry()))
            .prop_map(|(error_code, acls)| DescribeAclsResponse { error_code, acls })
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
