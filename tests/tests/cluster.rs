//! A 3-broker cluster as real processes: the Raft controller elects a
//! leader, brokers register and are unfenced, topics are placed over
//! racks, and the controller survives the loss of its leader with the
//! metadata intact.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use corelog_tests::wire_client::ask;
use corelog_tests::{Broker, start_cluster};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::create_topics::{CreatableTopic, CreateTopicsRequest};
use corelog_wire::message::metadata::{MetadataRequest, MetadataResponse};

fn metadata(broker: &Broker) -> Option<MetadataResponse> {
    let mut client = corelog_tests::Client::connect(broker.addr).ok()?;
    client.handshake().ok()?;
    Some(ask(&mut client, &MetadataRequest { topics: None }))
}

/// Polls `broker`'s metadata until `done` holds; panics with the last one.
fn wait_for(
    broker: &Broker,
    what: &str,
    done: impl Fn(&MetadataResponse) -> bool,
) -> MetadataResponse {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(found) = metadata(broker) {
            if done(&found) {
                return found;
            }
            last = Some(found);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}; last metadata: {last:?}");
}

fn create_topic(
    broker: &Broker,
    name: &str,
    partitions: u32,
    replication_factor: u16,
) -> ErrorCode {
    let mut client = broker.client();
    let response = ask(
        &mut client,
        &CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.to_owned(),
                partitions,
                replication_factor,
                configs: Vec::new(),
            }],
            timeout_ms: 10_000,
            validate_only: false,
        },
    );
    ErrorCode::from_code(response.results[0].error_code).unwrap()
}

fn create_topic_retrying(broker: &Broker, name: &str, partitions: u32, factor: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let code = create_topic(broker, name, partitions, factor);
        if code == ErrorCode::None {
            return;
        }
        assert!(
            code.is_retriable() || code == ErrorCode::InvalidReplicationFactor,
            "{code}"
        );
        assert!(
            Instant::now() < deadline,
            "topic {name} not created: {code}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_three_broker_cluster_places_topics_and_survives_losing_its_controller_leader() {
    let mut brokers = start_cluster(3, &[]);

    // Every broker registers and sees the other two.
    for broker in &brokers {
        wait_for(
            broker,
            "three registered brokers and a controller",
            |found| found.brokers.len() == 3 && found.controller_id.is_some(),
        );
    }

    // Placement: replication factor 3 puts one replica on each broker,
    // leaders spread over the brokers.
    create_topic_retrying(&brokers[0], "orders", 6, 3);
    // Placement over three brokers means all three are unfenced, and each
    // shows it on its metrics.
    for broker in &brokers {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !broker
            .metrics()
            .contains("corelog_broker_fenced{shard=\"0\"} 0")
        {
            assert!(
                Instant::now() < deadline,
                "broker {} does not report itself unfenced",
                broker.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let placed = wait_for(&brokers[1], "the topic on another broker", |found| {
        found.topics.iter().any(|topic| topic.name == "orders")
    });
    let orders = placed
        .topics
        .iter()
        .find(|topic| topic.name == "orders")
        .unwrap();
    assert_eq!(orders.partitions.len(), 6);
    let mut leaders = BTreeSet::new();
    for partition in &orders.partitions {
        let replicas: BTreeSet<u32> = partition.replicas.iter().copied().collect();
        assert_eq!(replicas, BTreeSet::from([1, 2, 3]), "{partition:?}");
        let leader = partition.leader.expect("a new partition has a leader");
        assert!(replicas.contains(&leader));
        leaders.insert(leader);
    }
    assert_eq!(leaders.len(), 3, "leaders spread over every broker");
    // Without a replication factor, a topic gets three replicas.
    create_topic_retrying(&brokers[0], "defaulted", 1, 0);
    let defaulted = wait_for(&brokers[0], "the defaulted topic", |found| {
        found.topics.iter().any(|topic| topic.name == "defaulted")
    });
    let defaulted = defaulted
        .topics
        .iter()
        .find(|topic| topic.name == "defaulted")
        .unwrap();
    assert_eq!(defaulted.partitions[0].replicas.len(), 3, "{defaulted:?}");
    // More replicas than brokers is refused with a clear code.
    assert_eq!(
        create_topic(&brokers[0], "too-wide", 1, 4),
        ErrorCode::InvalidReplicationFactor
    );
    // The leader of a partition takes writes (once it has taken its epoch);
    // another replica sends the client to it.
    let leader = orders.partitions[0].leader.unwrap();
    let batch = corelog_tests::batch("a", "k", 1, corelog_wire::batch::ProducerIdentity::NONE);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut leader_client = brokers[(leader - 1) as usize].client();
    let appended = loop {
        let (code, offset) = leader_client.produce("orders", 0, &batch);
        if code != ErrorCode::LeaderNotAvailable || Instant::now() > deadline {
            break (code, offset);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The first leader of an empty log appends no epoch-start marker: the
    // first record is at offset 0.
    assert_eq!(appended, (ErrorCode::None, 0), "append on the leader");
    assert_eq!(
        brokers[(leader % 3) as usize]
            .client()
            .produce("orders", 0, &batch)
            .0,
        ErrorCode::NotLeader,
        "a follower refuses writes"
    );

    // Kill the controller leader: the other two elect a new one, and the
    // metadata is intact there.
    let before = metadata(&brokers[0]).unwrap();
    let old_leader = before.controller_id.unwrap();
    let killed = (old_leader - 1) as usize;
    brokers[killed].kill();
    let survivor = &brokers[(killed + 1) % 3];
    let after = wait_for(survivor, "a new controller leader", |found| {
        found
            .controller_id
            .is_some_and(|leader| leader != old_leader)
    });
    let orders_after = after
        .topics
        .iter()
        .find(|topic| topic.name == "orders")
        .unwrap();
    assert_eq!(orders_after.partitions.len(), 6);
    for (old, new) in orders.partitions.iter().zip(&orders_after.partitions) {
        assert_eq!(old.replicas, new.replicas);
    }
    // The new leader takes changes; RF 3 is refused while a broker is down
    // and fenced, RF 2 is placed on the live two.
    create_topic_retrying(survivor, "payments", 2, 2);

    // The killed broker restarts from its data directory, rejoins, and
    // sees everything committed while it was down.
    brokers[killed].spawn();
    let rejoined = wait_for(
        &brokers[killed],
        "the restarted broker to catch up",
        |found| {
            found.topics.iter().any(|topic| topic.name == "payments")
                && found.topics.iter().any(|topic| topic.name == "orders")
        },
    );
    assert_eq!(rejoined.brokers.len(), 3);
    // Once it is unfenced again, RF 3 is possible.
    create_topic_retrying(&brokers[killed], "audit-trail", 1, 3);
}
