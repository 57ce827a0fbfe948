//! Bounded resources (C9) against a real broker: the connection limit and
//! the per-connection in-flight bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use corelog_tests::wire_client as support;

use std::time::Duration;

use corelog_tests::{Broker, Client, batch};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::{self, MessageError};

#[test]
fn connections_over_the_limit_are_refused_with_a_typed_error() {
    let broker = Broker::start(&["--max-connections", "2"]);
    // The readiness probe's connection has closed; wait until the broker saw it.
    std::thread::sleep(Duration::from_millis(200));
    let mut first = broker.client();
    let _second = broker.client();
    let mut third = Client::connect(broker.addr).unwrap();
    let request = message::api_versions::ApiVersionsRequest {
        client_name: "third".to_owned(),
        client_version: "0".to_owned(),
    };
    let body = third.call(&request, &[]).unwrap();
    match message::decode_response::<message::api_versions::ApiVersionsResponse>(&body.bytes) {
        Err(MessageError::TopLevelError { error_code, .. }) => {
            assert_eq!(error_code, ErrorCode::TooManyConnections.code());
        }
        other => panic!("expected TOO_MANY_CONNECTIONS, got {other:?}"),
    }
    assert!(
        third.read_response().is_err(),
        "the refused connection is closed"
    );
    // Existing connections keep working.
    assert_eq!(first.create_topic("t", 1, &[]), ErrorCode::None);
}

#[test]
fn a_client_pipelining_past_the_in_flight_bound_is_slowed_not_refused() {
    let broker = Broker::start(&["--max-in-flight-per-connection", "4"]);
    let mut client = broker.client();
    client.create_topic("t", 1, &[]);
    let records = batch("p", "k", 1, ProducerIdentity::NONE);
    let body = message::encode_request(&support::produce_request("t", 0, records.len()), &records)
        .unwrap();
    let requests = 200;
    let mut sent = Vec::new();
    for _ in 0..requests {
        sent.push(
            client
                .send_frame(corelog_wire::frame::ApiKey::Produce, &body)
                .unwrap(),
        );
    }
    let mut offsets = Vec::new();
    for _ in 0..requests {
        let (correlation, body) = client.read_response().unwrap();
        assert!(sent.contains(&correlation));
        let (code, offset) = support::decode_produce(&body);
        assert_eq!(code, ErrorCode::None);
        offsets.push(offset);
    }
    offsets.sort_unstable();
    assert_eq!(
        offsets,
        (0..requests as i64).collect::<Vec<_>>(),
        "every request appended exactly once"
    );
}

#[test]
fn the_broker_reads_no_further_frames_while_the_in_flight_bound_is_reached() {
    let broker = Broker::start(&["--max-in-flight-per-connection", "4"]);
    let mut client = broker.client();
    client.create_topic("t", 1, &[]);
    // Four long polls with nothing to read occupy every slot for 1.5 s...
    let fetch = message::encode_request(&support::fetch_request("t", 0, 0, 1_500), &[]).unwrap();
    for _ in 0..4 {
        client
            .send_frame(corelog_wire::frame::ApiKey::Fetch, &fetch)
            .unwrap();
    }
    // ...so a produce behind them is not even read until one ends.
    let records = batch("p", "k", 1, ProducerIdentity::NONE);
    let produce =
        message::encode_request(&support::produce_request("t", 0, records.len()), &records)
            .unwrap();
    let started = std::time::Instant::now();
    let produce_id = client
        .send_frame(corelog_wire::frame::ApiKey::Produce, &produce)
        .unwrap();
    loop {
        let (correlation, body) = client.read_response().unwrap();
        if correlation == produce_id {
            assert_eq!(support::decode_produce(&body).0, ErrorCode::None);
            break;
        }
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1_200),
        "the produce was handled after {:?}, before a slot was free",
        started.elapsed()
    );
}

#[test]
fn a_second_broker_on_a_port_in_use_refuses_to_start() {
    let broker = Broker::start(&[]);
    let other = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(corelog_tests::binary("corelogd"))
        .arg("--listen")
        .arg(broker.addr.to_string())
        .arg("--metrics-listen")
        .arg(format!("127.0.0.1:{}", corelog_tests::free_port()))
        .arg("--data-dir")
        .arg(other.path())
        .args(["--shards", "1", "--disk-reserve-bytes", "0"])
        .output()
        .expect("corelogd runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "a second broker started on {} (stderr: {stderr})",
        broker.addr
    );
    assert!(
        stderr.contains("is another broker running there"),
        "the refusal says why: {stderr}"
    );
    // The first broker still serves.
    broker.client().handshake().unwrap();
}

/// Whether the broker closes `stream` within `within`: `Some(how long it
/// took)`, or `None` if it stayed open.
fn closed_within(stream: &mut std::net::TcpStream, within: Duration) -> Option<Duration> {
    use std::io::Read;
    let started = std::time::Instant::now();
    stream.set_read_timeout(Some(within)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => Some(started.elapsed()),
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
            Some(started.elapsed())
        }
        Ok(_) => panic!("the broker sent something unasked"),
        Err(_) => None,
    }
}

#[test]
fn a_stalled_frame_and_an_idle_connection_are_closed_and_counted() {
    use std::io::Write;
    let broker = Broker::start(&[
        "--frame-read-timeout-ms",
        "500",
        "--connection-idle-timeout-ms",
        "1500",
    ]);
    // A header that promises a 10 MiB body, then nothing: it held the
    // connection (and its memory) for good.
    let mut stalled = broker.client();
    let header = corelog_wire::frame::RequestHeader {
        api_key: corelog_wire::frame::ApiKey::Produce,
        api_version: 0,
        correlation_id: 7,
        flags: 0,
    }
    .encode(10 << 20)
    .unwrap();
    stalled.stream.write_all(&header).unwrap();
    stalled.stream.write_all(&[0u8; 100]).unwrap();
    let took = closed_within(&mut stalled.stream, Duration::from_secs(10))
        .expect("a frame stalled past its read deadline is closed");
    assert!(took < Duration::from_secs(3), "closed only after {took:?}");

    // A connection that sends nothing is closed once idle that long...
    let mut idle = broker.client();
    let took = closed_within(&mut idle.stream, Duration::from_secs(10))
        .expect("an idle connection is closed");
    assert!(
        took >= Duration::from_millis(1_000),
        "closed after {took:?}"
    );

    // ...but not one that keeps asking, nor one waiting on a long poll.
    let mut busy = broker.client();
    busy.create_topic("t", 1, &[]);
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(600));
        busy.create_topic("t", 1, &[]);
    }
    let fetch = message::encode_request(&support::fetch_request("t", 0, 0, 2_500), &[]).unwrap();
    let polled = busy
        .send_frame(corelog_wire::frame::ApiKey::Fetch, &fetch)
        .unwrap();
    let (correlation, _) = busy.read_response().unwrap();
    assert_eq!(correlation, polled, "the long poll was answered, not cut");
    assert_eq!(busy.create_topic("t2", 1, &[]), ErrorCode::None);

    let metrics = broker.metrics();
    assert!(
        metrics
            .contains("corelog_connections_closed_total{shard=\"0\",reason=\"frame_timeout\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("corelog_connections_closed_total{shard=\"0\",reason=\"idle_timeout\"}"),
        "{metrics}"
    );
}

#[test]
fn a_client_reconnects_after_the_broker_closed_its_idle_connection() {
    use corelog_client::{Admin, ClientConfig, NewTopic};
    let broker = Broker::start(&["--connection-idle-timeout-ms", "500"]);
    corelog_tests::cluster_client::client_runtime().block_on(async {
        let admin = Admin::connect(ClientConfig::new(broker.addr.to_string()))
            .await
            .unwrap();
        admin.create_topic(NewTopic::new("t", 1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let topics = admin.list_topics().await.unwrap();
        assert!(topics.iter().any(|topic| topic.name == "t"));
    });
    assert!(
        broker
            .metrics()
            .contains("corelog_connections_closed_total{shard=\"0\",reason=\"idle_timeout\"}"),
        "the admin's connection was closed while idle"
    );
}
