//! `corelog group …`: list, describe, reset offsets (with a reason, which
//! goes to the audit log), read the audit log, delete.

use clap::{ArgGroup, Args, Subcommand};
use corelog_client::admin::{
    AuditLogEntry, GroupDescription, GroupListing, ResetOffsets, ResetOutcome, ResetTarget,
};
use corelog_client::{Admin, ClientError};
use serde_json::json;

use crate::Global;
use crate::numbers;
use crate::output::{human_bytes, plural, table};
use crate::time::{format_duration_ms, format_time_ms, parse_time_ms};

#[derive(Debug, Subcommand)]
pub(crate) enum GroupCommand {
    /// List consumer groups.
    List {
        /// Only groups in this state (repeat for several), for example
        /// Stable, PreparingRebalance, Empty.
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
    },
    /// Show a group's members, assignment, committed offsets and lag in
    /// records, bytes and time, and the retention time left.
    Describe {
        /// Group id.
        group: String,
    },
    /// Move a group's committed offsets. The group must have no active
    /// members; the reason and the before/after offsets are written to the
    /// audit log.
    ResetOffsets(ResetArgs),
    /// Show the audit log: offset resets and poison-record decisions.
    Audit {
        /// Only this group's records.
        #[arg(long)]
        group: Option<String>,
    },
    /// Delete a group's offsets and membership record. Only an empty group
    /// can be deleted; topic data is never touched.
    Delete {
        /// Group id.
        group: String,
    },
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["to_earliest", "to_latest", "to_offset", "to_time"])))]
pub(crate) struct ResetArgs {
    /// Group id.
    group: String,
    /// Topic whose offsets move.
    #[arg(long)]
    topic: String,
    /// Only this partition (repeat for several); default every partition.
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

fn non_blank(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err("the reason must say why: it is written to the audit log".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

impl ResetArgs {
    fn target(&self) -> ResetTarget {
        if let Some(offset) = self.to_offset {
            ResetTarget::Offset(offset)
        } else if let Some(time) = self.to_time {
            ResetTarget::Timestamp(time)
        } else if self.to_latest {
            ResetTarget::Latest
        } else {
            ResetTarget::Earliest
        }
    }

    fn principal(&self) -> String {
        self.principal
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .or_else(|| std::env::var("LOGNAME").ok())
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| "corelog-cli".to_owned())
    }
}

pub(crate) async fn run(global: &Global, command: GroupCommand) -> Result<(), ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        GroupCommand::List { states } => {
            let groups = admin.list_groups(&states).await?;
            if global.json {
                println!("{}", serde_json::to_string(&groups).unwrap_or_default());
            } else {
                print!("{}", list_text(&groups));
            }
        }
        GroupCommand::Describe { group } => {
            let description = admin.describe_group(&group).await?;
            if global.json {
                println!(
                    "{}",
                    serde_json::to_string(&description).unwrap_or_default()
                );
            } else {
                print!("{}", describe_text(&description));
            }
        }
        GroupCommand::ResetOffsets(args) => {
            let reset = ResetOffsets {
                group: args.group.clone(),
                topic: args.topic.clone(),
                partitions: (!args.partitions.is_empty()).then(|| args.partitions.clone()),
                to: args.target(),
                reason: args.reason.clone(),
                principal: args.principal(),
                dry_run: args.dry_run,
            };
            let outcome = admin.reset_offsets(&reset).await?;
            if global.json {
                println!("{}", serde_json::to_string(&outcome).unwrap_or_default());
            } else {
                print!("{}", reset_text(&reset, &outcome));
            }
            if let Some(partition) = outcome.partitions.iter().find(|p| p.error.is_some()) {
                return Err(ClientError::Broker {
                    code: partition
                        .error
                        .unwrap_or(corelog_client::ErrorCode::UnknownServerError),
                    context: format!("reset {}/{}", reset.topic, partition.partition),
                    detail: None,
                });
            }
        }
        GroupCommand::Audit { group } => {
            let entries = admin.read_audit(group.as_deref()).await?;
            if global.json {
                println!("{}", serde_json::to_string(&entries).unwrap_or_default());
            } else {
                print!("{}", audit_text(&entries));
            }
        }
        GroupCommand::Delete { group } => {
            admin.delete_group(&group).await?;
            if global.json {
                println!("{}", json!({"deleted": group}));
            } else {
                println!("deleted group {group} (topic data is untouched)");
            }
        }
    }
    Ok(())
}

fn list_text(groups: &[GroupListing]) -> String {
    if groups.is_empty() {
        return "no groups\n".to_owned();
    }
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|group| {
            vec![
                group.group.clone(),
                group.state.clone(),
                group.members.to_string(),
                group.generation.to_string(),
            ]
        })
        .collect();
    table(&["GROUP", "STATE", "MEMBERS", "GENERATION"], &rows)
}

fn describe_text(description: &GroupDescription) -> String {
    let mut text = format!(
        "group {}: {}, generation {}, {}\n",
        description.group,
        description.state,
        description.generation,
        plural(description.members.len() as u64, "member", "members")
    );
    if !description.members.is_empty() {
        text.push('\n');
        let rows: Vec<Vec<String>> = description
            .members
            .iter()
            .map(|member| {
                let assignment: Vec<String> =
                    member.assignment.iter().map(ToString::to_string).collect();
                vec![
                    member.member_id.clone(),
                    member.instance_id.clone().unwrap_or_else(|| "-".to_owned()),
                    member.client_id.clone(),
                    member.client_host.clone(),
                    if assignment.is_empty() {
                        "-".to_owned()
                    } else {
                        assignment.join(",")
                    },
                ]
            })
            .collect();
        text.push_str(&table(
            &["MEMBER", "INSTANCE", "CLIENT", "HOST", "ASSIGNMENT"],
            &rows,
        ));
    }
    if !description.partitions.is_empty() {
        text.push('\n');
        let optional_ms = |ms: Option<i64>| ms.map_or_else(|| "-".to_owned(), format_duration_ms);
        let rows: Vec<Vec<String>> = description
            .partitions
            .iter()
            .map(|lag| {
                vec![
                    lag.partition.topic.to_string(),
                    lag.partition.partition.to_string(),
                    lag.committed_offset
                        .map_or_else(|| "-".to_owned(), |offset| offset.to_string()),
                    lag.log_start_offset.to_string(),
                    lag.high_watermark.to_string(),
                    lag.lag_records.to_string(),
                    human_bytes(lag.lag_bytes),
                    optional_ms(lag.oldest_unconsumed_age_ms),
                    optional_ms(lag.retention_left_ms),
                ]
            })
            .collect();
        text.push_str(&table(
            &[
                "TOPIC",
                "PARTITION",
                "COMMITTED",
                "LOG-START",
                "HIGH-WATERMARK",
                "LAG",
                "LAG-BYTES",
                "LAG-TIME",
                "RETENTION-LEFT",
            ],
            &rows,
        ));
    }
    text
}

fn reset_text(reset: &ResetOffsets, outcome: &ResetOutcome) -> String {
    let mut text = if outcome.dry_run {
        format!(
            "dry run: group {} on {} would move as below (nothing changed)\n",
            reset.group, reset.topic
        )
    } else {
        format!(
            "group {} on {} moved; audit record at __audit offset {}\n",
            reset.group,
            reset.topic,
            outcome
                .audit_offset
                .map_or_else(|| "?".to_owned(), |offset| offset.to_string())
        )
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

fn audit_text(entries: &[AuditLogEntry]) -> String {
    if entries.is_empty() {
        return "no audit records\n".to_owned();
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|entry| {
            vec![
                entry.audit_offset.to_string(),
                format_time_ms(entry.at_ms),
                entry.kind.to_owned(),
                entry.group.clone(),
                audit_what(entry),
                entry.principal.clone(),
                entry.reason.clone(),
            ]
        })
        .collect();
    table(
        &[
            "AUDIT",
            "TIME",
            "KIND",
            "GROUP",
            "WHAT",
            "PRINCIPAL",
            "REASON",
        ],
        &rows,
    )
}

/// What an audit record is about: a reset's moves per partition
/// (`orders 0:118->0`), or the record a poison decision concerned
/// (`orders/2@117`, with `-> orders.dlq@3` for a quarantine).
fn audit_what(entry: &AuditLogEntry) -> String {
    if entry.kind == "offset-reset" {
        let moves: Vec<String> = entry
            .before
            .iter()
            .map(|(partition, before)| {
                let after = entry
                    .after
                    .iter()
                    .find(|(p, _)| p == partition)
                    .map_or(-1, |(_, after)| *after);
                format!("{partition}:{before}->{after}")
            })
            .collect();
        return format!("{} {}", entry.topic, moves.join(" "));
    }
    let mut what = format!(
        "{}/{}@{}",
        entry.topic,
        entry
            .partition
            .map_or_else(|| "*".to_owned(), |p| p.to_string()),
        entry
            .offset
            .map_or_else(|| "?".to_owned(), |o| o.to_string())
    );
    if let (Some(topic), Some(offset)) = (&entry.dead_letter_topic, entry.dead_letter_offset) {
        what.push_str(&format!(" -> {topic}@{offset}"));
    }
    what
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use corelog_client::TopicPartition;
    use corelog_client::admin::{MemberDescription, PartitionLag, PartitionReset};

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: GroupCommand,
    }

    fn parse(args: &[&str]) -> Result<GroupCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("group").chain(args.iter().copied()))
            .map(|cli| cli.command)
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
        let GroupCommand::ResetOffsets(args) = parse(&time).unwrap() else {
            panic!("expected reset-offsets");
        };
        assert_eq!(args.target(), ResetTarget::Timestamp(1_700_000_000_000));
        assert_eq!(args.partitions, [1]);
        assert!(args.dry_run);
    }

    #[test]
    fn describe_shows_members_and_lag_in_records_bytes_and_time() {
        let description = GroupDescription {
            group: "search".to_owned(),
            state: "Stable".to_owned(),
            generation: 6,
            members: vec![MemberDescription {
                member_id: "m-1".to_owned(),
                instance_id: None,
                client_id: "search-1".to_owned(),
                client_host: "127.0.0.1".to_owned(),
                assignment: vec![TopicPartition::new("orders", 2)],
            }],
            partitions: vec![PartitionLag {
                partition: TopicPartition::new("orders", 2),
                committed_offset: Some(118),
                metadata: None,
                log_start_offset: 0,
                high_watermark: 218,
                lag_records: 100,
                lag_bytes: 102_400,
                oldest_unconsumed_age_ms: Some(192_000),
                retention_left_ms: Some(6 * 86_400_000),
            }],
        };
        let text = describe_text(&description);
        assert!(
            text.starts_with("group search: Stable, generation 6, 1 member\n"),
            "{text}"
        );
        assert!(text.contains("orders/2"), "{text}");
        assert!(text.contains("118"), "{text}");
        assert!(text.contains("100.0 KiB"), "{text}");
        assert!(text.contains("3m12s"), "{text}");
        assert!(text.contains("6d00h"), "{text}");
    }

    #[test]
    fn reset_and_audit_output_name_the_moves() {
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
        let text = reset_text(&reset, &outcome);
        assert!(text.contains("audit record at __audit offset 4"), "{text}");
        assert!(text.contains("0          118     0      ok"), "{text}");
        let entry = AuditLogEntry {
            audit_offset: 4,
            kind: "quarantine",
            group: "search".to_owned(),
            topic: "orders".to_owned(),
            partition: Some(2),
            principal: "search-1".to_owned(),
            reason: "bad json".to_owned(),
            at_ms: 1_700_000_000_000,
            before: Vec::new(),
            after: Vec::new(),
            offset: Some(117),
            dead_letter_topic: Some("orders.dlq".to_owned()),
            dead_letter_offset: Some(3),
            error: None,
        };
        let text = audit_text(&[entry]);
        assert!(text.contains("orders/2@117 -> orders.dlq@3"), "{text}");
        assert!(text.contains("2023-11-14T22:13:20.000Z"), "{text}");
    }
}
