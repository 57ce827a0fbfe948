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
