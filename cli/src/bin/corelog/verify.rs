//! `corelog verify`: is anything acknowledged lost? Runs the workload of
//! [`corelog_cli::verify::workload`] against a live cluster while the
//! operator injects faults (restarts, kills, partitions, full disks), then
//! prints the checker's report; exit code 3 on any violation.

use std::time::Duration;

use clap::Args;
use corelog_cli::verify::workload::{self, Workload};
use corelog_cli::verify::{History, Report, check};
use corelog_client::ClientError;

use crate::Global;
use crate::time::parse_duration;

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Topic to write and read; created if absent. Use a fresh one per run:
    /// records that are not the workload's are reported.
    #[arg(long)]
    topic: Option<String>,
    /// How long to produce, e.g. 90s, 10m, 1h.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Records per second, over all producers.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Producer clients, each with its own connections.
    #[arg(long, default_value_t = 2)]
    producers: u32,
    /// Partitions of the topic when it is created.
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Replicas per partition when the topic is created; 0 for the
    /// cluster's default.
    #[arg(long, default_value_t = 0)]
    replication_factor: u16,
    /// Distinct keys.
    #[arg(long, default_value_t = 1000)]
    keys: u64,
    /// Payload bytes per record (after the 24-byte header).
    #[arg(long, default_value_t = 100)]
    payload_bytes: usize,
    /// Consumer group; default `<topic>-verifier`.
    #[arg(long)]
    group: Option<String>,
    /// After producing, how long the group and the final read may take to
    /// reach the end of every partition.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// Write the history, one JSON event per line, to this file.
    #[arg(long, value_name = "FILE")]
    history: Option<std::path::PathBuf>,
}

/// What `run` concluded.
pub(crate) enum Verdict {
    /// Every check passed.
    Clean,
    /// The checker found violations (the report says which).
    Violations(u64),
}

pub(crate) async fn run(global: &Global, args: VerifyArgs) -> Result<Verdict, ClientError> {
    let topic = args.topic.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        format!("verify-{now}")
    });
    let group = args
        .group
        .clone()
        .unwrap_or_else(|| format!("{topic}-verifier"));
    let partitions = workload::prepare_topic(
        &global.client,
        &topic,
        args.partitions,
        args.replication_factor,
    )
    .await?;
    eprintln!(
        "verify: topic {topic} ({partitions} partitions), group {group}, {} producers at {}/s for {}s",
        args.producers,
        args.rate,
        args.duration.as_secs()
    );
    let workload = Workload {
        client: global.client.clone(),
        topic,
        group,
        producers: args.producers,
        rate: args.rate,
        keys: args.keys,
        payload_bytes: args.payload_bytes,
        duration: args.duration,
        drain_timeout: args.drain_timeout,
        clock_origin: None,
    };
    let history = workload::run(&workload, partitions, |line| eprintln!("verify: {line}")).await?;
    if let Some(path) = &args.history {
        write_history(path, &history)?;
    }
    let report = check(&history);
    print_report(global, &report)?;
    let violations = report.violations();
    Ok(if violations == 0 {
        Verdict::Clean
    } else {
        Verdict::Violations(violations)
    })
}

fn write_history(path: &std::path::Path, history: &History) -> Result<(), ClientError> {
    let text = history.to_json_lines().map_err(|error| {
        ClientError::InvalidConfig(format!("cannot encode the history: {error}"))
    })?;
    std::fs::write(path, text).map_err(|error| {
        ClientError::InvalidConfig(format!("cannot write {}: {error}", path.display()))
    })
}

fn print_report(global: &Global, report: &Report) -> Result<(), ClientError> {
    if global.json {
        let json = report.to_json().map_err(|error| {
            ClientError::InvalidConfig(format!("cannot encode the report: {error}"))
        })?;
        println!("{json}");
    } else {
        println!("{report}");
    }
    Ok(())
}
