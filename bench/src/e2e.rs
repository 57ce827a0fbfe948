//! `e2e` mode: producers and a consumer together; visibility latency is
//! measured from a record's acknowledgement to the consumer receiving it
//! (0 when the consumer saw it first — the broker wakes fetches at the same
//! commit that acknowledges the producer).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use corelog_client::{Consumer, ConsumerConfig, StartFrom};
use serde::Serialize;

use crate::load::{
    AckHook, LoadArgs, ProduceReport, ensure_topic, print_latency, print_produce, run_producers,
    value_id,
};
use crate::report::{Latency, latency_histogram};

#[derive(Debug, Args)]
pub struct E2eArgs {
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Debug, Serialize)]
struct E2eReport {
    produce: ProduceReport,
    consumed: u64,
    /// Acknowledgement to receipt.
    visibility: Latency,
}

/// What the producer and consumer sides tell each other.
#[derive(Default)]
struct Meeting {
    /// Acknowledged, not yet received: record id → ack time.
    acked: HashMap<u64, Instant>,
    /// Received before its acknowledgement arrived.
    early: HashMap<u64, Instant>,
    histogram: Option<hdrhistogram::Histogram<u64>>,
    consumed: u64,
}

impl Meeting {
    fn record(&mut self, micros: u64) {
        if let Some(histogram) = self.histogram.as_mut() {
            histogram.saturating_record(micros.max(1));
        }
    }
}

pub fn run(args: &E2eArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| error.to_string())?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &E2eArgs) -> Result<(), String> {
    ensure_topic(&args.load).await?;
    let meeting = Arc::new(Mutex::new(Meeting {
        histogram: Some(latency_histogram()),
        ..Meeting::default()
    }));
    let mut config = ConsumerConfig::new(args.load.bootstrap.clone());
    config.client = args.load.client_config()?;
    config.fetch_max_wait = Duration::from_millis(500);
    let mut consumer = Consumer::connect(config)
        .await
        .map_err(|error| error.to_string())?;
    consumer
        .assign_topic(&args.load.topic, StartFrom::Latest)
        .await
        .map_err(|error| error.to_string())?;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer_meeting = meeting.clone();
    let consumer_done = done.clone();
    let consumer_task = tokio::spawn(async move {
        while !consumer_done.load(std::sync::atomic::Ordering::Relaxed) {
            let polled = consumer.poll().await.map_err(|error| error.to_string())?;
            let received = Instant::now();
            let mut meeting = consumer_meeting.lock().map_err(|_| "poisoned".to_owned())?;
            for record in polled.records {
                let Some(id) = record.value.as_deref().and_then(value_id) else {
                    continue;
                };
                meeting.consumed += 1;
                match meeting.acked.remove(&id) {
                    Some(acked) => {
                        let micros =
                            u64::try_from(received.saturating_duration_since(acked).as_micros())
                                .unwrap_or(u64::MAX);
                        meeting.record(micros);
                    }
                    None => {
                        meeting.early.insert(id, received);
                    }
                }
            }
        }
        Ok::<(), String>(())
    });
    let ack_meeting = meeting.clone();
    let on_ack: AckHook = Arc::new(move |id, acked| {
        if let Ok(mut meeting) = ack_meeting.lock() {
            if meeting.early.remove(&id).is_some() {
                meeting.record(0);
            } else {
                meeting.acked.insert(id, acked);
            }
        }
    });
    let produce = run_producers(&args.load, "e2e", Some(on_ack)).await?;
    // Let the consumer catch up with the last acknowledgements.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let caught_up = meeting
            .lock()
            .map(|meeting| meeting.acked.is_empty())
            .unwrap_or(true);
        if caught_up {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    consumer_task.await.map_err(|error| error.to_string())??;
    let (visibility, consumed, missing) = {
        let meeting = meeting.lock().map_err(|_| "poisoned".to_owned())?;
        let histogram = meeting.histogram.as_ref().ok_or("no histogram")?;
        (
            Latency::of(histogram),
            meeting.consumed,
            meeting.acked.len(),
        )
    };
    let report = E2eReport {
        produce,
        consumed,
        visibility,
    };
    if args.load.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?
        );
    } else {
        print_produce(
            &format!(
                "e2e: {} B records, {} partitions, producer and consumer together",
                args.load.record_bytes, args.load.partitions
            ),
            &report.produce,
        );
        println!("  consumed {} records", report.consumed);
        print_latency("  visibility (ack to receipt)", &report.visibility);
    }
    if missing > 0 {
        return Err(format!(
            "{missing} acknowledged records were not received within 10 s"
        ));
    }
    Ok(())
}
