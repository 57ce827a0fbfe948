//! The README's example runs as written (issue 15, item 16): the search
//! projection exits by itself once the events are processed, and it reads
//! its own topic, leaving the Quickstart's `orders` alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corelog_tests::{Broker, batch, binary};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::metadata::{MetadataRequest, MetadataResponse};

#[test]
fn the_search_projection_example_exits_when_done_and_leaves_the_quickstarts_topic_alone() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    // The Quickstart's topic, holding records that are no order events.
    assert_eq!(client.create_topic("orders", 1, &[]), ErrorCode::None);
    let lines = batch("hello", "k", 3, ProducerIdentity::NONE);
    assert_eq!(client.produce("orders", 0, &lines).0, ErrorCode::None);

    let workdir = tempfile::tempdir().unwrap();
    // As the README runs it: no --idle-exit-seconds.
    let mut example = Command::new(binary("examples/search_projection"))
        .args([
            "--bootstrap",
            &broker.addr.to_string(),
            "--demo-events",
            "200",
        ])
        .current_dir(workdir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = example.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            example.kill().unwrap();
            panic!("the example still ran after 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = example.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(status.success(), "{status}: {printed}");
    assert!(printed.contains("events processed"), "{printed}");

    // Nothing of `orders` was read or quarantined.
    let metadata: MetadataResponse = corelog_tests::wire_client::ask(
        &mut client,
        &MetadataRequest {
            topics: Some(vec!["orders.dlq".to_owned(), "order-events".to_owned()]),
        },
    );
    let code = |name: &str| {
        metadata
            .topics
            .iter()
            .find(|topic| topic.name == name)
            .map(|topic| topic.error_code)
    };
    assert_eq!(code("order-events"), Some(ErrorCode::None.code()));
    assert_eq!(
        code("orders.dlq"),
        Some(ErrorCode::UnknownTopicOrPartition.code()),
        "the Quickstart's records were quarantined"
    );
}
