//! Shared helpers for the message tests: round trips and hostile bytes.

use std::fmt::Debug;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use rkyv::api::high::HighDeserializer;
use rkyv::rancor;

use super::{
    BODY_PREFIX_BYTES, MessageError, Request, Response, copy_aligned, decode_request,
    decode_response, encode_request, encode_request_archive, encode_response,
    encode_response_archive,
};

/// Short names, including multi-byte UTF-8 so that string validation is
/// exercised.
pub fn name() -> impl Strategy<Value = String> {
    "\\PC{0,12}"
}

/// An optional short name.
pub fn optional_name() -> impl Strategy<Value = Option<String>> {
    prop::option::of(name())
}

/// A small vector of `element`.
pub fn few<S: Strategy>(element: S) -> impl Strategy<Value = Vec<S::Value>> {
    prop::collection::vec(element, 0..4)
}

/// Some partitions of one topic.
pub fn topic_partitions() -> impl Strategy<Value = super::TopicPartitions> {
    (name(), few(any::<u32>()))
        .prop_map(|(topic, partitions)| super::TopicPartitions { topic, partitions })
}

/// The tag rkyv archives an enum value with: the first byte of the archived
/// root, which rkyv writes last. Tags are wire numbers, so tests pin them.
pub fn archived_tag<T>(value: &T) -> u8
where
    T: rkyv::Archive
        + for<'a> rkyv::Serialize<
            rkyv::api::high::HighSerializer<
                rkyv::util::AlignedVec,
                rkyv::ser::allocator::ArenaHandle<'a>,
                rancor::Error,
            >,
        >,
{
    let bytes = rkyv::to_bytes::<rancor::Error>(value).unwrap();
    bytes[bytes.len() - size_of::<T::Archived>()]
}

/// Non-empty random bytes for a message whose raw section is one opaque
/// blob (a raft message, a metadata state, a follower's record batches).
pub fn raw_section() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..64)
}

/// Random bytes and edits to apply to valid bodies.
#[derive(Debug, Clone)]
pub struct Noise {
    /// Bytes used whole, as a body and as an archive.
    bytes: Vec<u8>,
    /// Positions (in the archive part of a valid body) and values to
    /// overwrite.
    flips: Vec<(Index, u8)>,
    /// Where to cut a valid body.
    cut: Index,
}

/// Arbitrary [`Noise`].
pub fn noise() -> impl Strategy<Value = Noise> {
    (
        prop::collection::vec(any::<u8>(), 0..256),
        prop::collection::vec((any::<Index>(), any::<u8>()), 1..4),
        any::<Index>(),
    )
        .prop_map(|(bytes, flips, cut)| Noise { bytes, flips, cut })
}

/// Encodes, decodes with validation, deserializes, and compares.
pub fn round_trip_request<T>(msg: &T, raw: &[u8]) -> Result<(), TestCaseError>
where
    T: Request + Debug + PartialEq,
    T::Archived: rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
{
    let body = encode_request(msg, raw).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut parts =
        encode_request_archive(msg, raw.len()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    parts.extend_from_slice(raw);
    prop_assert_eq!(&parts, &body);
    let body = copy_aligned(&body);
    let (archived, decoded_raw) =
        decode_request::<T>(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(decoded_raw, raw);
    let back = rkyv::deserialize::<T, rancor::Error>(archived)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, msg);
    Ok(())
}

/// As [`round_trip_request`], for responses.
pub fn round_trip_response<T>(msg: &T, raw: &[u8]) -> Result<(), TestCaseError>
where
    T: Response + Debug + PartialEq,
    T::Archived: rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
{
    let body = encode_response(msg, raw).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut parts =
        encode_response_archive(msg, raw.len()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    parts.extend_from_slice(raw);
    prop_assert_eq!(&parts, &body);
    let body = copy_aligned(&body);
    let (archived, decoded_raw) =
        decode_response::<T>(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(decoded_raw, raw);
    let back = rkyv::deserialize::<T, rancor::Error>(archived)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, msg);
    Ok(())
}

/// A request body prefix declaring `archive_len` archive bytes and no raw
/// section.
fn request_prefix(archive_len: usize) -> [u8; BODY_PREFIX_BYTES] {
    let mut prefix = [0_u8; BODY_PREFIX_BYTES];
    prefix[0..4].copy_from_slice(&(archive_len as u32).to_be_bytes());
    prefix
}

/// A response body prefix declaring `archive_len` archive bytes and no raw
/// section.
fn response_prefix(archive_len: usize) -> [u8; BODY_PREFIX_BYTES] {
    let mut prefix = [0_u8; BODY_PREFIX_BYTES];
    prefix[4..8].copy_from_slice(&(archive_len as u32).to_be_bytes());
    prefix
}

/// `body` with `noise`'s flips applied after its prefix (in the archive,
/// or in the raw section when there is one).
fn flipped(body: &[u8], noise: &Noise) -> Vec<u8> {
    let mut body = body.to_vec();
    let after_prefix = body.len().saturating_sub(BODY_PREFIX_BYTES);
    if after_prefix > 0 {
        for (index, value) in &noise.flips {
            body[BODY_PREFIX_BYTES + index.index(after_prefix)] = *value;
        }
    }
    body
}

/// Feeds hostile bodies to a request decoder and a response decoder of one
/// API: arbitrary bytes as a body, arbitrary bytes as an archive behind a
/// valid prefix (so that rkyv's validation is what is tested), valid bodies
/// with bytes overwritten inside the archive, and valid bodies cut short.
/// Whatever decodes is then walked in full (Debug formatting reads every
/// field). The test is that none of this panics.
pub fn arbitrary_bodies_never_panic<Q, S>(
    (request, request_raw): (&Q, &[u8]),
    (response, response_raw): (&S, &[u8]),
    noise: &Noise,
) where
    Q: Request,
    S: Response,
    Q::Archived: Debug,
    S::Archived: Debug,
{
    let try_request = |body: &[u8]| {
        let aligned = copy_aligned(body);
        if let Ok((message, raw)) = decode_request::<Q>(&aligned) {
            let _ = format!("{message:?} {}", raw.len());
        }
    };
    let try_response = |body: &[u8]| {
        let aligned = copy_aligned(body);
        if let Ok((message, raw)) = decode_response::<S>(&aligned) {
            let _ = format!("{message:?} {}", raw.len());
        }
    };

    try_request(&noise.bytes);
    try_response(&noise.bytes);
    // Misaligned views of the same bytes.
    if noise.bytes.len() > 1 {
        let aligned = copy_aligned(&noise.bytes);
        let _ = decode_request::<Q>(&aligned[1..]);
        let _ = decode_response::<S>(&aligned[1..]);
    }

    let mut as_archive = request_prefix(noise.bytes.len()).to_vec();
    as_archive.extend_from_slice(&noise.bytes);
    try_request(&as_archive);
    let mut as_archive = response_prefix(noise.bytes.len()).to_vec();
    as_archive.extend_from_slice(&noise.bytes);
    try_response(&as_archive);

    if let Ok(body) = encode_request(request, request_raw) {
        try_request(&flipped(&body, noise));
        try_request(&body[..noise.cut.index(body.len() + 1)]);
    }
    if let Ok(body) = encode_response(response, response_raw) {
        try_response(&flipped(&body, noise));
        try_response(&body[..noise.cut.index(body.len() + 1)]);
    }
}

/// Checks that a request whose declared raw section length differs from the
/// raw bytes it travels with is refused: by the encoder, given one byte too
/// many or too few, and by the decoder, given a body whose prefix agrees with
/// its length but whose raw section is one byte longer than declared.
pub fn request_raw_section_mismatch_is_refused<T: Request>(
    msg: &T,
    raw: &[u8],
) -> Result<(), TestCaseError> {
    let declared = raw.len() as u64;
    let mut longer = raw.to_vec();
    longer.push(0xA5);
    prop_assert!(
        matches!(
            encode_request(msg, &longer),
            Err(MessageError::RawSectionMismatch { raw_len, declared: d, .. })
                if raw_len == longer.len() && d == declared
        ),
        "encoder accepted a raw section one byte too long"
    );
    if let Some((_, shorter)) = raw.split_last() {
        prop_assert!(
            matches!(
                encode_request(msg, shorter),
                Err(MessageError::RawSectionMismatch { .. })
            ),
            "encoder accepted a raw section one byte too short"
        );
    }
    let mut body = encode_request_archive(msg, raw.len()).map_err(fail)?;
    body[4..8].copy_from_slice(&(longer.len() as u32).to_be_bytes());
    body.extend_from_slice(&longer);
    let decoded = decode_request::<T>(&copy_aligned(&body)).map(|_| ());
    prop_assert_eq!(
        decoded,
        Err(MessageError::RawSectionMismatch {
            api_key: T::API_KEY,
            raw_len: longer.len(),
            declared,
        })
    );
    Ok(())
}

/// As [`request_raw_section_mismatch_is_refused`], for responses.
pub fn response_raw_section_mismatch_is_refused<T: Response>(
    msg: &T,
    raw: &[u8],
) -> Result<(), TestCaseError> {
    let declared = raw.len() as u64;
    let mut longer = raw.to_vec();
    longer.push(0xA5);
    prop_assert!(
        matches!(
            encode_response(msg, &longer),
            Err(MessageError::RawSectionMismatch { raw_len, declared: d, .. })
                if raw_len == longer.len() && d == declared
        ),
        "encoder accepted a raw section one byte too long"
    );
    if let Some((_, shorter)) = raw.split_last() {
        prop_assert!(
            matches!(
                encode_response(msg, shorter),
                Err(MessageError::RawSectionMismatch { .. })
            ),
            "encoder accepted a raw section one byte too short"
        );
    }
    let mut body = encode_response_archive(msg, raw.len()).map_err(fail)?;
    body[8..12].copy_from_slice(&(longer.len() as u32).to_be_bytes());
    body.extend_from_slice(&longer);
    let decoded = decode_response::<T>(&copy_aligned(&body)).map(|_| ());
    prop_assert_eq!(
        decoded,
        Err(MessageError::RawSectionMismatch {
            api_key: T::API_KEY,
            raw_len: longer.len(),
            declared,
        })
    );
    Ok(())
}

fn fail(error: MessageError) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}
