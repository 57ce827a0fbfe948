//! OffsetCommit: store a group's next offsets (C6).
//!
//! The coordinator appends the commit to `__groups` and answers after the
//! quorum commit. It refuses a commit from an old generation
//! (`ILLEGAL_GENERATION`, for the whole request), from a member that does not
//! own the partition (`NOT_OWNER`) or beyond the high watermark
//! (`OFFSET_BEYOND_HIGH_WATERMARK`), per partition. Only
//! [`ResetOffsets`](super::reset_offsets) may move a group elsewhere.

use rkyv::{Archive, Deserialize, Serialize};

use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// One partition's offset to store.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetCommitPartition {
    /// Partition index.
    pub partition: u32,
    /// The offset of the next record to consume: every record before it is
    /// processed.
    pub next_offset: u64,
    /// Application data stored with the offset, returned by OffsetFetch.
    pub metadata: Option<String>,
}

/// One topic's offsets to store.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetCommitTopic {
    /// Topic name.
    pub name: String,
    /// Partitions to commit.
    pub partitions: Vec<OffsetCommitPartition>,
}

/// Commits next offsets for a group.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetCommitRequest {
    /// Group id.
    pub group: String,
    /// The member's generation from JoinGroup; `-1` for a group without
    /// active members (a standalone consumer that manages its own
    /// partitions).
    pub generation: i32,
    /// The member id from JoinGroup; empty when `generation` is `-1`.
    pub member_id: String,
    /// Offsets to store.
    pub topics: Vec<OffsetCommitTopic>,
}

/// One partition's commit result.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetCommitPartitionResponse {
    /// Partition index.
    pub partition: u32,
    /// `NONE` (0), or for example `NOT_OWNER` or
    /// `OFFSET_BEYOND_HIGH_WATERMARK`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
}

/// One topic's commit results.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetCommitTopicResponse {
    /// Topic name.
    pub name: String,
    /// One result per requested partition.
    pub partitions: Vec<OffsetCommitPartitionResponse>,
}

/// Commit results.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct OffsetCommitResponse {
    /// `NONE` (0), or a refusal of the whole commit, for example
    /// `ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `REBALANCE_IN_PROGRESS` or
    /// `NOT_COORDINATOR`; `topics` is then empty.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// One entry per requested topic.
    pub topics: Vec<OffsetCommitTopicResponse>,
}

api!(ApiKey::OffsetCommit, OffsetCommitRequest => OffsetCommitResponse);
no_raw_section!(
    OffsetCommitRequest,
    ArchivedOffsetCommitRequest,
    OffsetCommitResponse,
    ArchivedOffsetCommitResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = OffsetCommitRequest> {
        let partition = (any::<u32>(), any::<u64>(), optional_name()).prop_map(
            |(partition, next_offset, metadata)| OffsetCommitPartition {
                partition,
                next_offset,
                metadata,
            },
        );
        let topic = (name(), few(partition))
            .prop_map(|(name, partitions)| OffsetCommitTopic { name, partitions });
        (name(), any::<i32>(), name(), few(topic)).prop_map(
            |(group, generation, member_id, topics)| OffsetCommitRequest {
                group,
                generation,
                member_id,
                topics,
            },
        )
    }

    pub(crate) fn response() -> impl Strategy<Value = OffsetCommitResponse> {
        let partition = (any::<u32>(), any::<u16>(), optional_name()).prop_map(
            |(partition, error_code, error_message)| OffsetCommitPartitionResponse {
                partition,
                error_code,
                error_message,
            },
        );
        let topic = (name(), few(partition))
            .prop_map(|(name, partitions)| OffsetCommitTopicResponse { name, partitions });
        (any::<u16>(), optional_name(), few(topic)).prop_map(
            |(error_code, error_message, topics)| OffsetCommitResponse {
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
