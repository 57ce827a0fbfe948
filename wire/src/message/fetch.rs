//! Fetch: read record batches from partitions (C4, C7).
//!
//! The records are not in the response's archive: they follow it in the
//! body's raw section, one `records_len`-byte slice per partition,
//! concatenated in response order. [`partition_records`] cuts them apart.
//!
//! A fetch below the log start offset answers `OFFSET_OUT_OF_RANGE` with the
//! log start offset and a [`Gap`] that says what was deleted and why: a
//! reader is never moved silently to the next record.

use rkyv::{Archive, Deserialize, Serialize};

use super::{
    MessageError, PartitionRecords, RawSectionLen, api, no_raw_section, split_raw_section,
};
use crate::frame::ApiKey;

/// One partition to read.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FetchPartition {
    /// Partition index.
    pub partition: u32,
    /// First offset wanted.
    pub fetch_offset: u64,
    /// At most this many bytes of records for this partition (at least one
    /// whole batch is returned even if larger, so that a reader always makes
    /// progress).
    pub partition_max_bytes: u32,
    /// The leader epoch the client believes current; a stale one is fenced
    /// (`FENCED_LEADER_EPOCH`). `None` skips the check.
    pub current_leader_epoch: Option<u32>,
}

/// One topic to read.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FetchTopic {
    /// Topic name.
    pub name: String,
    /// Partitions to read.
    pub partitions: Vec<FetchPartition>,
}

/// Reads records.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FetchRequest {
    /// Longest wait for `min_bytes` of records to become visible.
    pub max_wait_ms: u32,
    /// Answer as soon as this many bytes of records are available.
    pub min_bytes: u32,
    /// At most this many bytes of records in the whole response.
    pub max_bytes: u32,
    /// Topics to read.
    pub topics: Vec<FetchTopic>,
}

/// Why records were deleted.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
#[repr(u8)]
pub enum DeletionCause {
    /// Older than the topic's retention time.
    RetentionTime = 0,
    /// Over the topic's retention size.
    RetentionSize = 1,
    /// Replaced by a newer record with the same key.
    Compaction = 2,
    /// Uncommitted records removed when a replica's log was truncated.
    Truncation = 3,
    /// Deleted by an administrator.
    Admin = 4,
}

/// A deleted offset range, for explaining a gap to the reader.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DeletedRange {
    /// First deleted offset.
    pub start_offset: u64,
    /// One past the last deleted offset (exclusive).
    pub end_offset: u64,
    /// Bytes deleted.
    pub bytes: u64,
    /// Records deleted.
    pub record_count: u64,
    /// Why they were deleted.
    pub cause: DeletionCause,
    /// When they were deleted, in ms since the Unix epoch.
    pub deleted_at_ms: i64,
}

/// Explains an `OFFSET_OUT_OF_RANGE` answer.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Gap {
    /// The offset the reader asked for.
    pub requested_offset: u64,
    /// The first offset still stored.
    pub log_start_offset: u64,
    /// The deletions between the two, as far as the broker remembers them.
    pub deleted: Vec<DeletedRange>,
}

/// One partition's records and positions.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FetchPartitionResponse {
    /// Partition index.
    pub partition: u32,
    /// `NONE` (0), or for example `OFFSET_OUT_OF_RANGE`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// One past the last committed offset.
    pub high_watermark: u64,
    /// First offset still stored.
    pub log_start_offset: u64,
    /// Where the next fetch of this partition should start.
    pub next_offset: u64,
    /// Bytes of record batches for this partition in the raw section.
    pub records_len: u32,
    /// Present with `OFFSET_OUT_OF_RANGE` below the log start.
    pub gap: Option<Gap>,
}

/// One topic's partitions.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FetchTopicResponse {
    /// Topic name.
    pub name: String,
    /// Partitions, in raw-section order.
    pub partitions: Vec<FetchPartitionResponse>,
}

/// Records read.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct FetchResponse {
    /// Topics, in raw-section order.
    pub topics: Vec<FetchTopicResponse>,
    /// How long the client should wait before its next request to this
    /// broker: the principal went over its fetch quota (the broker delays
    /// reading the connection by as much). 0 when within it.
    pub throttle_ms: u32,
}

api!(ApiKey::Fetch, FetchRequest => FetchResponse);
no_raw_section!(FetchRequest, ArchivedFetchRequest);

impl RawSectionLen for FetchResponse {
    fn raw_section_len(&self) -> u64 {
        self.topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .map(|partition| u64::from(partition.records_len))
            .sum()
    }
}

impl RawSectionLen for ArchivedFetchResponse {
    fn raw_section_len(&self) -> u64 {
        record_lengths(self).map(u64::from).sum()
    }
}

fn record_lengths(response: &ArchivedFetchResponse) -> impl Iterator<Item = u32> + Clone + '_ {
    response
        .topics
        .iter()
        .flat_map(|topic| topic.partitions.iter())
        .map(|partition| partition.records_len.to_native())
}

/// Cuts a decoded fetch response's raw section into one record slice per
/// partition, in response order.
///
/// # Errors
/// [`MessageError::RawSectionMismatch`] if the `records_len` fields do not
/// add up to the raw section's length (never after a successful
/// [`decode_response`](super::decode_response), which checks it).
pub fn partition_records<'a>(
    response: &'a ArchivedFetchResponse,
    raw: &'a [u8],
) -> Result<Vec<PartitionRecords<'a, ArchivedFetchPartitionResponse>>, MessageError> {
    let slices = split_raw_section(ApiKey::Fetch, raw, record_lengths(response))?;
    let partitions = response.topics.iter().flat_map(|topic| {
        topic
            .partitions
            .iter()
            .map(move |partition| (topic.name.as_str(), partition))
    });
    Ok(partitions
        .zip(slices)
        .map(|((topic, partition), records)| PartitionRecords {
            topic,
            partition,
            records,
        })
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, few, name, noise, optional_name, round_trip_request,
        round_trip_response,
    };
    use crate::message::{copy_aligned, decode_response, encode_response};

    pub(crate) fn request() -> impl Strategy<Value = FetchRequest> {
        let partition = (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<Option<u32>>(),
        )
            .prop_map(
                |(partition, fetch_offset, partition_max_bytes, current_leader_epoch)| {
                    FetchPartition {
                        partition,
                        fetch_offset,
                        partition_max_bytes,
                        current_leader_epoch,
                    }
                },
            );
        let topic =
            (name(), few(partition)).prop_map(|(name, partitions)| FetchTopic { name, partitions });
        (any::<[u32; 3]>(), few(topic)).prop_map(|([max_wait_ms, min_bytes, max_bytes], topics)| {
            FetchRequest {
                max_wait_ms,
                min_bytes,
                max_bytes,
                topics,
            }
        })
    }

    fn gap() -> impl Strategy<Value = Gap> {
        let cause = prop_oneof![
            Just(DeletionCause::RetentionTime),
            Just(DeletionCause::RetentionSize),
            Just(DeletionCause::Compaction),
            Just(DeletionCause::Truncation),
            Just(DeletionCause::Admin),
        ];
        let range = (any::<[u64; 4]>(), cause, any::<i64>()).prop_map(
            |([start_offset, end_offset, bytes, record_count], cause, deleted_at_ms)| {
                DeletedRange {
                    start_offset,
                    end_offset,
                    bytes,
                    record_count,
                    cause,
                    deleted_at_ms,
                }
            },
        );
        (any::<u64>(), any::<u64>(), few(range)).prop_map(
            |(requested_offset, log_start_offset, deleted)| Gap {
                requested_offset,
                log_start_offset,
                deleted,
            },
        )
    }

    /// A response and its raw section, built from per-partition records.
    pub(crate) fn response() -> impl Strategy<Value = (FetchResponse, Vec<u8>)> {
        let partition = (
            any::<u32>(),
            any::<u16>(),
            optional_name(),
            any::<[u64; 3]>(),
            prop::collection::vec(any::<u8>(), 0..32),
            prop::option::of(gap()),
        );
        let topic = (name(), prop::collection::vec(partition, 1..3));
        prop::collection::vec(topic, 1..3).prop_map(|topics| {
            let mut raw = Vec::new();
            let topics = topics
                .into_iter()
                .map(|(name, partitions)| FetchTopicResponse {
                    name,
                    partitions: partitions
                        .into_iter()
                        .map(
                            |(
                                partition,
                                error_code,
                                error_message,
                                [high_watermark, log_start_offset, next_offset],
                                records,
                                gap,
                            )| {
                                raw.extend_from_slice(&records);
                                FetchPartitionResponse {
                                    partition,
                                    error_code,
                                    error_message,
                                    high_watermark,
                                    log_start_offset,
                                    next_offset,
                                    records_len: records.len() as u32,
                                    gap,
                                }
                            },
                        )
                        .collect(),
                })
                .collect();
            (
                FetchResponse {
                    topics,
                    throttle_ms: 0,
                },
                raw,
            )
        })
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_round_trips_with_records((msg, raw) in response()) {
            prop_assume!(!raw.is_empty());
            round_trip_response(&msg, &raw)?;
            let body = copy_aligned(&encode_response(&msg, &raw).unwrap());
            let (archived, decoded_raw) = decode_response::<FetchResponse>(&body).unwrap();
            let split = partition_records(archived, decoded_raw).unwrap();
            let expected: Vec<(&str, u32, u32)> = msg
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.name.as_str(), p.partition, p.records_len)))
                .collect();
            prop_assert_eq!(split.len(), expected.len());
            let mut at = 0;
            for (got, (topic, partition, len)) in split.iter().zip(expected) {
                prop_assert_eq!(got.topic, topic);
                prop_assert_eq!(got.partition.partition.to_native(), partition);
                prop_assert_eq!(got.records, &raw[at..at + len as usize]);
                at += len as usize;
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(q in request(), (s, raw) in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &raw), &noise);
        }
    }
}
