//! A single node is a cluster of one: a one-voter controller, partitions
//! replicated over a replica set of one. What that promises, against real
//! `corelogd` processes: it serves only once its partitions are led, a
//! kill -9 and restart keeps everything, it takes no inter-broker traffic
//! from the network, and it becomes the first broker of a larger cluster
//! when restarted as the only voter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corelog_client::{Admin, ClientConfig, NewTopic, Producer, ProducerConfig, ProducerRecord};
use corelog_tests::process::{binary, member_args};
use corelog_tests::{Broker, Client, batch, free_port, values};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;

#[test]
fn a_restarted_single_node_accepts_connections_only_once_its_partitions_are_led() {
    let mut broker = Broker::start(&["--shards", "2"]);
    let mut client = broker.client();
    assert_eq!(client.create_topic("orders", 8, &[]), ErrorCode::None);
    for partition in 0..8 {
        let records = batch("before", "k", 2, ProducerIdentity::NONE);
        assert_eq!(
            client.produce("orders", partition, &records),
            (ErrorCode::None, 0),
            "a new partition's first record is at offset 0"
        );
    }
    for _ in 0..3 {
        broker.kill();
        broker.spawn();
        // The first request on the first connection already finds every
        // partition led (an election ran after the restart).
        let mut client = broker.client();
        for partition in 0..8 {
            let (code, offset) = client.produce(
                "orders",
                partition,
                &batch("after", "k", 1, ProducerIdentity::NONE),
            );
            assert_eq!(
                code,
                ErrorCode::None,
                "partition {partition} right after a restart"
            );
            assert!(offset >= 2, "after what was acknowledged: {offset}");
        }
    }
    let mut client = broker.client();
    for partition in 0..8 {
        let fetched = client.fetch("orders", partition, 0, 0);
        let read = values(&fetched.records);
        assert_eq!(
            read.iter()
                .filter(|value| value.starts_with("before"))
                .count(),
            2,
            "partition {partition}: {read:?}"
        );
        assert_eq!(
            read.iter()
                .filter(|value| value.starts_with("after"))
                .count(),
            3,
            "partition {partition}: {read:?}"
        );
    }
}

#[test]
fn a_relative_data_dir_is_resolved_and_served() {
    // `make run` starts corelogd with the default `--data-dir data`.
    let work = tempfile::tempdir().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut child = Command::new(binary("corelogd"))
        .current_dir(work.path())
        .args(["--listen", &addr.to_string()])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--shards", "1", "--disk-reserve-bytes", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut client = loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "corelogd exited with a relative data directory"
        );
        if let Ok(mut client) = Client::connect(addr)
            && client.handshake().is_ok()
        {
            break client;
        }
        assert!(Instant::now() < deadline, "corelogd did not become ready");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(client.create_topic("orders", 1, &[]), ErrorCode::None);
    let (code, _) = client.produce("orders", 0, &batch("m", "k", 1, ProducerIdentity::NONE));
    assert_eq!(code, ErrorCode::None);
    assert!(work.path().join("data/controller/raft.log").exists());
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_single_node_restarted_as_the_only_voter_is_joined_by_more_brokers() {
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
        .collect();
    let mut first = Broker::start_at(addrs[0], &[]);
    let mut client = first.client();
    assert_eq!(client.create_topic("before", 2, &[]), ErrorCode::None);
    let (code, _) = client.produce("before", 0, &batch("kept", "k", 3, ProducerIdentity::NONE));
    assert_eq!(code, ErrorCode::None);
    drop(client);
    // The same node, now a one-voter cluster that others may join.
    let voters = format!("1@{}", addrs[0]);
    assert!(first.terminate());
    first.extra_args = member_args(0, &voters, None, &[]);
    first.spawn();
    let _others: Vec<Broker> = (1..3)
        .map(|index| {
            let args = member_args(index, &voters, None, &[]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Broker::start_at(addrs[index], &args)
        })
        .collect();
    // A cluster member accepts connections at once; the old topic is
    // served once the restarted node has been elected its leader again.
    let mut client = first.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    let fetched = loop {
        let fetched = client.fetch("before", 0, 0, 0);
        if fetched.code == ErrorCode::None {
            break fetched;
        }
        assert!(
            fetched.code.is_retriable() && Instant::now() < deadline,
            "the old topic is not served: {fetched:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        values(&fetched.records).len(),
        3,
        "the old topic kept its records"
    );
    let bootstrap = first.addr.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let admin = Admin::connect(ClientConfig::new(bootstrap.clone()))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        // Replication factor 3 needs the two new brokers registered.
        while let Err(error) = admin
            .create_topic(NewTopic::new("after", 1).replication_factor(3))
            .await
        {
            assert!(
                Instant::now() < deadline,
                "a topic of three replicas was not accepted: {error}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let producer = Producer::connect(ProducerConfig::new(bootstrap))
            .await
            .unwrap();
        let delivery = producer
            .send(ProducerRecord::new("after", "replicated").key("k"))
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(delivery.offset.0, 0);
        producer.close().await.unwrap();
    });
}
