//! corelog's broker, `corelogd`.
//!
//! The broker is the I/O shell around corelog's pure parts: it owns files,
//! sockets and executors and drives the wire codec and (later) the
//! replication state machines. One folder per concern:
//!
//! - [`storage`]: the partition log on disk — segments, indexes, group-commit
//!   appends, recovery, retention, the tail cache.
//! - [`partition`]: a partition replica — produce checks, idempotent-producer
//!   state, reads and offset lookups.
//! - [`metadata`]: the topic catalog, its persistence and the snapshots
//!   shards work from.
//! - [`group`]: consumer-group coordinators — membership, assignment,
//!   durable offsets, audited resets, lag.
//! - [`runtime`]: executors (one per core), partition ownership and the
//!   cross-shard channels.
//! - [`net`]: listeners, connections and request handlers.
//! - [`metrics`]: per-shard Prometheus metrics and the `/metrics` endpoint.
//! - [`config`]: settings from defaults, a TOML file and flags.
//! - [`clock`]: wall-clock time as an input, so that tests control it.

pub mod clock;
pub mod cluster;
pub mod config;
pub mod group;
pub mod metadata;
pub mod metrics;
pub mod net;
pub mod partition;
pub mod peer;
pub mod replica;
pub mod runtime;
pub mod storage;
