//! Frame decoders: arbitrary bytes as a stream of request or response
//! frames, under a limit taken from the input.
//!
//! Input: `max_frame_bytes: u16 BE` then the stream. Invariants: no panic;
//! an accepted frame lies inside the buffer and within the limit; decoding a
//! stream frame by frame always advances.

#![no_main]

use corelog_wire::frame::{
    FrameLimits, LENGTH_FIELD_BYTES, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES, bytes_needed,
    decode_complete_request_frame, decode_complete_response_frame, decode_request_frame,
    decode_request_header, decode_response_frame, decode_response_header, encode_request_frame,
    encode_response_frame,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((limit, stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let limits = FrameLimits {
        max_frame_bytes: u32::from(u16::from_be_bytes(*limit)),
    };

    // Header decoders on the first bytes.
    if let Some(header) = stream.first_chunk::<REQUEST_HEADER_BYTES>()
        && let Ok(head) = decode_request_header(header, &limits)
    {
        assert!(
            head.body_len + REQUEST_HEADER_BYTES - LENGTH_FIELD_BYTES
                <= limits.max_frame_bytes as usize
        );
    }
    if let Some(header) = stream.first_chunk::<RESPONSE_HEADER_BYTES>()
        && let Ok(head) = decode_response_header(header, &limits)
    {
        assert!(
            head.body_len + RESPONSE_HEADER_BYTES - LENGTH_FIELD_BYTES
                <= limits.max_frame_bytes as usize
        );
    }
    let _ = decode_complete_request_frame(stream, &limits);
    let _ = decode_complete_response_frame(stream, &limits);
    let _ = bytes_needed(stream, REQUEST_HEADER_BYTES);
    let _ = bytes_needed(stream, RESPONSE_HEADER_BYTES);

    // The stream as consecutive request frames; each accepted frame must
    // re-encode to the same bytes.
    let mut rest = stream;
    while let Ok(Some(frame)) = decode_request_frame(rest, &limits) {
        assert!(frame.body.end <= rest.len() && frame.body.end >= REQUEST_HEADER_BYTES);
        assert!(frame.body.end - LENGTH_FIELD_BYTES <= limits.max_frame_bytes as usize);
        let mut again = Vec::new();
        encode_request_frame(&frame.header, &rest[frame.body.clone()], &mut again).expect("fits");
        assert_eq!(again, &rest[..frame.body.end]);
        rest = &rest[frame.body.end..];
    }
    let mut rest = stream;
    while let Ok(Some(frame)) = decode_response_frame(rest, &limits) {
        assert!(frame.body.end <= rest.len() && frame.body.end >= RESPONSE_HEADER_BYTES);
        assert!(frame.body.end - LENGTH_FIELD_BYTES <= limits.max_frame_bytes as usize);
        let mut again = Vec::new();
        encode_response_frame(&frame.header, &rest[frame.body.clone()], &mut again).expect("fits");
        assert_eq!(again, &rest[..frame.body.end]);
        rest = &rest[frame.body.end..];
    }
});
