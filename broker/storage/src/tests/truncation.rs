//! Truncation of an uncommitted tail, reset below the leader's log start,
//! and appends of batches a leader placed (the follower's side of
//! replication).

use bytes::Bytes;
use corelog_wire::batch;

use super::super::{PlacedBatch, StorageError};
use super::*;

fn placed(tag: u64, base: u64, records: usize) -> PlacedBatch {
    let mut bytes = make_batch(tag, records, 100, T0).to_vec();
    batch::set_base_offset(&mut bytes, Offset(base));
    PlacedBatch::check(Bytes::from(bytes), &BatchLimits::default()).expect("valid")
}

#[test]
fn truncation_cuts_at_a_batch_boundary_across_segments_and_survives_a_crash() {
    let harness = Harness::new(small_config());
    let log = block_on(harness.open());
    let mut ends = Vec::new();
    for tag in 0..40 {
        let outcome = block_on(log.append(make_batch(tag, 3, 200, T0))).expect("append");
        ends.push(outcome.last_offset.plus(1));
    }
    assert!(log.segment_count() >= 3);
    let before = block_on(read_all(&log));
    // Inside the 11th batch (offsets 30..33): the cut is at its start.
    let new_end = block_on(log.truncate_to(Offset(31))).expect("truncate");
    assert_eq!(new_end, Offset(30));
    assert_eq!(
        (log.durable_end(), log.next_offset()),
        (Offset(30), Offset(30))
    );
    let after = block_on(read_all(&log));
    assert_eq!(
        after,
        before
            .iter()
            .filter(|batch| batch.1 <= Offset(30))
            .cloned()
            .collect::<Vec<_>>()
    );
    // The log continues from the cut, with the leader's offsets.
    log.start_append_replicated(placed(900, 30, 2))
        .expect("replicated");
    block_on(log.wait_durable(Offset(32))).expect("durable");
    drop(log);
    harness.disk.crash();
    let log = block_on(harness.open());
    assert_eq!(log.durable_end(), Offset(32));
    assert_eq!(block_on(read_all(&log)).len(), 11);
    assert!(
        log.deletions()
            .iter()
            .any(|deletion| deletion.cause == super::super::DeletionCause::Truncation)
    );
}

#[test]
fn a_replicated_append_must_continue_the_log() {
    let harness = Harness::new(small_config());
    let log = block_on(harness.open());
    let error = log
        .start_append_replicated(placed(1, 5, 1))
        .expect_err("gap");
    assert_eq!(
        error,
        StorageError::OutOfSequence {
            expected: Offset(0),
            got: Offset(5)
        }
    );
    block_on(async {
        log.start_append_replicated(placed(1, 0, 3)).expect("first");
        log.wait_durable(Offset(3)).await.expect("durable");
    });
    let read = block_on(log.read(Offset(0), 1 << 20, None)).expect("read");
    assert_eq!(
        batches_of(&read)[0].0,
        Offset(0),
        "kept the leader's offsets"
    );
}

#[test]
fn reset_restarts_an_empty_log_at_the_leaders_start() {
    let harness = Harness::new(small_config());
    let log = block_on(harness.open());
    for tag in 0..20 {
        block_on(log.append(make_batch(tag, 2, 300, T0))).expect("append");
    }
    block_on(log.reset_to(Offset(1_000))).expect("reset");
    assert_eq!(
        (log.log_start(), log.durable_end(), log.segment_count()),
        (Offset(1_000), Offset(1_000), 1)
    );
    assert!(matches!(
        block_on(log.read(Offset(10), 100, None)),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    block_on(async {
        log.start_append_replicated(placed(7, 1_000, 4))
            .expect("append at the new start");
        log.wait_durable(Offset(1_004)).await.expect("durable");
    });
    drop(log);
    harness.disk.crash();
    let log = block_on(harness.open());
    assert_eq!(
        (log.log_start(), log.durable_end()),
        (Offset(1_000), Offset(1_004))
    );
}
