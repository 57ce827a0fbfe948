//! A start that takes a while (issue 15, item 4): a single node restarted
//! after kill -9 with a thousand partitions accepts connections only once
//! it can serve them, so the first connection that gets through is
//! answered at once, and `corelogd ready` is logged only then; and a
//! client that connects right after the kill, while the dead broker's
//! listener may still accept and reset, reads what it wrote.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelog_tests::process::free_port;
use corelog_tests::wire_client::{self as support, ask};
use corelog_tests::{Broker, Client, batch};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::metadata::{MetadataRequest, MetadataResponse};

const PARTITIONS: u32 = 1000;

fn metadata(client: &mut Client) -> MetadataResponse {
    ask(
        client,
        &MetadataRequest {
            topics: Some(vec!["wide".to_owned()]),
        },
    )
}

fn all_led(response: &MetadataResponse) -> bool {
    response.topics.iter().any(|topic| {
        topic.partitions.len() == PARTITIONS as usize
            && topic
                .partitions
                .iter()
                .all(|partition| partition.leader.is_some() && partition.error_code == 0)
    })
}

#[test]
fn a_restarted_node_accepts_connections_only_once_it_serves_and_then_logs_ready() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut broker =
        Broker::unstarted(addr, &temp.path().join("data"), &[]).with_output_log(log.clone());
    broker.spawn();
    let mut client = broker.client();
    // Creating a thousand partitions may outlast the request timeout.
    let created = client.create_topic("wide", PARTITIONS, &[]);
    assert!(
        matches!(created, ErrorCode::None | ErrorCode::RequestTimedOut),
        "{created:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !all_led(&metadata(&mut client)) {
        assert!(Instant::now() < deadline, "the partitions never all led");
        std::thread::sleep(Duration::from_millis(200));
    }
    let records = batch("v", "k", 3, ProducerIdentity::NONE);
    assert_eq!(client.produce("wide", 0, &records).0, ErrorCode::None);
    drop(client);
    broker.kill();
    // A killed broker's listener can linger while the kernel tears its
    // io_uring down, accepting and then resetting (the client library
    // retries those; see the next test). This one watches its successor.
    let gone = Instant::now() + Duration::from_secs(10);
    while Client::connect(addr).is_ok() {
        assert!(
            Instant::now() < gone,
            "the killed broker's port still accepts"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before_restart = std::fs::read_to_string(&log).unwrap().len();

    broker.spawn_unwaited();
    let started = Instant::now();
    let mut client = loop {
        if let Ok(client) = Client::connect(addr) {
            break client;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the restarted broker never accepted a connection"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let accepted_after = started.elapsed();
    // Before, the port accepted at once and this waited in the backlog for
    // as long as the partitions took to open.
    client.handshake().unwrap();
    let response = metadata(&mut client);
    let answered_in = started.elapsed() - accepted_after;
    assert!(all_led(&response), "accepted before every partition led");
    assert!(
        answered_in < Duration::from_secs(2),
        "the first accepted connection waited {answered_in:?} for its answers"
    );
    let fetched = client.fetch("wide", 0, 0, 0);
    assert_eq!(fetched.code, ErrorCode::None);
    assert_eq!(support::values(&fetched.records).len(), 3);

    // `corelogd ready` comes after every partition took its leadership.
    let restarted = std::fs::read_to_string(&log).unwrap()[before_restart..].to_owned();
    let ready = restarted
        .find("corelogd ready")
        .expect("corelogd ready is logged");
    let last_lead = restarted
        .rfind("replica role follows metadata")
        .expect("the partitions took their roles");
    assert!(
        last_lead < ready,
        "ready was logged before the last partition led:\n{restarted}"
    );
    eprintln!("accepted after {accepted_after:?}, answered in {answered_in:?}");

    // Closing a thousand partitions outlasts the broker session: the node
    // must not fence itself meanwhile (a warning per partition, each left
    // leaderless, and Raft entries the next start undoes).
    let before_stop = std::fs::read_to_string(&log).unwrap().len();
    assert!(broker.terminate(), "corelogd did not stop cleanly");
    let stopping = std::fs::read_to_string(&log).unwrap()[before_stop..].to_owned();
    assert!(stopping.contains("corelogd stopped"), "{stopping}");
    assert!(
        !stopping.contains("session expired") && !stopping.contains("no majority"),
        "the stopping node fenced itself:\n{stopping}"
    );
}

#[test]
fn a_client_issued_right_after_a_kill_and_restart_reads_its_records() {
    use corelog_client::{Admin, ClientConfig, ClientError, Consumer, ConsumerConfig, StartFrom};
    let mut broker = Broker::start(&[]);
    let mut client = broker.client();
    assert_eq!(client.create_topic("four", 4, &[]), ErrorCode::None);
    let records = batch("v", "k", 5, ProducerIdentity::NONE);
    assert_eq!(client.produce("four", 2, &records).0, ErrorCode::None);
    drop(client);
    for round in 0..3 {
        broker.kill();
        broker.spawn_unwaited();
        corelog_tests::cluster_client::client_runtime().block_on(async {
            let bootstrap = broker.addr.to_string();
            let started = Instant::now();
            // Refused until the broker listens; anything else must work.
            let admin = loop {
                match Admin::connect(ClientConfig::new(bootstrap.clone())).await {
                    Ok(admin) => break admin,
                    Err(ClientError::Connect { .. }) => {
                        assert!(
                            started.elapsed() < Duration::from_secs(60),
                            "never listened"
                        );
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(error) => panic!("round {round}: the first connection failed: {error}"),
                }
            };
            let topics = admin.list_topics().await.unwrap();
            assert!(topics.iter().any(|topic| topic.name == "four"));
            let mut consumer = Consumer::connect(ConsumerConfig::new(bootstrap))
                .await
                .unwrap();
            consumer
                .assign_partitions("four", &[2], StartFrom::Earliest)
                .await
                .unwrap();
            let mut read = 0;
            while read < 5 {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "read {read} of 5"
                );
                read += consumer.poll().await.unwrap().records.len();
            }
        });
    }
}
