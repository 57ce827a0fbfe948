//! Shard-aware clients against a real two-shard `corelogd`: the client
//! sends each partition's produce to the shard that owns it, on that
//! shard's own port, so the broker forwards nothing between its cores;
//! a client that is not shard-aware, or a broker without per-shard ports,
//! still works through forwarding.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use corelog_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, NewTopic, Producer, ProducerConfig,
    ProducerRecord, StartFrom,
};
use corelog_tests::wire_client::ask;
use corelog_tests::{Broker, Client, batch};
use corelog_wire::batch::ProducerIdentity;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::describe_shards::DescribeShardsRequest;
use corelog_wire::message::metadata::MetadataRequest;

const PARTITIONS: u32 = 8;
const RECORDS: usize = 400;

/// The sum of `corelog_forwarded_batches_total` for `api` over the shards.
fn forwarded(broker: &Broker, api: &str) -> u64 {
    let label = format!("api=\"{api}\"");
    broker
        .metrics()
        .lines()
        .filter(|line| line.starts_with("corelog_forwarded_batches_total") && line.contains(&label))
        .filter_map(|line| line.rsplit(' ').next()?.trim().parse::<u64>().ok())
        .sum()
}

/// Produces `RECORDS` keyed records over every partition of `topic` and
/// reads them back from the start; returns how many were read.
async fn produce_and_read(broker: &Broker, topic: &str, shard_aware: bool) -> usize {
    let bootstrap = broker.addr.to_string();
    let mut client = ClientConfig::new(bootstrap.clone());
    client.shard_aware = shard_aware;
    Admin::connect(client.clone())
        .await
        .unwrap()
        .create_topic(NewTopic::new(topic, PARTITIONS))
        .await
        .unwrap();
    let mut config = ProducerConfig::new(bootstrap.clone());
    config.client = client.clone();
    config.linger = Duration::from_millis(1);
    let producer = Producer::connect(config).await.unwrap();
    let mut deliveries = Vec::new();
    for index in 0..RECORDS {
        let record = ProducerRecord::new(topic, format!("value-{index}")).key(format!("k{index}"));
        deliveries.push(producer.send(record).await.unwrap());
    }
    for delivery in deliveries {
        delivery.await.unwrap();
    }
    producer.close().await.unwrap();

    let mut config = ConsumerConfig::new(bootstrap);
    config.client = client;
    let mut consumer = Consumer::connect(config).await.unwrap();
    consumer
        .assign_topic(topic, StartFrom::Earliest)
        .await
        .unwrap();
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while (read < RECORDS || !consumer.caught_up()) && tokio::time::Instant::now() < deadline {
        read += consumer.poll().await.unwrap().records.len();
    }
    read
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_aware_producer_reaches_each_partition_on_its_own_shard() {
    let broker = Broker::start(&["--shards", "2"]);
    assert_eq!(produce_and_read(&broker, "direct", true).await, RECORDS);
    assert_eq!(
        forwarded(&broker, "Produce"),
        0,
        "every batch went to the shard that owns its partition"
    );

    // The same load from a client that connects to the shared port only:
    // the kernel spreads its connections, and about half of the batches
    // land on the shard that does not own them.
    assert_eq!(produce_and_read(&broker, "forwarded", false).await, RECORDS);
    assert!(
        forwarded(&broker, "Produce") > 0,
        "a client that is not shard-aware is forwarded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_shard_ports_serves_a_shard_aware_client_through_forwarding() {
    let broker = Broker::start(&["--shards", "2", "--shard-ports", "off"]);
    let answer = ask(
        &mut broker.client(),
        &DescribeShardsRequest { shards: None },
    );
    assert!(answer.shards.is_empty(), "{answer:?}");
    assert_eq!(produce_and_read(&broker, "shared", true).await, RECORDS);
}

#[test]
fn each_listed_port_reaches_its_own_shard_only() {
    let broker = Broker::start(&["--shards", "2"]);
    let mut client = broker.client();
    assert_eq!(client.create_topic("orders", 4, &[]), ErrorCode::None);
    let answer = ask(&mut client, &DescribeShardsRequest { shards: None });
    assert_eq!(answer.node_id, 1);
    assert_eq!(
        answer.shards.iter().map(|e| e.shard).collect::<Vec<_>>(),
        [0, 1]
    );
    let metadata = ask(
        &mut client,
        &MetadataRequest {
            topics: Some(vec!["orders".to_owned()]),
        },
    );
    let partitions = &metadata.topics[0].partitions;
    for endpoint in &answer.shards {
        assert!(
            endpoint.port != 0 && endpoint.port != broker.addr.port(),
            "{answer:?}"
        );
        let addr = SocketAddr::new(broker.addr.ip(), endpoint.port);
        let mut shard = Client::connect(addr).unwrap();
        shard.handshake().unwrap();
        for partition in partitions {
            let before = forwarded(&broker, "Produce");
            let records = batch("v", "k", 1, ProducerIdentity::NONE);
            let (code, _) = shard.produce("orders", partition.partition, &records);
            assert_eq!(code, ErrorCode::None);
            let hops = forwarded(&broker, "Produce") - before;
            let owned_here = partition.owner_shard == endpoint.shard;
            assert_eq!(
                hops,
                u64::from(!owned_here),
                "partition {} (shard {}) produced on shard {}'s port",
                partition.partition,
                partition.owner_shard,
                endpoint.shard
            );
        }
    }
    assert!(
        partitions.iter().any(|p| p.owner_shard == 0)
            && partitions.iter().any(|p| p.owner_shard == 1),
        "four partitions are spread over both shards: {partitions:?}"
    );
}
