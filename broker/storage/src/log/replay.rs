//! Start-up recovery of a shard journal: every partition directory it
//! holds entries for gets the batches its segments lack, before any log
//! of the shard opens for appends.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;

use futures::TryStreamExt;
use std::path::{Path, PathBuf};

use super::super::disk::Disk;
use super::super::journal::{JournalConfig, RecoveredPartition, ShardJournal};
use super::super::{LogConfig, ShardStorage, StorageError};
use super::PartitionLog;

/// Partitions [`replay_shard_journal`] replays at once: enough to keep an
/// NVMe queue busy, few enough that their open files fit any descriptor
/// budget the broker accepts.
const REPLAYS_AT_ONCE: usize = 16;

/// What [`replay_shard_journal`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalReplay {
    /// Partitions that got batches back.
    pub partitions: usize,
    /// Batches appended to them.
    pub batches: u64,
    /// Directories the journal named that no longer exist (deleted topics).
    pub missing: usize,
}

/// What a shard does with its journal at start, before any partition
/// opens: opens the journal in `dir` on `disk`
/// ([`ShardJournal::open`]), replays what it recovered into the partition
/// directories ([`replay_shard_journal`], with `log`), and removes the old
/// files ([`ShardJournal::start_fresh`]). `shard` must have no journal yet:
/// set the returned one on it before opening the partitions. The broker's
/// start and the simulator's restarts both recover through this.
///
/// # Errors
/// The first [`StorageError`] of the three steps.
pub async fn recover_shard_journal<D: Disk>(
    disk: &D,
    dir: &Path,
    config: JournalConfig,
    log: LogConfig,
    shard: &ShardStorage,
) -> Result<(ShardJournal<D>, JournalReplay), StorageError> {
    let (journal, recovered) = ShardJournal::open(
        disk.clone(),
        dir,
        config,
        shard.observer.clone(),
        shard.clock.clone(),
    )
    .await?;
    let replayed = replay_shard_journal(disk, recovered, log, shard).await?;
    journal.start_fresh().await?;
    Ok((journal, replayed))
}

/// Replays `recovered` (from [`super::super::journal::ShardJournal::open`])
/// into the partition directories: each is opened with `config`, given
/// what the journal holds past its end (batches already accepted once, so
/// not held to `config`'s batch bounds again), and closed. `shard` must have no journal: the batches go
/// straight to the segments, synced.
///
/// # Errors
/// The first [`StorageError`] of a partition: damage, or I/O.
pub async fn replay_shard_journal<D: Disk>(
    disk: &D,
    recovered: BTreeMap<PathBuf, RecoveredPartition>,
    config: LogConfig,
    shard: &ShardStorage,
) -> Result<JournalReplay, StorageError> {
    assert!(
        shard.journal.is_none(),
        "replay writes the segments directly"
    );
    let summary = RefCell::new(JournalReplay::default());
    // Each replay ends in a sync or two: many at once keep the disk busy
    // instead of waiting on it one partition at a time (1,200 partitions
    // took 10 s one by one).
    futures::stream::iter(recovered.into_iter().map(Ok))
        .try_for_each_concurrent(REPLAYS_AT_ONCE, |(dir, partition)| {
            let summary = &summary;
            async move {
                match disk.list_dir(&dir).await {
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {
                        summary.borrow_mut().missing += 1;
                        return Ok(());
                    }
                    Err(error) => return Err(StorageError::io(&dir, error)),
                }
                let log =
                    PartitionLog::open(disk.clone(), &dir, config, shard.clone(), partition.key)
                        .await?;
                let batches = log.replay_journal(partition.entries).await?;
                log.close().await?;
                if batches > 0 {
                    let mut summary = summary.borrow_mut();
                    summary.partitions += 1;
                    summary.batches += batches;
                }
                Ok(())
            }
        })
        .await?;
    Ok(summary.into_inner())
}
