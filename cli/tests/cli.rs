//! The `corelog` binary against the in-process fake broker.

#![allow(clippy::unwrap_used)]

// The client library's in-process fake broker, shared rather than copied.
#[path = "../../client/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::fake_broker::FakeBroker;

/// Runs `corelog` with `args` and `stdin`, off the async runtime so that
/// the fake broker keeps serving.
async fn corelog(args: Vec<String>, stdin: &'static str) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_corelog"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn args(broker: &str, rest: &[&str]) -> Vec<String> {
    let mut args = vec!["--bootstrap".to_owned(), broker.to_owned()];
    args.extend(rest.iter().map(|arg| (*arg).to_owned()));
    args
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_produce_and_consume_round_trip() {
    let broker = FakeBroker::start().await;
    let addr = broker.addr();
    let created = corelog(
        args(
            &addr,
            &[
                "topic",
                "create",
                "orders",
                "--partitions",
                "2",
                "--config",
                "retention.ms=60000",
            ],
        ),
        "",
    )
    .await;
    assert!(created.status.success(), "{}", text(&created.stderr));
    assert_eq!(
        text(&created.stdout),
        "created topic orders with 2 partitions\n"
    );

    let produced = corelog(
        args(
            &addr,
            &[
                "--json",
                "produce",
                "--topic",
                "orders",
                "--key-separator",
                "\\t",
                "--schema",
                "2",
            ],
        ),
        "alice\tpaid\nbob\tshipped\nalice\trefunded\n",
    )
    .await;
    assert!(produced.status.success(), "{}", text(&produced.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&produced.stdout).unwrap();
    assert_eq!(summary["records"], 3);
    assert_eq!(summary["failed"], 0);

    let consumed = corelog(
        args(
            &addr,
            &["--json", "consume", "--topic", "orders", "--from-beginning"],
        ),
        "",
    )
    .await;
    assert!(consumed.status.success(), "{}", text(&consumed.stderr));
    let records: Vec<serde_json::Value> = text(&consumed.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 3);
    let alice: Vec<&str> = records
        .iter()
        .filter(|r| r["key"] == "alice")
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(
        alice,
        ["paid", "refunded"],
        "one key, one partition, in order"
    );
    assert!(
        records
            .iter()
            .all(|r| r["schema"] == 2 && r["value_encoding"] == "utf-8")
    );

    broker.mark_deleting("old-orders");
    let listed = corelog(args(&addr, &["topic", "list"]), "").await;
    let rows: Vec<Vec<String>> = text(&listed.stdout)
        .lines()
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert!(
        rows.contains(&vec!["orders".into(), "2".into(), "ok".into()]),
        "{rows:?}"
    );
    assert!(
        rows.contains(&vec!["old-orders".into(), "0".into(), "deleting".into()]),
        "a topic whose files are being removed is listed as deleting: {rows:?}"
    );
    let described = corelog(args(&addr, &["topic", "describe", "orders"]), "").await;
    let description = text(&described.stdout);
    assert!(
        description.contains("retention.ms = 60000"),
        "{description}"
    );
    let deleted = corelog(args(&addr, &["topic", "delete", "orders"]), "").await;
    assert!(deleted.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_stops_at_max_and_prints_keys() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let addr = broker.addr();
    let produced = corelog(
        args(&addr, &["produce", "--topic", "t", "--key-separator", ":"]),
        "a:1\nb:2\nc:3\n",
    )
    .await;
    assert!(produced.status.success(), "{}", text(&produced.stderr));
    assert!(text(&produced.stdout).starts_with("produced 3 records to t\n"));
    let consumed = corelog(
        args(
            &addr,
            &["consume", "--topic", "t", "--max", "2", "--print-key"],
        ),
        "",
    )
    .await;
    assert_eq!(text(&consumed.stdout), "a\t1\nb\t2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_without_the_separator_fails_the_run() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let output = corelog(
        args(
            &broker.addr(),
            &["produce", "--topic", "t", "--key-separator", ":"],
        ),
        "a:1\nno separator\n",
    )
    .await;
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("line 2"),
        "{}",
        text(&output.stderr)
    );
    // No success text for a failed run: stderr says what was stored.
    assert!(
        !text(&output.stdout).contains("produced"),
        "{}",
        text(&output.stdout)
    );
    assert!(
        text(&output.stderr).contains("stored 1 record (line 1)"),
        "{}",
        text(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_is_an_error_with_a_hint_unless_reset_is_asked_for() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let addr = broker.addr();
    corelog(args(&addr, &["produce", "--topic", "t"]), "1\n2\n3\n").await;
    broker.delete_before("t", 0, 3, 0);
    let failed = corelog(
        args(&addr, &["consume", "--topic", "t", "--offset", "0"]),
        "",
    )
    .await;
    assert_eq!(failed.status.code(), Some(1));
    let stderr = text(&failed.stderr);
    assert!(
        stderr.contains("out of range") && stderr.contains("--on-gap reset"),
        "{stderr}"
    );
    let reset = corelog(
        args(
            &addr,
            &[
                "consume", "--topic", "t", "--offset", "0", "--on-gap", "reset",
            ],
        ),
        "",
    )
    .await;
    assert!(reset.status.success(), "{}", text(&reset.stderr));
    assert!(
        text(&reset.stderr).contains("position reset from 0 to 3"),
        "{}",
        text(&reset.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_broker_says_how_to_start_one() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let output = corelog(args(&addr, &["topic", "list"]), "").await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot connect to {addr}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("is corelogd running? start it with `make run`"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commands_list_describe_reset_with_a_reason_audit_and_delete() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    let addr = broker.addr();
    corelog(args(&addr, &["produce", "--topic", "orders"]), "1\n2\n3\n").await;

    let no_reason = corelog(
        args(
            &addr,
            &[
                "group",
                "reset-offsets",
                "search",
                "--topic",
                "orders",
                "--to-earliest",
            ],
        ),
        "",
    )
    .await;
    assert_eq!(no_reason.status.code(), Some(2), "a usage error");
    assert!(
        text(&no_reason.stderr).contains("--reason"),
        "{}",
        text(&no_reason.stderr)
    );

    let reset = corelog(
        args(
            &addr,
            &[
                "group",
                "reset-offsets",
                "search",
                "--topic",
                "orders",
                "--to-offset",
                "2",
                "--reason",
                "replay the last record",
                "--principal",
                "ops",
            ],
        ),
        "",
    )
    .await;
    assert!(reset.status.success(), "{}", text(&reset.stderr));
    assert!(
        text(&reset.stdout).contains("audit record at __audit offset 0"),
        "{}",
        text(&reset.stdout)
    );

    let listed = corelog(args(&addr, &["--json", "group", "list"]), "").await;
    let groups: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(groups[0]["group"], "search");
    assert_eq!(groups[0]["state"], "Empty");

    let described = corelog(args(&addr, &["group", "describe", "search"]), "").await;
    let description = text(&described.stdout);
    assert!(description.contains("LAG-TIME"), "{description}");
    assert!(
        description.contains("orders  0          2"),
        "{description}"
    );

    let audit = corelog(
        args(&addr, &["--json", "group", "audit", "--group", "search"]),
        "",
    )
    .await;
    let entries: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert_eq!(entries[0]["kind"], "offset-reset");
    assert_eq!(entries[0]["reason"], "replay the last record");
    assert_eq!(entries[0]["principal"], "ops");

    let deleted = corelog(args(&addr, &["group", "delete", "search"]), "").await;
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let again = corelog(args(&addr, &["group", "delete", "search"]), "").await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("UNKNOWN_GROUP"),
        "{}",
        text(&again.stderr)
    );
}
