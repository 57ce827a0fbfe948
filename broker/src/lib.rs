//! corelog's broker, `corelogd`.
//!
//! The broker is the I/O shell around corelog's pure parts: it owns files,
//! sockets and executors and drives the wire codec, the replication state
//! machine and the controller. Every node is a cluster member: a single
//! node is a cluster of one, its own only controller voter, and every
//! partition is replicated (a single node's over a replica set of one), so
//! there is one metadata authority and one write path.
//!
//! One folder per concern; the arrows run one way, `net` → `runtime` →
//! (`group`, `replica`, `cluster`) → `partition` → `storage`:
//!
//! - [`net`]: listeners, connections and request handlers.
//! - [`runtime`]: executors' shards, partition ownership and the
//!   cross-shard channels.
//! - [`group`]: consumer-group coordinators — membership, assignment,
//!   durable offsets, audited resets, lag.
//! - [`replica`]: a partition replica — the I/O shell around the
//!   replication state machine — and the replication streams that carry
//!   many partitions' pushes per frame to each follower broker.
//! - [`cluster`]: the controller role and this broker's membership.
//! - [`partition`]: a partition's log with its produce checks and
//!   idempotent-producer state.
//! - [`storage`]: the partition log on disk — segments, indexes, the
//!   shard journal that group-commits every partition of a shard at once,
//!   recovery, retention, the tail cache.
//!
//! Beside them: [`server`] (the process: it wires `net` onto `runtime`),
//! [`data_dir`] (the data directory, private to the broker's user),
//! [`identity`] (which node and cluster a data directory belongs to),
//! [`descriptors`] (the open file limit and how it is divided),
//! [`decoy_key`] (the key of the SCRAM decoys for unknown users),
//! [`producer_ids`] (the key binding producer ids to principals),
//! [`migration`] (upgrading a standalone data directory), [`metadata`]
//! (the snapshots shards work from), [`peer`] (RPC to other brokers, and to
//! itself in-process), [`api`] (encoded replies), [`executor`] (the
//! runtime seam the replica shell runs on, so the simulator can run it),
//! [`tls`] (certificates and handshakes for the listener and peers),
//! [`metrics`], [`config`], [`clock`] and [`log_limit`] (rate limits for
//! log lines a client can repeat).

pub mod api;
pub mod cluster;
pub mod config;
pub mod data_dir;
pub mod decoy_key;
pub mod descriptors;
pub mod executor;
pub mod group;
pub mod identity;
pub mod log_limit;
pub mod metadata;
pub mod metrics;
pub mod migration;
pub mod net;
pub mod partition;
pub mod peer;
pub mod producer_ids;
pub mod replica;
pub mod runtime;
pub mod server;
pub mod tls;
