//! The broker's protocol behaviour, against a real `corelogd` process, with
//! a minimal client built on the wire crate only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::wire_client as support;

use std::io::Write;
use std::time::{Duration, Instant};

use corelog_tests::{Broker, Client, batch, values};
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord, ProducerIdentity};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::{self, MessageError};

fn producer(id: i64, epoch: i16, sequence: i32) -> ProducerIdentity {
    ProducerIdentity {
        producer_id: id,
        producer_epoch: epoch,
        base_sequence: sequence,
    }
}

#[test]
fn requests_before_the_handshake_are_refused() {
    let broker = Broker::start(&[]);
    let mut client = Client::connect(broker.addr).unwrap();
    let body = client
        .call(&support::produce_request("t", 0, 0), &[])
        .unwrap();
    assert_eq!(support::decode_produce(&body).0, ErrorCode::InvalidRequest);
    client.handshake().unwrap();
}

#[test]
fn produced_records_are_fetched_back_in_order() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    assert_eq!(client.create_topic("orders", 2, &[]), ErrorCode::None);
    assert_eq!(
        client.create_topic("orders", 2, &[]),
        ErrorCode::TopicAlreadyExists
    );
    for round in 0..5 {
        let (code, offset) = client.produce(
            "orders",
            1,
            &batch(
                &format!("m{round}"),
                "customer42",
                3,
                ProducerIdentity::NONE,
            ),
        );
        assert_eq!((code, offset), (ErrorCode::None, round * 3));
    }
    let fetched = client.fetch("orders", 1, 0, 0);
    assert_eq!(fetched.code, ErrorCode::None);
    assert_eq!(fetched.next_offset, 15);
    assert_eq!(fetched.high_watermark, 15);
    let expected: Vec<String> = (0..5)
        .flat_map(|round| (0..3).map(move |i| format!("m{round}-{i}")))
        .collect();
    assert_eq!(values(&fetched.records), expected);
    // From the middle of a batch: the batch containing the offset comes back.
    let middle = client.fetch("orders", 1, 4, 0);
    assert_eq!(values(&middle.records)[0], "m1-0");
    let (code, _) = client.produce("orders", 7, &batch("x", "k", 1, ProducerIdentity::NONE));
    assert_eq!(code, ErrorCode::UnknownTopicOrPartition);
}

#[test]
fn idempotent_retries_return_the_original_offset_and_conflicts_are_refused() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    client.create_topic("payments", 1, &[]);
    let first = batch("a", "k", 2, producer(5, 0, 0));
    assert_eq!(client.produce("payments", 0, &first), (ErrorCode::None, 0));
    assert_eq!(
        client.produce("payments", 0, &batch("b", "k", 1, producer(5, 0, 2))),
        (ErrorCode::None, 2)
    );
    // A lost reply: the same batch again gets the original offset, no copy.
    assert_eq!(client.produce("payments", 0, &first), (ErrorCode::None, 0));
    assert_eq!(
        client
            .produce("payments", 0, &batch("other", "k", 2, producer(5, 0, 0)))
            .0,
        ErrorCode::DuplicateSequenceConflict
    );
    assert_eq!(
        client
            .produce("payments", 0, &batch("c", "k", 1, producer(5, 0, 9)))
            .0,
        ErrorCode::OutOfOrderSequence
    );
    assert_eq!(
        client.produce("payments", 0, &batch("d", "k", 1, producer(5, 1, 0))),
        (ErrorCode::None, 3)
    );
    assert_eq!(
        client
            .produce("payments", 0, &batch("e", "k", 1, producer(5, 0, 3)))
            .0,
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(
        values(&client.fetch("payments", 0, 0, 0).records),
        ["a-0", "a-1", "b-0", "d-0"]
    );
}

#[test]
fn producer_state_survives_kill_and_restart() {
    let mut broker = Broker::start(&[]);
    let mut client = broker.client();
    client.create_topic("payments", 1, &[]);
    let first = batch("a", "k", 2, producer(5, 0, 0));
    assert_eq!(client.produce("payments", 0, &first), (ErrorCode::None, 0));
    broker.kill();
    broker.spawn();
    let mut client = broker.client();
    assert_eq!(
        client.produce("payments", 0, &first),
        (ErrorCode::None, 0),
        "retry after restart"
    );
    // Offset 2 is the restarted leader's epoch-start marker: a restarted
    // replica leads a new epoch, never its old one again.
    assert_eq!(
        client.produce("payments", 0, &batch("b", "k", 1, producer(5, 0, 2))),
        (ErrorCode::None, 3)
    );
    assert_eq!(
        values(&client.fetch("payments", 0, 0, 0).records),
        ["a-0", "a-1", "b-0"]
    );
}

#[test]
fn a_waiting_fetch_sees_a_new_record_quickly() {
    let broker = Broker::start(&["--shards", "2"]);
    let mut client = broker.client();
    // Several partitions, so that some are owned by the other shard.
    client.create_topic("tail", 4, &[]);
    for partition in 0..4 {
        let mut reader = broker.client();
        let waiter = std::thread::spawn(move || {
            let started = Instant::now();
            let fetched = reader.fetch("tail", partition, 0, 10_000);
            (fetched, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(200));
        let produced_at = Instant::now();
        assert_eq!(
            client
                .produce(
                    "tail",
                    partition,
                    &batch("t", "k", 1, ProducerIdentity::NONE)
                )
                .0,
            ErrorCode::None
        );
        let (fetched, waited) = waiter.join().unwrap();
        assert_eq!(values(&fetched.records), ["t-0"]);
        assert!(
            waited >= Duration::from_millis(150),
            "the fetch waited for data"
        );
        assert!(produced_at.elapsed() < Duration::from_secs(5));
    }
    // Nothing to read: the fetch returns empty after max_wait.
    let started = Instant::now();
    let empty = client.fetch("tail", 0, 1, 300);
    assert!(empty.records.is_empty() && started.elapsed() >= Duration::from_millis(250));
}

#[test]
fn bad_frames_get_typed_errors_while_other_clients_keep_working() {
    let broker = Broker::start(&["--max-frame-bytes", "65536", "--max-message-bytes", "60000"]);
    let mut healthy = broker.client();
    healthy.create_topic("t", 1, &[]);

    // Oversized: refused from the header, then the connection is closed.
    let mut oversized = broker.client();
    let mut header = Vec::new();
    header.extend_from_slice(&(10_000_000u32).to_be_bytes());
    header.extend_from_slice(&ApiKey::Produce.code().to_be_bytes());
    header.extend_from_slice(&0u16.to_be_bytes());
    header.extend_from_slice(&77u32.to_be_bytes());
    header.extend_from_slice(&0u16.to_be_bytes());
    oversized.stream.write_all(&header).unwrap();
    let (correlation, body) = oversized.read_response().unwrap();
    assert_eq!(correlation, 77);
    assert!(matches!(
        message::decode_response::<message::produce::ProduceResponse>(&body.bytes),
        Err(MessageError::TopLevelError { error_code, .. }) if error_code == ErrorCode::FrameTooLarge.code()
    ));
    assert!(
        oversized.read_response().is_err(),
        "closed after an oversized frame"
    );

    // Garbage body under a valid header: INVALID_REQUEST, connection kept.
    let mut garbage = broker.client();
    garbage.send_frame(ApiKey::Produce, &[0xAB; 300]).unwrap();
    let (_, body) = garbage.read_response().unwrap();
    assert_eq!(support::decode_produce(&body).0, ErrorCode::InvalidRequest);
    // An unknown API key: refused, connection kept.
    let mut unknown = Vec::new();
    unknown.extend_from_slice(&(10u32 + 4).to_be_bytes());
    unknown.extend_from_slice(&999u16.to_be_bytes());
    unknown.extend_from_slice(&0u16.to_be_bytes());
    unknown.extend_from_slice(&5u32.to_be_bytes());
    unknown.extend_from_slice(&0u16.to_be_bytes());
    unknown.extend_from_slice(&[1, 2, 3, 4]);
    garbage.stream.write_all(&unknown).unwrap();
    let (correlation, _) = garbage.read_response().unwrap();
    assert_eq!(correlation, 5);
    garbage.handshake().unwrap();
    // An inter-broker API sent by a client: refused by code (only brokers
    // that proved a cluster secret speak those).
    garbage.send_frame(ApiKey::ReplicaQuery, &[0; 16]).unwrap();
    let (_, body) = garbage.read_response().unwrap();
    assert!(matches!(
        message::decode_response::<message::replica_query::ReplicaQueryResponse>(&body.bytes),
        Err(MessageError::TopLevelError { error_code, .. }) if error_code == ErrorCode::ClusterAuthorizationFailed.code()
    ));

    // A corrupted batch and a decompression bomb: typed errors, nothing stored.
    let mut corrupt = batch("c", "k", 1, ProducerIdentity::NONE);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert_eq!(
        garbage.produce("t", 0, &corrupt).0,
        ErrorCode::CorruptMessage
    );
    let mut bomb = BatchBuilder::new(Compression::Zstd);
    bomb.push(&NewRecord {
        value: Some(bytes::Bytes::from(vec![0u8; 64 << 20])),
        ..NewRecord::default()
    })
    .unwrap();
    let bomb = bomb.build().unwrap();
    assert!(bomb.len() < 65536);
    assert_eq!(
        garbage.produce("t", 0, &bomb).0,
        ErrorCode::DecompressedTooLarge
    );

    // The healthy client never noticed.
    assert_eq!(
        healthy.produce("t", 0, &batch("ok", "k", 1, ProducerIdentity::NONE)),
        (ErrorCode::None, 0)
    );
    assert_eq!(values(&healthy.fetch("t", 0, 0, 0).records), ["ok-0"]);
    let metrics = broker.metrics();
    assert!(metrics.contains("code=\"FRAME_TOO_LARGE\""), "{metrics}");
    assert!(metrics.contains("code=\"DECOMPRESSED_TOO_LARGE\""));
}

#[test]
fn sigterm_shuts_down_cleanly_and_keeps_everything() {
    let mut broker = Broker::start(&[]);
    let mut client = broker.client();
    client.create_topic("t", 1, &[]);
    for round in 0..10 {
        client.produce(
            "t",
            0,
            &batch(&format!("r{round}"), "k", 2, ProducerIdentity::NONE),
        );
    }
    assert!(broker.terminate(), "exit status 0 after SIGTERM");
    broker.spawn();
    let mut client = broker.client();
    let fetched = client.fetch("t", 0, 0, 0);
    assert_eq!(fetched.code, ErrorCode::None);
    assert_eq!(values(&fetched.records).len(), 20);
}

#[test]
fn retention_deletes_old_segments_and_old_offsets_are_out_of_range_with_the_gap() {
    let broker = Broker::start(&["--maintenance-interval-ms", "100"]);
    let mut client = broker.client();
    let configs = [("segment.bytes", "1048576"), ("retention.bytes", "2097152")];
    assert_eq!(client.create_topic("logs", 1, &configs), ErrorCode::None);
    let value = "v".repeat(1000);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut produced = 0u64;
    while produced < 4000 {
        let mut builder = BatchBuilder::new(Compression::None);
        for _ in 0..100 {
            builder
                .push(&NewRecord {
                    value: Some(bytes::Bytes::from(value.clone())),
                    timestamp: corelog_wire::types::TimestampMs(now),
                    ..NewRecord::default()
                })
                .unwrap();
        }
        assert_eq!(
            client.produce("logs", 0, &builder.build().unwrap()).0,
            ErrorCode::None
        );
        produced += 100;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let fetched = loop {
        let fetched = client.fetch("logs", 0, 0, 0);
        if fetched.code == ErrorCode::OffsetOutOfRange || Instant::now() > deadline {
            break fetched;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(fetched.code, ErrorCode::OffsetOutOfRange);
    assert!(fetched.log_start > 0);
    let gap = fetched.gap.expect("the gap is explained");
    assert_eq!(gap.requested_offset, 0);
    assert_eq!(gap.log_start_offset, fetched.log_start);
    assert_eq!(gap.deleted.first().map(|range| range.start_offset), Some(0));
    assert_eq!(
        gap.deleted.last().map(|range| range.end_offset),
        Some(fetched.log_start)
    );
    assert!(
        gap.deleted
            .iter()
            .all(|range| range.cause == message::fetch::DeletionCause::RetentionSize)
    );
    // From the log start, reading works.
    assert_eq!(
        client.fetch("logs", 0, fetched.log_start, 0).code,
        ErrorCode::None
    );
}
