//! `corelog topic …`: create, list, describe and delete topics.

use clap::Subcommand;
use corelog_client::admin::{ClusterStatus, PartitionStatus};
use corelog_client::{Admin, ClientError, ErrorCode, NewTopic, PartitionState, TopicDescription};
use serde::Serialize;
use serde_json::json;

use crate::Global;
use crate::numbers;
use crate::output::{human_bytes, plural, table};

#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name: letters, digits, '.', '_' and '-'.
        name: String,
        /// Number of partitions, at least 1.
        #[arg(long, value_parser = numbers::partition_count, allow_negative_numbers = true)]
        partitions: u32,
        /// Replicas per partition, at least 1. Left out, the broker
        /// chooses: 1 on a single node, 3 in a cluster of three or more
        /// brokers.
        #[arg(long, value_name = "N", value_parser = numbers::replication_factor, allow_negative_numbers = true)]
        replication_factor: Option<u16>,
        /// A setting, as key=value: retention.ms, retention.bytes (-1 =
        /// unlimited), segment.bytes, segment.ms, max.message.bytes,
        /// max.uncompressed.message.bytes, cleanup.policy. Repeat for
        /// several.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config)]
        configs: Vec<(String, String)>,
    },
    /// List topics.
    List,
    /// Show topics' settings and, per partition, the leader, leader epoch,
    /// replicas, in-sync replicas, state and log positions.
    Describe {
        /// Topics to describe.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Delete a topic and all its records.
    Delete {
        /// Topic to delete.
        name: String,
    },
}

fn parse_config(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!(
            "{text:?} is not KEY=VALUE, for example retention.ms=86400000"
        )),
    }
}

/// How a topic command ended, beyond an error it returns.
pub(crate) enum Outcome {
    /// Everything asked was done.
    Done,
    /// Some of it failed, and each failure was reported already.
    Incomplete,
}

pub(crate) async fn run(global: &Global, command: TopicCommand) -> Result<Outcome, ClientError> {
    let admin = Admin::connect(global.client.clone()).await?;
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let mut topic = NewTopic::new(&name, partitions);
            if let Some(replication_factor) = replication_factor {
                topic = topic.replication_factor(replication_factor);
            }
            for (key, value) in configs {
                topic = topic.config(key, value);
            }
            admin.create_topic(topic).await?;
            if global.json {
                println!("{}", json!({"created": name, "partitions": partitions}));
            } else {
                println!(
                    "created topic {name} with {}",
                    plural(partitions, "partition", "partitions")
                );
            }
        }
        TopicCommand::List => list(global, &admin).await?,
        TopicCommand::Describe { names } => return describe(global, &admin, &names).await,
        TopicCommand::Delete { name } => {
            admin.delete_topic(&name).await?;
            if global.json {
                println!("{}", json!({"deleted": name}));
            } else {
                println!("deleted topic {name}");
            }
        }
    }
    Ok(Outcome::Done)
}

async fn list(global: &Global, admin: &Admin) -> Result<(), ClientError> {
    let topics = admin.list_topics().await?;
    let status = cluster_status(admin, None).await;
    if global.json {
        println!("{}", serde_json::to_string(&topics).unwrap_or_default());
        return Ok(());
    }
    if topics.is_empty() {
        println!("no topics; create one with `corelog topic create NAME --partitions N`");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = topics
        .iter()
        .map(|topic| {
            let health = status.as_ref().map(|status| {
                status
                    .topics
                    .iter()
                    .find(|described| described.name == topic.name)
                    .map_or("unknown", |described| {
                        status.topic_health(described).as_str()
                    })
            });
            let leaderless = topic
                .partitions
                .iter()
                .filter(|partition| partition.leader.is_none() || partition.error.is_some())
                .count();
            let state = match (topic.error, health, leaderless) {
                (Some(ErrorCode::TopicDeletionInProgress), _, _) => "deleting".to_owned(),
                (Some(code), _, _) => code.name().to_owned(),
                (None, Some(health), _) => health.to_owned(),
                // A broker too old to describe the cluster: its metadata.
                (None, None, 0) => "ok".to_owned(),
                (None, None, count) => format!(
                    "{} without leader",
                    plural(count as u64, "partition", "partitions")
                ),
            };
            vec![
                topic.name.clone(),
                topic.partition_count().to_string(),
                state,
            ]
        })
        .collect();
    print!("{}", table(&["TOPIC", "PARTITIONS", "STATE"], &rows));
    Ok(())
}

/// One partition as `topic describe` shows it: leadership and log
/// positions side by side.
#[derive(Debug, Serialize)]
struct DescribedPartition {
    partition: u32,
    leader: Option<u32>,
    leader_epoch: Option<u32>,
    replicas: Vec<u32>,
    /// `None` when unknown (no report from the leader yet, or the
    /// controller leader could not be asked).
    in_sync: Option<Vec<u32>>,
    state: &'static str,
    log_start_offset: Option<u64>,
    high_watermark: Option<u64>,
    log_end_offset: Option<u64>,
    size_bytes: Option<u64>,
    segment_count: Option<u32>,
}

#[derive(Debug, Serialize)]
struct DescribedTopic {
    name: String,
    partitions: u32,
    replication_factor: u16,
    configs: std::collections::BTreeMap<String, String>,
    partition_details: Vec<DescribedPartition>,
}

/// The cluster's state, or `None` (logged) from a broker too old to
/// describe it: listings then fall back to what metadata says.
async fn cluster_status(admin: &Admin, topics: Option<Vec<String>>) -> Option<ClusterStatus> {
    match admin.describe_cluster(topics).await {
        Ok(status) => Some(status),
        Err(error) => {
            tracing::warn!(%error, "cannot describe the cluster; leaders and in-sync replicas not shown");
            None
        }
    }
}

fn described(description: &TopicDescription, status: Option<&ClusterStatus>) -> DescribedTopic {
    let leadership: &[PartitionStatus] = status
        .and_then(|status| {
            status
                .topics
                .iter()
                .find(|topic| topic.name == description.name)
        })
        .map_or(&[], |topic| topic.partitions.as_slice());
    let partition_details = (0..description.partitions)
        .map(|index| {
            let led = leadership.iter().find(|p| p.partition == index);
            let positions: Option<&PartitionState> = description
                .partition_states
                .iter()
                .find(|state| state.partition == index);
            DescribedPartition {
                partition: index,
                leader: led.and_then(|p| p.leader),
                leader_epoch: led.map(|p| p.leader_epoch),
                replicas: led.map(|p| p.replicas.clone()).unwrap_or_default(),
                in_sync: led.and_then(|p| p.in_sync.clone()),
                state: led
                    .zip(status)
                    .map_or("unknown", |(p, status)| status.partition_health(p).as_str()),
                log_start_offset: positions.map(|s| s.log_start_offset),
                high_watermark: positions.map(|s| s.high_watermark),
                log_end_offset: positions.map(|s| s.log_end_offset),
                size_bytes: positions.map(|s| s.size_bytes),
                segment_count: positions.map(|s| s.segment_count),
            }
        })
        .collect();
    DescribedTopic {
        name: description.name.clone(),
        partitions: description.partitions,
        replication_factor: description.replication_factor,
        configs: description.configs.clone(),
        partition_details,
    }
}

/// Describes each topic named, and reports (once) each that cannot be.
async fn describe(
    global: &Global,
    admin: &Admin,
    names: &[String],
) -> Result<Outcome, ClientError> {
    let results = admin.describe_topics(names).await?;
    let status = cluster_status(admin, Some(names.to_vec())).await;
    let mut outcome = Outcome::Done;
    let mut topics: Vec<DescribedTopic> = Vec::new();
    for name in names {
        match results.iter().find(|(topic, _)| topic == name) {
            Some((_, Ok(description))) => topics.push(described(description, status.as_ref())),
            Some((_, Err(error))) => {
                crate::report(error);
                outcome = Outcome::Incomplete;
            }
            None => {
                let error = ClientError::Broker {
                    code: corelog_client::ErrorCode::UnknownTopicOrPartition,
                    context: format!("describe topic {name}"),
                    detail: Some("the broker did not describe it".to_owned()),
                };
                crate::report(&error);
                outcome = Outcome::Incomplete;
            }
        }
    }
    if global.json {
        println!("{}", serde_json::to_string(&topics).unwrap_or_default());
    } else {
        for (index, description) in topics.iter().enumerate() {
            if index > 0 {
                println!();
            }
            print!("{}", describe_text(description));
        }
    }
    Ok(outcome)
}

fn describe_text(description: &DescribedTopic) -> String {
    let mut text = format!(
        "topic {}: {}, replication factor {}\n",
        description.name,
        plural(description.partitions, "partition", "partitions"),
        description.replication_factor
    );
    for (key, value) in &description.configs {
        text.push_str(&format!("  {key} = {value}\n"));
    }
    let nodes = |nodes: &[u32]| {
        nodes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".to_owned());
    let rows: Vec<Vec<String>> = description
        .partition_details
        .iter()
        .map(|partition| {
            vec![
                partition.partition.to_string(),
                or_dash(partition.leader.map(|leader| leader.to_string())),
                or_dash(partition.leader_epoch.map(|epoch| epoch.to_string())),
                nodes(&partition.replicas),
                partition
                    .in_sync
                    .as_deref()
                    .map_or_else(|| "?".to_owned(), nodes),
                partition.state.to_owned(),
                or_dash(partition.log_start_offset.map(|o| o.to_string())),
                or_dash(partition.high_watermark.map(|o| o.to_string())),
                or_dash(partition.log_end_offset.map(|o| o.to_string())),
                or_dash(partition.size_bytes.map(human_bytes)),
                or_dash(partition.segment_count.map(|count| count.to_string())),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "PARTITION",
            "LEADER",
            "EPOCH",
            "REPLICAS",
            "IN-SYNC",
            "STATE",
            "LOG-START",
            "HIGH-WATERMARK",
            "LOG-END",
            "SIZE",
            "SEGMENTS",
        ],
        &rows,
    ));
    text
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use corelog_client::PartitionState;

    use super::*;

    #[test]
    fn config_pairs_need_an_equals_sign() {
        assert_eq!(
            parse_config("retention.ms=1000"),
            Ok(("retention.ms".to_owned(), "1000".to_owned()))
        );
        assert_eq!(
            parse_config("a=b=c"),
            Ok(("a".to_owned(), "b=c".to_owned()))
        );
        assert!(parse_config("retention.ms").is_err());
        assert!(parse_config("=1").is_err());
    }

    #[test]
    fn description_shows_leadership_in_sync_replicas_and_positions() {
        let description = TopicDescription {
            name: "orders".to_owned(),
            partitions: 2,
            replication_factor: 3,
            configs: BTreeMap::from([("retention.ms".to_owned(), "1000".to_owned())]),
            partition_states: vec![PartitionState {
                partition: 0,
                log_start_offset: 5,
                high_watermark: 10,
                log_end_offset: 10,
                size_bytes: 2048,
                segment_count: 2,
            }],
        };
        let broker = |node_id: u32, fenced: bool| corelog_client::admin::BrokerState {
            node_id,
            address: format!("127.0.0.1:{node_id}"),
            rack: None,
            fenced,
            voter: true,
            heartbeat_age_ms: None,
            maintenance: false,
            decommission: None,
        };
        let status = ClusterStatus {
            answered_by: 1,
            authoritative: true,
            controller: corelog_client::admin::ControllerState {
                voters: vec![1, 2, 3],
                leader: Some(1),
                term: 2,
                commit_index: 9,
                metadata_version: 9,
            },
            brokers: vec![broker(1, false), broker(2, false), broker(3, true)],
            topics: vec![corelog_client::admin::TopicStatus {
                name: "orders".to_owned(),
                partitions: vec![
                    PartitionStatus {
                        partition: 0,
                        leader: Some(2),
                        leader_epoch: 4,
                        replicas: vec![2, 3, 1],
                        in_sync: Some(vec![2, 1]),
                        moving: None,
                    },
                    PartitionStatus {
                        partition: 1,
                        leader: None,
                        leader_epoch: 7,
                        replicas: vec![3, 1, 2],
                        in_sync: None,
                        moving: None,
                    },
                ],
            }],
        };
        let text = describe_text(&described(&description, Some(&status)));
        assert!(text.starts_with("topic orders: 2 partitions, replication factor 3\n"));
        assert!(text.contains("  retention.ms = 1000\n"));
        assert!(
            text.contains("0          2       4      2,3,1     2,1      under-replicated  5          10              10       2.0 KiB  2"),
            "{text}"
        );
        assert!(
            text.contains("1          -       7      3,1,2     ?        offline           -          -               -        -        -"),
            "{text}"
        );
    }
}
