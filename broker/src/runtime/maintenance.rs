//! A shard's periodic housekeeping: retention and producer expiry on every
//! replica, reopening logs fenced by a full disk once space is back or by
//! a shortage of file descriptors ([`super::reopen`]), the gauges sampled on the way, and filling the
//! segments of logs whose batches wait in the shard journal.

use std::rc::Rc;
use std::time::Duration;

use super::shard::Shard;
use crate::metrics::ControllerSample;

/// How often the segment flusher looks for work.
const SEGMENT_FLUSH_TICK: Duration = Duration::from_millis(10);
/// A log holding this much in the journal fills its segment: large runs,
/// so that segment fdatasyncs follow the byte rate, not the partition count.
const SEGMENT_FLUSH_BYTES: u64 = 1 << 20;
/// ... and so does one whose oldest held batch is this old, so that an
/// idle partition does not pin journal files.
const SEGMENT_FLUSH_AGE: Duration = Duration::from_secs(5);
/// Past this many bytes held in the journal in all, the logs holding its
/// oldest file fill their segments whatever their size: bounds memory
/// and journal files.
const JOURNAL_HELD_BYTES_MAX: u64 = 256 << 20;
/// Segment flushes run at once, at most.
const SEGMENT_FLUSHES_AT_ONCE: usize = 16;

impl Shard {
    /// Runs retention and housekeeping on every replica, and samples
    /// gauges, every maintenance interval until shutdown.
    pub async fn run_maintenance(self: Rc<Self>) {
        let interval = Duration::from_millis(self.config.maintenance_interval_ms);
        while !self.is_stopping() {
            glommio::timer::sleep(interval).await;
            self.maintain_replicas().await;
            self.reopen_after_shortage().await;
            self.metrics
                .disk_free_bytes
                .set(self.storage.space.free_bytes() as i64);
            self.metrics
                .disk_reserve_bytes
                .set(self.storage.space.reserve_bytes() as i64);
            self.metrics
                .tail_cache_bytes
                .set(self.storage.cache.used_bytes() as i64);
            self.metrics.queue_depth.set(self.inbox.len() as i64);
            self.sample_follower_lags();
            self.sample_controller();
        }
    }

    /// Shard 0 of a controller voter: the controller series.
    fn sample_controller(&self) {
        let Some(controller) = self.cluster().and_then(|role| role.controller) else {
            return;
        };
        let (term, commit_index) = controller.raft_position();
        self.metrics.all().controller(&ControllerSample {
            node: controller.id(),
            is_leader: controller.is_leader(),
            leader: controller.leader(),
            term,
            commit_index,
            health: controller.partition_health(),
        });
    }

    /// Fills the segments of logs whose batches the shard journal holds
    /// (see [`corelog_storage::journal`]) and removes the journal files
    /// nothing needs any more, until shutdown. Returns at once without a
    /// journal.
    pub async fn run_segment_flusher(self: Rc<Self>) {
        let Some(journal) = self.storage.journal.clone() else {
            return;
        };
        while !self.is_stopping() {
            glommio::timer::sleep(SEGMENT_FLUSH_TICK).await;
            let keys = journal.flush_candidates(
                SEGMENT_FLUSH_BYTES,
                SEGMENT_FLUSH_AGE,
                JOURNAL_HELD_BYTES_MAX,
            );
            for chunk in keys.chunks(SEGMENT_FLUSHES_AT_ONCE) {
                let replicas: Vec<_> = chunk
                    .iter()
                    .filter_map(|id| self.replicas.borrow().get(id).cloned())
                    .collect();
                let flushes = replicas
                    .iter()
                    .map(|replica| replica.partition().log().flush_segment());
                for result in futures::future::join_all(flushes).await {
                    // A failed flush fenced its log, which the observer reports.
                    if let Err(error) = result {
                        tracing::debug!(%error, "segment flush failed");
                    }
                }
            }
            if let Err(error) = journal.reclaim().await {
                tracing::error!(%error, "cannot remove released shard journal files");
            }
        }
    }
}
