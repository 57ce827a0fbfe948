//! OffsetFetch: read a group's committed offsets, where its consumers resume.

use rkyv::{Archive, Deserialize, Serialize};

use super::common::TopicPartitions;
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Reads committed offsets.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetFetchRequest {
    /// Group id.
    pub group: String,
    /// Partitions to read; `None` for every partition with a committed
    /// offset.
    pub topics: Option<Vec<TopicPartitions>>,
}

/// One partition's committed offset.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetFetchPartition {
    /// Partition index.
    pub partition: u32,
    /// The committed next offset; `-1` if the group has committed none for
    /// this partition (the consumer then starts by its reset policy).
    pub next_offset: i64,
    /// Application data stored with the offset.
    pub metadata: Option<String>,
    /// When the offset was committed (ms since the Unix epoch, coordinator
    /// clock); `-1` if none.
    pub committed_at_ms: i64,
    /// `NONE` (0), or for example `UNKNOWN_TOPIC_OR_PARTITION`.
    pub error_code: u16,
}

/// One topic's committed offsets.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetFetchTopic {
    /// Topic name.
    pub name: String,
    /// One entry per requested (or committed) partition.
    pub partitions: Vec<OffsetFetchPartition>,
}

/// Committed offsets.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetFetchResponse {
    /// `NONE` (0), or a refusal of the whole request, for example
    /// `NOT_COORDINATOR` or `COORDINATOR_NOT_AVAILABLE`; `topics` is then
    /// empty.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// One entry per requested (or committed) topic.
    pub topics: Vec<OffsetFetchTopic>,
}

api!(ApiKey::OffsetFetch, OffsetFetchRequest => OffsetFetchResponse);
no_raw_section!(
    OffsetFetchRequest,
    ArchivedOffsetFetchRequest,
    OffsetFetchResponse,
    ArchivedOffsetFetchResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response, topic_partitions,
    };

    pub(crate) fn request() -> impl Strategy<Value = OffsetFetchRequest> {
        (name(), prop::option::of(few(topic_partitions())))
            .prop_map(|(group, topics)| OffsetFetchRequest { group, topics })
    }

    pub(crate) fn response() -> impl Strategy<Value = OffsetFetchResponse> {
        let partition = (
            any::<u32>(),
            any::<i64>(),
            optional_name(),
            any::<i64>(),
            any::<u16>(),
        )
            .prop_map(
                |(partition, next_offset, metadata, committed_at_ms, error_code)| {
                    OffsetFetchPartition {
                        partition,
                        next_offset,
                        metadata,
                        committed_at_ms,
                        error_code,
                    }
                },
            );
        let topic = (name(), few(partition))
            .prop_map(|(name, partitions)| OffsetFetchTopic { name, partitions });
        (any::<u16>(), optional_name(), few(topic)).prop_map(
            |(error_code, error_message, topics)| OffsetFetchResponse {
                error_code,
                error_message,
                topics,
            },
        )
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
