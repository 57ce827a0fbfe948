//! CreateTopics: create topics with a partition count, a replication factor
//! and configuration.

use rkyv::{Archive, Deserialize, Serialize};

use super::common::{ConfigEntry, TopicResult};
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One topic to create.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct CreatableTopic {
    /// Topic name.
    pub name: String,
    /// Number of partitions; at least 1.
    pub partitions: u32,
    /// Replicas per partition, at most the number of brokers; 0 asks for
    /// the broker's default (1 on a standalone broker, 3 in a cluster of
    /// three or more).
    pub replication_factor: u16,
    /// Topic settings that differ from the broker's defaults.
    pub configs: Vec<ConfigEntry>,
}

/// Creates topics.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct CreateTopicsRequest {
    /// Topics to create.
    pub topics: Vec<CreatableTopic>,
    /// How long the broker waits for the creation to be committed before
    /// answering `REQUEST_TIMED_OUT` (the creation may still complete).
    pub timeout_ms: u32,
    /// Check the request without creating anything.
    pub validate_only: bool,
}

/// One result per requested topic.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct CreateTopicsResponse {
    /// Results, in request order.
    pub results: Vec<TopicResult>,
}

api!(ApiKey::CreateTopics, CreateTopicsRequest => CreateTopicsResponse);
no_raw_section!(
    CreateTopicsRequest,
    ArchivedCreateTopicsRequest,
    CreateTopicsResponse,
    ArchivedCreateTopicsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::delete_topics::tests::topic_result;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, round_trip_request, round_trip_response,
    };

    pub(crate) fn config_entry() -> impl Strategy<Value = ConfigEntry> {
        (name(), name()).prop_map(|(key, value)| ConfigEntry { key, value })
    }

    pub(crate) fn request() -> impl Strategy<Value = CreateTopicsRequest> {
        let topic = (name(), any::<u32>(), any::<u16>(), few(config_entry())).prop_map(
            |(name, partitions, replication_factor, configs)| CreatableTopic {
                name,
                partitions,
                replication_factor,
                configs,
            },
        );
        (few(topic), any::<u32>(), any::<bool>()).prop_map(|(topics, timeout_ms, validate_only)| {
            CreateTopicsRequest {
                topics,
                timeout_ms,
                validate_only,
            }
        })
    }

    pub(crate) fn response() -> impl Strategy<Value = CreateTopicsResponse> {
        few(topic_result()).prop_map(|results| CreateTopicsResponse { results })
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
