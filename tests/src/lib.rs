//! Multi-process tests of corelog: real `corelogd` processes on loopback,
//! driven through the wire protocol ([`wire_client`]), the client library
//! and the `corelog` CLI.
//!
//! - [`process`]: starting, killing (-9), terminating and restarting brokers.
//! - [`wire_client`]: a blocking protocol client on the wire crate alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

pub mod process;
pub mod wire_client;

pub use process::{Broker, binary, free_port, start_cluster};
pub use wire_client::{Client, batch, values};
