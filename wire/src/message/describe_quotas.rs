//! DescribeQuotas: the quotas of a cluster, all or one entity's.

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

api!(ApiKey::DescribeQuotas, DescribeQuotasRequest => DescribeQuotasResponse);
no_raw_section!(
    DescribeQuotasRequest,
    ArchivedDescribeQuotasRequest,
    DescribeQuotasResponse,
    ArchivedDescribeQuotasResponse,
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
