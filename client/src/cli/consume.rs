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
use crate::format::RecordFormat;
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
    #[arg(long, conflicts_with = "format")]
    print_key: bool,
    /// What separates key and value with --print-key.
    #[arg(long, value_name = "SEP", default_value = "\\t")]
    key_separator: String,
    /// Print each record through this template, for example
    /// '%t/%p@%o %T %k=%s [%h]': %t topic, %p partition, %o offset, %T
    /// timestamp (ms since the epoch), %k key, %s value, %h headers
    /// (name=value,...), %v schema version, %% a percent sign; escapes \n
    /// \t \r \0 \\. A newline follows each record.
    #[arg(long, value_name = "TEMPLATE", value_parser = RecordFormat::parse)]
    format: Option<RecordFormat>,
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

impl OnGap {
    fn policy(self) -> OffsetOutOfRangePolicy {
        match self {
            OnGap::Error => OffsetOutOfRangePolicy::Error,
            OnGap::Reset => OffsetOutOfRangePolicy::ResetToEarliest,
        }
    }
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

/// How each record becomes a line.
enum Style {
    Json,
    Template(RecordFormat),
}

impl Style {
    fn of(global: &Global, args: &ConsumeArgs) -> Result<Style, ClientError> {
        match (&args.format, global.json) {
            (Some(_), true) => Err(ClientError::InvalidArgument(
                "--json and --format both say how to print records: choose one".to_owned(),
            )),
            (Some(format), false) => Ok(Style::Template(format.clone())),
            (None, true) => Ok(Style::Json),
            (None, false) if args.print_key => Ok(Style::Template(RecordFormat::key_and_value(
                &unescape(&args.key_separator),
            ))),
            (None, false) => Ok(Style::Template(RecordFormat::value())),
        }
    }

    fn line(&self, record: &ConsumerRecord) -> String {
        match self {
            Style::Json => record_json(record).to_string(),
            Style::Template(format) => format.render(record),
        }
    }
}

/// Writes records to stdout, one line each, up to `max`.
struct Printer {
    style: Style,
    max: Option<u64>,
    printed: u64,
}

/// Whether to read on after printing a poll's records.
enum Printed {
    /// Every record was printed and more are wanted.
    More,
    /// `--max` was reached, or stdout closed (for example piped into
    /// `head`).
    Done,
}

impl Printer {
    fn is_done(&self) -> bool {
        self.max.is_some_and(|max| self.printed >= max)
    }

    /// Prints records until `--max`, and flushes.
    fn print(&mut self, records: &[ConsumerRecord]) -> Printed {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for record in records {
            if self.is_done() {
                break;
            }
            if writeln!(out, "{}", self.style.line(record)).is_err() {
                return Printed::Done;
            }
            self.printed += 1;
        }
        if out.flush().is_err() {
            return Printed::Done;
        }
        if self.is_done() {
            Printed::Done
        } else {
            Printed::More
        }
    }
}

pub(crate) async fn run(global: &Global, args: ConsumeArgs) -> Result<(), ClientError> {
    let printer = Printer {
        style: Style::of(global, &args)?,
        max: args.max,
        printed: 0,
    };
    run_assigned(global, &args, printer).await
}

/// Reads the chosen partitions from the chosen start.
async fn run_assigned(
    global: &Global,
    args: &ConsumeArgs,
    mut printer: Printer,
) -> Result<(), ClientError> {
    let config = ConsumerConfig {
        client: global.client.clone(),
        offset_out_of_range: args.on_gap.policy(),
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
    loop {
        if printer.is_done() {
            return Ok(());
        }
        let polled = consumer.poll().await?;
        for notice in &polled.notices {
            eprintln!("notice: {notice}");
        }
        if let Printed::Done = printer.print(&polled.records) {
            return Ok(());
        }
        if !args.follow && consumer.caught_up() {
            return Ok(());
        }
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
    use clap::Parser;
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

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConsumeArgs,
    }

    fn parse(args: &[&str]) -> Result<ConsumeArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("consume").chain(args.iter().copied()))
            .map(|cli| cli.args)
    }

    fn style(json: bool, args: &[&str]) -> Result<Style, ClientError> {
        let global = Global {
            client: corelog_client::ClientConfig::default(),
            json,
        };
        Style::of(&global, &parse(args).unwrap())
    }

    #[test]
    fn text_is_the_value_or_key_and_value_or_the_template() {
        let record = record(b"k", b"v");
        let line = |args: &[&str]| style(false, args).unwrap().line(&record);
        assert_eq!(line(&["--topic", "t"]), "v");
        assert_eq!(line(&["--topic", "t", "--print-key"]), "k\tv");
        assert_eq!(
            line(&["--topic", "t", "--print-key", "--key-separator", "::"]),
            "k::v"
        );
        assert_eq!(line(&["--topic", "t", "--format", "%p:%o %s"]), "2:41 v");
        assert!(style(true, &["--topic", "t", "--format", "%s"]).is_err());
        assert!(parse(&["--topic", "t", "--format", "%s", "--print-key"]).is_err());
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
