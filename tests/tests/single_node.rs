//! A single broker driven by the client library: completeness and per-key
//! order at volume, and nothing acknowledged lost across kill -9.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use corelog_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, Producer, ProducerConfig,
    ProducerRecord, StartFrom, partition_for_key,
};
use corelog_tests::Broker;
use tokio::sync::Mutex;

fn bootstrap(broker: &Broker) -> String {
    broker.addr.to_string()
}

/// Reads every partition of `topic` from the start until at least
/// `expected` records arrived and every partition is read to its high
/// watermark (or the deadline passed): (partition, offset, key, value).
async fn read_everything(
    bootstrap: &str,
    topic: &str,
    expected: usize,
) -> Vec<(u32, u64, String, String)> {
    let mut consumer = Consumer::connect(ConsumerConfig::new(bootstrap))
        .await
        .unwrap();
    consumer
        .assign_topic(topic, StartFrom::Earliest)
        .await
        .unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (records.len() < expected || !consumer.caught_up()) && Instant::now() < deadline {
        let polled = consumer.poll().await.unwrap();
        for record in polled.records {
            records.push((
                record.partition,
                record.offset.0,
                String::from_utf8(record.key.unwrap().to_vec()).unwrap(),
                String::from_utf8(record.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_records_over_many_keys_read_back_complete_and_in_key_order() {
    let broker = Broker::start(&["--shards", "2"]);
    let bootstrap = bootstrap(&broker);
    let partitions = 8;
    Admin::connect(ClientConfig::new(bootstrap.clone()))
        .await
        .unwrap()
        .create_topic(NewTopic::new("orders", partitions))
        .await
        .unwrap();
    let producer = Producer::connect(ProducerConfig::new(bootstrap.clone()))
        .await
        .unwrap();
    let keys = 1_000u64;
    let total = 100_000u64;
    let mut deliveries = Vec::with_capacity(total as usize);
    for index in 0..total {
        let key = format!("customer-{}", index % keys);
        let value = format!("{key}:{}", index / keys);
        deliveries.push(
            producer
                .send(ProducerRecord::new("orders", value).key(key))
                .await
                .unwrap(),
        );
    }
    for delivery in deliveries {
        delivery.await.unwrap();
    }
    producer.close().await.unwrap();

    let records = read_everything(&bootstrap, "orders", total as usize).await;
    assert_eq!(records.len(), total as usize, "every record read back");
    let mut next_sequence: HashMap<String, u64> = HashMap::new();
    let mut seen = HashSet::new();
    let mut per_partition: BTreeMap<u32, u64> = BTreeMap::new();
    for (partition, offset, key, value) in &records {
        assert!(seen.insert(value.clone()), "{value} read twice");
        assert_eq!(
            *partition,
            partition_for_key(key.as_bytes(), partitions),
            "{key} routed by xxh3 % partitions"
        );
        let sequence: u64 = value.rsplit(':').next().unwrap().parse().unwrap();
        let expected = next_sequence.entry(key.clone()).or_insert(0);
        assert_eq!(sequence, *expected, "{key}: records in send order");
        *expected += 1;
        let previous = per_partition.insert(*partition, *offset);
        assert!(
            previous.is_none_or(|previous| previous < *offset),
            "offsets increase in a partition"
        );
    }
    assert_eq!(next_sequence.len() as u64, keys);
    assert!(next_sequence.values().all(|count| *count == total / keys));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_produce_run_loses_nothing_acknowledged_and_duplicates_nothing() {
    let mut broker = Broker::start(&["--shards", "2"]);
    let bootstrap = bootstrap(&broker);
    Admin::connect(ClientConfig::new(bootstrap.clone()))
        .await
        .unwrap()
        .create_topic(NewTopic::new("payments", 4))
        .await
        .unwrap();
    let producer = Producer::connect(ProducerConfig::new(bootstrap.clone()))
        .await
        .unwrap();
    let acknowledged = Arc::new(Mutex::new(Vec::<(u32, u64, String)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let producer = producer.clone();
        let acknowledged = acknowledged.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut pending = Vec::new();
            let mut index = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let value = format!("payment-{index}");
                let record =
                    ProducerRecord::new("payments", value.clone()).key(format!("k{}", index % 97));
                match producer.send(record).await {
                    Ok(delivery) => pending.push((value, delivery)),
                    Err(error) => panic!("send refused: {error}"),
                }
                index += 1;
                if index.is_multiple_of(200) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            let mut failed = 0;
            for (value, delivery) in pending {
                match delivery.await {
                    Ok(delivery) => acknowledged.lock().await.push((
                        delivery.partition,
                        delivery.offset.0,
                        value,
                    )),
                    Err(_) => failed += 1,
                }
            }
            (index, failed)
        })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    broker.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    broker.spawn();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, Ordering::Relaxed);
    let (sent, failed) = sender.await.unwrap();
    producer.close().await.unwrap();
    let acknowledged = acknowledged.lock().await.clone();
    assert!(
        acknowledged.len() > 1_000,
        "only {} of {sent} acknowledged",
        acknowledged.len()
    );

    let in_log = read_everything(&bootstrap, "payments", acknowledged.len()).await;
    // Read on until the log end: unacknowledged records may be there too.
    let mut stored: HashMap<String, (u32, u64)> = HashMap::new();
    for (partition, offset, _, value) in &in_log {
        assert!(
            stored
                .insert(value.clone(), (*partition, *offset))
                .is_none(),
            "{value} is in the log twice"
        );
    }
    for (partition, offset, value) in &acknowledged {
        assert_eq!(
            stored.get(value),
            Some(&(*partition, *offset)),
            "acknowledged {value} at {partition}/{offset} is missing or moved"
        );
    }
    eprintln!(
        "sent {sent}, acknowledged {}, failed {failed}, stored {}",
        acknowledged.len(),
        stored.len()
    );
}
