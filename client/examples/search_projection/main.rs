//! # Example: a duplicate-safe search projection (seed §12–13)
//!
//! Two consumer groups read the same `order-events` topic independently
//! (its own topic, not the Quickstart's `orders`, whose records are not
//! order events and would be quarantined):
//!
//! - **`search`** projects order events into a SQLite view. Each event is
//!   applied in one database transaction that records its event id and
//!   fingerprint in a `processed` table and updates the order row only if
//!   the event's version is newer. Only after that transaction commits is
//!   the record marked complete, and the group offset committed after that
//!   ([`GroupConsumer::run`] does both). A crash between the two commits
//!   replays the event; the `processed` row turns the replay into a no-op.
//!   An event the sink cannot apply (malformed, or an event id reused with
//!   other content) is retried twice, then quarantined to
//!   `order-events.dlq` with an audit record, and the group moves on.
//! - **`analytics`** counts the events it reads per status (in memory, so
//!   a restart counts from its committed offset on). Its offsets are its
//!   own: stopping, replaying or deleting one group changes nothing for the
//!   other.
//!
//! Run it against a local broker (`make run` in another terminal):
//!
//! ```sh
//! cargo run -p corelog-client --example search_projection -- \
//!     --bootstrap 127.0.0.1:7100 --demo-events 200
//! ```
//!
//! It creates `order-events` (3 partitions) and `order-events.dlq` if
//! needed, produces
//! the demo events — keyed by order id, so each order's events stay in
//! order (C3) — including one event sent twice (an outbox resend), one
//! delayed older version and one malformed payload, then runs both groups
//! until nothing new arrived for `--idle-exit-seconds` (5 s; 0 runs until
//! Ctrl-C, to watch events added by hand), and prints the view, the
//! analytics counts and where the malformed event went. Payloads are
//! `event_id,order_id,version,status`, so you can add events by hand:
//!
//! ```sh
//! printf 'O51\tM900,O51,9,refunded\n' | corelog produce --topic order-events --key-separator $'\t'
//! ```
//!
//! Things to try:
//!
//! - Kill the example (Ctrl-C or kill -9) and start it again: the search
//!   group resumes from its committed offset, replayed events show as
//!   duplicates in the log, and no order is updated twice (`updates`).
//! - `corelog group describe search` and `corelog group describe analytics`:
//!   two groups, two committed positions, lag in records, bytes and time.
//! - `corelog group audit --group search`: the quarantine of the malformed
//!   event, with its dead-letter offset.
//! - Stop the example, then rebuild the view from scratch:
//!   `rm search.sqlite*` and
//!   `corelog group reset-offsets search --topic order-events --to-earliest --reason "rebuild the search view"`;
//!   the analytics group's offsets do not move.
//!
//! The offset commit never makes the external effect atomic with it: the
//! sink's own transaction and identity table do (see `sink.rs`).

mod sink;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use corelog_client::group::{GroupConfig, GroupConsumer, PoisonPolicy};
use corelog_client::{
    Admin, ClientConfig, ClientError, ConsumerRecord, ErrorCode, NewTopic, Producer,
    ProducerConfig, ProducerRecord,
};
use tokio::time::Instant;

use self::sink::{Applied, OrderEvent, Projection, SinkError};

#[derive(Clone, Debug, Parser)]
#[command(
    about = "Two consumer groups over one topic: a duplicate-safe SQLite projection and a counter"
)]
struct Args {
    /// A broker.
    #[arg(long, default_value = "127.0.0.1:7100")]
    bootstrap: String,
    /// The order events topic.
    #[arg(long, default_value = "order-events")]
    topic: String,
    /// Where poison events go.
    #[arg(long, default_value = "order-events.dlq")]
    dead_letter_topic: String,
    /// The projection database.
    #[arg(long, default_value = "search.sqlite")]
    database: PathBuf,
    /// Produce this many demo events first.
    #[arg(long, default_value_t = 0)]
    demo_events: u64,
    /// Stop once no record arrived for this long; 0 runs until Ctrl-C.
    #[arg(long, default_value_t = 5)]
    idle_exit_seconds: u64,
}

const STATUSES: [&str; 4] = ["placed", "paid", "shipped", "delivered"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    ensure_topics(&args).await?;
    if args.demo_events > 0 {
        produce_demo(&args).await?;
    }
    let projection = Arc::new(Mutex::new(Projection::open(&args.database)?));
    let search = tokio::spawn(run_search(args.clone(), Arc::clone(&projection)));
    let analytics = tokio::spawn(run_analytics(args.clone()));
    search.await??;
    let counts = analytics.await??;

    let projection = projection.lock().map_err(|_| "projection lock poisoned")?;
    println!(
        "\nsearch view ({} events processed):",
        projection.processed_count()?
    );
    println!(
        "{:<8} {:>7} {:<10} {:<8} {:>7}",
        "ORDER", "VERSION", "STATUS", "EVENT", "UPDATES"
    );
    for order in projection.orders()?.iter().take(20) {
        println!(
            "{:<8} {:>7} {:<10} {:<8} {:>7}",
            order.order_id, order.version, order.status, order.last_event, order.updates
        );
    }
    println!("\nanalytics (events per status, its own offsets):");
    for (status, count) in counts {
        println!("  {status:<12} {count}");
    }
    println!(
        "\npoison events went to {}; see `corelog group audit --group search`",
        args.dead_letter_topic
    );
    Ok(())
}

async fn ensure_topics(args: &Args) -> Result<(), ClientError> {
    let admin = Admin::connect(ClientConfig::new(args.bootstrap.clone())).await?;
    for (topic, partitions) in [(&args.topic, 3), (&args.dead_letter_topic, 1)] {
        match admin
            .create_topic(NewTopic::new(topic.clone(), partitions))
            .await
        {
            Err(error) if error.code() != Some(ErrorCode::TopicAlreadyExists) => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

/// Demo events: orders move through the statuses in order, one event is
/// sent twice, one older version arrives late, and one payload is garbage.
async fn produce_demo(args: &Args) -> Result<(), ClientError> {
    let producer = Producer::connect(ProducerConfig::new(args.bootstrap.clone())).await?;
    let orders = (args.demo_events / 4).max(1);
    let mut deliveries = Vec::new();
    let send = |order: String, payload: String| {
        let producer = producer.clone();
        let topic = args.topic.clone();
        async move {
            producer
                .send(ProducerRecord::new(topic, payload).key(order))
                .await
        }
    };
    for index in 0..args.demo_events {
        let order = format!("O{}", index % orders);
        let version = index / orders + 1;
        let status = STATUSES[usize::try_from(version - 1).unwrap_or(0) % STATUSES.len()];
        let event = OrderEvent {
            event_id: format!("M{index}"),
            order_id: order.clone(),
            version,
            status: status.to_owned(),
        };
        deliveries.push(send(order.clone(), event.encode()).await?);
        if index == 0 {
            // The outbox relay resends M0 after a lost acknowledgement.
            deliveries.push(send(order, event.encode()).await?);
        }
    }
    // A delayed event with an older version than the view already has.
    let late = OrderEvent {
        event_id: "M-late".to_owned(),
        order_id: "O0".to_owned(),
        version: 1,
        status: "placed".to_owned(),
    };
    deliveries.push(send("O0".to_owned(), late.encode()).await?);
    deliveries.push(send("O1".to_owned(), "{not an order event}".to_owned()).await?);
    for delivery in deliveries {
        delivery.await?;
    }
    producer.close().await?;
    println!(
        "produced {} demo events (plus a resend, a late event and a malformed one)",
        args.demo_events
    );
    Ok(())
}

fn group_config(args: &Args, group: &str) -> GroupConfig {
    let mut config = GroupConfig::new(args.bootstrap.clone(), group, [args.topic.clone()]);
    config.client.client_name = format!("search-projection-{group}");
    config
}

/// Resolves on Ctrl-C, or once no record arrived for the idle time.
async fn stop_signal(idle: Option<Duration>, last_record: Arc<Mutex<Instant>>) {
    let idle_out = async {
        let Some(idle) = idle else {
            return std::future::pending().await;
        };
        loop {
            let last = *last_record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.elapsed() >= idle {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = idle_out => {}
    }
}

fn idle(args: &Args) -> Option<Duration> {
    (args.idle_exit_seconds > 0).then(|| Duration::from_secs(args.idle_exit_seconds))
}

/// Applies one record to the projection. Database failures are not the
/// record's fault: they are retried here for a while instead of counting
/// towards the poison policy.
fn apply(projection: &Mutex<Projection>, record: &ConsumerRecord) -> Result<Applied, SinkError> {
    let event = OrderEvent::parse(record.value.as_deref().unwrap_or_default())?;
    let mut attempt = 0;
    loop {
        let result = projection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .apply(&event);
        match result {
            Err(SinkError::Database(error)) if attempt < 50 => {
                attempt += 1;
                tracing::warn!(%error, "projection database failed; retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            result => return result,
        }
    }
}

async fn run_search(args: Args, projection: Arc<Mutex<Projection>>) -> Result<(), ClientError> {
    let mut config = group_config(&args, "search");
    config.poison = PoisonPolicy::quarantine(args.dead_letter_topic.clone())
        .with_retries(2, Duration::from_millis(50));
    let mut consumer = GroupConsumer::connect(config).await?;
    let last_record = Arc::new(Mutex::new(Instant::now()));
    let seen = Arc::clone(&last_record);
    let handler = move |record: ConsumerRecord| {
        let projection = Arc::clone(&projection);
        let seen = Arc::clone(&seen);
        async move {
            *seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
            // The transaction commits before this returns Ok; `run`
            // commits the group offset only after that.
            let applied = apply(&projection, &record)?;
            tracing::debug!(
                partition = record.partition,
                offset = record.offset.0,
                ?applied,
                "search"
            );
            if let Applied::Duplicate { .. } = applied {
                tracing::info!(
                    partition = record.partition,
                    offset = record.offset.0,
                    "replayed event: already in the view, nothing changed"
                );
            }
            Ok::<(), SinkError>(())
        }
    };
    let result = consumer
        .run(handler, stop_signal(idle(&args), last_record))
        .await;
    consumer.close().await?;
    result
}

async fn run_analytics(args: Args) -> Result<BTreeMap<String, u64>, ClientError> {
    let mut consumer = GroupConsumer::connect(group_config(&args, "analytics")).await?;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let last_record = Arc::new(Mutex::new(Instant::now()));
    let stop = stop_signal(idle(&args), Arc::clone(&last_record));
    let mut stop = std::pin::pin!(stop);
    loop {
        let polled = tokio::select! {
            polled = consumer.poll() => polled?,
            () = &mut stop => break,
        };
        if !polled.records.is_empty() {
            *last_record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        }
        for record in &polled.records {
            let status = OrderEvent::parse(record.value.as_deref().unwrap_or_default())
                .map_or_else(|_| "unreadable".to_owned(), |event| event.status);
            *counts.entry(status).or_default() += 1;
            consumer.complete(record);
        }
        consumer.commit().await?;
    }
    consumer.close().await?;
    Ok(counts)
}
