//! Recovery from a resource shortage without a restart: a replica (or its
//! log) fenced because a write or sync met `ENOSPC` is reopened once free
//! space is back above the reserve; one fenced, or never opened, for want
//! of file descriptors (`EMFILE`) is tried again every maintenance round.
//!
//! A failed fdatasync is never retried: the data it covered is presumed
//! lost, so the fenced log is dropped unacknowledged, and reopening runs
//! recovery, which re-reads what the disk really holds (validating every
//! batch after the checkpoint and truncating a torn tail). A replica then
//! rejoins its leader as a follower and catches up by the usual
//! truncate-and-push protocol.
//!
//! Reopening is the maintenance loop's job ([`Shard::run_maintenance`]): it
//! removes the fenced replicas from the shard's map and applies the current
//! metadata snapshot again, which opens what is missing exactly as at
//! start-up. A reopened replica that led cannot lead that epoch again (it
//! may have lost a tail its followers kept), so the broker resigns the
//! leadership and the controller elects the partition again under a new
//! epoch; on a single node, that elects this replica again.

use corelog_replication::RoleView;
use corelog_wire::error::ErrorCode;
use corelog_wire::types::LeaderEpoch;

use super::shard::{Replica, Shard};
use corelog_wire::types::PartitionId;

/// Free bytes above the reserve before a log fenced by a full disk is
/// reopened: room for a new segment's files, its checkpoint and some
/// batches, so that the reopened log does not fence again at once.
pub const REOPEN_MARGIN_BYTES: u64 = 1 << 20;

impl Shard {
    /// Reopens the replicas fenced by a full disk, if space is back, and
    /// those fenced by, or never opened for, a shortage of file
    /// descriptors; resigns the leaderships of those that led. Returns how
    /// many were reopened or retried.
    pub(super) async fn reopen_after_shortage(&self) -> usize {
        let fenced_by =
            |shortage: fn(&Replica) -> bool| -> Vec<(PartitionId, Option<LeaderEpoch>)> {
                self.replicas
                    .borrow()
                    .iter()
                    .filter(|(_, replica)| shortage(replica))
                    .map(|(id, replica)| {
                        let led = match replica.role() {
                            RoleView::Leader { epoch, .. } => Some(epoch),
                            RoleView::Follower { .. } | RoleView::Offline => None,
                        };
                        (*id, led)
                    })
                    .collect()
            };
        let no_space = fenced_by(|replica| replica.fenced_no_space());
        let out_of_descriptors = fenced_by(|replica| replica.fenced_out_of_descriptors());
        let unopened = self
            .failed
            .borrow()
            .values()
            .filter(|failed| failed.code == ErrorCode::OutOfFileDescriptors)
            .count();
        let space_is_back = !no_space.is_empty()
            && self
                .storage
                .space
                .has_room_above_reserve(REOPEN_MARGIN_BYTES);
        if !no_space.is_empty() && !space_is_back {
            tracing::debug!(
                fenced = no_space.len(),
                free_bytes = self.storage.space.free_bytes(),
                "replicas fenced by a full disk wait for free space"
            );
        }
        let mut fenced = out_of_descriptors;
        if space_is_back {
            fenced.extend(no_space);
        }
        if fenced.is_empty() && unopened == 0 {
            return 0;
        }
        if space_is_back {
            // A journal commit that met ENOSPC failed every log it covered;
            // the journal takes commits again for the reopened logs.
            if let Some(journal) = &self.storage.journal {
                journal.clear_no_space_failure();
            }
            tracing::info!(
                free_bytes = self.storage.space.free_bytes(),
                "disk space is back: reopening logs fenced by a full disk"
            );
        }
        tracing::info!(
            fenced = fenced.len(),
            unopened,
            "reopening replicas a resource shortage fenced or kept closed"
        );
        for (id, _) in &fenced {
            self.replicas.borrow_mut().remove(id);
        }
        // The dropped logs are fenced and write nothing more; applying the
        // snapshot again opens (recovers) what is now missing (what never
        // opened too), and sets each replica's role from the published
        // leadership.
        self.apply_snapshot(self.snapshot()).await;
        for (id, led) in &fenced {
            let Some(epoch) = led else {
                continue;
            };
            match self.resign_leadership(*id, *epoch).await {
                Ok(()) => tracing::info!(
                    topic_id = id.topic_id,
                    partition = id.partition,
                    epoch = epoch.0,
                    "resigned a leadership a resource shortage interrupted; the controller elects again"
                ),
                // The next session change (or a restart) moves it anyway.
                Err(error) => tracing::warn!(
                    topic_id = id.topic_id,
                    partition = id.partition,
                    %error,
                    "cannot resign a leadership a resource shortage interrupted"
                ),
            }
        }
        fenced.len() + unopened
    }
}
