//! Real brokers behind the seeded fault proxy (`corelog_tests::proxy`):
//! frames delayed, reordered, duplicated, dropped, corrupted and replies
//! lost after the broker acted. The oracle is the usual one: every
//! acknowledged record reads back exactly once once the faults stop, and
//! no record (acknowledged or not) is ever stored twice.
//!
//! Each test asserts from the proxies' counters that the faults it relies
//! on really happened, so that a proxy that silently forwarded everything
//! would fail it. The tests run one at a time: brokers on a small machine
//! starve one another's heartbeats. Seeds are printed; a failure names the
//! seed, and `PROXY_SEED=<seed>` replays its fault choices.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};
use corelog_tests::cluster_client::{self, client_runtime, serial};
use corelog_tests::process::start_cluster_behind_proxies;
use corelog_tests::proxy::{FaultProxy, Faults};
use corelog_tests::{Broker, free_port};

/// The seed: `PROXY_SEED` to replay, else `default`.
fn seed(default: u64) -> u64 {
    let seed = std::env::var("PROXY_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default);
    println!("fault proxy seed {seed} (replay: PROXY_SEED={seed})");
    seed
}

/// The shared test settings with a shorter request timeout and faster
/// reconnects: the faults need many retries.
fn client_config(bootstrap: Vec<String>) -> ClientConfig {
    let mut config = cluster_client::client_config(bootstrap);
    config.request_timeout = Duration::from_secs(5);
    config.reconnect_backoff = Duration::from_millis(20);
    config
}

/// Retries quickly, and long enough to outlast the faults.
fn producer_config(bootstrap: Vec<String>) -> ProducerConfig {
    let mut config = ProducerConfig::new(bootstrap[0].clone());
    config.client = client_config(bootstrap);
    config.linger = Duration::from_millis(1);
    config.retry_backoff = Duration::from_millis(10);
    config.retry_backoff_max = Duration::from_millis(200);
    config.ack_timeout = Duration::from_secs(4);
    config.delivery_timeout = Duration::from_secs(30);
    config
}

/// Runs `attempt` until it succeeds or `within` passes.
async fn retry<T, F, Fut>(what: &str, within: Duration, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, corelog_client::ClientError>>,
{
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("{what} failed for {within:?}: {error}"),
        }
    }
}

/// Creates `topic` and waits until every partition has a leader.
async fn create_topic(bootstrap: Vec<String>, topic: NewTopic, partitions: u32) {
    let name = topic.name.clone();
    let admin = retry(
        "connecting an admin client",
        Duration::from_secs(20),
        || Admin::connect(client_config(bootstrap.clone())),
    )
    .await;
    retry("creating the topic", Duration::from_secs(20), || async {
        match admin.create_topic(topic.clone()).await {
            // A lost reply: the first attempt created it.
            Err(corelog_client::ClientError::Broker {
                code: corelog_client::ErrorCode::TopicAlreadyExists,
                ..
            }) => Ok(()),
            other => other,
        }
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(metadata) = admin.metadata().await
            && let Some(found) = metadata.topics.get(&name)
            && found.partitions.len() == partitions as usize
            && found.partitions.iter().all(|p| p.leader.is_some())
        {
            return;
        }
        assert!(Instant::now() < deadline, "{name} has no leaders");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every record of `topic` from the earliest offset, as
/// `(partition, offset, value)`, once `expected` were read and the
/// consumer caught up.
async fn read_all(bootstrap: Vec<String>, topic: &str, expected: usize) -> Vec<(u32, u64, String)> {
    let mut config = ConsumerConfig::new(bootstrap[0].clone());
    config.client = client_config(bootstrap);
    let mut consumer = retry("connecting a consumer", Duration::from_secs(20), || {
        Consumer::connect(config.clone())
    })
    .await;
    consumer
        .assign_topic(topic, StartFrom::Earliest)
        .await
        .unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while records.len() < expected || !consumer.caught_up() {
        assert!(
            Instant::now() < deadline,
            "read {} of {expected} records of {topic}",
            records.len()
        );
        let polled = consumer.poll().await.unwrap();
        for record in polled.records {
            let value = String::from_utf8_lossy(&record.value.unwrap_or_default()).into_owned();
            records.push((record.partition, record.offset.0, value));
        }
    }
    records
}

/// `Producer::send`, again while it fails with a retriable error. `send`
/// looks the topic up when its metadata is not cached, and hands a lost
/// connection during that lookup back to the caller instead of retrying
/// it; the record is not buffered then, so sending it again cannot
/// duplicate it.
async fn send_retrying(
    producer: &Producer,
    record: ProducerRecord,
) -> Result<corelog_client::DeliveryFuture, corelog_client::ClientError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match producer.send(record.clone()).await {
            Err(error) if error.is_retriable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// A value of about 700 bytes, so that with `batch_bytes` at its 1 KiB
/// minimum every batch holds one record: many produce requests, up to
/// five in flight per partition.
fn value(index: usize) -> String {
    format!("r-{index:05}-{}", ".".repeat(700))
}

fn index_of(value: &str) -> usize {
    value[2..7].parse().unwrap()
}

/// Test 1: one broker behind a proxy that duplicates requests, loses
/// replies after the broker acted and drops frames. The idempotent
/// producer's retries (same producer id and sequence) must store each
/// record exactly once, in send order.
#[test]
fn idempotent_producer_through_duplicates_lost_replies_and_drops_stores_each_record_once() {
    let _serial = serial();
    let seed = seed(0x6_0001);
    let rt = client_runtime();
    let port = free_port();
    let proxy_addr = SocketAddr::from(([127, 0, 0, 21], port));
    let proxy = FaultProxy::start(proxy_addr, SocketAddr::from(([127, 0, 0, 1], port)), seed)
        .expect("the proxy binds");
    let _broker = Broker::start_at(
        SocketAddr::from(([127, 0, 0, 1], port)),
        &["--advertised-host", "127.0.0.21"],
    );
    let bootstrap = vec![proxy_addr.to_string()];
    rt.block_on(create_topic(bootstrap.clone(), NewTopic::new("once", 1), 1));

    proxy.set_faults(Faults {
        duplicate: 0.1,
        lost_reply: 0.1,
        drop: 0.03,
        ..Faults::none()
    });
    const RECORDS: usize = 200;
    let offsets = rt.block_on(async {
        let mut config = producer_config(bootstrap.clone());
        config.batch_bytes = 1024;
        let producer = retry("connecting a producer", Duration::from_secs(20), || {
            Producer::connect(config.clone())
        })
        .await;
        let mut deliveries = Vec::with_capacity(RECORDS);
        for index in 0..RECORDS {
            let record = ProducerRecord::new("once", value(index)).partition(0);
            deliveries.push(send_retrying(&producer, record).await.unwrap());
        }
        let mut offsets = Vec::with_capacity(RECORDS);
        for delivery in deliveries {
            offsets.push(
                match tokio::time::timeout(Duration::from_secs(40), delivery).await {
                    Ok(Ok(delivered)) => Ok(delivered.offset.0),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err("no outcome in 40 s".to_owned()),
                },
            );
        }
        offsets
    });
    let stats = proxy.stats();
    proxy.set_faults(Faults::none());
    println!("proxy stats: {stats:?}");
    let failed: Vec<(usize, &String)> = offsets
        .iter()
        .enumerate()
        .filter_map(|(index, outcome)| outcome.as_ref().err().map(|error| (index, error)))
        .collect();
    let log = rt.block_on(read_all(bootstrap, "once", RECORDS - failed.len()));
    let values: Vec<usize> = log.iter().map(|(_, _, value)| index_of(value)).collect();
    assert!(
        failed.is_empty(),
        "records failed (seed {seed}): {failed:?}\nlog (record index per offset): {:?}",
        log.iter()
            .map(|(_, offset, value)| (*offset, index_of(value)))
            .collect::<Vec<_>>()
    );
    let offsets: Vec<u64> = offsets.into_iter().map(Result::unwrap).collect();
    // Acknowledged offsets follow send order.
    assert!(
        offsets.windows(2).all(|pair| pair[0] < pair[1]),
        "acknowledged offsets out of send order (seed {seed}): {offsets:?}"
    );
    assert_eq!(
        values,
        (0..RECORDS).collect::<Vec<_>>(),
        "the log does not hold each record once in send order (seed {seed})"
    );
    for (index, (_, offset, _)) in log.iter().enumerate() {
        assert_eq!(
            *offset, offsets[index],
            "record {index} not at its acknowledged offset"
        );
    }
    assert!(stats.duplicated > 0, "no request was duplicated: {stats:?}");
    assert!(stats.lost_replies > 0, "no reply was lost: {stats:?}");
    assert!(stats.dropped > 0, "no frame was dropped: {stats:?}");
}

/// What the producer tasks of test 2 learned.
#[derive(Debug, Default)]
struct Outcomes {
    /// Acknowledged: value index -> (partition, offset).
    acked: BTreeMap<usize, (u32, u64)>,
    /// Failed deliveries (not acknowledged; allowed under faults).
    failed: Vec<(usize, String)>,
}

/// Test 2: three brokers, every connection (client and inter-broker)
/// through a proxy with [`Faults::mixed`] for about 15 s while an
/// idempotent producer appends with quorum acks; then the faults stop.
/// Every acknowledged record reads back exactly once at its acknowledged
/// offset, and no record appears twice.
#[test]
fn quorum_appends_through_mixed_network_faults_are_kept_exactly_once() {
    let _serial = serial();
    let seed = seed(0x6_0002);
    let rt = client_runtime();
    let cluster = start_cluster_behind_proxies(3, seed, &["--broker-session-timeout-ms", "2000"]);
    let bootstrap = cluster.bootstrap();
    rt.block_on(create_topic(
        bootstrap.clone(),
        NewTopic::new("mixed", 3).replication_factor(3),
        3,
    ));

    cluster.set_faults(Faults::mixed());
    let faults_for = Duration::from_secs(15);
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let sent = rt.block_on(async {
        let producer = retry("connecting a producer", Duration::from_secs(20), || {
            Producer::connect(producer_config(bootstrap.clone()))
        })
        .await;
        let started = Instant::now();
        let mut index = 0;
        let mut waiting = Vec::new();
        while started.elapsed() < faults_for {
            let record = ProducerRecord::new("mixed", value(index)).partition(index as u32 % 3);
            match send_retrying(&producer, record).await {
                Ok(delivery) => {
                    let outcomes = Arc::clone(&outcomes);
                    waiting.push(tokio::spawn(async move {
                        let outcome = delivery.await;
                        let mut outcomes = outcomes.lock().unwrap();
                        match outcome {
                            Ok(delivered) => {
                                outcomes
                                    .acked
                                    .insert(index, (delivered.partition, delivered.offset.0));
                            }
                            Err(error) => outcomes.failed.push((index, error.to_string())),
                        }
                    }));
                }
                Err(error) => outcomes
                    .lock()
                    .unwrap()
                    .failed
                    .push((index, error.to_string())),
            }
            index += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cluster.set_faults(Faults::none());
        for task in waiting {
            task.await.unwrap();
        }
        producer.close().await.unwrap();
        index
    });
    let stats = cluster.stats();
    println!("proxy stats (3 proxies): {stats:?}");
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    println!(
        "sent {sent}, acknowledged {}, failed {}",
        outcomes.acked.len(),
        outcomes.failed.len()
    );
    for (index, error) in outcomes.failed.iter().take(5) {
        println!("  failed record {index}: {error}");
    }

    let log = rt.block_on(read_all(bootstrap, "mixed", outcomes.acked.len()));
    let mut found: BTreeMap<usize, Vec<(u32, u64)>> = BTreeMap::new();
    for (partition, offset, value) in &log {
        found
            .entry(index_of(value))
            .or_default()
            .push((*partition, *offset));
    }
    let duplicated: Vec<_> = found.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        duplicated.is_empty(),
        "records stored more than once (seed {seed}): {duplicated:?}"
    );
    let lost: Vec<_> = outcomes
        .acked
        .iter()
        .filter(|(index, at)| found.get(index).is_none_or(|places| places[0] != **at))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged records missing or elsewhere (seed {seed}): {lost:?}"
    );
    assert!(
        outcomes.acked.len() * 2 > sent,
        "most records should be acknowledged under these rates: {} of {sent}",
        outcomes.acked.len()
    );
    assert!(stats.delayed > 0, "{stats:?}");
    assert!(stats.reordered > 0, "{stats:?}");
    assert!(stats.duplicated > 0, "{stats:?}");
    assert!(stats.dropped > 0, "{stats:?}");
    assert!(stats.lost_replies > 0, "{stats:?}");
    assert!(stats.corrupted > 0, "{stats:?}");
}

/// A request over the broker's frame limit crosses the proxy unparsed, as
/// soon as its header does: the broker refuses it (`FRAME_TOO_LARGE`) from
/// the header alone, as it would without the proxy.
#[test]
fn oversized_request_passes_the_proxy_and_is_refused_by_the_broker() {
    use std::io::{Read, Write};
    let _serial = serial();
    let port = free_port();
    let proxy_addr = SocketAddr::from(([127, 0, 0, 22], port));
    let proxy = FaultProxy::start(proxy_addr, SocketAddr::from(([127, 0, 0, 1], port)), 1)
        .expect("the proxy binds");
    let _broker = Broker::start_at(SocketAddr::from(([127, 0, 0, 1], port)), &[]);
    let mut stream = std::net::TcpStream::connect(proxy_addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // ApiVersions (0), correlation id 7, declaring 20 MiB that never come.
    let mut header = Vec::new();
    header.extend_from_slice(&(20_u32 << 20).to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7, 0, 0]);
    stream.write_all(&header).unwrap();
    let mut response = [0_u8; 10];
    stream.read_exact(&mut response).unwrap();
    let correlation_id = u32::from_be_bytes(response[4..8].try_into().unwrap());
    let error_code = u16::from_be_bytes(response[8..10].try_into().unwrap());
    assert_eq!(correlation_id, 7);
    assert_eq!(
        corelog_client::ErrorCode::from_code(error_code),
        Some(corelog_client::ErrorCode::FrameTooLarge)
    );
    assert_eq!(proxy.stats().passthrough, 1, "{:?}", proxy.stats());
}
