//! ListOffsets: find offsets by position (earliest, latest) or by timestamp.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Which offset to look up.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub enum OffsetSpec {
    /// The log start offset: the oldest record still stored.
    Earliest,
    /// The high watermark: the offset the next committed record will get.
    Latest,
    /// The first offset whose timestamp is at or after this time (ms since
    /// the Unix epoch).
    Timestamp(i64),
}

/// One partition to look up.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListOffsetsPartition {
    /// Partition index.
    pub partition: u32,
    /// What to look up.
    pub spec: OffsetSpec,
}

/// One topic to look up.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListOffsetsTopic {
    /// Topic name.
    pub name: String,
    /// Partitions to look up.
    pub partitions: Vec<ListOffsetsPartition>,
}

/// Looks up offsets.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListOffsetsRequest {
    /// Topics to look up.
    pub topics: Vec<ListOffsetsTopic>,
}

/// One partition's answer.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListOffsetsPartitionResponse {
    /// Partition index.
    pub partition: u32,
    /// `NONE` (0), or for example `NOT_LEADER`.
    pub error_code: u16,
    /// The offset found; `-1` if none (no record at or after the timestamp).
    pub offset: i64,
    /// Timestamp of the record at `offset` for a timestamp lookup; `-1`
    /// otherwise.
    pub timestamp: i64,
}

/// One topic's answers.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListOffsetsTopicResponse {
    /// Topic name.
    pub name: String,
    /// One answer per requested partition.
    pub partitions: Vec<ListOffsetsPartitionResponse>,
}

/// Offsets found.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ListOffsetsResponse {
    /// One entry per requested topic.
    pub topics: Vec<ListOffsetsTopicResponse>,
}

api!(ApiKey::ListOffsets, ListOffsetsRequest => ListOffsetsResponse);
no_raw_section!(
    ListOffsetsRequest,
    ArchivedListOffsetsRequest,
    ListOffsetsResponse,
    ArchivedListOffsetsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, round_trip_request, round_trip_response,
    };

    fn spec() -> impl Strategy<Value = OffsetSpec> {
        prop_oneof![
            Just(OffsetSpec::Earliest),
            Just(OffsetSpec::Latest),
            any::<i64>().prop_map(OffsetSpec::Timestamp),
        ]
    }

    pub(crate) fn request() -> impl Strategy<Value = ListOffsetsRequest> {
        let partition = (any::<u32>(), spec())
            .prop_map(|(partition, spec)| ListOffsetsPartition { partition, spec });
        let topic = (name(), few(partition))
            .prop_map(|(name, partitions)| ListOffsetsTopic { name, partitions });
        few(topic).prop_map(|topics| ListOffsetsRequest { topics })
    }

    pub(crate) fn response() -> impl Strategy<Value = ListOffsetsResponse> {
        let partition = (any::<u32>(), any::<u16>(), any::<i64>(), any::<i64>()).prop_map(
            |(partition, error_code, offset, timestamp)| ListOffsetsPartitionResponse {
                partition,
                error_code,
                offset,
                timestamp,
            },
        );
        let topic = (name(), few(partition))
            .prop_map(|(name, partitions)| ListOffsetsTopicResponse { name, partitions });
        few(topic).prop_map(|topics| ListOffsetsResponse { topics })
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
