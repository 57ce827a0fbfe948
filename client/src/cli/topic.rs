//! `corelog topic …`: create, list, describe and delete topics.

use clap::Subcommand;
use corelog_client::{Admin, ClientError, ErrorCode, NewTopic, TopicDescription};
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
        /// cleanup.policy. Repeat for several.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config)]
        configs: Vec<(String, String)>,
    },
    /// List topics.
    List,
    /// Show topics' settings and per-partition log positions.
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

pub(crate) async fn run(global: &Global, command: TopicCommand) -> Result<(), ClientError> {
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
        TopicCommand::Describe { names } => describe(global, &admin, &names).await?,
        TopicCommand::Delete { name } => {
            admin.delete_topic(&name).await?;
            if global.json {
                println!("{}", json!({"deleted": name}));
            } else {
                println!("deleted topic {name}");
            }
        }
    }
    Ok(())
}

async fn list(global: &Global, admin: &Admin) -> Result<(), ClientError> {
    let topics = admin.list_topics().await?;
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
            let leaderless = topic
                .partitions
                .iter()
                .filter(|partition| partition.leader.is_none() || partition.error.is_some())
                .count();
            let state = match (topic.error, leaderless) {
                (Some(ErrorCode::TopicDeletionInProgress), _) => "deleting".to_owned(),
                (Some(code), _) => code.name().to_owned(),
                (None, 0) => "ok".to_owned(),
                (None, count) => format!(
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

async fn describe(global: &Global, admin: &Admin, names: &[String]) -> Result<(), ClientError> {
    let results = admin.describe_topics(names).await?;
    let mut first_error = None;
    let mut described: Vec<TopicDescription> = Vec::new();
    for name in names {
        match results.iter().find(|(topic, _)| topic == name) {
            Some((_, Ok(description))) => described.push(description.clone()),
            Some((_, Err(error))) => {
                crate::report(error);
                first_error.get_or_insert_with(|| error.clone());
            }
            None => {
                let error = ClientError::Broker {
                    code: corelog_client::ErrorCode::UnknownTopicOrPartition,
                    context: format!("describe topic {name}"),
                    detail: Some("the broker did not describe it".to_owned()),
                };
                crate::report(&error);
                first_error.get_or_insert(error);
            }
        }
    }
    if global.json {
        println!("{}", serde_json::to_string(&described).unwrap_or_default());
    } else {
        for (index, description) in described.iter().enumerate() {
            if index > 0 {
                println!();
            }
            print!("{}", describe_text(description));
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

fn describe_text(description: &TopicDescription) -> String {
    let mut text = format!(
        "topic {}: {}, replication factor {}\n",
        description.name,
        plural(description.partitions, "partition", "partitions"),
        description.replication_factor
    );
    for (key, value) in &description.configs {
        text.push_str(&format!("  {key} = {value}\n"));
    }
    let rows: Vec<Vec<String>> = description
        .partition_states
        .iter()
        .map(|state| {
            vec![
                state.partition.to_string(),
                state.log_start_offset.to_string(),
                state.high_watermark.to_string(),
                state.log_end_offset.to_string(),
                human_bytes(state.size_bytes),
                state.segment_count.to_string(),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "PARTITION",
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
    fn description_shows_settings_and_positions() {
        let description = TopicDescription {
            name: "orders".to_owned(),
            partitions: 1,
            replication_factor: 1,
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
        let text = describe_text(&description);
        assert!(text.starts_with("topic orders: 1 partition, replication factor 1\n"));
        assert!(text.contains("  retention.ms = 1000\n"));
        assert!(
            text.contains("0          5          10              10       2.0 KiB  2"),
            "{text}"
        );
    }
}
