//! The producer against the in-process fake broker: lost replies, retries,
//! sequence gaps, fencing, ordering and the buffer bound.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use corelog_client::{ClientError, ErrorCode, Producer, ProducerRecord, partition_for_key};
use corelog_wire::batch::{BatchHeader, BatchLimits};

use common::fake_broker::FakeBroker;
use common::producer_config;

async fn setup(partitions: u32) -> (FakeBroker, Producer) {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", partitions);
    let producer = Producer::connect(producer_config(&broker.addr()))
        .await
        .unwrap();
    (broker, producer)
}

fn values(broker: &FakeBroker, partition: u32) -> Vec<(u64, String)> {
    values_of(broker, "t", partition)
}

fn values_of(broker: &FakeBroker, topic: &str, partition: u32) -> Vec<(u64, String)> {
    broker
        .records(topic, partition)
        .into_iter()
        .map(|record| {
            let value = String::from_utf8(record.value.unwrap().to_vec()).unwrap();
            (record.offset.0, value)
        })
        .collect()
}

/// The broker appends the batch but its answer never arrives. The client
/// times the request out, reconnects and resends the same bytes; the broker
/// recognises the sequence and answers with the original offset.
#[tokio::test]
async fn lost_reply_is_resent_with_the_same_bytes_and_stored_once() {
    let (broker, producer) = setup(1).await;
    broker.lose_produce_replies(1, false);
    let delivery = producer
        .send(ProducerRecord::new("t", "only once").partition(0))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!((delivery.partition, delivery.offset.0), (0, 0));
    assert_eq!(values(&broker, 0), [(0, "only once".to_owned())]);
    let attempts = broker.attempts();
    assert_eq!(attempts.len(), 2, "one send and one resend: {attempts:?}");
    assert_eq!(
        attempts[0], attempts[1],
        "the resend is byte for byte the same"
    );
    assert_eq!(attempts[0].base_sequence, 0);
    assert!(
        broker.connection_count() >= 2,
        "the timed-out connection was replaced"
    );
    producer.close().await.unwrap();
}

#[tokio::test]
async fn lost_reply_with_a_dropped_connection_is_resent_and_stored_once() {
    let (broker, producer) = setup(1).await;
    broker.lose_produce_replies(1, true);
    let first = producer
        .send(ProducerRecord::new("t", "a").partition(0))
        .await
        .unwrap();
    assert_eq!(first.await.unwrap().offset.0, 0);
    let second = producer
        .send(ProducerRecord::new("t", "b").partition(0))
        .await
        .unwrap();
    assert_eq!(second.await.unwrap().offset.0, 1);
    assert_eq!(
        values(&broker, 0),
        [(0, "a".to_owned()), (1, "b".to_owned())]
    );
    let sequences: Vec<i32> = broker.attempts().iter().map(|a| a.base_sequence).collect();
    assert_eq!(sequences, [0, 0, 1]);
    producer.close().await.unwrap();
}

#[tokio::test]
async fn retriable_errors_are_retried_until_appended() {
    let (broker, producer) = setup(1).await;
    broker.fail_produce_with(&[ErrorCode::NotLeader, ErrorCode::NotEnoughReplicas]);
    let delivery = producer
        .send(ProducerRecord::new("t", "eventually").partition(0))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(delivery.offset.0, 0);
    assert_eq!(broker.attempts().len(), 3);
    assert_eq!(values(&broker, 0).len(), 1);
    producer.close().await.unwrap();
}

#[tokio::test]
async fn keyed_records_go_to_their_pinned_partition_in_send_order() {
    let (broker, producer) = setup(3).await;
    let mut deliveries = Vec::new();
    for i in 0..60 {
        let key = format!("key-{}", i % 7);
        let record = ProducerRecord::new("t", format!("{key}:{i}")).key(key.clone());
        deliveries.push((key, producer.send(record).await.unwrap()));
    }
    for (key, delivery) in deliveries {
        let delivery = delivery.await.unwrap();
        assert_eq!(delivery.partition, partition_for_key(key.as_bytes(), 3));
    }
    for partition in 0..3 {
        let stored = values(&broker, partition);
        let indexes: Vec<u32> = stored
            .iter()
            .map(|(_, value)| value.rsplit(':').next().unwrap().parse().unwrap())
            .collect();
        let mut sorted = indexes.clone();
        sorted.sort_unstable();
        assert_eq!(indexes, sorted, "partition {partition} keeps send order");
    }
    producer.close().await.unwrap();
}

/// A real gap: the broker refuses the only outstanding batch as out of
/// order. The batch fails with the broker's code (never silently resent),
/// and the producer continues under a new producer id.
#[tokio::test]
async fn a_real_sequence_gap_fails_the_batch_and_a_new_producer_id_is_used() {
    let (broker, producer) = setup(1).await;
    broker.fail_produce_with(&[ErrorCode::OutOfOrderSequence]);
    let error = producer
        .send(ProducerRecord::new("t", "lost").partition(0))
        .await
        .unwrap()
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::OutOfOrderSequence), "{error}");
    let delivery = producer
        .send(ProducerRecord::new("t", "after").partition(0))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(delivery.offset.0, 0);
    assert_eq!(broker.init_producer_id_count(), 2);
    let attempts = broker.attempts();
    let last = attempts.last().unwrap();
    assert_ne!(last.producer_id, attempts[0].producer_id);
    assert_eq!(last.base_sequence, 0);
    producer.close().await.unwrap();
}

#[tokio::test]
async fn a_refused_batch_gives_its_sequence_to_the_next_one() {
    let (broker, producer) = setup(1).await;
    broker.fail_produce_with(&[ErrorCode::InvalidRecord]);
    let error = producer
        .send(ProducerRecord::new("t", "bad").partition(0))
        .await
        .unwrap()
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidRecord));
    let delivery = producer
        .send(ProducerRecord::new("t", "good").partition(0))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(delivery.offset.0, 0);
    let sequences: Vec<i32> = broker.attempts().iter().map(|a| a.base_sequence).collect();
    assert_eq!(sequences, [0, 0]);
    assert_eq!(broker.init_producer_id_count(), 1);
    producer.close().await.unwrap();
}

#[tokio::test]
async fn a_fenced_producer_fails_its_records_and_refuses_new_ones() {
    let (broker, producer) = setup(1).await;
    broker.fail_produce_with(&[ErrorCode::InvalidProducerEpoch]);
    let error = producer
        .send(ProducerRecord::new("t", "x").partition(0))
        .await
        .unwrap()
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidProducerEpoch));
    let refused = producer
        .send(ProducerRecord::new("t", "y").partition(0))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ClientError::ProducerClosed { reason: Some(reason) } if reason.contains("fenced")),
        "{refused}"
    );
    producer.close().await.unwrap();
}

/// With answers held back, the buffer fills: `try_send` fails at once and
/// `send` waits; releasing the answers frees the buffer.
#[tokio::test]
async fn a_full_buffer_makes_try_send_fail_and_send_wait() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let config = corelog_client::ProducerConfig {
        buffer_bytes: 4096,
        record_bytes_max: 1024,
        batch_bytes: 1024,
        ..producer_config(&broker.addr())
    };
    let producer = Producer::connect(config).await.unwrap();
    producer.prepare_topic("t").await.unwrap();
    broker.hold_produce(true);
    let value = "v".repeat(900);
    let mut deliveries = Vec::new();
    loop {
        match producer.try_send(ProducerRecord::new("t", value.clone()).partition(0)) {
            Ok(delivery) => deliveries.push(delivery),
            Err(ClientError::BufferFull { buffer_bytes }) => {
                assert_eq!(buffer_bytes, 4096);
                break;
            }
            Err(other) => panic!("unexpected {other}"),
        }
        assert!(deliveries.len() < 10, "the buffer bound did not hold");
    }
    assert_eq!(deliveries.len(), 4);
    let waiting = {
        let producer = producer.clone();
        let value = value.clone();
        tokio::spawn(async move {
            producer
                .send(ProducerRecord::new("t", value).partition(0))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiting.is_finished(),
        "send must wait while the buffer is full"
    );
    broker.hold_produce(false);
    let last = waiting.await.unwrap().unwrap();
    for delivery in deliveries {
        delivery.await.unwrap();
    }
    assert_eq!(last.await.unwrap().offset.0, 4);
    producer.close().await.unwrap();
    assert_eq!(producer.buffer_available_bytes(), 4096);
}

#[tokio::test]
async fn flush_waits_for_every_buffered_record() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 2);
    let config = corelog_client::ProducerConfig {
        linger: Duration::from_secs(5),
        ..producer_config(&broker.addr())
    };
    let producer = Producer::connect(config).await.unwrap();
    let mut deliveries = Vec::new();
    for i in 0..10 {
        let record = ProducerRecord::new("t", format!("{i}")).schema(7);
        deliveries.push(producer.send(record).await.unwrap());
    }
    // Linger is 5 s: only flush can send these now.
    tokio::time::timeout(Duration::from_secs(2), producer.flush())
        .await
        .unwrap();
    assert_eq!(
        broker.records("t", 0).len() + broker.records("t", 1).len(),
        10
    );
    for delivery in deliveries {
        delivery.await.unwrap();
    }
    let record = &broker
        .records("t", 0)
        .into_iter()
        .chain(broker.records("t", 1))
        .next()
        .unwrap();
    assert_eq!(record.schema, Some(corelog_client::SchemaVersion(7)));
    producer.close().await.unwrap();
}

#[tokio::test]
async fn unanswered_records_fail_with_a_delivery_timeout() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let config = corelog_client::ProducerConfig {
        delivery_timeout: Duration::from_secs(1),
        ..producer_config(&broker.addr())
    };
    let producer = Producer::connect(config).await.unwrap();
    broker.lose_produce_replies(u32::MAX, false);
    let error = producer
        .send(ProducerRecord::new("t", "x").partition(0))
        .await
        .unwrap()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::DeliveryTimeout { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("may or may not"), "{error}");
    producer.close().await.unwrap();
}

/// Found by `corelog-bench matrix`: producers started right after a topic
/// was created asked a broker that had not applied the creation yet, and
/// their first records failed with `UNKNOWN_TOPIC_OR_PARTITION` on a
/// healthy cluster.
#[tokio::test]
async fn a_topic_that_appears_while_send_waits_takes_the_record() {
    let broker = FakeBroker::start().await;
    let producer = Producer::connect(producer_config(&broker.addr()))
        .await
        .unwrap();
    let creating = {
        let broker = broker.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            broker.create_topic("late", 1);
        })
    };
    let delivered = producer
        .send(ProducerRecord::new("late", "first").partition(0))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(delivered.offset.0, 0);
    creating.await.unwrap();
    assert_eq!(values_of(&broker, "late", 0), [(0, "first".to_owned())]);
    producer.close().await.unwrap();
}

#[tokio::test]
async fn unknown_topics_and_partitions_are_refused_at_send() {
    let (_broker, producer) = setup(2).await;
    let started = std::time::Instant::now();
    let error = producer
        .send(ProducerRecord::new("missing", "x"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::UnknownTopicOrPartition));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "a missing topic is refused after topic_wait (300 ms), not {waited:?}"
    );
    let error = producer
        .send(ProducerRecord::new("t", "x").partition(2))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::UnknownPartition {
                partition_count: 2,
                ..
            }
        ),
        "{error}"
    );
    let error = producer
        .try_send(ProducerRecord::new("other", "x"))
        .unwrap_err();
    assert!(
        matches!(error, ClientError::MetadataNotReady { .. }),
        "{error}"
    );
    producer.close().await.unwrap();
}

/// Five batches of one partition are in flight when the first is refused
/// with a retriable error; the broker then refuses the next four as out of
/// order. The producer resends all five, in order, once each.
/// The first of five pipelined batches is refused retriably, so the leader
/// has no state for the producer when the other four arrive and answers
/// `UNKNOWN_PRODUCER_ID`. Regression: the producer took that for a
/// forgotten producer and failed the records (787 of them in the first
/// second of an RF 3 benchmark on a new topic, issue 14); they are resent
/// after the first batch instead.
#[tokio::test]
async fn a_retry_in_the_middle_of_a_pipeline_keeps_order_and_stores_each_batch_once() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let config = corelog_client::ProducerConfig {
        batch_bytes: 1024,
        linger: Duration::from_millis(50),
        ..producer_config(&broker.addr())
    };
    let producer = Producer::connect(config).await.unwrap();
    producer.prepare_topic("t").await.unwrap();
    broker.fail_produce_with(&[ErrorCode::NotLeader]);
    // Held back so that all five batches are on the wire together.
    broker.hold_produce(true);
    let mut deliveries = Vec::new();
    for i in 0..5 {
        let value = format!("{i}:{}", "x".repeat(700));
        deliveries.push(
            producer
                .send(ProducerRecord::new("t", value).partition(0))
                .await
                .unwrap(),
        );
    }
    common::wait_until(5, "five produce requests are on the wire", || {
        broker.produce_received() == 5
    })
    .await;
    broker.hold_produce(false);
    for (i, delivery) in deliveries.into_iter().enumerate() {
        assert_eq!(delivery.await.unwrap().offset.0, i as u64);
    }
    let stored: Vec<String> = values(&broker, 0)
        .into_iter()
        .map(|(_, value)| value[..1].to_owned())
        .collect();
    assert_eq!(stored, ["0", "1", "2", "3", "4"]);
    let first_attempts: Vec<i32> = broker
        .attempts()
        .iter()
        .take(5)
        .map(|a| a.base_sequence)
        .collect();
    assert_eq!(first_attempts, [0, 1, 2, 3, 4], "five batches pipelined");
    producer.close().await.unwrap();
}

/// A connection lost while `send` looks up the topic's metadata (a broker
/// restarting) is retried like any other transport failure: the record has
/// no delivery handle yet to report it on, and the caller would otherwise
/// get `ConnectionLost`, which `send` does not promise.
#[tokio::test]
async fn send_retries_a_metadata_lookup_whose_connection_drops() {
    let (broker, producer) = setup(1).await;
    broker.create_topic("later", 1);
    broker.drop_metadata_requests(2);
    let delivery = tokio::time::timeout(
        Duration::from_secs(5),
        producer.send(ProducerRecord::new("later", "x").partition(0)),
    )
    .await
    .expect("send returns")
    .expect("send retries the lookup");
    let delivered = tokio::time::timeout(Duration::from_secs(5), delivery)
        .await
        .expect("delivered in time")
        .unwrap();
    assert_eq!(delivered.offset.0, 0);
    assert_eq!(values_of(&broker, "later", 0), vec![(0, "x".to_owned())]);
}

/// A broker that accepts connections but does not answer their handshake
/// yet (still starting) holds up resends and metadata refreshes; once it
/// answers, the producer delivers, and nothing is stored twice.
#[tokio::test]
async fn a_broker_slow_to_answer_handshakes_only_delays_the_producer() {
    let (broker, producer) = setup(1).await;
    let first = producer.send(ProducerRecord::new("t", "a").partition(0));
    first.await.unwrap().await.unwrap();
    // The next batch is appended, then its connection drops. The resend
    // needs a new connection, whose handshake waits past the request
    // timeout: the leader counts as unreachable and a metadata refresh
    // starts, which connects to the same address and waits in turn.
    broker.hold_handshakes(true);
    broker.lose_produce_replies(1, true);
    let second = producer
        .send(ProducerRecord::new("t", "b").partition(0))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    broker.hold_handshakes(false);
    let delivered = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the producer delivers once the broker answers again");
    assert_eq!(delivered.unwrap().offset.0, 1);
    assert_eq!(
        values(&broker, 0),
        vec![(0, "a".to_owned()), (1, "b".to_owned())]
    );
}

/// Issue 14's stall, from the client's side: records that arrive while a
/// partition's in-flight window is full join one batch (up to
/// `batch_bytes`), not one batch per linger. Closing batches at their
/// linger deadline made a producer that fell behind send ever smaller
/// batches, whose per-batch cost on the brokers kept it behind.
#[tokio::test]
async fn records_that_wait_for_the_in_flight_window_join_one_batch() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let mut config = corelog_client::ProducerConfig {
        linger: Duration::from_millis(2),
        max_in_flight_per_partition: 1,
        // Longer than the hold below, so that nothing is resent.
        ack_timeout: Duration::from_secs(2),
        ..producer_config(&broker.addr())
    };
    config.client.request_timeout = Duration::from_secs(5);
    let producer = Producer::connect(config).await.unwrap();
    producer.prepare_topic("t").await.unwrap();
    broker.hold_produce(true);
    let record = |i: usize| ProducerRecord::new("t", format!("{i}")).partition(0);
    let first = producer.send(record(0)).await.unwrap();
    common::wait_until(5, "the first batch is on the wire", || {
        broker.produce_received() == 1
    })
    .await;
    // Each record arrives five lingers after the one before, while the
    // window (one batch) is held by the first.
    let mut waiting = Vec::new();
    for i in 1..=20 {
        waiting.push(producer.send(record(i)).await.unwrap());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    broker.hold_produce(false);
    assert_eq!(first.await.unwrap().offset.0, 0);
    for (i, delivery) in (1..).zip(waiting) {
        assert_eq!(delivery.await.unwrap().offset.0, i);
    }
    let records_per_batch: Vec<u32> = broker
        .attempts()
        .iter()
        .map(|attempt| {
            BatchHeader::parse(&attempt.bytes, &BatchLimits::default())
                .unwrap()
                .record_count
        })
        .collect();
    assert_eq!(records_per_batch, [1, 20]);
    producer.close().await.unwrap();
}

/// The broker lists a port of its own for the shard that owns the
/// partition: the produce goes there.
#[tokio::test]
async fn a_produce_goes_to_the_owning_shard_on_its_own_port() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let port = broker.add_shard_listener().await;
    broker.list_shard_ports(&[port]);
    let producer = Producer::connect(producer_config(&broker.addr()))
        .await
        .unwrap();
    for value in ["direct", "again"] {
        producer
            .send(ProducerRecord::new("t", value).partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    assert_eq!(
        values(&broker, 0),
        [(0, "direct".to_owned()), (1, "again".to_owned())]
    );
    assert_eq!(broker.shard_connection_count(), 1, "one connection, kept");
    assert_eq!(
        broker.describe_shards_count(),
        1,
        "the ports are asked once per connection to the shared port"
    );
}

/// A listed shard port that refuses connections (a proxy that passes only
/// the shared port, a broker that just restarted): the produce still goes
/// through the shared port.
#[tokio::test]
async fn an_unreachable_shard_port_falls_back_to_the_shared_port() {
    let broker = FakeBroker::start().await;
    broker.create_topic("t", 1);
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    broker.list_shard_ports(&[closed]);
    let producer = Producer::connect(producer_config(&broker.addr()))
        .await
        .unwrap();
    let delivery = producer
        .send(ProducerRecord::new("t", "shared").partition(0))
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(delivery.offset.0, 0);
    assert_eq!(values(&broker, 0), [(0, "shared".to_owned())]);
    assert_eq!(broker.shard_connection_count(), 0);
}
