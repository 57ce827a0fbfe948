//! AlterQuotas: set or remove one entity's quota. The broker forwards the
//! change to the controller leader and answers once its own metadata shows
//! it; every broker enforces the new limits from then on.
//!
//! Version 1 ([`AlterQuotasRequestV1`]) sets topic, partition and group
//! limits too, replacing all of the entity's limits; a version 0 `Set`
//! replaces the rate and connection limits and keeps the entity's topic,
//! partition and group limits, which its sender cannot see.

use rkyv::{Archive, Deserialize, Serialize};

use super::describe_quotas::{QuotaEntry, QuotaEntryV1};
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// What to do. The tags are part of the protocol.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
#[repr(u8)]
pub enum QuotaChange {
    /// Set the entity's limits, replacing the ones it had.
    Set(QuotaEntry) = 0,
    /// Remove the entity's quota (the default applies to it again).
    Remove {
        /// `user:NAME`, `user:*`, `ip:ADDRESS` or `ip:*`.
        entity: String,
    } = 1,
}

/// One change.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterQuotasRequest {
    /// The change.
    pub change: QuotaChange,
}

/// The change's outcome.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterQuotasResponse {
    /// `NONE` (0), `INVALID_REQUEST` for a malformed quota,
    /// `QUOTA_NOT_FOUND` for removing one that is not set,
    /// `CLUSTER_ADMIN_REQUIRED`, or a controller error (`NOT_CONTROLLER`,
    /// retriable).
    pub error_code: u16,
    /// Detail for people.
    pub error_message: Option<String>,
    /// With `Set` and `NONE`: whether the entity had no quota before.
    pub created: bool,
}

/// [`QuotaChange`] of version 1. The tags are part of the protocol.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
#[repr(u8)]
pub enum QuotaChangeV1 {
    /// Set all the entity's limits, replacing the ones it had.
    Set(QuotaEntryV1) = 0,
    /// Remove the entity's quota (the default applies to it again).
    Remove {
        /// `user:NAME`, `user:*`, `ip:ADDRESS` or `ip:*`.
        entity: String,
    } = 1,
}

/// [`AlterQuotasRequest`] of version 1; answered with an
/// [`AlterQuotasResponse`], as version 0 is.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AlterQuotasRequestV1 {
    /// The change.
    pub change: QuotaChangeV1,
}

impl crate::message::Message for AlterQuotasRequestV1 {
    const API_KEY: ApiKey = ApiKey::AlterQuotas;
    const API_VERSION: u16 = 1;
}

impl crate::message::Request for AlterQuotasRequestV1 {
    type Response = AlterQuotasResponse;
}

api!(ApiKey::AlterQuotas, AlterQuotasRequest => AlterQuotasResponse);
no_raw_section!(
    AlterQuotasRequestV1,
    ArchivedAlterQuotasRequestV1,
    AlterQuotasRequest,
    ArchivedAlterQuotasRequest,
    AlterQuotasResponse,
    ArchivedAlterQuotasResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::describe_quotas::tests::entry;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, archived_tag, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = AlterQuotasRequest> {
        prop_oneof![
            entry().prop_map(QuotaChange::Set),
            name().prop_map(|entity| QuotaChange::Remove { entity }),
        ]
        .prop_map(|change| AlterQuotasRequest { change })
    }

    pub(crate) fn response() -> impl Strategy<Value = AlterQuotasResponse> {
        (any::<u16>(), optional_name(), any::<bool>()).prop_map(
            |(error_code, error_message, created)| AlterQuotasResponse {
                error_code,
                error_message,
                created,
            },
        )
    }

    #[test]
    fn change_tags_are_pinned() {
        let entry = QuotaEntry {
            entity: "user:*".to_owned(),
            produce_bytes_per_second: Some(1),
            fetch_bytes_per_second: None,
            request_percent: None,
            connections: None,
        };
        assert_eq!(archived_tag(&QuotaChange::Set(entry)), 0);
        let remove = QuotaChange::Remove {
            entity: "user:*".to_owned(),
        };
        assert_eq!(archived_tag(&remove), 1);
    }

    fn request_v1() -> impl Strategy<Value = AlterQuotasRequestV1> {
        prop_oneof![
            crate::message::describe_quotas::tests::entry_v1().prop_map(QuotaChangeV1::Set),
            name().prop_map(|entity| QuotaChangeV1::Remove { entity }),
        ]
        .prop_map(|change| AlterQuotasRequestV1 { change })
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn version_1_round_trips(q in request_v1(), s in response(), noise in noise()) {
            round_trip_request(&q, &[])?;
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
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
