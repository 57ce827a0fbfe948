//! Rebuilding a single node's catalog from its partition directories, after
//! its controller log (`controller/raft.log`) was lost: `corelogd
//! --rebuild-catalog`.
//!
//! The controller log is the only record of which topics exist: without it
//! a node would start an empty catalog, its topics would vanish from
//! metadata while their data stays on disk, and the next topic created
//! could take an old one's id. So a node with an identity and no
//! controller log refuses to start (`crate::data_dir`), and a single node
//! can rebuild what the directories still tell:
//!
//! - each `topics/<name>.<id>/` is a topic, under its own id, with one
//!   partition per numbered subdirectory (a gap becomes an empty partition),
//!   led here at an epoch above every epoch its `replica-meta` records (a
//!   lower one would be refused by its replica, which never leads an epoch
//!   twice);
//! - topics whose name starts with `__` are the cluster's own, with their
//!   usual settings; every other topic gets the broker's defaults: a
//!   topic's settings, the users, ACLs and quotas were only in the lost
//!   log, and are logged as lost;
//! - ids below the highest found + 1 are never given out again, and the
//!   producer id blocks restart far above any handed out before (at the
//!   current time in milliseconds × 1,024), so no producer id is reused.
//!
//! The rebuild is a [`super::import`] like a standalone directory's: it can
//! be killed at any step and run again. A voter of a larger cluster must
//! not rebuild: its peers hold the catalog, and its lost vote is the danger
//! (it rejoins through a voter change instead).

use std::path::Path;

use corelog_controller::{Command, ImportedTopic, LeaderEpoch, NodeId, Replica, TopicId};

use super::{import, import_chunks, standalone_owner, wait_for_registration};
use crate::cluster::ControllerService;
use crate::config::BrokerConfig;
use crate::replica::meta_file;
use corelog_storage::disk::Disk;

/// Producer ids handed out after a rebuild start at the current time in
/// milliseconds times this: above any id allocated before, as long as
/// fewer than this many were allocated per millisecond since the epoch.
const PRODUCER_IDS_PER_MS: i64 = 1_024;

/// A topic found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundTopic {
    /// Its id, from its directory's name.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Partition count: the highest numbered subdirectory + 1.
    pub partitions: u32,
    /// Per partition, the highest epoch its `replica-meta` records (none
    /// for a partition without one).
    pub last_epochs: Vec<Option<LeaderEpoch>>,
}

/// `<name>.<id>`: the name may hold dots, the id is after the last one.
#[must_use]
pub fn parse_topic_dir(name: &str) -> Option<(String, u64)> {
    let (topic, id) = name.rsplit_once('.')?;
    if topic.is_empty() || id.is_empty() || !id.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some((topic.to_owned(), id.parse().ok()?))
}

/// The topics under `data_dir/topics`, by id.
///
/// # Errors
/// What cannot be read, naming the file.
pub async fn scan<D: Disk>(disk: &D, data_dir: &Path) -> Result<Vec<FoundTopic>, String> {
    let topics_dir = data_dir.join("topics");
    let names = match disk.list_dir(&topics_dir).await {
        Ok(names) => names,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(format!("cannot list {}: {error}", topics_dir.display())),
    };
    let mut found = Vec::new();
    for entry in names {
        let Some((name, id)) = parse_topic_dir(&entry) else {
            tracing::warn!(entry, "rebuild: not a topic directory; left alone");
            continue;
        };
        let dir = topics_dir.join(&entry);
        let partitions: Vec<u32> = disk
            .list_dir(&dir)
            .await
            .map_err(|error| format!("cannot list {}: {error}", dir.display()))?
            .iter()
            .filter_map(|partition| partition.parse().ok())
            .collect();
        let Some(count) = partitions.iter().max().map(|last| last + 1) else {
            tracing::warn!(
                topic = name,
                id,
                "rebuild: a topic directory without partitions; left out"
            );
            continue;
        };
        let mut last_epochs = Vec::with_capacity(count as usize);
        for partition in 0..count {
            let meta = meta_file::load(disk, &dir.join(partition.to_string()))
                .await
                .map_err(|error| error.to_string())?;
            last_epochs.push(meta.and_then(|meta| {
                [
                    Some(meta.fenced_epoch),
                    meta.led_epoch,
                    meta.history.last_epoch(),
                ]
                .into_iter()
                .flatten()
                .max()
            }));
        }
        found.push(FoundTopic {
            id,
            name,
            partitions: count,
            last_epochs,
        });
    }
    found.sort_by_key(|topic| topic.id);
    Ok(found)
}

/// The import commands for `found`: every partition on `node_id`, at an
/// epoch above its last one.
#[must_use]
pub fn rebuild_commands(
    found: &[FoundTopic],
    config: &BrokerConfig,
    internal_config: impl Fn(&str) -> Option<std::collections::BTreeMap<String, String>>,
    now_ms: i64,
) -> Vec<Command> {
    let node = NodeId(u64::from(config.node_id));
    let topics: Vec<ImportedTopic> = found
        .iter()
        .map(|topic| {
            let internal = topic
                .name
                .starts_with(corelog_wire::topic::INTERNAL_TOPIC_PREFIX);
            ImportedTopic {
                id: TopicId(topic.id),
                name: topic.name.clone(),
                internal,
                config: internal_config(&topic.name)
                    .unwrap_or_else(|| config.topic_defaults.entries()),
                partitions: (0..topic.partitions)
                    .map(|partition| {
                        vec![Replica {
                            node,
                            shard: standalone_owner(topic.id, partition, config.shards),
                        }]
                    })
                    .collect(),
                leader_epochs: topic
                    .last_epochs
                    .iter()
                    .map(|last| {
                        let above = last.map_or(0, |epoch| epoch.0.saturating_add(1));
                        LeaderEpoch(above.max(corelog_controller::IMPORTED_LEADER_EPOCH.0))
                    })
                    .collect(),
                created_at_ms: now_ms,
            }
        })
        .collect();
    let next_topic_id = found.iter().map(|topic| topic.id + 1).max().unwrap_or(0);
    import_chunks(
        topics,
        next_topic_id,
        now_ms.saturating_mul(PRODUCER_IDS_PER_MS),
    )
}

/// Rebuilds the catalog from the partition directories (see the module
/// docs), once this broker is registered with its own controller.
///
/// # Errors
/// A directory that cannot be read, or an import the controller refused.
pub async fn rebuild_catalog<D: Disk>(
    disk: &D,
    config: &BrokerConfig,
    internal_config: impl Fn(&str) -> Option<std::collections::BTreeMap<String, String>>,
    controller: &ControllerService,
    incarnation: u64,
    now_ms: i64,
) -> Result<(), String> {
    let found = scan(disk, &config.data_dir).await?;
    let partitions: u64 = found.iter().map(|topic| u64::from(topic.partitions)).sum();
    tracing::warn!(
        topics = found.len(),
        partitions,
        data_dir = %config.data_dir.display(),
        "rebuilding the catalog from the topic directories: topics keep their ids and records; \
         their settings (now the broker's defaults), users, ACLs and quotas were only in the \
         lost controller log and must be set again"
    );
    wait_for_registration(controller, config.node_id, incarnation).await;
    let commands = rebuild_commands(&found, config, internal_config, now_ms);
    import(controller, commands, &config.data_dir, "rebuild").await?;
    tracing::info!(
        topics = found.len(),
        partitions,
        "catalog rebuilt; start without --rebuild-catalog from now on"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_directories_name_the_topic_then_its_id() {
        assert_eq!(parse_topic_dir("orders.7"), Some(("orders".to_owned(), 7)));
        assert_eq!(
            parse_topic_dir("eu.orders.v2.12"),
            Some(("eu.orders.v2".to_owned(), 12))
        );
        for bad in ["orders", "orders.", ".7", "orders.x7", "orders.-1"] {
            assert_eq!(parse_topic_dir(bad), None, "{bad}");
        }
    }

    #[test]
    fn partitions_lead_above_every_epoch_their_logs_record_and_ids_are_not_reused() {
        let found = [
            FoundTopic {
                id: 1,
                name: "__groups".to_owned(),
                partitions: 2,
                last_epochs: vec![Some(LeaderEpoch(4)), None],
            },
            FoundTopic {
                id: 6,
                name: "orders".to_owned(),
                partitions: 1,
                last_epochs: vec![Some(LeaderEpoch(1))],
            },
        ];
        let config = BrokerConfig::default();
        let commands = rebuild_commands(
            &found,
            &config,
            |name| (name == "__groups").then(std::collections::BTreeMap::new),
            1_000,
        );
        let [
            Command::ImportTopics {
                topics,
                next_topic_id,
                producer_id_block_end,
            },
        ] = commands.as_slice()
        else {
            panic!("{commands:?}");
        };
        assert_eq!((*next_topic_id, *producer_id_block_end), (7, 1_024_000));
        assert_eq!(topics[0].leader_epochs, [LeaderEpoch(5), LeaderEpoch(1)]);
        assert_eq!(topics[1].leader_epochs, [LeaderEpoch(2)]);
        assert!(topics[0].internal && topics[0].config.is_empty());
        assert_eq!(topics[1].config, config.topic_defaults.entries());
    }
}
