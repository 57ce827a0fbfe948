//! `corelog group …`: list, describe (once or every few seconds), reset
//! offsets (`reset.rs`), delete offsets, read the audit log, delete.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::Subcommand;
use corelog_client::admin::{
    AuditLogEntry, DeleteOffsets, DeleteOffsetsOutcome, GroupDescription, GroupListing,
};
use corelog_client::{Admin, ClientError};
use serde_json::json;

use crate::Global;
use crate::numbers;
use crate::output::{human_bytes, plural, printable, table};
use crate::reset::{self, ResetArgs};
use crate::time::{format_duration_ms, format_time_ms, now_ms};

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
        /// Describe it again every SECONDS (2 when not given) until
        /// interrupted; with --json, one JSON object per line.
        #[arg(
            long,
            value_name = "SECONDS",
            num_args = 0..=1,
            default_missing_value = "2",
            value_parser = numbers::refresh_seconds
        )]
        watch: Option<u64>,
    },
    /// Move a group's committed offsets. The group must have no active
    /// members; the reason and the before/after offsets are written to the
    /// audit log.
    ResetOffsets(ResetArgs),
    /// Delete a group's committed offsets of a topic: those it holds of
    /// deleted topics of that name (`group describe` shows them as
    /// "TOPIC (deleted)") and, without --deleted-only, the live topic's,
    /// which members must not be consuming. Needs group-admin; the reason
    /// and the offsets deleted are written to the audit log.
    DeleteOffsets {
        /// Group id.
        group: String,
        /// Topic name.
        #[arg(long)]
        topic: String,
        /// Only this partition's offsets (repeat for several).
        #[arg(long = "partition", value_name = "N")]
        partitions: Vec<u32>,
        /// Only the offsets of deleted topics of that name, never the live
        /// topic's.
        #[arg(long)]
        deleted_only: bool,
        /// Why: required, written to the audit log.
        #[arg(long, value_name = "TEXT", required = true, value_parser = reset::non_blank)]
        reason: String,
        /// Who asks, for the audit log. Default: $USER.
        #[arg(long)]
        principal: Option<String>,
    },
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

pub(crate) async fn run(global: &Global, command: GroupCommand) -> Result<(), ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        GroupCommand::List { states } => {
            let listed = admin.list_groups(&states).await?;
            if global.json {
                println!(
                    "{}",
                    serde_json::to_string(&listed.groups).unwrap_or_default()
                );
            } else {
                print!("{}", list_text(&listed.groups));
            }
            // A partial list must not pass for a whole one: say which
            // brokers' groups are missing, and fail.
            if let Some(first) = listed.unanswered.first() {
                for broker in &listed.unanswered {
                    eprintln!(
                        "warning: broker {} did not answer ({}); the groups it coordinates are not listed",
                        broker.node_id,
                        printable(&broker.error)
                    );
                }
                return Err(ClientError::Broker {
                    code: corelog_client::ErrorCode::CoordinatorNotAvailable,
                    context: format!(
                        "list groups: {} of the cluster's brokers did not answer (broker {} first)",
                        listed.unanswered.len(),
                        first.node_id
                    ),
                    detail: None,
                });
            }
        }
        GroupCommand::Describe { group, watch: None } => {
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
        GroupCommand::Describe {
            group,
            watch: Some(seconds),
        } => watch(global, &admin, &group, seconds).await?,
        GroupCommand::ResetOffsets(args) => reset::run(global, &admin, &args).await?,
        GroupCommand::DeleteOffsets {
            group,
            topic,
            partitions,
            deleted_only,
            reason,
            principal,
        } => {
            let deletion = DeleteOffsets {
                group,
                topic,
                partitions: (!partitions.is_empty()).then_some(partitions),
                deleted_topics_only: deleted_only,
                reason,
                principal: reset::principal_or_user(principal),
            };
            let outcome = admin.delete_offsets(&deletion).await?;
            if global.json {
                println!("{}", serde_json::to_string(&outcome).unwrap_or_default());
            } else {
                print!("{}", deleted_offsets_text(&deletion, &outcome));
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

/// Describes a group every `seconds` until the process is interrupted.
/// Errors that may pass (a coordinator moving, a broker restarting) are
/// shown and the next refresh tries again; others end the watch.
async fn watch(
    global: &Global,
    admin: &Admin,
    group: &str,
    seconds: u64,
) -> Result<(), ClientError> {
    let mut refresh = tokio::time::interval(Duration::from_secs(seconds));
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let terminal = std::io::stdout().is_terminal();
    loop {
        refresh.tick().await;
        let description = match admin.describe_group(group).await {
            Ok(description) => description,
            Err(error) if error.is_retriable() => {
                eprintln!("warning: {error}; trying again in {seconds}s");
                continue;
            }
            Err(error) => return Err(error),
        };
        let text = if global.json {
            format!(
                "{}\n",
                serde_json::to_string(&description).unwrap_or_default()
            )
        } else {
            let heading = format!(
                "{} (every {seconds}s; Ctrl-C to stop)",
                format_time_ms(now_ms())
            );
            if terminal {
                // Redraw in place, as watch(1) does.
                format!("\x1b[H\x1b[2J{heading}\n\n{}", describe_text(&description))
            } else {
                format!("{heading}\n{}\n", describe_text(&description))
            }
        };
        // Nobody reads any more (stdout piped into `head`, which exited):
        // the watch is over, as `consume` ends on a closed stdout.
        if write_out(&text).is_err() {
            return Ok(());
        }
    }
}

/// Writes `text` to stdout and flushes it; an error (a closed pipe) is
/// returned, where `print!` would panic.
fn write_out(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
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

fn deleted_offsets_text(deletion: &DeleteOffsets, outcome: &DeleteOffsetsOutcome) -> String {
    let group = printable(&deletion.group);
    let topic = printable(&deletion.topic);
    let Some(audit_offset) = outcome.audit_offset else {
        return format!("group {group} has no offsets to delete on {topic}\n");
    };
    let mut text = format!(
        "deleted {} of group {group} on {topic}; audit record at __audit offset {audit_offset}\n",
        plural(outcome.deleted.len() as u64, "offset", "offsets")
    );
    let rows: Vec<Vec<String>> = outcome
        .deleted
        .iter()
        .map(|offset| {
            vec![
                topic_label(&deletion.topic, offset.topic_deleted),
                offset.partition.to_string(),
                offset.committed_offset.to_string(),
            ]
        })
        .collect();
    text.push_str(&table(&["TOPIC", "PARTITION", "COMMITTED"], &rows));
    text
}

/// A topic's name as listed: "NAME (deleted)" for a deleted topic's
/// offsets, which the live topic of the name does not use.
fn topic_label(topic: &str, deleted: bool) -> String {
    if deleted {
        format!("{topic} (deleted)")
    } else {
        topic.to_owned()
    }
}

fn describe_text(description: &GroupDescription) -> String {
    let mut text = format!(
        "group {}: {}, generation {}, {}\n",
        printable(&description.group),
        printable(&description.state),
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
                    topic_label(&lag.partition.topic, lag.topic_deleted),
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
    use corelog_client::admin::{MemberDescription, PartitionLag};

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
    fn watch_takes_an_optional_interval() {
        let parsed = |args: &[&str]| match parse(args) {
            Ok(GroupCommand::Describe { watch, .. }) => watch,
            other => panic!("expected describe: {other:?}"),
        };
        assert_eq!(parsed(&["describe", "search"]), None);
        assert_eq!(parsed(&["describe", "search", "--watch"]), Some(2));
        assert_eq!(parsed(&["describe", "search", "--watch", "10"]), Some(10));
        assert!(parse(&["describe", "search", "--watch", "0"]).is_err());
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
                topic_deleted: false,
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

    /// A tenant's group name is printed to whoever lists groups: escape
    /// sequences in it must not reach their terminal (issue 35, item 13).
    #[test]
    fn control_characters_of_names_are_escaped_in_every_listing() {
        let evil = "tenant\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m";
        let listed = list_text(&[GroupListing {
            group: evil.to_owned(),
            state: "Empty".to_owned(),
            members: 0,
            generation: 1,
        }]);
        let described = describe_text(&GroupDescription {
            group: evil.to_owned(),
            state: "Empty".to_owned(),
            generation: 1,
            members: Vec::new(),
            partitions: Vec::new(),
        });
        for text in [listed, described] {
            assert!(
                !text.chars().any(|c| c.is_control() && c != '\n'),
                "{text:?}"
            );
            assert!(text.contains("tenant\\u{1b}[2J"), "{text}");
        }
    }

    #[test]
    fn audit_output_names_the_record_concerned() {
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
