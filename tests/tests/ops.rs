//! The operator's files in `ops/` against real brokers (issue 15, item 14):
//! every metric that the Grafana dashboard (`ops/grafana/corelog.json`) or
//! the Prometheus alert rules (`ops/prometheus/alerts.yml`) query is served
//! by a 3-broker cluster with a topic, appends, a consumer group that
//! commits and lags, and one refused request; every dashboard query parses
//! as PromQL (`promtool check rules`); every error name a rule matches is a
//! real error code. `make ops-check` runs `promtool check rules` and
//! `promtool test rules` on the alerts themselves.
//!
//! Names are compared as Prometheus stores them, sample by sample: a
//! histogram is queried as `corelog_append_latency_seconds_bucket` (or
//! `_sum`, `_count`), a counter as `corelog_records_in_total`; the family
//! name alone (`corelog_append_latency_seconds`) matches nothing in
//! Prometheus, so it counts as not served. Prometheus's own `up` is not a
//! broker series and is not checked here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use corelog_client::ProducerRecord;
use corelog_client::group::{GroupConfig, GroupConsumer};
use corelog_tests::cluster_client::{
    client_config, client_runtime, connect_producer, producer_config,
};
use corelog_tests::{Broker, binary, start_cluster};
use corelog_wire::error::ErrorCode;
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../ops/grafana/corelog.json");
const ALERTS: &str = include_str!("../../ops/prometheus/alerts.yml");

/// Longest wait for any one condition.
const DEADLINE: Duration = Duration::from_secs(40);

const TOPIC: &str = "ops-watched";
const GROUP: &str = "ops-readers";

// ------------------------------------------------------------ extraction

/// The PromQL of every dashboard panel target (`expr`), in order.
fn dashboard_panel_queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    collect_strings(dashboard, &["expr"], &mut queries);
    queries
}

/// Every query the dashboard sends: the panels' PromQL and the template
/// variables' (`label_values(...)`, Grafana's syntax, under `query` and
/// `definition`).
fn dashboard_all_queries(dashboard: &Value) -> Vec<String> {
    let mut queries = Vec::new();
    collect_strings(dashboard, &["expr", "query", "definition"], &mut queries);
    queries
}

/// The strings under any of `keys`, anywhere in `value`.
fn collect_strings(value: &Value, keys: &[&str], out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match inner {
                    Value::String(text) if keys.contains(&key.as_str()) => out.push(text.clone()),
                    _ => collect_strings(inner, keys, out),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_strings(item, keys, out);
            }
        }
        _ => {}
    }
}

/// The `expr:` of every rule in a Prometheus rules file: inline
/// (`expr: up == 0`, quotes stripped) or a block scalar (`expr: |` or
/// `>`, then the lines indented deeper than the key). Line-based, so that
/// the tests need no YAML parser; `rules_file_exprs_are_read_inline_and_as_blocks`
/// and the count check in `every_alert_and_panel_has_a_query` guard it.
fn rule_expressions(rules: &str) -> Vec<String> {
    let lines: Vec<&str> = rules.lines().collect();
    let mut exprs = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        index += 1;
        let indent = line.len() - line.trim_start().len();
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with('|') || rest.starts_with('>') {
            let mut block = Vec::new();
            while index < lines.len() {
                let next = lines[index];
                let next_indent = next.len() - next.trim_start().len();
                if !next.trim().is_empty() && next_indent <= indent {
                    break;
                }
                block.push(next.trim());
                index += 1;
            }
            exprs.push(block.join(" ").trim().to_owned());
        } else {
            let unquoted = rest
                .strip_prefix('"')
                .and_then(|inner| inner.strip_suffix('"'))
                .or_else(|| {
                    rest.strip_prefix('\'')
                        .and_then(|inner| inner.strip_suffix('\''))
                })
                .unwrap_or(rest);
            exprs.push(unquoted.to_owned());
        }
    }
    exprs
}

fn is_name_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b':'
}

/// The broker metric names (`corelog_...` tokens) in a query.
fn metric_names(query: &str) -> BTreeSet<String> {
    let bytes = query.as_bytes();
    let mut names = BTreeSet::new();
    let mut start = 0;
    while let Some(found) = query[start..].find("corelog_") {
        let at = start + found;
        let mut end = at;
        while end < bytes.len() && is_name_char(bytes[end]) {
            end += 1;
        }
        if at == 0 || !is_name_char(bytes[at - 1]) {
            names.insert(query[at..end].to_owned());
        }
        start = end.max(at + 1);
    }
    names
}

/// The values of `code="..."` matchers in a query (error names).
fn error_code_matchers(query: &str) -> BTreeSet<String> {
    query
        .split("code=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The sample names in a `/metrics` text: what Prometheus would store.
fn served_names(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|line| line.starts_with("corelog_"))
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).expect("ops/grafana/corelog.json is JSON")
}

/// Every broker metric the dashboard and the alerts query, each with
/// where it is used.
fn queried_names() -> Vec<(String, &'static str)> {
    let mut names = Vec::new();
    for query in dashboard_all_queries(&dashboard()) {
        for name in metric_names(&query) {
            names.push((name, "ops/grafana/corelog.json"));
        }
    }
    for expr in rule_expressions(ALERTS) {
        for name in metric_names(&expr) {
            names.push((name, "ops/prometheus/alerts.yml"));
        }
    }
    names.sort();
    names.dedup();
    names
}

// ------------------------------------------------------------ pure checks

#[test]
fn metric_names_are_whole_tokens() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(corelog_append_latency_seconds_bucket{shard=\"0\"}[5m]))) \
         / notcorelog_x + corelog_disk_free_bytes<corelog_disk_reserve_bytes",
    );
    let expected: BTreeSet<String> = [
        "corelog_append_latency_seconds_bucket",
        "corelog_disk_free_bytes",
        "corelog_disk_reserve_bytes",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(names, expected);
}

#[test]
fn rules_file_exprs_are_read_inline_and_as_blocks() {
    let rules = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: |\n          sum(corelog_a_total)\n            > 1\n        for: 5m\n      - alert: B\n        expr: \"corelog_b == 0\"\n      - alert: C\n        expr: >-\n          corelog_c\n\n          < 2\n        labels:\n          severity: warning\n";
    assert_eq!(
        rule_expressions(rules),
        vec![
            "sum(corelog_a_total) > 1",
            "corelog_b == 0",
            "corelog_c  < 2"
        ]
    );
}

#[test]
fn served_names_are_sample_names_not_families() {
    let text = "# HELP corelog_records_in Records appended.\n# TYPE corelog_records_in counter\n\
                corelog_records_in_total{shard=\"0\"} 5\n\
                corelog_append_latency_seconds_bucket{le=\"0.1\",shard=\"0\"} 1\n\
                corelog_build_info{version=\"0.1.0\"} 1\n# EOF\n";
    let expected: BTreeSet<String> = [
        "corelog_append_latency_seconds_bucket",
        "corelog_build_info",
        "corelog_records_in_total",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(served_names(text), expected);
}

/// Guards the extraction against finding nothing (which would make the
/// served-names check pass vacuously): one expression per alert, at least
/// one per dashboard panel that is not a row.
#[test]
fn every_alert_and_panel_has_a_query() {
    let alerts = ALERTS
        .lines()
        .filter(|line| line.trim_start().starts_with("- alert:"))
        .count();
    let exprs = rule_expressions(ALERTS);
    assert!(alerts >= 10, "{alerts} alerts");
    assert_eq!(exprs.len(), alerts, "one expr per alert: {exprs:#?}");
    for expr in &exprs {
        assert!(
            expr == "up{job=\"corelog\"} == 0" || !metric_names(expr).is_empty(),
            "an alert on no broker series: {expr}"
        );
    }
    let dashboard = dashboard();
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels.iter().filter(|panel| panel["type"] != "row") {
        let queries = dashboard_panel_queries(panel);
        assert!(
            queries.iter().any(|query| !metric_names(query).is_empty()),
            "panel {:?} queries no broker series: {queries:?}",
            panel["title"]
        );
    }
    assert!(queried_names().len() >= 20, "{:?}", queried_names());
}

/// `code="NAME"` in a rule or a panel is an error name the broker uses
/// (`corelog_errors_total{code}` carries `ErrorCode::name`).
#[test]
fn error_names_matched_by_rules_and_panels_are_real_error_codes() {
    let known: BTreeSet<&str> = ErrorCode::ALL.iter().map(|code| code.name()).collect();
    let queries = dashboard_all_queries(&dashboard())
        .into_iter()
        .chain(rule_expressions(ALERTS));
    let mut matched = 0;
    for query in queries {
        for name in error_code_matchers(&query) {
            assert!(
                known.contains(name.as_str()),
                "no error code {name}: {query}"
            );
            matched += 1;
        }
    }
    assert!(matched >= 1, "the DISK_FULL alert matches an error code");
}

/// Each dashboard query, with Grafana's variables given values, as a
/// recording rule: `promtool check rules` parses it as PromQL.
#[test]
fn every_dashboard_query_parses_as_promql() {
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (index, query) in dashboard_panel_queries(&dashboard()).iter().enumerate() {
        let promql = query
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*")
            .replace("$group", ".*");
        assert!(
            !promql.contains('$'),
            "a Grafana variable this test does not know: {query}"
        );
        rules.push_str(&format!(
            "      - record: corelog:dashboard:query_{index}\n        expr: |\n          {promql}\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-queries.yml");
    std::fs::write(&path, &rules).unwrap();
    let output = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&path)
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run promtool ({error}); install it: apt-get install prometheus")
        });
    assert!(
        output.status.success(),
        "a dashboard query is not PromQL:\n{}{}\n{rules}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

// ------------------------------------------------------------ a cluster

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn corelog(broker: &Broker, args: &[&str]) -> Output {
    Command::new(binary("corelog"))
        .arg("--bootstrap")
        .arg(broker.addr.to_string())
        .args(args)
        .output()
        .unwrap()
}

/// Creates the topic over the three brokers, retrying while the cluster
/// elects its controller.
fn create_topic(broker: &Broker) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let args = [
            "topic",
            "create",
            TOPIC,
            "--partitions",
            "3",
            "--replication-factor",
            "3",
        ];
        let output = corelog(broker, &args);
        if output.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the topic was not created: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Appends `count` keyed records (spread over the partitions) and waits
/// for every acknowledgement.
async fn produce(bootstrap: &[String], prefix: &str, count: usize) {
    let producer = connect_producer(producer_config(bootstrap.to_vec()), DEADLINE).await;
    let mut deliveries = Vec::new();
    for index in 0..count {
        let record =
            ProducerRecord::new(TOPIC, format!("{prefix}-{index}")).key(format!("key-{index}"));
        deliveries.push(producer.send(record).await.unwrap());
    }
    for delivery in deliveries {
        delivery.await.unwrap();
    }
    producer.close().await.unwrap();
}

/// A group member reads `count` records, commits past them and leaves.
async fn consume_and_commit(bootstrap: &[String], count: usize) {
    let mut config = GroupConfig::new(bootstrap[0].clone(), GROUP, [TOPIC]);
    config.client = client_config(bootstrap.to_vec());
    config.session_timeout = Duration::from_secs(3);
    config.rebalance_timeout = Duration::from_secs(3);
    config.fetch_max_wait = Duration::from_millis(100);
    config.retry_backoff = Duration::from_millis(20);
    let deadline = Instant::now() + DEADLINE;
    let mut consumer = loop {
        match GroupConsumer::connect(config.clone()).await {
            Ok(consumer) => break consumer,
            Err(error) if error.is_retriable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the group member could not join: {error}"),
        }
    };
    let mut read = 0;
    while read < count {
        assert!(Instant::now() < deadline, "read {read} of {count} records");
        let polled = consumer.poll().await.unwrap();
        for record in &polled.records {
            consumer.complete(record);
        }
        read += polled.records.len();
        if let Err(error) = consumer.commit().await {
            assert!(
                error.is_retriable() && Instant::now() < deadline,
                "commit: {error}"
            );
        }
    }
    consumer.close().await.unwrap();
}

/// A 3-broker cluster: a topic of replication factor 3 (so leaders serve
/// follower lag and one broker leads the controller, with the partition
/// health series), appends and fetches, a group that committed and then
/// fell behind (so its coordinator serves lag, age and retention left),
/// and a refused request (a topic created twice), so that
/// `corelog_errors_total` has a series. Every name the dashboard and the
/// alerts query must then be served by some broker.
#[test]
fn every_metric_the_dashboard_and_the_alerts_query_is_served_by_a_cluster() {
    let wanted = queried_names();
    let brokers = start_cluster(3, &[]);
    let bootstrap: Vec<String> = brokers
        .iter()
        .map(|broker| broker.addr.to_string())
        .collect();
    create_topic(&brokers[0]);
    let runtime = client_runtime();
    runtime.block_on(async {
        produce(&bootstrap, "read", 30).await;
        consume_and_commit(&bootstrap, 30).await;
        // Unread records: the group lags, and retention counts down.
        produce(&bootstrap, "unread", 12).await;
    });
    let again = corelog(
        &brokers[0],
        &["topic", "create", TOPIC, "--partitions", "3"],
    );
    assert!(!again.status.success(), "a topic created twice");

    let deadline = Instant::now() + DEADLINE;
    loop {
        // Broker `index` is node id `index + 1`.
        let by_broker: Vec<BTreeSet<String>> = brokers
            .iter()
            .map(|broker| served_names(&broker.metrics()))
            .collect();
        let served: BTreeSet<String> = by_broker.iter().flatten().cloned().collect();
        let missing: Vec<&(String, &str)> = wanted
            .iter()
            .filter(|(name, _)| !served.contains(name))
            .collect();
        if missing.is_empty() {
            let names: BTreeSet<&String> = wanted.iter().map(|(name, _)| name).collect();
            println!(
                "{} metric names queried, each served by nodes:",
                names.len()
            );
            for name in names {
                let nodes: Vec<usize> = (0..by_broker.len())
                    .filter(|index| by_broker[*index].contains(name))
                    .map(|index| index + 1)
                    .collect();
                println!("  {name}: {nodes:?}");
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queried but not served by any broker of the cluster within {DEADLINE:?}:\n{}\nserved:\n{}",
            missing
                .iter()
                .map(|(name, file)| format!("  {name} (in {file})"))
                .collect::<Vec<_>>()
                .join("\n"),
            served.iter().cloned().collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
