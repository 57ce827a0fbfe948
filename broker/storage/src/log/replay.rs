//! Start-up recovery of a shard journal: every partition directory it
//! holds entries for gets the batches its segments lack, before any log
//! of the shard opens for appends.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::super::disk::Disk;
use super::super::journal::{JournalConfig, RecoveredPartition, ShardJournal};
use super::super::{LogConfig, ShardStorage, StorageError};
use super::PartitionLog;

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
    let mut summary = JournalReplay::default();
    for (dir, partition) in recovered {
        match disk.list_dir(&dir).await {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                summary.missing += 1;
                continue;
            }
            Err(error) => return Err(StorageError::io(&dir, error)),
        }
        let log =
            PartitionLog::open(disk.clone(), &dir, config, shard.clone(), partition.key).await?;
        let batches = log.replay_journal(partition.entries).await?;
        log.close().await?;
        if batches > 0 {
            summary.partitions += 1;
            summary.batches += batches;
        }
    }
    Ok(summary)
}
