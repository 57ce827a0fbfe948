//! The thread-per-core runtime: one glommio executor per shard, partition
//! ownership, the cross-shard mailboxes.
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
//! - [`invoke`]: the one way to reach a shard: run a closure on the shard
//!   that owns the work ([`shard::Shard::invoke_on`]).
//! - [`fatal`]: failures that end the process, with their exit codes.
//!
//! Starting and stopping the executors is `crate::server`'s.

pub mod deletion;
pub mod fatal;
pub mod groups;
pub mod invoke;
pub mod maintenance;
pub mod reopen;
pub mod replicas;
pub mod routing;
pub mod shard;
pub mod topics;

pub use crate::executor::wait_until;
