//! Consumer groups (DESIGN §8, C6): the coordinator of each group, its
//! membership protocol, assignment and durable offsets.
//!
//! - [`assignor`]: sticky, cooperative, balanced assignment (pure).
//! - [`state`]: one group's membership and offsets as a state machine (pure).
//! - [`coordinator`]: the groups of one `__groups` partition, persisted
//!   there and rebuilt by replaying it.
//! - [`log`]: the replicated `__groups` partition a coordinator persists to.
//! - [`host`]: what a coordinator needs from the broker it runs on.
//! - [`records`]: how group state is written to and replayed from `__groups`.
//! - [`offsets`]: which topic a committed offset belongs to, and the
//!   offsets of deleted topics.
//! - [`offset_deletion`]: `group delete-offsets`, audited.
//! - [`service`]: group requests on the coordinator's shard, audited resets
//!   and skips (`__audit`), periodic expiry.
//! - [`lag`]: lag in records, bytes and time, and retention left.
//!
//! The coordinator of group `g` is the owner of `__groups` partition
//! `xxh3_64(g) % N`'s leader replica; requests reaching another shard are
//! forwarded to it.

pub mod assignor;
pub mod budget;
pub mod coordinator;
pub mod host;
pub mod lag;
pub mod log;
pub mod offset_deletion;
pub mod offsets;
pub mod records;
pub mod service;
pub mod state;
