//! The data directory is private to the broker's user (issue 35, item 14):
//! it holds every record and the users' credentials.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use corelog_tests::cli::{corelog, succeeded};
use corelog_tests::{Broker, free_port};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Every file and directory under `dir`, `dir` first.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    let mut index = 0;
    while index < found.len() {
        let path = found[index].clone();
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                found.push(entry.unwrap().path());
            }
        }
        index += 1;
    }
    found
}

#[test]
fn everything_the_broker_writes_is_readable_by_its_user_alone() {
    let broker = Broker::start(&[]);
    let bootstrap = broker.addr.to_string();
    succeeded(&corelog(
        &bootstrap,
        &["topic", "create", "private", "--partitions", "1"],
        None,
    ));
    succeeded(&corelog(
        &bootstrap,
        &["produce", "--topic", "private"],
        Some("a record\n"),
    ));
    succeeded(&corelog(
        &bootstrap,
        &["user", "create", "alice", "--password-stdin"],
        Some("not-for-others\n"),
    ));
    let files = walk(broker.data_dir());
    for must_exist in ["meta.properties", "controller/raft.log"] {
        assert!(
            files.contains(&broker.data_dir().join(must_exist)),
            "{must_exist} in {files:?}"
        );
    }
    assert!(
        files
            .iter()
            .any(|path| path.extension().is_some_and(|ext| ext == "log"))
    );
    for path in &files {
        let mode = mode(path);
        assert_eq!(
            mode & 0o077,
            0,
            "{} is open to other users (mode {mode:o})",
            path.display()
        );
    }
}

#[test]
fn a_data_directory_others_could_read_is_made_private_with_a_warning() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = temp.path().join("broker.log");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut broker = Broker::unstarted(addr, &data_dir, &[]).with_output_log(log.clone());
    broker.spawn();
    assert_eq!(mode(&data_dir), 0o700);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("could be read by other users") && text.contains("was=755"),
        "{text}"
    );
}
