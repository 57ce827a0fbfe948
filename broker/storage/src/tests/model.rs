//! The log against an in-memory model: random sequences of append, read,
//! read-by-time, time passing (rolls), retention, clean reopen and crash
//! reopen, checking after each step that the log holds exactly the model's
//! batches from its start.

use bytes::Bytes;
use proptest::prelude::*;

use super::super::{DeletionCause, RetentionPolicy, StorageError};
use super::*;

#[derive(Clone, Debug)]
enum Op {
    Append { records: usize, value_len: usize },
    Read { at_permille: u32, max_bytes: usize },
    ReadByTime { back_ms: i64 },
    Advance { ms: i64 },
    Retention,
    Reopen,
    Crash,
    ReadBelowStart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..6, 0usize..400).prop_map(|(records, value_len)| Op::Append { records, value_len }),
        4 => (0u32..=1000, 1usize..6000).prop_map(|(at_permille, max_bytes)| Op::Read { at_permille, max_bytes }),
        1 => (0i64..20_000).prop_map(|back_ms| Op::ReadByTime { back_ms }),
        2 => (1i64..30_000).prop_map(|ms| Op::Advance { ms }),
        2 => Just(Op::Retention),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => Just(Op::ReadBelowStart),
    ]
}

struct ModelBatch {
    base: Offset,
    next: Offset,
    bytes: Bytes,
    max_timestamp: TimestampMs,
}

#[derive(Default)]
struct Model {
    batches: Vec<ModelBatch>,
    log_start: Offset,
    next: Offset,
}

impl Model {
    fn end(&self) -> Offset {
        self.next
    }
}

fn check_matches(model: &Model, log: &PartitionLog<MemoryDisk>) -> Result<(), TestCaseError> {
    prop_assert_eq!(log.log_start(), model.log_start);
    prop_assert_eq!(log.durable_end(), model.end());
    let all = block_on(read_all(log));
    prop_assert_eq!(all.len(), model.batches.len());
    for ((base, next, bytes), expected) in all.iter().zip(&model.batches) {
        prop_assert_eq!(*base, expected.base);
        prop_assert_eq!(*next, expected.next);
        prop_assert_eq!(bytes, &expected.bytes);
    }
    Ok(())
}

fn run_ops(ops: Vec<Op>, retention: RetentionPolicy) -> Result<(), TestCaseError> {
    let mut config = small_config();
    config.retention = retention;
    let harness = Harness::new(config);
    let mut log = block_on(harness.open());
    let mut model = Model::default();
    let mut tag = 0u64;
    for op in ops {
        match op {
            Op::Append { records, value_len } => {
                tag += 1;
                let now = harness.clock.now().0;
                let batch = make_batch(tag, records, value_len, now);
                let mut expected = batch.to_vec();
                let outcome = block_on(log.append(batch))
                    .map_err(|error| TestCaseError::fail(error.to_string()))?;
                prop_assert_eq!(outcome.base_offset, model.next);
                prop_assert_eq!(outcome.last_offset, model.next.plus(records as u64 - 1));
                batch::set_base_offset(&mut expected, model.next);
                model.batches.push(ModelBatch {
                    base: model.next,
                    next: model.next.plus(records as u64),
                    bytes: Bytes::from(expected),
                    max_timestamp: TimestampMs(now + records as i64 - 1),
                });
                model.next = model.next.plus(records as u64);
            }
            Op::Read {
                at_permille,
                max_bytes,
            } => {
                let span = model.end().0 - model.log_start.0;
                let from = Offset(model.log_start.0 + span * u64::from(at_permille) / 1000);
                let outcome = block_on(log.read(from, max_bytes, None))
                    .map_err(|error| TestCaseError::fail(error.to_string()))?;
                let batches = batches_of(&outcome);
                if from == model.end() {
                    prop_assert!(batches.is_empty());
                    prop_assert_eq!(outcome.next_offset, from);
                    continue;
                }
                prop_assert!(
                    !batches.is_empty(),
                    "read at {} below the end returned nothing",
                    from
                );
                let first = model
                    .batches
                    .iter()
                    .position(|batch| batch.base <= from && from < batch.next);
                let first = first.ok_or_else(|| TestCaseError::fail("offset not in model"))?;
                let total: usize = batches.iter().map(|(_, _, bytes)| bytes.len()).sum();
                prop_assert!(
                    total <= max_bytes.max(batches[0].2.len()),
                    "read exceeded max_bytes"
                );
                for (index, (base, next, bytes)) in batches.iter().enumerate() {
                    let expected = &model.batches[first + index];
                    prop_assert_eq!(*base, expected.base);
                    prop_assert_eq!(*next, expected.next);
                    prop_assert_eq!(bytes, &expected.bytes);
                }
                prop_assert_eq!(
                    outcome.next_offset,
                    batches.last().map(|batch| batch.1).unwrap_or(from)
                );
            }
            Op::ReadByTime { back_ms } => {
                let target = TimestampMs(harness.clock.now().0 - back_ms);
                let found = block_on(log.offset_for_timestamp(target))
                    .map_err(|error| TestCaseError::fail(error.to_string()))?;
                // Records within a batch carry consecutive timestamps from
                // its creation time; the first at or after the target:
                let expected = model.batches.iter().find_map(|batch| {
                    (batch.max_timestamp >= target).then(|| {
                        let first_ts =
                            batch.max_timestamp.0 - (batch.next.0 - batch.base.0 - 1) as i64;
                        let skip = (target.0 - first_ts).max(0) as u64;
                        (batch.base.plus(skip), TimestampMs(first_ts + skip as i64))
                    })
                });
                prop_assert_eq!(found, expected);
            }
            Op::Advance { ms } => harness.clock.advance(ms),
            Op::Retention => {
                while let Some(deletion) = block_on(log.enforce_retention())
                    .map_err(|error| TestCaseError::fail(error.to_string()))?
                {
                    prop_assert_eq!(deletion.start_offset, model.log_start);
                    let cut = model
                        .batches
                        .iter()
                        .position(|batch| batch.base == deletion.end_offset);
                    let cut =
                        cut.ok_or_else(|| TestCaseError::fail("deletion not at a batch boundary"))?;
                    let removed: Vec<_> = model.batches.drain(..cut).collect();
                    let bytes: u64 = removed.iter().map(|batch| batch.bytes.len() as u64).sum();
                    prop_assert_eq!(deletion.bytes, bytes);
                    if deletion.cause == DeletionCause::RetentionTime {
                        let horizon = harness.clock.now().0 - retention.retention_ms.unwrap_or(0);
                        prop_assert!(removed.iter().all(|batch| batch.max_timestamp.0 < horizon));
                    }
                    if deletion.cause == DeletionCause::RetentionSize {
                        prop_assert!(log.size_bytes() >= retention.retention_bytes.unwrap_or(0));
                    }
                    model.log_start = deletion.end_offset;
                }
                prop_assert!(!log.segments().is_empty());
            }
            Op::Reopen => {
                block_on(log.close()).map_err(|error| TestCaseError::fail(error.to_string()))?;
                drop(log);
                log = block_on(harness.open());
            }
            Op::Crash => {
                drop(log);
                harness.disk.crash();
                log = block_on(harness.open());
            }
            Op::ReadBelowStart => {
                if model.log_start > Offset(0) {
                    let error = block_on(log.read(Offset(0), 1000, None)).expect_err("below start");
                    match error {
                        StorageError::OffsetOutOfRange {
                            log_start, deleted, ..
                        } => {
                            prop_assert_eq!(log_start, model.log_start);
                            prop_assert_eq!(
                                deleted.first().map(|range| range.start_offset),
                                Some(Offset(0))
                            );
                            prop_assert_eq!(
                                deleted.last().map(|range| range.end_offset),
                                Some(model.log_start)
                            );
                        }
                        other => return Err(TestCaseError::fail(format!("unexpected {other}"))),
                    }
                }
            }
        }
        for segment in log.segments() {
            prop_assert!(segment.size_bytes <= harness.config.segment_bytes);
        }
    }
    check_matches(&model, &log)?;
    block_on(log.close()).map_err(|error| TestCaseError::fail(error.to_string()))?;
    drop(log);
    let reopened = block_on(harness.open());
    check_matches(&model, &reopened)
}

/// Cases per retention policy; four policies run, so 4 × this in total.
const CASES: u32 = 256;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn log_matches_model_without_retention(ops in proptest::collection::vec(op(), 1..200)) {
        run_ops(ops, RetentionPolicy { retention_ms: None, retention_bytes: None })?;
    }

    #[test]
    fn log_matches_model_with_time_retention(ops in proptest::collection::vec(op(), 1..200)) {
        run_ops(ops, RetentionPolicy { retention_ms: Some(45_000), retention_bytes: None })?;
    }

    #[test]
    fn log_matches_model_with_size_retention(ops in proptest::collection::vec(op(), 1..200)) {
        run_ops(ops, RetentionPolicy { retention_ms: None, retention_bytes: Some(20_000) })?;
    }

    #[test]
    fn log_matches_model_with_both_retentions(ops in proptest::collection::vec(op(), 1..200)) {
        run_ops(ops, RetentionPolicy { retention_ms: Some(60_000), retention_bytes: Some(30_000) })?;
    }
}
