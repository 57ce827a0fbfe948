//! Shared driver for the per-API message targets.
//!
//! The first input byte is a control byte:
//! - bit 0: 0 decodes a request body, 1 a response body;
//! - bit 1: 0 uses the rest of the input as the whole body; 1 puts it behind
//!   a valid prefix as the archive, so that the fuzzer spends its time in
//!   rkyv's validation instead of on the prefix checks.
//!
//! The body is always copied to a 16-aligned buffer (the misaligned path is a
//! one-line check, covered by the unit tests). Whatever decodes must survive
//! a full walk: deserialize, re-encode, decode again and compare.

#![allow(dead_code)]

use std::fmt::Debug;

use corelog_wire::message::{
    BODY_PREFIX_BYTES, Request, Response, copy_aligned, decode_request, decode_response,
    encode_request, encode_response,
};
use rkyv::api::high::HighDeserializer;
use rkyv::rancor;
use rkyv::util::AlignedVec;

/// A fuzz input cut into its side and an aligned body.
pub struct Input {
    /// Decode as a response (else as a request).
    pub response: bool,
    /// The body to decode, 16-aligned.
    pub body: AlignedVec<16>,
}

impl Input {
    /// Interprets raw fuzzer bytes; `None` for an empty input.
    pub fn new(data: &[u8]) -> Option<Input> {
        let (&control, rest) = data.split_first()?;
        let response = control & 1 == 1;
        let body = if control & 2 == 0 {
            copy_aligned(rest)
        } else {
            let mut prefix = [0_u8; BODY_PREFIX_BYTES];
            let archive_len = (rest.len() as u32).to_be_bytes();
            if response {
                prefix[4..8].copy_from_slice(&archive_len);
            } else {
                prefix[0..4].copy_from_slice(&archive_len);
            }
            let mut body = copy_aligned(&prefix);
            body.extend_from_slice(rest);
            body
        };
        Some(Input { response, body })
    }
}

/// Decodes `input` as `Q` or `S` and walks whatever was accepted; `walk_*`
/// get the archived message and its raw section.
pub fn run<Q, S>(
    data: &[u8],
    walk_request: impl Fn(&Q::Archived, &[u8]),
    walk_response: impl Fn(&S::Archived, &[u8]),
) where
    Q: Request + Debug + PartialEq,
    S: Response + Debug + PartialEq,
    Q::Archived: Debug + rkyv::Deserialize<Q, HighDeserializer<rancor::Error>>,
    S::Archived: Debug + rkyv::Deserialize<S, HighDeserializer<rancor::Error>>,
{
    let Some(input) = Input::new(data) else {
        return;
    };
    if input.response {
        if let Ok((message, raw)) = decode_response::<S>(&input.body) {
            let _ = format!("{message:?}");
            walk_response(message, raw);
            let native = rkyv::deserialize::<S, rancor::Error>(message)
                .expect("accepted archive deserializes");
            let again =
                copy_aligned(&encode_response(&native, raw).expect("accepted message re-encodes"));
            let (message, raw_again) =
                decode_response::<S>(&again).expect("re-encoded message decodes");
            let native_again = rkyv::deserialize::<S, rancor::Error>(message)
                .expect("re-encoded archive deserializes");
            assert_eq!(native, native_again);
            assert_eq!(raw, raw_again);
        }
    } else if let Ok((message, raw)) = decode_request::<Q>(&input.body) {
        let _ = format!("{message:?}");
        walk_request(message, raw);
        let native =
            rkyv::deserialize::<Q, rancor::Error>(message).expect("accepted archive deserializes");
        let again =
            copy_aligned(&encode_request(&native, raw).expect("accepted message re-encodes"));
        let (message, raw_again) = decode_request::<Q>(&again).expect("re-encoded message decodes");
        let native_again = rkyv::deserialize::<Q, rancor::Error>(message)
            .expect("re-encoded archive deserializes");
        assert_eq!(native, native_again);
        assert_eq!(raw, raw_again);
    }
}
