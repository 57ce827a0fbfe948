//! What a client is told of the broker's storage (issue 35, item 15): a
//! damaged segment is refused with the file's name and the byte, never with
//! where the broker keeps its data, which only the broker's log shows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use corelog_tests::cli::{corelog, failed, succeeded};
use corelog_tests::{Broker, free_port};

/// The first segment file of partition 0 of `topic`.
fn first_segment(data_dir: &Path, topic: &str) -> PathBuf {
    let topics = data_dir.join("topics");
    let dir = std::fs::read_dir(&topics)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(&format!("{topic}.")))
        })
        .unwrap_or_else(|| panic!("no directory of {topic} in {}", topics.display()));
    dir.join("0").join("00000000000000000000.log")
}

#[test]
fn a_damaged_segment_is_refused_without_the_brokers_paths() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let data_dir = temp.path().join("data");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut broker = Broker::unstarted(addr, &data_dir, &[]).with_output_log(log.clone());
    broker.spawn();
    let bootstrap = addr.to_string();
    // Segments of 1 MiB: the first is closed (sealed, trusted at the next
    // start) before the 3 MB below are in.
    succeeded(&corelog(
        &bootstrap,
        &[
            "topic",
            "create",
            "damaged",
            "--partitions",
            "1",
            "--config",
            "segment.bytes=1048576",
        ],
        None,
    ));
    let lines: String = (0..3_000)
        .map(|index| format!("record {index:04} {}\n", "x".repeat(1_000)))
        .collect();
    succeeded(&corelog(
        &bootstrap,
        &["produce", "--topic", "damaged"],
        Some(&lines),
    ));
    // A clean stop: the next start trusts the closed segment, and the
    // damage is found when it is read.
    assert!(broker.terminate(), "the broker stops cleanly");
    let segment = first_segment(&data_dir, "damaged");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&segment, bytes).unwrap();
    broker.spawn();

    let output = corelog(&bootstrap, &["consume", "--topic", "damaged"], None);
    let stderr = failed(&output);
    assert!(
        stderr.contains("CORRUPT_SEGMENT") && stderr.contains("00000000000000000000.log"),
        "the refusal names the damaged file: {stderr}"
    );
    let data_dir_text = data_dir.to_string_lossy();
    assert!(
        !stderr.contains(&*data_dir_text) && !stderr.contains("/topics/"),
        "the client is not told where the broker keeps its data: {stderr}"
    );
    let broker_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        broker_log.contains(&segment.to_string_lossy().into_owned()),
        "the broker's log names the file with its path"
    );
}
