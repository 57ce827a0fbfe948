//! The storage benchmark: engine appends against raw durable writes.
//!
//! For each batch size the run measures, on one glommio shard and one disk:
//!
//! 1. raw: sequential aligned O_DIRECT writes of the batch size, each
//!    followed by fdatasync — the durable bandwidth a log could reach
//!    writing one batch per sync;
//! 2. engine: `PartitionLog::append` of pre-built batches of 1 KiB records
//!    with 1 and with N appends in flight (group commit merges the latter).
//!
//! Then a paced run appends at a target record rate on an open-loop
//! schedule, latency measured from each append's scheduled time so that a
//! stall is charged to every append it delayed.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clap::Args;
use corelog_storage::clock::SystemClock;
use corelog_storage::disk::{Disk, DiskFile};
use corelog_storage::glommio_disk::GlommioDisk;
use corelog_storage::{DiskSpace, LogConfig, NoObserver, PartitionLog, ShardStorage, TailCache};
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord};
use corelog_wire::types::{PartitionId, TimestampMs};
use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::report::{Latency, latency_histogram, millis};

#[derive(Debug, Args)]
pub struct StorageArgs {
    /// Directory on the disk to measure; a fresh subdirectory is used and removed.
    #[arg(long, default_value = "target/bench-data")]
    dir: PathBuf,
    /// Batch sizes in bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16384,65536,262144,1048576"
    )]
    batch_bytes: Vec<usize>,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
    /// Rounds per batch size; raw and engine runs alternate and the median
    /// round is reported, so that drift in the disk's speed hits both.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Appends in flight for the concurrent engine run.
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    /// Records per second for the paced run (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    rate_records: u64,
    /// Batch size in bytes for the paced run.
    #[arg(long, default_value_t = 16384)]
    rate_batch_bytes: usize,
    /// Seconds of the paced run.
    #[arg(long, default_value_t = 30)]
    rate_seconds: u64,
    /// Seconds to pause after deleting a case's data (deletes on a
    /// discard-mounted disk stall later syncs).
    #[arg(long, default_value_t = 3)]
    settle_seconds: u64,
    /// glommio registered I/O memory in bytes. Batches larger than what is
    /// left of it fall back to unregistered memory, which costs the engine
    /// and the raw baseline alike. Locking it needs root or a memlock limit
    /// of three times this value.
    #[arg(long, default_value_t = 16 << 20)]
    io_memory: usize,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Throughput {
    mode: String,
    batch_bytes: usize,
    in_flight: usize,
    appends: u64,
    records_per_second: f64,
    megabytes_per_second: f64,
    fsyncs: u64,
    bytes_per_fsync: u64,
    latency: Latency,
}

#[derive(Debug, Serialize)]
struct SizeCase {
    batch_bytes: usize,
    raw: Throughput,
    engine_serial: Throughput,
    engine_concurrent: Throughput,
    serial_ratio: f64,
    concurrent_ratio: f64,
}

#[derive(Debug, Serialize)]
struct PacedRun {
    target_records_per_second: u64,
    achieved_records_per_second: f64,
    batch_bytes: usize,
    appends: u64,
    errors: u64,
    latency: Latency,
}

#[derive(Debug, Serialize)]
struct Report {
    record_bytes: usize,
    seconds: u64,
    rounds: usize,
    cases: Vec<SizeCase>,
    paced: Option<PacedRun>,
}

pub fn run(args: &StorageArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|error| format!("{}: {error}", args.dir.display()))?;
    let root = tempfile::tempdir_in(&args.dir).map_err(|error| format!("temp dir: {error}"))?;
    let root_path = root.path().to_path_buf();
    let executor = LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(args.io_memory)
        .name("bench-shard")
        .make()
        .map_err(|error| format!("glommio executor: {error}"))?;
    let report = executor.run(run_cases(args, root_path))?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?;
        println!("{json}");
    } else {
        print_report(&report);
    }
    Ok(())
}

async fn run_cases(args: &StorageArgs, root: PathBuf) -> Result<Report, String> {
    // As many segment files open as the cases use: the storage engine's
    // speed, not its descriptor cache, is measured here.
    let disk = GlommioDisk::for_shard(&root, 4096)
        .await
        .map_err(|error| format!("DMA probe: {error}"))?;
    let duration = Duration::from_secs(args.seconds);
    let mut cases = Vec::new();
    for &batch_bytes in &args.batch_bytes {
        let batch = build_batch(batch_bytes, args.record_bytes)?;
        let mut raw_rounds = Vec::new();
        let mut serial_rounds = Vec::new();
        let mut concurrent_rounds = Vec::new();
        for round in 1..=args.rounds.max(1) {
            progress(
                args,
                &format!("batch {batch_bytes} B, round {round}: raw O_DIRECT write + fdatasync"),
            );
            raw_rounds.push(measure_raw(&disk, &root, batch.len(), duration).await?);
            settle(&root, args).await;
            progress(
                args,
                &format!("batch {batch_bytes} B, round {round}: engine, 1 append in flight"),
            );
            serial_rounds
                .push(measure_engine(&disk, &root, &batch, batch_bytes, 1, duration).await?);
            settle(&root, args).await;
            progress(
                args,
                &format!(
                    "batch {batch_bytes} B, round {round}: engine, {} appends in flight",
                    args.in_flight
                ),
            );
            concurrent_rounds.push(
                measure_engine(&disk, &root, &batch, batch_bytes, args.in_flight, duration).await?,
            );
            settle(&root, args).await;
        }
        let raw = median(raw_rounds);
        let engine_serial = median(serial_rounds);
        let engine_concurrent = median(concurrent_rounds);
        cases.push(SizeCase {
            batch_bytes,
            serial_ratio: engine_serial.megabytes_per_second / raw.megabytes_per_second,
            concurrent_ratio: engine_concurrent.megabytes_per_second / raw.megabytes_per_second,
            raw,
            engine_serial,
            engine_concurrent,
        });
    }
    let paced = if args.rate_records > 0 {
        progress(
            args,
            &format!(
                "paced: {} records/s for {} s",
                args.rate_records, args.rate_seconds
            ),
        );
        let paced = measure_paced(&disk, &root, args).await?;
        settle(&root, args).await;
        Some(paced)
    } else {
        None
    };
    Ok(Report {
        record_bytes: args.record_bytes,
        seconds: args.seconds,
        rounds: args.rounds.max(1),
        cases,
        paced,
    })
}

/// The round with the median bandwidth.
fn median(mut rounds: Vec<Throughput>) -> Throughput {
    rounds.sort_by(|left, right| {
        left.megabytes_per_second
            .total_cmp(&right.megabytes_per_second)
    });
    let middle = rounds.len() / 2;
    rounds.swap_remove(middle)
}

fn progress(args: &StorageArgs, message: &str) {
    if !args.json {
        eprintln!("… {message}");
    }
}

/// Removes a case's files, then waits so the discards do not stall the next case.
async fn settle(root: &Path, args: &StorageArgs) {
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                let _removed = std::fs::remove_dir_all(&path);
            } else if path.extension().is_some_and(|extension| extension == "raw") {
                let _removed = std::fs::remove_file(&path);
            }
        }
    }
    glommio::timer::sleep(Duration::from_secs(args.settle_seconds)).await;
}

/// One batch of ~`batch_bytes` of `record_bytes`-byte records.
fn build_batch(batch_bytes: usize, record_bytes: usize) -> Result<Bytes, String> {
    // A 1 KiB record costs its value plus about 12 bytes of framing.
    let per_record = record_bytes + 12;
    let records = (batch_bytes.saturating_sub(61) / per_record).max(1);
    let mut builder = BatchBuilder::new(Compression::None);
    let value = Bytes::from(vec![b'v'; record_bytes]);
    for index in 0..records {
        builder
            .push(&NewRecord {
                key: Some(Bytes::from(format!("key-{index:06}"))),
                value: Some(value.clone()),
                timestamp: TimestampMs(0),
                ..NewRecord::default()
            })
            .map_err(|error| error.to_string())?;
    }
    builder.build().map_err(|error| error.to_string())
}

fn records_in(batch: &Bytes) -> u64 {
    u64::from(u32::from_be_bytes([
        batch[57], batch[58], batch[59], batch[60],
    ]))
}

async fn measure_raw(
    disk: &GlommioDisk,
    root: &Path,
    write_bytes: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let path = root.join("baseline.raw");
    let file = disk
        .open(&path, true)
        .await
        .map_err(|error| error.to_string())?;
    let alignment = file.alignment() as usize;
    let len = write_bytes.div_ceil(alignment) * alignment;
    let mut histogram = latency_histogram();
    let mut position = 0u64;
    let mut writes = 0u64;
    let start = Instant::now();
    while start.elapsed() < duration {
        let mut buffer = file.alloc_buffer(len);
        buffer.as_mut().fill(b'r');
        let began = Instant::now();
        file.write_at(buffer, position)
            .await
            .map_err(|error| error.to_string())?;
        file.sync_data().await.map_err(|error| error.to_string())?;
        record(&mut histogram, began.elapsed());
        position += len as u64;
        writes += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Throughput {
        mode: "raw".to_owned(),
        batch_bytes: write_bytes,
        in_flight: 1,
        appends: writes,
        records_per_second: 0.0,
        megabytes_per_second: position as f64 / elapsed / 1e6,
        fsyncs: writes,
        bytes_per_fsync: len as u64,
        latency: Latency::of(&histogram),
    })
}

fn shard_storage(disk: &GlommioDisk, root: &Path) -> ShardStorage {
    let probe_disk = disk.clone();
    let probe_dir = root.to_path_buf();
    ShardStorage {
        clock: Rc::new(SystemClock),
        space: Rc::new(DiskSpace::new(1 << 30, move || {
            probe_disk.free_bytes(&probe_dir)
        })),
        cache: TailCache::new(64 << 20),
        observer: Rc::new(NoObserver),
        journal: None,
    }
}

async fn open_log(
    disk: &GlommioDisk,
    root: &Path,
    name: &str,
) -> Result<Rc<PartitionLog<GlommioDisk>>, String> {
    let config = LogConfig {
        flush_bytes_max: 4 << 20,
        ..LogConfig::default()
    };
    PartitionLog::open(
        disk.clone(),
        &root.join(name),
        config,
        shard_storage(disk, root),
        PartitionId {
            topic_id: 0,
            partition: 0,
        },
    )
    .await
    .map(Rc::new)
    .map_err(|error| error.to_string())
}

fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let micros = u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .max(1);
    histogram.saturating_record(micros);
}

async fn measure_engine(
    disk: &GlommioDisk,
    root: &Path,
    batch: &Bytes,
    batch_bytes: usize,
    in_flight: usize,
    duration: Duration,
) -> Result<Throughput, String> {
    let log = open_log(disk, root, &format!("engine-{batch_bytes}-{in_flight}")).await?;
    let histogram = Rc::new(RefCell::new(latency_histogram()));
    let start = Instant::now();
    // A receiver task copies each batch into a fresh buffer, as a connection
    // reading requests would, while appends wait on the disk.
    let (received, incoming) = flume::bounded::<BytesMut>(in_flight * 2);
    let receiver_batch = batch.clone();
    let receiver = glommio::spawn_local(async move {
        while start.elapsed() < duration {
            if received
                .send_async(BytesMut::from(&receiver_batch[..]))
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let mut workers = Vec::new();
    for _ in 0..in_flight {
        let log = log.clone();
        let histogram = histogram.clone();
        let incoming = incoming.clone();
        workers.push(glommio::spawn_local(async move {
            let mut appends = 0u64;
            while let Ok(bytes) = incoming.recv_async().await {
                if start.elapsed() >= duration {
                    break;
                }
                let began = Instant::now();
                log.append(bytes).await.map_err(|error| error.to_string())?;
                record(&mut histogram.borrow_mut(), began.elapsed());
                appends += 1;
            }
            Ok::<u64, String>(appends)
        }));
    }
    drop(incoming);
    let mut appends = 0;
    for worker in workers {
        appends += worker.await?;
    }
    receiver.await;
    let elapsed = start.elapsed().as_secs_f64();
    let stats = log.stats();
    log.close().await.map_err(|error| error.to_string())?;
    let histogram = histogram.borrow();
    Ok(Throughput {
        mode: "engine".to_owned(),
        batch_bytes: batch.len(),
        in_flight,
        appends,
        records_per_second: (appends * records_in(batch)) as f64 / elapsed,
        megabytes_per_second: (appends * batch.len() as u64) as f64 / elapsed / 1e6,
        fsyncs: stats.flushes,
        bytes_per_fsync: stats.bytes_flushed / stats.flushes.max(1),
        latency: Latency::of(&histogram),
    })
}

async fn measure_paced(
    disk: &GlommioDisk,
    root: &Path,
    args: &StorageArgs,
) -> Result<PacedRun, String> {
    let log = open_log(disk, root, "paced").await?;
    let batch = build_batch(args.rate_batch_bytes, args.record_bytes)?;
    let records_per_batch = records_in(&batch);
    let appends_per_second = args.rate_records as f64 / records_per_batch as f64;
    let interval = Duration::from_secs_f64(1.0 / appends_per_second);
    let total = (appends_per_second * args.rate_seconds as f64) as u64;
    let histogram = Rc::new(RefCell::new(latency_histogram()));
    let errors = Rc::new(RefCell::new(0u64));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for index in 0..total {
        let scheduled = start + interval.mul_f64(index as f64);
        let now = Instant::now();
        if scheduled > now {
            glommio::timer::sleep(scheduled - now).await;
        }
        let log = log.clone();
        let histogram = histogram.clone();
        let errors = errors.clone();
        let bytes = BytesMut::from(&batch[..]);
        tasks.push(glommio::spawn_local(async move {
            match log.append(bytes).await {
                Ok(_) => record(&mut histogram.borrow_mut(), scheduled.elapsed()),
                Err(_) => *errors.borrow_mut() += 1,
            }
        }));
    }
    futures::future::join_all(tasks).await;
    let elapsed = start.elapsed().as_secs_f64();
    log.close().await.map_err(|error| error.to_string())?;
    let errors = *errors.borrow();
    let histogram = histogram.borrow();
    Ok(PacedRun {
        target_records_per_second: args.rate_records,
        achieved_records_per_second: ((total - errors) * records_per_batch) as f64 / elapsed,
        batch_bytes: batch.len(),
        appends: total,
        errors,
        latency: Latency::of(&histogram),
    })
}

fn print_report(report: &Report) {
    println!(
        "\nstorage engine vs raw O_DIRECT write+fdatasync ({} B records, median of {} rounds of {} s)\n",
        report.record_bytes, report.rounds, report.seconds
    );
    println!(
        "{:>9} {:<14} {:>9} {:>12} {:>9} {:>8} {:>11} {:>8} {:>8} {:>8} {:>7}",
        "batch",
        "mode",
        "in-flight",
        "records/s",
        "MB/s",
        "fsyncs",
        "B/fsync",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "vs raw"
    );
    for case in &report.cases {
        for (row, ratio) in [
            (&case.raw, None),
            (&case.engine_serial, Some(case.serial_ratio)),
            (&case.engine_concurrent, Some(case.concurrent_ratio)),
        ] {
            println!(
                "{:>9} {:<14} {:>9} {:>12.0} {:>9.1} {:>8} {:>11} {:>8} {:>8} {:>8} {:>7}",
                case.batch_bytes,
                row.mode,
                row.in_flight,
                row.records_per_second,
                row.megabytes_per_second,
                row.fsyncs,
                row.bytes_per_fsync,
                millis(row.latency.p50_us),
                millis(row.latency.p95_us),
                millis(row.latency.p99_us),
                ratio.map_or_else(|| "-".to_owned(), |ratio| format!("{:.0}%", ratio * 100.0)),
            );
        }
    }
    if let Some(paced) = &report.paced {
        println!(
            "\npaced: target {} records/s in {} B batches: achieved {:.0} records/s, {} appends, {} errors",
            paced.target_records_per_second,
            paced.batch_bytes,
            paced.achieved_records_per_second,
            paced.appends,
            paced.errors
        );
        println!(
            "       append latency from schedule: p50 {} ms, p95 {} ms, p99 {} ms, p99.9 {} ms, max {} ms",
            millis(paced.latency.p50_us),
            millis(paced.latency.p95_us),
            millis(paced.latency.p99_us),
            millis(paced.latency.p999_us),
            millis(paced.latency.max_us)
        );
    }
}
