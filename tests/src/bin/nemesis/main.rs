//! `corelog-nemesis`: starts a 3-broker cluster, runs the `corelog verify`
//! workload on it (idempotent producers, a consumer group, a final read),
//! injects faults on a seeded schedule, and checks the recorded history.
//! Exit code 1 on any violation.
//!
//! The cluster ([`rig`]): brokers on 127.0.0.2-4 inside a private network
//! namespace, each behind a fault proxy on 127.0.0.12-14 that it
//! advertises (so clients and peers both cross the proxies), every broker
//! recording a durable ledger (the test build's fault hooks), broker 3's
//! data on a small loop-mounted filesystem.
//!
//! Faults ([`plan::FaultKind`]), each on a broker chosen by the schedule
//! (any broker, the leader of a partition, or the controller leader):
//! kill -9 and pauses of one or two brokers; power loss (kill -9, then
//! every file cut to its last fdatasync'ed length) of one broker, of all
//! three, and of one while another is paused or cut off; network cuts
//! (leader isolated, a pair split, one-way, clients cut from a broker);
//! proxy chaos (frames delayed, reordered, duplicated, dropped, corrupted,
//! replies lost); EIO on the next write or fdatasync; the small filesystem
//! filled, then freed; a file of a stopped broker bit-flipped or
//! truncated, then a restart that must repair or refuse; a SIGTERM restart
//! (controlled shutdown); and an operator's commands: a partition's
//! leadership moved to a chosen broker, and a broker put in maintenance,
//! restarted with SIGTERM and taken out again.
//!
//! Faults that take two or more brokers away are recorded as no-quorum
//! intervals: any append acknowledged wholly inside one is a violation.
//! Where the namespace or the small filesystem cannot be had, the run says
//! so and those faults fall back to pauses and kills.
//!
//! The schedule is a function of the seed, printed at the start and on
//! failure with the command that replays it. Timing against the cluster is
//! real time, so a replay repeats the faults, not every interleaving.

#![allow(
    clippy::expect_used,
    reason = "a test harness: a broker that cannot start ends the run loudly"
)]

mod plan;
mod rig;
mod secured;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use corelog_cli::verify::workload::{self, Workload};
use corelog_cli::verify::{ClientId, EventKind, History, check};
use corelog_client::{Admin, ClientConfig};
use serde::Serialize;

use crate::plan::{FaultKind, Target, plan};
use crate::rig::{Outcome, Rig};
use crate::secured::Secured;

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
    #[arg(long, default_value_t = 300)]
    duration: u64,
    /// Mean seconds between the end of one fault and the next.
    #[arg(long, default_value_t = 2)]
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
    /// Copy each broker's output (all its runs) into this directory.
    #[arg(long)]
    broker_logs: Option<std::path::PathBuf>,
    /// Run with the trust boundary on: TLS everywhere, the workload logged
    /// in with SCRAM and held to ACLs (see `secured.rs`).
    #[arg(long)]
    secured: bool,
}

/// What happened to one fault.
#[derive(Clone, Debug, Serialize)]
struct Injected {
    kind: FaultKind,
    /// The kind the schedule asked for, when a missing capability made it
    /// fall back to another.
    #[serde(skip_serializing_if = "Option::is_none")]
    planned: Option<FaultKind>,
    target: Target,
    brokers: Vec<u32>,
    at_ms: u64,
    hold_ms: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    detail: String,
}

/// Resolves a target to a broker index (node id - 1).
/// An operator's command as a fault: a leadership transfer of a random
/// partition to broker `first`, or `first`'s maintenance around a SIGTERM
/// restart. A refused command is part of the outcome, not a failure: the
/// target may be behind, down, or already in maintenance.
async fn operate(
    kind: FaultKind,
    first: usize,
    hold: Duration,
    seed: u64,
    partitions: u32,
    client: &ClientConfig,
    rig: &mut Rig,
) -> Outcome {
    let node = u32::try_from(first + 1).unwrap_or(1);
    let mut outcome = Outcome {
        brokers: vec![node],
        ..Outcome::default()
    };
    let admin = match Admin::connect(client.clone()).await {
        Ok(admin) => admin,
        Err(error) => {
            outcome.detail = format!("no admin client: {error}");
            return outcome;
        }
    };
    let said = |result: Result<String, corelog_client::ClientError>| match result {
        Ok(said) => said,
        Err(error) => format!("refused: {error}"),
    };
    match kind {
        FaultKind::Transfer => {
            let partition = u32::try_from(seed % u64::from(partitions.max(1))).unwrap_or(0);
            let moved = admin
                .elect_leader(TOPIC, partition, Some(node))
                .await
                .map(|moved| {
                    format!(
                        "partition {partition} led by {} (epoch {})",
                        moved.leader, moved.epoch
                    )
                });
            outcome.detail = said(moved);
            tokio::time::sleep(hold).await;
        }
        FaultKind::Maintenance => {
            let enabled = admin
                .set_maintenance(node, true)
                .await
                .map(|still| format!("in maintenance, still leading {still}"));
            outcome.detail = said(enabled);
            let restarted = rig.terminate(first);
            tokio::time::sleep(hold).await;
            let disabled = admin
                .set_maintenance(node, false)
                .await
                .map(|_| "out of maintenance".to_owned());
            outcome.detail = format!("{}; {restarted}; {}", outcome.detail, said(disabled));
        }
        _ => {}
    }
    outcome
}

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
    // The workload's client library logs what it retries, the workload its
    // failed polls; RUST_LOG (for example `corelog_client=debug,corelog_cli=debug`)
    // shows them when a run needs explaining.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .init();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |since| u64::from(since.subsec_nanos()) ^ since.as_secs())
    });
    let replay = format!(
        "corelog-nemesis --seed {seed} --duration {} --fault-gap {} --rate {} --partitions {}{}",
        args.duration,
        args.fault_gap,
        args.rate,
        args.partitions,
        if args.secured { " --secured" } else { "" }
    );
    println!("nemesis: seed {seed}; replay with: {replay}");
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(error) = signal_hook::flag::register(signal, Arc::clone(&interrupted)) {
            eprintln!("nemesis: cannot handle signal {signal}: {error}");
        }
    }
    // The namespace first: threads and processes started afterwards share it.
    let firewall = match rig::private_network() {
        Ok(firewall) => Some(firewall),
        Err(reason) => {
            println!("nemesis: no network partitions ({reason}); they fall back to pauses");
            None
        }
    };
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

    let security = args.secured.then(|| Secured::new(&Rig::HOSTS));
    let (mut rig, capabilities) = Rig::start(seed, firewall, security.as_ref());
    if let Some(reason) = &capabilities.no_small_fs {
        println!("nemesis: no small filesystem ({reason}); disk-full faults fall back to kills");
    }
    let mut client = ClientConfig {
        client_name: "corelog-nemesis".to_owned(),
        bootstrap: rig.bootstrap(),
        ..ClientConfig::default()
    };
    if let Some(security) = &security {
        let group = format!("{TOPIC}-group");
        let enrolled = runtime.block_on(security.enrol_workload(
            &client,
            TOPIC,
            &group,
            Duration::from_secs(60),
        ));
        client = match enrolled {
            Ok(client) => client,
            Err(error) => {
                eprintln!("nemesis: cannot create the workload's user and ACLs: {error}");
                return ExitCode::FAILURE;
            }
        };
        println!("nemesis: secured: TLS, the workload logged in with SCRAM-SHA-512, ACLs on");
    }
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
        if !sleep_unless(&interrupted, Duration::from_millis(fault.gap_before_ms)) {
            break;
        }
        let hold = Duration::from_millis(fault.hold_ms);
        if Instant::now() + hold >= faults_until {
            break;
        }
        let kind = rig.effective(fault.kind);
        let first = runtime.block_on(resolve(fault.target, fault.fallback, &client));
        let second = if fault.second == first {
            (first + 1) % 3
        } else {
            fault.second
        };
        let started = Instant::now();
        let outcome = if kind.is_operator() {
            runtime.block_on(operate(
                kind, first, hold, fault.seed, partitions, &client, &mut rig,
            ))
        } else {
            rig.inject(kind, first, second, hold, fault.seed)
        };
        if let Some((down, back)) = outcome.no_quorum {
            let from_ms = since(down) + NO_QUORUM_MARGIN_MS;
            let to_ms = since(back).saturating_sub(NO_QUORUM_MARGIN_MS);
            if from_ms < to_ms {
                no_quorum.push((from_ms, to_ms));
            }
        }
        let record = Injected {
            kind,
            planned: (kind != fault.kind).then_some(fault.kind),
            target: fault.target,
            brokers: outcome.brokers,
            at_ms: since(started),
            hold_ms: fault.hold_ms,
            detail: outcome.detail,
        };
        println!(
            "nemesis: {:>6.1}s {:?} {:?} brokers {:?} for {} ms{}{}",
            record.at_ms as f64 / 1000.0,
            record.kind,
            record.target,
            record.brokers,
            record.hold_ms,
            if record.detail.is_empty() { "" } else { ": " },
            record.detail
        );
        injected.push(record);
    }
    if interrupted.load(Ordering::Relaxed) {
        return stop_interrupted(rig, &args, &replay);
    }
    println!("nemesis: faults over; the workload drains and reads everything back");
    let finished = runtime.block_on(async {
        tokio::select! {
            finished = running => Some(finished),
            () = until_set(&interrupted) => None,
        }
    });
    let Some(finished) = finished else {
        return stop_interrupted(rig, &args, &replay);
    };
    let history = match finished {
        Ok(Ok(history)) => history,
        // The brokers' logs are what explains a workload that could not
        // finish: keep them as on success.
        Ok(Err(error)) => {
            eprintln!("nemesis: the workload failed: {error}\nreplay with: {replay}");
            stop_rig(rig, &args);
            return ExitCode::FAILURE;
        }
        Err(error) => {
            eprintln!("nemesis: the workload task failed: {error}\nreplay with: {replay}");
            stop_rig(rig, &args);
            return ExitCode::FAILURE;
        }
    };
    let history = with_no_quorum(history, &no_quorum, partitions);
    let proxy_stats = rig.proxy_stats();
    stop_rig(rig, &args);

    let report = check(&history);
    let mut counts: BTreeMap<FaultKind, u64> = BTreeMap::new();
    for fault in &injected {
        *counts.entry(fault.kind).or_default() += 1;
    }
    println!("\nfaults injected: {}", injected.len());
    for (kind, count) in &counts {
        println!("  {kind:<10?} {count}");
    }
    println!("proxies: {proxy_stats:?}");
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
            "proxy_stats": proxy_stats,
            "capabilities": {
                "network_partitions": capabilities.no_network.as_deref().unwrap_or("yes"),
                "small_filesystem": capabilities.no_small_fs.as_deref().unwrap_or("yes"),
            },
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

/// Sleeps for `duration` in short steps; false (at once) if `interrupted`
/// is set meanwhile.
fn sleep_unless(interrupted: &AtomicBool, duration: Duration) -> bool {
    let until = Instant::now() + duration;
    while !interrupted.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    false
}

/// Resolves once `flag` is set.
async fn until_set(flag: &AtomicBool) {
    while !flag.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// After SIGINT or SIGTERM: stops the rig ([`stop_rig`]) and checks
/// nothing.
fn stop_interrupted(rig: Rig, args: &Args, replay: &str) -> ExitCode {
    eprintln!("nemesis: interrupted; stopping the brokers, no check. Replay with: {replay}");
    stop_rig(rig, args);
    ExitCode::from(130)
}

/// Copies the broker logs out if asked, then drops the rig: the brokers
/// die, the firewall table and the small filesystem go.
fn stop_rig(rig: Rig, args: &Args) {
    if let Some(dir) = &args.broker_logs
        && let Err(error) = rig.save_logs(dir)
    {
        eprintln!(
            "nemesis: cannot save broker logs to {}: {error}",
            dir.display()
        );
    }
    drop(rig);
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
