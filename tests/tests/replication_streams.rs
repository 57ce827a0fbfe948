//! Replication streams between real brokers: a leader shard sends the new
//! batches of all its partitions to each follower broker in shared
//! `ReplicaStream` frames, never one `ReplicaPush` per partition, and every
//! record of a many-partition topic is acknowledged by a quorum through
//! them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use corelog_client::{Admin, ClientError, NewTopic, ProducerRecord};
use corelog_tests::cluster_client::{
    PATIENCE, client_config, client_runtime, connect_producer, producer_config, serial,
};
use corelog_tests::{Broker, start_cluster};
use corelog_wire::error::ErrorCode;

const TOPIC: &str = "streams";
const PARTITIONS: u32 = 24;
const RECORDS: usize = 2_400;

/// The sum over the shards of one broker of the samples of `name` whose
/// labels contain `label`.
fn metric(broker: &Broker, name: &str, label: &str) -> u64 {
    broker
        .metrics()
        .lines()
        .filter(|line| line.starts_with(name) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

fn cluster_sum(brokers: &[Broker], name: &str, label: &str) -> u64 {
    brokers
        .iter()
        .map(|broker| metric(broker, name, label))
        .sum()
}

/// Creates the topic with replication factor 3, retrying while brokers
/// that just registered are still fenced.
async fn create_topic(admin: &Admin) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut topic = NewTopic::new(TOPIC, PARTITIONS);
        topic.replication_factor = 3;
        match admin.create_topic(topic).await {
            Ok(_) => return,
            Err(error) if Instant::now() < deadline && retriable_creation(&error) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("creating {TOPIC} with replication factor 3: {error}"),
        }
    }
}

/// A creation that may succeed once every broker is registered and
/// unfenced.
fn retriable_creation(error: &ClientError) -> bool {
    error.is_retriable()
        || matches!(
            error,
            ClientError::Broker {
                code: ErrorCode::InvalidReplicationFactor,
                ..
            }
        )
}

#[test]
fn a_stream_frame_carries_many_partitions_and_every_record_is_acknowledged() {
    let _serial = serial();
    let brokers = start_cluster(3, &[]);
    let bootstrap: Vec<String> = brokers.iter().map(|b| b.addr.to_string()).collect();
    let rt = client_runtime();
    rt.block_on(async {
        let admin = Admin::connect(client_config(bootstrap.clone()))
            .await
            .unwrap();
        create_topic(&admin).await;
        let producer = connect_producer(producer_config(bootstrap), PATIENCE).await;
        let mut deliveries = Vec::with_capacity(RECORDS);
        for index in 0..RECORDS {
            let record =
                ProducerRecord::new(TOPIC, format!("value-{index}")).key(format!("key-{index}"));
            deliveries.push(producer.send(record).await.unwrap());
        }
        for (index, delivery) in deliveries.into_iter().enumerate() {
            match tokio::time::timeout(Duration::from_secs(30), delivery).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => panic!("record {index} was not acknowledged: {error}"),
                Err(_) => panic!("no outcome for record {index} within 30 s"),
            }
        }
    });

    let frames = cluster_sum(&brokers, "corelog_replication_frames_total", "shard=");
    let pushes = cluster_sum(&brokers, "corelog_replication_frame_pushes_total", "shard=");
    let stream_requests = cluster_sum(&brokers, "corelog_requests_total", "api=\"ReplicaStream\"");
    let single_pushes = cluster_sum(&brokers, "corelog_requests_total", "api=\"ReplicaPush\"");
    println!(
        "{frames} frames carried {pushes} pushes ({:.1} a frame); followers served \
         {stream_requests} frames and {single_pushes} single pushes",
        pushes as f64 / frames.max(1) as f64
    );
    assert_eq!(single_pushes, 0, "no partition pushes on its own");
    assert!(
        frames > 0 && stream_requests > 0,
        "replication went through streams"
    );
    // Each broker leads about eight of the partitions: a frame to a follower
    // carries the pushes (batches and heartbeats) of several at once.
    assert!(
        pushes >= 2 * frames,
        "{pushes} pushes in {frames} frames: frames do not carry several partitions"
    );
}
