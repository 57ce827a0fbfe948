//! `corelog consume`: print records of a topic.
//!
//! Without `--follow` it stops once it has read up to each partition's high
//! watermark as of its last fetch; with it, it waits for new records until
//! interrupted. The default start is the beginning without `--follow` and
//! the end with it.

use std::io::Write;

use clap::{Args, ValueEnum};
use corelog_client::{
    ClientError, Consumer, ConsumerConfig, ConsumerRecord, Offset, OffsetOutOfRangePolicy,
    StartFrom, TimestampMs,
};
use serde_json::json;

use crate::Global;
use crate::numbers;
use crate::output::{json_bytes, unescape};
use crate::time::parse_time_ms;

#[derive(Debug, Args)]
pub(crate) struct ConsumeArgs {
    /// Topic to read.
    #[arg(long)]
    topic: String,
    /// Read only these partitions (repeat for several); default all.
    #[arg(
        long = "partition",
        value_name = "P",
        value_parser = numbers::partition_index,
        allow_negative_numbers = true
    )]
    partitions: Vec<u32>,
    /// Start at the oldest record still stored.
    #[arg(long, conflicts_with_all = ["offset", "time"])]
    from_beginning: bool,
    /// Start at this offset (in every partition read).
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "time",
        value_parser = numbers::offset,
        allow_negative_numbers = true
    )]
    offset: Option<u64>,
    /// Start at the first record at or after this time: milliseconds since
    /// the epoch, or RFC 3339 such as 2024-05-01T12:00:00Z.
    #[arg(long, value_parser = parse_time_ms)]
    time: Option<i64>,
    /// Keep waiting for new records instead of stopping at the end.
    #[arg(long)]
    follow: bool,
    /// Stop after this many records.
    #[arg(
        long,
        value_name = "N",
        value_parser = numbers::record_count,
        allow_negative_numbers = true
    )]
    max: Option<u64>,
    /// Print the key before the value.
    #[arg(long)]
    print_key: bool,
    /// What separates key and value with --print-key.
    #[arg(long, value_name = "SEP", default_value = "\\t")]
    key_separator: String,
    /// When the position was deleted by retention: fail with the gap's
    /// details, or jump to the log start and report the jump on stderr.
    #[arg(long, value_enum, default_value_t = OnGap::Error)]
    on_gap: OnGap,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OnGap {
    /// Stop with an error that describes what was deleted.
    Error,
    /// Continue from the log start, reporting the jump.
    Reset,
}

impl ConsumeArgs {
    fn start(&self) -> StartFrom {
        if self.from_beginning {
            StartFrom::Earliest
        } else if let Some(offset) = self.offset {
            StartFrom::Offset(Offset(offset))
        } else if let Some(time) = self.time {
            StartFrom::Timestamp(TimestampMs(time))
        } else if self.follow {
            StartFrom::Latest
        } else {
            StartFrom::Earliest
        }
    }
}

pub(crate) async fn run(global: &Global, args: ConsumeArgs) -> Result<(), ClientError> {
    let config = ConsumerConfig {
        client: global.client.clone(),
        offset_out_of_range: match args.on_gap {
            OnGap::Error => OffsetOutOfRangePolicy::Error,
            OnGap::Reset => OffsetOutOfRangePolicy::ResetToEarliest,
        },
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(config).await?;
    let start = args.start();
    if args.partitions.is_empty() {
        consumer.assign_topic(&args.topic, start).await?;
    } else {
        consumer
            .assign_partitions(&args.topic, &args.partitions, start)
            .await?;
    }
    let separator = unescape(&args.key_separator);
    let mut printed = 0_u64;
    let stdout = std::io::stdout();
    loop {
        if args.max.is_some_and(|max| printed >= max) {
            return Ok(());
        }
        let polled = consumer.poll().await?;
        for notice in &polled.notices {
            eprintln!("notice: {notice}");
        }
        let mut out = stdout.lock();
        for record in &polled.records {
            if args.max.is_some_and(|max| printed >= max) {
                break;
            }
            let line = if global.json {
                record_json(record).to_string()
            } else {
                record_text(record, args.print_key.then_some(separator.as_str()))
            };
            if writeln!(out, "{line}").is_err() {
                // stdout closed (for example piped into `head`): done.
                return Ok(());
            }
            printed += 1;
        }
        if out.flush().is_err() {
            return Ok(());
        }
        drop(out);
        if !args.follow && consumer.caught_up() {
            return Ok(());
        }
    }
}

/// One record as a line of text: the value, or key, separator and value.
fn record_text(record: &ConsumerRecord, key_separator: Option<&str>) -> String {
    let text = |bytes: &Option<bytes::Bytes>| {
        bytes
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default()
            .into_owned()
    };
    match key_separator {
        Some(separator) => format!("{}{separator}{}", text(&record.key), text(&record.value)),
        None => text(&record.value),
    }
}

/// One record as a JSON object; bytes that are not UTF-8 are base64, and
/// `key_encoding` / `value_encoding` say which.
fn record_json(record: &ConsumerRecord) -> serde_json::Value {
    let (key, key_encoding) = json_bytes(record.key.as_deref());
    let (value, value_encoding) = json_bytes(record.value.as_deref());
    let headers: Vec<serde_json::Value> = record
        .headers
        .iter()
        .map(|header| {
            let (value, encoding) = json_bytes(header.value.as_deref());
            json!({"key": header.key, "value": value, "value_encoding": encoding})
        })
        .collect();
    json!({
        "topic": &*record.topic,
        "partition": record.partition,
        "offset": record.offset.0,
        "timestamp": record.timestamp.0,
        "key": key,
        "key_encoding": key_encoding,
        "value": value,
        "value_encoding": value_encoding,
        "schema": record.schema.map(|schema| schema.0),
        "headers": headers,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use corelog_client::SchemaVersion;

    use super::*;

    fn record(key: &'static [u8], value: &'static [u8]) -> ConsumerRecord {
        ConsumerRecord {
            topic: Arc::from("t"),
            partition: 2,
            offset: Offset(41),
            timestamp: TimestampMs(1_700_000_000_000),
            key: Some(Bytes::from_static(key)),
            value: Some(Bytes::from_static(value)),
            headers: Vec::new(),
            schema: Some(SchemaVersion(3)),
        }
    }

    #[test]
    fn text_is_the_value_or_key_and_value() {
        let record = record(b"k", b"v");
        assert_eq!(record_text(&record, None), "v");
        assert_eq!(record_text(&record, Some("\t")), "k\tv");
    }

    #[test]
    fn json_has_every_field_and_base64_for_binary_values() {
        let value = record_json(&record(b"k", &[0xFF, 0x00]));
        assert_eq!(value["partition"], 2);
        assert_eq!(value["offset"], 41);
        assert_eq!(value["timestamp"], 1_700_000_000_000_i64);
        assert_eq!(value["key"], "k");
        assert_eq!(value["key_encoding"], "utf-8");
        assert_eq!(value["value"], "/wA=");
        assert_eq!(value["value_encoding"], "base64");
        assert_eq!(value["schema"], 3);
    }
}
