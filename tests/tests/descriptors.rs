//! File descriptors are a budget the broker manages, not a bound on its
//! partitions (issue 35, item 1): a partition's files are opened through a
//! bounded cache, running out of descriptors is a retriable resource error
//! rather than a failed disk, and the controller refuses a topic that
//! would put more partition replicas on a broker than its shards may hold.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelog_client::{
    Admin, ClientConfig, ClientError, Consumer, ConsumerConfig, NewTopic, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};
use corelog_tests::process::{as_strs, member_args, voters_list};
use corelog_tests::{Broker, free_port};
use corelog_wire::error::ErrorCode;

/// The descriptor limit the brokers below run under, soft and hard: far
/// fewer than one per partition.
const DESCRIPTOR_LIMIT: u64 = 512;

/// Produces one record to every partition of `topic`, each naming its
/// partition, and waits for every acknowledgement.
async fn produce_one_per_partition(bootstrap: &str, topic: &str, partitions: u32) {
    let producer = Producer::connect(ProducerConfig::new(bootstrap))
        .await
        .unwrap();
    let mut deliveries = Vec::new();
    for partition in 0..partitions {
        let record = ProducerRecord::new(topic, format!("record of partition {partition}"))
            .partition(partition);
        deliveries.push(producer.send(record).await.unwrap());
    }
    for (partition, delivery) in deliveries.into_iter().enumerate() {
        let stored = delivery.await.unwrap_or_else(|error| {
            panic!("the record of partition {partition} was not stored: {error}")
        });
        assert_eq!(stored.partition, partition as u32);
    }
    producer.close().await.unwrap();
}

/// Reads `topic` from the start until every partition has given its one
/// record (or a minute passed); the values by partition.
async fn read_one_per_partition(bootstrap: &str, topic: &str, partitions: u32) -> Vec<String> {
    let mut consumer = Consumer::connect(ConsumerConfig::new(bootstrap))
        .await
        .unwrap();
    consumer
        .assign_topic(topic, StartFrom::Earliest)
        .await
        .unwrap();
    let mut values = vec![String::new(); partitions as usize];
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while read < partitions && Instant::now() < deadline {
        for record in consumer.poll().await.unwrap().records {
            let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
            assert!(
                values[record.partition as usize].is_empty(),
                "partition {} gave a second record: {value}",
                record.partition
            );
            values[record.partition as usize] = value;
            read += 1;
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_serves_and_restarts_with_more_partitions_than_it_may_open_files() {
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("broker.log");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut broker = Broker::unstarted(addr, &temp.path().join("data"), &[])
        .with_descriptor_limit(DESCRIPTOR_LIMIT)
        .with_output_log(log.clone());
    broker.spawn();
    let bootstrap = addr.to_string();
    let partitions = 1_200;

    Admin::connect(ClientConfig::new(bootstrap.clone()))
        .await
        .unwrap()
        .create_topic(NewTopic::new("wide", partitions))
        .await
        .unwrap();
    produce_one_per_partition(&bootstrap, "wide", partitions).await;
    assert_eq!(
        broker.exit_status(),
        None,
        "the broker exited; its log is {}",
        log.display()
    );

    // A restart opens every replica again under the same limit.
    broker.kill();
    broker.spawn();
    let values = read_one_per_partition(&bootstrap, "wide", partitions).await;
    for (partition, value) in values.iter().enumerate() {
        assert_eq!(value, &format!("record of partition {partition}"));
    }
    // And it goes on taking writes on all of them.
    produce_one_per_partition(&bootstrap, "wide", partitions).await;
    assert_eq!(broker.exit_status(), None);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("file descriptors"),
        "the broker logs its descriptor budget at start: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_topic_with_more_partitions_than_descriptors_keeps_every_broker_up() {
    let temp = tempfile::tempdir().unwrap();
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
        .collect();
    let voters = voters_list(&addrs);
    let mut brokers: Vec<Broker> = addrs
        .iter()
        .enumerate()
        .map(|(index, addr)| {
            let args = member_args(index, &voters, None, &[]);
            let dir = temp.path().join(format!("broker-{}", index + 1));
            std::fs::create_dir_all(&dir).unwrap();
            Broker::unstarted(*addr, &dir.join("data"), &as_strs(&args))
                .with_descriptor_limit(DESCRIPTOR_LIMIT)
                .with_output_log(dir.join("broker.log"))
        })
        .collect();
    for broker in &mut brokers {
        broker.spawn();
    }
    // Every broker holds a replica of every partition.
    let partitions = 800;
    let admin = Admin::connect(ClientConfig::new(addrs[0].to_string()))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut topic = NewTopic::new("replicated-wide", partitions);
        topic.replication_factor = 3;
        match admin.create_topic(topic).await {
            Ok(()) => break,
            // Until all three brokers registered, a factor of 3 is refused.
            Err(error)
                if (error.is_retriable()
                    || matches!(
                        &error,
                        ClientError::Broker {
                            code: ErrorCode::InvalidReplicationFactor,
                            ..
                        }
                    ))
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("cannot create the topic: {error}"),
        }
    }
    produce_one_per_partition(&addrs[0].to_string(), "replicated-wide", partitions).await;
    for (index, broker) in brokers.iter_mut().enumerate() {
        assert_eq!(
            broker.exit_status(),
            None,
            "broker {} exited; its log is in {}",
            index + 1,
            temp.path().display()
        );
    }
    let values = read_one_per_partition(&addrs[1].to_string(), "replicated-wide", partitions).await;
    for (partition, value) in values.iter().enumerate() {
        assert_eq!(value, &format!("record of partition {partition}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_over_a_brokers_partition_limit_is_refused_naming_the_limit() {
    let broker = Broker::start(&["--max-partitions-per-shard", "100"]);
    let bootstrap = broker.addr.to_string();
    let admin = Admin::connect(ClientConfig::new(bootstrap.clone()))
        .await
        .unwrap();
    // The internal topics hold some of the 100; whatever is left is the
    // room, which the refusal names.
    let error = admin
        .create_topic(NewTopic::new("too-wide", 100))
        .await
        .unwrap_err();
    let ClientError::Broker { code, .. } = &error else {
        panic!("expected the broker's refusal, got {error}");
    };
    assert_eq!(*code, ErrorCode::PartitionLimitReached, "{error}");
    let message = error.to_string();
    let message = message.as_str();
    assert!(
        message.contains("100 per shard") && message.contains("broker 1"),
        "the refusal names the broker and its limit: {message}"
    );
    let topics = admin.list_topics().await.unwrap();
    assert!(
        !topics.iter().any(|topic| topic.name == "too-wide"),
        "a refused topic is not created: {topics:?}"
    );
    let held = 100 - free_room(message);
    admin
        .create_topic(NewTopic::new("fits", 100 - held))
        .await
        .unwrap();
    let error = admin
        .create_topic(NewTopic::new("one-more", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            ClientError::Broker {
                code: ErrorCode::PartitionLimitReached,
                ..
            }
        ),
        "{error}"
    );
    // Deleting a topic makes room again.
    admin.delete_topic("fits").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match admin.create_topic(NewTopic::new("one-more", 1)).await {
            Ok(_) => break,
            Err(error) if Instant::now() < deadline => {
                assert!(
                    matches!(&error, ClientError::Broker { code, .. }
                        if *code == ErrorCode::PartitionLimitReached
                            || *code == ErrorCode::TopicDeletionInProgress),
                    "{error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the deleted topic's room never came back: {error}"),
        }
    }
}

/// The room a refusal says is left: N in "room for N more".
fn free_room(message: &str) -> u32 {
    message
        .split_once("room for ")
        .and_then(|(_, rest)| rest.split_once(" more"))
        .and_then(|(number, _)| number.parse().ok())
        .unwrap_or_else(|| panic!("the refusal says how many more fit: {message}"))
}
