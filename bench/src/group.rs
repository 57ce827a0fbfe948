//! `group` mode: N consumers in one group read a topic while producers
//! write at a rate. Reports
//!
//! - consumption throughput (records/s and MB/s);
//! - catch-up: with a backlog of M records produced first, the consume
//!   rate, the arrival rate, the net catch-up rate (consume − arrival) and
//!   the projected time to catch up (backlog / net), next to the measured
//!   time until the group's lag reached zero. The seed's example (§04): a
//!   60M backlog consumed at 150k/s while 100k/s arrive catches up at
//!   50k/s, in 1,200 s; at a consume rate equal to the arrival rate it
//!   never does;
//! - the rebalance pause when one consumer leaves: from its leaving until
//!   every partition has delivered a record again. Partitions that stay
//!   with their owner are never paused (cooperative assignment), so the
//!   pause is the time to move the leaver's partitions.
//!
//! Offsets are committed by the consumers' auto-commit (every second), as
//! a production consumer would, so the coordinator's commit load is part
//! of the measurement.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use corelog_client::group::{GroupConfig, GroupConsumer};
use corelog_client::{Admin, Producer, ProducerConfig, ProducerRecord};
use serde::Serialize;
use tokio::sync::watch;

use crate::in_flight::InFlight;
use crate::load::{LoadArgs, ProduceReport, ensure_topic, print_produce, run_producers};

#[derive(Debug, Args)]
pub struct GroupArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Consumers in the group.
    #[arg(long, default_value_t = 4)]
    consumers: usize,
    /// Group id; default a new group per run (`bench-<ms>`), so that it
    /// starts at the log start and the backlog is what the log holds.
    #[arg(long)]
    group: Option<String>,
    /// Records produced before the consumers start: the backlog to catch
    /// up with.
    #[arg(long, default_value_t = 0)]
    backlog: u64,
    /// Seconds after the start of consumption when one consumer leaves;
    /// default half the duration. 0 keeps every consumer.
    #[arg(long)]
    leave_after: Option<u64>,
}

/// The figures of one run.
#[derive(Debug, Serialize)]
struct GroupReport {
    consumers: usize,
    partitions: u32,
    record_bytes: usize,
    backlog_records: u64,
    /// Producers while the group consumes.
    produce: ProduceReport,
    consumed_records: u64,
    consume_seconds: f64,
    consume_records_per_second: f64,
    consume_megabytes_per_second: f64,
    /// Consumption rate while the group was behind (the whole run if it
    /// never caught up).
    catch_up_consume_records_per_second: f64,
    /// Acknowledged appends per second while consuming.
    arrival_records_per_second: f64,
    /// Consume rate minus arrival rate while behind.
    net_catch_up_records_per_second: f64,
    /// Backlog divided by the net rate; `None` when the net rate is not
    /// positive: the group never catches up.
    projected_catch_up_seconds: Option<f64>,
    /// When the lag first reached zero, from the start of consumption.
    caught_up_after_seconds: Option<f64>,
    /// Seconds into consumption when one consumer left.
    left_at_seconds: Option<f64>,
    /// From the leave until every partition delivered again, ms.
    rebalance_pause_ms: Option<f64>,
}

/// Counters shared by the consumer tasks.
struct Tally {
    start: Instant,
    consumed: AtomicU64,
    bytes: AtomicU64,
    /// Micros since `start` when one consumer left; 0 before.
    left_at_us: AtomicU64,
    /// Per partition: micros since `start` of its first delivery after the
    /// leave; 0 before.
    first_after_leave_us: Vec<AtomicU64>,
    /// Per partition: one past the highest offset delivered.
    positions: Vec<AtomicU64>,
    done: AtomicBool,
}

impl Tally {
    fn micros(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

pub fn run(args: &GroupArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| error.to_string())?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &GroupArgs) -> Result<(), String> {
    if args.consumers == 0 {
        return Err("--consumers must be at least 1".to_owned());
    }
    ensure_topic(&args.load).await?;
    if args.backlog > 0 {
        produce_backlog(&args.load, args.backlog).await?;
    }
    let partitions = args.load.partitions;
    let tally = Arc::new(Tally {
        start: Instant::now(),
        consumed: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        left_at_us: AtomicU64::new(0),
        first_after_leave_us: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
        positions: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
        done: AtomicBool::new(false),
    });
    let group = args.group.clone().unwrap_or_else(|| {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis());
        format!("bench-{millis}")
    });
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for index in 0..args.consumers {
        let consumer = GroupConsumer::connect(group_config(args, &group, index)?)
            .await
            .map_err(|error| format!("consumer {index} cannot join: {error}"))?;
        let (stop, stopped) = watch::channel(false);
        stops.push(stop);
        tasks.push(tokio::spawn(consume(consumer, Arc::clone(&tally), stopped)));
    }
    let consume_start = Instant::now();
    let leave_after = args
        .leave_after
        .unwrap_or(args.load.duration / 2)
        .min(args.load.duration);
    let leaver = (args.consumers > 1 && leave_after > 0).then(|| {
        let stop = stops.remove(0);
        let tally = Arc::clone(&tally);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(leave_after)).await;
            tally.left_at_us.store(tally.micros(), Ordering::SeqCst);
            stop.send_replace(true);
        })
    });
    let admin = Admin::connect(args.load.client_config()?)
        .await
        .map_err(|error| error.to_string())?;
    let sampler = tokio::spawn(sample_catch_up(
        admin,
        args.load.topic.clone(),
        Arc::clone(&tally),
        args.load.json,
    ));
    let produce = run_producers(&args.load, "group", None).await?;
    tally.done.store(true, Ordering::SeqCst);
    let consume_seconds = consume_start.elapsed().as_secs_f64();
    let catch_up = sampler.await.map_err(|error| error.to_string())??;
    if let Some(leaver) = leaver {
        leaver.await.map_err(|error| error.to_string())?;
    }
    for stop in &stops {
        stop.send_replace(true);
    }
    for task in tasks {
        task.await.map_err(|error| error.to_string())??;
    }

    let consumed = tally.consumed.load(Ordering::SeqCst);
    let bytes = tally.bytes.load(Ordering::SeqCst);
    let catch_up_rate = catch_up.behind_consumed as f64 / catch_up.behind_seconds.max(1e-9);
    let arrival = produce.records_per_second;
    let net = catch_up_rate - arrival;
    let left_at = tally.left_at_us.load(Ordering::SeqCst);
    let report = GroupReport {
        consumers: args.consumers,
        partitions,
        record_bytes: args.load.record_bytes,
        backlog_records: catch_up.backlog,
        consumed_records: consumed,
        consume_seconds,
        consume_records_per_second: consumed as f64 / consume_seconds,
        consume_megabytes_per_second: bytes as f64 / consume_seconds / 1e6,
        catch_up_consume_records_per_second: catch_up_rate,
        arrival_records_per_second: arrival,
        net_catch_up_records_per_second: net,
        projected_catch_up_seconds: (net > 0.0).then(|| catch_up.backlog as f64 / net),
        caught_up_after_seconds: catch_up.caught_up_after,
        left_at_seconds: (left_at > 0).then(|| left_at as f64 / 1e6),
        rebalance_pause_ms: rebalance_pause_ms(&tally),
        produce,
    };
    if args.load.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?
        );
    } else {
        print_report(&report);
    }
    Ok(())
}

fn group_config(args: &GroupArgs, group: &str, index: usize) -> Result<GroupConfig, String> {
    let mut config = GroupConfig::new(
        args.load.bootstrap.clone(),
        group,
        [args.load.topic.clone()],
    );
    config.client = args.load.client_config()?;
    config.client.client_name = format!("corelog-bench-{index}");
    config.auto_commit = true;
    config.fetch_max_wait = Duration::from_millis(100);
    config.session_timeout = Duration::from_secs(10);
    Ok(config)
}

/// One consumer: counts and completes every record until stopped, then
/// closes (commits and leaves).
async fn consume(
    mut consumer: GroupConsumer,
    tally: Arc<Tally>,
    mut stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    loop {
        let polled = tokio::select! {
            polled = consumer.poll() => polled.map_err(|error| error.to_string())?,
            _ = stopped.wait_for(|stop| *stop) => break,
        };
        let left = tally.left_at_us.load(Ordering::Relaxed) > 0;
        let now = tally.micros();
        let mut bytes = 0;
        for record in &polled.records {
            bytes += record.value.as_ref().map_or(0, Bytes::len) as u64;
            consumer.complete(record);
            if let Some(position) = tally.positions.get(record.partition as usize) {
                position.fetch_max(record.offset.0 + 1, Ordering::Relaxed);
            }
            if left && let Some(first) = tally.first_after_leave_us.get(record.partition as usize) {
                let _ = first.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
        tally
            .consumed
            .fetch_add(polled.records.len() as u64, Ordering::Relaxed);
        tally.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    consumer.close().await.map_err(|error| error.to_string())
}

/// What the lag sampler saw.
struct CatchUp {
    /// Records the group had to read when consumption started.
    backlog: u64,
    /// When the lag first reached zero, from the start of consumption.
    caught_up_after: Option<f64>,
    /// Records consumed, and seconds elapsed, while the group was behind.
    behind_consumed: u64,
    behind_seconds: f64,
}

/// The topic's high watermarks and log starts, per partition.
async fn watermarks(admin: &Admin, topic: &str) -> Result<Vec<(u64, u64)>, String> {
    let description = admin
        .describe_topic(topic)
        .await
        .map_err(|error| format!("cannot describe {topic}: {error}"))?;
    Ok(description
        .partition_states
        .iter()
        .map(|state| (state.log_start_offset, state.high_watermark))
        .collect())
}

/// Watches the group's lag — the sum over partitions of the high
/// watermark minus the highest offset delivered — every 100 ms until the
/// run ends. A fresh group starts at the log start, so the backlog is what
/// the log holds when consumption starts.
async fn sample_catch_up(
    admin: Admin,
    topic: String,
    tally: Arc<Tally>,
    quiet: bool,
) -> Result<CatchUp, String> {
    let start = Instant::now();
    let backlog = watermarks(&admin, &topic)
        .await?
        .iter()
        .map(|(log_start, high_watermark)| high_watermark - log_start)
        .sum();
    let mut caught_up_after = None;
    let mut behind = (0, 0.0);
    let mut last_print = Instant::now();
    while !tally.done.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let consumed = tally.consumed.load(Ordering::Relaxed);
        let seconds = start.elapsed().as_secs_f64();
        let lag: u64 = match watermarks(&admin, &topic).await {
            Ok(marks) => marks
                .iter()
                .zip(&tally.positions)
                .map(|((log_start, high_watermark), position)| {
                    let position = position.load(Ordering::Relaxed).max(*log_start);
                    high_watermark.saturating_sub(position)
                })
                .sum(),
            Err(_) => u64::MAX,
        };
        if caught_up_after.is_none() {
            behind = (consumed, seconds);
            if lag == 0 && backlog > 0 {
                caught_up_after = Some(seconds);
            }
        }
        if !quiet && last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            eprintln!(
                "[group {seconds:>3.0}s] consumed {consumed} records, lag {lag}{}",
                caught_up_after.map_or(String::new(), |at| format!(", caught up after {at:.1} s"))
            );
        }
    }
    if caught_up_after.is_none() {
        behind = (
            tally.consumed.load(Ordering::Relaxed),
            start.elapsed().as_secs_f64(),
        );
    }
    Ok(CatchUp {
        backlog,
        caught_up_after,
        behind_consumed: behind.0,
        behind_seconds: behind.1,
    })
}

/// From the leave to the last partition's first delivery after it.
fn rebalance_pause_ms(tally: &Tally) -> Option<f64> {
    let left = tally.left_at_us.load(Ordering::SeqCst);
    if left == 0 {
        return None;
    }
    let mut latest = 0;
    for first in &tally.first_after_leave_us {
        let first = first.load(Ordering::SeqCst);
        if first == 0 {
            // A partition never delivered again (or had nothing to
            // deliver): no finite pause can be claimed.
            return None;
        }
        latest = latest.max(first);
    }
    Some(latest.saturating_sub(left) as f64 / 1e3)
}

/// Produces `count` records as fast as the producer's buffer allows.
async fn produce_backlog(load: &LoadArgs, count: u64) -> Result<(), String> {
    let producer = Producer::connect(ProducerConfig {
        batch_bytes: load.batch_bytes,
        buffer_bytes: (64 << 20).max(load.batch_bytes * 64),
        client: load.client_config()?,
        ..ProducerConfig::new(load.bootstrap.clone())
    })
    .await
    .map_err(|error| format!("producer cannot connect: {error}"))?;
    let start = Instant::now();
    let value = Bytes::from(vec![b'b'; load.record_bytes.max(8)]);
    let mut pending = InFlight::new();
    let mut failed = 0u64;
    for index in 0..count {
        let record = ProducerRecord::new(load.topic.clone(), value.clone())
            .key(format!("key-{}", index % 1024));
        let delivery = producer
            .send(record)
            .await
            .map_err(|error| error.to_string())?;
        pending.push(delivery);
        while let Some(done) = pending.completed() {
            failed += u64::from(done.is_err());
        }
    }
    while let Some(done) = pending.next().await {
        failed += u64::from(done.is_err());
    }
    producer.close().await.map_err(|error| error.to_string())?;
    if failed > 0 {
        return Err(format!("{failed} backlog records failed"));
    }
    if !load.json {
        eprintln!(
            "backlog: {count} records in {:.1} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn print_report(report: &GroupReport) {
    print_produce(
        &format!(
            "group: {} consumers, {} partitions, {} B records, backlog {}",
            report.consumers, report.partitions, report.record_bytes, report.backlog_records
        ),
        &report.produce,
    );
    println!(
        "  consumed {} records in {:.1} s: {:.0} records/s, {:.1} MB/s",
        report.consumed_records,
        report.consume_seconds,
        report.consume_records_per_second,
        report.consume_megabytes_per_second
    );
    if report.backlog_records > 0 {
        println!(
            "  catch-up: consume {:.0}/s - arrival {:.0}/s = net {:.0}/s",
            report.catch_up_consume_records_per_second,
            report.arrival_records_per_second,
            report.net_catch_up_records_per_second
        );
        match report.projected_catch_up_seconds {
            Some(seconds) => println!(
                "  projected: backlog {} / net {:.0}/s = {:.1} s ({:.1} min)",
                report.backlog_records,
                report.net_catch_up_records_per_second,
                seconds,
                seconds / 60.0
            ),
            None => println!("  projected: never (consumption does not outpace arrivals)"),
        }
        match report.caught_up_after_seconds {
            Some(seconds) => println!("  measured: caught up after {seconds:.1} s"),
            None => println!("  measured: not caught up within the run"),
        }
    }
    match (report.left_at_seconds, report.rebalance_pause_ms) {
        (Some(at), Some(pause)) => println!(
            "  one consumer left at {at:.1} s: every partition consumed again after {pause:.0} ms"
        ),
        (Some(at), None) => println!(
            "  one consumer left at {at:.1} s: not every partition delivered again (no arrivals?)"
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_example_projects_twenty_minutes() {
        // 60M backlog, 150k/s consumed, 100k/s arriving.
        let net: f64 = 150_000.0 - 100_000.0;
        let seconds = 60_000_000.0 / net;
        assert!((seconds - 1_200.0).abs() < 1e-9);
    }

    #[test]
    fn the_pause_is_the_last_partition_to_deliver_again() {
        let tally = Tally {
            start: Instant::now(),
            consumed: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            left_at_us: AtomicU64::new(1_000_000),
            first_after_leave_us: vec![AtomicU64::new(1_000_500), AtomicU64::new(1_250_000)],
            positions: Vec::new(),
            done: AtomicBool::new(false),
        };
        assert_eq!(rebalance_pause_ms(&tally), Some(250.0));
        tally.first_after_leave_us[0].store(0, Ordering::SeqCst);
        assert_eq!(rebalance_pause_ms(&tally), None);
    }
}
