//! `matrix` mode: what corelog costs over producers × partitions ×
//! replication factor, for one or more builds side by side (issue 14).
//!
//! For every cell (replication factor, partitions, producers) and round,
//! every build runs in turn (the order rotates from round to round, so no
//! build always goes first): a fresh broker — RF 1: one broker with
//! `--rf1-shards` shards; RF 3: a local three-broker cluster, one shard
//! each — is started from that build's binaries by `scripts/cluster.sh`, a
//! topic is created, and that build's own `corelog-bench produce` runs as a
//! child process twice: the sustained phase (`--rate` for `--duration`),
//! then the peak phase (`--peak-rate` for `--peak-duration`). Every build
//! is measured with its own client library, as its users would run it.
//!
//! Around each phase the matrix reads:
//! - each broker's CPU time (`/proc/<pid>/stat`) and the bytes it wrote to
//!   storage (`write_bytes` of `/proc/<pid>/io`: every file it writes, log,
//!   indexes and metadata alike);
//! - each broker's `/metrics`: fdatasyncs
//!   (`corelog_fsync_latency_seconds_count`), replication RPCs received
//!   (`corelog_requests_total` of `ReplicaPush` and of the `ReplicaStream`
//!   frames that replaced it; a build may use either) and the bytes producers
//!   appended (`corelog_bytes_in_total`, on leaders);
//! - the load generator's CPU time (the waited-for children's time in
//!   `/proc/self/stat`: the brokers are not this process's children,
//!   `scripts/cluster.sh` starts them).
//!
//! With `--overload`, every cell then runs the overload phase (capacity
//! search, twice the capacity, half of it; see `overload`), reported in a
//! table of its own and under `overloads` in the JSON report.
//!
//! "Written per appended" divides the bytes written by the bytes appended
//! on every replica (`bytes_in` times the replication factor). Latency is
//! open loop, from each record's due time (see `load`).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::Value;

use crate::overload;
use crate::report::number_at;

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// A build to measure, as NAME=DIR where DIR holds its corelogd,
    /// corelog and corelog-bench; repeat for side-by-side runs. Default: the
    /// directory of this corelog-bench, named "current".
    #[arg(long = "build", value_name = "NAME=DIR")]
    builds: Vec<String>,
    /// Producer counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 64])]
    producers: Vec<usize>,
    /// Partition counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [16, 256, 1024])]
    partitions: Vec<u32>,
    /// Replication factors, comma-separated: 1 (one broker) and/or 3 (a
    /// local three-broker cluster).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 3])]
    replication_factors: Vec<u16>,
    /// Records per second of the sustained phase.
    #[arg(long, default_value_t = 100_000)]
    rate: u64,
    /// Seconds of the sustained phase.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Records per second of the peak phase; 0 skips it.
    #[arg(long, default_value_t = 200_000)]
    peak_rate: u64,
    /// Seconds of the peak phase.
    #[arg(long, default_value_t = 10)]
    peak_duration: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Distinct record keys (a build whose corelog-bench has no `--keys`
    /// uses its fixed 1,024; the report says which).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Rounds of the whole matrix.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Shards of the RF 1 broker.
    #[arg(long, default_value_t = 2)]
    rf1_shards: u16,
    /// The script that starts and stops local clusters.
    #[arg(long, default_value = "scripts/cluster.sh")]
    cluster_script: PathBuf,
    /// First port of the clusters (brokers at +1.., metrics at +101..).
    #[arg(long, default_value_t = 17600)]
    base_port: u16,
    /// Where the brokers' data directories go (a fresh one per cell).
    #[arg(long, default_value = "/var/tmp")]
    work_dir: PathBuf,
    /// Seconds to wait after each cell: removing its gigabytes of data on
    /// a `discard`-mounted disk stalls the next cell's fsyncs.
    #[arg(long, default_value_t = 5)]
    settle_seconds: u64,
    /// Where the JSON report is written.
    #[arg(long, default_value = "target/bench-matrix.json")]
    json_out: PathBuf,
    /// Bytes of the cell's topic kept on disk in all (every partition,
    /// every replica): its retention.bytes is this over partitions times
    /// replicas, its segments a quarter of that. A cell's capacity search
    /// writes tens of gigabytes, more than a small disk holds.
    #[arg(long, default_value_t = 16 << 30)]
    retain_bytes: u64,
    /// Add the overload phase to every cell (see `overload`): find the
    /// cell's capacity, offer twice it, then half of it.
    #[arg(long)]
    overload: bool,
    /// Seconds of each capacity probe.
    #[arg(long, default_value_t = 10)]
    probe_seconds: u64,
    /// Seconds of the overload, and of the recovery after it.
    #[arg(long, default_value_t = 30)]
    overload_seconds: u64,
    /// Each producer's buffer during the overload run, bytes.
    #[arg(long, default_value_t = 2 << 20)]
    overload_buffer_bytes: usize,
}

/// One cell's overload phase.
#[derive(Clone, Debug, Serialize)]
struct OverloadRow {
    build: String,
    round: usize,
    replication_factor: u16,
    partitions: u32,
    producers: usize,
    /// `own`, or `current` when the build's corelog-bench has no
    /// `--schedule` and this one drove its brokers.
    load_generator: &'static str,
    capacity: u64,
    probes: Vec<overload::Probe>,
    #[serde(flatten)]
    figures: overload::Overload,
    /// Over the whole overload run (all three steps).
    broker_cpu_us_per_record: f64,
    client_cpu_us_per_record: f64,
    seconds: f64,
}

/// A build under test.
#[derive(Clone, Debug, Serialize)]
struct Build {
    name: String,
    dir: PathBuf,
    /// Whether its corelog-bench takes `--keys`.
    #[serde(skip)]
    has_keys: bool,
}

/// One measured phase of one cell.
#[derive(Clone, Debug, Serialize)]
struct Row {
    build: String,
    round: usize,
    replication_factor: u16,
    partitions: u32,
    producers: usize,
    phase: &'static str,
    keys: u64,
    target_records_per_second: u64,
    records_per_second: f64,
    /// Achieved over target.
    achieved: f64,
    errors: u64,
    /// The first failed record's error, as the producer reported it.
    first_error: Option<String>,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    broker_cpu_us_per_record: f64,
    client_cpu_us_per_record: f64,
    fsyncs_per_second: f64,
    fsyncs_per_second_per_shard: f64,
    replication_rpcs_per_second: f64,
    written_per_appended: f64,
    seconds: f64,
}

/// What the brokers had done by one instant.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    cpu_ticks: u64,
    written_bytes: u64,
    fsyncs: f64,
    pushes: f64,
    appended_bytes: f64,
    shards: usize,
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, before: Counters) -> Counters {
        Counters {
            cpu_ticks: self.cpu_ticks.saturating_sub(before.cpu_ticks),
            written_bytes: self.written_bytes.saturating_sub(before.written_bytes),
            fsyncs: self.fsyncs - before.fsyncs,
            pushes: self.pushes - before.pushes,
            appended_bytes: self.appended_bytes - before.appended_bytes,
            shards: self.shards,
        }
    }
}

/// The topic every cell produces to.
const TOPIC: &str = "matrix";

/// `--config` arguments that keep a topic of `partitions` x `rf` replicas
/// within `retain_bytes` on disk (segments of a quarter of a partition's
/// share, at least 1 MiB, the broker's least).
fn retention_configs(retain_bytes: u64, partitions: u32, rf: u16) -> Vec<String> {
    let per_partition =
        (retain_bytes / (u64::from(partitions) * u64::from(rf)).max(1)).max(4 << 20);
    let segment = (per_partition / 4).max(1 << 20);
    vec![
        "--config".to_owned(),
        format!("retention.bytes={per_partition}"),
        "--config".to_owned(),
        format!("segment.bytes={segment}"),
    ]
}

/// `/proc/<pid>/stat` counts CPU time in USER_HZ ticks, 100 per second on
/// Linux.
const TICKS_PER_SECOND: f64 = 100.0;

pub fn run(args: &MatrixArgs) -> Result<(), String> {
    let builds = builds(args)?;
    let mut rows = Vec::new();
    let mut overloads: Vec<OverloadRow> = Vec::new();
    let mut failures = Vec::new();
    for round in 1..=args.rounds.max(1) {
        for &rf in &args.replication_factors {
            if rf != 1 && rf != 3 {
                return Err(format!("--replication-factors takes 1 and 3, not {rf}"));
            }
            for &partitions in &args.partitions {
                for &producers in &args.producers {
                    for offset in 0..builds.len() {
                        let build = &builds[(offset + round - 1) % builds.len()];
                        let cell = Cell {
                            build,
                            round,
                            rf,
                            partitions,
                            producers,
                        };
                        // A failed cell (a broker died, a phase printed no
                        // report) is reported and the matrix goes on.
                        match run_cell(args, &cell) {
                            Ok((measured, overload)) => {
                                for row in &measured {
                                    print_row(row, rows.is_empty());
                                    rows.push(row.clone());
                                }
                                if let Some(overload) = overload {
                                    print_overload(&overload, overloads.is_empty());
                                    overloads.push(overload);
                                }
                            }
                            Err(error) => {
                                eprintln!("matrix: cell failed: {error}");
                                failures.push(Failure {
                                    build: build.name.clone(),
                                    round,
                                    replication_factor: rf,
                                    partitions,
                                    producers,
                                    error,
                                });
                            }
                        }
                        write_json(args, &builds, &rows, &overloads, &failures)?;
                    }
                }
            }
        }
    }
    println!("\nJSON report: {}", args.json_out.display());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of the matrix's cells failed (see \"failures\" in the report)",
            failures.len()
        ))
    }
}

/// A cell that could not be measured.
#[derive(Clone, Debug, Serialize)]
struct Failure {
    build: String,
    round: usize,
    replication_factor: u16,
    partitions: u32,
    producers: usize,
    error: String,
}

fn builds(args: &MatrixArgs) -> Result<Vec<Build>, String> {
    let mut specs: Vec<(String, PathBuf)> = Vec::new();
    for spec in &args.builds {
        let (name, dir) = spec
            .split_once('=')
            .ok_or_else(|| format!("--build takes NAME=DIR, not {spec:?}"))?;
        specs.push((name.to_owned(), PathBuf::from(dir)));
    }
    if specs.is_empty() {
        let exe = std::env::current_exe().map_err(|error| error.to_string())?;
        let dir = exe
            .parent()
            .ok_or("corelog-bench has no directory")?
            .to_path_buf();
        specs.push(("current".to_owned(), dir));
    }
    specs
        .into_iter()
        .map(|(name, dir)| {
            for binary in ["corelogd", "corelog", "corelog-bench"] {
                if !dir.join(binary).is_file() {
                    return Err(format!(
                        "build {name}: {} has no {binary}; build it with `cargo build --release`",
                        dir.display()
                    ));
                }
            }
            let help = Command::new(dir.join("corelog-bench"))
                .args(["produce", "--help"])
                .output()
                .map_err(|error| format!("build {name}: cannot run corelog-bench: {error}"))?;
            let has_keys = String::from_utf8_lossy(&help.stdout).contains("--keys");
            Ok(Build {
                name,
                dir,
                has_keys,
            })
        })
        .collect()
}

struct Cell<'a> {
    build: &'a Build,
    round: usize,
    rf: u16,
    partitions: u32,
    producers: usize,
}

/// A running local cluster, stopped on drop.
struct Cluster<'a> {
    args: &'a MatrixArgs,
    build: &'a Build,
    dir: tempfile::TempDir,
    brokers: u16,
    shards: u16,
    /// Keep the brokers' logs and data when stopped (the cell failed).
    keep_files: std::cell::Cell<bool>,
}

impl<'a> Cluster<'a> {
    fn up(args: &'a MatrixArgs, build: &'a Build, rf: u16) -> Result<Cluster<'a>, String> {
        let dir = tempfile::Builder::new()
            .prefix("corelog-matrix.")
            .tempdir_in(&args.work_dir)
            .map_err(|error| {
                format!("cannot create a directory in {:?}: {error}", args.work_dir)
            })?;
        let (brokers, shards) = if rf == 1 {
            (1, args.rf1_shards)
        } else {
            (3, 1)
        };
        let cluster = Cluster {
            args,
            build,
            dir,
            brokers,
            shards,
            keep_files: std::cell::Cell::new(false),
        };
        cluster.script(&["up", &brokers.to_string()])?;
        Ok(cluster)
    }

    fn script(&self, arguments: &[&str]) -> Result<(), String> {
        let output = Command::new(&self.args.cluster_script)
            .args(arguments)
            .env("CLUSTER_DIR", self.dir.path())
            .env("BASE_PORT", self.args.base_port.to_string())
            .env("SHARDS", self.shards.to_string())
            .env("NO_BUILD", "1")
            .env("CORELOGD", self.build.dir.join("corelogd"))
            .env("CORELOG", self.build.dir.join("corelog"))
            .output()
            .map_err(|error| format!("cannot run {:?}: {error}", self.args.cluster_script))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{:?} {}: {}{}",
                self.args.cluster_script,
                arguments.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.args.base_port + 1)
    }

    fn pids(&self) -> Result<Vec<u32>, String> {
        (1..=self.brokers)
            .map(|i| {
                let file = self.dir.path().join(format!("node-{i}/pid"));
                std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|text| text.trim().parse().ok())
                    .ok_or_else(|| format!("no broker pid in {}", file.display()))
            })
            .collect()
    }

    /// Waits until no follower lags (`corelog_replica_lag_records`,
    /// summed over the brokers, 0 in two reads in a row), at most
    /// [`CATCH_UP_MAX`]; returns how long that took, `None` if it never
    /// did.
    fn wait_caught_up(&self) -> Result<Option<Duration>, String> {
        let started = Instant::now();
        let mut quiet_reads = 0;
        while started.elapsed() < CATCH_UP_MAX {
            let mut lag = 0.0;
            for i in 1..=self.brokers {
                let text = scrape(self.args.base_port + 100 + i)?;
                lag += metric_sum(&text, "corelog_replica_lag_records", "");
            }
            quiet_reads = if lag == 0.0 { quiet_reads + 1 } else { 0 };
            if quiet_reads == 2 {
                return Ok(Some(started.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(None)
    }

    fn counters(&self) -> Result<Counters, String> {
        let mut counters = Counters::default();
        for (index, pid) in self.pids()?.into_iter().enumerate() {
            let gone = |error: String| {
                format!(
                    "broker {} (pid {pid}) is gone ({error}); its log is {}",
                    index + 1,
                    self.dir
                        .path()
                        .join(format!("node-{}/log", index + 1))
                        .display()
                )
            };
            counters.cpu_ticks += cpu_ticks(&format!("/proc/{pid}/stat")).map_err(gone)?;
            counters.written_bytes += written_bytes(pid).map_err(gone)?;
        }
        for i in 1..=self.brokers {
            let text = scrape(self.args.base_port + 100 + i)?;
            counters.fsyncs += metric_sum(&text, "corelog_fsync_latency_seconds_count", "");
            for api in ["ReplicaPush", "ReplicaStream"] {
                let label = format!("api=\"{api}\"");
                counters.pushes += metric_sum(&text, "corelog_requests_total", &label);
            }
            counters.appended_bytes += metric_sum(&text, "corelog_bytes_in_total", "");
            counters.shards += metric_series(&text, "corelog_fsync_latency_seconds_count");
        }
        Ok(counters)
    }
}

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        if let Err(error) = self.script(&["down"]) {
            eprintln!("matrix: stopping the cluster: {error}");
        }
        if self.keep_files.get() {
            let kept = std::mem::replace(
                &mut self.dir,
                match tempfile::tempdir() {
                    Ok(empty) => empty,
                    Err(_) => return,
                },
            );
            eprintln!(
                "matrix: the failed cell's brokers, logs included, are kept in {}",
                kept.keep().display()
            );
        }
    }
}

fn run_cell(args: &MatrixArgs, cell: &Cell<'_>) -> Result<(Vec<Row>, Option<OverloadRow>), String> {
    eprintln!(
        "matrix: round {} build {}: RF {}, {} partitions, {} producers",
        cell.round, cell.build.name, cell.rf, cell.partitions, cell.producers
    );
    let cluster = Cluster::up(args, cell.build, cell.rf)?;
    let measured = measure_cell(args, cell, &cluster).and_then(|rows| {
        let overload = if args.overload {
            Some(measure_overload(args, cell, &cluster)?)
        } else {
            None
        };
        Ok((rows, overload))
    });
    cluster.keep_files.set(measured.is_err());
    drop(cluster);
    std::thread::sleep(Duration::from_secs(args.settle_seconds));
    measured
}

/// The measurements around one run of a load generator.
struct Run {
    report: Value,
    seconds: f64,
    client_cpu_seconds: f64,
    delta: Counters,
}

/// Runs `bench produce` against the cell's topic with `extra` arguments.
fn produce_run(
    args: &MatrixArgs,
    cell: &Cell<'_>,
    cluster: &Cluster<'_>,
    bench: &Path,
    extra: &[String],
) -> Result<Run, String> {
    let before = cluster.counters()?;
    let client_before = children_cpu_seconds();
    let started = Instant::now();
    let mut produce = Command::new(bench);
    produce
        .args(["produce", "--json", "--bootstrap", &cluster.bootstrap()])
        .args(["--topic", TOPIC, "--acks", "quorum"])
        .args(["--producers", &cell.producers.to_string()])
        .args(["--record-bytes", &args.record_bytes.to_string()])
        .args(extra);
    if cell.build.has_keys {
        produce.args(["--keys", &args.keys.to_string()]);
    }
    let output = produce
        .output()
        .map_err(|error| format!("cannot run corelog-bench produce: {error}"))?;
    let seconds = started.elapsed().as_secs_f64();
    let client_cpu_seconds = children_cpu_seconds() - client_before;
    let delta = cluster.counters()? - before;
    let report: Value = serde_json::from_slice(&output.stdout).map_err(|error| {
        format!(
            "corelog-bench produce printed no report ({error}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok(Run {
        report,
        seconds,
        client_cpu_seconds,
        delta,
    })
}

/// Longest wait for followers to catch up before a capacity probe or the
/// overload run.
const CATCH_UP_MAX: Duration = Duration::from_secs(120);

/// Lets the followers catch up with what the last run left them (see
/// `overload`), and says so when it took a while.
fn settle(cluster: &Cluster<'_>) -> Result<(), String> {
    match cluster.wait_caught_up()? {
        Some(took) if took >= Duration::from_secs(2) => {
            eprintln!("matrix: followers caught up in {:.0} s", took.as_secs_f64());
        }
        Some(_) => {}
        None => eprintln!(
            "matrix: followers still behind after {} s; probing anyway",
            CATCH_UP_MAX.as_secs()
        ),
    }
    Ok(())
}

/// The overload phase of one cell (see `overload`).
fn measure_overload(
    args: &MatrixArgs,
    cell: &Cell<'_>,
    cluster: &Cluster<'_>,
) -> Result<OverloadRow, String> {
    let own = cell.build.dir.join("corelog-bench");
    let mut probes = Vec::new();
    while let Some(rate) = overload::next_probe(args.rate, &probes) {
        settle(cluster)?;
        let extra = [
            "--rate".to_owned(),
            rate.to_string(),
            "--duration".to_owned(),
            args.probe_seconds.to_string(),
        ];
        let run = produce_run(args, cell, cluster, &own, &extra)?;
        let probe = overload::Probe::of(rate, &run.report);
        eprintln!(
            "matrix: capacity probe {rate}/s: {:.1}% achieved, p99 {:.0} ms, {} errors: {}",
            probe.achieved * 100.0,
            probe.p99_ms,
            probe.errors,
            if probe.passed { "pass" } else { "fail" }
        );
        probes.push(probe);
    }
    let capacity = overload::capacity(&probes);
    if capacity == 0 {
        return Err(format!(
            "no capacity probe passed down to {}/s",
            probes.last().map_or(0, |p| p.rate)
        ));
    }
    let (bench, load_generator) = overload::load_generator(&cell.build.dir)?;
    settle(cluster)?;
    let extra = [
        "--schedule".to_owned(),
        overload::schedule(capacity, args.overload_seconds),
        "--shed".to_owned(),
        "--buffer-bytes".to_owned(),
        args.overload_buffer_bytes.to_string(),
    ];
    let run = produce_run(args, cell, cluster, &bench, &extra)?;
    let acknowledged = run
        .report
        .get("acknowledged")
        .and_then(Value::as_f64)
        .unwrap_or(f64::NAN);
    let per_record = |seconds: f64| seconds * 1e6 / acknowledged;
    Ok(OverloadRow {
        seconds: run.seconds,
        build: cell.build.name.clone(),
        round: cell.round,
        replication_factor: cell.rf,
        partitions: cell.partitions,
        producers: cell.producers,
        load_generator,
        capacity,
        probes,
        figures: overload::Overload::of(&run.report, capacity, args.overload_seconds),
        broker_cpu_us_per_record: per_record(run.delta.cpu_ticks as f64 / TICKS_PER_SECOND),
        client_cpu_us_per_record: per_record(run.client_cpu_seconds),
    })
}

fn print_overload(row: &OverloadRow, header: bool) {
    if header {
        println!(
            "\n{:<10} {:>2} {:>5} {:>4} {:>9} {:>8} {:>8} {:>8} {:>10} {:>11} {:>9} {:>7} {:>7}  load generator",
            "overload",
            "RF",
            "parts",
            "prod",
            "capacity",
            "goodput",
            "failed",
            "shed",
            "p99 unld",
            "p99 overld",
            "recovery",
            "brk µs",
            "cli µs",
        );
    }
    let figures = &row.figures;
    println!(
        "{:<10} {:>2} {:>5} {:>4} {:>9} {:>7.1}% {:>8} {:>8} {:>8.1}ms {:>9.1}ms {:>9} {:>7.2} {:>7.2}  {}",
        row.build,
        row.replication_factor,
        row.partitions,
        row.producers,
        row.capacity,
        figures.goodput_fraction * 100.0,
        figures.failed,
        figures.shed,
        figures.unloaded_p99_ms,
        figures.overload_p99_ms,
        figures
            .recovery_seconds
            .map_or_else(|| "not back".to_owned(), |seconds| format!("{seconds} s")),
        row.broker_cpu_us_per_record,
        row.client_cpu_us_per_record,
        row.load_generator
    );
    if let Some(error) = &figures.first_error {
        println!("  first failed record: {error}");
    }
}

/// Waits until every broker of the cell describes `topic`.
fn wait_for_topic(cell: &Cell<'_>, cluster: &Cluster<'_>, topic: &str) -> Result<(), String> {
    const PATIENCE: Duration = Duration::from_secs(120);
    let deadline = Instant::now() + PATIENCE;
    for broker in 1..=cluster.brokers {
        let addr = format!("127.0.0.1:{}", cluster.args.base_port + broker);
        loop {
            let described = Command::new(cell.build.dir.join("corelog"))
                .args(["--bootstrap", &addr, "topic", "describe", topic])
                .output()
                .map_err(|error| format!("cannot run corelog: {error}"))?;
            if described.status.success() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "broker {broker} does not serve topic {topic} {PATIENCE:?} later: {}",
                    String::from_utf8_lossy(&described.stderr)
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    Ok(())
}

fn measure_cell(
    args: &MatrixArgs,
    cell: &Cell<'_>,
    cluster: &Cluster<'_>,
) -> Result<Vec<Row>, String> {
    let topic = TOPIC;
    let created = Command::new(cell.build.dir.join("corelog"))
        .args([
            "--bootstrap",
            &cluster.bootstrap(),
            "topic",
            "create",
            topic,
        ])
        .args(["--partitions", &cell.partitions.to_string()])
        .args(["--replication-factor", &cell.rf.to_string()])
        .args(retention_configs(
            args.retain_bytes,
            cell.partitions,
            cell.rf,
        ))
        .output()
        .map_err(|error| format!("cannot run corelog: {error}"))?;
    // A creation of a thousand replicated partitions may outlast the
    // request's timeout and still apply; what counts is that every broker
    // serves the topic before the producers start.
    if let Err(missing) = wait_for_topic(cell, cluster, topic) {
        let refused = String::from_utf8_lossy(&created.stderr);
        return Err(format!("topic create: {refused}{missing}"));
    }
    let mut phases = vec![("sustained", args.rate, args.duration)];
    if args.peak_rate > 0 {
        phases.push(("peak", args.peak_rate, args.peak_duration));
    }
    let mut rows = Vec::new();
    let own = cell.build.dir.join("corelog-bench");
    for (phase, rate, duration) in phases {
        let extra = [
            "--rate".to_owned(),
            rate.to_string(),
            "--duration".to_owned(),
            duration.to_string(),
        ];
        let run = produce_run(args, cell, cluster, &own, &extra)?;
        rows.push(row(
            cell,
            phase,
            rate,
            args,
            &run.report,
            run.delta,
            run.client_cpu_seconds,
            run.seconds,
        ));
    }
    Ok(rows)
}

#[allow(clippy::too_many_arguments)]
fn row(
    cell: &Cell<'_>,
    phase: &'static str,
    rate: u64,
    args: &MatrixArgs,
    report: &Value,
    delta: Counters,
    client_cpu_seconds: f64,
    seconds: f64,
) -> Row {
    let number = |path: &[&str]| number_at(report, path);
    let acknowledged = number(&["acknowledged"]);
    let per_record = |seconds: f64| seconds * 1e6 / acknowledged;
    let latency_ms = |key: &str| number(&["append_latency", key]) / 1000.0;
    let records_per_second = number(&["records_per_second"]);
    Row {
        build: cell.build.name.clone(),
        round: cell.round,
        replication_factor: cell.rf,
        partitions: cell.partitions,
        producers: cell.producers,
        phase,
        keys: if cell.build.has_keys { args.keys } else { 1024 },
        target_records_per_second: rate,
        records_per_second,
        achieved: records_per_second / rate as f64,
        errors: number(&["errors"]) as u64,
        first_error: report
            .get("first_error")
            .and_then(Value::as_str)
            .map(str::to_owned),
        p50_ms: latency_ms("p50_us"),
        p95_ms: latency_ms("p95_us"),
        p99_ms: latency_ms("p99_us"),
        p999_ms: latency_ms("p999_us"),
        broker_cpu_us_per_record: per_record(delta.cpu_ticks as f64 / TICKS_PER_SECOND),
        client_cpu_us_per_record: per_record(client_cpu_seconds),
        fsyncs_per_second: delta.fsyncs / seconds,
        fsyncs_per_second_per_shard: delta.fsyncs / seconds / delta.shards.max(1) as f64,
        replication_rpcs_per_second: delta.pushes / seconds,
        written_per_appended: delta.written_bytes as f64
            / (delta.appended_bytes * f64::from(cell.rf)),
        seconds,
    }
}

fn print_row(row: &Row, header: bool) {
    if header {
        println!(
            "\n{:<10} {:>2} {:>5} {:>4} {:<9} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>8} {:>8} {:>8} {:>6}",
            "build",
            "RF",
            "parts",
            "prod",
            "phase",
            "rec/s",
            "achv",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "p99.9",
            "brk µs",
            "cli µs",
            "fsync/s",
            "/shard",
            "repl/s",
            "w/a"
        );
    }
    println!(
        "{:<10} {:>2} {:>5} {:>4} {:<9} {:>9.0} {:>5.1}% {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>7.2} {:>7.2} {:>8.0} {:>8.0} {:>8.0} {:>6.2}{}",
        row.build,
        row.replication_factor,
        row.partitions,
        row.producers,
        row.phase,
        row.records_per_second,
        row.achieved * 100.0,
        row.p50_ms,
        row.p95_ms,
        row.p99_ms,
        row.p999_ms,
        row.broker_cpu_us_per_record,
        row.client_cpu_us_per_record,
        row.fsyncs_per_second,
        row.fsyncs_per_second_per_shard,
        row.replication_rpcs_per_second,
        row.written_per_appended,
        if row.errors > 0 {
            format!(
                "  {} errors, first: {}",
                row.errors,
                row.first_error.as_deref().unwrap_or("not reported")
            )
        } else {
            String::new()
        }
    );
}

fn write_json(
    args: &MatrixArgs,
    builds: &[Build],
    rows: &[Row],
    overloads: &[OverloadRow],
    failures: &[Failure],
) -> Result<(), String> {
    #[derive(Serialize)]
    struct Report<'a> {
        builds: &'a [Build],
        rate: u64,
        duration_seconds: u64,
        peak_rate: u64,
        peak_duration_seconds: u64,
        record_bytes: usize,
        rows: &'a [Row],
        overloads: &'a [OverloadRow],
        failures: &'a [Failure],
    }
    let report = Report {
        builds,
        rate: args.rate,
        duration_seconds: args.duration,
        peak_rate: args.peak_rate,
        peak_duration_seconds: args.peak_duration,
        record_bytes: args.record_bytes,
        rows,
        overloads,
        failures,
    };
    let text = serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?;
    if let Some(parent) = args.json_out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|error| error.to_string())?;
    }
    std::fs::write(&args.json_out, text)
        .map_err(|error| format!("cannot write {}: {error}", args.json_out.display()))
}

/// User plus system ticks of the process whose `stat` file is `path`.
fn cpu_ticks(path: &str) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("{path}: {error}"))?;
    stat_cpu_ticks(&text).ok_or_else(|| format!("{path}: unexpected format"))
}

/// Fields 14 and 15 (utime, stime) of a `/proc/<pid>/stat` line, summed.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    stat_fields(stat, 11, 2)
}

/// The sum of `count` numeric fields of a `/proc/<pid>/stat` line, from the
/// `skip`-th after the command name (field 2, which may hold spaces: fields
/// count from its closing parenthesis, field 3 being the 0th).
fn stat_fields(stat: &str, skip: usize, count: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(skip)
        .take(count)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    (fields.len() == count).then(|| fields.iter().sum())
}

fn written_bytes(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/io");
    let text = std::fs::read_to_string(&path).map_err(|error| format!("{path}: {error}"))?;
    text.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("{path}: no write_bytes"))
}

/// CPU seconds of this process's waited-for children: cutime and cstime
/// of `/proc/self/stat` (NaN if it cannot be read).
fn children_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| stat_fields(&stat, 13, 2))
        .map_or(f64::NAN, |ticks| ticks as f64 / TICKS_PER_SECOND)
}

/// The `/metrics` text of the broker whose metrics listen on `port`.
fn scrape(port: u16) -> Result<String, String> {
    let failed = |error: std::io::Error| format!("metrics on port {port}: {error}");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(failed)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(failed)?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .map_err(failed)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(failed)?;
    Ok(text)
}

/// The sum of every sample of `name` whose labels contain `label`.
fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    samples(text, name)
        .filter(|(labels, _)| labels.contains(label))
        .map(|(_, value)| value)
        .sum()
}

/// How many label sets `name` has (one per shard for per-shard metrics).
fn metric_series(text: &str, name: &str) -> usize {
    samples(text, name)
        .map(|(labels, _)| labels)
        .collect::<BTreeSet<_>>()
        .len()
}

/// `(labels, value)` of every sample of `name`.
fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once('}')?,
            None if rest.starts_with(' ') => ("", rest),
            None => return None,
        };
        Some((labels, value.split_whitespace().next()?.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# HELP corelog_requests_total Requests handled, by API\n\
        corelog_requests_total{shard=\"0\",api=\"Produce\"} 10\n\
        corelog_requests_total{shard=\"0\",api=\"ReplicaPush\"} 7\n\
        corelog_requests_total{shard=\"1\",api=\"ReplicaPush\"} 5\n\
        corelog_fsync_latency_seconds_count{shard=\"0\"} 3\n\
        corelog_fsync_latency_seconds_count{shard=\"1\"} 4\n\
        corelog_fsync_latency_seconds_count_extra{shard=\"1\"} 100\n\
        corelog_up 1\n";

    #[test]
    fn metric_samples_are_summed_by_name_and_label() {
        assert_eq!(
            metric_sum(METRICS, "corelog_requests_total", "api=\"ReplicaPush\""),
            12.0
        );
        assert_eq!(metric_sum(METRICS, "corelog_requests_total", ""), 22.0);
        assert_eq!(
            metric_sum(METRICS, "corelog_fsync_latency_seconds_count", ""),
            7.0
        );
        assert_eq!(
            metric_series(METRICS, "corelog_fsync_latency_seconds_count"),
            2
        );
        assert_eq!(metric_sum(METRICS, "corelog_up", ""), 1.0);
        assert_eq!(metric_sum(METRICS, "corelog_missing", ""), 0.0);
    }

    #[test]
    fn a_cells_topic_is_kept_within_the_disk_budget() {
        assert_eq!(
            retention_configs(16 << 30, 256, 3),
            [
                "--config",
                "retention.bytes=22369621",
                "--config",
                "segment.bytes=5592405"
            ]
        );
        // Never below a few segments of the broker's least size.
        assert_eq!(
            retention_configs(1 << 20, 1024, 3)[1],
            format!("retention.bytes={}", 4 << 20)
        );
    }

    #[test]
    fn cpu_ticks_are_read_past_a_command_name_with_spaces() {
        let stat = "1234 (corelog d) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(stat_cpu_ticks(stat), Some(300));
        assert_eq!(stat_fields(stat, 13, 2), Some(0));
        assert_eq!(stat_cpu_ticks("garbage"), None);
        assert_eq!(stat_cpu_ticks("1 (x) S 1 2"), None);
    }
}
