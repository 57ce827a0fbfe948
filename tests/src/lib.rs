//! Multi-process tests of corelog: real `corelogd` processes on loopback,
//! driven through the wire protocol ([`wire_client`]), the client library
//! and the `corelog` CLI.
//!
//! - [`process`]: starting, killing (-9), terminating and restarting brokers.
//! - [`cli`]: running the `corelog` command-line tool against them.
//! - [`power_loss`]: cutting a killed broker's files to their fsynced lengths.
//! - [`corruption`]: damaging a stopped broker's files by kind, with a backup to restore.
//! - [`wire_client`]: a blocking protocol client on the wire crate alone.
//! - [`cluster_client`]: metadata, leader, produce and read-back questions to a whole cluster.
//! - [`netns`]: a private network namespace and nftables cuts between
//!   brokers' and clients' loopback addresses.
//! - [`proxy`]: a seeded fault proxy (delay, reorder, duplicate, drop,
//!   corrupt, lost replies) between clients and brokers and between brokers.
//! - [`small_fs`]: a small mounted filesystem to fill up (disk full).
//! - [`edge`]: the broker's edge as an attacker meets it: source
//!   addresses, raw SCRAM steps, descriptor limits, tenants.
//! - [`tenants`]: a secured broker with tenants, logged in by CLI or raw wire.
//!
//! Every random choice above draws from `corelog_wire::rng::SplitMix64`,
//! so a printed seed replays it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

pub mod cli;
pub mod cluster_client;
pub mod corruption;
pub mod edge;
pub mod netns;
pub mod power_loss;
pub mod process;
pub mod proxy;
pub mod small_fs;
pub mod tenants;
pub mod tls;
pub mod wire_client;

pub use process::{Broker, binary, free_port, has_fault_hooks, start_cluster, test_broker_binary};
pub use wire_client::{Client, batch, values};
