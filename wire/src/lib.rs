//! corelog's wire format.
//!
//! This crate is pure: it performs no I/O, reads no clock and spawns nothing.
//! Everything here is a function from bytes to typed values and back, so that
//! the broker, the client and the fuzzers share one definition of the
//! protocol, and every decoder can be driven with arbitrary bytes.
//!
//! - [`batch`]: record batches in the Kafka RecordBatch v2 layout, the unit of
//!   storage and replication.
//! - [`types`]: offsets, epochs and other identities as distinct types.
//! - [`error`]: stable numeric error codes, with what the user should do.
//! - [`frame`]: the frame codec; frames over the limit are refused from their
//!   header, before anything is allocated.
//! - [`message`]: API request and response bodies as validated rkyv archives,
//!   with record batches in a raw section after the archive.
//! - [`topic`]: the topic name rule, shared by the controller and clients.
//! - [`group`]: the group id rule, shared by the broker and clients.
//! - [`producer_id`]: idempotent producer ids bound to their principal.
//! - [`acl`]: the vocabulary of access rules (resource types, operations).
//! - [`sasl`]: authentication exchanges as pure state machines (the
//!   cluster secret's proof between brokers).
//! - [`rng`]: the workspace's seeded generator (SplitMix64), for jitter,
//!   the simulator and the fault rig.
//! - [`newtype!`]: how every crate declares its identities.

pub mod acl;
pub mod batch;
pub mod error;
pub mod frame;
pub mod group;
pub mod message;
pub mod producer_id;
pub mod rng;
pub mod sasl;
pub mod topic;
pub mod types;
