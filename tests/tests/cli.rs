//! The `corelog` command-line tool against a real broker: topic management,
//! a produce/consume round trip through stdin and stdout, output formats,
//! and what it says when the input, the address or the arguments are wrong.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use corelog_tests::cli::{corelog, failed, succeeded, text};
use corelog_tests::{Broker, free_port};

#[test]
fn lines_produced_with_the_cli_are_consumed_back_unchanged() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    let created = corelog(
        &addr,
        &["topic", "create", "events", "--partitions", "3"],
        None,
    );
    assert!(created.status.success(), "{}", text(&created.stderr));

    let listed = corelog(&addr, &["--json", "topic", "list"], None);
    assert!(listed.status.success() && text(&listed.stdout).contains("events"));

    let lines: Vec<String> = (0..50)
        .map(|index| format!("customer{}\torder {index} paid", index % 5))
        .collect();
    let input = lines.join("\n") + "\n";
    let produced = corelog(
        &addr,
        &["produce", "--topic", "events", "--key-separator", "\t"],
        Some(&input),
    );
    assert!(produced.status.success(), "{}", text(&produced.stderr));

    let consumed = corelog(
        &addr,
        &[
            "consume",
            "--topic",
            "events",
            "--from-beginning",
            "--max",
            "50",
            "--print-key",
        ],
        None,
    );
    assert!(consumed.status.success(), "{}", text(&consumed.stderr));
    let mut got: Vec<String> = text(&consumed.stdout).lines().map(str::to_owned).collect();
    let mut expected: Vec<String> = lines.clone();
    got.sort();
    expected.sort();
    assert_eq!(got.len(), 50, "{got:?}");
    // Printed as key, a tab, and the value: the input lines exactly.
    assert_eq!(got, expected);

    let described = corelog(&addr, &["--json", "topic", "describe", "events"], None);
    assert!(described.status.success(), "{}", text(&described.stderr));
    assert!(text(&described.stdout).contains("retention.ms"));
}

#[test]
fn an_unreachable_broker_is_reported_with_what_to_do() {
    let addr = format!("127.0.0.1:{}", free_port());
    let output = corelog(&addr, &["topic", "list"], None);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(
        stderr.contains("corelogd"),
        "the message says to start the broker: {stderr}"
    );
}

#[test]
fn verify_reports_a_healthy_broker_clean_and_foreign_records_as_violations() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    let history = tempfile::NamedTempFile::new().unwrap();
    let verified = corelog(
        &addr,
        &[
            "--json",
            "verify",
            "--topic",
            "verify-clean",
            "--duration",
            "3s",
            "--rate",
            "400",
            "--history",
            history.path().to_str().unwrap(),
        ],
        None,
    );
    assert!(verified.status.success(), "{}", text(&verified.stderr));
    let report: serde_json::Value = serde_json::from_slice(&verified.stdout).unwrap();
    assert_eq!(report["clean"], true, "{report}");
    let acknowledged = report["stats"]["acknowledged"].as_u64().unwrap();
    assert!(acknowledged >= 1000, "{report}");
    let events = std::fs::read_to_string(history.path()).unwrap();
    assert!(events.lines().count() as u64 > 2 * acknowledged);

    // A record the workload never sent is in the topic: a phantom read,
    // reported with exit code 3.
    let created = corelog(
        &addr,
        &["topic", "create", "verify-dirty", "--partitions", "2"],
        None,
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    let produced = corelog(
        &addr,
        &["produce", "--topic", "verify-dirty"],
        Some("not a workload record\n"),
    );
    assert!(produced.status.success(), "{}", text(&produced.stderr));
    let verified = corelog(
        &addr,
        &["verify", "--topic", "verify-dirty", "--duration", "2s"],
        None,
    );
    assert_eq!(
        verified.status.code(),
        Some(3),
        "{}",
        text(&verified.stderr)
    );
    let table = text(&verified.stdout);
    assert!(
        table.contains("phantom reads") && table.contains("VIOLATION"),
        "{table}"
    );
}

fn create_topic(addr: &str, topic: &str, partitions: &str, extra: &[&str]) {
    let mut args = vec!["topic", "create", topic, "--partitions", partitions];
    args.extend_from_slice(extra);
    succeeded(&corelog(addr, &args, None));
}

#[test]
fn produce_says_one_record_not_one_records() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "single", "1", &[]);
    let stdout = succeeded(&corelog(
        &addr,
        &["produce", "--topic", "single"],
        Some("just one\n"),
    ));
    assert!(
        stdout.starts_with("produced 1 record to single\n"),
        "{stdout}"
    );
    let stdout = succeeded(&corelog(
        &addr,
        &["produce", "--topic", "single"],
        Some("one\ntwo\n"),
    ));
    assert!(
        stdout.starts_with("produced 2 records to single\n"),
        "{stdout}"
    );
}

#[test]
fn headers_and_timestamps_given_to_produce_come_back_through_consume_format() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "formats", "1", &[]);
    succeeded(&corelog(
        &addr,
        &[
            "produce",
            "--topic",
            "formats",
            "--key-separator",
            "\\t",
            "--header",
            "source=test",
            "--header",
            "trace=a=b",
            "--timestamp",
            "2023-11-14T22:13:20Z",
        ],
        Some("k1\tfirst value\nk2\tsecond\n"),
    ));
    let stdout = succeeded(&corelog(
        &addr,
        &[
            "consume",
            "--topic",
            "formats",
            "--format",
            "%t %p %o %k %T %h %s",
        ],
        None,
    ));
    assert_eq!(
        stdout,
        "formats 0 0 k1 1700000000000 source=test,trace=a=b first value\n\
         formats 0 1 k2 1700000000000 source=test,trace=a=b second\n"
    );
    // Escapes, a literal percent sign, and the schema version token.
    let stdout = succeeded(&corelog(
        &addr,
        &[
            "consume",
            "--topic",
            "formats",
            "--max",
            "1",
            "--format",
            "%o\\t%s\\t100%%\\t[%v]",
        ],
        None,
    ));
    assert_eq!(stdout, "0\tfirst value\t100%\t[]\n");
    // JSON carries the same headers and timestamp.
    let stdout = succeeded(&corelog(
        &addr,
        &["--json", "consume", "--topic", "formats", "--max", "1"],
        None,
    ));
    let record: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(record["timestamp"], 1_700_000_000_000_i64, "{record}");
    assert_eq!(record["headers"][1]["key"], "trace", "{record}");
    assert_eq!(record["headers"][1]["value"], "a=b", "{record}");
}

#[test]
fn an_unknown_format_token_is_a_usage_error_naming_the_valid_ones() {
    // Refused while parsing the arguments: no broker needed.
    let addr = format!("127.0.0.1:{}", free_port());
    let output = corelog(
        &addr,
        &["consume", "--topic", "t", "--format", "%o %x"],
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("%x"), "{stderr}");
    assert!(
        stderr.contains("%t") && stderr.contains("%s") && stderr.contains("%h"),
        "the message lists the tokens: {stderr}"
    );
}

#[test]
fn produce_stops_at_a_refused_line_and_says_what_was_and_was_not_sent() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "refusals", "1", &[]);
    let output = corelog(
        &addr,
        &["produce", "--topic", "refusals", "--key-separator", ":"],
        Some("a:1\nb:2\nno separator here\nd:4\n"),
    );
    let stderr = failed(&output);
    assert!(
        !text(&output.stdout).contains("produced"),
        "no success text on failure: {}",
        text(&output.stdout)
    );
    assert!(stderr.contains("line 3"), "{stderr}");
    assert!(stderr.contains("no key separator"), "{stderr}");
    assert!(
        stderr.contains("stored 2 records (lines 1-2)"),
        "what was sent: {stderr}"
    );
    assert!(
        stderr.contains("line 3 and the input after it were not sent"),
        "what was not sent: {stderr}"
    );
    let stdout = succeeded(&corelog(&addr, &["consume", "--topic", "refusals"], None));
    assert_eq!(stdout, "1\n2\n", "exactly the lines before the refused one");

    // A record over the client's limit (1 MiB) is refused by line number
    // too, before anything of it is sent.
    let input = format!("small\n{}\nafter\n", "x".repeat(2 << 20));
    let output = corelog(&addr, &["produce", "--topic", "refusals"], Some(&input));
    let stderr = failed(&output);
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("over the limit"), "{stderr}");
    assert!(stderr.contains("stored 1 record (line 1)"), "{stderr}");
}

#[test]
fn produce_names_the_lines_the_broker_refused() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(
        &addr,
        "small-records",
        "1",
        &["--config", "max.message.bytes=1024"],
    );
    let input = format!("{}\n", "y".repeat(4096));
    let output = corelog(
        &addr,
        &["produce", "--topic", "small-records"],
        Some(&input),
    );
    let stderr = failed(&output);
    assert!(
        !text(&output.stdout).contains("produced"),
        "{}",
        text(&output.stdout)
    );
    assert!(stderr.contains("MESSAGE_TOO_LARGE"), "{stderr}");
    assert!(stderr.contains("line 1 was not stored"), "{stderr}");
    assert!(stderr.contains("stored 0 records"), "{stderr}");
}

#[test]
fn consuming_from_an_offset_past_the_end_says_where_the_end_is() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "short", "1", &[]);
    succeeded(&corelog(
        &addr,
        &["produce", "--topic", "short"],
        Some("a\nb\nc\n"),
    ));
    let output = corelog(
        &addr,
        &["consume", "--topic", "short", "--offset", "10"],
        None,
    );
    let stderr = failed(&output);
    assert!(
        stderr.contains("offset 10 is past the end of the log"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the next record will be offset 3"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("retention"),
        "nothing was deleted: {stderr}"
    );
}

/// Fails the test if `corelog --bootstrap addr topic list` does not fail
/// with exit code 1 within `within`; returns its stderr.
fn topic_list_fails_within(addr: &str, within: Duration) -> String {
    let started = Instant::now();
    let output = corelog(addr, &["topic", "list"], None);
    let elapsed = started.elapsed();
    let stderr = failed(&output);
    assert!(elapsed < within, "took {elapsed:?}: {stderr}");
    stderr
}

#[test]
fn a_bootstrap_address_that_is_not_a_corelog_broker_is_named_as_such() {
    // The broker's metrics port speaks HTTP: it answers the corelog
    // handshake's bytes with `400 Bad Request` at once, well inside both
    // the client's connect timeout and the port's own request-head
    // timeout (10 s each), which used to race.
    let broker = Broker::start(&[]);
    let metrics = broker.metrics_addr.to_string();
    let stderr = topic_list_fails_within(&metrics, Duration::from_secs(5));
    assert!(stderr.contains("this is not a corelog broker"), "{stderr}");
    assert!(stderr.contains(&metrics), "{stderr}");

    // A server that answers at once with something else is named at once.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let http = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        for stream in listener.incoming().take(1) {
            let mut stream = stream.unwrap();
            let mut request = [0_u8; 64];
            // The client waits for this answer: a failed read or write here
            // fails the test (through the join below), not silently.
            let read = stream
                .read(&mut request)
                .expect("the client's handshake arrives");
            assert!(read > 0, "the client closed before its handshake");
            stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .expect("the fake HTTP server answers");
        }
    });
    let stderr = topic_list_fails_within(&http, Duration::from_secs(5));
    assert!(stderr.contains("this is not a corelog broker"), "{stderr}");
    assert!(stderr.contains("HTTP"), "what it answered: {stderr}");
    server.join().unwrap();
}

#[test]
fn a_bootstrap_host_that_does_not_resolve_is_not_told_to_start_a_broker() {
    let output = corelog("nosuchhost.invalid:7100", &["topic", "list"], None);
    let stderr = failed(&output);
    assert!(stderr.contains("nosuchhost.invalid"), "{stderr}");
    assert!(stderr.contains("did not resolve"), "{stderr}");
    assert!(!stderr.contains("make run"), "{stderr}");
}

#[test]
fn a_replication_factor_of_zero_is_refused_plainly_and_errors_print_once() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    let output = corelog(
        &addr,
        &[
            "topic",
            "create",
            "rf",
            "--partitions",
            "1",
            "--replication-factor",
            "0",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("at least 1"), "{stderr}");
    assert!(
        stderr.contains("leave out --replication-factor"),
        "says how to get the default: {stderr}"
    );

    // More replicas than brokers: the broker's refusal, said once.
    let output = corelog(
        &addr,
        &[
            "topic",
            "create",
            "rf",
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ],
        None,
    );
    let stderr = failed(&output);
    assert_eq!(
        stderr.matches("INVALID_REPLICATION_FACTOR").count(),
        1,
        "{stderr}"
    );
    let first_line = stderr.lines().next().unwrap_or_default();
    assert!(
        stderr.lines().filter(|line| *line == first_line).count() == 1,
        "{stderr}"
    );
}

#[test]
fn negative_counts_and_offsets_get_plain_messages() {
    // Refused while parsing the arguments: no broker needed.
    let addr = format!("127.0.0.1:{}", free_port());
    for (args, expected) in [
        (
            &["topic", "create", "t", "--partitions", "-1"][..],
            "a topic has at least 1 partition",
        ),
        (
            &["topic", "create", "t", "--partitions=-1"][..],
            "a topic has at least 1 partition",
        ),
        (
            &["consume", "--topic", "t", "--offset", "-5"][..],
            "offsets start at 0",
        ),
        (
            &["consume", "--topic", "t", "--partition", "-2"][..],
            "partitions are numbered from 0",
        ),
    ] {
        let output = corelog(&addr, args, None);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("invalid digit"), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
    }
}
