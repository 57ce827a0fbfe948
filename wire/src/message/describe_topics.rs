//! DescribeTopics: a topic's configuration and the log positions of each of
//! its partitions.

use rkyv::{Archive, Deserialize, Serialize};

use super::common::ConfigEntry;
use super::{api, no_raw_section};
use crate::frame::ApiKey;

/// Asks for topic descriptions.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeTopicsRequest {
    /// Topics to describe; empty for all topics.
    pub names: Vec<String>,
}

/// Log positions of one partition, as seen by its leader. Invariant:
/// `log_start_offset <= high_watermark <= log_end_offset`.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartitionState {
    /// Partition index.
    pub partition: u32,
    /// First offset still stored; older records were removed by retention.
    pub log_start_offset: u64,
    /// One past the last committed offset: what readers can see.
    pub high_watermark: u64,
    /// One past the last offset written to the leader's log.
    pub log_end_offset: u64,
    /// Bytes stored for this partition on the leader.
    pub size_bytes: u64,
    /// Segments stored for this partition on the leader.
    pub segment_count: u32,
    /// Where each leader epoch's run of committed records starts in the
    /// leader's log, oldest first, from the log start on (at most
    /// [`EPOCH_STARTS_MAX`], the newest). A run that follows another one
    /// starts with its leader's epoch-start marker, a control record that
    /// is not data: consumer lag counts records, so it subtracts them.
    pub epoch_starts: Vec<u64>,
}

/// Bound on [`PartitionState::epoch_starts`]: the newest leader changes of
/// a partition, so that a description stays small however often its
/// leadership moved. A consumer further behind than this many leader
/// changes has its older markers counted as records.
pub const EPOCH_STARTS_MAX: usize = 64;

/// One topic's description.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct TopicDescription {
    /// Topic name.
    pub name: String,
    /// `NONE` (0), or for example `UNKNOWN_TOPIC_OR_PARTITION`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub message: Option<String>,
    /// Number of partitions.
    pub partitions: u32,
    /// Replicas per partition.
    pub replication_factor: u16,
    /// Effective topic settings.
    pub configs: Vec<ConfigEntry>,
    /// Per-partition log positions.
    pub partition_states: Vec<PartitionState>,
}

/// Topic descriptions.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DescribeTopicsResponse {
    /// One description per requested topic (or per topic, for an empty
    /// request).
    pub topics: Vec<TopicDescription>,
}

api!(ApiKey::DescribeTopics, DescribeTopicsRequest => DescribeTopicsResponse);
no_raw_section!(
    DescribeTopicsRequest,
    ArchivedDescribeTopicsRequest,
    DescribeTopicsResponse,
    ArchivedDescribeTopicsResponse,
);

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::create_topics::tests::config_entry;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = DescribeTopicsRequest> {
        few(name()).prop_map(|names| DescribeTopicsRequest { names })
    }

    fn partition_state() -> impl Strategy<Value = PartitionState> {
        (
            any::<u32>(),
            any::<[u64; 4]>(),
            any::<u32>(),
            few(any::<u64>()),
        )
            .prop_map(
                |(
                    partition,
                    [log_start_offset, high_watermark, log_end_offset, size_bytes],
                    segment_count,
                    epoch_starts,
                )| {
                    PartitionState {
                        partition,
                        log_start_offset,
                        high_watermark,
                        log_end_offset,
                        size_bytes,
                        segment_count,
                        epoch_starts,
                    }
                },
            )
    }

    pub(crate) fn response() -> impl Strategy<Value = DescribeTopicsResponse> {
        let topic = (
            name(),
            any::<u16>(),
            optional_name(),
            any::<u32>(),
            any::<u16>(),
            few(config_entry()),
            few(partition_state()),
        )
            .prop_map(
                |(
                    name,
                    error_code,
                    message,
                    partitions,
                    replication_factor,
                    configs,
                    partition_states,
                )| {
                    TopicDescription {
                        name,
                        error_code,
                        message,
                        partitions,
                        replication_factor,
                        configs,
                        partition_states,
                    }
                },
            );
        few(topic).prop_map(|topics| DescribeTopicsResponse { topics })
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
