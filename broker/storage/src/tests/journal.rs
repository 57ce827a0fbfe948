//! The shard journal: one commit for many partitions, crash and power-loss
//! recovery through it (cut at every byte of its last frame), failure
//! fencing every partition a commit covered, truncation generations,
//! segment filling, file reclaim and reopening after a full disk.

use std::collections::BTreeMap;

use super::super::journal::{Journal, JournalConfig, RecoveredPartition, ShardJournal};
use super::super::log::{JournalReplay, recover_shard_journal, replay_shard_journal};
use super::super::memory_disk::Fault;
use super::super::{NoObserver, StorageError};
use super::*;

const JOURNAL_DIR: &str = "/data/journal";

/// Small files so that tests roll the journal.
fn journal_config() -> JournalConfig {
    JournalConfig {
        file_bytes: 256 << 10,
        allocate_bytes: 64 << 10,
        commit_bytes_max: 64 << 10,
        bypass_bytes: 64 << 10,
    }
}

struct Shard {
    harness: Harness,
    journal: Rc<ShardJournal<MemoryDisk>>,
}

impl Shard {
    fn new() -> Self {
        let harness = Harness::new(small_config());
        let journal = block_on(Self::open_journal(&harness)).expect("journal opens");
        Shard { harness, journal }
    }

    async fn open_journal(harness: &Harness) -> Result<Rc<ShardJournal<MemoryDisk>>, StorageError> {
        let (journal, recovered) = ShardJournal::open(
            harness.disk.clone(),
            Path::new(JOURNAL_DIR),
            journal_config(),
            Rc::new(NoObserver),
            harness.clock.clone(),
        )
        .await?;
        assert!(recovered.is_empty(), "a new journal recovers nothing");
        Ok(Rc::new(journal))
    }

    fn dir(index: u64) -> PathBuf {
        PathBuf::from(format!("/data/topic-{index}"))
    }

    fn storage(&self, disk: &MemoryDisk, journal: Option<Rc<dyn Journal>>) -> ShardStorage {
        let mut shard = self.harness.shard_for(disk, Path::new("/data/x"));
        shard.journal = journal;
        shard
    }

    async fn open_log(&self, index: u64) -> PartitionLog<MemoryDisk> {
        let journal: Rc<dyn Journal> = self.journal.clone();
        PartitionLog::open(
            self.harness.disk.clone(),
            &Self::dir(index),
            self.harness.config,
            self.storage(&self.harness.disk, Some(journal)),
            test_partition(index),
        )
        .await
        .expect("log opens")
    }

    /// What a broker does on start: recover the journal, replay it into
    /// the partitions, start it afresh. Returns the journal and what was
    /// recovered from it.
    async fn restart(
        &self,
        disk: &MemoryDisk,
    ) -> Result<
        (
            Rc<ShardJournal<MemoryDisk>>,
            BTreeMap<PathBuf, RecoveredPartition>,
        ),
        StorageError,
    > {
        let (journal, recovered) = ShardJournal::open(
            disk.clone(),
            Path::new(JOURNAL_DIR),
            journal_config(),
            Rc::new(NoObserver),
            self.harness.clock.clone(),
        )
        .await?;
        replay_shard_journal(
            disk,
            recovered.clone(),
            self.harness.config,
            &self.storage(disk, None),
        )
        .await?;
        journal.start_fresh().await?;
        Ok((Rc::new(journal), recovered))
    }

    /// Cuts the power with partition 0's `log` closed, restarts the shard
    /// and checks that the log reads back what it read before. Returns the
    /// reopened log and how many partitions the journal replayed.
    fn power_loss_keeps(&self, log: PartitionLog<MemoryDisk>) -> (PartitionLog<MemoryDisk>, usize) {
        let expected = block_on(read_all(&log));
        drop(log);
        self.harness.disk.crash();
        let (_, recovered) = block_on(self.restart(&self.harness.disk)).expect("restart");
        let log = block_on(self.reopen_plain(&self.harness.disk, 0));
        assert_eq!(block_on(read_all(&log)), expected);
        (log, recovered.len())
    }

    /// Opens partition `index` on `disk` without a journal, to read it.
    async fn reopen_plain(&self, disk: &MemoryDisk, index: u64) -> PartitionLog<MemoryDisk> {
        PartitionLog::open(
            disk.clone(),
            &Self::dir(index),
            self.harness.config,
            self.storage(disk, None),
            test_partition(index),
        )
        .await
        .expect("log opens")
    }
}

async fn append_round(logs: &[PartitionLog<MemoryDisk>], tag: u64) -> Vec<(Offset, Offset)> {
    let appends = logs.iter().enumerate().map(|(index, log)| {
        let batch = make_batch(
            tag * 100 + index as u64,
            1 + (tag % 3) as usize,
            60 + (tag as usize * 13) % 200,
            T0,
        );
        async move {
            let outcome = log.append(batch).await.expect("append");
            (outcome.base_offset, outcome.last_offset.plus(1))
        }
    });
    futures::future::join_all(appends).await
}

#[test]
fn one_commit_covers_the_appends_of_many_partitions() {
    let shard = Shard::new();
    let logs: Vec<_> = (0..8)
        .map(|index| block_on(shard.open_log(index)))
        .collect();
    // Concurrent appends interleave at every disk operation.
    shard.harness.disk.set_yielding(true);
    let syncs_before = shard.harness.disk.sync_count();
    for tag in 0..5 {
        block_on(append_round(&logs, tag));
    }
    let stats = shard.journal.stats();
    // 8 partitions × 5 rounds = 40 appends in 10 journal commits: the first
    // append of a round commits alone, the other seven join the next frame
    // while it is under way. No segment is synced to acknowledge; the
    // journal file's creation adds one sync.
    assert_eq!(stats.entries, 40);
    assert_eq!(stats.commits, 10, "{stats:?}");
    assert_eq!(shard.harness.disk.sync_count() - syncs_before, 10 + 1);
    for log in &logs {
        assert_eq!(
            log.stats().flushes,
            0,
            "no segment was synced to acknowledge"
        );
        assert!(log.unsegmented_bytes() > 0);
    }
}

#[test]
fn reads_serve_durable_batches_not_yet_in_the_segment_and_after_they_are() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    for tag in 0..20 {
        block_on(log.append(make_batch(tag, 2, 150, T0))).expect("append");
    }
    shard.harness.cache.forget(test_partition(0));
    let from_memory = block_on(read_all(&log));
    assert_eq!(from_memory.len(), 20);
    block_on(log.flush_segment()).expect("segment flush");
    assert_eq!(log.unsegmented_bytes(), 0);
    assert!(log.stats().flushes > 0);
    shard.harness.cache.forget(test_partition(0));
    assert_eq!(block_on(read_all(&log)), from_memory);
}

#[test]
fn a_time_lookup_finds_durable_batches_not_yet_in_the_segment() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    // Batches of two records: offsets 0-1 at T0, 2-3 at T0 + 100, 4-5 at
    // T0 + 200.
    for tag in 0..3 {
        block_on(log.append(make_batch(tag, 2, 150, T0 + 100 * tag as i64))).expect("append");
    }
    assert!(
        log.unsegmented_bytes() > 0,
        "the batches wait in the journal"
    );
    let lookup = |target: i64| {
        block_on(log.offset_for_timestamp(TimestampMs(target)))
            .expect("time lookup")
            .map(|(offset, _)| offset)
    };
    assert_eq!(lookup(T0), Some(Offset(0)));
    assert_eq!(lookup(T0 + 150), Some(Offset(4)));
    assert_eq!(
        lookup(T0 + 101),
        Some(Offset(3)),
        "the second record of a batch"
    );
    assert_eq!(lookup(T0 + 1_000), None);
    block_on(log.flush_segment()).expect("segment flush");
    assert_eq!(log.unsegmented_bytes(), 0);
    assert_eq!(
        lookup(T0 + 150),
        Some(Offset(4)),
        "the same from the segment"
    );
    // Part in the segment, part in the journal.
    block_on(log.append(make_batch(3, 2, 150, T0 + 300))).expect("append");
    assert_eq!(lookup(T0 + 250), Some(Offset(6)));
    assert_eq!(lookup(T0 + 50), Some(Offset(2)));
}

#[test]
fn one_read_goes_on_from_the_segment_end_into_what_the_journal_holds() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    for tag in 0..3 {
        block_on(log.append(make_batch(tag, 2, 150, T0))).expect("append");
    }
    block_on(log.flush_segment()).expect("segment flush");
    for tag in 3..5 {
        block_on(log.append(make_batch(tag, 2, 150, T0))).expect("append");
    }
    assert!(
        log.unsegmented_bytes() > 0,
        "two batches wait in the journal"
    );
    shard.harness.cache.forget(test_partition(0));
    let outcome = block_on(log.read(Offset(0), 1 << 20, None)).expect("read");
    assert_eq!(outcome.chunks.len(), 3, "the segment's run and two batches");
    assert_eq!(outcome.next_offset, Offset(10));
    // `max_bytes` still bounds what is added past the segment.
    let segment_run = outcome.chunks[0].len();
    let outcome = block_on(log.read(Offset(0), segment_run + 1, None)).expect("read");
    assert_eq!(outcome.chunks.len(), 1);
    assert_eq!(outcome.next_offset, Offset(6));
}

#[test]
fn a_power_loss_keeps_every_acknowledged_append_through_the_journal() {
    let shard = Shard::new();
    let logs: Vec<_> = (0..4)
        .map(|index| block_on(shard.open_log(index)))
        .collect();
    let mut expected: Vec<Vec<(Offset, Offset, Bytes)>> = Vec::new();
    for tag in 0..30 {
        block_on(append_round(&logs, tag));
        if tag == 10 {
            // Some of it reaches the segments (and rolls them), some not.
            block_on(logs[1].flush_segment()).expect("flush");
        }
    }
    for log in &logs {
        expected.push(block_on(read_all(log)));
    }
    drop(logs);
    shard.harness.disk.crash();
    let (_, recovered) = block_on(shard.restart(&shard.harness.disk)).expect("restart");
    assert_eq!(recovered.len(), 4);
    for (index, want) in expected.iter().enumerate() {
        let log = block_on(shard.reopen_plain(&shard.harness.disk, index as u64));
        assert_eq!(&block_on(read_all(&log)), want, "partition {index}");
    }
    // Replayed once, the journal is gone: a second restart replays nothing.
    let (_, again) = block_on(shard.restart(&shard.harness.disk)).expect("second restart");
    assert!(again.is_empty());
}

/// `recover_shard_journal`, the shard start the broker and the simulator
/// share, does the three steps of [`Shard::restart`]: replays what the
/// journal holds into the partitions and leaves nothing to replay twice.
#[test]
fn recover_shard_journal_gives_back_every_acknowledged_append_once() {
    let shard = Shard::new();
    let logs: Vec<_> = (0..3)
        .map(|index| block_on(shard.open_log(index)))
        .collect();
    for tag in 0..12 {
        block_on(append_round(&logs, tag));
    }
    let expected: Vec<_> = logs.iter().map(|log| block_on(read_all(log))).collect();
    drop(logs);
    shard.harness.disk.crash();
    let disk = &shard.harness.disk;
    let recover = || {
        block_on(recover_shard_journal(
            disk,
            Path::new(JOURNAL_DIR),
            journal_config(),
            shard.harness.config,
            &shard.storage(disk, None),
        ))
        .expect("the journal recovers")
    };
    let (_, replayed) = recover();
    assert_eq!(replayed.partitions, 3);
    assert!(replayed.batches >= 3, "{replayed:?}");
    for (index, want) in expected.iter().enumerate() {
        let log = block_on(shard.reopen_plain(disk, index as u64));
        assert_eq!(&block_on(read_all(&log)), want, "partition {index}");
    }
    let (_, again) = recover();
    assert_eq!(again, JournalReplay::default());
}

/// A restart replays the partitions the journal holds batches for several
/// at once, not one after another: their syncs overlap. (One by one, a
/// broker with 1,200 partitions took 10 s to restart after a crash.)
#[test]
fn a_restart_replays_many_partitions_at_once() {
    let shard = Shard::new();
    let logs: Vec<_> = (0..8)
        .map(|index| block_on(shard.open_log(index)))
        .collect();
    block_on(append_round(&logs, 0));
    let expected: Vec<_> = logs.iter().map(|log| block_on(read_all(log))).collect();
    drop(logs);
    let disk = &shard.harness.disk;
    disk.crash();
    disk.set_yielding(true);
    let (_, replayed) = block_on(recover_shard_journal(
        disk,
        Path::new(JOURNAL_DIR),
        journal_config(),
        shard.harness.config,
        &shard.storage(disk, None),
    ))
    .expect("the journal recovers");
    assert_eq!(replayed.partitions, 8);
    assert!(
        disk.syncs_in_flight_max() > 1,
        "the replays ran one at a time"
    );
    for (index, want) in expected.iter().enumerate() {
        let log = block_on(shard.reopen_plain(disk, index as u64));
        assert_eq!(&block_on(read_all(&log)), want, "partition {index}");
    }
}

/// A replica that moved away from a shard and came back gets its old
/// directory path again while the journal may still hold the first
/// replica's frames under it. A restart must replay only the new log's
/// frames: replaying the old ones made the directory unopenable (a log of
/// epochs its fresh replica metadata never heard of).
#[test]
fn a_log_recreated_in_a_removed_directory_gets_none_of_the_old_logs_frames() {
    let shard = Shard::new();
    let old = block_on(shard.open_log(0));
    for tag in 0..3 {
        block_on(append_round(std::slice::from_ref(&old), tag));
    }
    // The replica moves away: closed, forgotten by the journal, removed.
    block_on(old.close()).expect("closes");
    drop(old);
    shard.journal.forget(test_partition(0));
    block_on(shard.harness.disk.remove_dir_all(&Shard::dir(0))).expect("removed");
    // It comes back later, as a new, empty log in the same directory.
    shard.harness.clock.advance(60_000);
    let new = block_on(shard.open_log(0));
    block_on(append_round(std::slice::from_ref(&new), 7));
    let expected = block_on(read_all(&new));
    assert_eq!(expected.len(), 1, "one batch of its own");
    drop(new);
    shard.harness.disk.crash();
    let (_, _) = block_on(shard.restart(&shard.harness.disk)).expect("restart");
    let reopened = block_on(shard.reopen_plain(&shard.harness.disk, 0));
    assert_eq!(block_on(read_all(&reopened)), expected);
}

#[test]
fn cutting_the_journal_at_every_byte_of_its_last_frame_recovers_the_frames_before_it() {
    let shard = Shard::new();
    let logs: Vec<_> = (0..3)
        .map(|index| block_on(shard.open_log(index)))
        .collect();
    let mut ends_before_last = Vec::new();
    for tag in 0..6 {
        if tag == 5 {
            ends_before_last = logs.iter().map(PartitionLog::durable_end).collect();
        }
        block_on(append_round(&logs, tag));
    }
    let ends_after: Vec<_> = logs.iter().map(PartitionLog::durable_end).collect();
    drop(logs);
    let files = shard.harness.disk.files();
    let journal_file = files
        .iter()
        .find(|path| path.starts_with(JOURNAL_DIR))
        .expect("a journal file")
        .clone();
    let contents = shard.harness.disk.contents(&journal_file).expect("journal");
    let written = contents
        .iter()
        .rposition(|byte| *byte != 0)
        .expect("frames")
        + 1;
    // The last frame starts after the previous ones, aligned.
    let last_frame_start = (0..written)
        .rev()
        .find(|at| at % 512 == 0 && contents[*at..].starts_with(b"CLJF"))
        .expect("last frame");
    for cut in last_frame_start..=written {
        // Power loss: the segments keep only what was synced, and the
        // journal's last frame only its first `cut` bytes.
        let disk = shard.harness.disk.fork();
        disk.crash();
        let mut cut_contents = contents[..cut].to_vec();
        cut_contents.resize(contents.len(), 0);
        disk.overwrite(&journal_file, cut_contents);
        block_on(shard.restart(&disk)).expect("a cut journal recovers");
        // The disk does not yield, so every append commits its own frame:
        // the last frame holds partition 2's last batch only.
        let whole = cut == written;
        for index in 0..3 {
            let log = block_on(shard.reopen_plain(&disk, index));
            let want = if whole || index < 2 {
                ends_after[index as usize]
            } else {
                ends_before_last[index as usize]
            };
            assert_eq!(log.durable_end(), want, "cut at {cut}, partition {index}");
        }
    }
}

#[test]
fn a_failed_journal_sync_fences_every_partition_it_covered() {
    let shard = Shard::new();
    let logs: Vec<_> = (0..3)
        .map(|index| block_on(shard.open_log(index)))
        .collect();
    block_on(append_round(&logs, 0));
    let ends: Vec<_> = logs.iter().map(PartitionLog::durable_end).collect();
    shard.harness.disk.fail_next(Fault::Sync);
    let results = block_on(futures::future::join_all(
        logs.iter().map(|log| log.append(make_batch(7, 1, 10, T0))),
    ));
    for (index, result) in results.iter().enumerate() {
        assert!(
            matches!(result, Err(StorageError::Fenced { .. })),
            "{index}: {result:?}"
        );
        assert!(logs[index].fenced().is_some());
        assert_eq!(
            logs[index].durable_end(),
            ends[index],
            "nothing more acknowledged"
        );
    }
    // And a partition that was not waiting is refused too.
    let other = block_on(shard.open_log(9));
    assert!(matches!(
        block_on(other.append(make_batch(1, 1, 10, T0))),
        Err(StorageError::Fenced { .. })
    ));
}

#[test]
fn replay_skips_what_a_truncation_removed() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    for tag in 0..10 {
        block_on(log.append(make_batch(tag, 1, 100, T0))).expect("append");
    }
    // Cut the last five, then append different ones: the journal holds both.
    let new_end = block_on(log.truncate_to(Offset(5))).expect("truncate");
    assert_eq!(new_end, Offset(5));
    for tag in 100..103 {
        block_on(log.append(make_batch(tag, 1, 100, T0))).expect("append");
    }
    let (log, _) = shard.power_loss_keeps(log);
    assert_eq!(log.durable_end(), Offset(8));
}

#[test]
fn released_files_are_reclaimed_and_a_flushed_partition_needs_no_replay() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    // About 3 journal files of entries.
    let mut tag = 0;
    while shard.journal.stats().bytes_written < 700 << 10 {
        block_on(log.append(make_batch(tag, 3, 1000, T0))).expect("append");
        tag += 1;
        if tag % 20 == 0 {
            block_on(log.flush_segment()).expect("flush");
        }
    }
    assert!(shard.journal.file_count() >= 3);
    block_on(log.append(make_batch(tag, 1, 100, T0))).expect("append");
    let hour = std::time::Duration::from_secs(3600);
    let journal: &dyn Journal = &*shard.journal;
    // Asked to flush by bytes held, or by age on the journal's clock; not
    // otherwise.
    assert_eq!(
        journal.flush_candidates(1, hour, u64::MAX),
        vec![test_partition(0)]
    );
    assert!(
        journal
            .flush_candidates(u64::MAX, hour, u64::MAX)
            .is_empty()
    );
    shard.harness.clock.advance(3_600_000 - 1);
    assert!(
        journal
            .flush_candidates(u64::MAX, hour, u64::MAX)
            .is_empty()
    );
    shard.harness.clock.advance(1);
    assert_eq!(
        journal.flush_candidates(u64::MAX, hour, u64::MAX),
        vec![test_partition(0)]
    );
    block_on(log.flush_segment()).expect("flush");
    assert!(
        shard
            .journal
            .flush_candidates(0, std::time::Duration::ZERO, 0)
            .is_empty()
    );
    assert_eq!(shard.journal.unreleased_bytes(), 0);
    let removed = block_on(shard.journal.reclaim()).expect("reclaim");
    assert!(removed >= 2, "removed {removed}");
    assert_eq!(
        shard.journal.file_count(),
        1,
        "the file being written stays"
    );
    shard.power_loss_keeps(log);
}

#[test]
fn a_log_reopened_after_a_full_disk_gets_its_journaled_batches_back() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    for tag in 0..6 {
        block_on(log.append(make_batch(tag, 1, 100, T0))).expect("append");
    }
    let expected = block_on(read_all(&log));
    // Another writer takes the space: the journal's preallocated file
    // still takes frames, but the next one cannot be created.
    let free = shard
        .harness
        .disk
        .free_bytes(Path::new("/data"))
        .expect("free");
    shard.harness.disk.set_capacity((1 << 40) - free);
    let mut failed = None;
    for tag in 0..20_000 {
        if let Err(error) = block_on(log.append(make_batch(tag, 3, 1000, T0))) {
            failed = Some(error);
            break;
        }
    }
    let error = failed.expect("the disk fills");
    assert!(error.is_no_space(), "{error:?}");
    assert!(log.fenced_no_space());
    let durable = log.durable_end();
    drop(log);
    shard.harness.disk.set_capacity(1 << 40);
    shard.journal.clear_no_space_failure();
    let log = block_on(shard.open_log(0));
    assert_eq!(
        log.durable_end(),
        durable,
        "every acknowledged batch is back"
    );
    let read = block_on(read_all(&log));
    assert_eq!(&read[..expected.len()], &expected[..]);
    block_on(log.append(make_batch(1, 1, 10, T0))).expect("appends again");
}

#[test]
fn a_segment_flush_that_meets_a_full_disk_keeps_serving_the_journaled_batches() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    for tag in 0..6 {
        block_on(log.append(make_batch(tag, 2, 300, T0))).expect("append");
    }
    let acknowledged = log.durable_end();
    let expected = block_on(read_all(&log));
    assert_eq!(expected.len(), 6);
    // Another writer takes the space: the segment's write cannot get any.
    let free = shard
        .harness
        .disk
        .free_bytes(Path::new("/data"))
        .expect("free");
    shard.harness.disk.set_capacity((1 << 40) - free);
    let error = block_on(log.flush_segment()).expect_err("the segment write fails");
    assert!(error.is_no_space(), "{error:?}");
    assert!(log.fenced_no_space());
    // Fenced, but what was acknowledged is still read back, from memory.
    assert_eq!(log.durable_end(), acknowledged);
    shard.harness.cache.forget(test_partition(0));
    assert_eq!(block_on(read_all(&log)), expected);
}

/// Starts appends of `count` batches of about 2.8 KB each, without
/// waiting, and returns the offset after the last.
fn start_run(log: &PartitionLog<MemoryDisk>, first_tag: u64, count: u64) -> Offset {
    let mut end = log.next_offset();
    for tag in first_tag..first_tag + count {
        end = log
            .start_append(make_batch(tag, 3, 900, T0))
            .expect("start append")
            .last_offset
            .plus(1);
    }
    end
}

#[test]
fn a_run_too_large_for_the_journal_goes_around_it_and_survives_a_power_loss() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    block_on(log.append(make_batch(0, 2, 150, T0))).expect("append");
    let journaled = shard.journal.stats().bytes_written;
    assert!(journaled > 0, "a small append goes through the journal");
    // About 84 KiB waiting at once, above the 64 KiB bypass: written once,
    // to the segment, behind the batch the journal held.
    let end = start_run(&log, 1, 30);
    block_on(log.wait_durable(end)).expect("durable");
    assert_eq!(log.durable_end(), end);
    assert_eq!(
        shard.journal.stats().bytes_written,
        journaled,
        "nothing of the run went to the journal"
    );
    assert!(log.stats().bypassed_flushes > 0);
    assert_eq!(log.unsegmented_bytes(), 0);
    assert_eq!(
        shard.journal.unreleased_bytes(),
        0,
        "the journal's batch went into the segment first and was released"
    );
    // Small appends after it use the journal again.
    block_on(log.append(make_batch(99, 1, 100, T0))).expect("append");
    assert!(shard.journal.stats().bytes_written > journaled);
    assert_eq!(block_on(read_all(&log)).len(), 32);
    shard.power_loss_keeps(log);
}

#[test]
fn appends_that_arrive_during_a_run_around_the_journal_wait_for_it() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    shard.harness.disk.set_yielding(true);
    let end = start_run(&log, 0, 30);
    let (run, small) = block_on(futures::future::join(
        log.wait_durable(end),
        log.append(make_batch(99, 1, 100, T0)),
    ));
    run.expect("the run is durable");
    let small = small.expect("the small append is durable");
    assert_eq!(small.base_offset, end);
    let stats = shard.journal.stats();
    // The small batch waited for the run, then went to the journal alone:
    // no journal entry overlaps the run.
    assert_eq!(stats.entries, 1, "{stats:?}");
    let unsegmented = log.unsegmented_bytes();
    assert!(
        (100..1024).contains(&unsegmented),
        "only the small batch waits in the journal: {unsegmented}"
    );
    assert_eq!(block_on(read_all(&log)).len(), 31);
    let (_, replayed) = shard.power_loss_keeps(log);
    assert_eq!(replayed, 1, "the small batch is replayed");
}

#[test]
fn a_run_around_the_journal_that_fails_to_sync_fences_and_keeps_the_journaled_batches() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    block_on(log.append(make_batch(0, 2, 150, T0))).expect("append");
    let durable = log.durable_end();
    let end = start_run(&log, 1, 30);
    shard.harness.disk.fail_next(Fault::Sync);
    let result = block_on(log.wait_durable(end));
    assert!(
        matches!(result, Err(StorageError::Fenced { .. })),
        "{result:?}"
    );
    assert_eq!(
        log.durable_end(),
        durable,
        "nothing of the run acknowledged"
    );
    shard.harness.cache.forget(test_partition(0));
    let kept = block_on(read_all(&log));
    assert_eq!(kept.len(), 1, "the journaled batch is still served");
    assert_eq!(kept[0].1, durable);
}

#[test]
fn a_discarded_log_waits_out_a_flush_under_way_and_touches_its_files_no_more() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    for tag in 0..4 {
        block_on(log.append(make_batch(tag, 2, 300, T0))).expect("append");
    }
    assert!(log.unsegmented_bytes() > 0);
    // Every disk operation yields: the flush is under way when the discard
    // starts. Removing the directory under a flush that creates files
    // there is what panicked glommio (issue 15, item 1).
    shard.harness.disk.set_yielding(true);
    let flushed = std::cell::Cell::new(false);
    block_on(async {
        let flush = async {
            log.flush_segment().await.expect("the flush under way ends");
            flushed.set(true);
        };
        let discard = async {
            log.discard().await;
            assert!(flushed.get(), "the discard returned before the flush ended");
        };
        futures::join!(flush, discard);
    });
    let generation = shard.harness.disk.generation();
    block_on(log.append(make_batch(9, 1, 10, T0))).expect_err("a discarded log takes no append");
    // Nothing is left to flush, and a flush must not write anything.
    let _refused_or_nothing = block_on(log.flush_segment());
    block_on(log.discard());
    assert_eq!(
        shard.harness.disk.generation(),
        generation,
        "the discarded log changed the disk"
    );
}

#[test]
fn a_journal_file_that_cannot_be_opened_for_want_of_descriptors_fences_nothing() {
    let shard = Shard::new();
    let log = block_on(shard.open_log(0));
    let disk = shard.harness.disk.clone();
    disk.set_descriptor_limit(Some(disk.open_handle_count()));
    // Appends go on in the journal's open file, until it is full and the
    // next one cannot be opened.
    let mut appended = 0u64;
    let error = loop {
        assert!(appended < 400, "the journal never needed a new file");
        match block_on(log.append(make_batch(appended, 4, 800, T0))) {
            Ok(_) => appended += 1,
            Err(error) => break error,
        }
    };
    assert!(error.is_out_of_descriptors(), "{error:?}");
    assert_eq!(log.fenced(), None, "nothing was written: nothing is fenced");
    let refused = appended;

    disk.set_descriptor_limit(None);
    block_on(log.append(make_batch(refused + 1, 4, 800, T0))).expect("descriptors are back");
    let batches = block_on(read_all(&log));
    assert_eq!(
        batches.len() as u64,
        refused + 2,
        "the refused batch went with the next commit, in its place"
    );
    for (index, (base, next, _)) in batches.iter().enumerate() {
        assert_eq!((base.0, next.0), (index as u64 * 4, index as u64 * 4 + 4));
    }
    let (_, replayed) = shard.power_loss_keeps(log);
    assert_eq!(replayed, 1);
}

/// The journal names a partition on disk by the packing the tail-cache
/// key had before `PartitionId` replaced it (issue 36): journals written
/// before replay into the same partitions.
#[test]
fn a_journal_key_on_disk_keeps_the_packing_of_older_journals() {
    use super::super::journal::{key_from_disk, key_on_disk};
    let id = PartitionId {
        topic_id: 3,
        partition: 7,
    };
    assert_eq!(key_on_disk(id), (3 << 20) | 7);
    for id in [
        id,
        test_partition(0),
        PartitionId {
            topic_id: (1 << 44) - 1,
            partition: (1 << 20) - 1,
        },
    ] {
        assert_eq!(key_from_disk(key_on_disk(id)), id);
    }
}
