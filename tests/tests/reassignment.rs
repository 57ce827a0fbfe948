//! Moving a partition's replicas to other brokers (issue 38, item 1) under
//! a producer writing at a steady rate: the new replica catches up as a
//! learner, the set changes one broker at a time, the leader hands off
//! before it leaves, no record fails, and every acknowledged record is read
//! back from the new set. A cancel before the first change leaves the
//! partition where it was. Decommissioning a broker (item 2) runs such
//! moves for every replica on it, live or dead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelog_client::{Admin, ClientError, ProducerRecord};
use corelog_tests::Broker;
use corelog_tests::cli::{corelog, failed, succeeded, text};
use corelog_tests::cluster_client::{
    SteadyProducer, WireCluster, client_config, client_runtime, connect_producer, producer_config,
    serial,
};
use corelog_tests::process::{as_strs, free_port, member_args, voters_list};
use corelog_tests::wire_client::{Client, ask};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::describe_cluster::DescribeClusterRequest;

const TOPIC: &str = "orders";
const DEADLINE: Duration = Duration::from_secs(60);

/// Brokers 1 to 3 are the controller voters; the others (a fourth, or a
/// fourth and a fifth) only brokers.
struct Cluster {
    brokers: Vec<Broker>,
    _dirs: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::with_brokers(4)
    }

    fn with_brokers(count: usize) -> Cluster {
        let dirs = tempfile::tempdir().unwrap();
        let addrs: Vec<SocketAddr> = (0..count)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let voters = voters_list(&addrs[..3]);
        let brokers = addrs
            .iter()
            .enumerate()
            .map(|(index, addr)| {
                let args = member_args(index, &voters, None, &[]);
                let data = dirs.path().join(format!("data-{}", index + 1));
                let mut broker = Broker::unstarted(*addr, &data, &as_strs(&args));
                broker.spawn();
                broker
            })
            .collect();
        let cluster = Cluster {
            brokers,
            _dirs: dirs,
        };
        for id in cluster.ids() {
            cluster.wait_metadata(id, "every broker registered and a controller", |found| {
                found.brokers.len() == count && found.controller_id.is_some()
            });
        }
        // A move refuses a fenced broker (BROKER_FENCED): wait until the
        // controller unfenced them all.
        let rt = client_runtime();
        let admin = cluster.admin(&rt);
        let deadline = Instant::now() + DEADLINE;
        loop {
            let status = rt.block_on(admin.describe_cluster(Some(Vec::new())));
            if let Ok(status) = &status
                && status.authoritative
                && status.brokers.len() == count
                && status.brokers.iter().all(|broker| !broker.fenced)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "brokers not all unfenced: {status:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    fn bootstrap(&self) -> Vec<String> {
        self.brokers
            .iter()
            .map(|broker| broker.addr.to_string())
            .collect()
    }

    fn admin(&self, rt: &tokio::runtime::Runtime) -> Admin {
        rt.block_on(Admin::connect(client_config(self.bootstrap())))
            .expect("an admin client connects")
    }

    /// The partition's replicas as every broker's metadata shows them,
    /// once they agree.
    fn replicas(&self) -> Vec<u32> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let seen: Vec<Option<Vec<u32>>> = self
                .ids()
                .into_iter()
                .map(|id| {
                    self.partition_metadata(id, TOPIC, 0)
                        .map(|partition| partition.replicas)
                })
                .collect();
            if let Some(Some(first)) = seen.first()
                && seen.iter().all(|other| other.as_ref() == Some(first))
            {
                return first.clone();
            }
            assert!(Instant::now() < deadline, "brokers disagree: {seen:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_replicas(&self, expected: &[u32]) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let replicas = self.replicas();
            if replicas == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{TOPIC}/0 is on {replicas:?}, not {expected:?}, after {DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl WireCluster for Cluster {
    fn broker(&self, id: u32) -> &Broker {
        &self.brokers[id as usize - 1]
    }

    fn ids(&self) -> Vec<u32> {
        (1..=self.brokers.len() as u32).collect()
    }
}

#[test]
fn a_partition_moves_off_its_leaders_broker_under_load_and_loses_nothing() {
    let _serial = serial();
    let rt = client_runtime();
    let cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let before = cluster.replicas();
    let leader = cluster.wait_for_leader(TOPIC, 0, None);
    let spare = (1..=4).find(|id| !before.contains(id)).unwrap();
    // The leader leaves: the spare broker comes in as the preferred one.
    let target: Vec<u32> = std::iter::once(spare)
        .chain(before.iter().copied().filter(|id| *id != leader.id))
        .collect();
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    let producer = SteadyProducer::start(&rt, producer, TOPIC, 0, Duration::from_millis(2));
    producer.wait_acked(500, "appends before the move", DEADLINE);
    let admin = cluster.admin(&rt);
    rt.block_on(admin.reassign_partition(TOPIC, 0, &target, 0))
        .unwrap_or_else(|error| panic!("reassign to {target:?}: {error}"));
    // A second move while this one runs is refused with its own code.
    match rt.block_on(admin.reassign_partition(TOPIC, 0, &before, 0)) {
        Err(ClientError::Broker { code, .. }) => {
            assert_eq!(code, ErrorCode::ReassignmentInProgress);
        }
        // The move may be over already.
        other => assert!(cluster.replicas() == target, "{other:?}"),
    }
    cluster.wait_replicas(&target);
    producer.wait_more(500, "appends after the move", DEADLINE);
    let outcome = producer.finish(&rt);
    assert!(
        outcome.failed.is_empty(),
        "no record fails across the move; {} did, first: {:?}",
        outcome.failed.len(),
        outcome.failed.iter().take(3).collect::<Vec<_>>()
    );
    let now_leader = cluster.wait_for_leader(TOPIC, 0, None);
    assert!(target.contains(&now_leader.id), "led by {}", now_leader.id);
    cluster.check_read_back(TOPIC, &outcome.acked, "the move", DEADLINE);
    // Nothing to cancel once it is over.
    match rt.block_on(admin.cancel_reassignment(TOPIC, 0)) {
        Err(ClientError::Broker { code, .. }) => {
            assert_eq!(code, ErrorCode::NoReassignmentInProgress);
        }
        other => panic!("cancel after the move: {other:?}"),
    }
}

#[test]
fn a_cancelled_move_leaves_the_partition_on_its_replicas() {
    let _serial = serial();
    let cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let before = cluster.replicas();
    let spare = (1..=4).find(|id| !before.contains(id)).unwrap();
    let target = format!("{spare},{},{}", before[1], before[2]);
    let addr = cluster.brokers[0].addr.to_string();
    let started = succeeded(&corelog(
        &addr,
        &["partition", "reassign", TOPIC, "0", "--replicas", &target],
        None,
    ));
    assert!(started.contains("moving to brokers"), "{started}");
    // Right away (before the new replica caught up, or after it joined:
    // either way the move walks back to where it started).
    succeeded(&corelog(
        &addr,
        &["partition", "reassign", TOPIC, "0", "--cancel"],
        None,
    ));
    cluster.wait_replicas(&before);
    // Once back, there is nothing left to cancel.
    let deadline = Instant::now() + DEADLINE;
    let refused = loop {
        let output = corelog(
            &addr,
            &["partition", "reassign", TOPIC, "0", "--cancel"],
            None,
        );
        if !output.status.success() {
            failed(&output);
            break text(&output.stderr);
        }
        assert!(Instant::now() < deadline, "the cancelled move never ended");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(refused.contains("NO_REASSIGNMENT_IN_PROGRESS"), "{refused}");
}

/// A throttled move copies no faster than its throttle: 6 MB at 1 MB/s
/// take 5 s at least (unthrottled, the same move is over in about 2 s,
/// most of it the controller's report and retry intervals). Its progress
/// shows meanwhile (see [`watch_progress`]).
#[test]
fn a_throttled_move_copies_no_faster_than_its_throttle() {
    const RECORDS: usize = 6_000;
    const RECORD_BYTES: usize = 1_000;
    const THROTTLE: u64 = 1_000_000;
    let _serial = serial();
    let rt = client_runtime();
    let cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    preload(&rt, &cluster, RECORDS, RECORD_BYTES);
    let before = cluster.replicas();
    let spare = (1..=4).find(|id| !before.contains(id)).unwrap();
    let target = vec![before[0], before[1], spare];
    let admin = cluster.admin(&rt);
    let started = Instant::now();
    rt.block_on(admin.reassign_partition(TOPIC, 0, &target, THROTTLE))
        .unwrap_or_else(|error| panic!("reassign to {target:?}: {error}"));
    watch_progress(&cluster, spare, (RECORDS * RECORD_BYTES) as u64);
    cluster.wait_replicas(&target);
    let took = started.elapsed();
    let copied = (RECORDS * RECORD_BYTES) as f64;
    assert!(
        took.as_secs_f64() >= 0.8 * copied / THROTTLE as f64,
        "{copied} bytes moved in {took:?} at a throttle of {THROTTLE} bytes/s"
    );
    // And the moved partition serves everything from its new set.
    let last = cluster.wait_for_leader(TOPIC, 0, None);
    let log = cluster
        .read_partition(last.id, TOPIC, 0, Duration::from_secs(5))
        .expect("readable");
    assert!(
        log.high_watermark >= RECORDS as u64,
        "{}",
        log.high_watermark
    );
}

/// While the move to `learner` copies `total` bytes: `corelog partition
/// reassignments` shows the learner's bytes copied and left (adding up to
/// about `total`) and an ETA, `cluster info` lists the move, and the
/// leader's `/metrics` carries the same progress; once the move is over,
/// none of them shows it any more.
fn watch_progress(cluster: &Cluster, learner: u32, total: u64) {
    let addr = cluster.brokers[0].addr.to_string();
    let deadline = Instant::now() + DEADLINE;
    let listed = loop {
        let listed = succeeded(&corelog(
            &addr,
            &["--json", "partition", "reassignments"],
            None,
        ));
        let json: serde_json::Value = serde_json::from_str(&listed).unwrap();
        let progress = &json["reassignments"][0]["learners"][0];
        let copied = progress["bytes_copied"].as_u64().unwrap_or(0);
        let left = progress["bytes_left"].as_u64().unwrap_or(0);
        if copied > 0 && left > 0 {
            assert_eq!(
                progress["broker"].as_u64(),
                Some(u64::from(learner)),
                "{listed}"
            );
            // Estimates from the average record size: within a tenth.
            let sum = copied + left;
            assert!(
                sum.abs_diff(total) < total / 10,
                "{copied} + {left} vs {total}: {listed}"
            );
            assert!(
                json["reassignments"][0]["eta_ms"].as_u64().is_some(),
                "{listed}"
            );
            break listed;
        }
        assert!(Instant::now() < deadline, "no progress listed: {listed}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let table = succeeded(&corelog(&addr, &["partition", "reassignments"], None));
    assert!(
        table.contains(&format!("{TOPIC}/0")) && table.contains(&format!("{learner}: ")),
        "{table}"
    );
    assert!(
        table.contains("976.6 KiB/s"),
        "the throttle is shown: {table}"
    );
    // A client of the release before asks with version 0, which knows no
    // moves: still answered, with the set as it is now.
    let mut old_client = Client::connect(cluster.brokers[0].addr).unwrap();
    old_client.handshake().unwrap();
    let answer = ask(
        &mut old_client,
        &DescribeClusterRequest {
            topics: Some(vec![TOPIC.to_owned()]),
        },
    );
    assert_eq!(answer.error_code, 0);
    assert_eq!(
        answer.topics[0].partitions[0].replicas.len(),
        3,
        "{answer:?}"
    );
    let info = succeeded(&corelog(&addr, &["cluster", "info"], None));
    assert!(info.contains("moving: 1 partition"), "{info}");
    assert!(info.contains(&format!("copying to {learner}")), "{info}");
    // The leader's gauges, by the same estimate.
    let leader = cluster.wait_for_leader(TOPIC, 0, None);
    let series = format!(
        "corelog_reassignment_bytes_left{{shard=\"0\",topic=\"{TOPIC}\",partition=\"0\",follower=\"{learner}\"}}"
    );
    // (Sampled every maintenance interval, a second.)
    let deadline = Instant::now() + Duration::from_secs(3);
    while !cluster.broker(leader.id).metrics().contains(&series) {
        assert!(
            Instant::now() < deadline,
            "no {series} in the leader's metrics; listed {listed}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Over: nothing is listed, and the series are gone.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let listed = succeeded(&corelog(&addr, &["partition", "reassignments"], None));
        if listed.contains("no partition is moving") {
            break;
        }
        assert!(Instant::now() < deadline, "the move never ended: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + DEADLINE;
    while cluster
        .broker(leader.id)
        .metrics()
        .contains("corelog_reassignment_bytes_left{")
    {
        assert!(
            Instant::now() < deadline,
            "the progress series outlived the move"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Appends `records` records of `bytes` bytes to the partition and waits
/// for their acknowledgements.
fn preload(rt: &tokio::runtime::Runtime, cluster: &Cluster, records: usize, bytes: usize) {
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    rt.block_on(async {
        let mut deliveries = Vec::new();
        for index in 0..records {
            let value = format!("{index:0>bytes$}");
            let record = ProducerRecord::new(TOPIC, value).partition(0);
            deliveries.push(producer.send(record).await.expect("queued"));
        }
        for delivery in deliveries {
            delivery.await.expect("acknowledged");
        }
        producer.close().await.ok();
    });
}

/// kill -9 of the leader, then of the learner, in the middle of a move
/// (slowed by its throttle): each move still finishes once the broker is
/// back, and every acknowledged record survives. On four brokers the
/// second move's learner is the broker the first move removed: it gets the
/// partition back in the same directory, whose old frames the shard
/// journal may still hold (before the fix it failed to restart: "log ends
/// with epoch 2, history says epoch 0").
#[test]
fn a_move_survives_kill_9_of_its_leader_and_of_its_learner() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    preload(&rt, &cluster, 4_000, 1_000);
    let admin = cluster.admin(&rt);
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    let producer = SteadyProducer::start(&rt, producer, TOPIC, 0, Duration::from_millis(5));
    for victim in ["leader", "learner"] {
        let before = cluster.replicas();
        let spare = (1..=4).find(|id| !before.contains(id)).unwrap();
        let leader = cluster.wait_for_leader(TOPIC, 0, None).id;
        let keep: Vec<u32> = before.iter().copied().filter(|id| *id != leader).collect();
        // The leader stays in the target: the move is slowed by catch-up,
        // not ended by a transfer.
        let target = vec![leader, keep[0], spare];
        let deadline = Instant::now() + DEADLINE;
        loop {
            match rt.block_on(admin.reassign_partition(TOPIC, 0, &target, 1_000_000)) {
                Ok(()) => break,
                Err(error) => assert!(
                    error.is_retriable() && Instant::now() < deadline,
                    "reassign to {target:?}: {error}"
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_millis(1_500));
        assert_ne!(
            cluster.replicas(),
            target,
            "the move ended before the {victim} was killed"
        );
        let killed = if victim == "leader" { leader } else { spare };
        cluster.brokers[killed as usize - 1].kill();
        std::thread::sleep(Duration::from_millis(1_000));
        cluster.brokers[killed as usize - 1].spawn();
        cluster.wait_replicas(&target);
        producer.wait_more(100, &format!("appends after the {victim}'s kill"), DEADLINE);
    }
    let outcome = producer.finish(&rt);
    cluster.check_read_back(TOPIC, &outcome.acked, "the move", DEADLINE);
}

/// `reassign --plan FILE` starts every move the file lists, reports the
/// ones refused and exits with 1 for them; a file that is no plan is
/// refused with what it should look like.
#[test]
fn a_plan_starts_each_move_it_lists_and_names_the_refused_ones() {
    let _serial = serial();
    let cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let before = cluster.replicas();
    let spare = (1..=4).find(|id| !before.contains(id)).unwrap();
    let target = vec![before[0], before[1], spare];
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        format!(
            r#"{{"version": 1, "partitions": [
                {{"topic": "{TOPIC}", "partition": 0, "replicas": {target:?}}},
                {{"topic": "{TOPIC}", "partition": 9, "replicas": {target:?}}}
            ]}}"#
        ),
    )
    .unwrap();
    let addr = cluster.brokers[0].addr.to_string();
    let plan_arg = plan.display().to_string();
    let output = corelog(&addr, &["partition", "reassign", "--plan", &plan_arg], None);
    failed(&output);
    let stdout = text(&output.stdout);
    assert!(stdout.contains("1 move(s) started, 1 refused"), "{stdout}");
    assert!(
        stdout.contains(&format!("{TOPIC}/9: not started")),
        "{stdout}"
    );
    cluster.wait_replicas(&target);
    std::fs::write(&plan, r#"{"moves": []}"#).unwrap();
    let output = corelog(&addr, &["partition", "reassign", "--plan", &plan_arg], None);
    let stderr = failed(&output);
    assert!(stderr.contains("is not a reassignment plan"), "{stderr}");
}

/// Issue 38, item 2: `corelog cluster decommission --wait` moves every
/// replica off a live broker (here the partition's leader) while a
/// producer writes at a steady rate: no record fails, every acknowledged
/// one is read back, the broker ends holding and leading nothing, `cluster
/// health` is healthy and `cluster info` shows it decommissioned; a
/// recommission clears the mark. A decommission that would leave a
/// three-replica partition on two brokers is refused and says why.
#[test]
fn decommissioning_a_live_broker_under_load_moves_every_replica_off_it() {
    let _serial = serial();
    let rt = client_runtime();
    let cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let before = cluster.replicas();
    let leaving = cluster.wait_for_leader(TOPIC, 0, None).id;
    let spare = (1..=4).find(|id| !before.contains(id)).unwrap();
    let producer = rt.block_on(connect_producer(
        producer_config(cluster.bootstrap()),
        DEADLINE,
    ));
    let producer = SteadyProducer::start(&rt, producer, TOPIC, 0, Duration::from_millis(2));
    producer.wait_acked(500, "appends before the decommission", DEADLINE);
    let addr = cluster.brokers[0].addr.to_string();
    let leaving_arg = leaving.to_string();
    let waited = succeeded(&corelog(
        &addr,
        &["cluster", "decommission", &leaving_arg, "--wait"],
        None,
    ));
    assert!(
        waited.contains(&format!("broker {leaving} is being decommissioned")),
        "{waited}"
    );
    assert!(
        waited.contains(&format!("broker {leaving} holds no replica")),
        "{waited}"
    );
    let after = cluster.replicas();
    assert!(!after.contains(&leaving), "still on {leaving}: {after:?}");
    assert!(after.contains(&spare), "{after:?}");
    producer.wait_more(500, "appends after the decommission", DEADLINE);
    let outcome = producer.finish(&rt);
    assert!(
        outcome.failed.is_empty(),
        "no record fails across the decommission; {} did, first: {:?}",
        outcome.failed.len(),
        outcome.failed.iter().take(3).collect::<Vec<_>>()
    );
    let leader = cluster.wait_for_leader(TOPIC, 0, None).id;
    assert_ne!(leader, leaving);
    cluster.check_read_back(TOPIC, &outcome.acked, "the decommission", DEADLINE);
    let info = succeeded(&corelog(&addr, &["cluster", "info"], None));
    assert!(
        info.contains(&format!(
            "decommissioned: broker {leaving} holds no replica"
        )),
        "{info}"
    );
    wait_healthy(&addr);
    // Three replicas need three brokers that stay.
    let output = corelog(
        &addr,
        &["cluster", "decommission", &spare.to_string()],
        None,
    );
    failed(&output);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("only 2 broker(s) would stay; add a broker first"),
        "{stderr}"
    );
    let back = succeeded(&corelog(
        &addr,
        &["cluster", "recommission", &leaving_arg],
        None,
    ));
    assert!(
        back.contains(&format!("broker {leaving} is recommissioned")),
        "{back}"
    );
    let info = succeeded(&corelog(&addr, &["cluster", "info"], None));
    assert!(!info.contains("decommission"), "{info}");
}

/// Issue 38, item 2: a broker dead for good is replaced the same way: its
/// replicas are rebuilt on the spare broker from the surviving ones, and
/// once none is left on it the cluster is healthy although the dead broker
/// stays fenced.
#[test]
fn a_dead_brokers_replicas_are_rebuilt_from_the_survivors() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    preload(&rt, &cluster, 2_000, 1_000);
    let before = cluster.replicas();
    let spare = (1..=4).find(|id| !before.contains(id)).unwrap();
    let dead = *before.last().unwrap();
    cluster.brokers[dead as usize - 1].kill();
    let addr = cluster
        .brokers
        .iter()
        .find(|broker| broker.addr != cluster.brokers[dead as usize - 1].addr)
        .unwrap()
        .addr
        .to_string();
    let admin = cluster.admin(&rt);
    let deadline = Instant::now() + DEADLINE;
    while !rt
        .block_on(admin.describe_cluster(Some(Vec::new())))
        .is_ok_and(|status| {
            status.authoritative
                && status
                    .brokers
                    .iter()
                    .any(|broker| broker.node_id == dead && broker.fenced)
        })
    {
        assert!(Instant::now() < deadline, "broker {dead} never fenced");
        std::thread::sleep(Duration::from_millis(200));
    }
    let output = corelog(&addr, &["cluster", "health"], None);
    assert!(
        text(&output.stdout).contains(&format!("broker {dead} is fenced")),
        "a dead broker is trouble before it is decommissioned: {}",
        text(&output.stdout)
    );
    succeeded(&corelog(
        &addr,
        &["cluster", "decommission", &dead.to_string(), "--wait"],
        None,
    ));
    let status = rt
        .block_on(admin.describe_cluster(Some(vec![TOPIC.to_owned()])))
        .expect("described");
    let after = &status.topics[0].partitions[0].replicas;
    assert!(!after.contains(&dead), "{after:?}");
    assert!(after.contains(&spare), "{after:?}");
    assert_eq!(status.replicas_on(dead), 0);
    wait_healthy(&addr);
    let leader = cluster.wait_for_leader(TOPIC, 0, None).id;
    let log = cluster
        .read_partition(leader, TOPIC, 0, Duration::from_secs(5))
        .expect("readable from the new set");
    assert!(log.high_watermark >= 2_000, "{}", log.high_watermark);
}

/// Waits until `corelog cluster health` exits 0 (in-sync replicas are
/// reported every second).
fn wait_healthy(addr: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let output = corelog(addr, &["cluster", "health"], None);
        if output.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never healthy: {}",
            text(&output.stdout)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
