//! ApiVersions: the first request on every connection, telling each side
//! which versions of which APIs the other speaks.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Asks the broker which API versions it supports.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ApiVersionsRequest {
    /// Client software name, for the broker's logs and metrics.
    pub client_name: String,
    /// Client software version, for the broker's logs and metrics.
    pub client_version: String,
}

/// The versions of one API that the broker supports.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ApiVersionRange {
    /// The API's [`ApiKey`] number.
    pub api_key: u16,
    /// Oldest supported version.
    pub min_version: u16,
    /// Newest supported version.
    pub max_version: u16,
}

/// The broker's supported APIs.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ApiVersionsResponse {
    /// One entry per supported API.
    pub apis: Vec<ApiVersionRange>,
    /// Broker software version, for people.
    pub broker_version: String,
}

api!(ApiKey::ApiVersions, ApiVersionsRequest => ApiVersionsResponse);
no_raw_section!(
    ApiVersionsRequest,
    ArchivedApiVersionsRequest,
    ApiVersionsResponse,
    ArchivedApiVersionsResponse,
);

/// The API version ranges this build supports, one per [`ApiKey`], for the
/// ApiVersions response.
#[must_use]
pub fn supported_apis() -> Vec<ApiVersionRange> {
    ApiKey::ALL
        .iter()
        .map(|&key| {
            let range = key.supported_versions();
            ApiVersionRange {
                api_key: key.code(),
                min_version: range.min,
                max_version: range.max,
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, name, round_trip_request, round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = ApiVersionsRequest> {
        (name(), name()).prop_map(|(client_name, client_version)| ApiVersionsRequest {
            client_name,
            client_version,
        })
    }

    pub(crate) fn response() -> impl Strategy<Value = ApiVersionsResponse> {
        let range = (any::<u16>(), any::<u16>(), any::<u16>()).prop_map(
            |(api_key, min_version, max_version)| ApiVersionRange {
                api_key,
                min_version,
                max_version,
            },
        );
        (prop::collection::vec(range, 0..12), name()).prop_map(|(apis, broker_version)| {
            ApiVersionsResponse {
                apis,
                broker_version,
            }
        })
    }

    #[test]
    fn supported_apis_lists_every_api_from_version_zero() {
        let apis = supported_apis();
        assert_eq!(apis.len(), ApiKey::ALL.len());
        for (range, key) in apis.iter().zip(ApiKey::ALL) {
            assert_eq!(range.api_key, key.code());
            // DescribeGroups version 1 lists deleted topics' offsets; the
            // quota APIs' version 1 carries topic, partition and group limits;
            // DescribeCluster's shows maintenance and moves (version 2:
            // decommissions); PartitionReport's
            // says whether each leader committed its epoch.
            let newest = match key {
                ApiKey::DescribeCluster => 2,
                ApiKey::DescribeGroups
                | ApiKey::DescribeQuotas
                | ApiKey::AlterQuotas
                | ApiKey::PartitionReport => 1,
                _ => 0,
            };
            assert_eq!((range.min_version, range.max_version), (0, newest));
        }
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
        fn arbitrary_bytes_never_panic(
            seed_request in request(),
            seed_response in response(),
            noise in crate::message::test_support::noise(),
        ) {
            arbitrary_bodies_never_panic((&seed_request, &[]), (&seed_response, &[]), &noise);
        }
    }
}
