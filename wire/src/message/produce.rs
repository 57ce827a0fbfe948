//! Produce: append record batches to partitions.
//!
//! The record batches are not in the archive: they follow it in the body's
//! raw section, one `records_len`-byte slice per partition, concatenated in
//! request order (topics in order, partitions in order within each topic).
//! [`partition_records`] cuts them apart.

use rkyv::{Archive, Deserialize, Serialize};

use super::{
    MessageError, PartitionRecords, RawSectionLen, api, no_raw_section, split_raw_section,
};
use crate::frame::ApiKey;

/// When the broker acknowledges an append (C1).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[rkyv(derive(Debug, PartialEq, Eq))]
#[repr(u8)]
pub enum Acks {
    /// After the leader's own fsync only: for disposable data, never the
    /// default.
    Leader = 1,
    /// After an fsync on a majority of the replica set.
    #[default]
    Quorum = 2,
}

/// One partition's records to append.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ProducePartition {
    /// Partition index.
    pub partition: u32,
    /// Bytes of record batches for this partition in the raw section.
    pub records_len: u32,
}

/// One topic's partitions to append to.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ProduceTopic {
    /// Topic name.
    pub name: String,
    /// Partitions, in raw-section order.
    pub partitions: Vec<ProducePartition>,
}

/// Appends record batches.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ProduceRequest {
    /// When to acknowledge.
    pub acks: Acks,
    /// How long the broker waits for the acknowledgement condition before
    /// answering `REQUEST_TIMED_OUT`.
    pub timeout_ms: u32,
    /// Topics, in raw-section order.
    pub topics: Vec<ProduceTopic>,
}

/// One partition's append result.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ProducePartitionResponse {
    /// Partition index.
    pub partition: u32,
    /// `NONE` (0), or for example `NOT_ENOUGH_REPLICAS`.
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// Offset of the first appended record; `-1` on error.
    pub base_offset: i64,
    /// Broker append time for topics that use it; `-1` otherwise.
    pub log_append_time_ms: i64,
    /// The partition's log start offset; `-1` if unknown.
    pub log_start_offset: i64,
}

/// One topic's append results.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ProduceTopicResponse {
    /// Topic name.
    pub name: String,
    /// One result per requested partition.
    pub partitions: Vec<ProducePartitionResponse>,
}

/// Append results.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ProduceResponse {
    /// One entry per requested topic.
    pub topics: Vec<ProduceTopicResponse>,
    /// How long the client should wait before sending more (quotas; 0 until
    /// quotas exist).
    pub throttle_ms: u32,
}

api!(ApiKey::Produce, ProduceRequest => ProduceResponse);
no_raw_section!(ProduceResponse, ArchivedProduceResponse);

impl RawSectionLen for ProduceRequest {
    fn raw_section_len(&self) -> u64 {
        self.topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .map(|partition| u64::from(partition.records_len))
            .sum()
    }
}

impl RawSectionLen for ArchivedProduceRequest {
    fn raw_section_len(&self) -> u64 {
        record_lengths(self).map(u64::from).sum()
    }
}

fn record_lengths(request: &ArchivedProduceRequest) -> impl Iterator<Item = u32> + Clone + '_ {
    request
        .topics
        .iter()
        .flat_map(|topic| topic.partitions.iter())
        .map(|partition| partition.records_len.to_native())
}

/// Cuts a decoded produce request's raw section into one record slice per
/// partition, in request order.
///
/// # Errors
/// [`MessageError::RawSectionMismatch`] if the `records_len` fields do not
/// add up to the raw section's length (never after a successful
/// [`decode_request`](super::decode_request), which checks it).
pub fn partition_records<'a>(
    request: &'a ArchivedProduceRequest,
    raw: &'a [u8],
) -> Result<Vec<PartitionRecords<'a, ArchivedProducePartition>>, MessageError> {
    let slices = split_raw_section(ApiKey::Produce, raw, record_lengths(request))?;
    let partitions = request.topics.iter().flat_map(|topic| {
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
    use crate::message::{copy_aligned, decode_request, encode_request};

    /// A request and its raw section, built from per-partition records.
    pub(crate) fn request() -> impl Strategy<Value = (ProduceRequest, Vec<u8>)> {
        let records = prop::collection::vec(any::<u8>(), 0..32);
        let partition = (any::<u32>(), records);
        let topic = (name(), prop::collection::vec(partition, 1..3));
        let acks = prop_oneof![Just(Acks::Leader), Just(Acks::Quorum)];
        (acks, any::<u32>(), prop::collection::vec(topic, 1..3)).prop_map(
            |(acks, timeout_ms, topics)| {
                let mut raw = Vec::new();
                let topics = topics
                    .into_iter()
                    .map(|(name, partitions)| ProduceTopic {
                        name,
                        partitions: partitions
                            .into_iter()
                            .map(|(partition, records)| {
                                raw.extend_from_slice(&records);
                                ProducePartition {
                                    partition,
                                    records_len: records.len() as u32,
                                }
                            })
                            .collect(),
                    })
                    .collect();
                (
                    ProduceRequest {
                        acks,
                        timeout_ms,
                        topics,
                    },
                    raw,
                )
            },
        )
    }

    pub(crate) fn response() -> impl Strategy<Value = ProduceResponse> {
        let partition = (
            any::<u32>(),
            any::<u16>(),
            optional_name(),
            any::<[i64; 3]>(),
        )
            .prop_map(
                |(
                    partition,
                    error_code,
                    error_message,
                    [base_offset, log_append_time_ms, log_start_offset],
                )| {
                    ProducePartitionResponse {
                        partition,
                        error_code,
                        error_message,
                        base_offset,
                        log_append_time_ms,
                        log_start_offset,
                    }
                },
            );
        let topic = (name(), few(partition))
            .prop_map(|(name, partitions)| ProduceTopicResponse { name, partitions });
        (few(topic), any::<u32>()).prop_map(|(topics, throttle_ms)| ProduceResponse {
            topics,
            throttle_ms,
        })
    }

    #[test]
    fn acks_default_to_quorum() {
        assert_eq!(Acks::default(), Acks::Quorum);
    }

    #[test]
    fn partitions_with_empty_records_split_correctly() {
        let request = ProduceRequest {
            acks: Acks::Leader,
            timeout_ms: 5,
            topics: vec![
                ProduceTopic {
                    name: "a".to_owned(),
                    partitions: vec![
                        ProducePartition {
                            partition: 0,
                            records_len: 0,
                        },
                        ProducePartition {
                            partition: 1,
                            records_len: 3,
                        },
                    ],
                },
                ProduceTopic {
                    name: "b".to_owned(),
                    partitions: vec![ProducePartition {
                        partition: 7,
                        records_len: 2,
                    }],
                },
            ],
        };
        let body = copy_aligned(&encode_request(&request, b"xyzuv").unwrap());
        let (archived, raw) = decode_request::<ProduceRequest>(&body).unwrap();
        assert_eq!(archived.acks, ArchivedAcks::Leader);
        let split: Vec<(&str, u32, &[u8])> = partition_records(archived, raw)
            .unwrap()
            .iter()
            .map(|p| (p.topic, p.partition.partition.to_native(), p.records))
            .collect();
        assert_eq!(
            split,
            [("a", 0, &b""[..]), ("a", 1, b"xyz"), ("b", 7, b"uv")]
        );
        assert!(matches!(
            partition_records(archived, &raw[1..]),
            Err(MessageError::RawSectionMismatch {
                declared: 5,
                raw_len: 4,
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn request_round_trips_with_records((msg, raw) in request()) {
            prop_assume!(!raw.is_empty());
            round_trip_request(&msg, &raw)?;
            let body = copy_aligned(&encode_request(&msg, &raw).unwrap());
            let (archived, decoded_raw) = decode_request::<ProduceRequest>(&body).unwrap();
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
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn arbitrary_bytes_never_panic((q, raw) in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &raw), (&s, &[]), &noise);
        }
    }
}
