//! Retention by time and by size: only closed segments, the log start
//! persisted before the unlink, the gap error saying what was deleted and
//! why, and readers holding a segment finishing on it.

use super::super::segment::SegmentPaths;
use super::super::{DeletionCause, RetentionPolicy, StorageError};
use super::*;

fn retention_config(retention: RetentionPolicy) -> LogConfig {
    let mut config = small_config();
    config.retention = retention;
    config
}

fn append_many(harness: &Harness, log: &PartitionLog<MemoryDisk>, count: u64) {
    for tag in 0..count {
        let now = harness.clock.now().0;
        block_on(log.append(make_batch(tag, 2, 300, now))).expect("append");
    }
}

#[test]
fn time_retention_deletes_expired_closed_segments_and_explains_the_gap() {
    let harness = Harness::new(retention_config(RetentionPolicy {
        retention_ms: Some(3_600_000),
        retention_bytes: None,
    }));
    let log = block_on(harness.open());
    append_many(&harness, &log, 60);
    let old_segments = log.segment_count();
    assert!(old_segments >= 3);
    assert_eq!(
        block_on(log.enforce_retention()).expect("retention"),
        None,
        "nothing expired yet"
    );

    harness.clock.advance(2 * 3_600_000);
    append_many(&harness, &log, 5);
    let fresh_start = log.segments().last().expect("active").base_offset;
    let mut deleted = Vec::new();
    while let Some(deletion) = block_on(log.enforce_retention()).expect("retention") {
        deleted.push(deletion);
    }
    // The first fresh append rolled the old active segment by age, so every
    // old segment went, one per call; the fresh one stayed.
    assert_eq!(deleted.len(), old_segments);
    assert!(
        deleted
            .iter()
            .all(|deletion| deletion.cause == DeletionCause::RetentionTime)
    );
    assert_eq!(log.log_start(), fresh_start);
    for (base, ..) in block_on(read_all(&log)) {
        assert!(base >= log.log_start());
    }
    match block_on(log.read(Offset(0), 1000, None)) {
        Err(StorageError::OffsetOutOfRange {
            log_start,
            deleted: gap,
            ..
        }) => {
            assert_eq!(log_start, log.log_start());
            assert_eq!(gap.len(), 1, "contiguous deletions with one cause merge");
            assert_eq!(
                (gap[0].start_offset, gap[0].end_offset),
                (Offset(0), log_start)
            );
            assert_eq!(gap[0].cause, DeletionCause::RetentionTime);
            assert_eq!(gap[0].record_count, log_start.0);
        }
        other => panic!("expected OFFSET_OUT_OF_RANGE, got {other:?}"),
    }
    // Deleted files are gone from the disk.
    assert!(
        harness
            .disk
            .contents(&SegmentPaths::new(&harness.dir, Offset(0)).log)
            .is_none()
    );
}

#[test]
fn size_retention_keeps_the_bound_and_never_the_active_segment() {
    let harness = Harness::new(retention_config(RetentionPolicy {
        retention_ms: None,
        retention_bytes: Some(20_000),
    }));
    let log = block_on(harness.open());
    append_many(&harness, &log, 120);
    while block_on(log.enforce_retention())
        .expect("retention")
        .is_some()
    {}
    let segments = log.segments();
    let total: u64 = segments.iter().map(|segment| segment.size_bytes).sum();
    assert!(total >= 20_000, "kept at least the bound");
    assert!(
        total - segments[0].size_bytes < 20_000,
        "deleting one more would go under it"
    );
    assert!(
        log.deletions()
            .iter()
            .all(|deletion| deletion.cause == DeletionCause::RetentionSize)
    );
}

#[test]
fn a_reader_holding_a_segment_finishes_on_it_after_deletion() {
    let harness = Harness::new(retention_config(RetentionPolicy {
        retention_ms: None,
        retention_bytes: Some(1),
    }));
    let log = block_on(harness.open());
    append_many(&harness, &log, 40);
    let held = log.segment_holding(Offset(0)).expect("first segment");
    let expected = block_on(log.read(Offset(0), 4096, None)).expect("read before deletion");
    let deletion = block_on(log.enforce_retention())
        .expect("retention")
        .expect("deleted one");
    assert_eq!(deletion.start_offset, Offset(0));
    assert!(
        harness.disk.contents(&held.paths().log).is_none(),
        "unlinked"
    );
    let limits = harness.config.batch_limits;
    let read = block_on(held.read_batches(Offset(0), deletion.end_offset, 4096, &limits))
        .expect("the held handle still reads");
    assert_eq!(read.bytes, expected.chunks.concat());
    assert!(matches!(
        block_on(log.read(Offset(0), 4096, None)),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn the_log_start_survives_a_crash_right_after_deletion() {
    let harness = Harness::new(retention_config(RetentionPolicy {
        retention_ms: None,
        retention_bytes: Some(1),
    }));
    let log = block_on(harness.open());
    append_many(&harness, &log, 40);
    let deletion = block_on(log.enforce_retention())
        .expect("retention")
        .expect("deleted one");
    drop(log);
    harness.disk.crash();
    let log = block_on(harness.open());
    assert_eq!(log.log_start(), deletion.end_offset);
    assert_eq!(log.deletions(), vec![deletion], "the ledger survived too");
}

#[test]
fn segments_below_a_persisted_log_start_are_removed_at_open() {
    let harness = Harness::new(retention_config(RetentionPolicy {
        retention_ms: None,
        retention_bytes: None,
    }));
    let log = block_on(harness.open());
    append_many(&harness, &log, 40);
    let second = log.segments()[1].base_offset;
    block_on(log.close()).expect("close");
    drop(log);
    // As if retention persisted the new start and crashed before unlinking.
    let checkpoint = super::super::checkpoint::Checkpoint {
        log_start_offset: second,
        recovery_point: second,
        clean_shutdown: false,
        journal_generation: 0,
    };
    harness.disk.overwrite(
        &super::super::checkpoint::Checkpoint::path(&harness.dir),
        checkpoint.encode(),
    );
    let log = block_on(harness.open());
    assert_eq!(log.log_start(), second);
    assert!(
        harness
            .disk
            .contents(&SegmentPaths::new(&harness.dir, Offset(0)).log)
            .is_none()
    );
}
