//! Moving leaderships on purpose (issue 38), each under a producer writing
//! at a steady rate that must see no failed record, with every
//! acknowledged record read back afterwards:
//! - controlled shutdown: on SIGTERM a broker asks the controller to move
//!   its leaderships, waits until its metadata shows it leads nothing, and
//!   only then closes its partitions;
//! - `partition elect-leader --to`: the leadership moves to the broker
//!   named;
//! - maintenance: a broker in maintenance leads nothing, gets no
//!   leadership back while it lasts (not even across its restart), and one
//!   broker at a time; `cluster rebalance-leaders` gives the preferred
//!   leader its partition back once it is out.
//!
//! The brokers keep the default session timeout (2 s): before this, the
//! leaderships of a stopped broker moved only once its session expired.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corelog_client::admin::Leadership;
use corelog_client::{Admin, ClientError};
use corelog_tests::Broker;
use corelog_tests::cli::{corelog, failed, succeeded, text};
use corelog_tests::cluster_client::{
    SteadyOutcome, SteadyProducer, WireCluster, client_config, client_runtime, connect_producer,
    producer_config, serial,
};
use corelog_tests::process::{as_strs, free_port, member_args, voters_list};
use corelog_wire::error::ErrorCode;

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

    fn admin(&self, rt: &tokio::runtime::Runtime) -> Admin {
        rt.block_on(Admin::connect(client_config(self.bootstrap())))
            .expect("an admin client connects")
    }

    fn steady_producer(&self, rt: &tokio::runtime::Runtime) -> SteadyProducer {
        let producer = rt.block_on(connect_producer(
            producer_config(self.bootstrap()),
            DEADLINE,
        ));
        SteadyProducer::start(rt, producer, TOPIC, 0, Duration::from_millis(2))
    }

    /// Checks that nothing failed and every acknowledged record is read
    /// back from the current leader.
    fn check_history(&self, outcome: &SteadyOutcome, what: &str) {
        assert!(
            outcome.failed.is_empty(),
            "no record fails across {what}; {} did, first: {:?}",
            outcome.failed.len(),
            outcome.failed.iter().take(3).collect::<Vec<_>>()
        );
        self.check_read_back(TOPIC, &outcome.acked, what, DEADLINE);
    }

    /// The partition's leader once it is `expected` (and stays it for a
    /// moment), with at most `patience` to wait.
    fn wait_leader_is(&self, expected: u32, patience: Duration) {
        let deadline = Instant::now() + patience;
        loop {
            let leader = self.wait_for_leader(TOPIC, 0, None);
            if leader.id == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{TOPIC}/0 is led by broker {}, not {expected}",
                leader.id
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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

/// Elects `to` (the preferred replica when `None`), again while the answer
/// is retriable (a replica not yet reported in sync after a move).
fn elect(rt: &tokio::runtime::Runtime, admin: &Admin, to: Option<u32>) -> Leadership {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match rt.block_on(admin.elect_leader(TOPIC, 0, to)) {
            Ok(moved) => return moved,
            Err(error) => assert!(
                Instant::now() < deadline && error.is_retriable(),
                "{TOPIC}/0 to {to:?}: {error}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn sigterm_of_the_leaders_broker_moves_its_leadership_first_and_fails_no_record() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let producer = cluster.steady_producer(&rt);
    producer.wait_acked(100, "appends before the stop", DEADLINE);
    let old = cluster.wait_for_leader(TOPIC, 0, None);
    let stopped_at = Instant::now();
    assert!(
        cluster.brokers[old.id as usize - 1].terminate(),
        "broker {} exits cleanly on SIGTERM",
        old.id
    );
    let stop_took = stopped_at.elapsed();
    producer.wait_more(200, "appends after the leader's broker stopped", DEADLINE);
    println!(
        "SIGTERM of broker {} (leader): it exited after {stop_took:?}; 200 more records acknowledged {:?} after the signal",
        old.id,
        stopped_at.elapsed()
    );
    let outcome = producer.finish(&rt);

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
    assert_ne!(cluster.wait_for_leader(TOPIC, 0, None).id, old.id);
    cluster.check_history(&outcome, "a controlled shutdown");
}

#[test]
fn elect_leader_moves_the_leadership_to_the_broker_named_and_fails_no_record() {
    let _serial = serial();
    let rt = client_runtime();
    let cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let admin = cluster.admin(&rt);
    let producer = cluster.steady_producer(&rt);
    producer.wait_acked(100, "appends before the moves", DEADLINE);
    // Every broker in turn, twice: each move is a round without the old
    // leader, won by the broker named.
    let mut epochs = Vec::new();
    for round in 0..6 {
        let old = cluster.wait_for_leader(TOPIC, 0, None);
        let to = old.id % 3 + 1;
        cluster
            .wait_followers_caught_up(TOPIC, 0)
            .unwrap_or_else(|error| panic!("round {round}: followers of {old:?}: {error}"));
        let moved = elect(&rt, &admin, Some(to));
        assert_eq!(moved.leader, to, "round {round}");
        epochs.push(moved.epoch);
        cluster.wait_leader_is(to, DEADLINE);
        producer.wait_more(50, "appends after a move", DEADLINE);
    }
    assert!(
        epochs.windows(2).all(|pair| pair[0] < pair[1]),
        "{epochs:?}"
    );
    // The command line says where the leadership went.
    let to = cluster.wait_for_leader(TOPIC, 0, None).id % 3 + 1;
    cluster.wait_followers_caught_up(TOPIC, 0).unwrap();
    let addr = cluster.bootstrap().join(",");
    let deadline = Instant::now() + DEADLINE;
    let said = loop {
        let output = corelog(
            &addr,
            &[
                "partition",
                "elect-leader",
                TOPIC,
                "0",
                "--to",
                &to.to_string(),
            ],
            None,
        );
        if output.status.success() || Instant::now() >= deadline {
            break succeeded(&output);
        }
        // Not reported in sync yet after the last move: retriable.
        assert!(
            text(&output.stderr).contains("REPLICA_NOT_IN_SYNC"),
            "{output:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        said.starts_with(&format!("{TOPIC}/0: led by broker {to} (epoch ")),
        "{said}"
    );
    let epoch = said
        .trim()
        .strip_suffix(')')
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|epoch| epoch.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no epoch in {said:?}"));
    epochs.push(epoch);
    // Asking for the broker that leads changes nothing.
    let leader = cluster.wait_for_leader(TOPIC, 0, None);
    let same = rt
        .block_on(admin.elect_leader(TOPIC, 0, Some(leader.id)))
        .unwrap();
    assert_eq!(same.epoch, *epochs.last().unwrap());
    // A broker that holds no replica, and a partition that does not
    // exist, are refused with what to do.
    let stranger = rt.block_on(admin.elect_leader(TOPIC, 0, Some(9)));
    assert!(
        matches!(
            &stranger,
            Err(ClientError::Broker {
                code: ErrorCode::InvalidRequest,
                ..
            })
        ),
        "{stranger:?}"
    );
    let missing = rt.block_on(admin.elect_leader(TOPIC, 7, None));
    assert!(
        matches!(
            &missing,
            Err(ClientError::Broker {
                code: ErrorCode::UnknownTopicOrPartition,
                ..
            })
        ),
        "{missing:?}"
    );
    let outcome = producer.finish(&rt);
    println!(
        "6 moves, epochs {epochs:?}: {} records acknowledged, {} failed",
        outcome.acked.len(),
        outcome.failed.len()
    );
    cluster.check_history(&outcome, "six leadership moves");
}

#[test]
fn a_broker_in_maintenance_leads_nothing_even_after_a_restart_until_disabled() {
    let _serial = serial();
    let rt = client_runtime();
    let mut cluster = Cluster::start();
    cluster.create_replicated_topic(TOPIC);
    let admin = cluster.admin(&rt);
    let producer = cluster.steady_producer(&rt);
    producer.wait_acked(100, "appends before maintenance", DEADLINE);
    let preferred = cluster.wait_for_leader(TOPIC, 0, None).id;
    cluster.wait_followers_caught_up(TOPIC, 0).unwrap();

    // Through the command line, as an operator does.
    let addr = cluster.bootstrap().join(",");
    let node = preferred.to_string();
    let enabled = succeeded(&corelog(
        &addr,
        &["cluster", "maintenance", "enable", &node],
        None,
    ));
    assert_eq!(
        enabled.trim(),
        format!("broker {preferred} is in maintenance and leads nothing"),
        "broker {preferred} hands its leadership over"
    );
    assert_ne!(cluster.wait_for_leader(TOPIC, 0, None).id, preferred);
    let info = succeeded(&corelog(&addr, &["cluster", "info"], None));
    let row = info
        .lines()
        .find(|line| line.starts_with(&format!("{preferred} ")))
        .unwrap_or_else(|| panic!("no row for broker {preferred}: {info}"));
    assert!(row.contains("alive, maintenance"), "{info}");
    assert_eq!(info.matches("maintenance").count(), 1, "{info}");
    producer.wait_more(100, "appends with the leader in maintenance", DEADLINE);
    // One broker at a time.
    let other = (preferred % 3 + 1).to_string();
    let second = failed(&corelog(
        &addr,
        &["cluster", "maintenance", "enable", &other],
        None,
    ));
    assert!(
        second.contains("BROKER_IN_MAINTENANCE") && second.contains(&format!("broker {preferred}")),
        "{second}"
    );
    // It cannot be elected, and gets nothing back across its restart
    // (the preferred leader returns 3 s after it is back, otherwise).
    let refused = rt.block_on(admin.elect_leader(TOPIC, 0, Some(preferred)));
    assert!(
        matches!(
            &refused,
            Err(ClientError::Broker {
                code: ErrorCode::BrokerInMaintenance,
                ..
            })
        ),
        "{refused:?}"
    );
    let broker = &mut cluster.brokers[preferred as usize - 1];
    assert!(broker.terminate(), "broker {preferred} stops cleanly");
    broker.spawn();
    cluster.wait_metadata(preferred, "the restarted broker in the cluster", |found| {
        found.brokers.len() == 3 && found.controller_id.is_some()
    });
    producer.wait_more(100, "appends after its restart", DEADLINE);
    let settle = Instant::now() + Duration::from_secs(6);
    while Instant::now() < settle {
        assert_ne!(
            cluster.wait_for_leader(TOPIC, 0, None).id,
            preferred,
            "a broker in maintenance gets no leadership back"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    succeeded(&corelog(
        &addr,
        &["cluster", "maintenance", "disable", &node],
        None,
    ));
    let info = succeeded(&corelog(&addr, &["cluster", "info"], None));
    assert!(!info.contains("maintenance"), "{info}");
    cluster.wait_followers_caught_up(TOPIC, 0).unwrap();
    // Out of maintenance, the preferred leader comes back at once with
    // rebalance-leaders (again while it is not reported in sync yet).
    let deadline = Instant::now() + DEADLINE;
    let rebalanced = loop {
        let output = corelog(&addr, &["cluster", "rebalance-leaders"], None);
        if output.status.success() {
            break text(&output.stdout);
        }
        assert!(
            Instant::now() < deadline,
            "rebalance-leaders: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        rebalanced.contains(&format!("{TOPIC}/0: led by broker {preferred}"))
            || cluster.wait_for_leader(TOPIC, 0, None).id == preferred,
        "{rebalanced}"
    );
    assert!(rebalanced.contains(", 0 not moved"), "{rebalanced}");
    cluster.wait_leader_is(preferred, DEADLINE);
    producer.wait_more(100, "appends after maintenance", DEADLINE);
    let outcome = producer.finish(&rt);
    cluster.check_history(&outcome, "maintenance and a restart");
}
