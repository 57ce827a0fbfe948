//! `cluster health` right after a controller failover (issue 35, item
//! 21). A new controller leader knows no broker session: it gives every
//! broker a full session timeout before fencing a silent one. Until it
//! has heard from a broker, that broker's liveness is unknown, and health
//! must say so instead of counting it alive; before, for about a session
//! timeout after the leader died, `cluster health` said "healthy: 3
//! brokers alive" (exit 0) with that very broker dead.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;
use std::time::{Duration, Instant};

use corelog_tests::cli::{self, text};
use corelog_tests::cluster_client::serial;
use corelog_tests::{Broker, start_cluster};
use serde_json::Value;

/// A session timeout long enough that the window before the new leader
/// fences the dead one is wide (the default is 2 s).
const CLUSTER_ARGS: &[&str] = &["--broker-session-timeout-ms", "4000"];
const DEADLINE: Duration = Duration::from_secs(40);

fn corelog(broker: &Broker, args: &[&str]) -> Output {
    cli::corelog(&broker.addr.to_string(), args, None)
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

/// The controller leader's node id, once the cluster is healthy with all
/// three brokers registered.
fn healthy_leader(broker: &Broker) -> u64 {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let output = corelog(broker, &["--json", "cluster", "health"]);
        let health = json(&output);
        let registered = health["cluster"]["brokers"].as_array().map_or(0, Vec::len);
        if output.status.success()
            && health["healthy"] == true
            && registered == 3
            && let Some(leader) = health["cluster"]["controller"]["leader"].as_u64()
        {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "never healthy: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn health_is_not_healthy_while_a_new_controller_has_not_heard_from_a_dead_broker() {
    let _serial = serial();
    let mut brokers = start_cluster(3, CLUSTER_ARGS);
    let leader = healthy_leader(&brokers[0]);
    // Broker `index` is node id `index + 1`.
    let dead = usize::try_from(leader - 1).unwrap();
    brokers[dead].kill();
    let asked = brokers
        .iter()
        .position(|broker| broker.is_running())
        .unwrap();

    // Ask until the new leader has fenced the dead broker. No answer in
    // between may call the cluster healthy.
    let deadline = Instant::now() + DEADLINE;
    let mut unknown_seen = false;
    loop {
        let output = corelog(&brokers[asked], &["--json", "cluster", "health"]);
        let health = json(&output);
        let status = &health["cluster"];
        assert!(
            !(output.status.success() || health["healthy"] == true),
            "broker {leader} (the old controller leader) is dead, yet: exit {:?}\n{}",
            output.status.code(),
            text(&output.stdout)
        );
        let problems: Vec<&str> = health["problems"]
            .as_array()
            .map(|problems| {
                problems
                    .iter()
                    .filter_map(|problem| problem["problem"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        unknown_seen |= problems.contains(&"liveness_unknown");
        let fenced = status["brokers"].as_array().is_some_and(|brokers| {
            brokers
                .iter()
                .any(|broker| broker["node_id"] == leader && broker["fenced"] == true)
        });
        if fenced && status["authoritative"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "broker {leader} was never fenced: {}",
            text(&output.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("liveness reported unknown before the fence: {unknown_seen}");

    // The text form says why it is not healthy.
    let output = corelog(&brokers[asked], &["cluster", "health"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stdout));
    assert!(
        text(&output.stdout).contains(&format!("broker {leader} is fenced")),
        "{}",
        text(&output.stdout)
    );
}
