//! Overload without collapse against a real broker: a shard admits only
//! `--produce-bytes-in-flight-max` of produce work at once and pushes the
//! rest back to the producers, whose buffers block `send` (and fail
//! `try_send`) instead of records timing out inside the broker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use corelog_client::{
    Admin, ClientConfig, ClientError, NewTopic, Producer, ProducerConfig, ProducerRecord,
};
use corelog_tests::Broker;
use corelog_tests::edge::metric;

/// The least bound the broker accepts: a few dozen 1 KiB records.
const TINY_BOUND: &str = "65536";

async fn topic(broker: &Broker, name: &str, partitions: u32) {
    Admin::connect(ClientConfig::new(broker.addr.to_string()))
        .await
        .unwrap()
        .create_topic(NewTopic::new(name, partitions))
        .await
        .unwrap();
}

/// Checks that the offsets acknowledged per partition are exactly
/// `0..n`: every record appended once, none lost, none twice.
fn assert_dense(offsets: BTreeMap<u32, Vec<u64>>) {
    for (partition, mut offsets) in offsets {
        offsets.sort_unstable();
        let expected: Vec<u64> = (0..offsets.len() as u64).collect();
        assert_eq!(offsets, expected, "partition {partition}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_in_flight_bound_throttles_aggressive_producers_and_fails_nothing() {
    let broker = Broker::start(&["--produce-bytes-in-flight-max", TINY_BOUND]);
    topic(&broker, "hot", 16).await;
    let value = vec![b'v'; 1024];
    let producers = 8;
    let per_producer = 1_500u32;
    let mut tasks = Vec::new();
    for producer_index in 0..producers {
        let bootstrap = broker.addr.to_string();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let producer = Producer::connect(ProducerConfig {
                // Everything goes out at once: the broker is what holds it.
                linger: Duration::ZERO,
                batch_bytes: 4 << 10,
                ..ProducerConfig::new(bootstrap)
            })
            .await
            .unwrap();
            let mut deliveries = Vec::new();
            for index in 0..per_producer {
                let record = ProducerRecord::new("hot", value.clone())
                    .key(format!("{producer_index}-{index}"));
                deliveries.push(producer.send(record).await.unwrap());
            }
            let mut acknowledged = Vec::new();
            for delivery in deliveries {
                let delivered = delivery.await.expect("no record fails under load alone");
                acknowledged.push((delivered.partition, delivered.offset.0));
            }
            producer.close().await.unwrap();
            acknowledged
        }));
    }
    let mut offsets: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for task in tasks {
        for (partition, offset) in task.await.unwrap() {
            offsets.entry(partition).or_default().push(offset);
        }
    }
    let total: usize = offsets.values().map(Vec::len).sum();
    assert_eq!(total, (producers * per_producer) as usize);
    assert_dense(offsets);
    assert!(
        metric(&broker, "corelog_produce_admission_waits_total", "") > 0,
        "the bound was never reached: the test pushed nothing back"
    );
    assert_eq!(
        metric(&broker, "corelog_produce_bytes_in_flight", ""),
        0,
        "every admitted byte is given back"
    );
    assert_eq!(metric(&broker, "corelog_errors_total", ""), 0);
}

/// With a broker pushing back, a small producer buffer fills: `try_send`
/// says so with a typed error, `send` waits for room, and every record
/// that was taken is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_buffer_blocks_send_and_fails_try_send_under_a_throttling_broker() {
    let broker = Broker::start(&["--produce-bytes-in-flight-max", TINY_BOUND]);
    topic(&broker, "hot", 4).await;
    let buffer_bytes = 64 << 10;
    let producer = Producer::connect(ProducerConfig {
        buffer_bytes,
        record_bytes_max: 4 << 10,
        linger: Duration::ZERO,
        ..ProducerConfig::new(broker.addr.to_string())
    })
    .await
    .unwrap();
    producer.prepare_topic("hot").await.unwrap();
    let value = vec![b'v'; 1024];
    let mut deliveries = Vec::new();
    let mut refused = 0u32;
    let mut index = 0u32;
    while deliveries.len() < 3_000 {
        let record = ProducerRecord::new("hot", value.clone()).key(format!("k{index}"));
        index += 1;
        match producer.try_send(record) {
            Ok(delivery) => deliveries.push(delivery),
            Err(ClientError::BufferFull {
                buffer_bytes: reported,
            }) => {
                assert_eq!(reported, buffer_bytes);
                refused += 1;
                // Waits for room instead.
                let record = ProducerRecord::new("hot", value.clone()).key(format!("k{index}"));
                index += 1;
                deliveries.push(producer.send(record).await.unwrap());
            }
            Err(other) => panic!("try_send failed with {other}"),
        }
    }
    assert!(refused > 0, "the buffer never filled: nothing pushed back");
    let mut offsets: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for delivery in deliveries {
        let delivered = delivery.await.expect("a record taken is acknowledged");
        offsets
            .entry(delivered.partition)
            .or_default()
            .push(delivered.offset.0);
    }
    assert_dense(offsets);
    producer.close().await.unwrap();
}

/// A record that never left the buffer before its delivery timeout fails
/// with an error that says so (not appended, the brokers pushed back), not
/// with the last error of some attempt, nor as if replicas were missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_never_left_the_buffer_says_so_when_it_times_out() {
    let broker = Broker::start(&[]);
    topic(&broker, "stuck", 1).await;
    let mut client = ClientConfig::new(broker.addr.to_string());
    client.request_timeout = Duration::from_millis(1_200);
    let producer = Producer::connect(ProducerConfig {
        client,
        // One batch of one record in flight; everything else waits here.
        max_in_flight_per_partition: 1,
        batch_bytes: 1 << 10,
        delivery_timeout: Duration::from_millis(1_500),
        ack_timeout: Duration::from_millis(1_000),
        linger: Duration::ZERO,
        ..ProducerConfig::new(broker.addr.to_string())
    })
    .await
    .unwrap();
    producer.prepare_topic("stuck").await.unwrap();
    // The broker stops answering (and reading): the first batch is sent,
    // the others stay in the buffer.
    broker.pause();
    let value = vec![b'v'; 900];
    let mut deliveries = Vec::new();
    for _ in 0..4 {
        deliveries.push(
            producer
                .send(ProducerRecord::new("stuck", value.clone()))
                .await
                .unwrap(),
        );
    }
    let mut never_sent = 0;
    for delivery in deliveries {
        match delivery.await {
            Err(ClientError::BufferTimeout {
                topic, partition, ..
            }) => {
                assert_eq!((topic.as_str(), partition), ("stuck", 0));
                never_sent += 1;
            }
            Err(ClientError::DeliveryTimeout { .. } | ClientError::Aborted { .. }) => {}
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    assert!(never_sent >= 2, "{never_sent} records reported never sent");
    broker.resume();
}
