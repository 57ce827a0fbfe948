//! `corelog-nemesis`: starts a 3-broker cluster on loopback, runs the
//! `corelog verify` workload on it (idempotent producers, a consumer
//! group, a final read), injects process faults on a seeded schedule, and
//! checks the recorded history. Exit code 1 on any violation.
//!
//! Faults (each on a broker chosen by the schedule: any broker, the leader
//! of a partition, or the controller leader):
//! - `kill`: kill -9, then restart on the same data directory;
//! - `pause`: SIGSTOP, then SIGCONT (long pauses outlast the session
//!   timeout, so the broker is fenced and its leaderships move);
//! - `kill-two` / `pause-two`: two brokers at once, so every partition loses
//!   its quorum: the interval is recorded as `no_quorum`, and any append
//!   acknowledged wholly inside it is a violation.
//!
//! The schedule is a function of the seed, printed at the start and on
//! failure with the command that replays it. Timing against the cluster is
//! real time, so a replay repeats the faults, not every interleaving.
//!
//! Network partitions, the fault proxy, power loss, EIO, disk full and
//! corruption (issue 6, item 1) are not here yet.

#![allow(
    clippy::expect_used,
    reason = "a test harness: a broker that cannot start ends the run loudly"
)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use corelog_client::verify::workload::{self, Workload};
use corelog_client::verify::{ClientId, EventKind, History, check};
use corelog_client::{Admin, ClientConfig};
use corelog_tests::start_cluster;
use serde::Serialize;

/// Topic the workload writes.
const TOPIC: &str = "nemesis";
/// Quiet time at the end of the fault phase, before producers stop, so the
/// drain and the final read run on a healed cluster.
const HEAL_BEFORE_END: Duration = Duration::from_secs(10);
/// No-quorum intervals are recorded this much narrower than the faults, at
/// both ends: the two clocks (injector and workload) differ slightly.
const NO_QUORUM_MARGIN_MS: u64 = 250;

#[derive(Debug, Parser)]
#[command(name = "corelog-nemesis", version)]
struct Args {
    /// Seed of the fault schedule; default from the clock.
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds of workload (faults stop 10 s before the end).
    #[arg(long, default_value_t = 240)]
    duration: u64,
    /// Mean seconds between the end of one fault and the next.
    #[arg(long, default_value_t = 3)]
    fault_gap: u64,
    /// Records per second.
    #[arg(long, default_value_t = 400)]
    rate: u64,
    /// Partitions of the topic (replication factor 3).
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Write the JSON report (faults and checker) to this file.
    #[arg(long)]
    report: Option<std::path::PathBuf>,
    /// Write the recorded history, one JSON event per line, to this file.
    #[arg(long)]
    history: Option<std::path::PathBuf>,
}

/// splitmix64: a small seeded generator, so the schedule depends on the
/// seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
enum FaultKind {
    Kill,
    Pause,
    KillTwo,
    PauseTwo,
}

#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Target {
    Any,
    PartitionLeader(u32),
    ControllerLeader,
}

/// One planned fault.
#[derive(Clone, Debug, Serialize)]
struct Fault {
    kind: FaultKind,
    target: Target,
    /// Index of the broker used when the target cannot be resolved, and
    /// the second broker of a two-broker fault.
    fallback: usize,
    second: usize,
    gap_before_ms: u64,
    hold_ms: u64,
}

fn plan(seed: u64, count: usize, gap_mean: Duration, partitions: u32) -> Vec<Fault> {
    let mut rng = Rng(seed);
    let gap_ms = u64::try_from(gap_mean.as_millis()).unwrap_or(u64::MAX);
    (0..count)
        .map(|_| {
            let kind = match rng.below(10) {
                0..=3 => FaultKind::Kill,
                4..=6 => FaultKind::Pause,
                7..=8 => FaultKind::KillTwo,
                _ => FaultKind::PauseTwo,
            };
            let target = match rng.below(3) {
                0 => Target::Any,
                1 => Target::PartitionLeader(
                    u32::try_from(rng.below(u64::from(partitions))).unwrap_or(0),
                ),
                _ => Target::ControllerLeader,
            };
            let fallback = usize::try_from(rng.below(3)).unwrap_or(0);
            let second = (fallback + 1 + usize::try_from(rng.below(2)).unwrap_or(0)) % 3;
            let hold = match kind {
                FaultKind::Kill => rng.millis(500, 3_000),
                // Half of the pauses outlast the 2 s session timeout.
                FaultKind::Pause => rng.millis(300, 4_500),
                FaultKind::KillTwo | FaultKind::PauseTwo => rng.millis(1_500, 4_000),
            };
            Fault {
                kind,
                target,
                fallback,
                second,
                gap_before_ms: gap_ms / 2 + rng.below(gap_ms + 1),
                hold_ms: u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
            }
        })
        .collect()
}

/// What happened to one fault.
#[derive(Clone, Debug, Serialize)]
struct Injected {
    kind: FaultKind,
    target: Target,
    brokers: Vec<u32>,
    at_ms: u64,
    hold_ms: u64,
}

/// Resolves a target to a broker index (node id - 1).
async fn resolve(target: Target, fallback: usize, client: &ClientConfig) -> usize {
    let wanted = async {
        let admin = Admin::connect(client.clone()).await.ok()?;
        let metadata = admin.metadata().await.ok()?;
        let node = match target {
            Target::Any => None,
            Target::ControllerLeader => metadata.controller_id,
            Target::PartitionLeader(partition) => {
                metadata
                    .topics
                    .get(TOPIC)?
                    .partitions
                    .iter()
                    .find(|state| state.partition == partition)?
                    .leader
            }
        }?;
        usize::try_from(node.checked_sub(1)?)
            .ok()
            .filter(|index| *index < 3)
    };
    tokio::time::timeout(Duration::from_secs(2), wanted)
        .await
        .ok()
        .flatten()
        .unwrap_or(fallback)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |since| u64::from(since.subsec_nanos()) ^ since.as_secs())
    });
    let replay = format!(
        "corelog-nemesis --seed {seed} --duration {} --fault-gap {} --rate {} --partitions {}",
        args.duration, args.fault_gap, args.rate, args.partitions
    );
    println!("nemesis: seed {seed}; replay with: {replay}");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("nemesis: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };

    let mut brokers = start_cluster(3, &[]);
    let client = ClientConfig {
        client_name: "corelog-nemesis".to_owned(),
        bootstrap: brokers
            .iter()
            .map(|broker| broker.addr.to_string())
            .collect(),
        ..ClientConfig::default()
    };
    // Brokers register fenced; the topic can be created once all three are
    // unfenced.
    let ready_by = Instant::now() + Duration::from_secs(30);
    let partitions = loop {
        match runtime.block_on(workload::prepare_topic(&client, TOPIC, args.partitions, 3)) {
            Ok(partitions) => break partitions,
            Err(error) if Instant::now() >= ready_by => {
                eprintln!("nemesis: cannot create the topic: {error}");
                return ExitCode::FAILURE;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let origin = Instant::now();
    let workload = Workload {
        client: client.clone(),
        topic: TOPIC.to_owned(),
        group: format!("{TOPIC}-group"),
        producers: 2,
        rate: args.rate,
        keys: 500,
        payload_bytes: 100,
        duration: Duration::from_secs(args.duration),
        drain_timeout: Duration::from_secs(120),
        clock_origin: Some(origin),
    };
    let running = runtime.spawn(async move {
        workload::run(&workload, partitions, |line| eprintln!("workload: {line}")).await
    });

    let faults_until = origin + Duration::from_secs(args.duration).saturating_sub(HEAL_BEFORE_END);
    let schedule = plan(
        seed,
        10_000,
        Duration::from_secs(args.fault_gap),
        partitions,
    );
    let mut injected = Vec::new();
    let mut no_quorum = Vec::new();
    let since =
        |at: Instant| u64::try_from(at.duration_since(origin).as_millis()).unwrap_or(u64::MAX);
    for fault in &schedule {
        std::thread::sleep(Duration::from_millis(fault.gap_before_ms));
        let hold = Duration::from_millis(fault.hold_ms);
        if Instant::now() + hold >= faults_until {
            break;
        }
        let first = runtime.block_on(resolve(fault.target, fault.fallback, &client));
        let second = if fault.second == first {
            (first + 1) % 3
        } else {
            fault.second
        };
        let victims: Vec<usize> = match fault.kind {
            FaultKind::Kill | FaultKind::Pause => vec![first],
            FaultKind::KillTwo | FaultKind::PauseTwo => vec![first, second],
        };
        let started = Instant::now();
        for &index in &victims {
            match fault.kind {
                FaultKind::Kill | FaultKind::KillTwo => brokers[index].kill(),
                FaultKind::Pause | FaultKind::PauseTwo => brokers[index].pause(),
            }
        }
        let all_down = Instant::now();
        std::thread::sleep(hold);
        let first_back = Instant::now();
        for &index in &victims {
            match fault.kind {
                FaultKind::Kill | FaultKind::KillTwo => brokers[index].spawn(),
                FaultKind::Pause | FaultKind::PauseTwo => brokers[index].resume(),
            }
        }
        if victims.len() == 2 {
            let from_ms = since(all_down) + NO_QUORUM_MARGIN_MS;
            let to_ms = since(first_back).saturating_sub(NO_QUORUM_MARGIN_MS);
            if from_ms < to_ms {
                no_quorum.push((from_ms, to_ms));
            }
        }
        let record = Injected {
            kind: fault.kind,
            target: fault.target,
            brokers: victims
                .iter()
                .map(|index| u32::try_from(index + 1).unwrap_or(0))
                .collect(),
            at_ms: since(started),
            hold_ms: fault.hold_ms,
        };
        println!(
            "nemesis: {:>6.1}s {:?} {:?} brokers {:?} for {} ms",
            record.at_ms as f64 / 1000.0,
            record.kind,
            record.target,
            record.brokers,
            record.hold_ms
        );
        injected.push(record);
    }
    println!("nemesis: faults over; the workload drains and reads everything back");
    let history = match runtime.block_on(running) {
        Ok(Ok(history)) => history,
        Ok(Err(error)) => {
            eprintln!("nemesis: the workload failed: {error}\nreplay with: {replay}");
            return ExitCode::FAILURE;
        }
        Err(error) => {
            eprintln!("nemesis: the workload task failed: {error}\nreplay with: {replay}");
            return ExitCode::FAILURE;
        }
    };
    let history = with_no_quorum(history, &no_quorum, partitions);
    drop(brokers);

    let report = check(&history);
    let mut counts: BTreeMap<FaultKind, u64> = BTreeMap::new();
    for fault in &injected {
        *counts.entry(fault.kind).or_default() += 1;
    }
    println!("\nfaults injected: {}", injected.len());
    for (kind, count) in &counts {
        println!("  {kind:<10?} {count}");
    }
    println!("\n{report}");
    if let Some(path) = &args.history
        && let Ok(text) = history.to_json_lines()
        && let Err(error) = std::fs::write(path, text)
    {
        eprintln!("nemesis: cannot write {}: {error}", path.display());
    }
    if let Some(path) = &args.report {
        let json = serde_json::json!({
            "seed": seed,
            "replay": replay,
            "faults": injected,
            "fault_counts": counts.iter().map(|(kind, count)| (format!("{kind:?}"), count)).collect::<BTreeMap<_, _>>(),
            "no_quorum_intervals_ms": no_quorum,
            "report": serde_json::from_str::<serde_json::Value>(&report.to_json().unwrap_or_default()).unwrap_or_default(),
        });
        if let Err(error) = std::fs::write(path, json.to_string()) {
            eprintln!("nemesis: cannot write {}: {error}", path.display());
        }
    }
    if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        eprintln!("nemesis: VIOLATIONS; replay with: {replay}");
        ExitCode::FAILURE
    }
}

/// Adds the no-quorum intervals, for every partition of the topic, at the
/// end of the history (events stay in time order).
fn with_no_quorum(mut history: History, intervals: &[(u64, u64)], partitions: u32) -> History {
    let end_ms = history.events().last().map_or(0, |event| event.at_ms);
    for &(from_ms, to_ms) in intervals {
        for partition in 0..partitions {
            history.record(
                end_ms.max(to_ms),
                ClientId(0),
                EventKind::NoQuorum {
                    topic: TOPIC.to_owned(),
                    partition,
                    from_ms,
                    to_ms,
                },
            );
        }
    }
    history
}
