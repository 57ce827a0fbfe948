//! The thread-per-core runtime: one glommio executor per shard, partition
//! ownership, the cross-shard command channels, the single-node metadata
//! authority, start-up and graceful shutdown.
//!
//! - [`shard`]: a shard's state and the routing of partition operations.
//! - [`command`]: what shards send each other (owned, `Send` data only).
//! - [`authority`]: shard 0's topic catalog and producer-id allocator.
//! - [`startup`]: starting the executors, signals, stopping.

pub mod authority;
pub mod command;
pub mod shard;
pub mod startup;
