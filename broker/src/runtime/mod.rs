//! The thread-per-core runtime: one glommio executor per shard, partition
//! ownership, the cross-shard command channels.
//!
//! - [`shard`]: a shard's state and life (inbox, readiness, shutdown).
//! - [`routing`]: partition operations on their owning shard and leader.
//! - [`topics`]: topic changes, producer ids and metadata snapshots.
//! - [`replicas`]: the replicas placed on a shard, their roles and the
//!   replication APIs.
//! - [`groups`]: group coordinators, and the shard as their host.
//! - [`maintenance`], [`reopen`]: housekeeping, and reopening logs fenced by
//!   a full disk once space is back.
//! - [`deletion`]: removing deleted topics' files in the background.
//! - [`command`]: what shards send each other (owned, `Send` data only).
//! - [`fatal`]: failures that end the process, with their exit codes.
//!
//! Starting and stopping the executors is `crate::server`'s.

pub mod command;
pub mod deletion;
pub mod fatal;
pub mod groups;
pub mod maintenance;
pub mod reopen;
pub mod replicas;
pub mod routing;
pub mod shard;
pub mod topics;

pub use crate::executor::wait_until;
