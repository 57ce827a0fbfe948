//! The consumer and the admin client against the in-process fake broker:
//! start positions, skipping inside the first batch, both gap policies.

#![allow(clippy::unwrap_used)]

mod common;

use corelog_client::{
    Admin, ClientError, Consumer, ConsumerConfig, DeletionCause, ErrorCode, NewTopic, Notice,
    Offset, OffsetOutOfRangePolicy, OffsetSpec, Producer, ProducerRecord, StartFrom, TimestampMs,
};

use common::fake_broker::FakeBroker;
use common::{consumer_config, producer_config};

/// A broker with topic `t` (one partition) holding `count` records with
/// values "0", "1", … and timestamps 1000, 2000, …, in batches of
/// `per_batch`.
async fn broker_with_records(count: u64, per_batch: u64) -> FakeBroker {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let producer = Producer::connect(producer_config(&broker.addr()))
        .await
        .unwrap();
    for start in (0..count).step_by(per_batch as usize) {
        let mut deliveries = Vec::new();
        for i in start..(start + per_batch).min(count) {
            let record = ProducerRecord::new("t", i.to_string())
                .partition(0)
                .key(format!("k{i}"))
                .timestamp(TimestampMs(1000 * (i as i64 + 1)))
                .schema(4);
            deliveries.push(producer.send(record).await.unwrap());
        }
        producer.flush().await;
        for delivery in deliveries {
            delivery.await.unwrap();
        }
    }
    producer.close().await.unwrap();
    broker
}

async fn consumer(broker: &FakeBroker, policy: OffsetOutOfRangePolicy) -> Consumer {
    Consumer::connect(ConsumerConfig {
        offset_out_of_range: policy,
        ..consumer_config(&broker.addr())
    })
    .await
    .unwrap()
}

/// Polls until caught up, returning the offsets and values read.
async fn read_all(consumer: &mut Consumer) -> Vec<(u64, String)> {
    let mut read = Vec::new();
    for _ in 0..50 {
        let polled = consumer.poll().await.unwrap();
        read.extend(polled.records.iter().map(|record| {
            let value = String::from_utf8(record.value.as_ref().unwrap().to_vec()).unwrap();
            (record.offset.0, value)
        }));
        if consumer.caught_up() {
            return read;
        }
    }
    panic!("not caught up after 50 polls: read {read:?}");
}

#[tokio::test]
async fn reads_every_record_in_order_with_key_schema_and_timestamp() {
    let broker = broker_with_records(10, 4).await;
    let mut consumer = consumer(&broker, OffsetOutOfRangePolicy::Error).await;
    assert_eq!(
        consumer
            .assign_topic("t", StartFrom::Earliest)
            .await
            .unwrap(),
        [0]
    );
    let polled = consumer.poll().await.unwrap();
    let first = &polled.records[0];
    assert_eq!(first.key.as_deref(), Some(&b"k0"[..]));
    assert_eq!(first.schema, Some(corelog_client::SchemaVersion(4)));
    assert_eq!(first.timestamp, TimestampMs(1000));
    let mut read: Vec<u64> = polled.records.iter().map(|r| r.offset.0).collect();
    read.extend(
        read_all(&mut consumer)
            .await
            .into_iter()
            .map(|(offset, _)| offset),
    );
    assert_eq!(read, (0..10).collect::<Vec<_>>());
    assert_eq!(consumer.position("t", 0), Some(Offset(10)));
}

/// The broker returns whole batches: starting at offset 6 inside the batch
/// 4..8, records 4 and 5 are not returned.
#[tokio::test]
async fn records_before_the_start_offset_in_the_first_batch_are_skipped() {
    let broker = broker_with_records(10, 4).await;
    let mut consumer = consumer(&broker, OffsetOutOfRangePolicy::Error).await;
    consumer.assign("t", 0, StartFrom::Offset(Offset(6)));
    let read = read_all(&mut consumer).await;
    assert_eq!(read.first(), Some(&(6, "6".to_owned())));
    assert_eq!(read.len(), 4);
}

#[tokio::test]
async fn start_positions_latest_and_timestamp_are_looked_up() {
    let broker = broker_with_records(10, 3).await;
    let mut consumer = consumer(&broker, OffsetOutOfRangePolicy::Error).await;
    consumer.assign("t", 0, StartFrom::Timestamp(TimestampMs(7500)));
    let read = read_all(&mut consumer).await;
    assert_eq!(read.first().map(|(offset, _)| *offset), Some(7));
    consumer.seek("t", 0, StartFrom::Timestamp(TimestampMs(1_000_000)));
    assert!(read_all(&mut consumer).await.is_empty());
    assert_eq!(
        consumer.position("t", 0),
        Some(Offset(10)),
        "no record that late: latest"
    );
    consumer.seek("t", 0, StartFrom::Latest);
    assert!(read_all(&mut consumer).await.is_empty());
    assert_eq!(consumer.position("t", 0), Some(Offset(10)));
}

#[tokio::test]
async fn out_of_range_with_the_error_policy_reports_the_gap_and_keeps_the_position() {
    let broker = broker_with_records(10, 5).await;
    broker.delete_before("t", 0, 5, 1_700_000_000_000);
    let mut consumer = consumer(&broker, OffsetOutOfRangePolicy::Error).await;
    consumer.assign("t", 0, StartFrom::Offset(Offset(2)));
    let error = consumer.poll().await.unwrap_err();
    let ClientError::OffsetOutOfRange {
        topic,
        partition,
        gap,
    } = &error
    else {
        panic!("expected OFFSET_OUT_OF_RANGE, got {error}");
    };
    assert_eq!((topic.as_str(), *partition), ("t", 0));
    assert_eq!(gap.requested_offset, Offset(2));
    assert_eq!(gap.log_start_offset, Offset(5));
    assert_eq!(gap.deleted.len(), 1);
    assert_eq!(gap.deleted[0].record_count, 5);
    assert_eq!(gap.deleted[0].cause, DeletionCause::RetentionTime);
    assert_eq!(error.code(), Some(ErrorCode::OffsetOutOfRange));
    let text = error.to_string();
    assert!(
        text.contains("retention-time") && text.contains("resume from offset 5"),
        "{text}"
    );
    // Never silently moved on.
    assert_eq!(consumer.position("t", 0), Some(Offset(2)));
    assert!(consumer.poll().await.is_err());
    // The caller decides.
    consumer.seek("t", 0, StartFrom::Earliest);
    let read = read_all(&mut consumer).await;
    assert_eq!(read.first(), Some(&(5, "5".to_owned())));
}

#[tokio::test]
async fn out_of_range_with_the_reset_policy_jumps_to_the_log_start_and_says_so() {
    let broker = broker_with_records(10, 5).await;
    broker.delete_before("t", 0, 5, 1_700_000_000_000);
    let mut consumer = consumer(&broker, OffsetOutOfRangePolicy::ResetToEarliest).await;
    consumer.assign("t", 0, StartFrom::Offset(Offset(2)));
    let polled = consumer.poll().await.unwrap();
    assert!(polled.records.is_empty());
    let [Notice::OffsetReset { from, to, gap, .. }] = polled.notices.as_slice() else {
        panic!("expected one reset notice, got {:?}", polled.notices);
    };
    assert_eq!((*from, *to), (Offset(2), Offset(5)));
    assert_eq!(gap.deleted[0].end_offset, Offset(5));
    assert!(polled.notices[0].to_string().contains("reset from 2 to 5"));
    let read = read_all(&mut consumer).await;
    assert_eq!(
        read.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        [5, 6, 7, 8, 9]
    );
}

#[tokio::test]
async fn a_long_poll_returns_records_appended_while_it_waits() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let mut consumer = Consumer::connect(ConsumerConfig {
        fetch_max_wait: std::time::Duration::from_secs(5),
        ..consumer_config(&broker.addr())
    })
    .await
    .unwrap();
    consumer.assign("t", 0, StartFrom::Latest);
    let addr = broker.addr();
    let produce = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let producer = Producer::connect(producer_config(&addr)).await.unwrap();
        producer
            .send(ProducerRecord::new("t", "late"))
            .await
            .unwrap()
            .await
            .unwrap();
        producer.close().await.unwrap();
    });
    let started = tokio::time::Instant::now();
    let mut records = Vec::new();
    while records.is_empty() {
        records = consumer.poll().await.unwrap().records;
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "answered early"
    );
    assert_eq!(records[0].value.as_deref(), Some(&b"late"[..]));
    produce.await.unwrap();
}

#[tokio::test]
async fn admin_creates_describes_lists_and_deletes_topics() {
    let broker = broker_with_records(3, 3).await;
    let admin = Admin::connect(common::client_config(&broker.addr()))
        .await
        .unwrap();
    admin
        .create_topic(NewTopic::new("orders", 3).config("retention.ms", "1000"))
        .await
        .unwrap();
    let error = admin
        .create_topic(NewTopic::new("orders", 1))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::TopicAlreadyExists));
    let error = admin
        .create_topic(NewTopic::new("c", 1).config("cleanup.policy", "compact"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidConfig));
    assert!(matches!(
        admin.create_topic(NewTopic::new("bad name", 1)).await,
        Err(ClientError::InvalidArgument(_))
    ));
    let description = admin.describe_topic("orders").await.unwrap();
    assert_eq!(description.partitions, 3);
    assert_eq!(description.configs["retention.ms"], "1000");
    let t = admin.describe_topic("t").await.unwrap();
    assert_eq!(t.partition_states[0].high_watermark, 3);
    let names: Vec<String> = admin
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["orders", "t"]);
    assert_eq!(
        admin.list_offset("t", 0, OffsetSpec::Latest).await.unwrap(),
        Some(Offset(3))
    );
    admin.delete_topic("orders").await.unwrap();
    let error = admin.describe_topic("orders").await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownTopicOrPartition));
}

#[tokio::test]
async fn a_stopped_broker_is_reported_with_how_to_start_one() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let error = Admin::connect(common::client_config(&addr))
        .await
        .unwrap_err();
    assert!(error.is_connect_failure(), "{error}");
    assert!(error.to_string().contains("make run"), "{error}");
}

/// A listed shard port that refuses connections (the port of a broker
/// process that was killed, issue 35 item 18): the fetches go to the
/// broker's shared port, and the consumer reads everything.
#[tokio::test]
async fn a_shard_port_that_refuses_sends_the_fetches_to_the_shared_port() {
    let broker = broker_with_records(6, 2).await;
    let refusing = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    broker.list_shard_ports(&[refusing]);
    let asked_before = broker.describe_shards_count();
    let mut consumer = consumer(&broker, OffsetOutOfRangePolicy::Error).await;
    consumer
        .assign_topic("t", StartFrom::Earliest)
        .await
        .unwrap();
    let read = read_all(&mut consumer).await;
    let expected: Vec<(u64, String)> = (0..6).map(|offset| (offset, offset.to_string())).collect();
    assert_eq!(read, expected);
    assert!(
        broker.describe_shards_count() > asked_before,
        "the consumer asked for the shard ports, so it was sent to the refusing one"
    );
    assert_eq!(broker.shard_connection_count(), 0);
}
