//! How the `corelog` CLI behaves at its edges (issue 35, item 25): a
//! `--watch` whose reader goes away ends quietly instead of panicking, an
//! error is reported once, and `--bootstrap` takes a comma-separated list
//! of brokers, as Kafka's `bootstrap.servers` does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::time::{Duration, Instant};

use corelog_tests::cli::{Running, corelog, failed, spawn, succeeded, text};
use corelog_tests::{Broker, free_port};

#[test]
fn group_describe_watch_into_a_closed_pipe_ends_quietly() {
    let broker = Broker::start(&[]);
    let bootstrap = broker.addr.to_string();
    succeeded(&corelog(
        &bootstrap,
        &["topic", "create", "watched", "--partitions", "1"],
        None,
    ));
    succeeded(&corelog(
        &bootstrap,
        &["produce", "--topic", "watched"],
        Some("one\ntwo\n"),
    ));
    succeeded(&corelog(
        &bootstrap,
        &[
            "consume",
            "--topic",
            "watched",
            "--group",
            "watchers",
            "--from-beginning",
            "--max",
            "1",
        ],
        None,
    ));

    let mut watch = Running(spawn(
        &bootstrap,
        &["group", "describe", "watchers", "--watch", "1"],
    ));
    // Read the first description, then close the pipe, as `| head -3`
    // does once it has its lines.
    let mut stdout = watch.0.stdout.take().unwrap();
    let mut first = [0u8; 64];
    let read = stdout.read(&mut first).unwrap();
    assert!(read > 0, "the watch printed nothing");
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = watch.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the watch kept running after its stdout closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    watch
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        status.success() && !stderr.contains("panicked"),
        "exit {:?}; stderr: {stderr}",
        status.code()
    );
}

#[test]
fn topic_describe_of_a_missing_topic_reports_its_error_once() {
    let broker = Broker::start(&[]);
    let output = corelog(
        &broker.addr.to_string(),
        &["topic", "describe", "ghost"],
        None,
    );
    let stderr = failed(&output);
    let errors = stderr
        .lines()
        .filter(|line| line.starts_with("error:"))
        .count();
    assert_eq!(errors, 1, "stderr: {stderr}");
    assert!(stderr.contains("ghost"), "{stderr}");
    assert!(text(&output.stdout).is_empty());

    // With a topic that exists beside it: the one described, the other
    // reported once, and the exit code says something failed.
    succeeded(&corelog(
        &broker.addr.to_string(),
        &["topic", "create", "real", "--partitions", "1"],
        None,
    ));
    let output = corelog(
        &broker.addr.to_string(),
        &["topic", "describe", "ghost", "real"],
        None,
    );
    let stderr = failed(&output);
    assert_eq!(
        stderr
            .lines()
            .filter(|line| line.starts_with("error:"))
            .count(),
        1,
        "stderr: {stderr}"
    );
    assert!(
        text(&output.stdout).contains("topic real"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn bootstrap_takes_a_comma_separated_list_of_brokers() {
    let broker = Broker::start(&[]);
    // Nothing listens on the first address; the second is the broker.
    let list = format!("127.0.0.1:{}, {}", free_port(), broker.addr);
    let stdout = succeeded(&corelog(&list, &["topic", "list"], None));
    assert!(stdout.contains("__groups"), "{stdout}");
    let env = std::process::Command::new(corelog_tests::binary("corelog"))
        .args(["topic", "list"])
        .env("CORELOG_BOOTSTRAP", &list)
        .output()
        .unwrap();
    assert!(succeeded(&env).contains("__groups"));
    // An empty entry is a usage mistake, said as such.
    let output = corelog(&format!("{},", broker.addr), &["topic", "list"], None);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("bootstrap"),
        "{}",
        text(&output.stderr)
    );
}
