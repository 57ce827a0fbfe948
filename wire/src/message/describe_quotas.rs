//! DescribeQuotas: the quotas of a cluster, all or one entity's.
//!
//! Version 1 ([`DescribeQuotasRequestV1`]) answers each quota with its
//! topic, partition and group limits ([`QuotaEntryV1`]); version 0 answers
//! without them, as before they existed.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One entity's limits; `None` is no limit.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct QuotaEntry {
    /// `user:NAME`, `user:*`, `ip:ADDRESS` or `ip:*`.
    pub entity: String,
    /// Produce request bytes per second.
    pub produce_bytes_per_second: Option<u64>,
    /// Fetch response bytes per second.
    pub fetch_bytes_per_second: Option<u64>,
    /// Percent of one shard's time spent handling the entity's requests.
    pub request_percent: Option<u32>,
    /// Open connections.
    pub connections: Option<u32>,
}

/// Every quota, or one entity's.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeQuotasRequest {
    /// `None`: every quota.
    pub entity: Option<String>,
}

/// The quotas.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeQuotasResponse {
    /// `NONE` (0), or `CLUSTER_ADMIN_REQUIRED`.
    pub error_code: u16,
    /// The quotas, in entity order.
    pub quotas: Vec<QuotaEntry>,
}

/// One entity's limits in version 1: [`QuotaEntry`]'s and how many
/// topics, partitions and consumer groups a principal may create; `None`
/// is no limit for a rate, and the default (the `user:*` entry's, else the
/// built-in one) for a topic, partition or group limit.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct QuotaEntryV1 {
    /// The entity and its rate and connection limits.
    pub quota: QuotaEntry,
    /// Topics the principal may own.
    pub topics: Option<u32>,
    /// Partitions the principal may own, over all its topics.
    pub partitions: Option<u32>,
    /// Consumer groups the principal may create per group coordinator.
    pub groups: Option<u32>,
}

/// [`DescribeQuotasRequest`] of version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeQuotasRequestV1 {
    /// `None`: every quota.
    pub entity: Option<String>,
}

/// [`DescribeQuotasResponse`] of version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeQuotasResponseV1 {
    /// `NONE` (0), or `CLUSTER_ADMIN_REQUIRED`.
    pub error_code: u16,
    /// The quotas, in entity order.
    pub quotas: Vec<QuotaEntryV1>,
}

api!(ApiKey::DescribeQuotas, DescribeQuotasRequest => DescribeQuotasResponse);
api!(ApiKey::DescribeQuotas, version 1, DescribeQuotasRequestV1 => DescribeQuotasResponseV1);
no_raw_section!(
    DescribeQuotasRequest,
    ArchivedDescribeQuotasRequest,
    DescribeQuotasResponse,
    ArchivedDescribeQuotasResponse,
    DescribeQuotasRequestV1,
    ArchivedDescribeQuotasRequestV1,
    DescribeQuotasResponseV1,
    ArchivedDescribeQuotasResponseV1,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn entry() -> impl Strategy<Value = QuotaEntry> {
        (
            name(),
            any::<Option<u64>>(),
            any::<Option<u64>>(),
            any::<Option<u32>>(),
            any::<Option<u32>>(),
        )
            .prop_map(|(entity, produce, fetch, request_percent, connections)| {
                QuotaEntry {
                    entity,
                    produce_bytes_per_second: produce,
                    fetch_bytes_per_second: fetch,
                    request_percent,
                    connections,
                }
            })
    }

    pub(crate) fn request() -> impl Strategy<Value = DescribeQuotasRequest> {
        optional_name().prop_map(|entity| DescribeQuotasRequest { entity })
    }

    pub(crate) fn response() -> impl Strategy<Value = DescribeQuotasResponse> {
        (any::<u16>(), few(entry()))
            .prop_map(|(error_code, quotas)| DescribeQuotasResponse { error_code, quotas })
    }

    pub(crate) fn entry_v1() -> impl Strategy<Value = QuotaEntryV1> {
        (
            entry(),
            any::<Option<u32>>(),
            any::<Option<u32>>(),
            any::<Option<u32>>(),
        )
            .prop_map(|(quota, topics, partitions, groups)| QuotaEntryV1 {
                quota,
                topics,
                partitions,
                groups,
            })
    }

    fn request_v1() -> impl Strategy<Value = DescribeQuotasRequestV1> {
        optional_name().prop_map(|entity| DescribeQuotasRequestV1 { entity })
    }

    fn response_v1() -> impl Strategy<Value = DescribeQuotasResponseV1> {
        (any::<u16>(), few(entry_v1()))
            .prop_map(|(error_code, quotas)| DescribeQuotasResponseV1 { error_code, quotas })
    }

    #[test]
    fn version_1_is_its_own_layout() {
        assert_eq!(
            <DescribeQuotasRequest as crate::message::Message>::API_VERSION,
            0
        );
        assert_eq!(
            <DescribeQuotasRequestV1 as crate::message::Message>::API_VERSION,
            1
        );
        assert!(ApiKey::DescribeQuotas.supports(0) && ApiKey::DescribeQuotas.supports(1));
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn version_1_round_trips(q in request_v1(), s in response_v1(), noise in noise()) {
            round_trip_request(&q, &[])?;
            round_trip_response(&s, &[])?;
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
