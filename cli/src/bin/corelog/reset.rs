//! `corelog group reset-offsets`: move a group's committed offsets, with a
//! reason that goes to the audit log.
//!
//! The broker chooses the offsets for `--to-earliest`, `--to-latest`,
//! `--to-offset` and `--to-time` (`--by-duration` is a time counted back
//! from now). For `--shift-by` and `--to-group` this client reads the
//! committed offsets first and sends each partition's target; either way
//! it is one request, so one audit record holds every partition's offsets
//! before and after, and a group with members refuses all of it.

use std::time::Duration;

use clap::{ArgGroup, Args};
use corelog_client::admin::{
    GroupDescription, PartitionLag, PartitionOffset, ResetOffsets, ResetOutcome, ResetTarget,
};
use corelog_client::{Admin, ClientError, ErrorCode};
use serde_json::json;

use crate::Global;
use crate::numbers;
use crate::output::table;
use crate::time::{now_ms, parse_duration, parse_time_ms};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args([
    "to_earliest", "to_latest", "to_offset", "to_time", "by_duration", "shift_by", "to_group",
])))]
pub(crate) struct ResetArgs {
    /// Group id.
    group: String,
    /// Topic whose offsets move.
    #[arg(long)]
    topic: String,
    /// Only this partition (repeat for several); default every partition
    /// (with --shift-by and --to-group: every partition that has a
    /// committed offset to start from).
    #[arg(
        long = "partition",
        value_name = "P",
        value_parser = numbers::partition_index,
        allow_negative_numbers = true
    )]
    partitions: Vec<u32>,
    /// To the oldest record still stored.
    #[arg(long)]
    to_earliest: bool,
    /// To the end: skip everything not yet consumed.
    #[arg(long)]
    to_latest: bool,
    /// To this offset.
    #[arg(
        long,
        value_name = "N",
        value_parser = numbers::offset,
        allow_negative_numbers = true
    )]
    to_offset: Option<u64>,
    /// To the first record at or after this time: milliseconds since the
    /// epoch, or RFC 3339 such as 2024-05-01T12:00:00Z.
    #[arg(long, value_name = "TIME", value_parser = parse_time_ms)]
    to_time: Option<i64>,
    /// To the first record at or after this long ago, by this machine's
    /// clock: 90s, 30m, 2h or 7d.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    by_duration: Option<Duration>,
    /// Move each partition N records from the group's committed offset
    /// (negative: back, to read again), kept within the log's start and
    /// end.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
    /// To the committed offsets of another group, partition by partition.
    #[arg(long, value_name = "GROUP")]
    to_group: Option<String>,
    /// Why: required, written to the audit log.
    #[arg(long, value_name = "TEXT", required = true, value_parser = non_blank)]
    reason: String,
    /// Who asks, for the audit log. Default: $USER.
    #[arg(long)]
    principal: Option<String>,
    /// Show what would change without changing it.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn non_blank(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err("the reason must say why: it is written to the audit log".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

/// How a reset chooses the new offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Plan {
    /// The broker finds each partition's offset.
    Target(ResetTarget),
    /// Each partition's committed offset plus this, within the log.
    ShiftBy(i64),
    /// Each partition's committed offset in this other group.
    CopyFrom(String),
}

impl ResetArgs {
    /// The plan, with `--by-duration` counted back from `now_ms`.
    fn plan(&self, now_ms: i64) -> Plan {
        if let Some(offset) = self.to_offset {
            Plan::Target(ResetTarget::Offset(offset))
        } else if let Some(time) = self.to_time {
            Plan::Target(ResetTarget::Timestamp(time))
        } else if let Some(duration) = self.by_duration {
            let back = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
            Plan::Target(ResetTarget::Timestamp(now_ms.saturating_sub(back)))
        } else if let Some(by) = self.shift_by {
            Plan::ShiftBy(by)
        } else if let Some(group) = &self.to_group {
            Plan::CopyFrom(group.clone())
        } else if self.to_latest {
            Plan::Target(ResetTarget::Latest)
        } else {
            Plan::Target(ResetTarget::Earliest)
        }
    }

    fn principal(&self) -> String {
        principal_or_user(self.principal.clone())
    }
}

/// Who asks, for the audit log: `given`, else the login's user name.
pub(crate) fn principal_or_user(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "corelog-cli".to_owned())
}

/// Resets a group's offsets as `args` asks, and prints what moved.
pub(crate) async fn run(
    global: &Global,
    admin: &Admin,
    args: &ResetArgs,
) -> Result<(), ClientError> {
    let existing = describe_if_exists(admin, &args.group).await?;
    let (partitions, to) = match args.plan(now_ms()) {
        Plan::Target(target) => (
            (!args.partitions.is_empty()).then(|| args.partitions.clone()),
            target,
        ),
        Plan::ShiftBy(by) => {
            let positions = existing.as_ref().map_or(&[][..], |d| &d.partitions[..]);
            let offsets = shifted(positions, args, by).map_err(ClientError::InvalidArgument)?;
            (None, ResetTarget::Offsets(offsets))
        }
        Plan::CopyFrom(other) => {
            if other == args.group {
                return Err(ClientError::InvalidArgument(format!(
                    "--to-group names group {other} itself: there is nothing to copy"
                )));
            }
            let Some(source) = describe_if_exists(admin, &other).await? else {
                return Err(ClientError::InvalidArgument(format!(
                    "group {other} does not exist: there are no positions to copy (list groups with `corelog group list`)"
                )));
            };
            let offsets =
                copied(&source.partitions, args, &other).map_err(ClientError::InvalidArgument)?;
            (None, ResetTarget::Offsets(offsets))
        }
    };
    let reset = ResetOffsets {
        group: args.group.clone(),
        topic: args.topic.clone(),
        partitions,
        to,
        reason: args.reason.clone(),
        principal: args.principal(),
        dry_run: args.dry_run,
    };
    let outcome = admin.reset_offsets(&reset).await?;
    let existed = existing.is_some();
    if global.json {
        let mut value = serde_json::to_value(&outcome).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.insert("group_existed".to_owned(), json!(existed));
        }
        println!("{value}");
    } else {
        print!("{}", reset_text(&reset, &outcome, existed));
    }
    if let Some(partition) = outcome.partitions.iter().find(|p| p.error.is_some()) {
        return Err(ClientError::Broker {
            code: partition.error.unwrap_or(ErrorCode::UnknownServerError),
            context: format!("reset {}/{}", reset.topic, partition.partition),
            detail: None,
        });
    }
    Ok(())
}

/// A group's description, or `None` if the group does not exist.
async fn describe_if_exists(
    admin: &Admin,
    group: &str,
) -> Result<Option<GroupDescription>, ClientError> {
    match admin.describe_group(group).await {
        Ok(description) => Ok(Some(description)),
        Err(error) if error.code() == Some(ErrorCode::UnknownGroup) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The committed offsets of `positions` on the reset's topic, of the
/// partitions chosen with --partition, or of every partition with one.
///
/// # Errors
/// A sentence naming a chosen partition without a committed offset (`whose`
/// says in whose group), or saying that there is none at all.
fn chosen_commits<'a>(
    positions: &'a [PartitionLag],
    args: &ResetArgs,
    whose: &str,
) -> Result<Vec<(u32, u64, &'a PartitionLag)>, String> {
    let topic = args.topic.as_str();
    let committed: Vec<(u32, u64, &PartitionLag)> = positions
        .iter()
        .filter(|lag| &*lag.partition.topic == topic && !lag.topic_deleted)
        .filter_map(|lag| Some((lag.partition.partition, lag.committed_offset?, lag)))
        .collect();
    if args.partitions.is_empty() {
        if committed.is_empty() {
            return Err(format!("{whose} has no committed offset on topic {topic}"));
        }
        return Ok(committed);
    }
    args.partitions
        .iter()
        .map(|&partition| {
            committed
                .iter()
                .find(|(p, _, _)| *p == partition)
                .copied()
                .ok_or_else(|| format!("{whose} has no committed offset on {topic}/{partition}"))
        })
        .collect()
}

/// `--shift-by`: each chosen partition's committed offset moved `by`,
/// kept within its log.
fn shifted(
    positions: &[PartitionLag],
    args: &ResetArgs,
    by: i64,
) -> Result<Vec<PartitionOffset>, String> {
    let whose = format!("group {}", args.group);
    let chosen = chosen_commits(positions, args, &whose).map_err(|why| {
        format!(
            "{why} to shift from: set one first with --to-earliest, --to-latest, --to-offset or --to-time"
        )
    })?;
    Ok(chosen
        .into_iter()
        .map(|(partition, committed, lag)| {
            let moved = i128::from(committed) + i128::from(by);
            let within = moved.clamp(
                i128::from(lag.log_start_offset),
                i128::from(lag.high_watermark.max(lag.log_start_offset)),
            );
            PartitionOffset {
                partition,
                // Within two u64 bounds, so it fits.
                offset: u64::try_from(within).unwrap_or(lag.high_watermark),
            }
        })
        .collect())
}

/// `--to-group`: the other group's committed offset of each chosen
/// partition.
fn copied(
    positions: &[PartitionLag],
    args: &ResetArgs,
    other: &str,
) -> Result<Vec<PartitionOffset>, String> {
    let whose = format!("group {other}");
    let chosen = chosen_commits(positions, args, &whose).map_err(|why| format!("{why} to copy"))?;
    Ok(chosen
        .into_iter()
        .map(|(partition, offset, _)| PartitionOffset { partition, offset })
        .collect())
}

/// What a reset did, or would do for a dry run; `existed` says whether the
/// group existed before (a reset of a new group creates it).
fn reset_text(reset: &ResetOffsets, outcome: &ResetOutcome, existed: bool) -> String {
    let audit_offset = outcome
        .audit_offset
        .map_or_else(|| "?".to_owned(), |offset| offset.to_string());
    let (group, topic) = (&reset.group, &reset.topic);
    let mut text = match (outcome.dry_run, existed) {
        (true, true) => {
            format!("dry run: group {group} on {topic} would move as below (nothing changed)\n")
        }
        (true, false) => format!(
            "dry run: group {group} does not exist; this reset would create it with the offsets below on {topic} (nothing changed)\n"
        ),
        (false, true) => {
            format!(
                "group {group} on {topic} moved; audit record at __audit offset {audit_offset}\n"
            )
        }
        (false, false) => format!(
            "group {group} did not exist: created it with the offsets below on {topic}; audit record at __audit offset {audit_offset}\n"
        ),
    };
    let offset = |offset: Option<u64>| offset.map_or_else(|| "-".to_owned(), |o| o.to_string());
    let rows: Vec<Vec<String>> = outcome
        .partitions
        .iter()
        .map(|partition| {
            vec![
                partition.partition.to_string(),
                offset(partition.before),
                offset(partition.after),
                partition
                    .error
                    .map_or_else(|| "ok".to_owned(), |code| code.name().to_owned()),
            ]
        })
        .collect();
    text.push_str(&table(&["PARTITION", "BEFORE", "AFTER", "RESULT"], &rows));
    text
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use corelog_client::TopicPartition;
    use corelog_client::admin::PartitionReset;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ResetArgs,
    }

    /// Parses `reset-offsets` arguments (the first, `reset-offsets`, is
    /// the command's name).
    fn parse(args: &[&str]) -> Result<ResetArgs, clap::Error> {
        Cli::try_parse_from(args.iter().copied()).map(|cli| cli.args)
    }

    #[test]
    fn a_reset_without_a_reason_is_a_usage_error_naming_the_flag() {
        let error = parse(&[
            "reset-offsets",
            "search",
            "--topic",
            "orders",
            "--to-earliest",
        ])
        .unwrap_err();
        assert_eq!(
            error.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        assert!(error.to_string().contains("--reason"), "{error}");
        let error = parse(&[
            "reset-offsets",
            "search",
            "--topic",
            "orders",
            "--to-earliest",
            "--reason",
            "  ",
        ])
        .unwrap_err();
        assert!(error.to_string().contains("--reason"), "{error}");
    }

    #[test]
    fn a_reset_needs_exactly_one_target() {
        let base = [
            "reset-offsets",
            "search",
            "--topic",
            "orders",
            "--reason",
            "replay",
        ];
        assert!(parse(&base).is_err(), "no target");
        let mut two = base.to_vec();
        two.extend(["--to-earliest", "--to-offset", "5"]);
        assert!(parse(&two).is_err(), "two targets");
        let mut time = base.to_vec();
        time.extend([
            "--to-time",
            "2023-11-14T22:13:20Z",
            "--partition",
            "1",
            "--dry-run",
        ]);
        let args = parse(&time).unwrap();
        assert_eq!(
            args.plan(0),
            Plan::Target(ResetTarget::Timestamp(1_700_000_000_000))
        );
        assert_eq!(args.partitions, [1]);
        assert!(args.dry_run);
        let mut shift_and_copy = base.to_vec();
        shift_and_copy.extend(["--shift-by", "-3", "--to-group", "other"]);
        assert!(parse(&shift_and_copy).is_err(), "two targets");
    }

    fn reset_args(target: &[&str]) -> ResetArgs {
        let mut args = vec![
            "reset-offsets",
            "search",
            "--topic",
            "orders",
            "--reason",
            "replay",
        ];
        args.extend_from_slice(target);
        parse(&args).unwrap()
    }

    #[test]
    fn the_new_reset_modes_parse_into_plans() {
        let now = 1_700_000_000_000;
        assert_eq!(
            reset_args(&["--by-duration", "2h"]).plan(now),
            Plan::Target(ResetTarget::Timestamp(now - 2 * 3_600_000))
        );
        assert_eq!(
            reset_args(&["--by-duration", "7d"]).plan(now),
            Plan::Target(ResetTarget::Timestamp(now - 7 * 86_400_000))
        );
        assert_eq!(
            reset_args(&["--shift-by", "-5"]).plan(now),
            Plan::ShiftBy(-5)
        );
        assert_eq!(reset_args(&["--shift-by=12"]).plan(now), Plan::ShiftBy(12));
        assert_eq!(
            reset_args(&["--to-group", "search-v2"]).plan(now),
            Plan::CopyFrom("search-v2".to_owned())
        );
    }

    fn lag(partition: u32, committed: Option<u64>, log_start: u64, end: u64) -> PartitionLag {
        PartitionLag {
            partition: TopicPartition::new("orders", partition),
            committed_offset: committed,
            metadata: None,
            log_start_offset: log_start,
            high_watermark: end,
            lag_records: 0,
            lag_bytes: 0,
            oldest_unconsumed_age_ms: None,
            retention_left_ms: None,
            topic_deleted: false,
        }
    }

    fn targets(offsets: &[PartitionOffset]) -> Vec<(u32, u64)> {
        offsets.iter().map(|o| (o.partition, o.offset)).collect()
    }

    #[test]
    fn shifting_stays_within_each_log_and_needs_a_commit() {
        let positions = [
            lag(0, Some(50), 10, 100),
            lag(1, Some(95), 0, 100),
            lag(2, None, 0, 100),
        ];
        let args = reset_args(&["--shift-by", "-45"]);
        let back = shifted(&positions, &args, -45).unwrap();
        assert_eq!(
            targets(&back),
            [(0, 10), (1, 50)],
            "clamped to the log start"
        );
        let ahead = shifted(&positions, &args, 10).unwrap();
        assert_eq!(targets(&ahead), [(0, 60), (1, 100)], "clamped to the end");
        let huge = shifted(&positions, &args, i64::MIN).unwrap();
        assert_eq!(targets(&huge), [(0, 10), (1, 0)]);

        let only_two = reset_args(&["--shift-by", "1", "--partition", "2"]);
        let error = shifted(&positions, &only_two, 1).unwrap_err();
        assert!(
            error.starts_with("group search has no committed offset on orders/2 to shift from"),
            "{error}"
        );
        let error = shifted(&[], &args, 1).unwrap_err();
        assert!(
            error.starts_with("group search has no committed offset on topic orders"),
            "{error}"
        );
    }

    #[test]
    fn copying_takes_the_other_groups_commits() {
        let positions = [
            lag(0, Some(3), 0, 10),
            lag(1, Some(1), 0, 10),
            lag(2, None, 0, 10),
        ];
        let args = reset_args(&["--to-group", "original"]);
        let copied_offsets = copied(&positions, &args, "original").unwrap();
        assert_eq!(targets(&copied_offsets), [(0, 3), (1, 1)]);
        let one = reset_args(&["--to-group", "original", "--partition", "1"]);
        assert_eq!(
            targets(&copied(&positions, &one, "original").unwrap()),
            [(1, 1)]
        );
        let error = copied(&[], &args, "original").unwrap_err();
        assert_eq!(
            error,
            "group original has no committed offset on topic orders to copy"
        );
    }

    #[test]
    fn reset_output_names_the_moves_and_a_group_it_creates() {
        let reset = ResetOffsets::new("search", "orders", ResetTarget::Earliest, "replay", "ops");
        let outcome = ResetOutcome {
            audit_offset: Some(4),
            partitions: vec![PartitionReset {
                partition: 0,
                before: Some(118),
                after: Some(0),
                error: None,
            }],
            dry_run: false,
        };
        let text = reset_text(&reset, &outcome, true);
        assert!(text.contains("audit record at __audit offset 4"), "{text}");
        assert!(text.contains("0          118     0      ok"), "{text}");
        let text = reset_text(&reset, &outcome, false);
        assert!(
            text.starts_with("group search did not exist: created it"),
            "{text}"
        );
        let dry_run = ResetOutcome {
            audit_offset: None,
            dry_run: true,
            ..outcome.clone()
        };
        let text = reset_text(&reset, &dry_run, false);
        assert!(
            text.starts_with("dry run: group search does not exist;"),
            "{text}"
        );
    }
}
