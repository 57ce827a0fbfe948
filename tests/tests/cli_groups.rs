//! The `corelog` command-line tool and consumer groups against a real
//! broker: consuming as a group member, the offset reset modes and their
//! audit records, and watching a group's lag.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use corelog_tests::Broker;
use corelog_tests::cli::{corelog, failed, spawn, succeeded, text};
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

fn reset(addr: &str, group: &str, topic: &str, target: &[&str]) -> Output {
    let mut args = vec![
        "--json",
        "group",
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--reason",
        "test",
    ];
    args.extend_from_slice(target);
    corelog(addr, &args, None)
}

/// `(partition, after)` of a successful reset's JSON outcome.
fn moved(output: &Output) -> Vec<(u64, u64)> {
    let outcome: Value = serde_json::from_str(&succeeded(output)).unwrap();
    outcome["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["partition"].as_u64().unwrap(),
                p["after"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn audit_count(addr: &str, group: &str) -> usize {
    let stdout = succeeded(&corelog(
        addr,
        &["--json", "group", "audit", "--group", group],
        None,
    ));
    let entries: Value = serde_json::from_str(&stdout).unwrap();
    entries
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["kind"] == "offset-reset")
        .count()
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
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

    // The next member of the group goes on from there, to the end:
    // --from-beginning applies only where the group has no offset.
    let rest = succeeded(&corelog(
        &addr,
        &[
            "consume",
            "--topic",
            "member-reads",
            "--group",
            "readers",
            "--from-beginning",
        ],
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

    /// Reads until a line satisfies `wanted` and returns it, or `None` if
    /// `within` passes (or the output ends) first.
    fn find(&self, within: Duration, wanted: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.receiver.recv_timeout(left).ok()?;
            if wanted(&line) {
                return Some(line);
            }
        }
    }
}

#[test]
fn reset_by_duration_moves_to_the_first_record_inside_the_window() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "timed", 1);
    let two_hours_ago = (now_ms() - 2 * 3_600_000).to_string();
    let old: Vec<String> = (0..3).map(|i| format!("old{i}")).collect();
    produce(
        &addr,
        &["--topic", "timed", "--timestamp", &two_hours_ago],
        &old,
    );
    let new: Vec<String> = (0..2).map(|i| format!("new{i}")).collect();
    produce(&addr, &["--topic", "timed"], &new);

    let dry = reset(
        &addr,
        "replayer",
        "timed",
        &["--by-duration", "1h", "--dry-run"],
    );
    assert_eq!(moved(&dry), vec![(0, 3)]);
    assert_eq!(
        audit_count(&addr, "replayer"),
        0,
        "a dry run writes nothing"
    );
    assert_eq!(
        moved(&reset(&addr, "replayer", "timed", &["--by-duration", "1h"])),
        vec![(0, 3)]
    );
    assert_eq!(
        moved(&reset(&addr, "replayer", "timed", &["--by-duration", "3h"])),
        vec![(0, 0)]
    );
    assert_eq!(audit_count(&addr, "replayer"), 2, "each reset is audited");
    assert_eq!(committed(&describe(&addr, "replayer")), vec![(0, Some(0))]);
}

#[test]
fn reset_shift_by_moves_relative_to_the_commit_within_the_log() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "shifted", 1);
    let lines: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    produce(&addr, &["--topic", "shifted"], &lines);
    assert_eq!(
        moved(&reset(&addr, "shifter", "shifted", &["--to-offset", "5"])),
        vec![(0, 5)]
    );
    assert_eq!(
        moved(&reset(&addr, "shifter", "shifted", &["--shift-by", "-2"])),
        vec![(0, 3)]
    );
    assert_eq!(
        moved(&reset(&addr, "shifter", "shifted", &["--shift-by=4"])),
        vec![(0, 7)]
    );
    // Clamped to the log: never before its start nor past its end.
    assert_eq!(
        moved(&reset(&addr, "shifter", "shifted", &["--shift-by", "100"])),
        vec![(0, 10)]
    );
    assert_eq!(
        moved(&reset(&addr, "shifter", "shifted", &["--shift-by", "-100"])),
        vec![(0, 0)]
    );
    assert_eq!(audit_count(&addr, "shifter"), 5);

    // A group with no committed offset has nothing to shift from.
    let output = reset(&addr, "newcomer", "shifted", &["--shift-by", "1"]);
    let stderr = failed(&output);
    assert!(stderr.contains("no committed offset"), "{stderr}");
}

#[test]
fn reset_to_group_copies_another_groups_positions_in_one_audited_step() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "copied", 2);
    let lines: Vec<String> = (0..20).map(|i| format!("k{i}\tv{i}")).collect();
    produce(
        &addr,
        &["--topic", "copied", "--key-separator", "\\t"],
        &lines,
    );
    moved(&reset(
        &addr,
        "original",
        "copied",
        &["--partition", "0", "--to-offset", "3"],
    ));
    moved(&reset(
        &addr,
        "original",
        "copied",
        &["--partition", "1", "--to-offset", "1"],
    ));
    assert_eq!(
        moved(&reset(&addr, "copy", "copied", &["--to-group", "original"])),
        vec![(0, 3), (1, 1)]
    );
    assert_eq!(
        committed(&describe(&addr, "copy")),
        vec![(0, Some(3)), (1, Some(1))]
    );
    assert_eq!(audit_count(&addr, "copy"), 1, "one reset, one audit record");

    let output = reset(&addr, "copy", "copied", &["--to-group", "no-such-group"]);
    let stderr = failed(&output);
    assert!(
        stderr.contains("group no-such-group does not exist"),
        "{stderr}"
    );
}

#[test]
fn a_dry_run_reset_of_a_missing_group_says_the_group_does_not_exist() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "planned", 1);
    let output = corelog(
        &addr,
        &[
            "group",
            "reset-offsets",
            "not-yet",
            "--topic",
            "planned",
            "--to-earliest",
            "--reason",
            "plan",
            "--dry-run",
        ],
        None,
    );
    let stdout = succeeded(&output);
    assert!(stdout.contains("group not-yet does not exist"), "{stdout}");
    assert_eq!(audit_count(&addr, "not-yet"), 0);
}

#[test]
fn describe_watch_refreshes_the_lag_until_stopped() {
    let broker = Broker::start(&[]);
    let addr = broker.addr.to_string();
    create_topic(&addr, "watched", 1);
    let lines: Vec<String> = (0..3).map(|i| format!("v{i}")).collect();
    produce(&addr, &["--topic", "watched"], &lines);
    moved(&reset(&addr, "watchers", "watched", &["--to-earliest"]));

    let mut child = spawn(
        &addr,
        &["--json", "group", "describe", "watchers", "--watch", "1"],
    );
    let lag = |line: &str| {
        let description: Value = serde_json::from_str(line).unwrap();
        description["partitions"][0]["lag_records"]
            .as_u64()
            .unwrap()
    };
    let refreshes = Lines::of(&mut child);
    let first = refreshes.take(1, Duration::from_secs(20));
    assert_eq!(first.len(), 1, "one JSON description per refresh");
    assert_eq!(lag(&first[0]), 3, "{first:?}");
    produce(&addr, &["--topic", "watched"], &lines);
    let refreshed = refreshes.find(Duration::from_secs(20), |line| lag(line) == 6);
    // It runs until stopped: still running after two refreshes.
    let still_running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(refreshed.is_some(), "a later refresh shows the new lag");
    assert!(still_running, "--watch keeps refreshing until interrupted");
}
