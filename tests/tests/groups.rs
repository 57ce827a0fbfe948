//! Consumer groups against a real broker (C6, C8): independent groups,
//! the duplicate-safe sink after a member dies between its two commits,
//! stale and out-of-range commits, pause and catch-up, the completed
//! prefix, the poison policies with their audit records, audited resets,
//! and committed offsets across kill -9 of the coordinator.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../client/examples/search_projection/sink.rs"]
mod sink;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use corelog_client::admin::{ResetOffsets, ResetTarget};
use corelog_client::group::{
    GroupConfig, GroupConsumer, MemberGeneration, OffsetToCommit, PoisonPolicy, TopicPartition,
};
use corelog_client::{
    Admin, ClientConfig, ClientError, ConsumerRecord, ErrorCode, NewTopic, Offset, Producer,
    ProducerConfig, ProducerRecord,
};
use corelog_tests::{Broker, binary};
use corelog_wire::message::reset_offsets::{
    ResetOffsetsRequest, ResetOffsetsResponse, ResetTarget as WireTarget,
};
use tokio::sync::Mutex;

use self::sink::{Applied, OrderEvent, Projection};

/// Longest wait for any condition in these tests.
const DEADLINE: Duration = Duration::from_secs(60);

fn bootstrap(broker: &Broker) -> String {
    broker.addr.to_string()
}

async fn admin(broker: &Broker) -> Admin {
    Admin::connect(ClientConfig::new(bootstrap(broker)))
        .await
        .unwrap()
}

async fn create_topic(broker: &Broker, name: &str, partitions: u32) {
    admin(broker)
        .await
        .create_topic(NewTopic::new(name, partitions))
        .await
        .unwrap();
}

/// Group settings with short timeouts, so that a dead member is replaced
/// in seconds.
fn settings(broker: &Broker, group: &str, topics: &[&str]) -> GroupConfig {
    let mut config = GroupConfig::new(bootstrap(broker), group, topics.iter().copied());
    config.session_timeout = Duration::from_millis(1_500);
    config.rebalance_timeout = Duration::from_secs(3);
    config.fetch_max_wait = Duration::from_millis(100);
    config.retry_backoff = Duration::from_millis(20);
    config
}

/// Produces `(key, value)` pairs and waits for every acknowledgement;
/// returns `(partition, offset)` of each.
async fn produce(broker: &Broker, topic: &str, records: &[(String, String)]) -> Vec<(u32, u64)> {
    let producer = Producer::connect(ProducerConfig::new(bootstrap(broker)))
        .await
        .unwrap();
    let mut deliveries = Vec::new();
    for (key, value) in records {
        let record = ProducerRecord::new(topic, value.clone()).key(key.clone());
        deliveries.push(producer.send(record).await.unwrap());
    }
    let mut stored = Vec::new();
    for delivery in deliveries {
        let delivery = delivery.await.unwrap();
        stored.push((delivery.partition, delivery.offset.0));
    }
    producer.close().await.unwrap();
    stored
}

fn keyed(prefix: &str, count: usize) -> Vec<(String, String)> {
    (0..count)
        .map(|i| (format!("k{}", i % 7), format!("{prefix}-{i}")))
        .collect()
}

fn value(record: &ConsumerRecord) -> String {
    String::from_utf8(record.value.as_ref().unwrap().to_vec()).unwrap()
}

/// Polls until `count` records arrived (or the deadline), completing and
/// committing them as it goes.
async fn consume_and_commit(consumer: &mut GroupConsumer, count: usize) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + DEADLINE;
    let mut records = Vec::new();
    while records.len() < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count} records arrived",
            records.len()
        );
        let polled = consumer.poll().await.unwrap();
        for record in &polled.records {
            consumer.complete(record);
        }
        records.extend(polled.records);
        consumer.commit().await.unwrap();
    }
    records
}

async fn committed(broker: &Broker, group: &str) -> BTreeMap<TopicPartition, Option<u64>> {
    admin(broker)
        .await
        .fetch_offsets(group, None)
        .await
        .unwrap()
        .into_iter()
        .map(|offset| (offset.partition, offset.next_offset.map(|o| o.0)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_groups_read_the_same_records_independently_and_deleting_one_changes_nothing_for_the_other()
 {
    let broker = Broker::start(&[]);
    create_topic(&broker, "orders", 2).await;
    produce(&broker, "orders", &keyed("first", 20)).await;

    let mut search = GroupConsumer::connect(settings(&broker, "search", &["orders"]))
        .await
        .unwrap();
    let mut analytics = GroupConsumer::connect(settings(&broker, "analytics", &["orders"]))
        .await
        .unwrap();
    let read_by_search = consume_and_commit(&mut search, 20).await;
    let read_by_analytics = consume_and_commit(&mut analytics, 20).await;
    let values =
        |records: &[ConsumerRecord]| -> BTreeSet<String> { records.iter().map(value).collect() };
    assert_eq!(
        values(&read_by_search),
        values(&read_by_analytics),
        "each group reads everything"
    );
    search.close().await.unwrap();

    let before = committed(&broker, "analytics").await;
    admin(&broker).await.delete_group("search").await.unwrap();
    assert_eq!(
        committed(&broker, "analytics").await,
        before,
        "the other group's offsets stay"
    );

    produce(&broker, "orders", &keyed("second", 5)).await;
    let more = consume_and_commit(&mut analytics, 5).await;
    assert!(
        more.iter().all(|r| value(r).starts_with("second")),
        "analytics resumes where it was"
    );
    analytics.close().await.unwrap();

    // The deleted group's topic data is all there: a new member of a group
    // with that name starts from the beginning.
    let mut reborn = GroupConsumer::connect(settings(&broker, "search", &["orders"]))
        .await
        .unwrap();
    assert_eq!(consume_and_commit(&mut reborn, 25).await.len(), 25);
    reborn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_killed_between_its_sink_commit_and_its_offset_commit_is_replaced_and_the_replay_has_one_effect()
 {
    let broker = Broker::start(&[]);
    create_topic(&broker, "orders", 1).await;
    let events = [
        OrderEvent {
            event_id: "M16".into(),
            order_id: "O51".into(),
            version: 2,
            status: "placed".into(),
        },
        OrderEvent {
            event_id: "M17".into(),
            order_id: "O51".into(),
            version: 3,
            status: "paid".into(),
        },
    ];
    let records: Vec<(String, String)> = events
        .iter()
        .map(|e| (e.order_id.clone(), e.encode()))
        .collect();
    produce(&broker, "orders", &records).await;
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("search.sqlite");

    let mut first = GroupConsumer::connect(settings(&broker, "search", &["orders"]))
        .await
        .unwrap();
    let polled = consume_and_commit_none(&mut first, 2).await;
    let mut projection = Projection::open(&database).unwrap();
    // M16: sink commit, then offset commit.
    let event = OrderEvent::parse(polled[0].value.as_deref().unwrap()).unwrap();
    assert_eq!(projection.apply(&event).unwrap(), Applied::Updated);
    first.complete(&polled[0]);
    first.commit().await.unwrap();
    // M17: sink commit ... and the member dies before its offset commit.
    let event = OrderEvent::parse(polled[1].value.as_deref().unwrap()).unwrap();
    assert_eq!(projection.apply(&event).unwrap(), Applied::Updated);
    first.complete(&polled[1]);
    drop(first);
    drop(projection);

    let mut second = GroupConsumer::connect(settings(&broker, "search", &["orders"]))
        .await
        .unwrap();
    let replayed = consume_and_commit_none(&mut second, 1).await;
    assert_eq!(replayed[0].offset, Offset(1), "the replacement replays M17");
    let mut projection = Projection::open(&database).unwrap();
    let event = OrderEvent::parse(replayed[0].value.as_deref().unwrap()).unwrap();
    assert_eq!(
        projection.apply(&event).unwrap(),
        Applied::Duplicate {
            first_result: "updated".to_owned()
        }
    );
    second.complete(&replayed[0]);
    second.commit().await.unwrap();
    let order = projection.order("O51").unwrap().unwrap();
    assert_eq!((order.version, order.status.as_str()), (3, "paid"));
    assert_eq!(
        order.updates, 2,
        "M16 and M17 each changed the view exactly once"
    );
    assert_eq!(projection.processed_count().unwrap(), 2);
    second.close().await.unwrap();
    assert_eq!(
        committed(&broker, "search").await[&TopicPartition::new("orders", 0)],
        Some(2)
    );
}

/// Polls until `count` records arrived, without completing them.
async fn consume_and_commit_none(
    consumer: &mut GroupConsumer,
    count: usize,
) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + DEADLINE;
    let mut records = Vec::new();
    while records.len() < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count} records arrived",
            records.len()
        );
        records.extend(consumer.poll().await.unwrap().records);
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_from_an_older_generation_after_a_rebalance_is_rejected() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "orders", 2).await;
    produce(&broker, "orders", &keyed("x", 10)).await;
    let mut first = GroupConsumer::connect(settings(&broker, "g", &["orders"]))
        .await
        .unwrap();
    let old = first.wait_joined(DEADLINE).await.unwrap();
    let mut second = GroupConsumer::connect(settings(&broker, "g", &["orders"]))
        .await
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    // Both members poll until the rebalance gave the second one a share.
    while second.assignment().is_empty()
        || first
            .generation()
            .is_none_or(|g| g.generation == old.generation)
    {
        assert!(Instant::now() < deadline, "no rebalance happened");
        first.poll().await.unwrap();
        second.poll().await.unwrap();
    }
    let current = first.generation().unwrap();
    assert!(current.generation > old.generation);
    let owned = first.assignment();
    let offsets = [OffsetToCommit {
        partition: owned
            .first()
            .cloned()
            .unwrap_or_else(|| TopicPartition::new("orders", 0)),
        next_offset: Offset(1),
        metadata: None,
    }];
    let stale = admin(&broker)
        .await
        .commit_offsets("g", &old, &offsets)
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Some(ErrorCode::IllegalGeneration), "{stale}");
    first.close().await.unwrap();
    second.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_beyond_the_high_watermark_is_rejected() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "orders", 1).await;
    produce(&broker, "orders", &keyed("x", 3)).await;
    let admin = admin(&broker).await;
    let partition = TopicPartition::new("orders", 0);
    let at = |offset| {
        [OffsetToCommit {
            partition: partition.clone(),
            next_offset: Offset(offset),
            metadata: Some("manual".to_owned()),
        }]
    };
    // Manual offsets of a group without members: up to the high watermark.
    let results = admin
        .commit_offsets("manual", &MemberGeneration::none(), &at(3))
        .await
        .unwrap();
    assert!(results[0].1.is_ok(), "{:?}", results[0].1);
    let results = admin
        .commit_offsets("manual", &MemberGeneration::none(), &at(4))
        .await
        .unwrap();
    let error = results[0].1.as_ref().unwrap_err();
    assert_eq!(
        error.code(),
        Some(ErrorCode::OffsetBeyondHighWatermark),
        "{error}"
    );
    assert_eq!(committed(&broker, "manual").await[&partition], Some(3));

    // A member in its current generation is held to the same bound.
    let mut member = GroupConsumer::connect(settings(&broker, "members", &["orders"]))
        .await
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    while member.assignment().is_empty() {
        assert!(Instant::now() < deadline);
        member.poll().await.unwrap();
    }
    let generation = member.generation().unwrap();
    let results = admin
        .commit_offsets("members", &generation, &at(4))
        .await
        .unwrap();
    let error = results[0].1.as_ref().unwrap_err();
    assert_eq!(
        error.code(),
        Some(ErrorCode::OffsetBeyondHighWatermark),
        "{error}"
    );
    member.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_consumer_resumes_from_its_bookmark_and_catches_up_while_producers_keep_writing() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "events", 2).await;
    let acknowledged = Arc::new(Mutex::new(BTreeSet::<(u32, u64)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let bootstrap = bootstrap(&broker);
        let acknowledged = Arc::clone(&acknowledged);
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let producer = Producer::connect(ProducerConfig::new(bootstrap))
                .await
                .unwrap();
            let mut index = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let record = ProducerRecord::new("events", format!("e-{index}"))
                    .key(format!("k{}", index % 11));
                let delivery = producer.send(record).await.unwrap().await.unwrap();
                acknowledged
                    .lock()
                    .await
                    .insert((delivery.partition, delivery.offset.0));
                index += 1;
            }
            producer.close().await.unwrap();
        })
    };
    let wait_for = |count: usize| {
        let acknowledged = Arc::clone(&acknowledged);
        async move {
            let deadline = Instant::now() + DEADLINE;
            while acknowledged.lock().await.len() < count {
                assert!(Instant::now() < deadline, "the producer stalled");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_for(300).await;
    let mut first = GroupConsumer::connect(settings(&broker, "search", &["events"]))
        .await
        .unwrap();
    let before_pause = consume_and_commit(&mut first, 200).await;
    first.close().await.unwrap();
    let bookmark = committed(&broker, "search").await;

    // Paused while the producer keeps writing.
    let paused_at = acknowledged.lock().await.len();
    wait_for(paused_at + 500).await;

    let mut second = GroupConsumer::connect(settings(&broker, "search", &["events"]))
        .await
        .unwrap();
    let mut seen: BTreeSet<(u32, u64)> = BTreeSet::new();
    let mut first_offsets: BTreeMap<u32, u64> = BTreeMap::new();
    let mut writer = Some(writer);
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "did not catch up");
        let polled = second.poll().await.unwrap();
        for record in &polled.records {
            first_offsets
                .entry(record.partition)
                .or_insert(record.offset.0);
            seen.insert((record.partition, record.offset.0));
            second.complete(record);
        }
        second.commit().await.unwrap();
        if seen.len() >= 500
            && let Some(writer) = writer.take()
        {
            // The backlog was read while writes went on; stop them so that
            // "caught up" has a fixed end.
            stop.store(true, Ordering::Relaxed);
            writer.await.unwrap();
        }
        if writer.is_none() {
            let acknowledged = acknowledged.lock().await;
            let after_bookmark = |(partition, offset): &&(u32, u64)| {
                let bookmark = bookmark
                    .get(&TopicPartition::new("events", *partition))
                    .copied()
                    .flatten()
                    .unwrap_or(0);
                *offset >= bookmark
            };
            if acknowledged
                .iter()
                .filter(after_bookmark)
                .all(|record| seen.contains(record))
            {
                break;
            }
        }
    }
    for (partition, first_offset) in &first_offsets {
        let bookmark = bookmark
            .get(&TopicPartition::new("events", *partition))
            .copied()
            .flatten()
            .unwrap_or(0);
        assert_eq!(
            *first_offset, bookmark,
            "partition {partition} resumed at its bookmark"
        );
    }
    // Every acknowledged record was read by one of the two members: no gap
    // at the pause.
    let mut all: BTreeSet<(u32, u64)> = before_pause
        .iter()
        .map(|r| (r.partition, r.offset.0))
        .collect();
    all.extend(seen);
    for record in acknowledged.lock().await.iter() {
        assert!(all.contains(record), "{record:?} was never read");
    }
    second.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_processing_with_out_of_order_completion_commits_only_the_prefix() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "orders", 1).await;
    produce(&broker, "orders", &keyed("x", 10)).await;
    let mut consumer = GroupConsumer::connect(settings(&broker, "g", &["orders"]))
        .await
        .unwrap();
    let records = consume_and_commit_none(&mut consumer, 10).await;
    let completer = consumer.completer();
    // Workers finish in any order; offset 5 is slow.
    let workers: Vec<_> = records
        .iter()
        .filter(|r| r.offset.0 != 5)
        .rev()
        .cloned()
        .map(|record| {
            let completer = completer.clone();
            tokio::spawn(async move { completer.complete(&record) })
        })
        .collect();
    for worker in workers {
        assert!(worker.await.unwrap());
    }
    let partition = TopicPartition::new("orders", 0);
    assert_eq!(
        consumer.commit().await.unwrap(),
        vec![(partition.clone(), Offset(5))]
    );
    assert_eq!(
        committed(&broker, "g").await[&partition],
        Some(5),
        "never past the unfinished 5"
    );
    consumer.complete(&records[5]);
    assert_eq!(
        consumer.commit().await.unwrap(),
        vec![(partition.clone(), Offset(10))]
    );
    consumer.close().await.unwrap();
    assert_eq!(committed(&broker, "g").await[&partition], Some(10));
}

/// Runs a group with `policy` over `orders` until `expected` records were
/// handled; the handler fails on values starting with "poison".
async fn run_with_policy(
    broker: &Broker,
    group: &str,
    policy: PoisonPolicy,
    expected: usize,
) -> Result<(), ClientError> {
    let mut config = settings(broker, group, &["orders"]);
    config.poison = policy;
    config.principal = Some(format!("{group}-worker"));
    let mut consumer = GroupConsumer::connect(config).await.unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let handler = move |record: ConsumerRecord| {
        let counter = Arc::clone(&counter);
        async move {
            if value(&record).starts_with("poison") {
                return Err(format!("cannot parse {}", value(&record)));
            }
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    };
    let shutdown = async move {
        while done.load(Ordering::SeqCst) < expected {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let result = tokio::time::timeout(DEADLINE, consumer.run(handler, shutdown))
        .await
        .expect("run finished");
    consumer.close().await.unwrap();
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_record_under_each_policy_behaves_as_specified_and_leaves_an_audit_record() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "orders", 1).await;
    create_topic(&broker, "orders.dlq", 1).await;
    let records: Vec<(String, String)> = ["ok-0", "poison-1", "ok-2"]
        .iter()
        .map(|v| ("O1".to_owned(), (*v).to_owned()))
        .collect();
    produce(&broker, "orders", &records).await;
    let retries = |policy: PoisonPolicy| policy.with_retries(1, Duration::from_millis(10));
    let partition = TopicPartition::new("orders", 0);

    let stopped = run_with_policy(&broker, "stopper", retries(PoisonPolicy::stop()), 3)
        .await
        .unwrap_err();
    assert!(
        matches!(stopped, ClientError::PoisonStopped { offset: 1, .. }),
        "{stopped}"
    );
    assert_eq!(
        committed(&broker, "stopper").await[&partition],
        Some(1),
        "the offset stays"
    );

    run_with_policy(&broker, "skipper", retries(PoisonPolicy::skip()), 2)
        .await
        .unwrap();
    assert_eq!(committed(&broker, "skipper").await[&partition], Some(3));

    run_with_policy(
        &broker,
        "quarantiner",
        retries(PoisonPolicy::quarantine("orders.dlq")),
        2,
    )
    .await
    .unwrap();
    assert_eq!(committed(&broker, "quarantiner").await[&partition], Some(3));
    let mut dead = GroupConsumer::connect(settings(&broker, "dlq-reader", &["orders.dlq"]))
        .await
        .unwrap();
    let copies = consume_and_commit(&mut dead, 1).await;
    assert_eq!(value(&copies[0]), "poison-1");
    let header = |name: &str| {
        let header = copies[0]
            .headers
            .iter()
            .find(|h| h.key == name)
            .expect(name);
        String::from_utf8(header.value.as_ref().unwrap().to_vec()).unwrap()
    };
    assert_eq!(
        (
            header("origin-topic"),
            header("origin-partition"),
            header("origin-offset"),
            header("origin-group")
        ),
        (
            "orders".to_owned(),
            "0".to_owned(),
            "1".to_owned(),
            "quarantiner".to_owned()
        )
    );
    assert!(header("error").contains("cannot parse poison-1"));
    dead.close().await.unwrap();

    let audit = admin(&broker).await.read_audit(None).await.unwrap();
    let find = |group: &str| {
        audit
            .iter()
            .find(|entry| entry.group == group)
            .unwrap_or_else(|| panic!("no audit record of {group}: {audit:?}"))
    };
    for (group, kind) in [
        ("stopper", "stop"),
        ("skipper", "skip"),
        ("quarantiner", "quarantine"),
    ] {
        let entry = find(group);
        assert_eq!(entry.kind, kind);
        assert_eq!(
            (entry.topic.as_str(), entry.partition, entry.offset),
            ("orders", Some(0), Some(1))
        );
        assert_eq!(entry.principal, format!("{group}-worker"));
        assert!(entry.reason.contains("cannot parse poison-1"), "{entry:?}");
        assert!(entry.at_ms > 0);
    }
    let quarantine = find("quarantiner");
    assert_eq!(quarantine.dead_letter_topic.as_deref(), Some("orders.dlq"));
    assert_eq!(quarantine.dead_letter_offset, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_reset_without_a_reason_is_refused_and_one_with_a_reason_is_audited() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "orders", 1).await;
    produce(&broker, "orders", &keyed("x", 5)).await;
    let admin = admin(&broker).await;
    let partition = TopicPartition::new("orders", 0);
    admin
        .commit_offsets(
            "search",
            &MemberGeneration::none(),
            &[OffsetToCommit {
                partition: partition.clone(),
                next_offset: Offset(5),
                metadata: None,
            }],
        )
        .await
        .unwrap();

    // The broker refuses it, whatever the client does.
    let mut client = broker.client();
    let request = ResetOffsetsRequest {
        group: "search".to_owned(),
        topic: "orders".to_owned(),
        partitions: None,
        to: WireTarget::Earliest,
        reason: String::new(),
        principal: "ops".to_owned(),
        dry_run: false,
    };
    let body = client.call(&request, &[]).unwrap();
    let (response, _) =
        corelog_wire::message::decode_response::<ResetOffsetsResponse>(&body.bytes).unwrap();
    assert_eq!(
        ErrorCode::from_code(response.error_code.to_native()),
        Some(ErrorCode::AuditReasonRequired)
    );
    // The library and the CLI refuse it before sending.
    let refused = admin
        .reset_offsets(&ResetOffsets::new(
            "search",
            "orders",
            ResetTarget::Earliest,
            "",
            "ops",
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ClientError::InvalidArgument(_)),
        "{refused}"
    );
    let cli = std::process::Command::new(binary("corelog"))
        .args([
            "--bootstrap",
            &bootstrap(&broker),
            "group",
            "reset-offsets",
            "search",
            "--topic",
            "orders",
            "--to-earliest",
        ])
        .output()
        .unwrap();
    assert_eq!(cli.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&cli.stderr).contains("--reason"));
    assert_eq!(
        committed(&broker, "search").await[&partition],
        Some(5),
        "nothing moved"
    );

    let reset = ResetOffsets::new(
        "search",
        "orders",
        ResetTarget::Offset(2),
        "replay after the fix",
        "ops:alice",
    );
    let outcome = admin.reset_offsets(&reset).await.unwrap();
    assert_eq!(
        (outcome.partitions[0].before, outcome.partitions[0].after),
        (Some(5), Some(2))
    );
    assert_eq!(committed(&broker, "search").await[&partition], Some(2));
    let audit = admin.read_audit(Some("search")).await.unwrap();
    // The manual commit of 5 above is audited too (issue 35, item 11).
    let manual = &audit[0];
    assert_eq!(
        (manual.kind, manual.before.clone(), manual.after.clone()),
        ("offset-reset", vec![(0, -1)], vec![(0, 5)])
    );
    let entry = audit
        .iter()
        .find(|e| Some(e.audit_offset) == outcome.audit_offset)
        .unwrap();
    assert_eq!(entry.kind, "offset-reset");
    assert_eq!(
        (entry.reason.as_str(), entry.principal.as_str()),
        ("replay after the fix", "ops:alice")
    );
    assert_eq!(
        (entry.before.clone(), entry.after.clone()),
        (vec![(0, 5)], vec![(0, 2)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_with_sigkill_keeps_every_acknowledged_commit() {
    let mut broker = Broker::start(&[]);
    create_topic(&broker, "orders", 4).await;
    produce(&broker, "orders", &keyed("x", 400)).await;
    let mut consumer = GroupConsumer::connect(settings(&broker, "search", &["orders"]))
        .await
        .unwrap();
    let mut acknowledged: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
    let deadline = Instant::now() + DEADLINE;
    let mut read = 0;
    while read < 400 {
        assert!(Instant::now() < deadline, "{read} of 400 read");
        let polled = consumer.poll().await.unwrap();
        // Commit every few records, so that many commits are acknowledged.
        for chunk in polled.records.chunks(7) {
            for record in chunk {
                consumer.complete(record);
            }
            for (partition, offset) in consumer.commit().await.unwrap() {
                acknowledged.insert(partition, offset);
            }
            read += chunk.len();
        }
    }
    // No commit is in flight now; the member is abandoned, not closed.
    drop(consumer);
    broker.kill();
    broker.spawn();
    let recovered = committed(&broker, "search").await;
    for (partition, offset) in &acknowledged {
        assert_eq!(
            recovered.get(partition).copied().flatten(),
            Some(offset.0),
            "{partition}: acknowledged commit lost"
        );
    }
    assert_eq!(acknowledged.values().map(|o| o.0).sum::<u64>(), 400);
}

/// The value of the series `name{labels}` on the broker's `/metrics`.
fn series(broker: &Broker, name: &str, labels: &str) -> Option<i64> {
    let line_start = format!("{name}{{{labels}}} ");
    broker
        .metrics()
        .lines()
        .find_map(|line| line.strip_prefix(&line_start)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_lag_series_are_on_metrics_with_the_lag_of_each_partition() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "lagged", 1).await;
    produce(&broker, "lagged", &keyed("first", 10)).await;
    let mut reader = GroupConsumer::connect(settings(&broker, "reader", &["lagged"]))
        .await
        .unwrap();
    consume_and_commit(&mut reader, 10).await;
    reader.close().await.unwrap();
    // Six more the group has not read: its lag is six records.
    produce(&broker, "lagged", &keyed("later", 6)).await;

    let labels = "shard=\"0\",group=\"reader\",topic=\"lagged\",partition=\"0\"";
    let deadline = Instant::now() + Duration::from_secs(30);
    while series(&broker, "corelog_group_lag_records", labels) != Some(6) {
        assert!(
            Instant::now() < deadline,
            "corelog_group_lag_records never showed 6: {:?}\n{}",
            series(&broker, "corelog_group_lag_records", labels),
            broker.metrics()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let bytes = series(&broker, "corelog_group_lag_bytes", labels).expect("lag in bytes");
    assert!(
        bytes > 6 * 5,
        "six records of about ten bytes each: {bytes}"
    );
    let age = series(&broker, "corelog_group_lag_seconds", labels).expect("lag in seconds");
    assert!((0..60).contains(&age), "{age}");
    // Seven days of retention by default, all of it left.
    let left =
        series(&broker, "corelog_group_retention_left_seconds", labels).expect("retention left");
    assert!(left > 6 * 24 * 3600 && left <= 7 * 24 * 3600, "{left}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_partition_health_build_and_rebalance_series_are_on_metrics() {
    let broker = Broker::start(&[]);
    create_topic(&broker, "watched", 2).await;
    produce(&broker, "watched", &keyed("one", 4)).await;
    let mut first = GroupConsumer::connect(settings(&broker, "churny", &["watched"]))
        .await
        .unwrap();
    consume_and_commit(&mut first, 4).await;
    // The coordinator's first sighting of the group is a baseline, not a
    // rebalance: wait for it before the next member joins.
    let group = "shard=\"0\",group=\"churny\"";
    let deadline = Instant::now() + Duration::from_secs(30);
    while series(&broker, "corelog_group_generation", group).is_none() {
        assert!(
            Instant::now() < deadline,
            "no generation series:\n{}",
            broker.metrics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.close().await.unwrap();
    let mut second = GroupConsumer::connect(settings(&broker, "churny", &["watched"]))
        .await
        .unwrap();
    produce(&broker, "watched", &keyed("two", 2)).await;
    consume_and_commit(&mut second, 2).await;

    // A single node is its own one-voter controller and leads it; all its
    // partitions are led here, none offline.
    let node = "node=\"1\"";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rebalances = series(&broker, "corelog_group_rebalances_total", group);
        let ready = series(&broker, "corelog_controller_is_leader", node) == Some(1)
            && series(&broker, "corelog_partitions_offline", node) == Some(0)
            && rebalances.is_some_and(|count| count >= 1);
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "series missing or wrong:\n{}",
            broker.metrics()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    second.close().await.unwrap();
    let text = broker.metrics();
    assert_eq!(
        series(&broker, "corelog_controller_leader_id", node),
        Some(1),
        "{text}"
    );
    assert!(series(&broker, "corelog_controller_term", node).is_some_and(|term| term >= 1));
    assert!(
        series(&broker, "corelog_controller_commit_index", node).is_some_and(|index| index > 0)
    );
    assert_eq!(
        series(&broker, "corelog_partitions_leaderless", node),
        Some(0),
        "{text}"
    );
    assert_eq!(
        series(&broker, "corelog_partitions_under_replicated", node),
        Some(0),
        "{text}"
    );
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        series(&broker, "corelog_build_info", &version),
        Some(1),
        "{text}"
    );
    assert!(
        series(&broker, "corelog_group_generation", group)
            .is_some_and(|generation| generation >= 2),
        "{text}"
    );
}
