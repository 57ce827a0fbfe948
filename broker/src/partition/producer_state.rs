//! Idempotent-producer state of one partition (C5), as a pure table.
//!
//! For each producer id the table keeps its epoch and the sequence ranges
//! and offsets of its last [`BATCHES_PER_PRODUCER`] batches, so that:
//!
//! - a retry of one of those batches (same sequences, same CRC) gets the
//!   offset it was first given, and is not appended again;
//! - the same sequences with a different payload are refused
//!   (`DUPLICATE_SEQUENCE_CONFLICT`);
//! - a sequence past the next expected one is refused
//!   (`OUT_OF_ORDER_SEQUENCE`): a batch before it was lost;
//! - an older epoch is fenced (`INVALID_PRODUCER_EPOCH`).
//!
//! The table is derived from the log: it is rebuilt by replaying batches
//! ([`ProducerStateTable::replay`]) from a snapshot, so it survives restarts
//! and (with replication) failover. Producers idle for longer than
//! `producer_state_retention` are forgotten.

use std::collections::VecDeque;

use ahash::AHashMap;

use corelog_wire::batch::BatchHeader;
use corelog_wire::types::{Offset, TimestampMs};

/// Batches remembered per producer: as many as a producer may have in flight.
pub const BATCHES_PER_PRODUCER: usize = 5;

/// Where one batch of a producer landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRecord {
    /// Sequence of the batch's first record.
    pub first_sequence: i32,
    /// Sequence of its last record.
    pub last_sequence: i32,
    /// Offset of its first record.
    pub base_offset: Offset,
    /// Offset of its last record.
    pub last_offset: Offset,
    /// The batch's CRC: equal for a retry of the same batch.
    pub crc: u32,
}

/// One producer's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerEntry {
    /// Current epoch; older ones are fenced.
    pub epoch: i16,
    /// Newest batches, oldest first.
    pub batches: VecDeque<BatchRecord>,
    /// Broker time of the producer's last append, for expiry.
    pub last_append: TimestampMs,
}

/// The verdict on an incoming idempotent batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceCheck {
    /// New and in order: append it.
    Append,
    /// A retry of a batch already in the log at these offsets.
    Duplicate(BatchRecord),
    /// Refused.
    Reject(SequenceError),
}

/// Why an idempotent batch was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    /// The producer's epoch is older than the partition's.
    #[error(
        "producer epoch {got} is older than the current epoch {current}: this producer was fenced by a newer instance"
    )]
    StaleEpoch {
        /// The partition's epoch for this producer.
        current: i16,
        /// The batch's epoch.
        got: i16,
    },
    /// A sequence that does not follow the last one.
    #[error("sequence {got} does not follow the last appended sequence (expected {expected})")]
    OutOfOrder {
        /// The next sequence the partition expects.
        expected: i32,
        /// The batch's first sequence.
        got: i32,
    },
    /// Sequences already used by a different batch.
    #[error("sequences {first}..={last} were already used by a different batch")]
    DuplicateConflict {
        /// The batch's first sequence.
        first: i32,
        /// The batch's last sequence.
        last: i32,
    },
    /// No state for this producer and the batch does not start a sequence.
    #[error(
        "no state for producer {producer_id} (expired or never seen) and sequence {got} is not 0"
    )]
    UnknownProducer {
        /// The producer id.
        producer_id: i64,
        /// The batch's first sequence.
        got: i32,
    },
}

/// The sequence after `sequence`, wrapping at `i32::MAX` as Kafka does.
#[must_use]
pub fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

/// The last sequence of a batch of `record_count` records starting at `first`.
#[must_use]
pub fn last_sequence(first: i32, record_count: u32) -> i32 {
    let span = i64::from(record_count.max(1)) - 1;
    ((i64::from(first) + span) % (i64::from(i32::MAX) + 1)) as i32
}

/// Idempotent-producer state of one partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerStateTable {
    /// Hashed, not ordered: every idempotent append looks its producer up,
    /// and with thousands of partitions per shard the tree's node hops
    /// were cache misses; only snapshots want an order ([`Self::entries`]).
    producers: AHashMap<i64, ProducerEntry>,
}

impl ProducerStateTable {
    /// Judges a batch from `producer_id`; does not change the table.
    #[must_use]
    pub fn check(&self, header: &BatchHeader) -> SequenceCheck {
        let producer = header.producer;
        let first = producer.base_sequence;
        let last = last_sequence(first, header.record_count);
        let Some(entry) = self.producers.get(&producer.producer_id) else {
            return if first == 0 {
                SequenceCheck::Append
            } else {
                SequenceCheck::Reject(SequenceError::UnknownProducer {
                    producer_id: producer.producer_id,
                    got: first,
                })
            };
        };
        if producer.producer_epoch < entry.epoch {
            return SequenceCheck::Reject(SequenceError::StaleEpoch {
                current: entry.epoch,
                got: producer.producer_epoch,
            });
        }
        if producer.producer_epoch > entry.epoch {
            // A new incarnation starts its sequences over.
            return if first == 0 {
                SequenceCheck::Append
            } else {
                SequenceCheck::Reject(SequenceError::OutOfOrder {
                    expected: 0,
                    got: first,
                })
            };
        }
        for batch in &entry.batches {
            if batch.first_sequence == first && batch.last_sequence == last {
                return if batch.crc == header.crc {
                    SequenceCheck::Duplicate(*batch)
                } else {
                    SequenceCheck::Reject(SequenceError::DuplicateConflict { first, last })
                };
            }
            let overlaps = sequence_within(first, batch.first_sequence, batch.last_sequence)
                || sequence_within(last, batch.first_sequence, batch.last_sequence);
            if overlaps {
                return SequenceCheck::Reject(SequenceError::DuplicateConflict { first, last });
            }
        }
        let expected = entry
            .batches
            .back()
            .map_or(0, |newest| next_sequence(newest.last_sequence));
        if first == expected {
            SequenceCheck::Append
        } else {
            SequenceCheck::Reject(SequenceError::OutOfOrder {
                expected,
                got: first,
            })
        }
    }

    /// Records an appended idempotent batch at its offsets.
    pub fn record(&mut self, header: &BatchHeader, now: TimestampMs) {
        let producer = header.producer;
        debug_assert!(producer.is_idempotent());
        let record = BatchRecord {
            first_sequence: producer.base_sequence,
            last_sequence: last_sequence(producer.base_sequence, header.record_count),
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            crc: header.crc,
        };
        let entry = self
            .producers
            .entry(producer.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: producer.producer_epoch,
                batches: VecDeque::new(),
                last_append: now,
            });
        if producer.producer_epoch > entry.epoch {
            entry.epoch = producer.producer_epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(record);
        while entry.batches.len() > BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
        entry.last_append = entry.last_append.max(now);
    }

    /// Rebuilds state from a batch read back from the log (restart).
    pub fn replay(&mut self, header: &BatchHeader, append_time: TimestampMs) {
        if header.producer.is_idempotent() && !header.is_control() {
            self.record(header, append_time);
        }
    }

    /// Forgets producers whose last append is older than `retention_ms`.
    /// Returns how many were forgotten.
    pub fn expire(&mut self, now: TimestampMs, retention_ms: i64) -> usize {
        let before = self.producers.len();
        let horizon = now.0.saturating_sub(retention_ms);
        self.producers
            .retain(|_, entry| entry.last_append.0 >= horizon);
        before - self.producers.len()
    }

    /// Producers with state.
    #[must_use]
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Whether no producer has state.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Every producer's state, in id order (a snapshot's bytes depend on
    /// the state only).
    #[must_use]
    pub fn entries(&self) -> Vec<(&i64, &ProducerEntry)> {
        let mut entries: Vec<_> = self.producers.iter().collect();
        entries.sort_unstable_by_key(|(producer_id, _)| **producer_id);
        entries
    }

    /// Inserts a producer's state (snapshot loading).
    pub fn insert(&mut self, producer_id: i64, entry: ProducerEntry) {
        self.producers.insert(producer_id, entry);
    }
}

/// Whether `sequence` lies in `first..=last`, a range that may wrap.
fn sequence_within(sequence: i32, first: i32, last: i32) -> bool {
    if first <= last {
        first <= sequence && sequence <= last
    } else {
        sequence >= first || sequence <= last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use corelog_wire::batch::{
        BatchBuilder, BatchLimits, Compression, NewRecord, ProducerIdentity, validate,
    };

    fn header(
        producer_id: i64,
        epoch: i16,
        first: i32,
        records: u32,
        payload: &str,
        base: u64,
    ) -> BatchHeader {
        let mut builder = BatchBuilder::new(Compression::None).producer(ProducerIdentity {
            producer_id,
            producer_epoch: epoch,
            base_sequence: first,
        });
        for _ in 0..records {
            builder
                .push(&NewRecord {
                    value: Some(Bytes::from(payload.to_owned())),
                    ..NewRecord::default()
                })
                .unwrap();
        }
        let bytes = builder.build().unwrap();
        let header = validate(&bytes, &BatchLimits::default()).unwrap();
        BatchHeader {
            base_offset: Offset(base),
            ..header
        }
    }

    #[test]
    fn entries_come_in_producer_id_order_whatever_the_insertion_order() {
        let mut table = ProducerStateTable::default();
        for (producer_id, base) in [(9, 0), (2, 10), (5, 20), (0, 30)] {
            table.record(&header(producer_id, 0, 0, 1, "a", base), TimestampMs(1));
        }
        let ids: Vec<i64> = table.entries().into_iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [0, 2, 5, 9]);
    }

    #[test]
    fn a_retry_returns_the_original_offsets_and_a_changed_payload_conflicts() {
        let mut table = ProducerStateTable::default();
        let first = header(7, 0, 0, 3, "a", 100);
        assert_eq!(table.check(&first), SequenceCheck::Append);
        table.record(&first, TimestampMs(1));
        match table.check(&header(7, 0, 0, 3, "a", 999)) {
            SequenceCheck::Duplicate(found) => {
                assert_eq!(
                    (found.base_offset, found.last_offset),
                    (Offset(100), Offset(102))
                );
            }
            other => panic!("expected a duplicate, got {other:?}"),
        }
        assert_eq!(
            table.check(&header(7, 0, 0, 3, "b", 999)),
            SequenceCheck::Reject(SequenceError::DuplicateConflict { first: 0, last: 2 })
        );
        assert_eq!(
            table.check(&header(7, 0, 1, 1, "a", 999)),
            SequenceCheck::Reject(SequenceError::DuplicateConflict { first: 1, last: 1 })
        );
    }

    #[test]
    fn gaps_stale_epochs_and_unknown_producers_are_refused() {
        let mut table = ProducerStateTable::default();
        table.record(&header(7, 2, 0, 3, "a", 0), TimestampMs(1));
        assert_eq!(
            table.check(&header(7, 2, 3, 1, "a", 3)),
            SequenceCheck::Append
        );
        assert_eq!(
            table.check(&header(7, 2, 5, 1, "a", 3)),
            SequenceCheck::Reject(SequenceError::OutOfOrder {
                expected: 3,
                got: 5
            })
        );
        assert_eq!(
            table.check(&header(7, 1, 3, 1, "a", 3)),
            SequenceCheck::Reject(SequenceError::StaleEpoch { current: 2, got: 1 })
        );
        assert_eq!(
            table.check(&header(7, 3, 0, 1, "a", 3)),
            SequenceCheck::Append
        );
        assert_eq!(
            table.check(&header(8, 0, 4, 1, "a", 3)),
            SequenceCheck::Reject(SequenceError::UnknownProducer {
                producer_id: 8,
                got: 4
            })
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut table = ProducerStateTable::default();
        for index in 0..7 {
            table.record(&header(1, 0, index, 1, "x", index as u64), TimestampMs(1));
        }
        assert!(matches!(
            table.check(&header(1, 0, 2, 1, "x", 0)),
            SequenceCheck::Duplicate(_)
        ));
        assert!(matches!(
            table.check(&header(1, 0, 1, 1, "x", 0)),
            SequenceCheck::Reject(_)
        ));
        assert_eq!(
            table.check(&header(1, 0, 7, 1, "x", 0)),
            SequenceCheck::Append
        );
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(last_sequence(i32::MAX - 1, 3), 0);
        assert_eq!(next_sequence(i32::MAX), 0);
        let mut table = ProducerStateTable::default();
        table.record(&header(1, 0, i32::MAX - 1, 2, "x", 0), TimestampMs(1));
        assert_eq!(
            table.check(&header(1, 0, 0, 1, "x", 2)),
            SequenceCheck::Append
        );
    }

    #[test]
    fn idle_producers_expire() {
        let mut table = ProducerStateTable::default();
        table.record(&header(1, 0, 0, 1, "x", 0), TimestampMs(1_000));
        table.record(&header(2, 0, 0, 1, "x", 1), TimestampMs(5_000));
        assert_eq!(table.expire(TimestampMs(6_000), 2_000), 1);
        assert_eq!(table.len(), 1);
    }
}
