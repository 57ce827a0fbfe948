//! The group consumer and group administration against the fake broker's
//! coordinator: committed prefixes, rebalances, static membership, the
//! tracker's window, the poison policies, and audited resets.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::fake_broker::FakeBroker;
use common::{client_config, producer_config, wait_until};
use corelog_client::admin::{ResetOffsets, ResetTarget};
use corelog_client::group::{
    GroupConfig, GroupConsumer, GroupEvent, MemberGeneration, OffsetToCommit, PoisonPolicy,
    TopicPartition,
};
use corelog_client::{
    Admin, ClientError, ConsumerRecord, ErrorCode, Offset, Producer, ProducerRecord,
};
use corelog_wire::message::audit::AuditKind;

fn config(broker: &FakeBroker, group: &str, topics: &[&str]) -> GroupConfig {
    let mut config = GroupConfig::new(broker.addr(), group, topics.iter().copied());
    config.client = client_config(&broker.addr());
    config.session_timeout = Duration::from_secs(1);
    config.rebalance_timeout = Duration::from_secs(2);
    config.fetch_max_wait = Duration::from_millis(50);
    config.retry_backoff = Duration::from_millis(10);
    config
}

/// Produces `values` to `topic`, the i-th to partition `i % partitions`,
/// each keyed by its value.
async fn produce(broker: &FakeBroker, topic: &str, partitions: u32, values: &[&str]) {
    let producer = Producer::connect(producer_config(&broker.addr()))
        .await
        .unwrap();
    for (index, value) in values.iter().enumerate() {
        let record = ProducerRecord::new(topic, value.to_string())
            .key(value.to_string())
            .partition(index as u32 % partitions);
        producer.send(record).await.unwrap().await.unwrap();
    }
    producer.close().await.unwrap();
}

fn value(record: &ConsumerRecord) -> String {
    String::from_utf8(record.value.as_ref().unwrap().to_vec()).unwrap()
}

/// Polls until `count` records arrived, collecting events too.
async fn poll_records(
    consumer: &mut GroupConsumer,
    count: usize,
) -> (Vec<ConsumerRecord>, Vec<GroupEvent>) {
    let mut records = Vec::new();
    let mut events = Vec::new();
    for _ in 0..200 {
        let polled = consumer.poll().await.unwrap();
        records.extend(polled.records);
        events.extend(polled.events);
        if records.len() >= count {
            return (records, events);
        }
    }
    panic!("only {} of {count} records arrived", records.len());
}

/// Polls until the consumer's assignment has `count` partitions.
async fn poll_until_assigned(consumer: &mut GroupConsumer, count: usize) -> Vec<GroupEvent> {
    let mut events = Vec::new();
    for _ in 0..200 {
        events.extend(consumer.poll().await.unwrap().events);
        if consumer.assignment().len() == count {
            return events;
        }
    }
    panic!(
        "assignment is {:?}, not {count} partitions",
        consumer.assignment()
    );
}

fn p(topic: &str, partition: u32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_completed_prefix_is_committed_and_a_new_member_resumes_there() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    let values: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    produce(&broker, "orders", 1, &values).await;

    let mut first = GroupConsumer::connect(config(&broker, "search", &["orders"]))
        .await
        .unwrap();
    let (records, events) = poll_records(&mut first, 10).await;
    assert!(
        matches!(&events[0], GroupEvent::Assigned { partitions, .. } if partitions == &[p("orders", 0)])
    );
    assert_eq!(records.len(), 10);
    // 0..=4, 6 and 7 done; 5 still running.
    for record in records
        .iter()
        .filter(|r| r.offset.0 <= 4 || r.offset.0 == 6 || r.offset.0 == 7)
    {
        assert!(first.complete(record));
    }
    assert_eq!(first.committable(&p("orders", 0)), Some(Offset(5)));
    let committed = first.commit().await.unwrap();
    assert_eq!(committed, vec![(p("orders", 0), Offset(5))]);
    assert_eq!(broker.committed("search", "orders", 0), Some(5));
    assert!(
        first.commit().await.unwrap().is_empty(),
        "nothing new to commit"
    );
    first.close().await.unwrap();
    assert_eq!(broker.leaves(), 1, "a dynamic member leaves on close");

    let mut second = GroupConsumer::connect(config(&broker, "search", &["orders"]))
        .await
        .unwrap();
    let (records, _) = poll_records(&mut second, 5).await;
    assert_eq!(
        records[0].offset,
        Offset(5),
        "replays from the first unfinished record"
    );
    assert_eq!(value(&records[0]), "v5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_share_the_partitions_and_a_leaver_hands_its_share_over() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 4);
    let mut a = GroupConsumer::connect(config(&broker, "g", &["orders"]))
        .await
        .unwrap();
    poll_until_assigned(&mut a, 4).await;
    let mut b = GroupConsumer::connect(config(&broker, "g", &["orders"]))
        .await
        .unwrap();
    let mut a_events = Vec::new();
    for _ in 0..200 {
        a_events.extend(a.poll().await.unwrap().events);
        b.poll().await.unwrap();
        if a.assignment().len() == 2 && b.assignment().len() == 2 {
            break;
        }
    }
    assert_eq!(a.assignment().len() + b.assignment().len(), 4);
    assert!(
        a.assignment().iter().all(|tp| !b.assignment().contains(tp)),
        "one owner per partition"
    );
    assert!(
        a_events
            .iter()
            .any(|e| matches!(e, GroupEvent::Revoked { partitions, .. } if partitions.len() == 2)),
        "{a_events:?}"
    );
    let generation = a.generation().unwrap().generation;
    assert_eq!(b.generation().unwrap().generation, generation);

    b.close().await.unwrap();
    let events = poll_until_assigned(&mut a, 4).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, GroupEvent::Assigned { .. }))
    );
    assert!(a.generation().unwrap().generation > generation);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_generation_manual_and_beyond_watermark_commits_are_refused() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    produce(&broker, "orders", 1, &["a", "b"]).await;
    let mut consumer = GroupConsumer::connect(config(&broker, "g", &["orders"]))
        .await
        .unwrap();
    let old = consumer.wait_joined(Duration::from_secs(5)).await.unwrap();
    broker.start_rebalance("g");
    wait_until(5, "the member rejoined in a new generation", || {
        consumer
            .generation()
            .is_some_and(|g| g.generation > old.generation)
    })
    .await;
    let current = consumer.generation().unwrap();
    let admin = Admin::connect(client_config(&broker.addr())).await.unwrap();
    let offsets = [OffsetToCommit {
        partition: p("orders", 0),
        next_offset: Offset(1),
        metadata: None,
    }];
    let stale = admin.commit_offsets("g", &old, &offsets).await.unwrap_err();
    assert_eq!(stale.code(), Some(ErrorCode::IllegalGeneration), "{stale}");
    let manual = admin
        .commit_offsets("g", &MemberGeneration::none(), &offsets)
        .await
        .unwrap_err();
    assert_eq!(
        manual.code(),
        Some(ErrorCode::IllegalGeneration),
        "{manual}"
    );
    let beyond = [OffsetToCommit {
        next_offset: Offset(3),
        ..offsets[0].clone()
    }];
    let results = admin.commit_offsets("g", &current, &beyond).await.unwrap();
    let error = results[0].1.as_ref().unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::OffsetBeyondHighWatermark));
    assert_eq!(broker.committed("g", "orders", 0), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_restarting_keeps_its_place_without_leaving_or_rebalancing() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 2);
    let mut settings = config(&broker, "g", &["orders"]);
    settings.instance_id = Some("search-1".to_owned());
    let mut first = GroupConsumer::connect(settings.clone()).await.unwrap();
    poll_until_assigned(&mut first, 2).await;
    let before = first.generation().unwrap();
    first.close().await.unwrap();
    assert_eq!(
        broker.leaves(),
        0,
        "a static member does not leave on close"
    );
    let mut second = GroupConsumer::connect(settings).await.unwrap();
    poll_until_assigned(&mut second, 2).await;
    assert_eq!(
        second.generation().unwrap(),
        before,
        "same member id and generation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_membership_drops_every_partition_and_joins_again_as_new() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    let mut consumer = GroupConsumer::connect(config(&broker, "g", &["orders"]))
        .await
        .unwrap();
    poll_until_assigned(&mut consumer, 1).await;
    let before = consumer.generation().unwrap();
    broker.expel_members("g");
    let mut events = Vec::new();
    for _ in 0..200 {
        events.extend(consumer.poll().await.unwrap().events);
        if events
            .iter()
            .any(|e| matches!(e, GroupEvent::Assigned { .. }))
        {
            break;
        }
    }
    assert!(
        matches!(&events[0], GroupEvent::Lost { partitions } if partitions.len() == 1),
        "{events:?}"
    );
    assert_ne!(consumer.generation().unwrap().member_id, before.member_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_window_pauses_the_partition_until_its_head_completes() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    let values: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    produce(&broker, "orders", 1, &values).await;
    let mut settings = config(&broker, "g", &["orders"]);
    settings.window_records = 3;
    let mut consumer = GroupConsumer::connect(settings).await.unwrap();
    let (records, _) = poll_records(&mut consumer, 3).await;
    let offsets: Vec<u64> = records.iter().map(|r| r.offset.0).collect();
    assert_eq!(offsets, [0, 1, 2], "no more than the window is handed out");
    for _ in 0..3 {
        assert!(consumer.poll().await.unwrap().records.is_empty());
    }
    consumer.complete(&records[1]);
    assert!(
        consumer.poll().await.unwrap().records.is_empty(),
        "the head holds the window"
    );
    consumer.complete(&records[0]);
    let (more, _) = poll_records(&mut consumer, 2).await;
    assert_eq!(more[0].offset, Offset(3), "the rest is fetched again");
    assert_eq!(consumer.committable(&p("orders", 0)), Some(Offset(2)));
}

/// Runs `consumer` with a handler that fails on values starting with
/// "poison", until `expected` records were handled successfully.
async fn run_with_poison(consumer: &mut GroupConsumer, expected: usize) -> Result<(), ClientError> {
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
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), consumer.run(handler, shutdown))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_copies_the_record_then_audits_then_moves_past_it() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    broker.create_topic("orders.dlq", 1);
    produce(&broker, "orders", 1, &["ok-0", "poison-1", "ok-2"]).await;
    let mut settings = config(&broker, "search", &["orders"]);
    settings.poison =
        PoisonPolicy::quarantine("orders.dlq").with_retries(2, Duration::from_millis(1));
    let mut consumer = GroupConsumer::connect(settings).await.unwrap();
    run_with_poison(&mut consumer, 2).await.unwrap();
    assert_eq!(
        broker.committed("search", "orders", 0),
        Some(3),
        "moved past the poison record"
    );

    let copies = broker.records("orders.dlq", 0);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].value.as_deref(), Some(&b"poison-1"[..]));
    let header = |name: &str| {
        let header = copies[0].headers.iter().find(|h| h.key == name).unwrap();
        String::from_utf8(header.value.as_ref().unwrap().to_vec()).unwrap()
    };
    assert_eq!(header("origin-topic"), "orders");
    assert_eq!(header("origin-partition"), "0");
    assert_eq!(header("origin-offset"), "1");
    assert_eq!(header("origin-group"), "search");
    assert!(header("error").contains("cannot parse poison-1"));

    let audit = broker.audit_records();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].kind, AuditKind::Quarantine);
    assert_eq!((audit[0].partition, audit[0].offset), (Some(0), Some(1)));
    assert_eq!(audit[0].dead_letter_topic.as_deref(), Some("orders.dlq"));
    assert_eq!(audit[0].dead_letter_offset, Some(0));
    assert!(audit[0].reason.contains("cannot parse"));
    consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_keeps_the_offset_at_the_poison_record_and_stops_only_its_partition() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 2);
    // Partition 0: ok-0, poison-2, ok-4; partition 1: ok-1, ok-3, ok-5.
    produce(
        &broker,
        "orders",
        2,
        &["ok-0", "ok-1", "poison-2", "ok-3", "ok-4", "ok-5"],
    )
    .await;
    let mut settings = config(&broker, "g", &["orders"]);
    settings.poison = PoisonPolicy::stop().with_retries(1, Duration::from_millis(1));
    let mut consumer = GroupConsumer::connect(settings).await.unwrap();
    let error = run_with_poison(&mut consumer, 100).await.unwrap_err();
    let ClientError::PoisonStopped {
        partition: 0,
        offset: 1,
        ref error,
        ..
    } = error
    else {
        panic!("expected a stop at orders/0@1, got {error}");
    };
    assert!(error.contains("cannot parse poison-2"));
    assert_eq!(
        broker.committed("g", "orders", 0),
        Some(1),
        "the offset stays at the poison record"
    );
    assert_eq!(consumer.stopped()[0].partition, p("orders", 0));
    let audit = broker.audit_records();
    assert_eq!(audit.len(), 1);
    assert_eq!((audit[0].kind, audit[0].offset), (AuditKind::Stop, Some(1)));

    // Running again keeps partition 0 stopped and finishes partition 1.
    produce(&broker, "orders", 2, &["ok-6", "ok-7"]).await;
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&done);
    let handler = move |record: ConsumerRecord| {
        let counter = Arc::clone(&counter);
        async move {
            assert_eq!(record.partition, 1, "the stopped partition is not consumed");
            counter.fetch_add(1, Ordering::SeqCst);
            Ok::<(), String>(())
        }
    };
    let watched = Arc::clone(&done);
    let shutdown = async move {
        while watched.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    consumer.run(handler, shutdown).await.unwrap();
    assert_eq!(broker.committed("g", "orders", 0), Some(1));
    assert_eq!(broker.committed("g", "orders", 1), Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_audits_and_moves_past_the_record() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    produce(&broker, "orders", 1, &["poison-0", "ok-1"]).await;
    let mut settings = config(&broker, "g", &["orders"]);
    settings.poison = PoisonPolicy::skip().with_retries(0, Duration::from_millis(1));
    settings.principal = Some("search-worker".to_owned());
    let mut consumer = GroupConsumer::connect(settings).await.unwrap();
    run_with_poison(&mut consumer, 1).await.unwrap();
    assert_eq!(broker.committed("g", "orders", 0), Some(2));
    let audit = broker.audit_records();
    assert_eq!((audit[0].kind, audit[0].offset), (AuditKind::Skip, Some(0)));
    assert_eq!(audit[0].principal, "search-worker");
}

/// A skip is done only with its audit record: when the broker refuses the
/// audit (the principal lacks group-admin), the partition stops at the
/// poison record and `run` returns, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_whose_audit_is_refused_stops_the_partition_and_run_returns() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    produce(&broker, "orders", 1, &["ok-0", "poison-1", "ok-2"]).await;
    broker.refuse_audits(ErrorCode::GroupAuthorizationFailed);
    let mut settings = config(&broker, "g", &["orders"]);
    settings.poison = PoisonPolicy::skip().with_retries(0, Duration::from_millis(1));
    let mut consumer = GroupConsumer::connect(settings).await.unwrap();
    let error = run_with_poison(&mut consumer, 100).await.unwrap_err();
    let ClientError::PoisonStopped {
        partition: 0,
        offset: 1,
        ref error,
        ..
    } = error
    else {
        panic!("expected a stop at orders/0@1, got {error}");
    };
    assert!(
        error.contains("GROUP_AUTHORIZATION_FAILED") && error.contains("skip was not done"),
        "{error}"
    );
    assert_eq!(broker.refused_audits(), 1);
    assert!(broker.audit_records().is_empty());
    assert_eq!(
        broker.committed("g", "orders", 0),
        Some(1),
        "the offset stays at the poison record"
    );
    assert_eq!(consumer.stopped()[0].partition, p("orders", 0));
    tokio::time::timeout(Duration::from_secs(10), consumer.close())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lists_describes_resets_with_an_audit_reason_and_deletes_groups() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    produce(&broker, "orders", 1, &["a", "b", "c"]).await;
    let mut consumer = GroupConsumer::connect(config(&broker, "search", &["orders"]))
        .await
        .unwrap();
    let (records, _) = poll_records(&mut consumer, 3).await;
    for record in &records {
        consumer.complete(record);
    }
    consumer.commit().await.unwrap();
    let admin = Admin::connect(client_config(&broker.addr())).await.unwrap();

    let busy = admin
        .reset_offsets(&ResetOffsets::new(
            "search",
            "orders",
            ResetTarget::Earliest,
            "replay",
            "ops",
        ))
        .await
        .unwrap_err();
    assert_eq!(busy.code(), Some(ErrorCode::GroupNotEmpty));
    let listed = admin.list_groups(&[]).await.unwrap();
    assert!(listed.unanswered.is_empty(), "{:?}", listed.unanswered);
    let listed = listed.groups;
    assert_eq!((listed[0].group.as_str(), listed[0].members), ("search", 1));
    consumer.close().await.unwrap();

    let described = admin.describe_group("search").await.unwrap();
    assert_eq!(described.state, "Empty");
    assert_eq!(described.partitions[0].committed_offset, Some(3));

    let no_reason = ResetOffsets::new("search", "orders", ResetTarget::Earliest, " ", "ops");
    let refused = admin.reset_offsets(&no_reason).await.unwrap_err();
    assert!(matches!(refused, ClientError::InvalidArgument(ref text) if text.contains("--reason")));

    let mut reset = ResetOffsets::new(
        "search",
        "orders",
        ResetTarget::Offset(1),
        "replay b and c after the fix",
        "ops:alice",
    );
    reset.dry_run = true;
    let outcome = admin.reset_offsets(&reset).await.unwrap();
    assert_eq!(
        (outcome.partitions[0].before, outcome.partitions[0].after),
        (Some(3), Some(1))
    );
    assert_eq!(outcome.audit_offset, None);
    assert_eq!(
        broker.committed("search", "orders", 0),
        Some(3),
        "a dry run changes nothing"
    );
    reset.dry_run = false;
    let outcome = admin.reset_offsets(&reset).await.unwrap();
    assert_eq!(outcome.audit_offset, Some(0));
    assert_eq!(broker.committed("search", "orders", 0), Some(1));

    let audit = admin.read_audit(Some("search")).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].kind, "offset-reset");
    assert_eq!(audit[0].principal, "ops:alice");
    assert_eq!(audit[0].before, [(0, 3)]);
    assert_eq!(audit[0].after, [(0, 1)]);
    assert!(admin.read_audit(Some("other")).await.unwrap().is_empty());

    let offsets = admin.fetch_offsets("search", None).await.unwrap();
    assert_eq!(offsets[0].next_offset, Some(Offset(1)));
    admin.delete_group("search").await.unwrap();
    let gone = admin.delete_group("search").await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::UnknownGroup));
    assert_eq!(
        broker.records("orders", 0).len(),
        3,
        "deleting a group never touches topic data"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_commits_the_completed_prefix_in_the_background() {
    let broker = FakeBroker::start().await;
    broker.create_topic("orders", 1);
    produce(&broker, "orders", 1, &["a", "b", "c"]).await;
    let mut settings = config(&broker, "g", &["orders"]);
    settings.auto_commit = true;
    settings.commit_interval = Duration::from_millis(20);
    let mut consumer = GroupConsumer::connect(settings).await.unwrap();
    let (records, _) = poll_records(&mut consumer, 3).await;
    consumer.complete(&records[0]);
    consumer.complete(&records[2]);
    wait_until(5, "the prefix was auto-committed", || {
        broker.committed("g", "orders", 0) == Some(1)
    })
    .await;
    consumer.complete(&records[1]);
    wait_until(5, "the rest was auto-committed", || {
        broker.committed("g", "orders", 0) == Some(3)
    })
    .await;
    consumer.close().await.unwrap();
}
