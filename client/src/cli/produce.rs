//! `corelog produce`: one record per line of stdin, then a summary.
//!
//! Lines are sent as they are read; a separate task awaits the delivery
//! handles in order, so memory stays bounded by the producer's buffer and
//! the channel between the two. The exit code is non-zero if any record
//! failed, and the summary says how many were stored.

use std::collections::BTreeMap;

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
use crate::numbers;
use crate::output::{table, unescape};
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

/// What was stored in one partition.
#[derive(Debug, Default)]
struct PartitionSummary {
    records: u64,
    first_offset: Option<u64>,
    last_offset: Option<u64>,
}

#[derive(Debug, Default)]
struct Summary {
    records: u64,
    failed: u64,
    first_error: Option<ClientError>,
    partitions: BTreeMap<u32, PartitionSummary>,
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

pub(crate) async fn run(global: &Global, args: ProduceArgs) -> Result<(), ClientError> {
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
    producer.prepare_topic(&args.topic).await?;
    let separator = args.key_separator.as_deref().map(unescape);
    let (handles, receiver) = mpsc::channel::<DeliveryFuture>(PENDING_DELIVERIES_MAX);
    let collector = tokio::spawn(collect(receiver));
    let read_result = read_and_send(&producer, &args, separator.as_deref(), handles).await;
    producer.close().await?;
    let summary = collector
        .await
        .map_err(|error| ClientError::ProducerClosed {
            reason: Some(format!("the delivery collector failed: {error}")),
        })?;
    print_summary(global, &args.topic, &summary);
    read_result?;
    match summary.first_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

async fn read_and_send(
    producer: &Producer,
    args: &ProduceArgs,
    separator: Option<&str>,
    handles: mpsc::Sender<DeliveryFuture>,
) -> Result<(), ClientError> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut line_number = 0_u64;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(()),
            Err(error) => {
                return Err(ClientError::InvalidArgument(format!(
                    "cannot read stdin after line {line_number}: {error} (input must be UTF-8 lines)"
                )));
            }
        };
        line_number += 1;
        let line = line.strip_suffix('\r').unwrap_or(&line);
        let (key, value) = split_line(line, separator)
            .map_err(|why| ClientError::InvalidArgument(format!("line {line_number}: {why}")))?;
        let mut record = ProducerRecord::new(args.topic.clone(), value);
        record.key = key;
        record.partition = args.partition;
        if let Some(version) = args.schema {
            record = record.schema(version);
        }
        record.timestamp = args.timestamp.map(TimestampMs);
        for (name, value) in &args.headers {
            record = record.header(name.clone(), Bytes::copy_from_slice(value.as_bytes()));
        }
        let delivery = producer.send(record).await?;
        if handles.send(delivery).await.is_err() {
            return Ok(());
        }
    }
}

async fn collect(mut receiver: mpsc::Receiver<DeliveryFuture>) -> Summary {
    let mut summary = Summary::default();
    while let Some(delivery) = receiver.recv().await {
        match delivery.await {
            Ok(delivered) => {
                summary.records += 1;
                let partition = summary.partitions.entry(delivered.partition).or_default();
                partition.records += 1;
                let offset = delivered.offset.0;
                partition.first_offset =
                    Some(partition.first_offset.map_or(offset, |o| o.min(offset)));
                partition.last_offset =
                    Some(partition.last_offset.map_or(offset, |o| o.max(offset)));
            }
            Err(error) => {
                summary.failed += 1;
                summary.first_error.get_or_insert(error);
            }
        }
    }
    summary
}

fn print_summary(global: &Global, topic: &str, summary: &Summary) {
    if global.json {
        let partitions: Vec<serde_json::Value> = summary
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
        let error = summary.first_error.as_ref().map(ToString::to_string);
        println!(
            "{}",
            json!({
                "topic": topic,
                "records": summary.records,
                "failed": summary.failed,
                "partitions": partitions,
                "first_error": error,
            })
        );
        return;
    }
    println!(
        "produced {} records to {topic}{}",
        summary.records,
        if summary.failed > 0 {
            format!(" ({} failed)", summary.failed)
        } else {
            String::new()
        }
    );
    if summary.partitions.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = summary
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
    print!(
        "{}",
        table(
            &["PARTITION", "RECORDS", "FIRST-OFFSET", "LAST-OFFSET"],
            &rows
        )
    );
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
}
