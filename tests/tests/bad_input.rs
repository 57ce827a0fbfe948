//! The bad-input catalogue: one test per kind of hostile or broken input,
//! each sent over a real connection to a real `corelogd`. Every test checks
//! the typed answer (or the closed connection) the input gets, that nothing
//! it carried was stored, and that the broker keeps serving a healthy client
//! that produced records before the bad input: all of them are still there
//! and new ones are still accepted ([`assert_healthy`]).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::wire_client::{self as support, Body};

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_tests::{Broker, Client, batch, values};
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord, ProducerIdentity, compute_crc};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{
    ApiKey, FrameLimits, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES, decode_response_header,
};
use corelog_wire::message::{self, MessageError};

/// The topic the healthy client writes before the bad input and reads after.
const HEALTHY_TOPIC: &str = "healthy";

/// Byte positions in a RecordBatch v2 header (`wire/src/batch/header.rs`).
const CRC_AT: usize = 17;
const LAST_OFFSET_DELTA_AT: usize = 23;
const RECORD_COUNT_AT: usize = 57;

// ---------------------------------------------------------------------------
// The healthy client
// ---------------------------------------------------------------------------

/// A well-behaved client and every value it has produced, in offset order.
struct Healthy {
    client: Client,
    expected: Vec<String>,
}

/// Creates [`HEALTHY_TOPIC`] and produces three batches of three records on
/// a connection of its own, before any bad input is sent.
fn seed(broker: &Broker) -> Healthy {
    let mut client = broker.client();
    assert_eq!(client.create_topic(HEALTHY_TOPIC, 1, &[]), ErrorCode::None);
    let mut expected = Vec::new();
    for round in 0..3 {
        let prefix = format!("before{round}");
        let (code, offset) = client.produce(
            HEALTHY_TOPIC,
            0,
            &batch(&prefix, "k", 3, ProducerIdentity::NONE),
        );
        assert_eq!((code, offset), (ErrorCode::None, expected.len() as i64));
        expected.extend((0..3).map(|index| format!("{prefix}-{index}")));
    }
    Healthy { client, expected }
}

/// [`check_healthy_client`], and a brand-new connection can produce and
/// sees the whole log.
fn assert_healthy(broker: &mut Broker, healthy: &mut Healthy) {
    check_healthy_client(broker, healthy);
    let mut fresh = broker.client();
    let (code, offset) = fresh.produce(
        HEALTHY_TOPIC,
        0,
        &batch("new-connection", "k", 1, ProducerIdentity::NONE),
    );
    assert_eq!(
        (code, offset),
        (ErrorCode::None, healthy.expected.len() as i64),
        "a new connection can produce"
    );
    healthy.expected.push("new-connection-0".to_owned());
    let fetched = fresh.fetch(HEALTHY_TOPIC, 0, 0, 0);
    assert_eq!(fetched.code, ErrorCode::None);
    assert_eq!(values(&fetched.records), healthy.expected);
}

/// The broker process is alive; the healthy client's connection still
/// works; every record it produced before is fetched back, in order; and a
/// new record is appended right after them.
fn check_healthy_client(broker: &mut Broker, healthy: &mut Healthy) {
    let child = broker.child.as_mut().expect("the broker was not stopped");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the broker process exited: {:?}",
        child.try_wait()
    );
    let fetched = healthy.client.fetch(HEALTHY_TOPIC, 0, 0, 0);
    assert_eq!(fetched.code, ErrorCode::None);
    assert_eq!(
        values(&fetched.records),
        healthy.expected,
        "the healthy client's records are all there, in order"
    );
    assert_eq!(fetched.high_watermark, healthy.expected.len() as u64);

    let prefix = format!("after{}", healthy.expected.len());
    let (code, offset) = healthy.client.produce(
        HEALTHY_TOPIC,
        0,
        &batch(&prefix, "k", 2, ProducerIdentity::NONE),
    );
    assert_eq!(
        (code, offset),
        (ErrorCode::None, healthy.expected.len() as i64),
        "the healthy client can still produce, right after its earlier records"
    );
    healthy
        .expected
        .extend((0..2).map(|index| format!("{prefix}-{index}")));
}

// ---------------------------------------------------------------------------
// Raw frames and responses
// ---------------------------------------------------------------------------

/// A request header with any field values, including illegal ones.
fn raw_header(length: u32, api_key: u16, api_version: u16, correlation_id: u32) -> Vec<u8> {
    let mut header = Vec::with_capacity(REQUEST_HEADER_BYTES);
    header.extend_from_slice(&length.to_be_bytes());
    header.extend_from_slice(&api_key.to_be_bytes());
    header.extend_from_slice(&api_version.to_be_bytes());
    header.extend_from_slice(&correlation_id.to_be_bytes());
    header.extend_from_slice(&0u16.to_be_bytes());
    header
}

/// A whole request frame with a well-formed length field.
fn raw_frame(api_key: u16, api_version: u16, correlation_id: u32, body: &[u8]) -> Vec<u8> {
    let length = u32::try_from(REQUEST_HEADER_BYTES - 4 + body.len()).unwrap();
    let mut frame = raw_header(length, api_key, api_version, correlation_id);
    frame.extend_from_slice(body);
    frame
}

/// Sends `frame` and returns the code of the top-level refusal that answers
/// it, checking it answers `correlation_id`.
fn refusal_of(client: &mut Client, frame: &[u8], correlation_id: u32) -> ErrorCode {
    client.stream.write_all(frame).unwrap();
    let (correlation, body) = client.read_response().expect("a response");
    assert_eq!(
        correlation, correlation_id,
        "the refusal answers the request"
    );
    refusal(&body)
}

/// Reads one response frame from a connection without a [`Client`].
fn read_raw_response(stream: &mut TcpStream) -> std::io::Result<(u32, Body)> {
    let mut header = [0u8; RESPONSE_HEADER_BYTES];
    stream.read_exact(&mut header)?;
    let head = decode_response_header(&header, &FrameLimits::default())
        .map_err(|error| std::io::Error::other(error.to_string()))?;
    let mut bytes = rkyv::util::AlignedVec::<16>::with_capacity(head.body_len);
    bytes.resize(head.body_len, 0);
    stream.read_exact(&mut bytes)?;
    Ok((head.header.correlation_id, Body { bytes }))
}

/// The code of a top-level refusal (a body that is the prefix alone).
fn refusal(body: &Body) -> ErrorCode {
    // The prefix layout is the same for every API; which one is named here
    // only matters for error messages.
    match message::decode_response::<message::api_versions::ApiVersionsResponse>(&body.bytes) {
        Err(MessageError::TopLevelError { error_code, .. }) => ErrorCode::from_code(error_code)
            .unwrap_or_else(|| panic!("unknown error code {error_code}")),
        other => panic!("expected a top-level refusal, got {other:?}"),
    }
}

/// The broker closes the connection (EOF or reset) within 20 s, without
/// sending anything more.
fn assert_closed(stream: &mut TcpStream, what: &str) {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => {}
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ) => {}
        Ok(_) => panic!("{what}: the broker sent more bytes instead of closing"),
        Err(error) => panic!("{what}: the connection was not closed within 20 s: {error}"),
    }
}

/// The connection still serves requests: an ApiVersions round trip works.
fn assert_usable(client: &mut Client, what: &str) {
    client
        .handshake()
        .unwrap_or_else(|error| panic!("{what}: the connection is no longer usable: {error}"));
}

/// High watermark and values of a partition.
fn partition_state(client: &mut Client, topic: &str, partition: u32) -> (u64, Vec<String>) {
    let fetched = client.fetch(topic, partition, 0, 0);
    assert_eq!(fetched.code, ErrorCode::None);
    (fetched.high_watermark, values(&fetched.records))
}

/// A topic with one partition holding `count` records `"{topic}-{i}"`.
fn topic_with_records(client: &mut Client, topic: &str, count: usize) -> (u64, Vec<String>) {
    assert_eq!(client.create_topic(topic, 1, &[]), ErrorCode::None);
    let (code, _) = client.produce(topic, 0, &batch(topic, "k", count, ProducerIdentity::NONE));
    assert_eq!(code, ErrorCode::None);
    let state = partition_state(client, topic, 0);
    assert_eq!(state.0, count as u64);
    state
}

/// The partition is exactly as before, and the next good batch lands right
/// after the old records: the refused batches took no offsets either.
fn assert_unchanged(client: &mut Client, topic: &str, before: &(u64, Vec<String>)) {
    assert_eq!(
        &partition_state(client, topic, 0),
        before,
        "nothing of the refused batches was stored"
    );
    let (code, offset) = client.produce(topic, 0, &batch("good", "k", 1, ProducerIdentity::NONE));
    assert_eq!(
        (code, offset),
        (ErrorCode::None, before.0 as i64),
        "the refused batches consumed no offsets"
    );
}

/// Sets the record count of a batch and recomputes its CRC, so that the
/// count is the only thing wrong with it.
fn with_record_count(batch: &[u8], count: i32, last_offset_delta: Option<i32>) -> Vec<u8> {
    let mut lie = batch.to_vec();
    lie[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&count.to_be_bytes());
    if let Some(delta) = last_offset_delta {
        lie[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4].copy_from_slice(&delta.to_be_bytes());
    }
    let crc = compute_crc(&lie);
    lie[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    lie
}

/// Sum of a metric's samples whose line starts with `prefix` (name and
/// opening brace) and contains `label`.
fn metric(broker: &Broker, prefix: &str, label: &str) -> Option<u64> {
    let text = broker.metrics();
    let samples: Vec<u64> = text
        .lines()
        .filter(|line| line.starts_with(prefix) && line.contains(label))
        .filter_map(|line| line.rsplit_once(' '))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .collect();
    (!samples.is_empty()).then(|| samples.iter().sum())
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The broker's resident set size in bytes.
fn rss_bytes(broker: &Broker) -> u64 {
    let pid = broker.pid().expect("the broker runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/<pid>/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|value| value.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

// ---------------------------------------------------------------------------
// 1. Oversized frames
// ---------------------------------------------------------------------------

#[test]
fn a_frame_longer_than_max_frame_bytes_is_refused_and_the_connection_closed() {
    let mut broker = Broker::start(&["--max-frame-bytes", "65536", "--max-message-bytes", "60000"]);
    let mut healthy = seed(&broker);

    // One byte over the limit, and the largest length there is: refused
    // from the header alone (no body is ever sent), answered to the
    // request's correlation id, then the connection is closed.
    for (length, correlation_id) in [(65_537u32, 77u32), (u32::MAX, 78)] {
        let mut client = broker.client();
        let header = raw_header(length, ApiKey::Produce.code(), 0, correlation_id);
        assert_eq!(
            refusal_of(&mut client, &header, correlation_id),
            ErrorCode::FrameTooLarge,
            "length {length}"
        );
        assert_closed(&mut client.stream, &format!("frame length {length}"));
    }

    // Exactly at the limit is not too large: the frame is read whole and
    // its (garbage) body refused on its own merits; the connection stays.
    let mut client = broker.client();
    let body = vec![0xAB; 65_536 - (REQUEST_HEADER_BYTES - 4)];
    let frame = raw_frame(ApiKey::Produce.code(), 0, 79, &body);
    assert_eq!(
        refusal_of(&mut client, &frame, 79),
        ErrorCode::InvalidRequest
    );
    assert_usable(&mut client, "after a frame at the limit");

    assert!(
        broker.metrics().contains("code=\"FRAME_TOO_LARGE\""),
        "the refusals are counted"
    );
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 2. Frames shorter than their header
// ---------------------------------------------------------------------------

#[test]
fn a_frame_shorter_than_its_header_is_refused_and_the_connection_closed() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);

    // The length field counts the bytes after itself, so a request needs at
    // least 10 (api key, version, correlation id, flags). Anything smaller
    // cannot be a frame: the stream cannot be trusted any more.
    for (length, correlation_id) in [(0u32, 11u32), (1, 12), (6, 13), (9, 14)] {
        let mut client = broker.client();
        let header = raw_header(length, ApiKey::ApiVersions.code(), 0, correlation_id);
        assert_eq!(
            refusal_of(&mut client, &header, correlation_id),
            ErrorCode::InvalidRequest,
            "length {length}"
        );
        assert_closed(&mut client.stream, &format!("frame length {length}"));
    }

    // A short frame followed by a valid one: the broker does not try to
    // resynchronise on the valid one, it refuses and closes.
    let mut client = broker.client();
    let mut bytes = raw_header(2, ApiKey::ApiVersions.code(), 0, 15);
    let request = message::encode_request(
        &message::api_versions::ApiVersionsRequest {
            client_name: "after-a-short-frame".to_owned(),
            client_version: "0".to_owned(),
        },
        &[],
    )
    .unwrap();
    bytes.extend_from_slice(&raw_frame(ApiKey::ApiVersions.code(), 0, 16, &request));
    assert_eq!(
        refusal_of(&mut client, &bytes, 15),
        ErrorCode::InvalidRequest
    );
    assert_closed(&mut client.stream, "a short frame before a valid one");

    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 3. Unknown API keys and unsupported versions
// ---------------------------------------------------------------------------

#[test]
fn an_unknown_api_key_or_version_is_refused_and_the_connection_kept() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);
    let mut client = broker.client();
    let fetch = message::encode_request(&support::fetch_request(HEALTHY_TOPIC, 0, 0, 0), &[])
        .expect("a fetch body");

    // Numbers that name no API (a gap in the table, past the end, the
    // maximum), with and without a body: INVALID_REQUEST, body skipped,
    // connection kept.
    for (api_key, body, correlation_id) in [
        (19u16, &fetch[..], 101u32),
        (32, &[][..], 102),
        (999, &[1, 2, 3, 4][..], 103),
        (u16::MAX, &[0u8; 5000][..], 104),
    ] {
        assert!(ApiKey::from_code(api_key).is_none());
        let frame = raw_frame(api_key, 0, correlation_id, body);
        assert_eq!(
            refusal_of(&mut client, &frame, correlation_id),
            ErrorCode::InvalidRequest,
            "api key {api_key}"
        );
        assert_usable(&mut client, &format!("after api key {api_key}"));
    }

    // Known APIs at versions this build does not speak: UNSUPPORTED_VERSION,
    // connection kept. The body is a valid version-0 body, so the version is
    // the only thing wrong.
    for (api_key, version, body, correlation_id) in [
        (ApiKey::Fetch, 1u16, &fetch[..], 201u32),
        (ApiKey::Fetch, u16::MAX, &fetch[..], 202),
        (ApiKey::ApiVersions, 7, &[][..], 203),
    ] {
        assert!(!api_key.supports(version));
        let frame = raw_frame(api_key.code(), version, correlation_id, body);
        assert_eq!(
            refusal_of(&mut client, &frame, correlation_id),
            ErrorCode::UnsupportedVersion,
            "{api_key} v{version}"
        );
        assert_usable(&mut client, &format!("after {api_key} v{version}"));
    }

    // An inter-broker API sent by a client to a standalone broker: only
    // brokers that proved a cluster secret speak those, and a single node
    // has no peers.
    let frame = raw_frame(ApiKey::ReplicaQuery.code(), 0, 301, &[0; 16]);
    assert_eq!(
        refusal_of(&mut client, &frame, 301),
        ErrorCode::ClusterAuthorizationFailed
    );

    // The same connection still does real work.
    let fetched = client.fetch(HEALTHY_TOPIC, 0, 0, 0);
    assert_eq!(values(&fetched.records), healthy.expected);
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 4. Bodies that are not valid messages
// ---------------------------------------------------------------------------

#[test]
fn an_invalid_body_under_a_valid_header_is_an_invalid_request() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);
    let target = topic_with_records(&mut healthy.client, "target", 2);
    let mut client = broker.client();

    let records = batch("x", "k", 1, ProducerIdentity::NONE);
    let produce = message::encode_request(
        &support::produce_request("target", 0, records.len()),
        &records,
    )
    .unwrap();

    // A valid prefix (archive length, no raw section) before an archive of
    // 0xFF bytes: every relative pointer points out of the buffer.
    let mut pointers_out_of_bounds = vec![0u8; 16];
    pointers_out_of_bounds[0..4].copy_from_slice(&64u32.to_be_bytes());
    pointers_out_of_bounds.extend_from_slice(&[0xFF; 64]);

    // A real produce request whose topic name is no longer UTF-8.
    let marker = "zzzzzzzzzzzzzzzzzzzzzzzz";
    let mut bad_utf8 = message::encode_request(
        &support::produce_request(marker, 0, records.len()),
        &records,
    )
    .unwrap();
    let at = bad_utf8
        .windows(marker.len())
        .position(|window| window == marker.as_bytes())
        .expect("the topic name is in the archive");
    bad_utf8[at..at + marker.len()].fill(0xFF);

    // A real produce request with its reserved prefix bytes set.
    let mut reserved = produce.clone();
    reserved[12] = 1;

    // A produce request that declares 100 bytes of records and carries
    // the real batch instead (consistent prefix, inconsistent archive).
    let mut raw_mismatch =
        message::encode_request_archive(&support::produce_request("target", 0, 100), 100).unwrap();
    raw_mismatch[4..8].copy_from_slice(&(records.len() as u32).to_be_bytes());
    raw_mismatch.extend_from_slice(&records);

    // A prefix whose lengths exceed the body.
    let mut lengths_too_long = produce.clone();
    lengths_too_long[0..4].copy_from_slice(&u32::MAX.to_be_bytes());

    let cases: [(&str, ApiKey, Vec<u8>); 8] = [
        ("an empty body", ApiKey::Produce, Vec::new()),
        (
            "a body shorter than its prefix",
            ApiKey::Produce,
            vec![0; 15],
        ),
        ("300 bytes of garbage", ApiKey::Produce, vec![0xAB; 300]),
        ("an archive of 0xFF", ApiKey::Fetch, pointers_out_of_bounds),
        ("a topic name that is not UTF-8", ApiKey::Produce, bad_utf8),
        ("non-zero reserved prefix bytes", ApiKey::Produce, reserved),
        (
            "a raw section of the wrong size",
            ApiKey::Produce,
            raw_mismatch,
        ),
        (
            "prefix lengths past the body",
            ApiKey::Produce,
            lengths_too_long,
        ),
    ];
    for (index, (what, api_key, body)) in cases.into_iter().enumerate() {
        let correlation_id = 400 + index as u32;
        let frame = raw_frame(api_key.code(), 0, correlation_id, &body);
        assert_eq!(
            refusal_of(&mut client, &frame, correlation_id),
            ErrorCode::InvalidRequest,
            "{what}"
        );
        assert_usable(&mut client, what);
    }

    // The well-formed request these were derived from is accepted on the
    // same connection, after everything above stored nothing.
    assert_eq!(partition_state(&mut client, "target", 0), target);
    client
        .stream
        .write_all(&raw_frame(ApiKey::Produce.code(), 0, 499, &produce))
        .unwrap();
    let (correlation, body) = client.read_response().unwrap();
    assert_eq!(correlation, 499);
    assert_eq!(support::decode_produce(&body), (ErrorCode::None, 2));
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 5. Batches that fail their CRC
// ---------------------------------------------------------------------------

#[test]
fn a_batch_with_a_wrong_crc_is_corrupt_and_not_stored() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);
    let before = topic_with_records(&mut healthy.client, "target", 4);
    let mut client = broker.client();

    let good = batch("c", "k", 3, ProducerIdentity::NONE);
    let corruptions: [(&str, usize); 4] = [
        ("the last record byte", good.len() - 1),
        ("a byte in the middle of the records", (61 + good.len()) / 2),
        ("the attributes (first byte under the CRC)", 21),
        ("the CRC field itself", CRC_AT + 2),
    ];
    for (what, at) in corruptions {
        let mut corrupt = good.clone();
        corrupt[at] ^= 0x5A;
        assert_ne!(
            compute_crc(&corrupt),
            u32::from_be_bytes(corrupt[CRC_AT..CRC_AT + 4].try_into().unwrap())
        );
        assert_eq!(
            client.produce("target", 0, &corrupt).0,
            ErrorCode::CorruptMessage,
            "flipped {what}"
        );
    }
    assert_usable(&mut client, "after corrupt batches");
    assert_unchanged(&mut client, "target", &before);
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 6. Batches whose record count lies
// ---------------------------------------------------------------------------

#[test]
fn a_batch_whose_record_count_lies_is_invalid_and_not_stored() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);
    let before = topic_with_records(&mut healthy.client, "target", 4);
    let mut client = broker.client();

    let good = batch("lie", "k", 3, ProducerIdentity::NONE);
    // Recomputing the CRC of an unmodified batch leaves it unchanged: the
    // edits below change the count and nothing else.
    assert_eq!(with_record_count(&good, 3, None), good);

    let lies: [(&str, i32, Option<i32>); 7] = [
        ("one record more than present", 4, None),
        ("one record less than present", 2, None),
        ("no records", 0, None),
        ("a negative count", -1, None),
        ("one more, offset delta to match", 4, Some(3)),
        (
            "a billion, offset delta to match",
            1_000_000_000,
            Some(999_999_999),
        ),
        (
            "i32::MAX, offset delta to match",
            i32::MAX,
            Some(i32::MAX - 1),
        ),
    ];
    for (what, count, delta) in lies {
        let lie = with_record_count(&good, count, delta);
        assert_eq!(
            compute_crc(&lie),
            u32::from_be_bytes(lie[CRC_AT..CRC_AT + 4].try_into().unwrap()),
            "{what}: the CRC is right, only the count lies"
        );
        assert_eq!(
            client.produce("target", 0, &lie).0,
            ErrorCode::InvalidRecord,
            "{what}"
        );
    }
    assert_usable(&mut client, "after lying batches");
    assert_unchanged(&mut client, "target", &before);
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 7. Decompression bombs
// ---------------------------------------------------------------------------

/// One record of `size` zero bytes, compressed with `codec`.
fn zeros(codec: Compression, size: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(codec);
    builder
        .push(&NewRecord {
            value: Some(Bytes::from(vec![0u8; size])),
            ..NewRecord::default()
        })
        .unwrap();
    builder.build().unwrap().to_vec()
}

#[test]
fn a_decompression_bomb_is_refused_and_not_stored() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);
    let before = topic_with_records(&mut healthy.client, "target", 4);
    let mut client = broker.client();

    // The broker's bound on a batch's records after decompression is
    // 16 MiB; these inflate to 64 MiB and 17 MiB from well under the
    // 1 MiB max.message.bytes.
    for (codec, size) in [
        (Compression::Zstd, 64 << 20),
        (Compression::Lz4, 64 << 20),
        (Compression::Zstd, 17 << 20),
    ] {
        let bomb = zeros(codec, size);
        assert!(
            bomb.len() < 1 << 20,
            "{codec:?} bomb of {} bytes",
            bomb.len()
        );
        assert_eq!(
            client.produce("target", 0, &bomb).0,
            ErrorCode::DecompressedTooLarge,
            "{codec:?}, {size} bytes decompressed"
        );
    }
    assert_usable(&mut client, "after decompression bombs");
    assert!(broker.metrics().contains("code=\"DECOMPRESSED_TOO_LARGE\""));
    assert_unchanged(&mut client, "target", &(before.0, before.1.clone()));

    // Control: a compressed batch within the bound is accepted, so the
    // refusals above were about size, not about compression.
    let fine = zeros(Compression::Zstd, 1 << 20);
    assert_eq!(
        client.produce("target", 0, &fine),
        (ErrorCode::None, before.0 as i64 + 1)
    );
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 8. Missing topics and partitions
// ---------------------------------------------------------------------------

#[test]
fn produce_to_a_missing_topic_or_partition_is_unknown_topic_or_partition() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);
    let mut client = broker.client();
    assert_eq!(client.create_topic("two", 2, &[]), ErrorCode::None);
    let records = batch("m", "k", 1, ProducerIdentity::NONE);

    for (topic, partition) in [
        ("ghost", 0u32),
        ("ghost", 5),
        ("two", 2),
        ("two", 1_000),
        ("two", u32::MAX),
        (HEALTHY_TOPIC, 1),
    ] {
        assert_eq!(
            client.produce(topic, partition, &records).0,
            ErrorCode::UnknownTopicOrPartition,
            "produce to {topic}/{partition}"
        );
        assert_eq!(
            client.fetch(topic, partition, 0, 0).code,
            ErrorCode::UnknownTopicOrPartition,
            "fetch from {topic}/{partition}"
        );
    }
    // Nothing was created on the way: the topic is still unknown, and the
    // real partitions are still empty.
    assert_eq!(
        client.fetch("ghost", 0, 0, 0).code,
        ErrorCode::UnknownTopicOrPartition
    );
    for partition in 0..2 {
        assert_eq!(
            partition_state(&mut client, "two", partition),
            (0, Vec::new())
        );
    }
    assert_eq!(client.produce("two", 1, &records), (ErrorCode::None, 0));
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 9. Negative fetch offsets
// ---------------------------------------------------------------------------

#[test]
fn fetch_at_a_negative_offset_is_offset_out_of_range() {
    let mut broker = Broker::start(&[]);
    let mut healthy = seed(&broker);
    let mut client = broker.client();
    let end = healthy.expected.len() as u64;

    // Offsets are u64 on the wire: a client that computes -1, -2 or
    // i64::MIN as a signed offset sends these bit patterns.
    for signed in [-1i64, -2, i64::MIN] {
        let started = Instant::now();
        let fetched = client.fetch(HEALTHY_TOPIC, 0, signed as u64, 5_000);
        assert_eq!(fetched.code, ErrorCode::OffsetOutOfRange, "offset {signed}");
        assert!(fetched.records.is_empty());
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "offset {signed}: answered at once, not after the long-poll wait"
        );
    }
    // Just past the end is out of range too; the end itself is not.
    assert_eq!(
        client.fetch(HEALTHY_TOPIC, 0, end + 1, 0).code,
        ErrorCode::OffsetOutOfRange
    );
    let at_end = client.fetch(HEALTHY_TOPIC, 0, end, 0);
    assert_eq!(at_end.code, ErrorCode::None);
    assert!(at_end.records.is_empty());
    assert_usable(&mut client, "after out-of-range fetches");
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 10. Ten thousand idle connections
// ---------------------------------------------------------------------------

/// Total connections the test opens, and the broker's limit.
const CONNECTIONS: usize = 10_000;
const MAX_CONNECTIONS: usize = 500;

/// Raises this process's open-file limit so that it — and the broker it
/// starts next, which inherits it — can hold every connection.
fn raise_open_file_limit(needed: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|current| current >= needed) {
        return;
    }
    let maximum = limit.maximum.map_or(needed, |maximum| maximum.max(needed));
    let raised = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(needed),
            maximum: Some(maximum),
        },
    );
    let now = getrlimit(Resource::Nofile);
    assert!(
        raised.is_ok() && now.current.is_some_and(|current| current >= needed),
        "this test needs RLIMIT_NOFILE of at least {needed} (for itself and the broker it \
         starts) and could not raise it from {limit:?}: {raised:?}; raise the hard limit \
         (ulimit -Hn) or run as a user allowed to"
    );
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(20)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// Whether the peer has closed `stream` (EOF or reset), without waiting.
fn closed_by_peer(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let closed = match (&*stream).read(&mut byte) {
        Ok(0) => true,
        Ok(_) => panic!("an idle connection received bytes"),
        Err(error) if error.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    };
    stream.set_nonblocking(false).unwrap();
    closed
}

#[test]
fn ten_thousand_idle_connections_hit_the_connection_limit_and_the_broker_keeps_serving() {
    // Both this process and the broker hold about CONNECTIONS sockets.
    raise_open_file_limit(CONNECTIONS as u64 + 4_096);
    let max = MAX_CONNECTIONS.to_string();
    let mut broker = Broker::start(&["--max-connections", &max]);
    let served = |broker: &Broker| metric(broker, "corelog_connections{", "").unwrap_or(0);
    // The readiness probe's connection is gone before the count starts.
    wait_until(
        Duration::from_secs(10),
        "the probe connection closed",
        || served(&broker) == 0,
    );
    let mut healthy = seed(&broker);

    // Up to one below the limit: idle connections that send nothing after
    // their handshake (one that never sends it is closed at the login
    // deadline, see tests/connection_limits.rs).
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS - 2)
        .map(|_| {
            let mut client = corelog_tests::Client::from_stream(connect(broker.addr));
            client.handshake().unwrap();
            client.stream
        })
        .collect();
    wait_until(
        Duration::from_secs(20),
        "the broker accepted every idle connection",
        || served(&broker) == MAX_CONNECTIONS as u64 - 1,
    );

    // The last free slot: a fresh client works while the idle ones are open.
    let mut fresh = broker.client();
    let (code, offset) = fresh.produce(
        HEALTHY_TOPIC,
        0,
        &batch("fresh", "k", 1, ProducerIdentity::NONE),
    );
    assert_eq!(
        (code, offset),
        (ErrorCode::None, healthy.expected.len() as i64)
    );
    healthy.expected.push("fresh-0".to_owned());
    let fetched = fresh.fetch(HEALTHY_TOPIC, 0, 0, 0);
    assert_eq!(values(&fetched.records), healthy.expected);

    // Everything else is over the limit. Every tenth asks for something
    // and must be told TOO_MANY_CONNECTIONS; the rest stay idle and must be
    // closed by the broker all the same.
    let over = CONNECTIONS - MAX_CONNECTIONS;
    let request = message::encode_request(
        &message::api_versions::ApiVersionsRequest {
            client_name: "over-the-limit".to_owned(),
            client_version: "0".to_owned(),
        },
        &[],
    )
    .unwrap();
    let mut asking = Vec::new();
    let mut silent: Vec<TcpStream> = Vec::new();
    for index in 0..over {
        let mut stream = connect(broker.addr);
        if index % 10 == 0 {
            let correlation_id = u32::try_from(index).unwrap();
            stream
                .write_all(&raw_frame(
                    ApiKey::ApiVersions.code(),
                    0,
                    correlation_id,
                    &request,
                ))
                .unwrap();
            asking.push((correlation_id, stream));
        } else {
            silent.push(stream);
        }
    }
    assert_eq!(
        1 + idle.len() + 1 + asking.len() + silent.len(),
        CONNECTIONS,
        "the healthy client, the idle ones, the fresh one and those over the limit"
    );

    for (correlation_id, stream) in &mut asking {
        let (correlation, body) = read_raw_response(stream).expect("a refusal");
        assert_eq!(correlation, *correlation_id);
        assert_eq!(refusal(&body), ErrorCode::TooManyConnections);
    }
    for (correlation_id, stream) in &mut asking {
        assert_closed(stream, &format!("refused connection {correlation_id}"));
    }
    // With every slot taken and thousands of refusals under way, the
    // healthy client is served as before.
    check_healthy_client(&mut broker, &mut healthy);
    // The silent ones get no answer (they asked nothing) but are closed.
    wait_until(
        Duration::from_secs(60),
        "the broker closed every silent connection over the limit",
        || {
            silent.retain(|stream| !closed_by_peer(stream));
            silent.is_empty()
        },
    );
    // Meanwhile the connections within the limit were left alone, and the
    // healthy client kept working.
    assert_eq!(served(&broker), MAX_CONNECTIONS as u64);
    let dropped = idle.iter().filter(|stream| closed_by_peer(stream)).count();
    assert_eq!(dropped, 0, "idle connections within the limit were closed");
    check_healthy_client(&mut broker, &mut healthy);
    fresh.handshake().unwrap();

    // Once the idle connections close, new clients are served again.
    drop(idle);
    drop(fresh);
    wait_until(
        Duration::from_secs(30),
        "the broker saw the idle connections close",
        || served(&broker) == 1,
    );
    assert_healthy(&mut broker, &mut healthy);
}

// ---------------------------------------------------------------------------
// 11. A client that never reads
// ---------------------------------------------------------------------------

#[test]
fn a_client_that_never_reads_does_not_stall_the_broker_or_grow_its_memory() {
    // Without the tail cache every fetch reads its records from disk into
    // a buffer of its own, so responses queued for a client that does not
    // read them cost real memory.
    let mut broker = Broker::start(&["--tail-cache-bytes", "0"]);
    let mut healthy = seed(&broker);
    assert_eq!(healthy.client.create_topic("bulk", 1, &[]), ErrorCode::None);
    for index in 0..4u8 {
        let mut builder = BatchBuilder::new(Compression::None);
        builder
            .push(&NewRecord {
                value: Some(Bytes::from(vec![b'a' + index; 240 << 10])),
                ..NewRecord::default()
            })
            .unwrap();
        let bulk = builder.build().unwrap();
        assert_eq!(
            healthy.client.produce("bulk", 0, &bulk),
            (ErrorCode::None, i64::from(index))
        );
    }
    let one_fetch = healthy.client.fetch("bulk", 0, 0, 0);
    assert_eq!(one_fetch.next_offset, 4);
    let response_bytes = one_fetch.records.len();
    assert!(response_bytes > 900 << 10);

    let fetches =
        |broker: &Broker| metric(broker, "corelog_requests_total{", "api=\"Fetch\"").unwrap_or(0);
    let fetches_before = fetches(&broker);
    let rss_before = rss_bytes(&broker);

    // The slow client: 1,500 fetches of ~1 MiB each (1.5 GiB of responses)
    // and it never reads one.
    const REQUESTS: usize = 1_500;
    let slow = broker.client();
    let fetch = message::encode_request(&support::fetch_request("bulk", 0, 0, 0), &[]).unwrap();
    let mut writer = slow.stream.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let flood = std::thread::spawn(move || {
        let mut sent = 0usize;
        for index in 0..REQUESTS {
            let frame = raw_frame(ApiKey::Fetch.code(), 0, 10_000 + index as u32, &fetch);
            if writer.write_all(&frame).is_err() {
                // The broker stopped reading: the backpressure we want.
                break;
            }
            sent += 1;
        }
        sent
    });

    // The broker stays responsive to others while the flood arrives.
    let started = Instant::now();
    check_healthy_client(&mut broker, &mut healthy);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a healthy produce and fetch took {:?} during the flood",
        started.elapsed()
    );

    // Let the broker take in whatever it will take in: until its count of
    // fetches handled stops moving for 2 s (or every request was handled).
    let mut max_rss = rss_before;
    let mut last = (fetches(&broker), Instant::now());
    wait_until(
        Duration::from_secs(90),
        "the broker's count of handled fetches settled",
        || {
            max_rss = max_rss.max(rss_bytes(&broker));
            let now = fetches(&broker);
            if now != last.0 {
                last = (now, Instant::now());
            }
            now - fetches_before >= REQUESTS as u64 || last.1.elapsed() > Duration::from_secs(2)
        },
    );
    max_rss = max_rss.max(rss_bytes(&broker));
    let handled = fetches(&broker) - fetches_before;
    let grown = max_rss.saturating_sub(rss_before);
    let started = Instant::now();
    check_healthy_client(&mut broker, &mut healthy);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a healthy produce and fetch took {:?} with the slow client connected",
        started.elapsed()
    );
    assert!(
        grown < 256 << 20,
        "the broker's RSS grew by {} MiB ({} -> {} MiB) for a client that never reads: it \
         handled {handled} fetches (of the {REQUESTS} the slow client sent, responses of {} KiB \
         each) and queued their responses",
        grown >> 20,
        rss_before >> 20,
        max_rss >> 20,
        response_bytes >> 10,
    );

    // Hang up on the broker; it keeps serving.
    slow.stream.shutdown(std::net::Shutdown::Both).unwrap();
    let sent = flood.join().unwrap();
    assert!(
        sent >= 100,
        "only {sent} fetches were sent: the flood did not happen"
    );
    assert_healthy(&mut broker, &mut healthy);
}
