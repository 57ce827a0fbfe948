//! The `corelog` command-line tool and consumer groups against a real
//! broker: consuming as a group member.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use corelog_tests::Broker;
use corelog_tests::cli::{corelog, spawn, succeeded, text};
use serde_json::Value;

fn create_topic(addr: &str, topic: &str, partitions: u32) {
    succeeded(&corelog(
        addr,
        &[
            "topic",
            "create",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
        None,
    ));
}

fn produce(addr: &str, args: &[&str], lines: &[String]) {
    let mut all = vec!["produce"];
    all.extend_from_slice(args);
    succeeded(&corelog(addr, &all, Some(&(lines.join("\n") + "\n"))));
}

fn describe(addr: &str, group: &str) -> Value {
    let stdout = succeeded(&corelog(
        addr,
        &["--json", "group", "describe", group],
        None,
    ));
    serde_json::from_str(&stdout).unwrap()
}

/// `partition -> committed offset` of a group's description.
fn committed(description: &Value) -> Vec<(u64, Option<u64>)> {
    description["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lag| {
            (
                lag["partition"]["partition"].as_u64().unwrap(),
                lag["committed_offset"].as_u64(),
            )
        })
        .collect()
}

#[test]
fn consume_with_a_group_commits_what_it_printed_and_leaves() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "member-reads", 2);
    let lines: Vec<String> = (0..10).map(|i| format!("k{i}\tv{i}")).collect();
    produce(
        &addr,
        &["--topic", "member-reads", "--key-separator", "\\t"],
        &lines,
    );

    let first = succeeded(&corelog(
        &addr,
        &[
            "consume",
            "--topic",
            "member-reads",
            "--group",
            "readers",
            "--max",
            "4",
        ],
        None,
    ));
    assert_eq!(first.lines().count(), 4, "{first}");
    let description = describe(&addr, "readers");
    assert_eq!(
        description["members"].as_array().unwrap().len(),
        0,
        "the member left on exit: {description}"
    );
    let total: u64 = committed(&description)
        .iter()
        .map(|(_, offset)| offset.unwrap_or(0))
        .sum();
    assert_eq!(
        total, 4,
        "committed exactly what was printed: {description}"
    );

    // The next member of the group goes on from there, to the end.
    let rest = succeeded(&corelog(
        &addr,
        &["consume", "--topic", "member-reads", "--group", "readers"],
        None,
    ));
    let mut all: Vec<&str> = first.lines().chain(rest.lines()).collect();
    all.sort_unstable();
    let mut expected: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    expected.sort_unstable();
    assert_eq!(all, expected, "every record once");
    let description = describe(&addr, "readers");
    assert_eq!(description["members"].as_array().unwrap().len(), 0);
    for lag in description["partitions"].as_array().unwrap() {
        assert_eq!(lag["lag_records"], 0, "{description}");
    }
}

#[test]
fn an_interrupted_group_consumer_commits_and_leaves_at_once() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    for (signal, name) in [
        (rustix::process::Signal::INT, "interrupted"),
        (rustix::process::Signal::TERM, "terminated"),
    ] {
        create_topic(&addr, name, 1);
        let lines: Vec<String> = (0..5).map(|i| format!("v{i}")).collect();
        produce(&addr, &["--topic", name], &lines);
        let mut child = spawn(
            &addr,
            &[
                "consume",
                "--topic",
                name,
                "--group",
                name,
                "--follow",
                "--from-beginning",
            ],
        );
        let printed = Lines::of(&mut child).take(5, Duration::from_secs(30));
        assert_eq!(printed, lines, "printed from the beginning");
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, signal).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{name}: {}", text(&output.stderr));

        // Left at once, not after a session timeout.
        let description = describe(&addr, name);
        assert_eq!(
            description["members"].as_array().unwrap().len(),
            0,
            "{description}"
        );
        assert_eq!(committed(&description), vec![(0, Some(5))], "{description}");
    }
}

/// A child's stdout, read line by line on a thread so that the test can
/// wait for a line with a deadline instead of blocking on it.
struct Lines {
    receiver: mpsc::Receiver<String>,
}

impl Lines {
    fn of(child: &mut Child) -> Lines {
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { receiver }
    }

    /// The next `count` lines, or fewer if `within` passes first.
    fn take(&self, count: usize, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut lines = Vec::new();
        while lines.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.receiver.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        lines
    }
}
