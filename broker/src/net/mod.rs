//! The client-facing network layer: every shard accepts connections on the
//! shared port, reads frames with bounded memory and in-flight count, hands
//! each request to its handler and writes responses as they complete.
//!
//! - [`front`]: a shard's client side: the shard, and the state only this
//!   layer keeps (the [`edge`], the shard ports, open connections).
//! - [`listener`]: accept loop and the connection limits.
//! - [`edge`]: what every shard's connections share (connection counts,
//!   quota buckets, failed logins), with [`connection_counts`],
//!   [`quota`] and [`login_ledger`], its pure parts.
//! - [`accept_backoff`]: an accept loop that fails on a client's behalf
//!   pauses and stays quiet (its lines limited by [`crate::log_limit`]).
//! - [`port`]: client ports bound at start, listening once the shard serves.
//! - [`connection`]: one connection's frames, handshake, backpressure.
//! - [`admission`]: the produce bytes a shard admits at once (overload
//!   pushes back to producers instead of queueing in the broker).
//! - [`handlers`]: one module per API.
//! - [`loopback`]: the same handlers for calls this broker makes to itself.
//! - [`request_body`]: an aligned, owned body, cut into batches uncopied.
//! - [`shard_ports`]: the port each shard also accepts on alone, for
//!   shard-aware clients; [`kept_ports`]: those `auto` picked, kept
//!   across restarts.

pub mod accept_backoff;
pub mod access;
pub mod admission;
pub mod connection;
pub mod connection_counts;
pub mod edge;
pub mod front;
pub mod handlers;
pub mod kept_ports;
pub mod listener;
pub mod login_ledger;
pub mod loopback;
pub mod port;
pub mod quota;
pub mod request_body;
pub mod session;
pub mod shard_ports;
pub mod throttle;

pub use crate::api::Reply;
