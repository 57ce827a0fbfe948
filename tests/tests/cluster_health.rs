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

use std::process::Output;
use std::time::{Duration, Instant};

use corelog_client::Producer;
use corelog_client::group::{MemberGeneration, OffsetToCommit};
use corelog_client::{Admin, Offset, TopicPartition};
use corelog_tests::cli::{self, text};
use corelog_tests::cluster_client::{client_config, client_runtime, producer_config, serial};
use corelog_tests::{Broker, start_cluster};
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
    cli::corelog(&broker.addr.to_string(), args, None)
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
        |output| {
            // The topic's 3 partitions, __groups' 8 and __audit's 1.
            let stdout = text(&output.stdout);
            output.status.success()
                && stdout.contains("healthy: 3 brokers alive, 12 partitions led")
                && !stdout.contains("not reported yet")
        },
    );
    let healthy_text = text(&healthy.stdout);
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
                && stdout.matches("is under-replicated").count() == 12
                && stdout.contains("__groups/0 is under-replicated")
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
    for topic in ["orders", "__groups", "__audit"] {
        assert!(
            list.lines()
                .any(|line| line.starts_with(topic) && line.contains("under-replicated")),
            "{topic}: {list}"
        );
    }
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

/// Produces records keyed `key-N` for each N in `numbers`, so that they
/// spread over the topic's partitions.
fn produce_keyed(broker: &Broker, topic: &str, numbers: std::ops::Range<u32>) {
    let lines: String = numbers.map(|n| format!("key-{n}:record {n}\n")).collect();
    let produced = cli::corelog(
        &broker.addr.to_string(),
        &["produce", "--topic", topic, "--key-separator", ":"],
        Some(&lines),
    );
    assert!(produced.status.success(), "{}", text(&produced.stderr));
}

/// Each partition's (leader, high watermark) as `topic describe` shows it.
fn leaders_and_watermarks(output: &Output) -> Vec<(Option<u64>, Option<u64>)> {
    described_partitions(output)
        .iter()
        .map(|partition| {
            (
                partition["leader"].as_u64(),
                partition["high_watermark"].as_u64(),
            )
        })
        .collect()
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
    produce_keyed(&brokers[0], "lagged", 0..300);
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

/// Item 19: a leader change appends an epoch-start marker (a control
/// record at its own offset); lag in records counts records, so a group
/// that read everything has no lag afterwards, a marker amid unread
/// records is not counted, and the age is that of the oldest unread
/// record, not of the marker.
#[test]
fn group_lag_counts_records_not_the_epoch_markers_of_leader_changes() {
    let _serial = serial();
    let mut brokers = start_cluster(3, CLUSTER_ARGS);
    const PARTITIONS: usize = 6;
    wait_for(
        &brokers[0],
        &[
            "topic",
            "create",
            "marked",
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            "3",
        ],
        "the topic to be created",
        |output| output.status.success(),
    );
    produce_keyed(&brokers[0], "marked", 0..300);
    let describe = ["--json", "topic", "describe", "marked"];
    let before = leaders_and_watermarks(&corelog(&brokers[0], &describe));
    assert_eq!(before.len(), PARTITIONS, "{before:?}");
    let led_by_3: Vec<usize> = (0..PARTITIONS)
        .filter(|index| before[*index].0 == Some(3))
        .collect();
    assert!(!led_by_3.is_empty(), "broker 3 leads nothing: {before:?}");

    // The groups read everything: each commits each partition's end.
    // Several groups, so that some are coordinated by the moved
    // partitions' new leader (lag measured locally) and some by another
    // broker (lag asked of the leader through DescribeTopics and Fetch).
    let groups: Vec<String> = (0..6).map(|n| format!("readers-{n}")).collect();
    let bootstrap = brokers[..2]
        .iter()
        .map(|broker| broker.addr.to_string())
        .collect();
    let runtime = client_runtime();
    let admin = runtime
        .block_on(Admin::connect(client_config(bootstrap)))
        .unwrap();
    let committed: Vec<u64> = before.iter().map(|(_, hw)| hw.unwrap()).collect();
    let offsets: Vec<OffsetToCommit> = committed
        .iter()
        .enumerate()
        .map(|(partition, next)| OffsetToCommit {
            partition: TopicPartition {
                topic: "marked".into(),
                partition: partition as u32,
            },
            next_offset: Offset(*next),
            metadata: None,
        })
        .collect();
    let deadline = Instant::now() + DEADLINE;
    for group in &groups {
        // A commit answers per partition: one refused (the coordinator's
        // view of a high watermark may lag the describe's by a push) is
        // tried again, or the group may not exist when its lag is asked.
        loop {
            match runtime.block_on(admin.commit_offsets(group, &MemberGeneration::none(), &offsets))
            {
                Ok(results) => {
                    let refused: Vec<_> = results
                        .iter()
                        .filter_map(|(partition, result)| {
                            result
                                .as_ref()
                                .err()
                                .map(|error| format!("{partition}: {error}"))
                        })
                        .collect();
                    if refused.is_empty() {
                        break;
                    }
                    println!("{group}: commit refused for {refused:?}; retrying");
                    assert!(Instant::now() < deadline, "{group}: {refused:?}");
                }
                Err(error) => {
                    assert!(error.is_retriable() && Instant::now() < deadline, "{error}");
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // Broker 3 dies: its partitions get new leaders, whose markers commit
    // one offset past what the group read.
    brokers[2].kill();
    let after = wait_for(
        &brokers[0],
        &describe,
        "new leaders with committed markers",
        |output| {
            let now = leaders_and_watermarks(output);
            now.len() == PARTITIONS
                && led_by_3.iter().all(|index| {
                    now[*index].0.is_some_and(|leader| leader != 3)
                        && now[*index].1 == Some(committed[*index] + 1)
                })
        },
    );
    println!(
        "after broker 3 died:\n{}",
        text(&corelog(&brokers[0], &["topic", "describe", "marked"]).stdout)
    );
    let after = leaders_and_watermarks(&after);
    let lags = |group: &str| {
        let deadline = Instant::now() + DEADLINE;
        loop {
            match runtime.block_on(admin.describe_group(group)) {
                Ok(description) if description.partitions.len() == PARTITIONS => {
                    let mut lags = description.partitions;
                    lags.sort_by_key(|lag| lag.partition.partition);
                    return lags;
                }
                other => assert!(Instant::now() < deadline, "{other:?}"),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    for group in &groups {
        for lag in lags(group) {
            let index = lag.partition.partition as usize;
            assert_eq!(lag.high_watermark, after[index].1.unwrap(), "{lag:?}");
            assert_eq!(
                lag.lag_records, 0,
                "{group}: a marker counted as a record: {lag:?}"
            );
            assert_eq!(lag.oldest_unconsumed_age_ms, None, "{group}: {lag:?}");
        }
    }
    // Who measured: a coordinator exports its groups' lag series.
    let new_leaders: Vec<u64> = led_by_3
        .iter()
        .filter_map(|index| after[*index].0)
        .collect();
    // A coordinator publishes its groups' series on its next tick, which
    // may come after the describe above answered.
    let deadline = Instant::now() + DEADLINE;
    let coordinators: Vec<u32> = loop {
        let found: Vec<u32> = groups
            .iter()
            .filter_map(|group| {
                let series = format!("group=\"{group}\"");
                // start_cluster numbers its brokers from 1.
                (1..=2u32).find(|node| brokers[*node as usize - 1].metrics().contains(&series))
            })
            .collect();
        if found.len() == groups.len() || Instant::now() >= deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    println!("moved partitions led by {new_leaders:?}; groups coordinated by {coordinators:?}");
    assert!(
        coordinators
            .iter()
            .any(|node| new_leaders.contains(&u64::from(*node)))
            && coordinators
                .iter()
                .any(|node| !new_leaders.contains(&u64::from(*node))),
        "the test needs a group coordinated by a moved partition's leader and one by \
         another broker (rename the groups if placement changed): leaders {new_leaders:?}, \
         coordinators {coordinators:?}"
    );

    // New records after the marker: the lag is exactly those, and their
    // age is no older than this produce (the marker is seconds older).
    std::thread::sleep(Duration::from_secs(2));
    let produced_at = Instant::now();
    produce_keyed(&brokers[0], "marked", 300..600);
    let later = leaders_and_watermarks(&corelog(&brokers[0], &describe));
    let lags: Vec<_> = groups.iter().flat_map(|group| lags(group)).collect();
    let elapsed_ms = produced_at.elapsed().as_millis() as i64;
    for lag in &lags {
        let index = lag.partition.partition as usize;
        let markers = u64::from(led_by_3.contains(&index));
        let written = later[index].1.unwrap() - committed[index] - markers;
        assert_eq!(lag.lag_records, written, "{lag:?}");
        if written > 0 {
            let age = lag.oldest_unconsumed_age_ms.unwrap();
            assert!(
                age <= elapsed_ms,
                "age {age} ms is older than the produce {elapsed_ms} ms ago: {lag:?}"
            );
        }
    }
}
