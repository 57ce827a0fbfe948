//! Load against a running broker: a paced (open-loop) producer, shared by
//! the `produce` and `e2e` modes, with per-second progress and a final
//! report.
//!
//! Pacing is open-loop: record `i` is due at `start + i / rate`, and its
//! latency is measured from that due time, so a stall is charged to every
//! record it delayed (no coordinated omission). With `--rate 0` records are
//! sent as fast as the producer's buffer accepts them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use corelog_client::{
    Acks, Admin, ClientConfig, ClientError, ClientTls, NewTopic, Producer, ProducerConfig,
    ProducerRecord, SaslCredentials, ScramMechanism,
};
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::in_flight::InFlight;
use crate::report::{Latency, latency_histogram, millis};

/// Options shared by the modes that produce.
#[derive(Clone, Debug, Args)]
pub struct LoadArgs {
    /// Broker address.
    #[arg(long, default_value = "127.0.0.1:7100")]
    pub bootstrap: String,
    /// Topic; created with `--partitions` if absent.
    #[arg(long, default_value = "bench")]
    pub topic: String,
    /// Partitions of the topic when it is created.
    #[arg(long, default_value_t = 16)]
    pub partitions: u32,
    /// Replicas per partition when the topic is created (3 on a
    /// three-broker cluster). An existing topic is used as it is.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: u16,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// Records per second in all; 0 sends as fast as possible.
    #[arg(long, default_value_t = 100_000)]
    pub rate: u64,
    /// Seconds to produce.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// Producer clients, each with its own connections and share of the rate.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// `quorum` (default) or `leader`.
    #[arg(long, default_value = "quorum")]
    pub acks: String,
    /// Producer linger, ms.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Producer batch size, bytes.
    #[arg(long, default_value_t = 256 << 10)]
    pub batch_bytes: usize,
    /// Distinct record keys, spread over the partitions by the key hash.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Rates over time instead of `--rate` for `--duration`:
    /// `RATE:SECONDS,RATE:SECONDS,...` (records per second in all; rates
    /// above 0). The report gives each step's figures and each second's.
    #[arg(long, value_parser = Schedule::parse)]
    pub schedule: Option<Schedule>,
    /// When a producer's buffer is full, drop the record (counted as shed:
    /// pushed back by the cluster) instead of waiting for room: what an
    /// application that cannot wait does, and what keeps the offered
    /// schedule open loop past capacity.
    #[arg(long)]
    pub shed: bool,
    /// Each producer's buffer, bytes [default: 64 MiB, at least 64
    /// batches].
    #[arg(long)]
    pub buffer_bytes: Option<usize>,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// TLS and login, as the `corelog` CLI takes them.
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// TLS and a SCRAM login for every client of a run.
#[derive(Clone, Debug, Default, Args)]
pub struct SecurityArgs {
    /// Connect with TLS, trusting this PEM CA file.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate chain, for brokers that ask for one.
    #[arg(long, requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Log in as this user (SCRAM).
    #[arg(long, requires = "sasl_password_file")]
    pub sasl_user: Option<String>,
    /// File whose first line is the password of --sasl-user.
    #[arg(long, requires = "sasl_user")]
    pub sasl_password_file: Option<PathBuf>,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    #[arg(long, default_value = "SCRAM-SHA-256")]
    pub sasl_mechanism: String,
}

impl SecurityArgs {
    /// Sets `client`'s TLS and login.
    ///
    /// # Errors
    /// A file that cannot be used, or an unknown mechanism.
    pub fn apply(&self, client: &mut ClientConfig) -> Result<(), String> {
        if let Some(ca) = &self.tls_ca {
            let identity = self.tls_cert.as_deref().zip(self.tls_key.as_deref());
            client.tls =
                Some(ClientTls::from_files(ca, identity).map_err(|error| error.to_string())?);
        }
        if let (Some(user), Some(file)) = (&self.sasl_user, &self.sasl_password_file) {
            let mechanism = ScramMechanism::from_name(&self.sasl_mechanism).ok_or_else(|| {
                format!(
                    "--sasl-mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512, not {:?}",
                    self.sasl_mechanism
                )
            })?;
            client.sasl = Some(
                SaslCredentials::scram_from_file(mechanism, user, file)
                    .map_err(|error| error.to_string())?,
            );
        }
        Ok(())
    }
}

impl LoadArgs {
    /// The client settings of this run: its bootstrap, TLS and login.
    ///
    /// # Errors
    /// See [`SecurityArgs::apply`].
    pub fn client_config(&self) -> Result<ClientConfig, String> {
        let mut client = ClientConfig::new(self.bootstrap.clone());
        self.security.apply(&mut client)?;
        Ok(client)
    }
}

/// Offered rates over time: steps of a constant rate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// (records per second in all, seconds).
    pub steps: Vec<(u64, u64)>,
}

impl Schedule {
    /// Reads `RATE:SECONDS,RATE:SECONDS,...`.
    ///
    /// # Errors
    /// What is wrong with the text.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let steps = text
            .split(',')
            .map(|step| {
                let (rate, seconds) = step
                    .split_once(':')
                    .ok_or_else(|| format!("{step:?} is not RATE:SECONDS"))?;
                let number = |text: &str| {
                    text.trim()
                        .parse::<u64>()
                        .ok()
                        .filter(|number| *number > 0)
                        .ok_or_else(|| format!("{text:?} in {step:?} is not a positive number"))
                };
                Ok((number(rate)?, number(seconds)?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Schedule { steps })
    }

    /// One step: `rate` for `seconds`.
    #[must_use]
    pub fn constant(rate: u64, seconds: u64) -> Schedule {
        Schedule {
            steps: vec![(rate, seconds)],
        }
    }

    /// Seconds in all.
    #[must_use]
    pub fn seconds(&self) -> u64 {
        self.steps.iter().map(|(_, seconds)| seconds).sum()
    }

    /// Records due in all by `elapsed`, at `share` of every rate.
    fn due_by(&self, elapsed: Duration, share: f64) -> u64 {
        let mut left = elapsed.as_secs_f64();
        let mut due = 0.0;
        for &(rate, seconds) in &self.steps {
            let here = left.min(seconds as f64);
            due += here * rate as f64 * share;
            left -= here;
            if left <= 0.0 {
                break;
            }
        }
        due as u64
    }

    /// When record `sequence` is due, at `share` of every rate; `None`
    /// past the schedule's end.
    fn due_at(&self, sequence: u64, share: f64) -> Option<Duration> {
        let mut before = 0.0;
        let mut start = 0.0;
        for &(rate, seconds) in &self.steps {
            let here = rate as f64 * share * seconds as f64;
            if (sequence as f64) < before + here {
                let into = (sequence as f64 - before) / (rate as f64 * share);
                return Some(Duration::from_secs_f64(start + into));
            }
            before += here;
            start += seconds as f64;
        }
        None
    }

    /// The step `at` falls in (the last one past the end).
    fn step_at(&self, at: Duration) -> usize {
        let mut end = 0;
        for (index, (_, seconds)) in self.steps.iter().enumerate() {
            end += seconds;
            if at.as_secs() < end {
                return index;
            }
        }
        self.steps.len().saturating_sub(1)
    }
}

/// One schedule step's figures: records due in it.
#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    pub rate: u64,
    pub seconds: u64,
    pub acknowledged: u64,
    /// Dropped at a full buffer (`--shed`).
    pub shed: u64,
    pub errors: u64,
    pub append_latency: Latency,
}

/// The figures of one produce run.
#[derive(Debug, Serialize)]
pub struct ProduceReport {
    pub target_records_per_second: u64,
    pub seconds: f64,
    pub sent: u64,
    pub acknowledged: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub records_per_second: f64,
    pub megabytes_per_second: f64,
    /// From each record's due time to its acknowledgement.
    pub append_latency: Latency,
    /// Records dropped at a full buffer (`--shed`).
    pub shed: u64,
    /// The longest time between two acknowledgements (of any producer),
    /// ms: the stall a leader change or a pause caused.
    pub max_ack_gap_ms: f64,
    /// Each schedule step's figures.
    pub steps: Vec<StepReport>,
    /// Per second of the run: records acknowledged in it.
    pub acknowledged_per_second: Vec<u64>,
    /// Per second of the run: p99 latency of the records due in it, µs
    /// (0: none acknowledged).
    pub p99_us_per_second: Vec<u64>,
    /// Per second of the run: p99 latency of the records due in the
    /// [`WINDOW_SECONDS`] from it, µs (0: none acknowledged). A second's
    /// p99 swings with each fsync stall; a window's compares with a
    /// step's.
    pub p99_us_per_window: Vec<u64>,
}

/// Seconds of the windows of [`ProduceReport::p99_us_per_window`].
pub const WINDOW_SECONDS: usize = 10;

/// A delivery the e2e mode wants to hear about: record id and ack time.
pub type AckHook = Arc<dyn Fn(u64, Instant) + Send + Sync>;

/// Creates the topic if it does not exist.
///
/// # Errors
/// The admin client's error, other than the topic existing.
pub async fn ensure_topic(args: &LoadArgs) -> Result<(), String> {
    let admin = Admin::connect(args.client_config()?)
        .await
        .map_err(|error| {
            format!(
                "cannot connect to {}: {error}; is corelogd running?",
                args.bootstrap
            )
        })?;
    match admin
        .create_topic(
            NewTopic::new(args.topic.clone(), args.partitions)
                .replication_factor(args.replication_factor),
        )
        .await
    {
        Ok(()) => Ok(()),
        Err(error) if error.code() == Some(corelog_client::ErrorCode::TopicAlreadyExists) => Ok(()),
        Err(error) => Err(format!("cannot create topic {}: {error}", args.topic)),
    }
}

fn producer_config(args: &LoadArgs) -> Result<ProducerConfig, String> {
    let mut config = ProducerConfig::new(args.bootstrap.clone());
    config.client = args.client_config()?;
    config.acks = match args.acks.as_str() {
        "quorum" => Acks::Quorum,
        "leader" => Acks::Leader,
        other => return Err(format!("--acks must be quorum or leader, not {other:?}")),
    };
    config.linger = Duration::from_millis(args.linger_ms);
    config.batch_bytes = args.batch_bytes;
    config.buffer_bytes = args
        .buffer_bytes
        .unwrap_or((64 << 20).max(args.batch_bytes * 64));
    Ok(config)
}

/// A record value of `len` bytes starting with the record's id.
fn value(id: u64, len: usize) -> Bytes {
    let mut value = vec![b'x'; len.max(8)];
    value[..8].copy_from_slice(&id.to_be_bytes());
    Bytes::from(value)
}

/// The id a [`value`] starts with.
#[must_use]
pub fn value_id(value: &[u8]) -> Option<u64> {
    value
        .get(..8)
        .and_then(|bytes| bytes.try_into().ok())
        .map(u64::from_be_bytes)
}

struct Shared {
    histogram: Mutex<Histogram<u64>>,
    sent: AtomicU64,
    acknowledged: AtomicU64,
    errors: AtomicU64,
    shed: AtomicU64,
    /// Microseconds from the start to the latest acknowledgement, and the
    /// longest time between two (over all producers).
    last_ack_us: AtomicU64,
    max_ack_gap_us: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Merged from every producer at its end.
    timeline: Mutex<Timeline>,
}

/// Per step and per second figures of one producer, merged at the end.
struct Timeline {
    step_latency: Vec<Histogram<u64>>,
    step_acknowledged: Vec<u64>,
    step_shed: Vec<u64>,
    step_errors: Vec<u64>,
    second_latency: Vec<Histogram<u64>>,
    second_acknowledged: Vec<u64>,
}

impl Timeline {
    fn new(schedule: &Schedule) -> Timeline {
        let steps = schedule.steps.len();
        // Deliveries may complete after the schedule's end.
        let seconds = usize::try_from(schedule.seconds()).unwrap_or(0) + 30;
        // Two significant digits per second: sixty of them per producer.
        let coarse = || Histogram::new_with_bounds(1, 60_000_000, 2).expect("valid bounds");
        Timeline {
            step_latency: (0..steps).map(|_| latency_histogram()).collect(),
            step_acknowledged: vec![0; steps],
            step_shed: vec![0; steps],
            step_errors: vec![0; steps],
            second_latency: (0..seconds).map(|_| coarse()).collect(),
            second_acknowledged: vec![0; seconds],
        }
    }

    fn merge(&mut self, other: &Timeline) {
        let add = |into: &mut Vec<u64>, from: &Vec<u64>| {
            for (into, from) in into.iter_mut().zip(from) {
                *into += from;
            }
        };
        add(&mut self.step_acknowledged, &other.step_acknowledged);
        add(&mut self.step_shed, &other.step_shed);
        add(&mut self.step_errors, &other.step_errors);
        add(&mut self.second_acknowledged, &other.second_acknowledged);
        for (into, from) in self
            .step_latency
            .iter_mut()
            .chain(self.second_latency.iter_mut())
            .zip(other.step_latency.iter().chain(other.second_latency.iter()))
        {
            if let Err(error) = into.add(from) {
                eprintln!("cannot merge latency histograms: {error}");
            }
        }
    }
}

/// Produces at the configured rate for the configured time and reports.
///
/// # Errors
/// When the producers cannot connect.
pub async fn run_producers(
    args: &LoadArgs,
    label: &str,
    on_ack: Option<AckHook>,
) -> Result<ProduceReport, String> {
    let schedule = args
        .schedule
        .clone()
        .unwrap_or_else(|| Schedule::constant(args.rate, args.duration));
    let shared = Arc::new(Shared {
        histogram: Mutex::new(latency_histogram()),
        sent: AtomicU64::new(0),
        acknowledged: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        shed: AtomicU64::new(0),
        last_ack_us: AtomicU64::new(0),
        max_ack_gap_us: AtomicU64::new(0),
        first_error: Mutex::new(None),
        timeline: Mutex::new(Timeline::new(&schedule)),
    });
    let producers = args.producers.max(1);
    let mut connected = Vec::with_capacity(producers);
    for _ in 0..producers {
        let producer = Producer::connect(producer_config(args)?)
            .await
            .map_err(|error| format!("producer cannot connect to {}: {error}", args.bootstrap))?;
        if args.shed {
            // `try_send` needs the topic's metadata at hand.
            producer
                .prepare_topic(&args.topic)
                .await
                .map_err(|error| format!("topic {}: {error}", args.topic))?;
        }
        connected.push(producer);
    }
    let start = Instant::now();
    let duration = Duration::from_secs(schedule.seconds());
    let mut tasks = Vec::new();
    for (index, producer) in connected.into_iter().enumerate() {
        let args = args.clone();
        let shared = shared.clone();
        let on_ack = on_ack.clone();
        let schedule = schedule.clone();
        tasks.push(tokio::spawn(async move {
            produce_share(
                &producer,
                &args,
                &schedule,
                index as u64,
                producers as u64,
                start,
                &shared,
                on_ack,
            )
            .await;
            if let Err(error) = producer.close().await {
                record_error(&shared, &error).await;
            }
        }));
    }
    let progress = tokio::spawn(progress_lines(
        shared.clone(),
        start,
        duration,
        args.record_bytes,
        label.to_owned(),
        args.json,
    ));
    for task in tasks {
        task.await.map_err(|error| error.to_string())?;
    }
    progress.abort();
    let seconds = start.elapsed().as_secs_f64();
    let acknowledged = shared.acknowledged.load(Ordering::Relaxed);
    let histogram = shared.histogram.lock().await;
    let timeline = shared.timeline.lock().await;
    let steps = schedule
        .steps
        .iter()
        .enumerate()
        .map(|(index, &(rate, seconds))| StepReport {
            rate,
            seconds,
            acknowledged: timeline.step_acknowledged[index],
            shed: timeline.step_shed[index],
            errors: timeline.step_errors[index],
            append_latency: Latency::of(&timeline.step_latency[index]),
        })
        .collect();
    let used_seconds = (seconds.ceil() as usize).min(timeline.second_acknowledged.len());
    Ok(ProduceReport {
        target_records_per_second: args.rate,
        seconds,
        sent: shared.sent.load(Ordering::Relaxed),
        acknowledged,
        errors: shared.errors.load(Ordering::Relaxed),
        first_error: shared.first_error.lock().await.clone(),
        records_per_second: acknowledged as f64 / seconds,
        megabytes_per_second: (acknowledged * args.record_bytes as u64) as f64 / seconds / 1e6,
        append_latency: Latency::of(&histogram),
        shed: shared.shed.load(Ordering::Relaxed),
        max_ack_gap_ms: shared.max_ack_gap_us.load(Ordering::Relaxed) as f64 / 1000.0,
        steps,
        acknowledged_per_second: timeline.second_acknowledged[..used_seconds].to_vec(),
        p99_us_per_second: timeline.second_latency[..used_seconds]
            .iter()
            .map(|histogram| histogram.value_at_quantile(0.99))
            .collect(),
        p99_us_per_window: window_p99s(&timeline.second_latency[..used_seconds]),
    })
}

/// For each second, the p99 of the [`WINDOW_SECONDS`] from it (fewer at
/// the end).
fn window_p99s(seconds: &[Histogram<u64>]) -> Vec<u64> {
    (0..seconds.len())
        .map(|first| {
            let mut window = seconds[first].clone();
            for second in seconds.iter().skip(first + 1).take(WINDOW_SECONDS - 1) {
                if let Err(error) = window.add(second) {
                    eprintln!("cannot merge latency histograms: {error}");
                }
            }
            window.value_at_quantile(0.99)
        })
        .collect()
}

async fn record_error(shared: &Shared, error: &ClientError) {
    shared.errors.fetch_add(1, Ordering::Relaxed);
    let mut first = shared.first_error.lock().await;
    if first.is_none() {
        *first = Some(error.to_string());
    }
}

#[allow(clippy::too_many_arguments)]
async fn produce_share(
    producer: &Producer,
    args: &LoadArgs,
    schedule: &Schedule,
    index: u64,
    producers: u64,
    start: Instant,
    shared: &Arc<Shared>,
    on_ack: Option<AckHook>,
) {
    // Rate 0 (a single step): as fast as the buffer takes them.
    let flat_out = schedule.steps.first().is_some_and(|(rate, _)| *rate == 0);
    let share = 1.0 / producers as f64;
    let duration = Duration::from_secs(schedule.seconds());
    let mut pending = InFlight::new();
    let mut sequence = 0u64;
    let mut tally = Tally::new(start, schedule, shared, on_ack);
    loop {
        let now = Instant::now();
        if now.duration_since(start) >= duration {
            break;
        }
        // Records due by now (all of them at once after a stall).
        let due_count = if flat_out {
            sequence + 256
        } else {
            schedule.due_by(now.duration_since(start), share)
        };
        while sequence < due_count {
            let due = if flat_out {
                Instant::now()
            } else {
                match schedule.due_at(sequence, share) {
                    Some(offset) => start + offset,
                    None => break,
                }
            };
            // A full buffer sheds the record before it is built: building
            // the records it drops would take the brokers' CPU on a shared
            // box and lower the goodput the run measures.
            if args.shed && producer.buffer_available_bytes() < args.record_bytes {
                tally.shed(due);
                sequence += 1;
                continue;
            }
            let id = sequence * producers + index;
            let key = format!("key-{}", id % args.keys);
            let record =
                ProducerRecord::new(args.topic.clone(), value(id, args.record_bytes)).key(key);
            let sent = if args.shed {
                producer.try_send(record)
            } else {
                producer.send(record).await
            };
            match sent {
                Ok(delivery) => {
                    shared.sent.fetch_add(1, Ordering::Relaxed);
                    pending.push(async move { (id, due, delivery.await) });
                }
                Err(ClientError::BufferFull { .. }) if args.shed => tally.shed(due),
                Err(error) => tally.failed(due, &error).await,
            }
            sequence += 1;
            // Collect what completed meanwhile, without waiting.
            while let Some(done) = pending.completed() {
                tally.complete(done).await;
            }
        }
        if !flat_out {
            let next_due = schedule
                .due_at(sequence, share)
                .map_or(start + duration, |offset| start + offset);
            tokio::select! {
                Some(done) = pending.next(), if !pending.is_empty() => {
                    tally.complete(done).await;
                }
                () = tokio::time::sleep_until(next_due.into()) => {}
            }
        }
    }
    while let Some(done) = pending.next().await {
        tally.complete(done).await;
    }
    tally.merge().await;
}

/// One producer's figures as its deliveries complete, merged into the
/// run's at its end.
struct Tally<'a> {
    start: Instant,
    schedule: &'a Schedule,
    shared: &'a Shared,
    latency: Histogram<u64>,
    timeline: Timeline,
    on_ack: Option<AckHook>,
}

impl<'a> Tally<'a> {
    fn new(
        start: Instant,
        schedule: &'a Schedule,
        shared: &'a Shared,
        on_ack: Option<AckHook>,
    ) -> Tally<'a> {
        Tally {
            start,
            schedule,
            shared,
            latency: latency_histogram(),
            timeline: Timeline::new(schedule),
            on_ack,
        }
    }

    /// The schedule step a record due at `due` belongs to.
    fn step(&self, due: Instant) -> usize {
        self.schedule.step_at(due.duration_since(self.start))
    }

    /// A record due at `due` found the buffer full and was dropped.
    fn shed(&mut self, due: Instant) {
        let step = self.step(due);
        self.shared.shed.fetch_add(1, Ordering::Relaxed);
        self.timeline.step_shed[step] += 1;
    }

    /// A record due at `due` failed.
    async fn failed(&mut self, due: Instant, error: &ClientError) {
        let step = self.step(due);
        self.timeline.step_errors[step] += 1;
        record_error(self.shared, error).await;
    }

    async fn complete(
        &mut self,
        (id, due, result): (u64, Instant, Result<corelog_client::Delivery, ClientError>),
    ) {
        if let Err(error) = result {
            self.failed(due, &error).await;
            return;
        }
        let step = self.step(due);
        let acked = Instant::now();
        let micros = u64::try_from(acked.duration_since(due).as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let timeline = &mut self.timeline;
        self.latency.saturating_record(micros);
        timeline.step_latency[step].saturating_record(micros);
        timeline.step_acknowledged[step] += 1;
        let due_second = due.duration_since(self.start).as_secs() as usize;
        if let Some(second) = timeline.second_latency.get_mut(due_second) {
            second.saturating_record(micros);
        }
        let acked_us =
            u64::try_from(acked.duration_since(self.start).as_micros()).unwrap_or(u64::MAX);
        let previous = self
            .shared
            .last_ack_us
            .fetch_max(acked_us, Ordering::Relaxed);
        if previous > 0 && acked_us > previous {
            self.shared
                .max_ack_gap_us
                .fetch_max(acked_us - previous, Ordering::Relaxed);
        }
        let acked_second = acked.duration_since(self.start).as_secs() as usize;
        if let Some(count) = timeline.second_acknowledged.get_mut(acked_second) {
            *count += 1;
        }
        self.shared.acknowledged.fetch_add(1, Ordering::Relaxed);
        if let Some(on_ack) = &self.on_ack {
            on_ack(id, acked);
        }
    }

    /// Adds this producer's figures to the run's.
    async fn merge(self) {
        let mut histogram = self.shared.histogram.lock().await;
        if let Err(error) = histogram.add(&self.latency) {
            eprintln!("cannot merge latency histograms: {error}");
        }
        self.shared.timeline.lock().await.merge(&self.timeline);
    }
}

async fn progress_lines(
    shared: Arc<Shared>,
    start: Instant,
    duration: Duration,
    record_bytes: usize,
    label: String,
    json: bool,
) {
    if json {
        return;
    }
    let mut previous = 0u64;
    let mut tick = tokio::time::interval_at(
        (start + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    loop {
        tick.tick().await;
        let acknowledged = shared.acknowledged.load(Ordering::Relaxed);
        let delta = acknowledged - previous;
        previous = acknowledged;
        eprintln!(
            "[{label} {:>3}s/{}s] {delta:>7} records/s {:>7.1} MB/s, {} acknowledged, {} errors",
            start.elapsed().as_secs(),
            duration.as_secs(),
            (delta * record_bytes as u64) as f64 / 1e6,
            acknowledged,
            shared.errors.load(Ordering::Relaxed),
        );
    }
}

/// Prints a produce report for people.
pub fn print_produce(title: &str, report: &ProduceReport) {
    println!("\n{title}");
    println!(
        "  target {} records/s for {:.0} s: acknowledged {} of {} sent, {} errors",
        report.target_records_per_second,
        report.seconds,
        report.acknowledged,
        report.sent,
        report.errors
    );
    if let Some(error) = &report.first_error {
        println!("  first error: {error}");
    }
    println!(
        "  throughput {:.0} records/s, {:.1} MB/s",
        report.records_per_second, report.megabytes_per_second
    );
    print_latency("  append latency (due time to ack)", &report.append_latency);
    println!(
        "  longest time between two acknowledgements: {:.1} ms",
        report.max_ack_gap_ms
    );
}

/// Prints percentiles in milliseconds.
pub fn print_latency(title: &str, latency: &Latency) {
    println!(
        "{title}: p50 {} ms, p95 {} ms, p99 {} ms, p99.9 {} ms, max {} ms",
        millis(latency.p50_us),
        millis(latency.p95_us),
        millis(latency.p99_us),
        millis(latency.p999_us),
        millis(latency.max_us)
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_window_p99_is_over_the_records_of_its_ten_seconds() {
        // Second 3 alone is slow; every other second holds 99 fast records.
        let seconds: Vec<Histogram<u64>> = (0..20)
            .map(|second| {
                let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 2).unwrap();
                let (latency, count) = if second == 3 {
                    (50_000, 50)
                } else {
                    (1_000, 99)
                };
                histogram.record_n(latency, count).unwrap();
                histogram
            })
            .collect();
        let windows = window_p99s(&seconds);
        assert_eq!(windows.len(), 20);
        // 50 slow of 941 records: above the window's 99th percentile.
        assert!(windows[0] >= 49_000, "{windows:?}");
        assert!(windows[3] >= 49_000, "{windows:?}");
        assert!(windows[4] <= 1_010, "{windows:?}");
        assert!(windows[19] <= 1_010, "{windows:?}");
    }

    fn login(mechanism: &str, password_file: PathBuf) -> SecurityArgs {
        SecurityArgs {
            sasl_user: Some("bench".to_owned()),
            sasl_password_file: Some(password_file),
            sasl_mechanism: mechanism.to_owned(),
            ..SecurityArgs::default()
        }
    }

    #[test]
    fn a_schedule_paces_records_step_by_step() {
        let schedule = Schedule::parse("100:2, 300:1").unwrap();
        assert_eq!(schedule.steps, [(100, 2), (300, 1)]);
        assert_eq!(schedule.seconds(), 3);
        // Half of every rate (one of two producers).
        assert_eq!(schedule.due_by(Duration::from_secs(1), 0.5), 50);
        assert_eq!(schedule.due_by(Duration::from_millis(2_500), 0.5), 175);
        assert_eq!(schedule.due_by(Duration::from_secs(9), 0.5), 250);
        assert_eq!(schedule.due_at(50, 0.5), Some(Duration::from_secs(1)));
        assert_eq!(schedule.due_at(100, 0.5), Some(Duration::from_secs(2)));
        assert_eq!(schedule.due_at(250, 0.5), None);
        assert_eq!(schedule.step_at(Duration::from_millis(1_999)), 0);
        assert_eq!(schedule.step_at(Duration::from_secs(2)), 1);
        assert_eq!(schedule.step_at(Duration::from_secs(7)), 1);
        for bad in ["100", "0:5", "100:x", "100:5,"] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn security_flags_set_the_clients_tls_and_login() {
        let mut client = ClientConfig::new("127.0.0.1:7100");
        SecurityArgs::default().apply(&mut client).unwrap();
        assert!(client.tls.is_none() && client.sasl.is_none());

        let dir =
            std::env::temp_dir().join(format!("corelog-bench-security-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let password = dir.join("bench.password");
        std::fs::write(&password, "secret\n").unwrap();
        login("SCRAM-SHA-512", password.clone())
            .apply(&mut client)
            .unwrap();
        assert_eq!(
            client.sasl.as_ref().map(SaslCredentials::username),
            Some("bench")
        );

        let error = login("PLAIN", password).apply(&mut client).unwrap_err();
        assert!(error.contains("SCRAM-SHA-256 or SCRAM-SHA-512"), "{error}");
        let missing_ca = SecurityArgs {
            tls_ca: Some(dir.join("absent-ca.pem")),
            ..SecurityArgs::default()
        };
        let error = missing_ca.apply(&mut client).unwrap_err();
        assert!(error.contains("absent-ca.pem"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
