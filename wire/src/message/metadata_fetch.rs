//! MetadataFetch: a broker long-polls the controller leader for metadata
//! newer than the version it has.
//!
//! Inter-broker: spoken by brokers to the controller, never by clients
//! (clients read metadata with [`metadata`](super::metadata) from any
//! broker).
//!
//! The controller answers as soon as its metadata version is above
//! `known_version`, or after `max_wait_ms` with nothing new. The state travels
//! whole, not as a delta, in the body's raw section (`state_len` bytes), in
//! the controller crate's own CRC'd encoding, opaque here: the wire crate
//! neither depends on the controller nor copies the state into the archive.
//! A whole state is bounded by the frame limit, like every body.

use rkyv::{Archive, Deserialize, Serialize};

use super::{RawSectionLen, api, no_raw_section};
use crate::frame::ApiKey;

/// Asks for metadata newer than `known_version`.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct MetadataFetchRequest {
    /// The asking broker's node id.
    pub node_id: u32,
    /// The metadata version the broker has applied; `0` for none yet.
    pub known_version: u64,
    /// Longest wait for a version above `known_version` before answering
    /// with no state.
    pub max_wait_ms: u32,
}

/// The controller's metadata state, if newer than the broker's.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct MetadataFetchResponse {
    /// `NONE` (0); `NOT_CONTROLLER` (retry at `leader_hint`), …
    pub error_code: u16,
    /// Detail for people, beyond the error code's own message.
    pub error_message: Option<String>,
    /// With `NOT_CONTROLLER`: node id of the controller leader, if the
    /// answering voter knows it.
    pub leader_hint: Option<u32>,
    /// The metadata version (the raft index it was applied at) of the state
    /// in the raw section, or the controller's current version when there is
    /// no state.
    pub version: u64,
    /// Bytes of encoded metadata state in the raw section; `0` when nothing
    /// is newer than `known_version` (the wait ran out) or on error.
    pub state_len: u32,
}

api!(ApiKey::MetadataFetch, MetadataFetchRequest => MetadataFetchResponse);
no_raw_section!(MetadataFetchRequest, ArchivedMetadataFetchRequest);

impl RawSectionLen for MetadataFetchResponse {
    fn raw_section_len(&self) -> u64 {
        u64::from(self.state_len)
    }
}

impl RawSectionLen for ArchivedMetadataFetchResponse {
    fn raw_section_len(&self) -> u64 {
        u64::from(self.state_len.to_native())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::message::test_support::{
        arbitrary_bodies_never_panic, noise, optional_name, raw_section,
        response_raw_section_mismatch_is_refused, round_trip_request, round_trip_response,
    };

    pub(crate) fn request() -> impl Strategy<Value = MetadataFetchRequest> {
        (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(
            |(node_id, known_version, max_wait_ms)| MetadataFetchRequest {
                node_id,
                known_version,
                max_wait_ms,
            },
        )
    }

    /// A response and its raw section (a stand-in for the encoded state).
    pub(crate) fn response() -> impl Strategy<Value = (MetadataFetchResponse, Vec<u8>)> {
        (
            any::<u16>(),
            optional_name(),
            any::<Option<u32>>(),
            any::<u64>(),
            raw_section(),
        )
            .prop_map(|(error_code, error_message, leader_hint, version, state)| {
                (
                    MetadataFetchResponse {
                        error_code,
                        error_message,
                        leader_hint,
                        version,
                        state_len: state.len() as u32,
                    },
                    state,
                )
            })
    }

    #[test]
    fn answer_with_nothing_newer_has_an_empty_raw_section() {
        let nothing_new = MetadataFetchResponse {
            error_code: 0,
            error_message: None,
            leader_hint: None,
            version: 17,
            state_len: 0,
        };
        round_trip_response(&nothing_new, &[]).unwrap();
    }

    proptest! {
        #[test]
        fn request_round_trips(msg in request()) {
            round_trip_request(&msg, &[])?;
        }

        #[test]
        fn response_round_trips_with_state((msg, raw) in response()) {
            round_trip_response(&msg, &raw)?;
        }

        #[test]
        fn state_len_must_match_the_raw_section((msg, raw) in response()) {
            response_raw_section_mismatch_is_refused(&msg, &raw)?;
        }

        #[test]
        fn arbitrary_bytes_never_panic(q in request(), (s, raw) in response(), noise in noise()) {
            arbitrary_bodies_never_panic((&q, &[]), (&s, &raw), &noise);
        }
    }
}
