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
