//! One partition's batches between their first send and their
//! acknowledgement: sequence numbers, retries with the same bytes, and the
//! order rules of the idempotent producer (C5). Pure: no I/O, time comes in
//! as an argument.
//!
//! # Sequences
//!
//! A batch's `base_sequence` is the sequence of its first record; the next
//! batch's is `base + record_count`, wrapping from `i32::MAX` to 0. A
//! sequence is assigned when the batch is first taken for sending, and the
//! encoded bytes are kept: every retry resends exactly those bytes, so the
//! broker can recognise a retry of an appended batch and answer with the
//! original offset.
//!
//! # Order
//!
//! Up to `max_in_flight` batches per partition are in flight, sent on one
//! connection in sequence order. When one fails with a retriable error, the
//! partition enters recovery: no new batch is taken, the batches still in
//! flight are allowed to come back (those behind the failed one are refused
//! by the broker as out of order, which is expected and retried), and then
//! the waiting batches are resent one at a time, in sequence order, until
//! none waits. Recovery is slower than pipelining but can never reorder.

use std::collections::BTreeMap;

use bytes::Bytes;
use corelog_wire::batch::{BatchBuilder, BatchError, Compression, ProducerIdentity};
use corelog_wire::error::ErrorCode;
use tokio::time::Instant;

use super::accumulator::PendingBatch;
use crate::error::ClientError;

/// The sequence after a batch of `record_count` records starting at
/// `base`: sequences wrap from `i32::MAX` to 0.
#[must_use]
pub(crate) fn sequence_after(base: i32, record_count: u32) -> i32 {
    let modulus = i64::from(i32::MAX) + 1;
    // The remainder is in 0..=i32::MAX.
    ((i64::from(base) + i64::from(record_count)).rem_euclid(modulus)) as i32
}

/// What to do with a batch after the broker's answer for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Appended (or a duplicate of an appended batch): resolve its records.
    Success,
    /// Resend the same bytes later; refresh metadata first if the leader
    /// may have moved.
    Retry { refresh_metadata: bool },
    /// The batch cannot succeed; fail it. Batches after it in the partition
    /// now follow a hole in the sequence.
    FailBatch,
    /// The partition's sequence state is broken (a real gap, a conflicting
    /// payload, or a broker that lost the producer): fail this batch, give
    /// up the others of the partition, and start a new producer id.
    AbortPartition,
    /// A newer producer with the same id exists: stop producing.
    Fenced,
}

/// Decides what an error code means for a batch. `is_first_unacked` says
/// whether every earlier batch of the partition was acknowledged: an
/// out-of-order answer is expected after an earlier batch failed, and a real
/// gap only when none is outstanding.
#[must_use]
pub(crate) fn classify(code: ErrorCode, is_first_unacked: bool) -> Verdict {
    match code {
        ErrorCode::None => Verdict::Success,
        ErrorCode::InvalidProducerEpoch => Verdict::Fenced,
        // An earlier batch is still unacknowledged (refused retriably, or on
        // its way): the partition's leader has not seen the sequence before
        // this one yet, or, when that was the first batch, has no state for
        // the producer at all. Resent in order after it, this one fits.
        ErrorCode::OutOfOrderSequence | ErrorCode::UnknownProducerId if !is_first_unacked => {
            Verdict::Retry {
                refresh_metadata: false,
            }
        }
        // Retrying the same bytes under an id the broker forgot cannot
        // succeed, although the code is marked retriable for clients that
        // re-initialise first; this client does, through AbortPartition.
        // An id the broker does not bind to this login (given before the
        // cluster bound ids to principals) is replaced the same way.
        ErrorCode::OutOfOrderSequence
        | ErrorCode::DuplicateSequenceConflict
        | ErrorCode::UnknownProducerId
        | ErrorCode::ProducerIdNotOwned => Verdict::AbortPartition,
        ErrorCode::NotLeader
        | ErrorCode::UnknownTopicOrPartition
        | ErrorCode::LeaderNotAvailable
        | ErrorCode::FencedLeaderEpoch
        | ErrorCode::StorageError => Verdict::Retry {
            refresh_metadata: true,
        },
        // The broker refused bytes damaged on the way (its CRC check); the
        // producer's own copy was checked when it was encoded, so a resend
        // of the same bytes is safe and usually succeeds.
        ErrorCode::CorruptMessage => Verdict::Retry {
            refresh_metadata: false,
        },
        code if code.is_retriable() => Verdict::Retry {
            refresh_metadata: false,
        },
        _ => Verdict::FailBatch,
    }
}

/// Where a sent batch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendState {
    /// A request carrying it is on the wire.
    InFlight,
    /// It failed retriably and waits to be resent.
    Waiting {
        /// Not before this instant (backoff).
        retry_at: Instant,
    },
}

/// A batch that was encoded and sent at least once.
#[derive(Debug)]
pub(crate) struct SentBatch {
    /// The records' delivery slots and the buffer ticket.
    pub batch: PendingBatch,
    /// The encoded batch, resent unchanged by every retry.
    pub bytes: Bytes,
    /// Sequence of the first record, or -1 without idempotence.
    pub base_sequence: i32,
    /// Attempts so far.
    pub attempts: u32,
    /// In flight or waiting.
    pub state: SendState,
    /// The error of the last failed attempt.
    pub last_error: Option<ClientError>,
}

/// One partition's unacknowledged batches, in sequence order.
#[derive(Debug, Default)]
pub(crate) struct PartitionInFlight {
    next_sequence: i32,
    next_number: u64,
    unacked: BTreeMap<u64, SentBatch>,
    /// How many of `unacked` are [`SendState::Waiting`]: the sender asks
    /// every partition whether it is in recovery on every turn of its
    /// loop, and a scan of each partition's batches there cost more than
    /// encoding them.
    waiting: usize,
}

impl PartitionInFlight {
    /// Whether a batch waits for a resend.
    pub(crate) fn in_recovery(&self) -> bool {
        debug_assert_eq!(
            self.waiting,
            self.unacked
                .values()
                .filter(|sent| matches!(sent.state, SendState::Waiting { .. }))
                .count(),
            "the waiting count matches the batches"
        );
        self.waiting > 0
    }

    /// Whether a new batch may be taken now: at most `max_in_flight`
    /// batches from the oldest unacknowledged one, not merely that many
    /// unacknowledged. The broker acknowledges out of order and remembers
    /// only the last few batches per producer; a window counted by
    /// unacknowledged batches could run past the oldest one, whose retry
    /// would then get OUT_OF_ORDER_SEQUENCE although it was stored.
    pub(crate) fn can_start(&self, max_in_flight: usize) -> bool {
        let window_start = self
            .unacked
            .keys()
            .next()
            .copied()
            .unwrap_or(self.next_number);
        let window = usize::try_from(self.next_number - window_start).unwrap_or(usize::MAX);
        !self.in_recovery() && window < max_in_flight
    }

    /// Whether nothing is unacknowledged.
    pub(crate) fn is_empty(&self) -> bool {
        self.unacked.is_empty()
    }

    /// The sequence the next new batch will get.
    #[cfg(test)]
    pub(crate) fn next_sequence(&self) -> i32 {
        self.next_sequence
    }

    /// Encodes a new batch with the next sequence (when `producer` is
    /// idempotent) and tracks it as in flight. Returns its number in this
    /// partition and its bytes.
    ///
    /// # Errors
    /// The encoder's error; the batch's records have failed with it, and no
    /// sequence was used.
    pub(crate) fn start(
        &mut self,
        mut batch: PendingBatch,
        producer: Option<(i64, i16)>,
    ) -> Result<(u64, Bytes), BatchError> {
        let record_count = u32::try_from(batch.records.len()).unwrap_or(u32::MAX);
        let identity = match producer {
            Some((producer_id, producer_epoch)) => ProducerIdentity {
                producer_id,
                producer_epoch,
                base_sequence: self.next_sequence,
            },
            None => ProducerIdentity::NONE,
        };
        let builder = std::mem::replace(&mut batch.builder, BatchBuilder::new(Compression::None));
        let bytes = match builder.producer(identity).build() {
            Ok(bytes) => bytes,
            Err(error) => {
                batch.fail(&ClientError::InvalidArgument(format!(
                    "the batch cannot be encoded: {error}"
                )));
                return Err(error);
            }
        };
        if producer.is_some() {
            self.next_sequence = sequence_after(self.next_sequence, record_count);
        }
        let number = self.next_number;
        self.next_number += 1;
        self.unacked.insert(
            number,
            SentBatch {
                batch,
                bytes: bytes.clone(),
                base_sequence: identity.base_sequence,
                attempts: 1,
                state: SendState::InFlight,
                last_error: None,
            },
        );
        Ok((number, bytes))
    }

    /// In recovery, the batch to resend now: the first waiting one, once
    /// nothing of this partition is in flight and its backoff has passed.
    /// Returns its number and the same bytes as every earlier attempt.
    pub(crate) fn next_retry(&mut self, now: Instant) -> Option<(u64, Bytes)> {
        if self
            .unacked
            .values()
            .any(|sent| sent.state == SendState::InFlight)
        {
            return None;
        }
        let (&number, sent) = self.unacked.iter_mut().next()?;
        match sent.state {
            SendState::Waiting { retry_at } if retry_at <= now => {
                sent.state = SendState::InFlight;
                sent.attempts += 1;
                self.waiting -= 1;
                Some((number, sent.bytes.clone()))
            }
            _ => None,
        }
    }

    /// When the next resend may happen, if one is waiting.
    pub(crate) fn next_retry_at(&self) -> Option<Instant> {
        self.unacked.values().find_map(|sent| match sent.state {
            SendState::Waiting { retry_at } => Some(retry_at),
            SendState::InFlight => None,
        })
    }

    /// Marks an in-flight batch as waiting for a resend.
    pub(crate) fn wait_for_retry(&mut self, number: u64, error: ClientError, retry_at: Instant) {
        if let Some(sent) = self.unacked.get_mut(&number) {
            if sent.state == SendState::InFlight {
                self.waiting += 1;
            }
            sent.state = SendState::Waiting { retry_at };
            sent.last_error = Some(error);
        }
    }

    /// A tracked batch.
    pub(crate) fn get(&self, number: u64) -> Option<&SentBatch> {
        self.unacked.get(&number)
    }

    /// Whether every batch before `number` was acknowledged.
    pub(crate) fn is_first(&self, number: u64) -> bool {
        self.unacked
            .keys()
            .next()
            .is_none_or(|&first| first >= number)
    }

    /// Whether a batch after `number` is unacknowledged.
    pub(crate) fn has_later(&self, number: u64) -> bool {
        self.unacked.range(number + 1..).next().is_some()
    }

    /// Stops tracking a batch (acknowledged or failed) and returns it.
    pub(crate) fn remove(&mut self, number: u64) -> Option<SentBatch> {
        let removed = self.unacked.remove(&number)?;
        if removed.state != SendState::InFlight {
            self.waiting -= 1;
        }
        Some(removed)
    }

    /// Stops tracking every batch and returns them, in sequence order.
    pub(crate) fn drain(&mut self) -> Vec<SentBatch> {
        self.waiting = 0;
        std::mem::take(&mut self.unacked).into_values().collect()
    }

    /// Batches waiting whose delivery deadline has passed.
    pub(crate) fn expired_waiting(&self, deadline: Instant) -> Vec<u64> {
        if self.waiting == 0 {
            return Vec::new();
        }
        self.unacked
            .iter()
            .filter(|(_, sent)| {
                matches!(sent.state, SendState::Waiting { .. }) && sent.batch.created_at <= deadline
            })
            .map(|(&number, _)| number)
            .collect()
    }

    /// The earliest creation time among waiting batches, for the delivery
    /// deadline.
    pub(crate) fn oldest_waiting(&self) -> Option<Instant> {
        if self.waiting == 0 {
            return None;
        }
        self.unacked
            .values()
            .filter(|sent| matches!(sent.state, SendState::Waiting { .. }))
            .map(|sent| sent.batch.created_at)
            .min()
    }

    /// Moves the next sequence back to a failed batch's, when nothing after
    /// it was sent: the broker never saw that sequence used.
    pub(crate) fn rewind(&mut self, sequence: i32) {
        self.next_sequence = sequence;
    }

    /// Starts sequences over, for a new producer id.
    pub(crate) fn reset_sequence(&mut self) {
        assert!(
            self.unacked.is_empty(),
            "sequences reset with batches outstanding"
        );
        self.next_sequence = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use corelog_wire::batch::{NewRecord, decode_records, validate};
    use corelog_wire::types::TimestampMs;

    use super::*;
    use crate::producer::accumulator::{
        Accumulator, AccumulatorConfig, Target, TopicPartition, record_size,
    };

    /// A ready batch of `count` records, taken from a real accumulator.
    fn batch(accumulator: &Accumulator, count: usize) -> PendingBatch {
        let topic: Arc<str> = Arc::from("t");
        for i in 0..count {
            let record = NewRecord {
                value: Some(bytes::Bytes::from(format!("record {i}"))),
                timestamp: TimestampMs(1_000),
                ..NewRecord::default()
            };
            let size = record_size(&record);
            accumulator.try_reserve(size).unwrap();
            let _ = accumulator
                .append(&topic, Target::Partition(0), &record, size)
                .unwrap();
        }
        let _markers = accumulator.flush_markers();
        accumulator
            .pop_ready(
                &TopicPartition {
                    topic,
                    partition: 0,
                },
                Instant::now(),
            )
            .unwrap()
    }

    fn accumulator() -> Accumulator {
        Accumulator::new(AccumulatorConfig {
            linger: Duration::from_millis(5),
            batch_bytes: 1 << 16,
            buffer_bytes: 1 << 20,
            compression: Compression::None,
        })
    }

    const PRODUCER: Option<(i64, i16)> = Some((42, 3));

    #[test]
    fn sequences_advance_by_record_count_and_wrap_at_i32_max() {
        assert_eq!(sequence_after(0, 5), 5);
        assert_eq!(sequence_after(i32::MAX - 2, 3), 0);
        assert_eq!(sequence_after(i32::MAX, 1), 0);
        assert_eq!(sequence_after(i32::MAX - 1, 10), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn each_batch_carries_the_next_sequence_and_the_producer_identity() {
        let accumulator = accumulator();
        let mut partition = PartitionInFlight::default();
        let (first, first_bytes) = partition.start(batch(&accumulator, 3), PRODUCER).unwrap();
        let (second, second_bytes) = partition.start(batch(&accumulator, 2), PRODUCER).unwrap();
        assert_eq!((first, second), (0, 1));
        let limits = corelog_wire::batch::BatchLimits::default();
        let header = validate(&first_bytes, &limits).unwrap();
        assert_eq!(
            header.producer,
            ProducerIdentity {
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: 0
            }
        );
        assert_eq!(
            validate(&second_bytes, &limits)
                .unwrap()
                .producer
                .base_sequence,
            3
        );
        assert_eq!(partition.next_sequence(), 5);
        assert_eq!(decode_records(&second_bytes, &limits).unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_resends_exactly_the_same_bytes() {
        let accumulator = accumulator();
        let mut partition = PartitionInFlight::default();
        let (number, bytes) = partition.start(batch(&accumulator, 4), PRODUCER).unwrap();
        let now = Instant::now();
        let lost = ClientError::ConnectionLost {
            addr: "x".to_owned(),
            reason: "test".to_owned(),
        };
        partition.wait_for_retry(number, lost, now + Duration::from_millis(100));
        assert!(partition.in_recovery());
        assert!(!partition.can_start(5));
        assert_eq!(partition.next_retry(now), None, "backoff not over");
        let (again, retry_bytes) = partition
            .next_retry(now + Duration::from_millis(100))
            .unwrap();
        assert_eq!(again, number);
        assert_eq!(retry_bytes, bytes);
        assert_eq!(retry_bytes.as_ptr(), bytes.as_ptr(), "not even re-encoded");
        assert_eq!(partition.get(number).unwrap().attempts, 2);
        // The sequence was used once.
        assert_eq!(partition.next_sequence(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn recovery_resends_one_batch_at_a_time_in_sequence_order() {
        let accumulator = accumulator();
        let mut partition = PartitionInFlight::default();
        let numbers: Vec<u64> = (0..3)
            .map(|_| partition.start(batch(&accumulator, 1), PRODUCER).unwrap().0)
            .collect();
        let now = Instant::now();
        let error = || ClientError::ConnectionLost {
            addr: "x".to_owned(),
            reason: "test".to_owned(),
        };
        // The first fails; the later ones are still in flight: wait for them.
        partition.wait_for_retry(numbers[0], error(), now);
        assert_eq!(partition.next_retry(now), None);
        assert!(!partition.is_first(numbers[1]));
        // They come back out of order, as the broker refuses them.
        assert_eq!(
            classify(
                ErrorCode::OutOfOrderSequence,
                partition.is_first(numbers[1])
            ),
            Verdict::Retry {
                refresh_metadata: false
            }
        );
        partition.wait_for_retry(numbers[1], error(), now);
        partition.wait_for_retry(numbers[2], error(), now);
        let (resend, _) = partition.next_retry(now).unwrap();
        assert_eq!(resend, numbers[0]);
        assert_eq!(partition.next_retry(now), None, "one at a time");
        assert!(partition.remove(resend).is_some());
        assert_eq!(partition.next_retry(now).unwrap().0, numbers[1]);
        partition.remove(numbers[1]);
        assert_eq!(partition.next_retry(now).unwrap().0, numbers[2]);
        partition.remove(numbers[2]);
        assert!(partition.can_start(5));
    }

    #[test]
    fn a_batch_damaged_on_the_way_is_resent() {
        assert_eq!(
            classify(ErrorCode::CorruptMessage, true),
            Verdict::Retry {
                refresh_metadata: false
            }
        );
    }

    #[test]
    fn out_of_order_for_the_first_unacked_batch_is_a_real_gap() {
        assert_eq!(
            classify(ErrorCode::OutOfOrderSequence, true),
            Verdict::AbortPartition
        );
        assert_eq!(
            classify(ErrorCode::DuplicateSequenceConflict, false),
            Verdict::AbortPartition
        );
        assert_eq!(
            classify(ErrorCode::UnknownProducerId, true),
            Verdict::AbortPartition
        );
        assert_eq!(
            classify(ErrorCode::UnknownProducerId, false),
            Verdict::Retry {
                refresh_metadata: false
            },
            "the first batch of the producer is still unacknowledged"
        );
        assert_eq!(
            classify(ErrorCode::ProducerIdNotOwned, false),
            Verdict::AbortPartition,
            "an id of another login is replaced"
        );
        assert_eq!(
            classify(ErrorCode::InvalidProducerEpoch, true),
            Verdict::Fenced
        );
        assert_eq!(
            classify(ErrorCode::NotLeader, true),
            Verdict::Retry {
                refresh_metadata: true
            }
        );
        assert_eq!(
            classify(ErrorCode::NotEnoughReplicas, true),
            Verdict::Retry {
                refresh_metadata: false
            }
        );
        assert_eq!(
            classify(ErrorCode::MessageTooLarge, true),
            Verdict::FailBatch
        );
        assert_eq!(classify(ErrorCode::None, false), Verdict::Success);
    }

    #[tokio::test(start_paused = true)]
    async fn without_idempotence_batches_carry_no_identity_and_use_no_sequence() {
        let accumulator = accumulator();
        let mut partition = PartitionInFlight::default();
        let (_, bytes) = partition.start(batch(&accumulator, 2), None).unwrap();
        let header = validate(&bytes, &corelog_wire::batch::BatchLimits::default()).unwrap();
        assert!(!header.producer.is_idempotent());
        assert_eq!(partition.next_sequence(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_limit_bounds_new_batches() {
        let accumulator = accumulator();
        let mut partition = PartitionInFlight::default();
        for _ in 0..5 {
            assert!(partition.can_start(5));
            partition.start(batch(&accumulator, 1), PRODUCER).unwrap();
        }
        assert!(!partition.can_start(5));
        // Acknowledged out of order: while batch 0 is outstanding the
        // window does not move, or a retry of batch 0 could fall outside
        // the broker's memory of each producer's recent batches.
        partition.remove(2);
        assert!(!partition.can_start(5));
        assert!(partition.has_later(1));
        assert!(!partition.has_later(4));
        partition.remove(0);
        assert!(partition.can_start(5));
    }
}
