//! Body framing: the 16-byte prefix, the rkyv archive and the raw section.
//!
//! See the [module docs](crate::message) for the layout. Everything here is
//! generic over the message type; the per-API files only declare types.

use rkyv::rancor;
use rkyv::util::AlignedVec;

use super::{Message, RawSectionLen, Request, Response};
use crate::error::ErrorCode;
use crate::frame::ApiKey;

/// Bytes of the prefix before the archive, in request and response bodies.
/// Sixteen so that the archive starts 16-aligned whenever the body does.
pub const BODY_PREFIX_BYTES: usize = 16;

/// Alignment the body must have in memory for [`decode_request`] and
/// [`decode_response`]: rkyv validation refuses misaligned archives.
pub const BODY_ALIGNMENT: usize = 16;

const _: () = assert!(BODY_PREFIX_BYTES.is_multiple_of(BODY_ALIGNMENT));

/// Why a message body could not be encoded or decoded. Every variant names
/// the API and the body length, because the underlying rkyv error carries no
/// detail in release builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The body cannot hold its 16-byte prefix.
    #[error(
        "{api_key} body of {body_len} bytes is shorter than its {BODY_PREFIX_BYTES}-byte prefix"
    )]
    BodyTooShort {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
    },
    /// The prefix's archive and raw lengths do not add up to the body length.
    #[error(
        "{api_key} body of {body_len} bytes declares a {archive_len}-byte archive and {raw_len} raw bytes"
    )]
    LengthMismatch {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
        /// Archive length from the prefix.
        archive_len: u32,
        /// Raw section length from the prefix.
        raw_len: u32,
    },
    /// A reserved prefix field is not zero: a newer sender, or garbage.
    #[error("{api_key} body of {body_len} bytes has non-zero reserved prefix bytes")]
    ReservedNotZero {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
    },
    /// The body does not start at a 16-aligned address. A reader bug, not a
    /// peer's: read bodies into an aligned buffer, or [`copy_aligned`].
    #[error(
        "{api_key} body of {body_len} bytes is at an address {misalignment} bytes past 16-alignment"
    )]
    Misaligned {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
        /// The body's address modulo [`BODY_ALIGNMENT`].
        misalignment: usize,
    },
    /// A request, or a response without a top-level error, has no archive.
    #[error("{api_key} body of {body_len} bytes has no archive")]
    EmptyArchive {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
    },
    /// The archive failed rkyv validation (bytecheck): out-of-bounds
    /// pointers, invalid UTF-8, an unknown enum tag, a wrong root size, …
    #[error("{api_key} body of {body_len} bytes has an invalid {archive_len}-byte archive")]
    InvalidArchive {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
        /// Archive length from the prefix.
        archive_len: u32,
    },
    /// The raw section's length differs from what the message declares (the
    /// sum of its `records_len` fields; zero for messages without records).
    #[error(
        "{api_key} raw section of {raw_len} bytes does not match the {declared} bytes the message declares"
    )]
    RawSectionMismatch {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the raw section given.
        raw_len: usize,
        /// Bytes the message's length fields add up to.
        declared: u64,
    },
    /// The response carries a top-level error code: the broker refused the
    /// whole request. Not a decoding failure; `error_code` says what to do
    /// (see [`ErrorCode::from_code`]; an unknown number comes from a newer
    /// broker).
    #[error("{api_key} request refused with error code {error_code}")]
    TopLevelError {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
        /// The wire error number.
        error_code: u16,
    },
    /// A response has both a top-level error code and a message, which the
    /// layout forbids.
    #[error("{api_key} response of {body_len} bytes has error code {error_code} and a message")]
    ErrorWithMessage {
        /// API of the message.
        api_key: ApiKey,
        /// Length of the body given.
        body_len: usize,
        /// The wire error number.
        error_code: u16,
    },
    /// The archive or raw section is too large for a `u32` length field.
    #[error("{api_key} message of {bytes} bytes is too large to encode")]
    TooLarge {
        /// API of the message.
        api_key: ApiKey,
        /// The size that did not fit.
        bytes: u64,
    },
    /// rkyv refused to serialize the message.
    #[error("{api_key} message could not be archived")]
    Encode {
        /// API of the message.
        api_key: ApiKey,
    },
}

impl MessageError {
    /// The API of the message that failed.
    #[must_use]
    pub fn api_key(&self) -> ApiKey {
        match *self {
            MessageError::BodyTooShort { api_key, .. }
            | MessageError::LengthMismatch { api_key, .. }
            | MessageError::ReservedNotZero { api_key, .. }
            | MessageError::Misaligned { api_key, .. }
            | MessageError::EmptyArchive { api_key, .. }
            | MessageError::InvalidArchive { api_key, .. }
            | MessageError::RawSectionMismatch { api_key, .. }
            | MessageError::TopLevelError { api_key, .. }
            | MessageError::ErrorWithMessage { api_key, .. }
            | MessageError::TooLarge { api_key, .. }
            | MessageError::Encode { api_key } => api_key,
        }
    }

    /// The code a broker answers with when a request body fails to decode:
    /// the peer's fault is `INVALID_REQUEST`; a misaligned buffer or a failed
    /// encode is the broker's own bug.
    #[must_use]
    pub fn error_code(&self) -> ErrorCode {
        match *self {
            MessageError::BodyTooShort { .. }
            | MessageError::LengthMismatch { .. }
            | MessageError::ReservedNotZero { .. }
            | MessageError::EmptyArchive { .. }
            | MessageError::InvalidArchive { .. }
            | MessageError::RawSectionMismatch { .. }
            | MessageError::ErrorWithMessage { .. } => ErrorCode::InvalidRequest,
            MessageError::TooLarge { .. } => ErrorCode::MessageTooLarge,
            MessageError::TopLevelError { error_code, .. } => {
                ErrorCode::from_code(error_code).unwrap_or(ErrorCode::UnknownServerError)
            }
            MessageError::Misaligned { .. } | MessageError::Encode { .. } => {
                ErrorCode::UnknownServerError
            }
        }
    }
}

/// Copies a body into a fresh 16-aligned buffer, for readers that could not
/// place it aligned (for example a body cut out of a stream buffer by
/// [`decode_request_frame`](crate::frame::decode_request_frame)). The copy is
/// as large as the body, which the frame limit already bounded.
#[must_use]
pub fn copy_aligned(body: &[u8]) -> AlignedVec<BODY_ALIGNMENT> {
    let mut aligned = AlignedVec::<BODY_ALIGNMENT>::with_capacity(body.len());
    aligned.extend_from_slice(body);
    aligned
}

fn be_u16(bytes: &[u8; BODY_PREFIX_BYTES], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn be_u32(bytes: &[u8; BODY_PREFIX_BYTES], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Serializes `msg` into a new body buffer after a zeroed prefix, and returns
/// the buffer and the archive length. The prefix is filled in by the caller.
fn archive_after_prefix<T: Message>(msg: &T) -> Result<(Vec<u8>, u32), MessageError> {
    let api_key = T::API_KEY;
    // rkyv pads by writer position; since the prefix is a multiple of 16
    // bytes, positions inside the archive keep their alignment when the
    // archive is later read from `body[16..]` of an aligned body.
    let buffer = vec![0_u8; BODY_PREFIX_BYTES];
    let buffer = rkyv::api::high::to_bytes_in::<_, rancor::Error>(msg, buffer)
        .map_err(|_| MessageError::Encode { api_key })?;
    let archive_len = buffer.len() - BODY_PREFIX_BYTES;
    let archive_len = u32::try_from(archive_len).map_err(|_| MessageError::TooLarge {
        api_key,
        bytes: archive_len as u64,
    })?;
    Ok((buffer, archive_len))
}

fn check_raw_len<T: Message>(msg: &T, raw_len: usize) -> Result<u32, MessageError> {
    let declared = msg.raw_section_len();
    if raw_len as u64 != declared {
        return Err(MessageError::RawSectionMismatch {
            api_key: T::API_KEY,
            raw_len,
            declared,
        });
    }
    u32::try_from(raw_len).map_err(|_| MessageError::TooLarge {
        api_key: T::API_KEY,
        bytes: raw_len as u64,
    })
}

/// Encodes a request body whose raw section, `raw_len` bytes, the caller
/// sends right after the returned bytes (so record batches are never copied
/// into the body). The returned bytes are the prefix and the archive.
///
/// # Errors
/// [`MessageError::RawSectionMismatch`] if `raw_len` differs from what the
/// message declares, [`MessageError::TooLarge`] if a length does not fit a
/// `u32`, [`MessageError::Encode`] if rkyv fails.
pub fn encode_request_archive<T: Request>(
    msg: &T,
    raw_len: usize,
) -> Result<Vec<u8>, MessageError> {
    let raw_len = check_raw_len(msg, raw_len)?;
    let (mut body, archive_len) = archive_after_prefix(msg)?;
    body[0..4].copy_from_slice(&archive_len.to_be_bytes());
    body[4..8].copy_from_slice(&raw_len.to_be_bytes());
    Ok(body)
}

/// Encodes a whole request body: prefix, archive, then `raw`.
///
/// # Errors
/// As [`encode_request_archive`].
pub fn encode_request<T: Request>(msg: &T, raw: &[u8]) -> Result<Vec<u8>, MessageError> {
    let mut body = encode_request_archive(msg, raw.len())?;
    body.extend_from_slice(raw);
    Ok(body)
}

/// Encodes a response body without its raw section; see
/// [`encode_request_archive`].
///
/// # Errors
/// As [`encode_request_archive`].
pub fn encode_response_archive<T: Response>(
    msg: &T,
    raw_len: usize,
) -> Result<Vec<u8>, MessageError> {
    let raw_len = check_raw_len(msg, raw_len)?;
    let (mut body, archive_len) = archive_after_prefix(msg)?;
    // Bytes 0..4 (error code NONE and reserved) stay zero.
    body[4..8].copy_from_slice(&archive_len.to_be_bytes());
    body[8..12].copy_from_slice(&raw_len.to_be_bytes());
    Ok(body)
}

/// Encodes a whole response body: prefix, archive, then `raw`.
///
/// # Errors
/// As [`encode_request_archive`].
pub fn encode_response<T: Response>(msg: &T, raw: &[u8]) -> Result<Vec<u8>, MessageError> {
    let mut body = encode_response_archive(msg, raw.len())?;
    body.extend_from_slice(raw);
    Ok(body)
}

/// The body of a response that refuses the whole request (unsupported
/// version, invalid request, …): the prefix alone, with no archive.
///
/// # Panics
/// If `error` is [`ErrorCode::None`]: a refusal needs a reason.
#[must_use]
pub fn encode_error_response(error: ErrorCode) -> [u8; BODY_PREFIX_BYTES] {
    assert!(
        !error.is_none(),
        "a top-level error response needs an error code"
    );
    let mut body = [0_u8; BODY_PREFIX_BYTES];
    body[0..2].copy_from_slice(&error.code().to_be_bytes());
    body
}

/// Splits a body into its prefix and the rest, checking the body is long
/// enough.
fn split_prefix(
    api_key: ApiKey,
    body: &[u8],
) -> Result<(&[u8; BODY_PREFIX_BYTES], &[u8]), MessageError> {
    body.split_first_chunk::<BODY_PREFIX_BYTES>()
        .ok_or(MessageError::BodyTooShort {
            api_key,
            body_len: body.len(),
        })
}

/// Checks the lengths, the alignment and the archive of a body whose prefix
/// was already parsed, and returns the validated archive and the raw section.
fn access_checked<'a, T: Message>(
    body: &'a [u8],
    rest: &'a [u8],
    archive_len: u32,
    raw_len: u32,
) -> Result<(&'a T::Archived, &'a [u8]), MessageError> {
    let api_key = T::API_KEY;
    let body_len = body.len();
    // Added as u64 so that hostile lengths cannot overflow.
    if u64::from(archive_len) + u64::from(raw_len) != rest.len() as u64 {
        return Err(MessageError::LengthMismatch {
            api_key,
            body_len,
            archive_len,
            raw_len,
        });
    }
    let (archive, raw) = rest.split_at(archive_len as usize);
    if archive.is_empty() {
        return Err(MessageError::EmptyArchive { api_key, body_len });
    }
    let misalignment = body.as_ptr().addr() % BODY_ALIGNMENT;
    if misalignment != 0 {
        return Err(MessageError::Misaligned {
            api_key,
            body_len,
            misalignment,
        });
    }
    let message = rkyv::access::<T::Archived, rancor::Error>(archive).map_err(|_| {
        MessageError::InvalidArchive {
            api_key,
            body_len,
            archive_len,
        }
    })?;
    let declared = message.raw_section_len();
    if declared != raw.len() as u64 {
        return Err(MessageError::RawSectionMismatch {
            api_key,
            raw_len: raw.len(),
            declared,
        });
    }
    Ok((message, raw))
}

/// Decodes a request body: checks the prefix, validates the archive with
/// bytecheck and checks the raw section against the message's declared
/// lengths. Allocates nothing.
///
/// `body` must start at a 16-aligned address ([`BODY_ALIGNMENT`]); this
/// function refuses rather than copies, so that the returned references can
/// borrow from `body`. Use [`copy_aligned`] if the body is not aligned.
///
/// # Errors
/// [`MessageError::BodyTooShort`], [`MessageError::LengthMismatch`],
/// [`MessageError::ReservedNotZero`], [`MessageError::EmptyArchive`],
/// [`MessageError::Misaligned`], [`MessageError::InvalidArchive`] or
/// [`MessageError::RawSectionMismatch`].
pub fn decode_request<T: Request>(body: &[u8]) -> Result<(&T::Archived, &[u8]), MessageError> {
    let api_key = T::API_KEY;
    let (prefix, rest) = split_prefix(api_key, body)?;
    let archive_len = be_u32(prefix, 0);
    let raw_len = be_u32(prefix, 4);
    if prefix[8..16] != [0; 8] {
        return Err(MessageError::ReservedNotZero {
            api_key,
            body_len: body.len(),
        });
    }
    access_checked::<T>(body, rest, archive_len, raw_len)
}

/// Decodes a response body; see [`decode_request`].
///
/// A response whose top-level error code is not `NONE` comes back as
/// [`MessageError::TopLevelError`], so that `?` propagates a refusal like any
/// other failure.
///
/// # Errors
/// [`MessageError::TopLevelError`] for a refusal,
/// [`MessageError::ErrorWithMessage`] if a refusal also carries an archive or
/// raw bytes, otherwise as [`decode_request`].
pub fn decode_response<T: Response>(body: &[u8]) -> Result<(&T::Archived, &[u8]), MessageError> {
    let api_key = T::API_KEY;
    let body_len = body.len();
    let (prefix, rest) = split_prefix(api_key, body)?;
    let error_code = be_u16(prefix, 0);
    let archive_len = be_u32(prefix, 4);
    let raw_len = be_u32(prefix, 8);
    if prefix[2..4] != [0; 2] || prefix[12..16] != [0; 4] {
        return Err(MessageError::ReservedNotZero { api_key, body_len });
    }
    if error_code != ErrorCode::None.code() {
        if archive_len != 0 || raw_len != 0 || !rest.is_empty() {
            return Err(MessageError::ErrorWithMessage {
                api_key,
                body_len,
                error_code,
            });
        }
        return Err(MessageError::TopLevelError {
            api_key,
            body_len,
            error_code,
        });
    }
    access_checked::<T>(body, rest, archive_len, raw_len)
}

/// One partition's record bytes from a raw section, with the archived
/// partition entry that declared them.
#[derive(Debug)]
pub struct PartitionRecords<'a, P> {
    /// Topic name.
    pub topic: &'a str,
    /// The archived partition entry (request or response).
    pub partition: &'a P,
    /// The partition's record batches, as sent.
    pub records: &'a [u8],
}

/// Cuts a raw section into consecutive slices of the given lengths, after
/// checking that the lengths add up to exactly the section's length. The
/// result has one slice per length; its size is bounded by the validated
/// archive the lengths come from, never by a length's value.
///
/// # Errors
/// [`MessageError::RawSectionMismatch`] if the lengths do not add up.
pub fn split_raw_section<I>(
    api_key: ApiKey,
    raw: &[u8],
    lengths: I,
) -> Result<Vec<&[u8]>, MessageError>
where
    I: IntoIterator<Item = u32>,
    I::IntoIter: Clone,
{
    let lengths = lengths.into_iter();
    let (declared, count) = lengths.clone().fold((0_u64, 0_usize), |(sum, count), len| {
        (sum.saturating_add(u64::from(len)), count + 1)
    });
    if declared != raw.len() as u64 {
        return Err(MessageError::RawSectionMismatch {
            api_key,
            raw_len: raw.len(),
            declared,
        });
    }
    let mismatch = MessageError::RawSectionMismatch {
        api_key,
        raw_len: raw.len(),
        declared,
    };
    let mut slices = Vec::with_capacity(count);
    let mut rest = raw;
    for len in lengths {
        // The sum check above keeps every split in bounds, unless the
        // iterator yields different lengths the second time.
        let (slice, tail) = rest.split_at_checked(len as usize).ok_or(mismatch)?;
        slices.push(slice);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(mismatch);
    }
    Ok(slices)
}
