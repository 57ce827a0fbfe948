//! Turning one partition's fetch answer into records, a new position, or a
//! decision about an error. Pure: the consumer does the I/O and applies the
//! result only when the whole response was acceptable.
//!
//! Two rules from the protocol live here:
//! - the first batch of an answer may start before the fetch offset (the
//!   broker returns whole batches), so records below it are skipped;
//! - every batch is CRC-checked while it is decoded, and a batch that fails
//!   is an error for the partition, never skipped;
//! - one fetch decompresses at most its [`InflationBudget`] (plus the one
//!   batch that crosses it): the batches past it are left for the next
//!   fetch, so that a few hundred bytes on the wire that inflate to
//!   megabytes each cannot grow the consumer's memory with the response.

use std::sync::Arc;

use bytes::Bytes;
use corelog_wire::batch::{BatchHeader, BatchLimits, Compression, decode_batch};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::fetch::{ArchivedDeletionCause, ArchivedFetchPartitionResponse};
use corelog_wire::types::{Offset, TimestampMs};

use super::{ConsumerRecord, DeletedRange, DeletionCause, GapInfo, OffsetOutOfRangePolicy};
use crate::error::ClientError;

/// The shard that owns the most of a fetch's partitions (the lowest on a
/// tie, so that the choice is stable from poll to poll); 0 for none.
pub(crate) fn most_common_shard(shards: impl Iterator<Item = u16>) -> u16 {
    let mut counts = std::collections::BTreeMap::<u16, usize>::new();
    for shard in shards {
        *counts.entry(shard).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|(a, count_a), (b, count_b)| count_a.cmp(count_b).then(b.cmp(a)))
        .map_or(0, |(shard, _)| shard)
}

/// The bounds one fetch is decoded within (C9): each batch's
/// ([`BatchLimits`]), and how many bytes the fetch may still decompress.
/// The first batch
/// of a fetch is always decoded, so that a consumer progresses whatever
/// the budget; after that a compressed batch is decoded only while some
/// budget is left. One fetch therefore holds at most the budget plus one
/// batch (`BatchLimits::decompressed_bytes_max`) of decompressed records.
/// Uncompressed batches cost nothing here: their records are slices of
/// the response, which `fetch_max_bytes` bounds.
#[derive(Debug)]
pub(crate) struct InflationBudget {
    limits: BatchLimits,
    left: usize,
    decoded_any: bool,
}

impl InflationBudget {
    pub(crate) fn new(limits: BatchLimits, bytes: usize) -> InflationBudget {
        InflationBudget {
            limits,
            left: bytes,
            decoded_any: false,
        }
    }

    fn allows(&self, header: &BatchHeader) -> bool {
        let compressed = !matches!(header.compression(), Ok(Compression::None));
        !compressed || !self.decoded_any || self.left > 0
    }

    fn spend(&mut self, inflated_bytes: usize) {
        self.decoded_any = true;
        self.left = self.left.saturating_sub(inflated_bytes);
    }
}

/// What one partition's answer means for the consumer.
#[derive(Debug)]
pub(crate) enum PartitionOutcome {
    /// Records at or after the fetch offset, in offset order, and where to
    /// fetch next.
    Records {
        records: Vec<ConsumerRecord>,
        next_offset: Offset,
        high_watermark: Offset,
        log_start_offset: Offset,
    },
    /// The position was out of range and the policy moves it to the log
    /// start; the caller reports the jump.
    Reset { to: Offset, gap: GapInfo },
    /// Try again after refreshing metadata (leader moved, and the like).
    Retry { error: ClientError },
    /// Report to the caller; the position does not move.
    Fail { error: ClientError },
}

/// The fields of a fetch partition answer the consumer needs, copied out of
/// the archive.
#[derive(Clone, Debug)]
pub(crate) struct PartitionAnswer {
    pub error_code: u16,
    pub error_message: Option<String>,
    pub high_watermark: u64,
    pub log_start_offset: u64,
    pub next_offset: u64,
    pub gap: Option<GapInfo>,
}

impl PartitionAnswer {
    pub(crate) fn from_archived(answer: &ArchivedFetchPartitionResponse) -> PartitionAnswer {
        let high_watermark = answer.high_watermark.to_native();
        PartitionAnswer {
            error_code: answer.error_code.to_native(),
            error_message: answer.error_message.as_ref().map(|m| m.to_string()),
            high_watermark,
            log_start_offset: answer.log_start_offset.to_native(),
            next_offset: answer.next_offset.to_native(),
            gap: answer.gap.as_ref().map(|gap| GapInfo {
                requested_offset: Offset(gap.requested_offset.to_native()),
                log_start_offset: Offset(gap.log_start_offset.to_native()),
                high_watermark: Offset(high_watermark),
                deleted: gap
                    .deleted
                    .iter()
                    .map(|range| DeletedRange {
                        start_offset: Offset(range.start_offset.to_native()),
                        end_offset: Offset(range.end_offset.to_native()),
                        bytes: range.bytes.to_native(),
                        record_count: range.record_count.to_native(),
                        cause: match range.cause {
                            ArchivedDeletionCause::RetentionTime => DeletionCause::RetentionTime,
                            ArchivedDeletionCause::RetentionSize => DeletionCause::RetentionSize,
                            ArchivedDeletionCause::Compaction => DeletionCause::Compaction,
                            ArchivedDeletionCause::Truncation => DeletionCause::Truncation,
                            ArchivedDeletionCause::Admin => DeletionCause::Admin,
                        },
                        deleted_at: TimestampMs(range.deleted_at_ms.to_native()),
                    })
                    .collect(),
            }),
        }
    }
}

/// Decides what a partition's answer means. `records` is the partition's
/// slice of the raw section, already copied into shared bytes; decoding
/// them spends `budget`, which the fetch's partitions share.
pub(crate) fn partition_outcome(
    topic: &Arc<str>,
    partition: u32,
    fetch_offset: Offset,
    answer: &PartitionAnswer,
    records: &Bytes,
    policy: OffsetOutOfRangePolicy,
    budget: &mut InflationBudget,
) -> PartitionOutcome {
    let context = || format!("fetch from {topic}/{partition} at offset {fetch_offset}");
    match ErrorCode::from_code(answer.error_code) {
        Some(ErrorCode::None) => {
            match decode_batches(topic, partition, fetch_offset, records, budget) {
                Ok(decoded) => {
                    let next_offset = match decoded.left_at {
                        // The budget ran out: the next fetch starts at
                        // the first batch not decoded.
                        Some(left_at) => left_at.max(fetch_offset),
                        None => Offset(answer.next_offset)
                            .max(fetch_offset)
                            .max(decoded.last.map_or(fetch_offset, |last| last.plus(1))),
                    };
                    let records = decoded.records;
                    PartitionOutcome::Records {
                        records,
                        next_offset,
                        high_watermark: Offset(answer.high_watermark),
                        log_start_offset: Offset(answer.log_start_offset),
                    }
                }
                Err(error) => PartitionOutcome::Fail { error },
            }
        }
        Some(ErrorCode::OffsetOutOfRange) => {
            let gap = answer.gap.clone().unwrap_or_else(|| GapInfo {
                requested_offset: fetch_offset,
                log_start_offset: Offset(answer.log_start_offset),
                high_watermark: Offset(answer.high_watermark),
                deleted: Vec::new(),
            });
            match policy {
                OffsetOutOfRangePolicy::ResetToEarliest => PartitionOutcome::Reset {
                    to: gap.log_start_offset,
                    gap,
                },
                OffsetOutOfRangePolicy::Error => PartitionOutcome::Fail {
                    error: ClientError::OffsetOutOfRange {
                        topic: topic.to_string(),
                        partition,
                        gap: Box::new(gap),
                    },
                },
            }
        }
        _ => {
            let error =
                ClientError::from_wire(answer.error_code, context, answer.error_message.clone())
                    .unwrap_or_else(|| ClientError::Protocol {
                        addr: String::new(),
                        detail: "error code 0 with an error".to_owned(),
                    });
            if error.is_retriable() {
                PartitionOutcome::Retry { error }
            } else {
                PartitionOutcome::Fail { error }
            }
        }
    }
}

/// The batches of one partition's answer that were decoded.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// Records at or after the fetch offset, in offset order.
    pub records: Vec<ConsumerRecord>,
    /// The last offset any decoded batch covered.
    pub last: Option<Offset>,
    /// The base offset of the first batch left undecoded because the
    /// fetch's [`InflationBudget`] ran out; `None` when all were decoded.
    pub left_at: Option<Offset>,
}

/// Decodes the batches in `records` (checking each CRC), skipping control
/// batches and records below `fetch_offset`, until `budget` runs out.
///
/// # Errors
/// [`ClientError::CorruptBatch`] for the first batch that fails its checks,
/// including a batch cut short; [`ClientError::Protocol`] if offsets go
/// backwards.
pub(crate) fn decode_batches(
    topic: &Arc<str>,
    partition: u32,
    fetch_offset: Offset,
    records: &Bytes,
    budget: &mut InflationBudget,
) -> Result<Decoded, ClientError> {
    let limits = budget.limits;
    let corrupt = |source| ClientError::CorruptBatch {
        topic: topic.to_string(),
        partition,
        source,
    };
    let mut decoded = Vec::new();
    let mut last: Option<Offset> = None;
    let mut position = 0;
    while position < records.len() {
        let header = BatchHeader::parse(&records[position..], &limits).map_err(corrupt)?;
        let end = position + header.total_bytes();
        if end > records.len() {
            return Err(corrupt(corelog_wire::batch::BatchError::Truncated {
                needed: header.total_bytes(),
                available: records.len() - position,
            }));
        }
        if !budget.allows(&header) {
            return Ok(Decoded {
                records: decoded,
                last,
                left_at: Some(header.base_offset),
            });
        }
        let batch = records.slice(position..end);
        position = end;
        let batch = decode_batch(&batch, &limits).map_err(corrupt)?;
        budget.spend(batch.inflated_bytes);
        let batch_records = batch.records;
        if last.is_some_and(|last| header.base_offset <= last) {
            return Err(ClientError::Protocol {
                addr: String::new(),
                detail: format!(
                    "fetch from {topic}/{partition}: batch at offset {} after offset {}",
                    header.base_offset,
                    last.map_or(0, |last| last.0)
                ),
            });
        }
        last = Some(header.last_offset());
        if header.is_control() {
            continue;
        }
        decoded.extend(
            batch_records
                .into_iter()
                .filter(|record| record.offset >= fetch_offset)
                .map(|record| ConsumerRecord {
                    topic: Arc::clone(topic),
                    partition,
                    offset: record.offset,
                    timestamp: record.timestamp,
                    key: record.key,
                    value: record.value,
                    headers: record.headers,
                    schema: record.schema,
                }),
        );
    }
    Ok(Decoded {
        records: decoded,
        last,
        left_at: None,
    })
}

#[cfg(test)]
mod tests {
    use corelog_wire::batch::{
        BatchBuilder, Compression, NewRecord, SchemaVersion, set_base_offset,
    };

    use super::*;

    #[test]
    fn a_fetch_goes_to_the_shard_that_owns_most_of_it() {
        assert_eq!(most_common_shard([1, 0, 1, 2].into_iter()), 1);
        assert_eq!(
            most_common_shard([2, 1].into_iter()),
            1,
            "a tie: the lowest"
        );
        assert_eq!(most_common_shard(std::iter::empty()), 0);
    }

    fn batch(base_offset: u64, values: &[&str]) -> Vec<u8> {
        let mut builder = BatchBuilder::new(Compression::None);
        for value in values {
            builder
                .push(&NewRecord {
                    key: Some(Bytes::from_static(b"k")),
                    value: Some(Bytes::copy_from_slice(value.as_bytes())),
                    timestamp: TimestampMs(1_700_000_000_000),
                    schema: Some(SchemaVersion(2)),
                    ..NewRecord::default()
                })
                .unwrap();
        }
        let mut bytes = builder.build().unwrap().to_vec();
        set_base_offset(&mut bytes, Offset(base_offset));
        bytes
    }

    fn answer(next_offset: u64) -> PartitionAnswer {
        PartitionAnswer {
            error_code: 0,
            error_message: None,
            high_watermark: 100,
            log_start_offset: 0,
            next_offset,
            gap: None,
        }
    }

    fn topic() -> Arc<str> {
        Arc::from("t")
    }

    /// A budget no test answer reaches.
    fn unbounded() -> InflationBudget {
        InflationBudget::new(BatchLimits::default(), usize::MAX)
    }

    fn values(records: &[ConsumerRecord]) -> Vec<(u64, String)> {
        records
            .iter()
            .map(|r| {
                let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
                (r.offset.0, value.into_owned())
            })
            .collect()
    }

    #[test]
    fn records_below_the_fetch_offset_in_the_first_batch_are_skipped() {
        let mut raw = batch(10, &["a", "b", "c", "d"]);
        raw.extend(batch(14, &["e", "f"]));
        let outcome = partition_outcome(
            &topic(),
            0,
            Offset(12),
            &answer(16),
            &Bytes::from(raw),
            OffsetOutOfRangePolicy::Error,
            &mut unbounded(),
        );
        let PartitionOutcome::Records {
            records,
            next_offset,
            ..
        } = outcome
        else {
            panic!("expected records, got {outcome:?}");
        };
        assert_eq!(
            values(&records),
            [
                (12, "c".to_owned()),
                (13, "d".to_owned()),
                (14, "e".to_owned()),
                (15, "f".to_owned())
            ]
        );
        assert_eq!(records[0].schema, Some(SchemaVersion(2)));
        assert_eq!(next_offset, Offset(16));
    }

    #[test]
    fn a_batch_failing_its_crc_is_an_error_not_skipped() {
        let mut raw = batch(0, &["a", "b"]);
        let second = batch(2, &["c"]);
        let flip = raw.len() + second.len() - 1;
        raw.extend(second);
        raw[flip] ^= 0x40;
        let outcome = partition_outcome(
            &topic(),
            3,
            Offset(0),
            &answer(3),
            &Bytes::from(raw),
            OffsetOutOfRangePolicy::Error,
            &mut unbounded(),
        );
        let PartitionOutcome::Fail { error } = outcome else {
            panic!("expected a failure, got {outcome:?}");
        };
        assert!(
            matches!(&error, ClientError::CorruptBatch { partition: 3, source, .. }
                if matches!(source, corelog_wire::batch::BatchError::CrcMismatch { .. })),
            "{error}"
        );
    }

    /// A broker (or anything between it and the client) that sends a
    /// batch whose uncovered `base_offset` is negative or runs past the
    /// last offset is answered with a corruption error, never a panic
    /// (issue 35, item 19).
    #[test]
    fn a_batch_whose_base_offset_overflows_is_corrupt_not_a_panic() {
        for base_offset in [u64::MAX, u64::MAX - 1, 1 << 63, i64::MAX as u64] {
            let mut raw = batch(0, &["a"]);
            raw.extend(batch(base_offset, &["b", "c"]));
            let outcome = std::panic::catch_unwind(|| {
                partition_outcome(
                    &topic(),
                    4,
                    Offset(0),
                    &answer(3),
                    &Bytes::from(raw),
                    OffsetOutOfRangePolicy::Error,
                    &mut unbounded(),
                )
            })
            .unwrap_or_else(|_| panic!("base offset {base_offset:#x} panicked the consumer"));
            let PartitionOutcome::Fail { error } = outcome else {
                panic!("base offset {base_offset:#x}: expected a failure, got {outcome:?}");
            };
            assert!(
                matches!(&error, ClientError::CorruptBatch { partition: 4, .. }),
                "{error}"
            );
        }
    }

    /// One zstd batch at `base_offset` of one record of `size` zero bytes.
    fn inflating(base_offset: u64, size: usize) -> Vec<u8> {
        let mut builder = BatchBuilder::new(Compression::Zstd);
        builder
            .push(&NewRecord {
                value: Some(Bytes::from(vec![0u8; size])),
                ..NewRecord::default()
            })
            .unwrap();
        let mut bytes = builder.build().unwrap().to_vec();
        set_base_offset(&mut bytes, Offset(base_offset));
        bytes
    }

    fn records_of(outcome: PartitionOutcome) -> (Vec<u64>, Offset) {
        let PartitionOutcome::Records {
            records,
            next_offset,
            ..
        } = outcome
        else {
            panic!("expected records, got {outcome:?}");
        };
        (
            records.iter().map(|record| record.offset.0).collect(),
            next_offset,
        )
    }

    /// A fetch stops decompressing once its budget is spent (after the
    /// batch that crossed it), and the partitions that share it resume
    /// from the first batch left undecoded (issue 35, item 6).
    #[test]
    fn a_fetch_decompresses_its_budget_and_leaves_the_rest_for_the_next() {
        let mib = 1usize << 20;
        let mut bombs = Vec::new();
        for offset in 0..5 {
            bombs.extend(inflating(offset, mib));
        }
        let bombs = Bytes::from(bombs);
        let mut budget = InflationBudget::new(BatchLimits::default(), 2 * mib + mib / 2);
        let first = partition_outcome(
            &topic(),
            0,
            Offset(0),
            &answer(5),
            &bombs,
            OffsetOutOfRangePolicy::Error,
            &mut budget,
        );
        assert_eq!(records_of(first), (vec![0, 1, 2], Offset(3)));
        // Another partition of the same fetch: its compressed batches wait
        // for the next fetch, its position unchanged; uncompressed ones
        // cost nothing and are delivered.
        let second = partition_outcome(
            &topic(),
            1,
            Offset(7),
            &answer(12),
            &Bytes::from(inflating(7, 1024)),
            OffsetOutOfRangePolicy::Error,
            &mut budget,
        );
        assert_eq!(records_of(second), (vec![], Offset(7)));
        let plain = partition_outcome(
            &topic(),
            2,
            Offset(0),
            &answer(2),
            &Bytes::from(batch(0, &["a", "b"])),
            OffsetOutOfRangePolicy::Error,
            &mut budget,
        );
        assert_eq!(records_of(plain), (vec![0, 1], Offset(2)));

        // The first batch of a fetch is decoded whatever the budget, so a
        // reader always progresses.
        let mut empty = InflationBudget::new(BatchLimits::default(), 0);
        let progress = partition_outcome(
            &topic(),
            0,
            Offset(3),
            &answer(5),
            &bombs.slice(bombs.len() * 3 / 5..),
            OffsetOutOfRangePolicy::Error,
            &mut empty,
        );
        assert_eq!(records_of(progress), (vec![3], Offset(4)));
    }

    #[test]
    fn a_batch_cut_short_is_an_error() {
        let raw = batch(0, &["a", "b"]);
        let cut = Bytes::copy_from_slice(&raw[..raw.len() - 3]);
        let error = decode_batches(&topic(), 0, Offset(0), &cut, &mut unbounded()).unwrap_err();
        assert!(matches!(error, ClientError::CorruptBatch { .. }), "{error}");
    }

    #[test]
    fn an_empty_answer_keeps_the_position_or_moves_to_next_offset() {
        let outcome = partition_outcome(
            &topic(),
            0,
            Offset(7),
            &answer(7),
            &Bytes::new(),
            OffsetOutOfRangePolicy::Error,
            &mut unbounded(),
        );
        assert!(matches!(
            outcome,
            PartitionOutcome::Records { ref records, next_offset: Offset(7), .. } if records.is_empty()
        ));
    }

    fn out_of_range() -> PartitionAnswer {
        PartitionAnswer {
            error_code: ErrorCode::OffsetOutOfRange.code(),
            error_message: None,
            high_watermark: 500,
            log_start_offset: 120,
            next_offset: 0,
            gap: Some(GapInfo {
                requested_offset: Offset(5),
                log_start_offset: Offset(120),
                high_watermark: Offset(500),
                deleted: vec![DeletedRange {
                    start_offset: Offset(0),
                    end_offset: Offset(120),
                    bytes: 4096,
                    record_count: 120,
                    cause: DeletionCause::RetentionTime,
                    deleted_at: TimestampMs(1_700_000_000_000),
                }],
            }),
        }
    }

    #[test]
    fn out_of_range_with_the_error_policy_carries_the_gap() {
        let outcome = partition_outcome(
            &topic(),
            1,
            Offset(5),
            &out_of_range(),
            &Bytes::new(),
            OffsetOutOfRangePolicy::Error,
            &mut unbounded(),
        );
        let PartitionOutcome::Fail {
            error: ClientError::OffsetOutOfRange { gap, partition, .. },
        } = outcome
        else {
            panic!("expected an out-of-range failure, got {outcome:?}");
        };
        assert_eq!(partition, 1);
        assert_eq!(gap.log_start_offset, Offset(120));
        assert_eq!(gap.deleted[0].record_count, 120);
        let text = gap.to_string();
        assert!(text.contains("retention-time"), "{text}");
        assert!(text.contains("120"), "{text}");
    }

    #[test]
    fn an_offset_past_the_end_is_described_as_such_not_as_deleted() {
        let mut answer = out_of_range();
        answer.gap = None;
        answer.log_start_offset = 0;
        answer.high_watermark = 3;
        let outcome = partition_outcome(
            &topic(),
            0,
            Offset(10),
            &answer,
            &Bytes::new(),
            OffsetOutOfRangePolicy::Error,
            &mut unbounded(),
        );
        let PartitionOutcome::Fail {
            error: ClientError::OffsetOutOfRange { gap, .. },
        } = outcome
        else {
            panic!("expected an out-of-range failure, got {outcome:?}");
        };
        assert!(gap.is_past_end());
        let text = gap.to_string();
        assert!(
            text.starts_with(
                "offset 10 is past the end of the log: the next record will be offset 3"
            ),
            "{text}"
        );
        assert!(!text.contains("deleted"), "{text}");
    }

    #[test]
    fn out_of_range_with_the_reset_policy_moves_to_the_log_start() {
        let outcome = partition_outcome(
            &topic(),
            1,
            Offset(5),
            &out_of_range(),
            &Bytes::new(),
            OffsetOutOfRangePolicy::ResetToEarliest,
            &mut unbounded(),
        );
        let PartitionOutcome::Reset { to, gap } = outcome else {
            panic!("expected a reset, got {outcome:?}");
        };
        assert_eq!(to, Offset(120));
        assert_eq!(gap.requested_offset, Offset(5));
    }

    #[test]
    fn leader_errors_are_retried_and_others_fail() {
        let mut not_leader = answer(0);
        not_leader.error_code = ErrorCode::NotLeader.code();
        let outcome = partition_outcome(
            &topic(),
            0,
            Offset(0),
            &not_leader,
            &Bytes::new(),
            OffsetOutOfRangePolicy::Error,
            &mut unbounded(),
        );
        assert!(matches!(outcome, PartitionOutcome::Retry { .. }));
        let mut corrupt = answer(0);
        corrupt.error_code = ErrorCode::CorruptSegment.code();
        let outcome = partition_outcome(
            &topic(),
            0,
            Offset(0),
            &corrupt,
            &Bytes::new(),
            OffsetOutOfRangePolicy::ResetToEarliest,
            &mut unbounded(),
        );
        assert!(matches!(outcome, PartitionOutcome::Fail { .. }));
    }
}
