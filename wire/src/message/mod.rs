//! API messages: the bodies of request and response frames, as rkyv 0.8
//! archives followed by a raw byte section.
//!
//! # Body layout
//!
//! All prefix integers are big-endian; the archive itself is rkyv's format
//! (little-endian, aligned primitives, 32-bit relative pointers: the features
//! are pinned in `wire/Cargo.toml` so that no other crate in a build can
//! change them).
//!
//! ```text
//! request body:  archive_len: u32 · raw_len: u32 · reserved: [u8; 8] = 0 · archive · raw
//! response body: error_code: u16 · reserved: u16 = 0 · archive_len: u32 · raw_len: u32 · reserved: u32 = 0 · archive · raw
//! ```
//!
//! - The prefix is [`BODY_PREFIX_BYTES`] (16) long so that the archive is
//!   16-aligned whenever the body is. rkyv validation refuses a misaligned
//!   archive, so a reader must place each body at a 16-aligned address (read
//!   it into an `rkyv::util::AlignedVec`, or [`copy_aligned`]). The decoders
//!   return [`MessageError::Misaligned`] rather than copying, so that the
//!   archived message they return borrows from the caller's buffer.
//! - `16 + archive_len + raw_len` must equal the body length exactly.
//! - Reserved bytes must be zero; a decoder refuses anything else.
//! - The raw section carries record batches, so they travel as the producer
//!   built them and are never re-encoded. Produce requests and fetch responses
//!   declare one `records_len` per partition; the raw section is those
//!   partitions' bytes concatenated in message order
//!   ([`produce::partition_records`], [`fetch::partition_records`]). Three
//!   inter-broker messages carry one opaque section each, declared by one
//!   length field: ControllerRaft requests (`message_len`, a raft message),
//!   MetadataFetch responses (`state_len`, the metadata state) and
//!   ReplicaPush requests (`records_len`, record batches). ReplicaStream
//!   requests declare one `records_len` per push, as produce requests do per
//!   partition ([`replica_stream::push_records`]). Every other
//!   message has an empty raw section. The decoders check that the declared
//!   lengths add up to the raw section's length.
//! - A response whose `error_code` is not `NONE` refuses the whole request
//!   (unsupported version, invalid request, …) and has no archive and no raw
//!   section. Per-topic and per-partition errors live inside the archive,
//!   and so do refusals that come with detail for people: the group APIs
//!   answer `NOT_COORDINATOR`, `ILLEGAL_GENERATION`, … in the archive's own
//!   `error_code` and `error_message`.
//!
//! # Validation
//!
//! Decoding always goes through `rkyv::access` with bytecheck validation; no
//! untrusted byte ever reaches an unchecked access. Decoding allocates
//! nothing: the result borrows from the body. Validation is not integrity —
//! record batches carry their own CRC32C (see [`crate::batch`]).
//!
//! # Fields
//!
//! Error codes inside messages are plain `u16` so that a code unknown to an
//! older client does not fail the whole message; read them with
//! [`ErrorCode::from_code`](crate::error::ErrorCode::from_code). Offsets and
//! times that can be absent are `i64` with `-1` for "none".
//!
//! # Inter-broker APIs
//!
//! [`controller_raft`], [`broker_register`], [`broker_heartbeat`],
//! [`metadata_fetch`], [`controller_operation`], [`replica_push`],
//! [`replica_query`], [`replica_stream`] and [`partition_report`] (api keys `40..`) are spoken between brokers and
//! controller voters, never by clients
//! ([`ApiKey::is_inter_broker`](crate::frame::ApiKey::is_inter_broker)). They
//! use the same frames and bodies as the client APIs, so that one codec and
//! one set of fuzzers cover both.
//!
//! # Stored records
//!
//! [`audit`] and [`group_records`] are not messages but the values the broker
//! stores in its internal topics (`__audit`, `__groups`), kept here so that
//! their format is defined in one pure, fuzzable place. They use the same
//! archive format behind a version byte.

mod body;
mod common;
mod stored;

pub mod alter_acls;
pub mod alter_cluster;
pub mod alter_quotas;
pub mod alter_users;
pub mod api_versions;
pub mod audit;
pub mod authenticate;
pub mod broker_heartbeat;
pub mod broker_register;
pub mod controller_operation;
pub mod controller_raft;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_offsets;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_cluster;
pub mod describe_groups;
pub mod describe_quotas;
pub mod describe_shards;
pub mod describe_topics;
pub mod describe_users;
pub mod fetch;
pub mod find_coordinator;
pub mod group_records;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod metadata_fetch;
pub mod offset_commit;
pub mod offset_fetch;
pub mod partition_report;
pub mod produce;
pub mod replica_push;
pub mod replica_query;
pub mod replica_stream;
pub mod reset_offsets;
pub mod write_audit;

#[cfg(test)]
mod fuzz_seeds;
#[cfg(test)]
mod test_support;

use rkyv::api::high::{HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::{Archive, Portable, Serialize};

pub use self::body::{
    BODY_ALIGNMENT, BODY_PREFIX_BYTES, MessageError, PartitionRecords, copy_aligned,
    decode_request, decode_response, encode_error_response, encode_request, encode_request_archive,
    encode_response, encode_response_archive, split_raw_section,
};
pub use self::common::{
    ArchivedConfigEntry, ArchivedTopicPartitions, ArchivedTopicResult, ConfigEntry,
    TopicPartitions, TopicResult,
};
use crate::frame::ApiKey;

/// How many bytes of raw section a message declares: the sum of its
/// `records_len` fields (or its one `message_len` / `state_len` field), or
/// zero for messages without a raw section. Implemented
/// for each message and for its archived form, so that both the encoder and
/// the decoder can check the raw section.
pub trait RawSectionLen {
    /// Bytes of raw section this message declares.
    fn raw_section_len(&self) -> u64;
}

/// A message body type: a request or a response of one API.
///
/// The bounds say that the type can be archived into a body buffer and that
/// its archived form can be validated from untrusted bytes.
pub trait Message:
    RawSectionLen
    + Archive<
        Archived: Portable + RawSectionLen + for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
    > + for<'a> Serialize<HighSerializer<Vec<u8>, ArenaHandle<'a>, rancor::Error>>
{
    /// The API this message belongs to.
    const API_KEY: ApiKey;
    /// The API version whose layout this message has (the request
    /// header's `api_version`). A changed message is a new type under the
    /// next version; the broker answers each version in its own layout, so
    /// older clients keep working.
    const API_VERSION: u16 = 0;
}

/// A request message; its response type is fixed by the API.
pub trait Request: Message {
    /// The response to this request.
    type Response: Response;
}

/// A response message.
pub trait Response: Message {}

/// Implements [`Message`] and [`Request`]/[`Response`] for an API's pair of
/// messages.
macro_rules! api {
    ($key:expr, version $version:expr, $request:ty => $response:ty) => {
        impl $crate::message::Message for $request {
            const API_KEY: $crate::frame::ApiKey = $key;
            const API_VERSION: u16 = $version;
        }
        impl $crate::message::Message for $response {
            const API_KEY: $crate::frame::ApiKey = $key;
            const API_VERSION: u16 = $version;
        }
        impl $crate::message::Request for $request {
            type Response = $response;
        }
        impl $crate::message::Response for $response {}
    };
    ($key:expr, $request:ty => $response:ty) => {
        impl $crate::message::Message for $request {
            const API_KEY: $crate::frame::ApiKey = $key;
        }
        impl $crate::message::Message for $response {
            const API_KEY: $crate::frame::ApiKey = $key;
        }
        impl $crate::message::Request for $request {
            type Response = $response;
        }
        impl $crate::message::Response for $response {}
    };
}

/// Implements [`RawSectionLen`] as zero for messages that carry no records,
/// and for their archived forms.
macro_rules! no_raw_section {
    ($($message:ty),* $(,)?) => {
        $(
            impl $crate::message::RawSectionLen for $message {
                fn raw_section_len(&self) -> u64 {
                    0
                }
            }
        )*
    };
}

pub(crate) use {api, no_raw_section};

#[cfg(test)]
mod tests {
    use super::api_versions::{ApiVersionsRequest, ApiVersionsResponse};
    use super::init_producer_id::InitProducerIdRequest;
    use super::produce::{Acks, ProducePartition, ProduceRequest, ProduceTopic};
    use super::*;
    use crate::error::ErrorCode;

    fn init_request() -> InitProducerIdRequest {
        InitProducerIdRequest {
            transactional_id: None,
            producer_id: -1,
            producer_epoch: -1,
        }
    }

    fn produce_request(lens: &[u32]) -> ProduceRequest {
        ProduceRequest {
            acks: Acks::Quorum,
            timeout_ms: 1000,
            topics: vec![ProduceTopic {
                name: "t".to_owned(),
                partitions: lens
                    .iter()
                    .enumerate()
                    .map(|(i, &records_len)| ProducePartition {
                        partition: i as u32,
                        records_len,
                    })
                    .collect(),
            }],
        }
    }

    /// Pins the archive bytes of one small message: if rkyv's format or the
    /// pinned features change, every deployed peer would misread us.
    #[test]
    fn archive_bytes_of_a_small_request_are_pinned() {
        let body = encode_request(&init_request(), &[]).unwrap();
        let expected: &[u8] = &[
            0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // prefix
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, // transactional_id: None (tag, padding)
            0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, // producer_id: -1
            0xFF, 0xFF, 0, 0, 0, 0, 0, 0, // producer_epoch: -1, padding
        ];
        assert_eq!(body, expected);
        let aligned = copy_aligned(&body);
        let (message, raw) = decode_request::<InitProducerIdRequest>(&aligned).unwrap();
        assert!(raw.is_empty());
        assert_eq!(message.producer_id, -1);
    }

    #[test]
    fn misaligned_body_is_refused_and_copy_aligned_fixes_it() {
        let body = encode_request(&init_request(), &[]).unwrap();
        let mut shifted = rkyv::util::AlignedVec::<16>::new();
        shifted.push(0);
        shifted.extend_from_slice(&body);
        assert_eq!(
            decode_request::<InitProducerIdRequest>(&shifted[1..]).map(|_| ()),
            Err(MessageError::Misaligned {
                api_key: ApiKey::InitProducerId,
                body_len: body.len(),
                misalignment: 1
            })
        );
        assert!(decode_request::<InitProducerIdRequest>(&copy_aligned(&shifted[1..])).is_ok());
    }

    #[test]
    fn lengths_must_add_up_to_the_body_exactly() {
        let mut body = encode_request(&init_request(), &[]).unwrap();
        body.push(0);
        let body = copy_aligned(&body);
        assert_eq!(
            decode_request::<InitProducerIdRequest>(&body).map(|_| ()),
            Err(MessageError::LengthMismatch {
                api_key: ApiKey::InitProducerId,
                body_len: 49,
                archive_len: 32,
                raw_len: 0
            })
        );
        let mut huge = [0_u8; 16];
        huge[0..8].copy_from_slice(&[0xFF; 8]);
        assert!(matches!(
            decode_request::<InitProducerIdRequest>(&copy_aligned(&huge)),
            Err(MessageError::LengthMismatch { .. })
        ));
        assert_eq!(
            decode_request::<InitProducerIdRequest>(&[0; 15]).map(|_| ()),
            Err(MessageError::BodyTooShort {
                api_key: ApiKey::InitProducerId,
                body_len: 15
            })
        );
    }

    #[test]
    fn reserved_prefix_bytes_must_be_zero() {
        let mut body = encode_request(&init_request(), &[]).unwrap();
        body[15] = 1;
        assert!(matches!(
            decode_request::<InitProducerIdRequest>(&copy_aligned(&body)),
            Err(MessageError::ReservedNotZero { .. })
        ));
    }

    #[test]
    fn raw_section_on_a_message_without_records_is_refused() {
        assert_eq!(
            encode_request(&init_request(), b"x"),
            Err(MessageError::RawSectionMismatch {
                api_key: ApiKey::InitProducerId,
                raw_len: 1,
                declared: 0
            })
        );
        let mut body = encode_request(&init_request(), &[]).unwrap();
        body[4..8].copy_from_slice(&1_u32.to_be_bytes());
        body.push(7);
        assert!(matches!(
            decode_request::<InitProducerIdRequest>(&copy_aligned(&body)),
            Err(MessageError::RawSectionMismatch {
                declared: 0,
                raw_len: 1,
                ..
            })
        ));
    }

    #[test]
    fn raw_section_length_mismatch_is_an_error_both_ways() {
        let request = produce_request(&[3, 2]);
        assert!(matches!(
            encode_request(&request, b"abcd"),
            Err(MessageError::RawSectionMismatch {
                declared: 5,
                raw_len: 4,
                ..
            })
        ));
        // A body whose prefix agrees with its length but whose raw section
        // disagrees with the records_len fields.
        let mut body = encode_request_archive(&request, 5).unwrap();
        body.extend_from_slice(b"abcd");
        body[4..8].copy_from_slice(&4_u32.to_be_bytes());
        assert!(matches!(
            decode_request::<ProduceRequest>(&copy_aligned(&body)),
            Err(MessageError::RawSectionMismatch {
                declared: 5,
                raw_len: 4,
                ..
            })
        ));
        assert!(matches!(
            split_raw_section(ApiKey::Produce, b"abcdef", [3_u32, 2]),
            Err(MessageError::RawSectionMismatch {
                declared: 5,
                raw_len: 6,
                ..
            })
        ));
        assert_eq!(
            split_raw_section(ApiKey::Produce, b"abcde", [3_u32, 0, 2]).unwrap(),
            [&b"abc"[..], b"", b"de"]
        );
    }

    #[test]
    fn top_level_error_response_has_no_archive() {
        let body = encode_error_response(ErrorCode::UnsupportedVersion);
        assert_eq!(body, [0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let error = decode_response::<ApiVersionsResponse>(&body).unwrap_err();
        assert_eq!(
            error,
            MessageError::TopLevelError {
                api_key: ApiKey::ApiVersions,
                body_len: 16,
                error_code: 4
            }
        );
        assert_eq!(error.error_code(), ErrorCode::UnsupportedVersion);
        // A refusal that also carries an archive is malformed.
        let ok = encode_response(
            &ApiVersionsResponse {
                apis: Vec::new(),
                broker_version: String::new(),
            },
            &[],
        )
        .unwrap();
        let mut both = ok.clone();
        both[1] = 3;
        assert!(matches!(
            decode_response::<ApiVersionsResponse>(&copy_aligned(&both)),
            Err(MessageError::ErrorWithMessage { error_code: 3, .. })
        ));
        // A success without an archive is malformed too.
        assert!(matches!(
            decode_response::<ApiVersionsResponse>(&[0; 16]),
            Err(MessageError::EmptyArchive { .. })
        ));
        assert!(decode_response::<ApiVersionsResponse>(&copy_aligned(&ok)).is_ok());
    }

    /// Archives are not self-describing: the frame's api key, not the body,
    /// says which message type to validate against. A body that fails
    /// validation names that api, and the broker answers INVALID_REQUEST.
    #[test]
    fn invalid_archive_error_names_the_api_and_maps_to_invalid_request() {
        let mut body = vec![0_u8; 16];
        body[3] = 3;
        body.extend_from_slice(&[0xFF, 0xFF, 0xFF]);
        let error = decode_request::<ApiVersionsRequest>(&copy_aligned(&body)).unwrap_err();
        assert_eq!(
            error,
            MessageError::InvalidArchive {
                api_key: ApiKey::ApiVersions,
                body_len: 19,
                archive_len: 3
            }
        );
        assert_eq!(error.api_key(), ApiKey::ApiVersions);
        assert_eq!(error.error_code(), ErrorCode::InvalidRequest);
    }
}
