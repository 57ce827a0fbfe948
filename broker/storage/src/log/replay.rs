//! Start-up recovery of a shard journal: every partition directory it
//! holds entries for gets the batches its segments lack, before any log
//! of the shard opens for appends.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use super::super::disk::Disk;
use super::super::journal::RecoveredPartition;
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
