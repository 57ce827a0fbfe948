//! `corelog consume`: print records of a topic.
//!
//! Without `--follow` it stops once it has read up to each partition's high
//! watermark as of its last fetch; with it, it waits for new records until
//! interrupted. The default start is the beginning without `--follow` and
//! the end with it.
//!
//! With `--group G` it reads as a member of consumer group G: the group's
//! coordinator assigns it partitions, it starts at the group's committed
//! offsets (the start options apply only where the group has none), it
//! commits what it has printed, and it leaves the group when it stops —
//! at the end, after `--max`, or on Ctrl-C or SIGTERM.

use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};
use corelog_client::{
    ClientError, Consumer, ConsumerConfig, ConsumerRecord, GroupConfig, GroupConsumer, Offset,
    OffsetOutOfRangePolicy, StartFrom, TimestampMs,
};
use serde_json::json;

use crate::Global;
use crate::format::RecordFormat;
use crate::numbers;
use crate::output::{json_bytes, unescape};
use crate::time::parse_time_ms;

/// How often a group member commits what it has printed, besides when it
/// stops.
const GROUP_COMMIT_INTERVAL: Duration = Duration::from_secs(1);

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
    /// Read as a member of this consumer group: the group assigns the
    /// partitions, reading starts at its committed offsets, what is
    /// printed is committed, and the member leaves when it stops.
    #[arg(long, value_name = "GROUP", conflicts_with_all = ["partitions", "offset"])]
    group: Option<String>,
    /// Start at the oldest record still stored (with --group: where the
    /// group has no committed offset).
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
    /// the epoch, or RFC 3339 such as 2024-05-01T12:00:00Z (with --group:
    /// where the group has no committed offset).
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
    /// `head`): this many of the poll's records were printed.
    Done(usize),
}

impl Printer {
    fn is_done(&self) -> bool {
        self.max.is_some_and(|max| self.printed >= max)
    }

    /// Prints records until `--max`, and flushes: a record counts as
    /// printed (and may be committed) only once it is out.
    fn print(&mut self, records: &[ConsumerRecord]) -> Printed {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let mut written = 0;
        for record in records {
            if self.is_done() {
                break;
            }
            // Stdout is line-buffered: each line is out once written, so
            // the lines before a failed one count as printed.
            if writeln!(out, "{}", self.style.line(record)).is_err() {
                return Printed::Done(written);
            }
            written += 1;
            self.printed += 1;
        }
        if out.flush().is_err() {
            return Printed::Done(written);
        }
        if self.is_done() {
            Printed::Done(written)
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
    match args.group.clone() {
        Some(group) => run_member(global, &args, &group, printer).await,
        None => run_assigned(global, &args, printer).await,
    }
}

/// Reads the chosen partitions from the chosen start, without a group.
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
        if let Printed::Done(_) = printer.print(&polled.records) {
            return Ok(());
        }
        if !args.follow && consumer.caught_up() {
            return Ok(());
        }
    }
}

/// Reads as a member of `group` until the end (or forever with
/// `--follow`), `--max`, or an interruption; then commits what was printed
/// and leaves.
async fn run_member(
    global: &Global,
    args: &ConsumeArgs,
    group: &str,
    mut printer: Printer,
) -> Result<(), ClientError> {
    let config = GroupConfig {
        start_from: args.start(),
        offset_out_of_range: args.on_gap.policy(),
        auto_commit: true,
        commit_interval: GROUP_COMMIT_INTERVAL,
        ..GroupConfig::with_client(global.client.clone(), group, [args.topic.clone()])
    };
    let retry_backoff = config.retry_backoff;
    let mut interrupted = std::pin::pin!(interrupted());
    let mut member = GroupConsumer::connect(config).await?;
    // A broker that stays away fails every poll: say so once, not ten
    // times a second.
    let mut last_notice = String::new();
    let result = loop {
        if printer.is_done() {
            break Ok(());
        }
        // Joined before this poll: the poll then applies an assignment at
        // least that recent, so an empty one means none was given.
        let joined = member.generation().is_some();
        let polled = tokio::select! {
            polled = member.poll() => polled,
            () = &mut interrupted => break Ok(()),
        };
        let polled = match polled {
            Ok(polled) => polled,
            Err(error) if error.is_retriable() => {
                let notice = format!("notice: {error}; trying again");
                if notice != last_notice {
                    eprintln!("{notice}");
                    last_notice = notice;
                }
                tokio::time::sleep(retry_backoff).await;
                continue;
            }
            Err(error) => break Err(error),
        };
        for event in &polled.events {
            eprintln!("notice: group {group}: {event}");
        }
        let printed = printer.print(&polled.records);
        let complete = match printed {
            Printed::More => polled.records.len(),
            Printed::Done(count) => count,
        };
        for record in &polled.records[..complete] {
            member.complete(record);
        }
        if let Printed::Done(_) = printed {
            break Ok(());
        }
        if !args.follow && joined && member.assignment().is_empty() {
            eprintln!(
                "notice: group {group} gave this member no partitions of {}: its other members have them all",
                args.topic
            );
            break Ok(());
        }
        if !args.follow && joined && member.caught_up() {
            break Ok(());
        }
    };
    // Commits the completed prefix and leaves, whatever ended the loop.
    let closed = member.close().await;
    result.and(closed)
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, so that a group member can
/// commit and leave before it exits. Never resolves if the handlers cannot
/// be installed: the default action (exit) then applies.
async fn interrupted() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::debug!(%error, "cannot handle SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::debug!(%error, "cannot handle SIGINT");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = terminate => {}
        () = interrupt => {}
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
    fn a_group_chooses_the_partitions_and_the_offsets() {
        assert!(parse(&["--topic", "t", "--group", "g", "--partition", "1"]).is_err());
        assert!(parse(&["--topic", "t", "--group", "g", "--offset", "5"]).is_err());
        let args = parse(&["--topic", "t", "--group", "g", "--follow"]).unwrap();
        assert_eq!(args.group.as_deref(), Some("g"));
        assert_eq!(args.start(), StartFrom::Latest);
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
