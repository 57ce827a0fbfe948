//! Deleting topics (issue 15, item 1): a topic of thousands of partitions
//! is deleted within its request timeout and its files go in the
//! background, listed as deleting meanwhile; a topic created right after
//! is created; and what a stopped broker left of deleted topics is removed
//! at the next start, and nothing else.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corelog_client::{Admin, ClientConfig, ErrorCode, NewTopic};
use corelog_tests::Broker;

/// Longest wait for the background removal.
const REMOVAL_DEADLINE: Duration = Duration::from_secs(60);

async fn connect_admin(broker: &Broker) -> Admin {
    Admin::connect(ClientConfig::new(broker.addr.to_string()))
        .await
        .unwrap()
}

/// The directories under `data/topics` whose name starts with `topic.`.
fn topic_dirs(data_dir: &Path, topic: &str) -> Vec<PathBuf> {
    let prefix = format!("{topic}.");
    std::fs::read_dir(data_dir.join("topics"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(&prefix))
        })
        .collect()
}

fn wait_until_gone(data_dir: &Path, topic: &str) {
    let deadline = Instant::now() + REMOVAL_DEADLINE;
    while !topic_dirs(data_dir, topic).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{topic}'s directories are still there: {:?}",
            topic_dirs(data_dir, topic)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates `topic` and waits until every partition has its leader:
/// creating thousands of partitions may take longer than the request
/// timeout (the topic is created all the same).
async fn create_large(admin: &Admin, topic: &str, partitions: u32) {
    match admin.create_topic(NewTopic::new(topic, partitions)).await {
        Ok(()) => {}
        Err(error) if error.code() == Some(ErrorCode::RequestTimedOut) => {}
        Err(error) => panic!("create {topic}: {error}"),
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let listed = admin.list_topics().await.unwrap();
        let ready = listed.iter().any(|found| {
            found.name == topic
                && found.partition_count() == partitions
                && found
                    .partitions
                    .iter()
                    .all(|partition| partition.leader.is_some() && partition.error.is_none())
        });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} never had all its leaders"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_thousands_of_partitions_answers_in_time_and_removes_them_in_the_background() {
    let broker = Broker::start(&[]);
    let admin = connect_admin(&broker).await;
    create_large(&admin, "big", 4000).await;
    assert_eq!(topic_dirs(&broker.data_dir, "big").len(), 1);

    // Closing and removing 4,000 partitions one after the other took
    // longer than the request timeout: the delete failed with
    // REQUEST_TIMED_OUT and held up the next topic change.
    let started = Instant::now();
    admin.delete_topic("big").await.unwrap();
    let delete_took = started.elapsed();
    admin.create_topic(NewTopic::new("next", 4)).await.unwrap();

    // Until its files are gone the deleted topic is listed as deleting,
    // never as a topic one could use.
    let listed = admin.list_topics().await.unwrap();
    if let Some(big) = listed.iter().find(|topic| topic.name == "big") {
        assert_eq!(big.error, Some(ErrorCode::TopicDeletionInProgress));
        assert!(big.partitions.is_empty());
    }
    assert!(
        listed
            .iter()
            .any(|topic| topic.name == "next" && topic.error.is_none())
    );

    wait_until_gone(&broker.data_dir, "big");
    let listed = admin.list_topics().await.unwrap();
    assert!(
        listed.iter().all(|topic| topic.name != "big"),
        "a removed topic is still listed: {listed:?}"
    );
    assert_eq!(topic_dirs(&broker.data_dir, "next").len(), 1);
    eprintln!("delete of 4,000 partitions answered in {delete_took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_removes_what_deleted_topics_left_and_nothing_else() {
    let mut broker = Broker::start(&[]);
    let admin = connect_admin(&broker).await;
    admin.create_topic(NewTopic::new("gone", 2)).await.unwrap();
    admin.create_topic(NewTopic::new("kept", 2)).await.unwrap();
    let gone_dir = topic_dirs(&broker.data_dir, "gone").pop().unwrap();
    admin.delete_topic("gone").await.unwrap();
    wait_until_gone(&broker.data_dir, "gone");
    drop(admin);
    assert!(broker.terminate(), "corelogd did not stop cleanly");

    // What a broker stopped in the middle of a removal leaves behind: a
    // deleted topic's directory with a partition in it. Beside it, a
    // directory whose id the metadata never handed out: not this broker's
    // to judge, so it stays.
    std::fs::create_dir_all(gone_dir.join("1")).unwrap();
    std::fs::write(gone_dir.join("1").join("00000000000000000000.log"), b"x").unwrap();
    let unknown = broker.data_dir.join("topics").join("future.999999");
    std::fs::create_dir_all(&unknown).unwrap();
    let kept = topic_dirs(&broker.data_dir, "kept");
    assert_eq!(kept.len(), 1);

    broker.spawn();
    let admin = connect_admin(&broker).await;
    wait_until_gone(&broker.data_dir, "gone");
    assert!(unknown.exists(), "a directory of an unknown id was removed");
    assert_eq!(topic_dirs(&broker.data_dir, "kept"), kept);
    let listed = admin.list_topics().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|topic| topic.name == "kept" && topic.error.is_none())
    );
}
