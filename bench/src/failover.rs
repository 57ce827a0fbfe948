//! `failover` mode: how long a partition is unwritable when its leader
//! crashes — from the leader's `kill -9` to the first append acknowledged
//! (acks=quorum) by the new leader.
//!
//! Each round:
//!
//! 1. ensures the topic exists (1 partition, `--replication-factor`
//!    replicas) and waits until its partition has a leader;
//! 2. appends one record with acks=quorum and reads the partition's leader
//!    from freshly fetched metadata;
//! 3. runs `--kill-command` with `{leader}` replaced by the leader's node
//!    id, and starts the clock when it returns (the command is expected to
//!    return once the broker is dead, as `scripts/cluster.sh kill` does);
//! 4. appends single records until one is acknowledged: each attempt is a
//!    new producer (so it starts from a fresh metadata fetch) with short
//!    timeouts (`--attempt-timeout-ms` for the request, the delivery and
//!    the broker's ack wait); a failed attempt is retried at once;
//! 5. checks that the refreshed metadata names another leader than the
//!    killed broker, and that the record of step 2 is still readable at
//!    its offset;
//! 6. runs `--restart-command`, waits until the broker answers metadata
//!    requests again, then waits `--settle-seconds` (before the next round)
//!    so that it catches up and the preferred leader may return.
//!
//! The commands run through `sh -c` with this process's environment (so
//! `CLUSTER_DIR` and `BASE_PORT` reach `scripts/cluster.sh`). The run fails
//! when a round takes longer than `--max-seconds` or a check fails.
//!
//! Producers here are not idempotent: an attempt that timed out may still
//! land later, which costs an extra record and nothing else, whereas an
//! idempotent producer would have to re-initialise its id after every
//! timeout. The failover time is the same either way.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use corelog_client::{
    Acks, Admin, ClientConfig, ClientError, ClusterMetadata, Consumer, ConsumerConfig, Delivery,
    ErrorCode, NewTopic, Offset, PartitionMetadata, Producer, ProducerConfig, ProducerRecord,
    StartFrom,
};
use serde::Serialize;

const PARTITION: u32 = 0;

#[derive(Debug, Args)]
pub struct FailoverArgs {
    /// Broker addresses, comma-separated; the other brokers are learnt from
    /// the metadata. Give several, so that the first one may be killed.
    #[arg(long, default_value = "127.0.0.1:7201")]
    bootstrap: String,
    /// Topic; created with one partition if absent.
    #[arg(long, default_value = "failover")]
    topic: String,
    /// Replicas of the topic's partition when it is created (0: the
    /// broker's default).
    #[arg(long, default_value_t = 3)]
    replication_factor: u16,
    /// Leader kills to measure.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Kills a broker; `{leader}` is replaced by its node id. Run with
    /// `sh -c`; it should return once the broker is dead.
    #[arg(long, default_value = "scripts/cluster.sh kill {leader}")]
    kill_command: String,
    /// Restarts the killed broker; `{leader}` as in `--kill-command`.
    #[arg(long, default_value = "scripts/cluster.sh start {leader}")]
    restart_command: String,
    /// Timeout of one append attempt after the kill, ms: the request
    /// timeout and the delivery timeout of the attempt's producer.
    #[arg(long, default_value_t = 500)]
    attempt_timeout_ms: u64,
    /// A round fails if no append is acknowledged this long after the kill.
    #[arg(long, default_value_t = 30)]
    max_seconds: u64,
    /// Wait after the killed broker is back before the next round, seconds,
    /// so that it catches up and the preferred leader may return.
    #[arg(long, default_value_t = 5)]
    settle_seconds: u64,
    /// Print one JSON document (progress goes to stderr).
    #[arg(long)]
    json: bool,
    /// Print every failed attempt after the kill (to stderr), with its time.
    #[arg(long)]
    verbose: bool,
}

/// One leader kill.
#[derive(Debug, Default, Serialize)]
struct Round {
    round: u32,
    killed_leader: u32,
    killed_leader_epoch: u32,
    /// The killed broker was also the controller (Raft) leader by the
    /// metadata: the controller elects its own leader first, and the new
    /// one gives every broker a full session timeout.
    killed_controller_leader: bool,
    /// The controller leader the metadata named before the kill.
    controller_before_kill: Option<u32>,
    /// When the kill command returned, UTC time of day (to compare with
    /// the brokers' logs).
    killed_at_utc: String,
    /// Offset of the record acknowledged before the kill.
    record_offset: u64,
    /// Kill command returned → first acknowledged append, ms; `None` if no
    /// append was acknowledged within `--max-seconds`.
    failover_ms: Option<f64>,
    /// Append attempts after the kill, the successful one included.
    attempts: u64,
    /// The last error of a failed attempt.
    last_attempt_error: Option<String>,
    /// Offset of the first append acknowledged after the kill.
    new_offset: Option<u64>,
    new_leader: Option<u32>,
    new_leader_epoch: Option<u32>,
    /// The record acknowledged before the kill was read back at its offset.
    record_readable: bool,
    /// Restart command started → broker answering again, ms.
    restart_ms: Option<f64>,
    /// Why the round failed, if it did.
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct FailoverReport {
    topic: String,
    rounds: Vec<Round>,
    max_failover_ms: Option<f64>,
    mean_failover_ms: Option<f64>,
    min_failover_ms: Option<f64>,
    max_seconds: u64,
    ok: bool,
}

pub fn run(args: &FailoverArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| error.to_string())?;
    runtime.block_on(run_async(args))
}

/// Broker addresses: the bootstrap list, then every broker seen in the
/// metadata. A dead broker's address is refused at once on a local
/// cluster, so keeping it costs nothing.
struct Addresses(Vec<String>);

impl Addresses {
    fn learn(&mut self, metadata: &ClusterMetadata) {
        let known: BTreeSet<String> = self.0.iter().cloned().collect();
        for broker in metadata.brokers.values() {
            let addr = format!("{}:{}", broker.host, broker.port);
            if !known.contains(&addr) {
                self.0.push(addr);
            }
        }
    }

    fn client(&self, request_timeout: Duration) -> ClientConfig {
        let mut config = ClientConfig::new(self.0[0].clone());
        config.bootstrap.clone_from(&self.0);
        config.client_name = "corelog-bench-failover".to_owned();
        config.connect_timeout = request_timeout.min(Duration::from_secs(2));
        config.request_timeout = request_timeout;
        config.reconnect_backoff = Duration::from_millis(20);
        config.metadata_refresh_backoff = Duration::from_millis(20);
        config
    }
}

async fn run_async(args: &FailoverArgs) -> Result<(), String> {
    let bootstrap: Vec<String> = args
        .bootstrap
        .split(',')
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
        .map(str::to_owned)
        .collect();
    if bootstrap.is_empty() {
        return Err("--bootstrap needs at least one host:port".to_owned());
    }
    if args.attempt_timeout_ms < 50 {
        return Err("--attempt-timeout-ms must be at least 50".to_owned());
    }
    let mut addrs = Addresses(bootstrap);
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        let mut result = Round {
            round,
            ..Round::default()
        };
        let outcome = run_round(args, &mut addrs, &mut result).await;
        if let Err(error) = outcome {
            result.error = Some(error);
        }
        print_round(args, &result);
        let fatal = result.killed_leader == 0 || result.restart_ms.is_none();
        rounds.push(result);
        if fatal {
            // Nothing was killed, or the broker did not come back: the
            // next round would not measure a failover of a full cluster.
            break;
        }
        if round < args.rounds {
            tokio::time::sleep(Duration::from_secs(args.settle_seconds)).await;
        }
    }
    let report = summarise(args, rounds);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?
        );
    } else {
        print_summary(&report);
    }
    if report.ok {
        Ok(())
    } else {
        let failed: Vec<String> = report
            .rounds
            .iter()
            .filter_map(|round| {
                round
                    .error
                    .as_ref()
                    .map(|error| format!("round {}: {error}", round.round))
            })
            .collect();
        Err(format!("failover failed: {}", failed.join("; ")))
    }
}

async fn run_round(
    args: &FailoverArgs,
    addrs: &mut Addresses,
    result: &mut Round,
) -> Result<(), String> {
    let admin = Admin::connect(addrs.client(Duration::from_secs(10)))
        .await
        .map_err(|error| format!("cannot connect to {:?}: {error}", addrs.0))?;
    ensure_topic(args, &admin).await?;
    wait_leader(&admin, &args.topic, Duration::from_secs(60)).await?;
    addrs.learn(&admin.metadata().await.map_err(|error| error.to_string())?);

    // One record acknowledged by a quorum before the kill.
    let marker = Bytes::from(format!(
        "failover round {} at {:?}",
        result.round,
        std::time::SystemTime::now()
    ));
    let delivery = produce_marker(args, addrs, marker.clone()).await?;
    result.record_offset = delivery.offset.0;
    let metadata = admin.metadata().await.map_err(|error| error.to_string())?;
    addrs.learn(&metadata);
    let leader_partition = partition_of(&metadata, &args.topic)?;
    let leader = leader_partition
        .leader
        .ok_or_else(|| format!("{}/{PARTITION} has no leader", args.topic))?;
    let leader_addr = metadata
        .brokers
        .get(&leader)
        .map(|broker| format!("{}:{}", broker.host, broker.port))
        .ok_or_else(|| format!("the metadata lists no broker {leader}, the leader"))?;
    result.killed_leader_epoch = leader_partition.leader_epoch;
    result.killed_controller_leader = metadata.controller_id == Some(leader);
    result.controller_before_kill = metadata.controller_id;
    progress(
        args,
        &format!(
            "round {}: record at offset {}; killing leader {leader} (epoch {}){}",
            result.round,
            result.record_offset,
            result.killed_leader_epoch,
            if result.killed_controller_leader {
                ", also the controller leader"
            } else {
                ""
            }
        ),
    );

    run_command(&args.kill_command, leader, "kill").await?;
    result.killed_leader = leader;
    let killed_at = Instant::now();
    result.killed_at_utc = utc_now();
    progress(
        args,
        &format!(
            "round {}: broker {leader} killed at {} UTC",
            result.round, result.killed_at_utc
        ),
    );
    let outcome = append_until_acknowledged(args, addrs, killed_at, result).await;
    let checks = match outcome {
        Ok(delivery) => {
            result.failover_ms = Some(killed_at.elapsed().as_secs_f64() * 1000.0);
            result.new_offset = Some(delivery.offset.0);
            check_after(args, addrs, &admin, leader, &marker, result).await
        }
        Err(error) => Err(error),
    };

    // Restart whatever happened, so that the cluster is whole again.
    let restart_started = Instant::now();
    let restart = async {
        run_command(&args.restart_command, leader, "restart").await?;
        wait_broker_back(&leader_addr, &args.topic, Duration::from_secs(60)).await
    }
    .await;
    match restart {
        Ok(_) => result.restart_ms = Some(restart_started.elapsed().as_secs_f64() * 1000.0),
        Err(error) => {
            let error = format!("broker {leader} did not come back: {error}");
            return Err(match checks {
                Ok(()) => error,
                Err(first) => format!("{first}; {error}"),
            });
        }
    }
    checks
}

async fn ensure_topic(args: &FailoverArgs, admin: &Admin) -> Result<(), String> {
    match admin
        .create_topic(
            NewTopic::new(args.topic.clone(), 1).replication_factor(args.replication_factor),
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(error) if error.code() == Some(ErrorCode::TopicAlreadyExists) => Ok(()),
        Err(error) => Err(format!("cannot create topic {}: {error}", args.topic)),
    }
}

fn partition_of<'a>(
    metadata: &'a ClusterMetadata,
    topic: &str,
) -> Result<&'a PartitionMetadata, String> {
    metadata
        .topic(topic)
        .map_err(|error| error.to_string())?
        .partition(PARTITION)
        .ok_or_else(|| format!("{topic} has no partition {PARTITION}"))
}

/// Waits until the partition has a leader and at least two replicas.
/// (The metadata names no in-sync set beyond the leader, so that is all
/// it can tell; the record appended with acks=quorum next shows that a
/// quorum replicates.)
async fn wait_leader(
    admin: &Admin,
    topic: &str,
    timeout: Duration,
) -> Result<PartitionMetadata, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match admin.metadata().await {
            Ok(metadata) => match partition_of(&metadata, topic) {
                Ok(partition) if partition.leader.is_some() && partition.replicas.len() >= 2 => {
                    return Ok(partition.clone());
                }
                Ok(partition) => format!(
                    "leader {:?}, replicas {:?}",
                    partition.leader, partition.replicas
                ),
                Err(error) => error,
            },
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{topic}/{PARTITION} has no leader with a replica to fail over to after {} s \
                 ({last})",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the broker at `addr` answers metadata requests itself and
/// knows the partition's leader.
async fn wait_broker_back(addr: &str, topic: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut config = ClientConfig::new(addr.to_owned());
        config.request_timeout = Duration::from_secs(2);
        config.connect_timeout = Duration::from_secs(2);
        let last = match Admin::connect(config).await {
            Ok(admin) => match admin.metadata().await {
                Ok(metadata) => match partition_of(&metadata, topic) {
                    Ok(partition) if partition.leader.is_some() => return Ok(()),
                    Ok(_) => format!("it knows no leader of {topic}/{PARTITION}"),
                    Err(error) => error,
                },
                Err(error) => error.to_string(),
            },
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{addr} does not answer after {} s ({last})",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn produce_marker(
    args: &FailoverArgs,
    addrs: &Addresses,
    value: Bytes,
) -> Result<Delivery, String> {
    let mut config = ProducerConfig {
        client: addrs.client(Duration::from_secs(10)),
        ..ProducerConfig::default()
    };
    config.acks = Acks::Quorum;
    config.ack_timeout = Duration::from_secs(5);
    config.delivery_timeout = Duration::from_secs(30);
    let producer = Producer::connect(config)
        .await
        .map_err(|error| format!("producer cannot connect: {error}"))?;
    let delivery = async {
        producer
            .send(ProducerRecord::new(args.topic.clone(), value).partition(PARTITION))
            .await?
            .await
    }
    .await
    .map_err(|error| format!("the record before the kill was not acknowledged: {error}"));
    let _ = producer.close().await;
    delivery
}

/// A short-lived producer for one attempt after the kill: not idempotent,
/// no linger, timeouts of one attempt.
fn attempt_config(args: &FailoverArgs, addrs: &Addresses) -> ProducerConfig {
    let timeout = Duration::from_millis(args.attempt_timeout_ms);
    let mut config = ProducerConfig {
        client: addrs.client(timeout),
        ..ProducerConfig::default()
    };
    config.acks = Acks::Quorum;
    config.idempotence = false;
    config.linger = Duration::ZERO;
    config.delivery_timeout = timeout;
    config.ack_timeout = timeout * 4 / 5;
    config.retry_backoff = Duration::from_millis(10);
    config.retry_backoff_max = Duration::from_millis(50);
    config
}

async fn attempt(
    args: &FailoverArgs,
    addrs: &Addresses,
    value: Bytes,
) -> Result<Delivery, ClientError> {
    let producer = Producer::connect(attempt_config(args, addrs)).await?;
    let delivery = producer
        .send(ProducerRecord::new(args.topic.clone(), value).partition(PARTITION))
        .await?
        .await;
    // Dropping the producer lets its sender finish (or time out) whatever
    // it still holds, in the background.
    drop(producer);
    delivery
}

async fn append_until_acknowledged(
    args: &FailoverArgs,
    addrs: &Addresses,
    killed_at: Instant,
    result: &mut Round,
) -> Result<Delivery, String> {
    let max = Duration::from_secs(args.max_seconds);
    // The whole attempt, connection and metadata included.
    let attempt_limit = Duration::from_millis(args.attempt_timeout_ms * 2);
    loop {
        let started = Instant::now();
        result.attempts += 1;
        let value = Bytes::from(format!(
            "failover round {} attempt {}",
            result.round, result.attempts
        ));
        let error = match tokio::time::timeout(attempt_limit, attempt(args, addrs, value)).await {
            Ok(Ok(delivery)) => return Ok(delivery),
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {} ms", attempt_limit.as_millis()),
        };
        if args.verbose {
            eprintln!(
                "  attempt {} failed at {:.3} s after the kill ({:.0} ms): {error}",
                result.attempts,
                killed_at.elapsed().as_secs_f64(),
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        result.last_attempt_error = Some(error);
        if killed_at.elapsed() >= max {
            return Err(format!(
                "no append acknowledged within {} s of the kill ({} attempts; last error: {})",
                args.max_seconds,
                result.attempts,
                result.last_attempt_error.as_deref().unwrap_or("none")
            ));
        }
        // Retry at once, but do not spin when errors come back instantly.
        let floor = Duration::from_millis(10);
        if started.elapsed() < floor {
            tokio::time::sleep(floor - started.elapsed()).await;
        }
    }
}

/// After the first acknowledgement: the metadata names a new leader, and
/// the record acknowledged before the kill is still there.
async fn check_after(
    args: &FailoverArgs,
    addrs: &Addresses,
    admin: &Admin,
    killed: u32,
    marker: &Bytes,
    result: &mut Round,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metadata = admin.metadata().await.map_err(|error| error.to_string());
        if let Ok(partition) = metadata
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|metadata| partition_of(metadata, &args.topic))
        {
            result.new_leader = partition.leader;
            result.new_leader_epoch = Some(partition.leader_epoch);
            if partition.leader.is_some_and(|leader| leader != killed) {
                break;
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "an append was acknowledged, but the metadata still names leader {:?} \
                 (killed: {killed})",
                result.new_leader
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    read_back(args, addrs, result.record_offset, marker).await?;
    result.record_readable = true;
    Ok(())
}

async fn read_back(
    args: &FailoverArgs,
    addrs: &Addresses,
    offset: u64,
    expected: &Bytes,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut config = ConsumerConfig {
        client: addrs.client(Duration::from_secs(5)),
        ..ConsumerConfig::default()
    };
    config.fetch_max_wait = Duration::from_millis(200);
    let mut last = String::from("nothing fetched");
    while Instant::now() < deadline {
        let mut consumer = match Consumer::connect(config.clone()).await {
            Ok(consumer) => consumer,
            Err(error) => {
                last = error.to_string();
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        consumer.assign(&args.topic, PARTITION, StartFrom::Offset(Offset(offset)));
        while Instant::now() < deadline {
            match consumer.poll().await {
                Ok(polled) => {
                    if let Some(record) = polled.records.iter().find(|r| r.offset.0 >= offset) {
                        if record.offset.0 != offset {
                            return Err(format!(
                                "offset {offset} is gone: the first record from it is at {}",
                                record.offset.0
                            ));
                        }
                        if record.value.as_ref() != Some(expected) {
                            return Err(format!(
                                "offset {offset} holds another record than the one acknowledged \
                                 before the kill"
                            ));
                        }
                        return Ok(());
                    }
                }
                Err(error) => {
                    last = error.to_string();
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "the record acknowledged before the kill (offset {offset}) was not read back \
         within 15 s ({last})"
    ))
}

/// Runs `template` with `{leader}` replaced, through `sh -c`; its output
/// goes to stderr so that stdout stays the report.
async fn run_command(template: &str, leader: u32, what: &str) -> Result<(), String> {
    let command = template.replace("{leader}", &leader.to_string());
    let shown = command.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("sh")
            .arg("-c")
            .arg(&command)
            .stdin(std::process::Stdio::null())
            .output()
    })
    .await
    .map_err(|error| error.to_string())?
    .map_err(|error| format!("cannot run the {what} command {shown:?}: {error}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    for line in text.lines().chain(errors.lines()) {
        eprintln!("  [{what}] {line}");
    }
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "the {what} command {shown:?} failed ({})",
            output.status
        ))
    }
}

/// The time of day in UTC, `HH:MM:SS.mmm`.
fn utc_now() -> String {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ms = since_epoch.as_millis() % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

fn progress(args: &FailoverArgs, line: &str) {
    if args.json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

fn seconds(ms: f64) -> String {
    format!("{:.2} s", ms / 1000.0)
}

fn print_round(args: &FailoverArgs, round: &Round) {
    let mut line = format!("round {}:", round.round);
    match round.failover_ms {
        Some(ms) => line.push_str(&format!(
            " failover {} ({} attempts), leader {} -> {} (epoch {} -> {}), offset {} {}",
            seconds(ms),
            round.attempts,
            if round.killed_controller_leader {
                format!("{} (also controller leader)", round.killed_leader)
            } else {
                round.killed_leader.to_string()
            },
            round
                .new_leader
                .map_or_else(|| "?".to_owned(), |leader| leader.to_string()),
            round.killed_leader_epoch,
            round
                .new_leader_epoch
                .map_or_else(|| "?".to_owned(), |epoch| epoch.to_string()),
            round.record_offset,
            if round.record_readable {
                "read back"
            } else {
                "NOT read back"
            },
        )),
        None if round.killed_leader != 0 => line.push_str(&format!(
            " no append acknowledged after killing leader {}",
            round.killed_leader
        )),
        None => line.push_str(" nothing killed"),
    }
    if let Some(ms) = round.restart_ms {
        line.push_str(&format!("; broker back {} after restart", seconds(ms)));
    }
    if let Some(error) = &round.error {
        line.push_str(&format!("; FAILED: {error}"));
    }
    progress(args, &line);
}

fn summarise(args: &FailoverArgs, rounds: Vec<Round>) -> FailoverReport {
    let times: Vec<f64> = rounds
        .iter()
        .filter_map(|round| round.failover_ms)
        .collect();
    let max = times.iter().copied().reduce(f64::max);
    let min = times.iter().copied().reduce(f64::min);
    let mean = (!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64);
    let ok = rounds.len() == args.rounds as usize
        && rounds.iter().all(|round| {
            round.error.is_none()
                && round
                    .failover_ms
                    .is_some_and(|ms| ms <= args.max_seconds as f64 * 1000.0)
        });
    FailoverReport {
        topic: args.topic.clone(),
        rounds,
        max_failover_ms: max,
        mean_failover_ms: mean,
        min_failover_ms: min,
        max_seconds: args.max_seconds,
        ok,
    }
}

fn print_summary(report: &FailoverReport) {
    println!(
        "\nfailover: leader kill -9 to first acknowledged append (acks=quorum), {} rounds",
        report.rounds.len()
    );
    let times: Vec<String> = report
        .rounds
        .iter()
        .map(|round| {
            let time = round.failover_ms.map_or_else(|| "-".to_owned(), seconds);
            if round.killed_controller_leader {
                format!("{time} (killed the controller leader too)")
            } else {
                time
            }
        })
        .collect();
    println!("  per round: {}", times.join(", "));
    match (
        report.max_failover_ms,
        report.mean_failover_ms,
        report.min_failover_ms,
    ) {
        (Some(max), Some(mean), Some(min)) => println!(
            "  failover max {}, mean {}, min {}",
            seconds(max),
            seconds(mean),
            seconds(min)
        ),
        _ => println!("  failover: no round completed"),
    }
    if !report.ok {
        println!("  FAILED (limit {} s per round)", report.max_seconds);
    }
}
