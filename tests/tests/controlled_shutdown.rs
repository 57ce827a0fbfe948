//! Controlled shutdown of a cluster member (issue 38): on SIGTERM a broker
//! asks the controller to move its leaderships, waits until its metadata
//! shows it leads nothing, and only then closes its partitions. A producer
//! writing at a steady rate through the stop sees no failed record, and
//! every acknowledged record is read back from the new leader.
//!
//! The brokers keep the default session timeout (2 s): before this, the
//! leaderships of a stopped broker moved only once its session expired.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corelog_client::ProducerRecord;
use corelog_tests::Broker;
use corelog_tests::cluster_client::{
    PartitionLog, WireCluster, client_runtime, connect_producer, producer_config, serial,
};
use corelog_tests::process::{as_strs, free_port, member_args, voters_list};

const TOPIC: &str = "orders";
const DEADLINE: Duration = Duration::from_secs(30);

/// Three brokers, every one a controller voter, each with its output kept
/// in a file the test reads.
struct Cluster {
    brokers: Vec<Broker>,
    logs: Vec<std::path::PathBuf>,
    _dirs: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let dirs = tempfile::tempdir().unwrap();
        let addrs: Vec<SocketAddr> = (0..3)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let voters = voters_list(&addrs);
        let mut brokers = Vec::new();
        let mut logs = Vec::new();
        for (index, addr) in addrs.iter().enumerate() {
            let log = dirs.path().join(format!("broker-{}.log", index + 1));
            let args = member_args(index, &voters, None, &[]);
            let data = dirs.path().join(format!("data-{}", index + 1));
            let mut broker =
                Broker::unstarted(*addr, &data, &as_strs(&args)).with_output_log(log.clone());
            broker.spawn();
            brokers.push(broker);
            logs.push(log);
        }
        let cluster = Cluster {
            brokers,
            logs,
            _dirs: dirs,
        };
        for id in cluster.ids() {
            cluster.wait_metadata(id, "three registered brokers and a controller", |found| {
                found.brokers.len() == 3 && found.controller_id.is_some()
            });
        }
        cluster
    }

    fn bootstrap(&self) -> Vec<String> {
        self.brokers
            .iter()
            .map(|broker| broker.addr.to_string())
            .collect()
    }

    fn log_of(&self, id: u32) -> String {
        let path = &self.logs[id as usize - 1];
        std::fs::read_to_string(path)
            .unwrap_or_else(|error| panic!("broker {id}'s log {}: {error}", path.display()))
    }
}

impl WireCluster for Cluster {
    fn broker(&self, id: u32) -> &Broker {
        &self.brokers[id as usize - 1]
    }

    fn ids(&self) -> Vec<u32> {
        (1..=3).collect()
    }
}

#[test]
fn sigterm_of_the_leaders_broker_moves_its_leadership_first_and_fails_no_record() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));

    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let failed: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let task = {
        let (acked, failed, stop) = (acked.clone(), failed.clone(), stop.clone());
        rt.spawn(async move {
            let mut outcomes = Vec::new();
            let mut index = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                let value = format!("r-{index}");
                index += 1;
                let record = ProducerRecord::new(TOPIC, value.clone()).partition(0);
                match producer.send(record).await {
                    Ok(delivery) => {
                        let (acked, failed) = (acked.clone(), failed.clone());
                        outcomes.push(tokio::spawn(async move {
                            match delivery.await {
                                Ok(done) => acked.lock().unwrap().push((done.offset.0, value)),
                                Err(error) => {
                                    failed.lock().unwrap().push((value, error.to_string()));
                                }
                            }
                        }));
                    }
                    Err(error) => failed.lock().unwrap().push((value, error.to_string())),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            for outcome in outcomes {
                outcome.await.unwrap();
            }
            producer.close().await.unwrap();
        })
    };
    let acked_count = || acked.lock().unwrap().len();
    let wait_acked = |count: usize, what: &str| {
        let deadline = Instant::now() + DEADLINE;
        while acked_count() < count {
            assert!(
                Instant::now() < deadline,
                "{what}: {} of {count} acknowledged; failures: {:?}",
                acked_count(),
                failed.lock().unwrap().iter().take(5).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    wait_acked(100, "appends before the stop");
    let old = cluster.wait_for_leader(TOPIC, 0, None);
    let at_stop = acked_count();
    let stopped_at = Instant::now();
    assert!(
        cluster.brokers[old.id as usize - 1].terminate(),
        "broker {} exits cleanly on SIGTERM",
        old.id
    );
    let stop_took = stopped_at.elapsed();
    wait_acked(at_stop + 200, "appends after the leader's broker stopped");
    println!(
        "SIGTERM of broker {} (leader): it exited after {stop_took:?}; 200 more records acknowledged {:?} after the signal",
        old.id,
        stopped_at.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    rt.block_on(task).unwrap();

    let log = cluster.log_of(old.id);
    assert!(
        log.contains("controlled shutdown: this broker leads no partition"),
        "broker {} handed its leadership off before closing its partitions; its log:\n{}",
        old.id,
        log.lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
    for line in log
        .lines()
        .filter(|line| line.contains("controlled shutdown"))
    {
        println!("broker {}: {line}", old.id);
    }
    let failed = failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "no record fails across a controlled shutdown; {} did, first: {:?}",
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    );
    let acked = acked.lock().unwrap().clone();
    let by_offset: BTreeMap<u64, String> = acked.into_iter().collect();
    let through = *by_offset.keys().next_back().unwrap();
    let new = cluster.wait_for_leader(TOPIC, 0, Some(old.id));
    let deadline = Instant::now() + DEADLINE;
    let stored = loop {
        match cluster.read_partition(new.id, TOPIC, 0, Duration::from_secs(3)) {
            Ok(PartitionLog {
                records,
                high_watermark,
            }) if high_watermark > through => break records,
            other => assert!(
                Instant::now() < deadline,
                "{TOPIC}/0 not readable through {through} from broker {}: {:?}",
                new.id,
                other.map(|log| log.high_watermark)
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stored: BTreeMap<u64, String> = stored.into_iter().collect();
    for (offset, value) in &by_offset {
        assert_eq!(
            stored.get(offset),
            Some(value),
            "acknowledged record {value} at offset {offset} after the controlled shutdown"
        );
    }
}
