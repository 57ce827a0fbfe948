//! A live broker's `/metrics` passes `promtool check metrics` (issue 35,
//! item 23): every family, counters included, is what Prometheus's own
//! linter accepts. Before, every counter's `# HELP`/`# TYPE` line named
//! the family without the `_total` its samples carry, and promtool
//! rejected all of them. `make test` runs this (it needs `promtool`, which
//! `make ops-check` needs too: `apt-get install prometheus`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use corelog_client::ProducerRecord;
use corelog_client::group::{GroupConfig, GroupConsumer};
use corelog_tests::cluster_client::{
    client_config, client_runtime, connect_producer, producer_config,
};
use corelog_tests::{Broker, batch};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;

const TOPIC: &str = "linted";
const GROUP: &str = "linted-readers";

/// The body of an HTTP answer.
fn body(answer: &str) -> &str {
    answer
        .split_once("\r\n\r\n")
        .map_or_else(|| panic!("not an HTTP answer: {answer}"), |(_, body)| body)
}

/// `promtool check metrics` on `exposition`: its verdict and what it said.
fn promtool_check(exposition: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("cannot run promtool ({error}); install it: apt-get install prometheus")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

#[test]
fn promtool_rejects_a_counter_family_named_without_total() {
    // The check this file relies on: promtool does tell.
    let (accepted, said) =
        promtool_check("# HELP x_things Things.\n# TYPE x_things counter\nx_things_total 1\n");
    assert!(!accepted || said.contains("_total"), "{said}");
    let (accepted, said) = promtool_check(
        "# HELP x_things_total Things.\n# TYPE x_things_total counter\nx_things_total 1\n",
    );
    assert!(accepted && said.trim().is_empty(), "{said}");
}

/// A broker that served produces, fetches, a group's commits and a refused
/// request, so that labelled series exist beside the always-present ones.
#[test]
fn a_live_brokers_metrics_pass_promtool_check_metrics() {
    let broker = Broker::start(&[]);
    let mut client = broker.client();
    assert_eq!(client.create_topic(TOPIC, 2, &[]), ErrorCode::None);
    assert_eq!(
        client.create_topic(TOPIC, 2, &[]),
        ErrorCode::TopicAlreadyExists
    );
    let bootstrap = vec![broker.addr.to_string()];
    client_runtime().block_on(async {
        let producer =
            connect_producer(producer_config(bootstrap.clone()), Duration::from_secs(20)).await;
        let mut deliveries = Vec::new();
        for index in 0..20 {
            let record =
                ProducerRecord::new(TOPIC, format!("value-{index}")).key(format!("{index}"));
            deliveries.push(producer.send(record).await.unwrap());
        }
        for delivery in deliveries {
            delivery.await.unwrap();
        }
        producer.close().await.unwrap();

        let mut config = GroupConfig::new(bootstrap[0].clone(), GROUP, [TOPIC]);
        config.client = client_config(bootstrap.clone());
        config.fetch_max_wait = Duration::from_millis(100);
        let mut consumer = GroupConsumer::connect(config).await.unwrap();
        let mut read = 0;
        while read < 10 {
            let polled = consumer.poll().await.unwrap();
            for record in &polled.records {
                consumer.complete(record);
            }
            read += polled.records.len();
        }
        consumer.commit().await.unwrap();
        consumer.close().await.unwrap();
    });
    let (code, _) = client.produce(TOPIC, 0, &batch("raw", "k", 2, ProducerIdentity::NONE));
    assert_eq!(code, ErrorCode::None);

    let answer = broker.metrics();
    let exposition = body(&answer);
    assert!(
        exposition.contains("corelog_records_in_total"),
        "{exposition}"
    );
    let (accepted, said) = promtool_check(exposition);
    assert!(
        accepted && said.trim().is_empty(),
        "promtool check metrics on a live broker's /metrics:\n{said}"
    );
}
