//! `corelog produce`: one record per line of stdin, then a summary.
//!
//! Lines are sent as they are read; a separate task awaits the delivery
//! handles in order, so memory stays bounded by the producer's buffer and
//! the channel between the two.
//!
//! Nothing is half-reported. A line the client refuses (no key separator,
//! too large, not UTF-8) stops the reading before it is sent; a record the
//! broker refuses stops the reading at the next line. Either way the lines
//! already sent are awaited, and the summary on stderr names the lines
//! stored, the lines not stored and where the input stopped being read;
//! the exit code is 1. Only when every line was stored does it print the
//! success summary.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use clap::{Args, ValueEnum};
use corelog_client::{
    Acks, ClientError, Compression, DeliveryFuture, Producer, ProducerConfig, ProducerRecord,
    TimestampMs,
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use crate::Global;
use crate::lines::LineSet;
use crate::numbers;
use crate::output::{plural, table, unescape};
use crate::time::parse_time_ms;

/// Delivery handles queued between the reading loop and the collector.
const PENDING_DELIVERIES_MAX: usize = 4096;

/// The header name the record's schema version travels in (C12).
const SCHEMA_HEADER: &str = "schema";

#[derive(Debug, Args)]
pub(crate) struct ProduceArgs {
    /// Topic to append to.
    #[arg(long)]
    topic: String,
    /// Split each line into key and value at the first SEP (escapes such
    /// as '\t' are understood). Without it, lines are values without keys.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Send every record to this partition instead of choosing by key.
    #[arg(long, value_name = "P", value_parser = numbers::partition_index, allow_negative_numbers = true)]
    partition: Option<u32>,
    /// Schema version to stamp on every record.
    #[arg(long, value_name = "VERSION", value_parser = numbers::schema_version, allow_negative_numbers = true)]
    schema: Option<u32>,
    /// A header on every record, as NAME=VALUE (repeat for several; the
    /// value may be empty). The name "schema" is reserved: use --schema.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// The creation time of every record: milliseconds since the epoch, or
    /// RFC 3339 such as 2024-05-01T12:00:00Z. Default: when each line is
    /// read. Topics with append-time timestamps use the broker's instead.
    #[arg(long, value_name = "TIME", value_parser = parse_time_ms)]
    timestamp: Option<i64>,
    /// When the broker acknowledges.
    #[arg(long, value_enum, default_value_t = AcksArg::Quorum)]
    acks: AcksArg,
    /// Batch compression.
    #[arg(long, value_enum, default_value_t = CompressionArg::None)]
    compression: CompressionArg,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum AcksArg {
    /// Fsynced on a majority of replicas (the default).
    Quorum,
    /// Fsynced on the leader only.
    Leader,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum CompressionArg {
    None,
    Lz4,
    Zstd,
}

/// `NAME=VALUE`, split at the first `=`.
fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((SCHEMA_HEADER, _)) => Err(format!(
            "the header name {SCHEMA_HEADER:?} is reserved for the schema version: use --schema"
        )),
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!(
            "{text:?} is not NAME=VALUE, for example source=billing"
        )),
    }
}

/// Whether every line was stored; the caller sets the exit code.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every line read was stored; the summary is on stdout.
    AllStored,
    /// Some line was refused or not stored; the error and what was and was
    /// not sent are on stderr.
    Incomplete,
}

/// What was stored in one partition.
#[derive(Debug, Default)]
struct PartitionSummary {
    records: u64,
    first_offset: Option<u64>,
    last_offset: Option<u64>,
}

/// What came of the lines sent, from their delivery handles.
#[derive(Debug, Default)]
struct Deliveries {
    stored: LineSet,
    failed: LineSet,
    /// The earliest line whose record was not stored, and why.
    first_failure: Option<(u64, ClientError)>,
    partitions: BTreeMap<u32, PartitionSummary>,
}

/// Where reading the input ended.
#[derive(Debug)]
enum ReadEnd {
    /// Every line was read and sent.
    EndOfInput,
    /// A record already sent was not stored, so reading stopped; lines
    /// after this one were not sent.
    StoppedAfter(u64),
    /// This line was refused before it was sent; it and the lines after it
    /// were not sent.
    Refused { line: u64, error: ClientError },
}

/// A line's record, sent, and its line number.
struct Sent {
    line: u64,
    delivery: DeliveryFuture,
}

/// Splits a line into key and value at the first separator.
fn split_line(line: &str, separator: Option<&str>) -> Result<(Option<Bytes>, Bytes), String> {
    match separator {
        None => Ok((None, Bytes::copy_from_slice(line.as_bytes()))),
        Some(separator) => match line.split_once(separator) {
            Some((key, value)) => Ok((
                Some(Bytes::copy_from_slice(key.as_bytes())),
                Bytes::copy_from_slice(value.as_bytes()),
            )),
            None => Err(format!(
                "the line has no key separator {separator:?}: {}",
                line.chars().take(80).collect::<String>()
            )),
        },
    }
}

pub(crate) async fn run(global: &Global, args: ProduceArgs) -> Result<Outcome, ClientError> {
    let config = ProducerConfig {
        client: global.client.clone(),
        acks: match args.acks {
            AcksArg::Quorum => Acks::Quorum,
            AcksArg::Leader => Acks::Leader,
        },
        compression: match args.compression {
            CompressionArg::None => Compression::None,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd,
        },
        ..ProducerConfig::default()
    };
    let producer = Producer::connect(config).await?;
    let partition_count = producer.prepare_topic(&args.topic).await?;
    // Checked before reading anything, so a wrong partition costs no line.
    if let Some(partition) = args.partition
        && partition >= partition_count
    {
        return Err(ClientError::UnknownPartition {
            topic: args.topic.clone(),
            partition,
            partition_count,
        });
    }
    let separator = args.key_separator.as_deref().map(unescape);
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, receiver) = mpsc::channel::<Sent>(PENDING_DELIVERIES_MAX);
    let collector = tokio::spawn(collect(receiver, Arc::clone(&stop)));
    let read_end = read_and_send(&producer, &args, separator.as_deref(), sent, &stop).await;
    producer.close().await?;
    let deliveries = collector
        .await
        .map_err(|error| ClientError::ProducerClosed {
            reason: Some(format!("the delivery collector failed: {error}")),
        })?;
    let complete = matches!(read_end, ReadEnd::EndOfInput) && deliveries.failed.is_empty();
    if global.json {
        println!("{}", summary_json(&args.topic, &deliveries, &read_end));
    }
    if complete {
        if !global.json {
            print!("{}", success_text(&args.topic, &deliveries));
        }
        return Ok(Outcome::AllStored);
    }
    if let Some((line, error)) = &deliveries.first_failure {
        crate::report_with(&format!("line {line} was not stored: "), error);
    }
    if let ReadEnd::Refused { line, error } = &read_end {
        crate::report_with(&format!("line {line}: "), error);
    }
    eprintln!("{}", incomplete_text(&args.topic, &deliveries, &read_end));
    Ok(Outcome::Incomplete)
}

async fn read_and_send(
    producer: &Producer,
    args: &ProduceArgs,
    separator: Option<&str>,
    sent: mpsc::Sender<Sent>,
    stop: &AtomicBool,
) -> ReadEnd {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut line_number = 0_u64;
    loop {
        if stop.load(Ordering::Acquire) {
            return ReadEnd::StoppedAfter(line_number);
        }
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => return ReadEnd::EndOfInput,
            Err(error) => {
                return ReadEnd::Refused {
                    line: line_number + 1,
                    error: ClientError::InvalidArgument(format!(
                        "cannot read it from stdin: {error} (input must be UTF-8 lines)"
                    )),
                };
            }
        };
        line_number += 1;
        let record = match record_of(args, &line, separator) {
            Ok(record) => record,
            Err(error) => {
                return ReadEnd::Refused {
                    line: line_number,
                    error,
                };
            }
        };
        let delivery = match producer.send(record).await {
            Ok(delivery) => delivery,
            Err(error) => {
                return ReadEnd::Refused {
                    line: line_number,
                    error,
                };
            }
        };
        let sent_line = Sent {
            line: line_number,
            delivery,
        };
        if sent.send(sent_line).await.is_err() {
            // The collector is gone (it only stops when this side does):
            // nothing more can be accounted for.
            return ReadEnd::StoppedAfter(line_number);
        }
    }
}

/// The record of one input line.
fn record_of(
    args: &ProduceArgs,
    line: &str,
    separator: Option<&str>,
) -> Result<ProducerRecord, ClientError> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let (key, value) = split_line(line, separator).map_err(ClientError::InvalidArgument)?;
    let mut record = ProducerRecord::new(args.topic.clone(), value);
    record.key = key;
    record.partition = args.partition;
    record.schema = args.schema.map(corelog_client::SchemaVersion);
    record.timestamp = args.timestamp.map(TimestampMs);
    for (name, value) in &args.headers {
        record = record.header(name.clone(), Bytes::copy_from_slice(value.as_bytes()));
    }
    Ok(record)
}

async fn collect(mut receiver: mpsc::Receiver<Sent>, stop: Arc<AtomicBool>) -> Deliveries {
    let mut deliveries = Deliveries::default();
    while let Some(Sent { line, delivery }) = receiver.recv().await {
        match delivery.await {
            Ok(delivered) => {
                deliveries.stored.insert(line);
                let partition = deliveries
                    .partitions
                    .entry(delivered.partition)
                    .or_default();
                partition.records += 1;
                let offset = delivered.offset.0;
                partition.first_offset =
                    Some(partition.first_offset.map_or(offset, |o| o.min(offset)));
                partition.last_offset =
                    Some(partition.last_offset.map_or(offset, |o| o.max(offset)));
            }
            Err(error) => {
                // The reader sends no more lines once it sees this.
                stop.store(true, Ordering::Release);
                deliveries.failed.insert(line);
                if deliveries
                    .first_failure
                    .as_ref()
                    .is_none_or(|(first, _)| line < *first)
                {
                    deliveries.first_failure = Some((line, error));
                }
            }
        }
    }
    deliveries
}

fn success_text(topic: &str, deliveries: &Deliveries) -> String {
    let mut text = format!(
        "produced {} to {topic}\n",
        plural(deliveries.stored.len(), "record", "records")
    );
    if deliveries.partitions.is_empty() {
        return text;
    }
    let rows: Vec<Vec<String>> = deliveries
        .partitions
        .iter()
        .map(|(partition, stored)| {
            let offset = |o: Option<u64>| o.map_or_else(|| "-".to_owned(), |o| o.to_string());
            vec![
                partition.to_string(),
                stored.records.to_string(),
                offset(stored.first_offset),
                offset(stored.last_offset),
            ]
        })
        .collect();
    text.push_str(&table(
        &["PARTITION", "RECORDS", "FIRST-OFFSET", "LAST-OFFSET"],
        &rows,
    ));
    text
}

/// What was and was not sent, in one sentence, for a run that stopped
/// short: `stored 2 records (lines 1-2) to orders; line 3 and the input
/// after it were not sent`.
fn incomplete_text(topic: &str, deliveries: &Deliveries, read_end: &ReadEnd) -> String {
    let stored = deliveries.stored.len();
    let mut text = format!("stored {}", plural(stored, "record", "records"));
    if stored > 0 {
        text.push_str(&format!(" ({})", deliveries.stored));
    }
    text.push_str(&format!(" to {topic}"));
    if !deliveries.failed.is_empty() {
        text.push_str(&format!("; not stored: {}", deliveries.failed));
    }
    match read_end {
        ReadEnd::EndOfInput => {}
        ReadEnd::StoppedAfter(line) => {
            text.push_str(&format!("; the input after line {line} was not sent"));
        }
        ReadEnd::Refused { line, .. } => {
            text.push_str(&format!(
                "; line {line} and the input after it were not sent"
            ));
        }
    }
    text
}

fn summary_json(topic: &str, deliveries: &Deliveries, read_end: &ReadEnd) -> serde_json::Value {
    let partitions: Vec<serde_json::Value> = deliveries
        .partitions
        .iter()
        .map(|(partition, stored)| {
            json!({
                "partition": partition,
                "records": stored.records,
                "first_offset": stored.first_offset,
                "last_offset": stored.last_offset,
            })
        })
        .collect();
    let (error_line, error) = match read_end {
        ReadEnd::Refused { line, error } => (Some(*line), Some(error.to_string())),
        _ => match &deliveries.first_failure {
            Some((line, error)) => (Some(*line), Some(error.to_string())),
            None => (None, None),
        },
    };
    let not_sent_from = match read_end {
        ReadEnd::EndOfInput => None,
        ReadEnd::StoppedAfter(line) => Some(line + 1),
        ReadEnd::Refused { line, .. } => Some(*line),
    };
    json!({
        "topic": topic,
        "records": deliveries.stored.len(),
        "failed": deliveries.failed.len(),
        "partitions": partitions,
        "stored_lines": deliveries.stored.ranges(),
        "failed_lines": deliveries.failed.ranges(),
        "error_line": error_line,
        "first_error": error,
        "not_sent_from_line": not_sent_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_the_first_separator() {
        assert_eq!(
            split_line("k\tv\tw", Some("\t")),
            Ok((Some(Bytes::from_static(b"k")), Bytes::from_static(b"v\tw")))
        );
        assert_eq!(
            split_line("just a value", None),
            Ok((None, Bytes::from_static(b"just a value")))
        );
        assert_eq!(
            split_line("\tv", Some("\t")),
            Ok((Some(Bytes::new()), Bytes::from_static(b"v")))
        );
        let error = split_line("no separator", Some("::")).unwrap_err();
        assert!(error.contains("no key separator"), "{error}");
    }

    #[test]
    fn headers_are_name_equals_value_and_schema_is_reserved() {
        assert_eq!(
            parse_header("trace=a=b"),
            Ok(("trace".to_owned(), "a=b".to_owned()))
        );
        assert_eq!(
            parse_header("empty="),
            Ok(("empty".to_owned(), String::new()))
        );
        assert!(parse_header("=v").unwrap_err().contains("NAME=VALUE"));
        assert!(parse_header("novalue").unwrap_err().contains("NAME=VALUE"));
        assert!(parse_header("schema=3").unwrap_err().contains("--schema"));
    }

    fn deliveries(stored: &[u64], failed: &[u64]) -> Deliveries {
        let mut deliveries = Deliveries::default();
        for &line in stored {
            deliveries.stored.insert(line);
        }
        for &line in failed {
            deliveries.failed.insert(line);
        }
        deliveries
    }

    #[test]
    fn a_refused_line_is_reported_with_what_was_stored_before_it() {
        let refused = ReadEnd::Refused {
            line: 3,
            error: ClientError::InvalidArgument("no separator".to_owned()),
        };
        assert_eq!(
            incomplete_text("orders", &deliveries(&[1, 2], &[]), &refused),
            "stored 2 records (lines 1-2) to orders; line 3 and the input after it were not sent"
        );
        let first = ReadEnd::Refused {
            line: 1,
            error: ClientError::InvalidArgument("no separator".to_owned()),
        };
        assert_eq!(
            incomplete_text("orders", &deliveries(&[], &[]), &first),
            "stored 0 records to orders; line 1 and the input after it were not sent"
        );
    }

    #[test]
    fn records_the_broker_refused_are_named_by_line() {
        assert_eq!(
            incomplete_text(
                "orders",
                &deliveries(&[1, 3], &[2, 4, 5]),
                &ReadEnd::StoppedAfter(5)
            ),
            "stored 2 records (lines 1, 3) to orders; not stored: lines 2, 4-5; the input after line 5 was not sent"
        );
        assert_eq!(
            incomplete_text("orders", &deliveries(&[], &[1]), &ReadEnd::EndOfInput),
            "stored 0 records to orders; not stored: line 1"
        );
    }

    #[test]
    fn the_success_summary_counts_in_words_that_agree() {
        let mut one = deliveries(&[1], &[]);
        one.partitions.insert(
            0,
            PartitionSummary {
                records: 1,
                first_offset: Some(7),
                last_offset: Some(7),
            },
        );
        let text = success_text("orders", &one);
        assert!(text.starts_with("produced 1 record to orders\n"), "{text}");
        let text = success_text("orders", &deliveries(&[1, 2], &[]));
        assert_eq!(text, "produced 2 records to orders\n");
    }
}
