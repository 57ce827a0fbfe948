//! Corruption of a stopped broker's files, then restart (issue 6; C10):
//! the broker either starts, catches up, and the cluster serves every
//! acknowledged record intact, or it stops with a non-zero exit code (at
//! start-up, or a moment later when the damaged replica is opened) and a
//! message naming the damaged file or partition. A fetch never returns a
//! batch whose CRC fails or a record that differs from what was
//! acknowledged.
//!
//! One three-broker cluster serves every case in turn: kill -9 one broker,
//! back its data directory up, damage one file of the kind under test,
//! restart with the output captured, and check. A broker that refused gets
//! the pristine file back and is restarted; one that started keeps its
//! files (restoring the whole copy would roll back what it acknowledged
//! since, which no replication protocol survives). The first refusal of a damaged segment also checks
//! the operator's advice the broker prints (move the partition directory
//! aside and restart: the replica comes back empty and copies itself from
//! the leader).
//!
//! The topic has three partitions of replication factor 3 with 1 MiB
//! segments, so that each has a closed segment; a consumer group commits,
//! so that `__groups` holds data.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corelog_client::group::{GroupConfig, GroupConsumer, TopicPartition};
use corelog_client::{Admin, ClientError, NewTopic, ProducerConfig, ProducerRecord};
use corelog_controller::durable;
use corelog_tests::cluster_client::{
    WireCluster, client_config, client_runtime, connect_producer, error_code,
};
use corelog_tests::corruption::{self, Corruption, Damage, FileKind};
use corelog_tests::{Broker, start_cluster};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::metadata::MetadataResponse;

/// Fence a silent broker after 1 s; 1 MiB segments (the smallest a topic
/// accepts) so that a few MiB make several segments.
const CLUSTER_ARGS: &[&str] = &[
    "--broker-session-timeout-ms",
    "1000",
    "--segment-bytes",
    "1048576",
];

const TOPIC: &str = "ledger";
const PARTITIONS: u32 = 3;
const GROUP: &str = "ledger-readers";
/// Records per partition and their size: about 1.3 MiB, two segments.
const RECORDS_PER_PARTITION: usize = 1_300;
const RECORD_BYTES: usize = 1_000;

/// Longest wait for any one condition.
const DEADLINE: Duration = Duration::from_secs(15);

/// How long one read of a partition waits for a broker's answer.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The value of record `index` of `partition`: unique, and long enough to
/// fill segments.
fn value(partition: u32, index: usize) -> String {
    let head = format!("p{partition}-r{index}-");
    let fill = (index % 26) as u8 + b'a';
    let mut text = head.clone();
    text.extend(std::iter::repeat_n(
        fill as char,
        RECORD_BYTES.saturating_sub(head.len()),
    ));
    text
}

struct Cluster {
    brokers: Vec<Broker>,
    rt: tokio::runtime::Runtime,
    /// Every acknowledged record: `(partition, offset) -> value`.
    acked: BTreeMap<(u32, u64), String>,
    /// The group's committed next offsets.
    committed: BTreeMap<u32, u64>,
    /// Index of the next record [`Cluster::produce_more`] writes.
    next_record: usize,
    work: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let cluster = Cluster {
            brokers: start_cluster(3, CLUSTER_ARGS),
            rt: client_runtime(),
            acked: BTreeMap::new(),
            committed: BTreeMap::new(),
            next_record: RECORDS_PER_PARTITION,
            // CORRUPTION_WORK_DIR keeps the backups and broker logs.
            work: tempfile::Builder::new()
                .prefix("corruption-")
                .disable_cleanup(std::env::var_os("CORRUPTION_WORK_DIR").is_some())
                .tempdir_in(
                    std::env::var_os("CORRUPTION_WORK_DIR")
                        .map_or_else(std::env::temp_dir, Into::into),
                )
                .unwrap(),
        };
        for id in 1..=3 {
            cluster
                .try_wait_metadata(id, "three brokers and a controller", |found| {
                    found.brokers.len() == 3 && found.controller_id.is_some()
                })
                .unwrap();
        }
        cluster
    }

    fn bootstrap(&self) -> Vec<String> {
        self.brokers
            .iter()
            .filter(|broker| broker.is_running())
            .map(|broker| broker.addr.to_string())
            .collect()
    }

    /// Whether every partition of every topic in `found` has a leader,
    /// and the test topic is there.
    fn all_led(found: &MetadataResponse) -> bool {
        found.topics.iter().any(|topic| topic.name == TOPIC)
            && found.topics.iter().all(|topic| {
                topic.partitions.iter().all(|partition| {
                    partition.leader.is_some()
                        && error_code(partition.error_code) == ErrorCode::None
                })
            })
    }

    fn create_topic(&self) {
        let admin_config = client_config(self.bootstrap());
        let deadline = Instant::now() + DEADLINE;
        self.rt.block_on(async {
            loop {
                let created = async {
                    let admin = Admin::connect(admin_config.clone()).await?;
                    admin
                        .create_topic(NewTopic::new(TOPIC, PARTITIONS).replication_factor(3))
                        .await
                }
                .await;
                match created {
                    Ok(()) => break,
                    Err(error) if Instant::now() < deadline => {
                        eprintln!("creating {TOPIC}: {error}; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(error) => panic!("{TOPIC} was not created: {error}"),
                }
            }
        });
        for id in 1..=3 {
            self.try_wait_metadata(id, "the topic led everywhere", |found| {
                found.topics.iter().any(|topic| {
                    topic.name == TOPIC
                        && topic.partitions.len() == PARTITIONS as usize
                        && topic
                            .partitions
                            .iter()
                            .all(|partition| partition.leader.is_some())
                })
            })
            .unwrap();
        }
    }

    /// Produces `count` records to each partition with an idempotent
    /// producer and `acks=quorum` (the defaults), recording each
    /// acknowledged offset.
    fn produce(&mut self, first: usize, count: usize) {
        let mut config = ProducerConfig::new(self.bootstrap()[0].clone());
        config.client = client_config(self.bootstrap());
        config.linger = Duration::from_millis(5);
        config.ack_timeout = Duration::from_secs(5);
        config.delivery_timeout = Duration::from_secs(25);
        let acked = self.rt.block_on(async move {
            let deadline = Instant::now() + DEADLINE;
            let producer = connect_producer(config, DEADLINE).await;
            let mut deliveries = Vec::new();
            for index in first..first + count {
                for partition in 0..PARTITIONS {
                    let text = value(partition, index);
                    let record = ProducerRecord::new(TOPIC, text.clone()).partition(partition);
                    // A broker just restarted may not know the topic yet.
                    let delivery = loop {
                        match producer.send(record.clone()).await {
                            Ok(delivery) => break delivery,
                            Err(error) if Instant::now() < deadline => {
                                eprintln!("send: {error}; retrying");
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                            Err(error) => panic!("the producer refuses: {error}"),
                        }
                    };
                    deliveries.push((partition, text, delivery));
                }
            }
            let mut acked = Vec::new();
            for (partition, text, delivery) in deliveries {
                let delivered = delivery
                    .await
                    .unwrap_or_else(|error| panic!("{partition}: not acknowledged: {error}"));
                acked.push(((partition, delivered.offset.0), text));
            }
            producer.close().await.ok();
            acked
        });
        self.acked.extend(acked);
    }

    /// A group member reads what is there and commits, a few times over.
    fn consume_and_commit(&mut self, rounds: usize) {
        let mut config = GroupConfig::new(self.bootstrap()[0].clone(), GROUP, [TOPIC]);
        config.client = client_config(self.bootstrap());
        config.session_timeout = Duration::from_secs(3);
        config.rebalance_timeout = Duration::from_secs(3);
        config.fetch_max_wait = Duration::from_millis(100);
        config.retry_backoff = Duration::from_millis(20);
        let committed = self.rt.block_on(async move {
            let mut consumer = GroupConsumer::connect(config)
                .await
                .expect("the group consumer connects");
            let deadline = Instant::now() + DEADLINE;
            let mut committed = BTreeMap::new();
            let mut round = 0;
            while round < rounds {
                assert!(
                    Instant::now() < deadline,
                    "the group did not commit in time"
                );
                let polled = consumer.poll().await.expect("poll");
                for record in &polled.records {
                    consumer.complete(record);
                }
                if polled.records.is_empty() {
                    continue;
                }
                if let Ok(done) = consumer.commit().await {
                    for (partition, offset) in done {
                        committed.insert(partition.partition, offset.0);
                    }
                    round += 1;
                }
            }
            consumer.close().await.expect("the member leaves");
            committed
        });
        self.committed.extend(committed);
    }

    /// The group's committed offsets, read through the coordinator.
    fn fetch_committed(&self) -> Result<BTreeMap<u32, u64>, String> {
        let config = client_config(self.bootstrap());
        let fetched = self.rt.block_on(async move {
            tokio::time::timeout(DEADLINE, async move {
                let admin = Admin::connect(config).await?;
                let partitions: Vec<TopicPartition> = (0..PARTITIONS)
                    .map(|partition| TopicPartition::new(TOPIC, partition))
                    .collect();
                let offsets = admin.fetch_offsets(GROUP, Some(&partitions)).await?;
                Ok(offsets
                    .into_iter()
                    .filter_map(|found| Some((found.partition.partition, found.next_offset?.0)))
                    .collect::<BTreeMap<u32, u64>>())
            })
            .await
        });
        match fetched {
            Ok(result) => result.map_err(|error: ClientError| error.to_string()),
            Err(_) => Err(format!("no answer within {DEADLINE:?}")),
        }
    }

    /// Reads every partition through its current leader and compares it
    /// with what was acknowledged. `Err` describes the first difference.
    fn check_acknowledged(&self) -> Result<BTreeMap<u32, u32>, String> {
        let mut readers = BTreeMap::new();
        for partition in 0..PARTITIONS {
            let deadline = Instant::now() + DEADLINE;
            let (leader, log) = loop {
                let attempt = (1..=3)
                    .find_map(|asked| self.partition_metadata(asked, TOPIC, partition)?.leader)
                    .ok_or_else(|| format!("{TOPIC}/{partition} has no leader"))
                    .and_then(|leader| {
                        let read = self.read_partition(leader, TOPIC, partition, READ_TIMEOUT)?;
                        Ok((leader, read.records))
                    });
                match attempt {
                    Ok(read) => break read,
                    Err(error) if Instant::now() > deadline => return Err(error),
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            };
            readers.insert(partition, leader);
            let served: BTreeMap<u64, &String> = log.iter().map(|(at, text)| (*at, text)).collect();
            assert_eq!(served.len(), log.len(), "offsets served twice by {leader}");
            for ((_, offset), text) in self.acked.range((partition, 0)..(partition + 1, 0)) {
                match served.get(offset) {
                    Some(found) if *found == text => {}
                    Some(found) => {
                        return Err(format!(
                            "broker {leader} served {TOPIC}/{partition}@{offset} as {:?}, acknowledged as {:?}",
                            &found[..found.len().min(24)],
                            &text[..text.len().min(24)]
                        ));
                    }
                    None => {
                        return Err(format!(
                            "broker {leader} does not serve acknowledged {TOPIC}/{partition}@{offset}"
                        ));
                    }
                }
            }
        }
        Ok(readers)
    }

    /// Waits until every partition is led (as broker `id` sees it) and no
    /// leader has a follower behind: every replica has caught up. (The
    /// metadata's `in_sync` lists only the leader, so it cannot tell.)
    fn wait_all_in_sync(&self, id: u32) -> Result<(), String> {
        let deadline = Instant::now() + DEADLINE;
        let mut last = String::new();
        while Instant::now() < deadline {
            let led = self.metadata(id).is_some_and(|found| Self::all_led(&found));
            let lags: Vec<Option<u64>> = (1..=3)
                .map(|broker| self.broker(broker).replica_lag())
                .collect();
            if led && lags.iter().all(|lag| *lag == Some(0)) {
                return Ok(());
            }
            last = format!("all led: {led}, lag per broker: {lags:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "timed out waiting for every replica in sync: {last}"
        ))
    }

    /// Produces `count` more records to each partition.
    fn produce_more(&mut self, count: usize) {
        self.produce(self.next_record, count);
        self.next_record += count;
    }
}

impl WireCluster for Cluster {
    fn broker(&self, id: u32) -> &Broker {
        &self.brokers[id as usize - 1]
    }

    fn ids(&self) -> Vec<u32> {
        vec![1, 2, 3]
    }
}

/// Picks the file to damage: one in partition `partition` of the topic
/// when there is one of the kind, else any.
fn pick_file(
    data_dir: &Path,
    kind: FileKind,
    partition: Option<u32>,
    seed: u64,
) -> Option<PathBuf> {
    let all = corruption::files_of(data_dir, kind).unwrap();
    let preferred: Vec<PathBuf> = all
        .iter()
        .filter(|path| partition.is_some_and(|partition| topic_partition(path) == Some(partition)))
        .cloned()
        .collect();
    let pool = if preferred.is_empty() { all } else { preferred };
    (!pool.is_empty()).then(|| pool[(seed as usize) % pool.len()].clone())
}

/// The partition of the test topic that `path` (a file in a partition
/// directory) belongs to.
fn topic_partition(path: &Path) -> Option<u32> {
    let dir = path.parent()?;
    let topic_dir = dir.parent()?.file_name()?.to_string_lossy();
    if !topic_dir.starts_with(&format!("{TOPIC}.")) {
        return None;
    }
    dir.file_name()?.to_string_lossy().parse().ok()
}

/// The lines of a broker's captured output that mention an error.
fn error_lines(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("ERROR") || line.contains("corelogd:"))
        .collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// Total bytes of the segment files in `dir`.
fn segment_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(".log"))
                .filter_map(|entry| entry.metadata().ok())
                .map(|meta| meta.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Records a failure, printing it at once (a later panic would hide it).
fn fail(failures: &mut Vec<String>, failure: String) {
    eprintln!("FAILURE: {failure}");
    failures.push(failure);
}

/// How long a started broker is watched for a late exit (when the
/// damaged replica is opened, after the first metadata update).
const SETTLE: Duration = Duration::from_secs(4);

/// The cases, each on broker `case % 3 + 1`.
const CASES: &[(FileKind, Damage)] = &[
    (FileKind::ClosedSegment, Damage::BitFlip),
    (FileKind::ActiveSegment, Damage::Truncate),
    (FileKind::OffsetIndex, Damage::BitFlip),
    (FileKind::ReplicaMeta, Damage::BitFlip),
    (FileKind::ControllerLog, Damage::BitFlip),
    (FileKind::ControllerLog, Damage::Truncate),
    (FileKind::GroupsSegment, Damage::BitFlip),
];

/// What a case's broker did (printed through `Debug`).
#[derive(Debug)]
#[allow(dead_code)]
enum Outcome {
    /// It answered and stayed up.
    Started,
    /// It exited with `status`, `after` the restart, saying `message`.
    Refused {
        status: std::process::ExitStatus,
        after: Duration,
        message: String,
    },
}

/// Restarts `broker` with its output in `log`: `Refused` when it exits at
/// start-up or within [`SETTLE`].
fn restart_watched(broker: &mut Broker, log: &Path) -> Outcome {
    let started = Instant::now();
    let status = match broker.try_spawn_logged(log) {
        Err(status) => Some(status),
        Ok(()) => loop {
            if let Some(status) = broker.exit_status() {
                break Some(status);
            }
            if started.elapsed() > SETTLE {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        },
    };
    match status {
        None => Outcome::Started,
        Some(status) => {
            // Reaped: the broker is stopped (and out of the bootstrap list).
            broker.child = None;
            Outcome::Refused {
                status,
                after: started.elapsed(),
                message: error_lines(log),
            }
        }
    }
}

#[test]
fn damaged_files_of_a_stopped_broker_are_repaired_or_refused_and_never_served() {
    let began = Instant::now();
    let mut cluster = Cluster::start();
    cluster.create_topic();
    cluster.produce(0, RECORDS_PER_PARTITION);
    eprintln!("case files in {}", cluster.work.path().display());
    cluster.consume_and_commit(2);
    eprintln!(
        "acknowledged {} records; committed {:?} ({:?})",
        cluster.acked.len(),
        cluster.committed,
        began.elapsed()
    );
    cluster
        .check_acknowledged()
        .expect("the healthy cluster serves everything");

    let mut failures = Vec::new();
    let mut report = Vec::new();
    let mut advice_checked = false;
    for (case, &(kind, damage)) in CASES.iter().enumerate() {
        let case_began = Instant::now();
        let id = (case % 3) as u32 + 1;
        let seed = 0xC0DE_0000 + case as u64;
        let name = format!("case {case} {kind}/{damage} on broker {id}");

        // Stop, keep a pristine copy, damage one file.
        let broker = &mut cluster.brokers[id as usize - 1];
        broker.kill();
        let data_dir = broker.data_dir().to_path_buf();
        let saved = cluster.work.path().join(format!("case-{case}"));
        corruption::backup(&data_dir, &saved).unwrap();
        let Some(path) = pick_file(&data_dir, kind, Some(case as u32 % PARTITIONS), seed) else {
            fail(&mut failures, format!("{name}: no file of the kind"));
            broker.spawn();
            continue;
        };
        let corrupted: Corruption = corruption::corrupt_file(&path, kind, damage, seed).unwrap();
        let log = cluster.work.path().join(format!("case-{case}.log"));
        let mut outcome = restart_watched(broker, &log);
        let mut note = String::new();

        // A controller log cut below the length its header says was synced
        // lost records this node may have acknowledged (or its vote): it
        // must refuse, never pass the cut off as a torn append.
        if let (FileKind::ControllerLog, Damage::Truncate, Outcome::Started) =
            (kind, damage, &outcome)
        {
            let original =
                std::fs::read(saved.join(path.strip_prefix(&data_dir).unwrap())).unwrap();
            let synced = durable::synced_length(&original).map_or(0, |synced| synced.len);
            if corrupted.offset < synced {
                fail(
                    &mut failures,
                    format!(
                        "{name}: started on a controller log cut to {} bytes of {synced} synced",
                        corrupted.offset
                    ),
                );
            }
        }
        if let Outcome::Refused {
            status, message, ..
        } = &outcome
        {
            let partition_dir = path.parent().unwrap();
            let named = [
                corrupted.path.to_string_lossy().into_owned(),
                partition_dir.to_string_lossy().into_owned(),
                path.file_name().unwrap().to_string_lossy().into_owned(),
            ]
            .iter()
            .any(|needle| message.contains(needle.as_str()));
            if status.success() || !named {
                fail(
                    &mut failures,
                    format!(
                        "{name}: exited ({status}) without naming {}: {message}",
                        corrupted.path.display()
                    ),
                );
            }
            // Damage in a replica's stored data or the controller log has
            // its own exit code.
            if matches!(
                kind,
                FileKind::ClosedSegment | FileKind::ReplicaMeta | FileKind::ControllerLog
            ) && status.code() != Some(4)
            {
                fail(
                    &mut failures,
                    format!("{name}: exit {status}, expected code 4: {message}"),
                );
            }
            if !advice_checked && topic_partition(&path).is_some() {
                // Follow the printed advice: move the partition directory
                // aside; the replica must come back and catch up.
                advice_checked = true;
                let before =
                    segment_bytes(&saved.join(partition_dir.strip_prefix(&data_dir).unwrap()));
                let aside = cluster.work.path().join(format!("case-{case}-aside"));
                std::fs::rename(partition_dir, &aside).unwrap();
                let advice_log = cluster.work.path().join(format!("case-{case}-advice.log"));
                let broker = &mut cluster.brokers[id as usize - 1];
                match restart_watched(broker, &advice_log) {
                    Outcome::Started => {}
                    refused => fail(
                        &mut failures,
                        format!(
                            "{name}: with {} moved aside the broker still refuses: {refused:?}",
                            partition_dir.display()
                        ),
                    ),
                }
                let caught_up = cluster.wait_all_in_sync(id);
                let after = segment_bytes(partition_dir);
                note = format!(
                    "; advice followed: {} moved aside, replica back with {after} segment bytes (had {before}), in sync: {}",
                    partition_dir.display(),
                    caught_up.is_ok()
                );
                if caught_up.is_err() || after < before {
                    fail(
                        &mut failures,
                        format!("{name}: the replica did not catch up{note}"),
                    );
                }
            } else {
                // Only the damaged file goes back: the broker may have
                // acknowledged pushes to its other replicas before it
                // stopped, and rolling those back would lose them.
                std::fs::copy(saved.join(path.strip_prefix(&data_dir).unwrap()), &path).unwrap();
                cluster.brokers[id as usize - 1]
                    .try_spawn_logged(&log)
                    .expect("the restored broker starts");
            }
        }

        // The cluster takes writes, every replica comes back in sync, and
        // every acknowledged record is served intact.
        cluster.produce_more(20);
        if let Err(error) = cluster.wait_all_in_sync(id) {
            fail(
                &mut failures,
                format!(
                    "{name}: replicas never back in sync: {error}; output in {}",
                    log.display()
                ),
            );
        }
        if let Err(error) = cluster.check_acknowledged() {
            fail(&mut failures, format!("{name} ({corrupted}): {error}"));
        }
        match cluster.fetch_committed() {
            Ok(found) if found == cluster.committed => {}
            found => fail(
                &mut failures,
                format!(
                    "{name}: committed offsets {found:?}, expected {:?}",
                    cluster.committed
                ),
            ),
        }
        // A broker that started must still run (no exit after SETTLE).
        let broker = &mut cluster.brokers[id as usize - 1];
        if let Some(status) = broker.exit_status() {
            broker.child = None;
            outcome = Outcome::Refused {
                status,
                after: case_began.elapsed(),
                message: error_lines(&log),
            };
            fail(&mut failures, format!("{name}: exited late: {outcome:?}"));
        }

        // A broker that started keeps its files: it has acknowledged
        // records since, and restoring the copy would roll them back.

        let line = format!(
            "{name}: {outcome:?}{note}; damage: {corrupted}; {:.1?}",
            case_began.elapsed()
        );
        eprintln!("{line}");
        report.push(line);
    }
    eprintln!("total {:?}", began.elapsed());

    assert!(
        advice_checked,
        "no case refused a damaged partition: the operator's advice went unchecked"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\n\nall cases:\n{}",
        failures.len(),
        failures.join("\n"),
        report.join("\n")
    );
}
