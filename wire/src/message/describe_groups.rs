//! DescribeGroups: members, assignments, committed offsets and lag of
//! groups, for `corelog group describe` and the lag metrics.
//!
//! Lag is reported in records, bytes and time (the age of the oldest
//! unconsumed record), plus the time left before the oldest segment the
//! group still needs expires (DESIGN §8): that last number is what says
//! whether a slow group is about to lose data to retention.

use rkyv::{Archive, Deserialize, Serialize};

use super::common::TopicPartitions;
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Describes groups.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeGroupsRequest {
    /// Group ids.
    pub groups: Vec<String>,
}

/// One member of a group.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct MemberDescription {
    /// Member id given by the coordinator.
    pub member_id: String,
    /// Static membership id; `None` for a dynamic member.
    pub instance_id: Option<String>,
    /// Client software id from JoinGroup.
    pub client_id: String,
    /// Address the member connected from.
    pub client_host: String,
    /// Partitions the member consumes in the current generation.
    pub assignment: Vec<TopicPartitions>,
}

/// One partition's committed offset and how far behind it is.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionLag {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The committed next offset; `-1` if none.
    pub committed_offset: i64,
    /// Application data stored with the offset.
    pub metadata: Option<String>,
    /// The partition's log start offset.
    pub log_start_offset: u64,
    /// The partition's high watermark.
    pub high_watermark: u64,
    /// Records between the committed offset (or the log start, if none or
    /// below it) and the high watermark.
    pub lag_records: u64,
    /// Bytes of record batches in the same range (an estimate at batch
    /// granularity).
    pub lag_bytes: u64,
    /// Age of the oldest unconsumed record, against the coordinator's
    /// clock; `-1` if unknown or nothing is unconsumed.
    pub oldest_unconsumed_age_ms: i64,
    /// Time until retention may delete the oldest segment the group still
    /// needs; `-1` if unknown or retention is unbounded.
    pub retention_left_ms: i64,
}

/// One group's description.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct GroupDescription {
    /// Group id, as in the request.
    pub group: String,
    /// `NONE` (0), or for example `UNKNOWN_GROUP` or `NOT_COORDINATOR`; the
    /// other fields are then empty.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// The coordinator's name for the group's state (see
    /// [`GroupListing::state`](super::list_groups::GroupListing::state)).
    pub state: String,
    /// The group's generation; `-1` for a group that never had members.
    pub generation: i32,
    /// Current members.
    pub members: Vec<MemberDescription>,
    /// Every partition the group has a committed offset for or is assigned.
    pub partitions: Vec<PartitionLag>,
}

/// Group descriptions.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeGroupsResponse {
    /// One entry per requested group, in request order.
    pub groups: Vec<GroupDescription>,
}

api!(ApiKey::DescribeGroups, DescribeGroupsRequest => DescribeGroupsResponse);
no_raw_section!(
    DescribeGroupsRequest,
    ArchivedDescribeGroupsRequest,
    DescribeGroupsResponse,
    ArchivedDescribeGroupsResponse,
);

/// Version 1 of the request: the same groups, asking for
/// [`DescribeGroupsResponseV1`], which also lists offsets of deleted topics.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeGroupsRequestV1 {
    /// Group ids.
    pub groups: Vec<String>,
}

/// An offset a group committed on a topic that has since been deleted
/// (its name may be in use again by a new topic, whose offsets are
/// separate). Kept until `corelog group delete-offsets` removes it or the
/// group is deleted, so that nobody loses a position silently.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeletedTopicOffset {
    /// The deleted topic's name.
    pub topic: String,
    /// The deleted topic's id; `-1` if unknown (an offset committed
    /// before offsets carried topic ids).
    pub topic_id: i64,
    /// Partition index.
    pub partition: u32,
    /// The committed next offset.
    pub committed_offset: u64,
    /// Application data stored with the offset.
    pub metadata: Option<String>,
    /// When it was committed (ms since the Unix epoch, coordinator clock).
    pub committed_at_ms: i64,
}

/// One group's description, version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct GroupDescriptionV1 {
    /// As in version 0: `partitions` lists live topics only.
    pub description: GroupDescription,
    /// Offsets the group holds of deleted topics.
    pub deleted_topic_offsets: Vec<DeletedTopicOffset>,
}

/// Group descriptions, version 1.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeGroupsResponseV1 {
    /// One entry per requested group, in request order.
    pub groups: Vec<GroupDescriptionV1>,
}

api!(ApiKey::DescribeGroups, version 1, DescribeGroupsRequestV1 => DescribeGroupsResponseV1);
no_raw_section!(
    DescribeGroupsRequestV1,
    ArchivedDescribeGroupsRequestV1,
    DescribeGroupsResponseV1,
    ArchivedDescribeGroupsResponseV1,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response, topic_partitions,
    };

    pub(crate) fn request() -> impl Strategy<Value = DescribeGroupsRequest> {
        few(name()).prop_map(|groups| DescribeGroupsRequest { groups })
    }

    fn member() -> impl Strategy<Value = MemberDescription> {
        (
            name(),
            optional_name(),
            name(),
            name(),
            few(topic_partitions()),
        )
            .prop_map(
                |(member_id, instance_id, client_id, client_host, assignment)| MemberDescription {
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    assignment,
                },
            )
    }

    fn partition_lag() -> impl Strategy<Value = PartitionLag> {
        (
            (name(), any::<u32>(), any::<i64>(), optional_name()),
            any::<[u64; 4]>(),
            any::<[i64; 2]>(),
        )
            .prop_map(
                |(
                    (topic, partition, committed_offset, metadata),
                    [log_start_offset, high_watermark, lag_records, lag_bytes],
                    [oldest_unconsumed_age_ms, retention_left_ms],
                )| PartitionLag {
                    topic,
                    partition,
                    committed_offset,
                    metadata,
                    log_start_offset,
                    high_watermark,
                    lag_records,
                    lag_bytes,
                    oldest_unconsumed_age_ms,
                    retention_left_ms,
                },
            )
    }

    pub(crate) fn response() -> impl Strategy<Value = DescribeGroupsResponse> {
        let group = (
            (name(), any::<u16>(), optional_name(), name(), any::<i32>()),
            few(member()),
            few(partition_lag()),
        )
            .prop_map(
                |((group, error_code, error_message, state, generation), members, partitions)| {
                    GroupDescription {
                        group,
                        error_code,
                        error_message,
                        state,
                        generation,
                        members,
                        partitions,
                    }
                },
            );
        few(group).prop_map(|groups| DescribeGroupsResponse { groups })
    }

    pub(crate) fn request_v1() -> impl Strategy<Value = DescribeGroupsRequestV1> {
        few(name()).prop_map(|groups| DescribeGroupsRequestV1 { groups })
    }

    fn deleted_topic_offset() -> impl Strategy<Value = DeletedTopicOffset> {
        (
            (name(), any::<i64>(), any::<u32>()),
            (any::<u64>(), optional_name(), any::<i64>()),
        )
            .prop_map(
                |((topic, topic_id, partition), (committed_offset, metadata, committed_at_ms))| {
                    DeletedTopicOffset {
                        topic,
                        topic_id,
                        partition,
                        committed_offset,
                        metadata,
                        committed_at_ms,
                    }
                },
            )
    }

    pub(crate) fn response_v1() -> impl Strategy<Value = DescribeGroupsResponseV1> {
        (response(), few(deleted_topic_offset())).prop_map(|(v0, deleted)| {
            DescribeGroupsResponseV1 {
                groups: v0
                    .groups
                    .into_iter()
                    .map(|description| GroupDescriptionV1 {
                        description,
                        deleted_topic_offsets: deleted.clone(),
                    })
                    .collect(),
            }
        })
    }

    proptest! {
        #[test]
        fn request_v1_round_trips(msg in request_v1()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_v1_round_trips(msg in response_v1()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_bytes_never_panic_v1(q in request_v1(), s in response_v1(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &[]), &noise);
        }

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
