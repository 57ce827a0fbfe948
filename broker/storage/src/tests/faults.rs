//! Fault injection: failed writes and syncs fence the log, the disk reserve
//! refuses appends without deleting anything, group commit shares syncs,
//! and a cancelled flush loses no offset.

use std::future::Future;
use std::pin::pin;
use std::task::Context;

use super::super::StorageError;
use super::super::memory_disk::Fault;
use super::*;

#[test]
fn a_failed_sync_fences_the_log_and_acknowledges_nothing_after() {
    let harness = Harness::new(small_config());
    let log = block_on(harness.open());
    let kept = block_on(log.append(make_batch(1, 3, 50, T0))).expect("first append");
    harness.disk.fail_next(Fault::Sync);
    let error = block_on(log.append(make_batch(2, 3, 50, T0))).expect_err("sync failed");
    assert!(matches!(error, StorageError::Fenced { .. }), "{error:?}");
    // No retry of the sync: every later append is refused too.
    let error = block_on(log.append(make_batch(3, 1, 50, T0))).expect_err("fenced");
    assert!(matches!(error, StorageError::Fenced { .. }), "{error:?}");
    assert!(log.fenced().is_some());
    assert_eq!(
        log.durable_end(),
        kept.last_offset.plus(1),
        "nothing unsynced becomes readable"
    );
    // After power loss the log holds what was acknowledged.
    drop(log);
    harness.disk.crash();
    let log = block_on(harness.open());
    assert_eq!(log.durable_end(), kept.last_offset.plus(1));
}

#[test]
fn a_failed_write_fences_the_log() {
    let harness = Harness::new(small_config());
    let log = block_on(harness.open());
    harness.disk.fail_next(Fault::Write);
    let error = block_on(log.append(make_batch(1, 1, 10, T0))).expect_err("write failed");
    assert!(matches!(error, StorageError::Fenced { .. }), "{error:?}");
    assert_eq!(log.durable_end(), Offset(0));
}

#[test]
fn the_disk_reserve_refuses_appends_and_deletes_nothing() {
    let mut config = small_config();
    config.retention.retention_bytes = Some(1);
    let mut harness = Harness::new(config);
    harness.reserve_bytes = 200 << 10;
    harness.disk.set_capacity(1 << 20);
    let log = block_on(harness.open());
    let mut appended = 0u64;
    let refusal = loop {
        match block_on(log.append(make_batch(appended, 4, 900, T0))) {
            Ok(_) => appended += 1,
            Err(error) => break error,
        }
        assert!(appended < 10_000, "the reserve never refused");
    };
    let StorageError::DiskFull(refused) = refusal else {
        panic!("expected DISK_FULL, got {refusal:?}");
    };
    assert_eq!(refused.reserve_bytes, 200 << 10);
    assert!(harness.disk.free_bytes(&harness.dir).expect("free") >= 190 << 10);
    // Nothing retained was deleted to make room, and the log is not fenced.
    assert!(log.deletions().is_empty());
    assert_eq!(block_on(read_all(&log)).len() as u64, appended);
    assert!(log.fenced().is_none());
    // Space returns: appends resume.
    harness.disk.set_capacity(8 << 20);
    block_on(log.append(make_batch(9_999, 1, 10, T0))).expect("append after space freed");
}

#[test]
fn concurrent_appends_share_syncs_and_keep_their_order() {
    let mut config = small_config();
    config.segment_bytes = 1 << 20;
    config.flush_bytes_max = 64 << 10;
    let harness = Harness::new(config);
    harness.disk.set_yielding(true);
    let log = block_on(harness.open());
    let syncs_before = harness.disk.sync_count();
    let appends = (0..200u64).map(|tag| log.append(make_batch(tag, 2, 100, T0)));
    let outcomes = block_on(futures::future::join_all(appends));
    let mut expected = Offset(0);
    for outcome in outcomes {
        let outcome = outcome.expect("append");
        assert_eq!(outcome.base_offset, expected, "offsets follow call order");
        expected = outcome.last_offset.plus(1);
    }
    let flushes = log.stats().flushes;
    let syncs = harness.disk.sync_count() - syncs_before;
    assert!(
        flushes < 20,
        "200 concurrent appends took {flushes} flushes"
    );
    assert_eq!(syncs, flushes, "one fdatasync per flush");
    assert_eq!(log.stats().batches_flushed, 200);
}

#[test]
fn a_cancelled_flush_loses_no_offset() {
    let harness = Harness::new(small_config());
    harness.disk.set_yielding(true);
    let log = block_on(harness.open());
    let waker = futures::task::noop_waker();
    let mut context = Context::from_waker(&waker);
    {
        // Poll the first append until it is inside its flush, then drop it.
        let mut first = pin!(log.append(make_batch(1, 2, 10, T0)));
        assert!(first.as_mut().poll(&mut context).is_pending());
        assert!(first.as_mut().poll(&mut context).is_pending());
    }
    let second = block_on(log.append(make_batch(2, 2, 10, T0))).expect("second append");
    assert_eq!(
        second.base_offset,
        Offset(2),
        "the first batch kept its offsets"
    );
    let all = block_on(read_all(&log));
    assert_eq!(
        all.len(),
        2,
        "the cancelled append's batch was still written, with no hole"
    );
    assert_eq!((all[0].0, all[1].0), (Offset(0), Offset(2)));
}

#[test]
fn enospc_mid_write_fences_as_disk_full_and_a_reopen_recovers_the_acknowledged_prefix() {
    let harness = Harness::new(small_config());
    harness.disk.set_capacity(8 << 20);
    let log = block_on(harness.open());
    let kept = block_on(log.append(make_batch(1, 3, 50, T0))).expect("first append");
    // Another writer takes the space: the reserve's estimate is stale, so
    // the append passes the reserve and its write meets ENOSPC.
    let used = (8 << 20) - harness.disk.free_bytes(&harness.dir).expect("free");
    harness.disk.set_capacity(used);
    let error = block_on(log.append(make_batch(2, 3, 900, T0))).expect_err("no space");
    assert!(error.is_no_space(), "{error:?}");
    assert!(log.fenced_no_space());
    // Still fenced, still DISK_FULL: never retried and acknowledged.
    let error = block_on(log.append(make_batch(3, 1, 10, T0))).expect_err("fenced");
    assert!(error.is_no_space(), "{error:?}");
    // Space is back: reopening recovers exactly what was acknowledged and
    // takes appends again.
    drop(log);
    harness.disk.set_capacity(8 << 20);
    let log = block_on(harness.open());
    assert_eq!(log.durable_end(), kept.last_offset.plus(1));
    assert!(!log.fenced_no_space());
    block_on(log.append(make_batch(4, 1, 10, T0))).expect("append after reopen");
}

#[test]
fn an_io_failure_other_than_no_space_is_not_disk_full() {
    let harness = Harness::new(small_config());
    let log = block_on(harness.open());
    harness.disk.fail_next(Fault::Sync);
    let error = block_on(log.append(make_batch(1, 1, 10, T0))).expect_err("sync failed");
    assert!(!error.is_no_space(), "{error:?}");
    assert!(!log.fenced_no_space());
}

/// Opens the log of partition `index` beside the harness's own.
fn open_partition(harness: &Harness, disk: &MemoryDisk, index: u64) -> PartitionLog<MemoryDisk> {
    let dir = harness.dir.with_file_name(format!("partition-{index}"));
    block_on(PartitionLog::open(
        disk.clone(),
        &dir,
        harness.config,
        harness.shard_for(disk, &dir),
        test_partition(100 + index),
    ))
    .expect("log opens")
}

#[test]
fn many_logs_share_a_few_open_files_and_read_back_after_theirs_were_closed() {
    let harness = Harness::new(small_config());
    let disk = harness.disk.clone().with_open_files_max(3);
    let logs: Vec<_> = (0..12)
        .map(|index| open_partition(&harness, &disk, index))
        .collect();
    for round in 0..4 {
        for (index, log) in logs.iter().enumerate() {
            let tag = round * 100 + index as u64;
            block_on(log.append(make_batch(tag, 3, 900, T0))).expect("append");
        }
        assert!(
            disk.open_handle_count() <= 3,
            "{} files open with a cache of 3",
            disk.open_handle_count()
        );
    }
    for (index, log) in logs.iter().enumerate() {
        assert!(log.segment_count() > 1, "the small segments rolled");
        let read = block_on(read_all(log));
        let expected: Vec<Bytes> = (0..4)
            .map(|round| {
                Bytes::copy_from_slice(&make_batch(round * 100 + index as u64, 3, 900, T0))
            })
            .collect();
        assert_eq!(read.len(), expected.len());
        for ((_, _, bytes), batch) in read.iter().zip(&expected) {
            assert_eq!(&bytes[61..], &batch[61..], "records after the header");
        }
    }
    let stats = disk.open_files().stats();
    assert!(stats.evicted > 0 && stats.hits > 0, "{stats:?}");
    assert!(disk.open_handle_count() <= 3);
}

#[test]
fn running_out_of_descriptors_refuses_an_append_without_fencing_the_log() {
    let harness = Harness::new(small_config());
    let disk = harness.disk.clone().with_open_files_max(1);
    let log = open_partition(&harness, &disk, 0);
    block_on(log.append(make_batch(1, 2, 50, T0))).expect("first append");
    // A second log takes the only cached file: the first one's is closed.
    let other = open_partition(&harness, &disk, 1);
    block_on(other.append(make_batch(9, 1, 50, T0))).expect("other append");
    disk.set_descriptor_limit(Some(disk.open_handle_count()));

    let error = block_on(log.append(make_batch(2, 2, 50, T0))).expect_err("no descriptor");
    assert!(error.is_out_of_descriptors(), "{error:?}");
    assert_eq!(log.fenced(), None, "a healthy disk is not fenced");
    assert!(!error.fences_the_log());
    assert!(
        !error.client_message().contains("/data"),
        "{}",
        error.client_message()
    );

    // Descriptors are back: the log goes on, with nothing lost or skipped.
    disk.set_descriptor_limit(None);
    block_on(log.append(make_batch(3, 2, 50, T0))).expect("append after");
    let offsets: Vec<(Offset, Offset)> = block_on(read_all(&log))
        .into_iter()
        .map(|(base, next, _)| (base, next))
        .collect();
    assert_eq!(
        offsets,
        [
            (Offset(0), Offset(2)),
            (Offset(2), Offset(4)),
            (Offset(4), Offset(6))
        ],
        "the refused batch kept its offsets and was written with the next flush"
    );
}
