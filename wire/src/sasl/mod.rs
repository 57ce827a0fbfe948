//! Authentication mechanisms spoken through the `Authenticate` API, as pure
//! state machines: bytes in, bytes out, no I/O, no clock, no entropy (the
//! caller draws nonces), so that each can be checked message by message.

pub mod cluster;
pub mod scram;
