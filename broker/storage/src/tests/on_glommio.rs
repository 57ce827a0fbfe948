//! The storage engine on real glommio DMA files (O_DIRECT through io_uring):
//! the same guarantees as on the memory disk, checked where alignment,
//! unlink-while-open and statvfs are the kernel's.

use std::future::Future;
use std::path::Path;

use glommio::{LocalExecutorBuilder, Placement};

use super::super::glommio_disk::GlommioDisk;
use super::super::segment::SegmentPaths;
use super::super::{RetentionPolicy, StorageError};
use super::*;

/// Segment files the disks below keep open: two, so that the tests close
/// and reopen real files as a shard with many partitions does.
const OPEN_FILES: usize = 2;

/// Runs `test` on a fresh single-threaded glommio executor with 1 MiB of
/// registered I/O memory (this machine's locked-memory limit is 8 MiB).
fn on_executor<Fut: Future<Output = ()>>(test: impl FnOnce() -> Fut) {
    let executor = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(1 << 20)
        .make()
        .expect("glommio executor starts");
    executor.run(test());
}

async fn open_real(
    harness: &Harness,
    disk: &GlommioDisk,
    dir: &Path,
) -> Result<PartitionLog<GlommioDisk>, StorageError> {
    PartitionLog::open(
        disk.clone(),
        dir,
        harness.config,
        harness.shard_for(disk, dir),
        test_partition(7),
    )
    .await
}

#[test]
fn appends_reads_rolls_and_reopens_on_dma_files() {
    on_executor(|| async {
        let temp = tempfile::tempdir().expect("temp dir");
        let disk = GlommioDisk::for_shard(temp.path(), OPEN_FILES)
            .await
            .expect("dma probe");
        let dir = temp.path().join("orders-0");
        let harness = Harness::new(small_config());
        let log = open_real(&harness, &disk, &dir).await.expect("open");
        for tag in 0..50 {
            log.append(make_batch(tag, 3, 200 + tag as usize, T0))
                .await
                .expect("append");
        }
        assert!(log.segment_count() >= 3, "small segments roll");
        let before = read_all(&log).await;
        assert_eq!(before.len(), 50);
        log.close().await.expect("close");
        drop(log);
        // A fresh cache so that reads come from the files.
        let harness = Harness::new(small_config());
        let log = open_real(&harness, &disk, &dir).await.expect("reopen");
        assert_eq!(read_all(&log).await, before);
        let found = log
            .offset_for_timestamp(TimestampMs(T0 + 1))
            .await
            .expect("by time");
        assert_eq!(found, Some((Offset(1), TimestampMs(T0 + 1))));
    });
}

#[test]
fn cutting_a_dma_segment_at_every_byte_of_its_last_batch_recovers_the_prefix() {
    on_executor(|| async {
        let temp = tempfile::tempdir().expect("temp dir");
        let disk = GlommioDisk::for_shard(temp.path(), OPEN_FILES)
            .await
            .expect("dma probe");
        let dir = temp.path().join("orders-0");
        let harness = Harness::new(small_config());
        let log = open_real(&harness, &disk, &dir).await.expect("open");
        let mut ends = Vec::new();
        for tag in 0..6 {
            let outcome = log
                .append(make_batch(tag, 2, 150, T0))
                .await
                .expect("append");
            ends.push(outcome.last_offset.plus(1));
        }
        let path = SegmentPaths::new(&dir, Offset(0)).log;
        drop(log);
        let contents = std::fs::read(&path).expect("segment file");
        let limits = BatchLimits::default();
        let spans: Vec<usize> = batch::batches(&contents, &limits)
            .map_while(Result::ok)
            .map(|item| item.position + item.bytes.len())
            .collect();
        assert_eq!(spans.len(), 6);
        let last_start = spans[4];
        for cut in last_start..=spans[5] {
            std::fs::write(&path, &contents[..cut]).expect("cut the segment");
            let harness = Harness::new(small_config());
            let log = open_real(&harness, &disk, &dir).await.expect("recovers");
            let expected = if cut == spans[5] { ends[5] } else { ends[4] };
            assert_eq!(log.durable_end(), expected, "cut at byte {cut}");
            assert_eq!(
                read_all(&log).await.len(),
                if cut == spans[5] { 6 } else { 5 }
            );
            drop(log);
        }
    });
}

#[test]
fn concurrent_appends_share_fdatasyncs_on_dma_files() {
    on_executor(|| async {
        let temp = tempfile::tempdir().expect("temp dir");
        let disk = GlommioDisk::for_shard(temp.path(), OPEN_FILES)
            .await
            .expect("dma probe");
        let dir = temp.path().join("orders-0");
        let mut config = small_config();
        config.segment_bytes = 4 << 20;
        config.flush_bytes_max = 1 << 20;
        let harness = Harness::new(config);
        let log = open_real(&harness, &disk, &dir).await.expect("open");
        let appends = (0..256u64).map(|tag| log.append(make_batch(tag, 1, 900, T0)));
        let outcomes = futures::future::join_all(appends).await;
        let mut expected = Offset(0);
        for outcome in outcomes {
            let outcome = outcome.expect("append");
            assert_eq!(outcome.base_offset, expected);
            expected = outcome.last_offset.plus(1);
        }
        assert!(
            log.stats().flushes < 64,
            "256 appends took {} fsyncs",
            log.stats().flushes
        );
    });
}

#[test]
fn retention_unlinks_while_a_held_segment_stays_readable() {
    on_executor(|| async {
        let temp = tempfile::tempdir().expect("temp dir");
        let disk = GlommioDisk::for_shard(temp.path(), OPEN_FILES)
            .await
            .expect("dma probe");
        let dir = temp.path().join("orders-0");
        let mut config = small_config();
        config.retention = RetentionPolicy {
            retention_ms: None,
            retention_bytes: Some(1),
        };
        let harness = Harness::new(config);
        let log = open_real(&harness, &disk, &dir).await.expect("open");
        for tag in 0..40 {
            log.append(make_batch(tag, 2, 300, T0))
                .await
                .expect("append");
        }
        let held = log.segment_holding(Offset(0)).expect("first segment");
        let deletion = log
            .enforce_retention()
            .await
            .expect("retention")
            .expect("deleted");
        assert!(!held.paths().log.exists(), "the file is unlinked");
        let read = held
            .read_batches(
                Offset(0),
                deletion.end_offset,
                1 << 20,
                &harness.config.batch_limits,
            )
            .await
            .expect("the open handle still reads the unlinked file");
        assert_eq!(read.next_offset, Some(deletion.end_offset));
    });
}

#[test]
fn the_reserve_is_measured_with_statvfs() {
    on_executor(|| async {
        let temp = tempfile::tempdir().expect("temp dir");
        let disk = GlommioDisk::for_shard(temp.path(), OPEN_FILES)
            .await
            .expect("dma probe");
        let dir = temp.path().join("orders-0");
        let free = disk.free_bytes(temp.path()).expect("statvfs");
        let mut harness = Harness::new(small_config());
        harness.reserve_bytes = free + (1 << 30);
        let log = open_real(&harness, &disk, &dir).await.expect("open");
        let error = log
            .append(make_batch(1, 1, 10, T0))
            .await
            .expect_err("over the reserve");
        assert!(matches!(error, StorageError::DiskFull(_)), "{error:?}");
    });
}

#[test]
fn the_shard_journal_on_dma_files_brings_back_batches_no_segment_holds() {
    use super::super::journal::{Journal, JournalConfig, ShardJournal};
    use super::super::log::replay_shard_journal;
    on_executor(|| async {
        let temp = tempfile::tempdir().expect("temp dir");
        let disk = GlommioDisk::for_shard(temp.path(), OPEN_FILES)
            .await
            .expect("dma probe");
        let journal_dir = temp.path().join("journal");
        let config = JournalConfig {
            file_bytes: 1 << 20,
            allocate_bytes: 256 << 10,
            commit_bytes_max: 256 << 10,
            bypass_bytes: 256 << 10,
        };
        let harness = Harness::new(small_config());
        let open_journal = || {
            ShardJournal::open(
                disk.clone(),
                &journal_dir,
                config,
                Rc::new(super::super::NoObserver),
                harness.clock.clone(),
            )
        };
        let (journal, recovered) = open_journal().await.expect("journal opens");
        assert!(recovered.is_empty());
        let journal: Rc<dyn Journal> = Rc::new(journal);
        let dirs: Vec<_> = (0..3)
            .map(|index| temp.path().join(format!("orders-{index}")))
            .collect();
        let mut logs = Vec::new();
        for (index, dir) in dirs.iter().enumerate() {
            let mut shard = harness.shard_for(&disk, dir);
            shard.journal = Some(journal.clone());
            let log = PartitionLog::open(
                disk.clone(),
                dir,
                harness.config,
                shard,
                test_partition(index as u64),
            )
            .await
            .expect("open");
            logs.push(log);
        }
        for tag in 0..40u64 {
            let log = &logs[(tag % 3) as usize];
            log.append(make_batch(tag, 2, 300, T0))
                .await
                .expect("append");
        }
        // Half of one partition reaches its segment; the rest only the journal.
        logs[0].flush_segment().await.expect("segment flush");
        for tag in 40..60u64 {
            logs[(tag % 3) as usize]
                .append(make_batch(tag, 2, 300, T0))
                .await
                .expect("append");
        }
        let mut expected = Vec::new();
        for log in &logs {
            expected.push(read_all(log).await);
        }
        assert!(journal.stats().commits >= 60);
        // As if killed: nothing closes.
        drop(logs);
        drop(journal);
        let (journal, recovered) = open_journal().await.expect("journal reopens");
        assert_eq!(recovered.len(), 3);
        let plain = Harness::new(small_config());
        let replayed = replay_shard_journal(
            &disk,
            recovered,
            plain.config,
            &plain.shard_for(&disk, &dirs[0]),
        )
        .await
        .expect("replay");
        assert_eq!(replayed.partitions, 3);
        journal.start_fresh().await.expect("fresh start");
        for (index, dir) in dirs.iter().enumerate() {
            let log = open_real(&plain, &disk, dir).await.expect("reopen");
            assert_eq!(read_all(&log).await, expected[index], "partition {index}");
        }
        let (_, again) = open_journal().await.expect("journal reopens");
        assert!(again.is_empty(), "replayed files are removed");
    });
}
