//! A shard's periodic housekeeping: retention and producer expiry on every
//! replica, reopening logs fenced by a full disk once space is back
//! ([`super::reopen`]), and the gauges sampled on the way.

use std::rc::Rc;
use std::time::Duration;

use super::shard::Shard;

impl Shard {
    /// Runs retention and housekeeping on every replica, and samples
    /// gauges, every maintenance interval until shutdown.
    pub async fn run_maintenance(self: Rc<Self>) {
        let interval = Duration::from_millis(self.config.maintenance_interval_ms);
        while !self.is_stopping() {
            glommio::timer::sleep(interval).await;
            self.maintain_replicas().await;
            self.reopen_after_disk_full().await;
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
        }
    }
}
