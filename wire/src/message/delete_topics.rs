//! DeleteTopics: delete topics and their data.

use rkyv::{Archive, Deserialize, Serialize};

use super::common::TopicResult;
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Deletes topics by name.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeleteTopicsRequest {
    /// Topics to delete.
    pub names: Vec<String>,
    /// How long the broker waits for the deletion to be committed before
    /// answering `REQUEST_TIMED_OUT` (the deletion may still complete).
    pub timeout_ms: u32,
}

/// One result per requested topic.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeleteTopicsResponse {
    /// Results, in request order.
    pub results: Vec<TopicResult>,
}

api!(ApiKey::DeleteTopics, DeleteTopicsRequest => DeleteTopicsResponse);
no_raw_section!(
    DeleteTopicsRequest,
    ArchivedDeleteTopicsRequest,
    DeleteTopicsResponse,
    ArchivedDeleteTopicsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn topic_result() -> impl Strategy<Value = TopicResult> {
        (name(), any::<u16>(), optional_name()).prop_map(|(name, error_code, message)| {
            TopicResult {
                name,
                error_code,
                message,
            }
        })
    }

    pub(crate) fn request() -> impl Strategy<Value = DeleteTopicsRequest> {
        (few(name()), any::<u32>())
            .prop_map(|(names, timeout_ms)| DeleteTopicsRequest { names, timeout_ms })
    }

    pub(crate) fn response() -> impl Strategy<Value = DeleteTopicsResponse> {
        few(topic_result()).prop_map(|results| DeleteTopicsResponse { results })
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
