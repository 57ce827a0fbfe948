//! Recovery from a full disk without a restart: a partition log (or
//! replica) fenced because a write or sync met `ENOSPC` is reopened once
//! free space is back above the reserve.
//!
//! A failed fdatasync is never retried: the data it covered is presumed
//! lost, so the fenced log is dropped unacknowledged, and reopening runs
//! recovery, which re-reads what the disk really holds (validating every
//! batch after the checkpoint and truncating a torn tail). A replica then
//! rejoins its leader as a follower and catches up by the usual
//! truncate-and-push protocol.
//!
//! Reopening is the maintenance loop's job ([`Shard::run_maintenance`]): it
//! removes the fenced partitions from the shard's maps and applies the
//! current metadata snapshot again, which opens what is missing exactly as
//! at start-up. Not reopened: a replica that leads, as it led its epoch
//! already and cannot lead it again; the controller has to elect another
//! leader (see the README's operations notes).

use super::command::PartitionId;
use super::shard::Shard;
use corelog_replication::RoleView;

/// Free bytes above the reserve before a log fenced by a full disk is
/// reopened: room for a new segment's files, its checkpoint and some
/// batches, so that the reopened log does not fence again at once.
pub const REOPEN_MARGIN_BYTES: u64 = 1 << 20;

impl Shard {
    /// Reopens the partitions and replicas fenced by a full disk, if space
    /// is back. Returns how many were reopened.
    pub(super) async fn reopen_after_disk_full(&self) -> usize {
        let partitions: Vec<PartitionId> = self
            .partitions
            .borrow()
            .iter()
            .filter(|(_, partition)| partition.log().fenced_no_space())
            .map(|(id, _)| *id)
            .collect();
        let replicas: Vec<PartitionId> = self
            .replicas
            .borrow()
            .iter()
            .filter(|(_, replica)| {
                replica.fenced_no_space() && !matches!(replica.role(), RoleView::Leader { .. })
            })
            .map(|(id, _)| *id)
            .collect();
        if partitions.is_empty() && replicas.is_empty() {
            return 0;
        }
        if !self
            .storage
            .space
            .has_room_above_reserve(REOPEN_MARGIN_BYTES)
        {
            tracing::debug!(
                fenced = partitions.len() + replicas.len(),
                free_bytes = self.storage.space.free_bytes(),
                "partitions fenced by a full disk wait for free space"
            );
            return 0;
        }
        for id in &partitions {
            self.partitions.borrow_mut().remove(id);
        }
        for id in &replicas {
            self.replicas.borrow_mut().remove(id);
        }
        tracing::info!(
            partitions = partitions.len(),
            replicas = replicas.len(),
            free_bytes = self.storage.space.free_bytes(),
            "disk space is back: reopening logs fenced by a full disk"
        );
        // The dropped logs are fenced and write nothing more; applying the
        // snapshot again opens (recovers) what is now missing, and sets
        // each replica's role from the published leadership.
        self.apply_snapshot(self.snapshot()).await;
        partitions.len() + replicas.len()
    }
}
