//! A data directory belongs to one node of one cluster (issue 15, item 2):
//! the first start records both in `meta.properties`, and a start as
//! another node, or for another cluster, is refused with exit code 2 and a
//! message naming both ids, before anything in the directory is opened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use corelog_tests::Broker;
use corelog_tests::process::free_port;

#[test]
fn a_directory_of_another_node_or_cluster_is_refused_and_its_own_node_starts() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let log = temp.path().join("broker.log");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut broker = Broker::unstarted(addr, &data_dir, &["--node-id", "1"]);
    broker
        .try_spawn_logged(&log)
        .expect("node 1 starts on a new directory");
    assert!(broker.terminate(), "corelogd did not stop cleanly");
    let meta = std::fs::read_to_string(data_dir.join("meta.properties")).unwrap();
    assert!(meta.contains("node.id=1\n"), "{meta}");
    let cluster_id = meta
        .lines()
        .find_map(|line| line.strip_prefix("cluster.id="))
        .expect("a cluster id is recorded")
        .to_owned();

    // Node 2 on node 1's directory: it would have voted with node 1's
    // controller log.
    broker.extra_args = vec!["--node-id".into(), "2".into()];
    let status = broker
        .try_spawn_logged(&log)
        .expect_err("node 2 is refused on node 1's directory");
    assert_eq!(status.code(), Some(2), "{}", output(&log));
    let said = output(&log);
    assert!(said.contains("belongs to node 1"), "{said}");
    assert!(said.contains("--node-id 2"), "{said}");

    broker.extra_args = vec![
        "--node-id".into(),
        "1".into(),
        "--cluster-id".into(),
        "another-cluster".into(),
    ];
    let status = broker
        .try_spawn_logged(&log)
        .expect_err("another cluster's id is refused");
    assert_eq!(status.code(), Some(2), "{}", output(&log));
    let said = output(&log);
    assert!(
        said.contains(&format!("belongs to cluster {cluster_id}")),
        "{said}"
    );
    assert!(said.contains("--cluster-id another-cluster"), "{said}");

    // Its own node and cluster start, and nothing was rewritten.
    broker.extra_args = vec![
        "--node-id".into(),
        "1".into(),
        "--cluster-id".into(),
        cluster_id,
    ];
    broker.try_spawn_logged(&log).expect("node 1 starts again");
    assert!(broker.terminate(), "corelogd did not stop cleanly");
    assert_eq!(
        std::fs::read_to_string(data_dir.join("meta.properties")).unwrap(),
        meta
    );
}

fn output(log: &std::path::Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}
