//! A node that lost its controller log (issue 35, item 16): it refuses to
//! start rather than begin an empty catalog, and a single node rebuilds its
//! catalog from its topic directories on request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;

use corelog_tests::cli::{corelog, succeeded};
use corelog_tests::{Broker, free_port, start_cluster};

/// The topic directories under `data_dir`, as `name.id`.
fn topic_dirs(data_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir.join("topics"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_single_node_without_its_controller_log_refuses_to_start_and_rebuilds_on_request() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut broker =
        Broker::unstarted(addr, &temp.path().join("data"), &[]).with_output_log(log.clone());
    broker.spawn();
    let bootstrap = addr.to_string();
    let cli = |args: &[&str], stdin: Option<&str>| succeeded(&corelog(&bootstrap, args, stdin));
    cli(&["topic", "create", "orders", "--partitions", "2"], None);
    cli(
        &["produce", "--topic", "orders", "--key-separator", ":"],
        Some("a:first\nb:second\nc:third\n"),
    );
    // A group's committed offsets live in `__groups`, a topic like any other.
    cli(
        &[
            "consume", "--topic", "orders", "--group", "billing", "--max", "3",
        ],
        None,
    );
    assert!(broker.terminate(), "a clean stop");
    let controller_log = broker.data_dir().join("controller/raft.log");
    std::fs::remove_file(&controller_log).unwrap();

    let refused = broker.try_spawn_logged(&log).expect_err("refuses to start");
    assert_eq!(refused.code(), Some(4), "stored data missing: exit code 4");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("raft.log is missing") && text.contains("--rebuild-catalog"),
        "the refusal says what is missing and what to do: {text}"
    );
    assert!(
        !controller_log.exists(),
        "a refused start writes no new log"
    );

    broker.extra_args.push("--rebuild-catalog".to_owned());
    broker.spawn();
    let description = cli(&["topic", "describe", "orders", "--json"], None);
    assert!(
        description.contains("\"partitions\":2"),
        "orders is back with its two partitions: {description}"
    );
    let records = cli(&["consume", "--topic", "orders", "--format", "%k=%s"], None);
    let mut records: Vec<&str> = records.lines().collect();
    records.sort_unstable();
    assert_eq!(records, ["a=first", "b=second", "c=third"]);
    // The group goes on from what it committed: nothing more to read.
    let more = cli(
        &["consume", "--topic", "orders", "--group", "billing"],
        None,
    );
    assert_eq!(more.trim(), "", "the group's offsets survived: {more}");

    // A new topic never takes an old one's id.
    cli(&["topic", "create", "other", "--partitions", "1"], None);
    let dirs = topic_dirs(broker.data_dir());
    let ids: Vec<(String, u64)> = dirs
        .iter()
        .filter_map(|dir| {
            let (name, id) = dir.rsplit_once('.')?;
            Some((name.to_owned(), id.parse().ok()?))
        })
        .collect();
    let other = ids
        .iter()
        .find(|(name, _)| name == "other")
        .map(|(_, id)| *id)
        .unwrap_or_else(|| panic!("no directory of other: {dirs:?}"));
    assert!(
        ids.iter().all(|(name, id)| name == "other" || *id < other),
        "the new topic's id is above every old one: {dirs:?}"
    );

    // From now on it starts without the flag.
    assert!(broker.terminate());
    broker.extra_args.retain(|arg| arg != "--rebuild-catalog");
    broker.spawn();
    let list = cli(&["topic", "list"], None);
    assert!(list.contains("orders") && list.contains("other"), "{list}");
}

#[test]
fn a_cluster_voter_without_its_controller_log_refuses_to_start() {
    let mut brokers = start_cluster(3, &[]);
    let voter = &mut brokers[2];
    voter.kill();
    let controller_log = voter.data_dir().join("controller/raft.log");
    std::fs::remove_file(&controller_log).unwrap();
    let log = voter.data_dir().with_file_name("broker-3.log");
    let refused = voter.try_spawn_logged(&log).expect_err("refuses to start");
    assert_eq!(refused.code(), Some(4));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("raft.log is missing") && text.contains("vote"),
        "{text}"
    );
    assert!(!controller_log.exists());
    // --rebuild-catalog is for single nodes only.
    voter.extra_args.push("--rebuild-catalog".to_owned());
    let refused = voter
        .try_spawn_logged(&log)
        .expect_err("refuses the rebuild");
    assert_eq!(refused.code(), Some(4));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("--rebuild-catalog is for a single node"),
        "{text}"
    );
}
