//! Raft messages between controller nodes, as bytes the broker's transport
//! carries opaquely.
//!
//! ```text
//! version u8 (1) · crc32c(payload) u32 LE · payload = raft-rs `eraftpb.Message` (protobuf)
//! ```
//!
//! The CRC keeps damaged bytes away from the protobuf parser, and the size
//! bound keeps a forged length from allocating: protobuf 2.28 has a known
//! deep-recursion advisory (RUSTSEC-2024-0437). Controller peers are trusted
//! brokers of the same cluster, so this is a guard against damage, not an
//! authentication; the transport must still cap its frames at
//! [`MESSAGE_BYTES_MAX`].

use protobuf::Message as _;
use raft::eraftpb::Message;

use crate::codec::DecodeError;
use crate::durable::RECORD_BYTES_MAX;

/// Largest message: a snapshot of the largest state, plus room for Raft's
/// fields.
pub const MESSAGE_BYTES_MAX: usize = RECORD_BYTES_MAX + (1 << 20);
const VERSION: u8 = 1;
const HEADER_BYTES: usize = 5;
const WHAT: &str = "raft message";

/// Encodes a message for the transport; `None` if protobuf refuses it
/// (it never does for messages raft-rs builds; Raft resends anyway).
pub(crate) fn encode(message: &Message) -> Option<Vec<u8>> {
    let payload = message.write_to_bytes().ok()?;
    let mut bytes = Vec::with_capacity(HEADER_BYTES + payload.len());
    bytes.push(VERSION);
    bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Some(bytes)
}

/// Decodes a message from the transport.
///
/// # Errors
/// [`DecodeError`] for anything but an undamaged message of a known
/// version within the size bound. Never panics.
pub(crate) fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    if bytes.len() > MESSAGE_BYTES_MAX {
        return Err(DecodeError::Invalid {
            what: WHAT,
            at: 0,
            reason: format!("{} bytes, over {MESSAGE_BYTES_MAX}", bytes.len()),
        });
    }
    if bytes.len() < HEADER_BYTES {
        return Err(DecodeError::Truncated {
            at: 0,
            what: WHAT,
            needed: HEADER_BYTES - bytes.len(),
        });
    }
    if bytes[0] != VERSION {
        return Err(DecodeError::UnsupportedVersion {
            what: WHAT,
            version: bytes[0],
            supported: VERSION,
        });
    }
    let stored = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    let payload = &bytes[HEADER_BYTES..];
    let computed = crc32c::crc32c(payload);
    if stored != computed {
        return Err(DecodeError::Checksum {
            what: WHAT,
            stored,
            computed,
        });
    }
    Message::parse_from_bytes(payload).map_err(|error| DecodeError::Invalid {
        what: WHAT,
        at: HEADER_BYTES,
        reason: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use raft::eraftpb::MessageType;

    use super::*;

    #[test]
    fn messages_round_trip_and_damage_is_detected() {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgHeartbeat);
        message.to = 2;
        message.from = 1;
        message.term = 7;
        let bytes = encode(&message).unwrap();
        assert_eq!(decode(&bytes), Ok(message));
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x04;
            assert!(decode(&damaged).is_err(), "byte {index}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn arbitrary_payloads_with_a_valid_crc_never_panic(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut bytes = vec![VERSION];
            bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
            bytes.extend_from_slice(&payload);
            let _ = decode(&bytes);
        }
    }
}
