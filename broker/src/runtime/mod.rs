//! The thread-per-core runtime: one glommio executor per shard, partition
//! ownership, the cross-shard command channels, the single-node metadata
//! authority, start-up and graceful shutdown.
//!
//! - [`shard`]: a shard's state and the routing of partition operations.
//! - [`command`]: what shards send each other (owned, `Send` data only).
//! - [`replicas`]: cluster mode's replicated partitions on a shard.
//! - [`reopen`]: reopening logs fenced by a full disk once space is back.
//! - [`authority`]: shard 0's topic catalog and producer-id allocator.
//! - [`startup`]: starting the executors, signals, stopping.
//! - [`fatal`]: failures that end the process, with their exit codes.

pub mod authority;
pub mod command;
pub mod fatal;
pub mod reopen;
pub mod replicas;
pub mod shard;
pub mod startup;

use std::time::Instant;

use event_listener::Event;

/// Waits until `done` holds or `deadline` passes; returns whether `done`
/// held. `event` must be notified whenever `done` may have become true:
/// the listener is taken before each check, so no notification is lost.
pub async fn wait_until(event: &Event, deadline: Instant, done: impl Fn() -> bool) -> bool {
    loop {
        let listener = event.listen();
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let timeout = glommio::timer::sleep(deadline - now);
        futures::future::select(listener, Box::pin(timeout)).await;
    }
}
