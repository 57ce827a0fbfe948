//! What an operator sees of a 3-broker cluster through the CLI (issue 15,
//! items 5 and 6): `cluster info` lists the brokers and the controller,
//! `cluster health` exits 0 only when nothing is wrong and otherwise names
//! each problem, and `topic describe`/`topic list` show each partition's
//! leader, epoch, replicas and in-sync replicas truthfully, as a broker is
//! killed and then a second one (which takes the controller's quorum).
//! And a group's lag (item 12) in bytes and age on partitions that another
//! broker than the group's coordinator leads. And a producer that waits
//! for a controller leader through its delivery timeout (item 10).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use corelog_client::Producer;
use corelog_client::group::{MemberGeneration, OffsetToCommit};
use corelog_client::{Admin, Offset, TopicPartition};
use corelog_tests::cluster_client::{client_config, client_runtime, producer_config, serial};
use corelog_tests::{Broker, binary, start_cluster};
use serde_json::Value;

/// Fence a silent broker after 1 s; drop a silent follower from the
/// in-sync replicas after 1.5 s.
const CLUSTER_ARGS: &[&str] = &[
    "--broker-session-timeout-ms",
    "1000",
    "--replica-lag-max-ms",
    "1500",
];
const DEADLINE: Duration = Duration::from_secs(30);

fn corelog(broker: &Broker, args: &[&str]) -> Output {
    Command::new(binary("corelog"))
        .arg("--bootstrap")
        .arg(broker.addr.to_string())
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args` until `done` holds for its output; panics with the last.
fn wait_for(broker: &Broker, args: &[&str], what: &str, done: impl Fn(&Output) -> bool) -> Output {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let output = corelog(broker, args);
        if done(&output) {
            return output;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last `corelog {}`: {:?}\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            output.status,
            text(&output.stdout),
            text(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn described_partitions(output: &Output) -> Vec<Value> {
    let topics: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    topics[0]["partition_details"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn in_sync(partition: &Value) -> Vec<u64> {
    partition["in_sync"]
        .as_array()
        .map(|nodes| nodes.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

#[test]
fn cluster_health_and_topic_describe_follow_brokers_going_down() {
    let _serial = serial();
    let mut brokers = start_cluster(3, CLUSTER_ARGS);
    let created = wait_for(
        &brokers[0],
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
        ],
        "the topic to be created",
        |output| output.status.success(),
    );
    assert!(text(&created.stdout).contains("created topic orders"));

    // Healthy: every partition led, all three replicas in sync.
    let healthy = wait_for(
        &brokers[0],
        &["cluster", "health"],
        "a healthy cluster",
        |output| output.status.success() && !text(&output.stdout).contains("not reported yet"),
    );
    let healthy_text = text(&healthy.stdout);
    assert!(
        healthy_text.contains("healthy: 3 brokers alive, 3 partitions led"),
        "{healthy_text}"
    );
    println!("cluster health, healthy:\n{healthy_text}");
    let describe = corelog(&brokers[1], &["--json", "topic", "describe", "orders"]);
    for partition in described_partitions(&describe) {
        assert_eq!(in_sync(&partition).len(), 3, "{partition}");
        assert_eq!(partition["state"], "ok", "{partition}");
        assert!(partition["leader"].as_u64().is_some(), "{partition}");
    }
    let describe_text = text(&corelog(&brokers[1], &["topic", "describe", "orders"]).stdout);
    println!("topic describe, healthy:\n{describe_text}");
    let info = corelog(&brokers[2], &["cluster", "info"]);
    let info_text = text(&info.stdout);
    assert!(info.status.success(), "{info_text}");
    assert!(info_text.contains("controller: leader "), "{info_text}");
    for node in 1..=3 {
        let row = info_text
            .lines()
            .find(|line| line.starts_with(&format!("{node} ")))
            .unwrap_or_else(|| panic!("no row for broker {node}:\n{info_text}"));
        assert!(
            row.contains("alive") && row.contains("yes") && row.contains(" s ago"),
            "{row}"
        );
    }

    // Broker 3 killed: fenced, out of every in-sync set, every partition
    // under-replicated (or led elsewhere and still short of broker 3).
    brokers[2].kill();
    let sick = wait_for(
        &brokers[0],
        &["cluster", "health"],
        "broker 3 to be reported",
        |output| {
            let stdout = text(&output.stdout);
            !output.status.success()
                && stdout.contains("broker 3 is fenced")
                && stdout.matches("is under-replicated").count() == 3
        },
    );
    assert_eq!(sick.status.code(), Some(1));
    println!("cluster health, broker 3 killed:\n{}", text(&sick.stdout));
    let describe = wait_for(
        &brokers[0],
        &["--json", "topic", "describe", "orders"],
        "the in-sync sets without broker 3",
        |output| {
            let partitions = described_partitions(output);
            partitions.len() == 3
                && partitions.iter().all(|partition| {
                    in_sync(partition).len() == 2
                        && !in_sync(partition).contains(&3)
                        && partition["state"] == "under-replicated"
                })
        },
    );
    assert!(describe.status.success());
    let describe_text = text(&corelog(&brokers[0], &["topic", "describe", "orders"]).stdout);
    println!("topic describe, broker 3 killed:\n{describe_text}");
    let list = text(&corelog(&brokers[0], &["topic", "list"]).stdout);
    assert!(
        list.lines()
            .any(|line| line.starts_with("orders") && line.contains("under-replicated")),
        "{list}"
    );
    let info_text = text(&corelog(&brokers[0], &["cluster", "info"]).stdout);
    let row = info_text
        .lines()
        .find(|line| line.starts_with("3 "))
        .unwrap();
    assert!(row.contains("fenced"), "{info_text}");

    // Broker 2 killed too: no controller quorum left, which health says.
    brokers[1].kill();
    let lost = wait_for(
        &brokers[0],
        &["cluster", "health"],
        "the lost quorum",
        |output| text(&output.stdout).contains("the controller has no leader"),
    );
    assert_eq!(lost.status.code(), Some(1));
    let list = text(&corelog(&brokers[0], &["topic", "list"]).stdout);
    assert!(
        !list
            .lines()
            .any(|line| line.starts_with("orders") && line.ends_with(" ok")),
        "a topic of a cluster without a controller is listed ok:\n{list}"
    );
}

#[test]
fn group_lag_bytes_and_age_come_from_each_partitions_leader() {
    let _serial = serial();
    let brokers = start_cluster(3, CLUSTER_ARGS);
    wait_for(
        &brokers[0],
        &[
            "topic",
            "create",
            "lagged",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
        ],
        "the topic to be created",
        |output| output.status.success(),
    );
    // Keyed, so that the records spread over the three partitions.
    let lines: String = (0..300).map(|n| format!("key-{n}:record {n}\n")).collect();
    let produced = Command::new(binary("corelog"))
        .arg("--bootstrap")
        .arg(brokers[0].addr.to_string())
        .args(["produce", "--topic", "lagged", "--key-separator", ":"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(lines.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(produced.status.success(), "{}", text(&produced.stdout));
    let bootstrap = brokers
        .iter()
        .map(|broker| broker.addr.to_string())
        .collect();
    let runtime = client_runtime();
    let admin = runtime
        .block_on(Admin::connect(client_config(bootstrap)))
        .unwrap();
    let offsets: Vec<OffsetToCommit> = (0..3)
        .map(|partition| OffsetToCommit {
            partition: TopicPartition {
                topic: "lagged".into(),
                partition,
            },
            next_offset: Offset(0),
            metadata: None,
        })
        .collect();
    // A new cluster creates its __groups topic shortly after it forms.
    let deadline = Instant::now() + DEADLINE;
    while let Err(error) =
        runtime.block_on(admin.commit_offsets("laggards", &MemberGeneration::none(), &offsets))
    {
        assert!(error.is_retriable() && Instant::now() < deadline, "{error}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Leaders spread over the three brokers, so the coordinator leads at
    // most some of the partitions; every one must show bytes and an age.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let description = runtime.block_on(admin.describe_group("laggards")).unwrap();
        let measured = description.partitions.iter().all(|lag| {
            lag.lag_records > 0 && lag.lag_bytes > 0 && lag.oldest_unconsumed_age_ms.is_some()
        });
        if measured && description.partitions.len() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "lag not measured on every partition: {:?}",
            description.partitions
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_producer_waits_for_a_controller_leader_until_its_delivery_timeout() {
    let _serial = serial();
    let mut brokers = start_cluster(3, CLUSTER_ARGS);
    wait_for(
        &brokers[0],
        &["cluster", "health"],
        "a healthy cluster",
        |output| output.status.success(),
    );
    brokers[1].kill();
    brokers[2].kill();
    wait_for(
        &brokers[0],
        &["cluster", "health"],
        "the lost quorum",
        |output| text(&output.stdout).contains("the controller has no leader"),
    );
    let runtime = client_runtime();
    let config = |delivery_timeout: Duration| {
        let mut config = producer_config(vec![brokers[0].addr.to_string()]);
        config.delivery_timeout = delivery_timeout;
        config
    };

    // No quorum for the whole delivery timeout: a failure that says why.
    let started = Instant::now();
    let refused = runtime
        .block_on(Producer::connect(config(Duration::from_secs(10))))
        .expect_err("no producer id without a controller leader");
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "gave up after {:?}",
        started.elapsed()
    );
    let message = refused.to_string();
    assert!(
        message.contains("no producer id") && message.contains("corelog cluster health"),
        "{message}"
    );

    // The quorum comes back within the delivery timeout: it connects.
    let started = Instant::now();
    let connecting = runtime.spawn(Producer::connect(config(Duration::from_secs(60))));
    std::thread::sleep(Duration::from_secs(8));
    brokers[1].spawn();
    let producer = runtime
        .block_on(connecting)
        .unwrap()
        .expect("a producer id once the controller has a leader again");
    assert!(started.elapsed() >= Duration::from_secs(8));
    runtime.block_on(producer.close()).unwrap();
}
