//! ControllerRaft: one raft message from one controller voter to another.
//!
//! Inter-broker: spoken only between controller voters, never by clients.
//!
//! The raft message itself (raft-rs's `eraftpb::Message`, protobuf-encoded)
//! is opaque here: it travels in the body's raw section, `message_len` bytes,
//! so that this crate depends on neither raft nor protobuf and never copies
//! the entries a message carries. The controller crate decodes it. `from` and
//! `to` are repeated outside it so that a receiver can drop a message meant
//! for another node (a stale address after a node moved) without decoding
//! protobuf.
//!
//! Raft is asynchronous: the response only says whether the message was
//! handed to the receiver's raft node. Raft's own replies travel as
//! ControllerRaft requests in the other direction, and raft retransmits what
//! was lost, so a sender only logs a failed response.

use rkyv::{Archive, Deserialize, Serialize};

use super::{RawSectionLen, api, no_raw_section};
use crate::frame::ApiKey;

/// One raft message; its protobuf bytes are the raw section.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ControllerRaftRequest {
    /// Node id of the sending voter (raft's `from`).
    pub from: u32,
    /// Node id of the receiving voter (raft's `to`); a node with another id
    /// refuses the message.
    pub to: u32,
    /// Bytes of the protobuf-encoded raft message in the raw section.
    pub message_len: u32,
}

/// Whether the raft message was handed to the receiver's raft node.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ControllerRaftResponse {
    /// `NONE` (0) when the receiver stepped its raft node with the message;
    /// otherwise the message was dropped (for example `INVALID_REQUEST`: `to`
    /// is not this node, or the protobuf did not decode) and raft's
    /// retransmission recovers.
    pub error_code: u16,
}

api!(ApiKey::ControllerRaft, ControllerRaftRequest => ControllerRaftResponse);
no_raw_section!(ControllerRaftResponse, ArchivedControllerRaftResponse);

impl RawSectionLen for ControllerRaftRequest {
    fn raw_section_len(&self) -> u64 {
        u64::from(self.message_len)
    }
}

impl RawSectionLen for ArchivedControllerRaftRequest {
    fn raw_section_len(&self) -> u64 {
        u64::from(self.message_len.to_native())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, noise, raw_section, request_raw_section_mismatch_is_refused,
        round_trip_request, round_trip_response,
    };

    /// A request and its raw section (a stand-in for the protobuf bytes).
    pub(crate) fn request() -> impl Strategy<Value = (ControllerRaftRequest, Vec<u8>)> {
        (any::<u32>(), any::<u32>(), raw_section()).prop_map(|(from, to, message)| {
            (
                ControllerRaftRequest {
                    from,
                    to,
                    message_len: message.len() as u32,
                },
                message,
            )
        })
    }

    pub(crate) fn response() -> impl Strategy<Value = ControllerRaftResponse> {
        any::<u16>().prop_map(|error_code| ControllerRaftResponse { error_code })
    }

    proptest! {
        #[test]
        fn request_round_trips_with_message((msg, raw) in request()) {
            round_trip_request(&msg, &raw)?;
        }

        #[test]
        fn response_round_trips(msg in response()) {
            round_trip_response(&msg, &[])?;
        }

        #[test]
        fn message_len_must_match_the_raw_section((msg, raw) in request()) {
            request_raw_section_mismatch_is_refused(&msg, &raw)?;
        }

        #[test]
        fn arbitrary_bytes_never_panic((q, raw) in request(), s in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &raw), (&s, &[]), &noise);
        }
    }
}
