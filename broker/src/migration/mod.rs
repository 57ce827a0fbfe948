//! Upgrading a data directory that a standalone broker wrote, before every
//! node became a cluster (a single node being a cluster of one): its topic
//! catalog (`metadata`, JSON) goes into the controller's metadata under the
//! topics' own ids, and each partition becomes a replica whose history says
//! that epoch 0 (what the standalone broker stamped on every batch) wrote
//! its log. Records, offsets, producer state and group offsets stay where
//! they are: partition directories keep their names and contents.
//!
//! One time, logged, and crash-safe: every step is idempotent, and the
//! catalog is renamed only after everything it held is in the controller's
//! metadata, so a process killed at any step does the rest at its next
//! start.
//!
//! 1. Each partition directory without `replica-meta` gets one (written
//!    atomically): fence 0, never led, epoch 0 from offset 0.
//! 2. Once this broker is registered, the controller commits
//!    `ImportTopics` commands (the catalog in chunks), each placing every
//!    partition on this broker at the shard the standalone broker used, led
//!    here at epoch 1. A chunk already applied is skipped by the state
//!    machine.
//! 3. The catalog is renamed `metadata.migrated`.
//!
//! Until step 2 commits, the metadata has none of these topics, so no shard
//! opens their replicas; the internal topics are not created meanwhile
//! (the catalog holds them).

pub mod legacy_catalog;
pub mod rebuild;

use std::path::Path;
use std::time::{Duration, Instant};

use corelog_controller::command::IMPORTED_TOPICS_MAX;
use corelog_controller::{Command, IMPORTED_LEADER_EPOCH, ImportedTopic, NodeId, Replica, TopicId};
use corelog_replication::{EpochHistory, ReplicaMeta};
use corelog_wire::types::{LeaderEpoch, Offset, ShardId};

use crate::cluster::ControllerService;
use crate::config::BrokerConfig;
use crate::executor::wait_until;
use crate::metadata::topic_dir;
use crate::replica::meta_file;
use corelog_storage::disk::Disk;
use legacy_catalog::LegacyMetadata;

/// Partitions one import command places at most: a command stays well
/// under the controller's command size bound (14 bytes a partition).
const PARTITIONS_PER_IMPORT_MAX: usize = 100_000;
/// How often a long migration logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The environment variable that, in a broker built with the
/// `fault-injection` feature, names a migration step at which the process
/// kills itself (SIGKILL): `replica-meta` (after the first partition's
/// metadata), `imported` (after the import committed, before the catalog
/// is renamed).
pub const CRASH_AT_ENV: &str = "CORELOG_CRASH_AT";

/// Refuses, before anything starts, to run a standalone data directory in
/// a cluster it was never part of: it migrates only as the one voter of
/// its own cluster (no `--controller-voters`, or only itself).
///
/// # Errors
/// What to do instead, for the operator.
pub fn check_configuration(config: &BrokerConfig) -> Result<(), String> {
    let catalog = legacy_catalog::path(&config.data_dir);
    if !catalog.exists() {
        return Ok(());
    }
    let voters = config.voters();
    if voters.len() == 1 && voters.contains_key(&config.node_id) {
        return Ok(());
    }
    Err(format!(
        "{} holds the topic catalog of a standalone broker: start this broker once without \
         --controller-voters (or with itself as the only voter) to migrate it to a one-voter \
         cluster; a single node cannot join a larger cluster yet (see the README)",
        catalog.display()
    ))
}

/// Migrates the data directory if a standalone broker wrote it (see the
/// module docs); nothing to do otherwise.
///
/// # Errors
/// A message for the start-up failure: a damaged catalog, a metadata write
/// that failed, an import the controller refused (its metadata already
/// holds other topics under those ids or names).
pub async fn migrate_if_standalone<D: Disk>(
    disk: &D,
    config: &BrokerConfig,
    controller: &ControllerService,
    incarnation: u64,
) -> Result<(), String> {
    let data_dir = &config.data_dir;
    let Some(legacy) = legacy_catalog::load(disk, data_dir)
        .await
        .map_err(|error| error.to_string())?
    else {
        return Ok(());
    };
    let partitions: u64 = legacy
        .catalog
        .topics
        .values()
        .map(|topic| u64::from(topic.partitions))
        .sum();
    tracing::info!(
        topics = legacy.catalog.topics.len(),
        partitions,
        data_dir = %data_dir.display(),
        "migrating a standalone broker's data directory to a one-voter cluster"
    );
    write_replica_metas(disk, data_dir, &legacy).await?;
    wait_for_registration(controller, config.node_id, incarnation).await;
    let commands = import_commands(&legacy, config.node_id, config.shards);
    import(controller, commands, data_dir, "migration").await?;
    crash_point("imported");
    let catalog = legacy_catalog::path(data_dir);
    let migrated = data_dir.join(legacy_catalog::MIGRATED_FILE_NAME);
    disk.rename(&catalog, &migrated)
        .await
        .and(disk.sync_dir(data_dir).await)
        .map_err(|error| format!("cannot rename {}: {error}", catalog.display()))?;
    tracing::info!(
        topics = legacy.catalog.topics.len(),
        partitions,
        kept = %migrated.display(),
        "migration finished"
    );
    Ok(())
}

/// The replica metadata of a partition a standalone broker wrote: nothing
/// promised, never led, and every batch from epoch 0.
#[must_use]
pub fn standalone_replica_meta() -> ReplicaMeta {
    let mut history = EpochHistory::new();
    let appended = history.append(LeaderEpoch(0), Offset(0));
    debug_assert!(appended.is_ok(), "a first history entry is always accepted");
    ReplicaMeta {
        fenced_epoch: LeaderEpoch(0),
        led_epoch: None,
        history,
    }
}

/// Step 1: `replica-meta` in every partition directory that lacks one.
async fn write_replica_metas<D: Disk>(
    disk: &D,
    data_dir: &Path,
    legacy: &LegacyMetadata,
) -> Result<(), String> {
    let meta = standalone_replica_meta();
    let (mut written, mut last_report) = (0u64, Instant::now());
    for topic in legacy.catalog.topics.values() {
        for partition in 0..topic.partitions {
            let dir = topic_dir(data_dir, &topic.name, topic.id).join(partition.to_string());
            if disk.list_dir(&dir).await.is_err() {
                // Never opened: the replica starts empty, as any new one.
                continue;
            }
            let existing = meta_file::load(disk, &dir)
                .await
                .map_err(|error| error.to_string())?;
            if existing.is_some() {
                continue;
            }
            meta_file::store(disk, &dir, &meta)
                .await
                .map_err(|error| error.to_string())?;
            written += 1;
            crash_point("replica-meta");
            if last_report.elapsed() >= PROGRESS_EVERY {
                last_report = Instant::now();
                tracing::info!(written, "migration: replica metadata written");
            }
        }
    }
    tracing::info!(
        written,
        "migration: every partition has its replica metadata"
    );
    Ok(())
}

/// Waits until the controller's metadata shows this process registered and
/// unfenced: the import places replicas on it, which the state machine
/// accepts only on a live broker.
async fn wait_for_registration(controller: &ControllerService, node_id: u32, incarnation: u64) {
    let node = NodeId(u64::from(node_id));
    let registered = || {
        controller
            .state()
            .brokers()
            .get(&node)
            .is_some_and(|broker| !broker.fenced && broker.incarnation == incarnation)
    };
    while !wait_until(
        controller.applied_signal(),
        Instant::now() + PROGRESS_EVERY,
        registered,
    )
    .await
    {
        tracing::info!("migration waits for this broker's registration with its controller");
    }
}

/// Step 2's commands: the catalog in chunks, every partition on `node_id`
/// at the shard the standalone broker gave it.
fn import_commands(legacy: &LegacyMetadata, node_id: u32, shard_count: u16) -> Vec<Command> {
    let node = NodeId(u64::from(node_id));
    let mut topics: Vec<ImportedTopic> = legacy
        .catalog
        .topics
        .values()
        .map(|topic| ImportedTopic {
            id: TopicId(topic.id),
            name: topic.name.clone(),
            internal: topic
                .name
                .starts_with(corelog_wire::topic::INTERNAL_TOPIC_PREFIX),
            config: topic.config.entries(),
            partitions: (0..topic.partitions)
                .map(|partition| {
                    vec![Replica {
                        node,
                        shard: standalone_owner(topic.id, partition, shard_count),
                    }]
                })
                .collect(),
            leader_epochs: vec![IMPORTED_LEADER_EPOCH; topic.partitions as usize],
            created_at_ms: topic.created_at_ms,
        })
        .collect();
    topics.sort_by_key(|topic| topic.id);
    import_chunks(
        topics,
        legacy.catalog.next_topic_id,
        legacy.producer_id_block_end,
    )
}

/// `topics` (sorted by id) as import commands of bounded size. Each chunk
/// but the last says its own highest id + 1 is the next topic id, the last
/// one `next_topic_id`: the state machine refuses an id below the next one
/// it knows (it may have been used), so a chunk that raised it to the
/// catalog's would make the next chunk's ids refused.
fn import_chunks(
    topics: Vec<ImportedTopic>,
    next_topic_id: u64,
    producer_id_block_end: i64,
) -> Vec<Command> {
    debug_assert!(topics.windows(2).all(|pair| pair[0].id < pair[1].id));
    let mut chunks: Vec<Vec<ImportedTopic>> = Vec::new();
    let mut chunk: Vec<ImportedTopic> = Vec::new();
    let mut chunk_partitions = 0;
    for topic in topics {
        if !chunk.is_empty()
            && (chunk.len() == IMPORTED_TOPICS_MAX
                || chunk_partitions + topic.partitions.len() > PARTITIONS_PER_IMPORT_MAX)
        {
            chunks.push(std::mem::take(&mut chunk));
            chunk_partitions = 0;
        }
        chunk_partitions += topic.partitions.len();
        chunk.push(topic);
    }
    if !chunk.is_empty() {
        chunks.push(chunk);
    }
    let last = chunks.len().saturating_sub(1);
    chunks
        .into_iter()
        .enumerate()
        .map(|(index, topics)| {
            let next_topic_id = if index == last {
                next_topic_id
            } else {
                topics.last().map_or(next_topic_id, |topic| topic.id.0 + 1)
            };
            Command::ImportTopics {
                topics,
                next_topic_id,
                producer_id_block_end,
            }
        })
        .collect()
}

/// Proposes `commands` one after the other, retrying while the one voter
/// elects itself; `what` names the work in the log and errors.
async fn import(
    controller: &ControllerService,
    commands: Vec<Command>,
    data_dir: &Path,
    what: &str,
) -> Result<(), String> {
    for command in commands {
        let imported = loop {
            match controller.import_topics(command.clone()).await {
                Ok(imported) => break imported,
                // The one voter is electing itself, or a proposal was lost
                // in a Ready: nothing applied twice harms (see the docs).
                Err(crate::cluster::ControllerRequestError::NotController { .. }) => {
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => {
                    return Err(format!(
                        "the {what} of {} was refused: {error}",
                        data_dir.display()
                    ));
                }
            }
        };
        tracing::info!(
            imported,
            what,
            "topics imported into the controller's metadata"
        );
    }
    Ok(())
}

/// The shard a standalone broker gave partition `partition` of topic
/// `topic_id`: round-robin, offset by the topic id.
fn standalone_owner(topic_id: u64, partition: u32, shard_count: u16) -> ShardId {
    let shards = u64::from(shard_count.max(1));
    ShardId(u16::try_from((topic_id + u64::from(partition)) % shards).unwrap_or(0))
}

/// In a broker built for fault injection, kills the process at `step` when
/// [`CRASH_AT_ENV`] names it (the migration's crash tests); nothing
/// otherwise.
fn crash_point(step: &str) {
    #[cfg(feature = "fault-injection")]
    if std::env::var(CRASH_AT_ENV).is_ok_and(|at| at == step) {
        tracing::warn!(step, "fault injection: the migration kills this process");
        let killed =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        tracing::error!(?killed, "fault injection: SIGKILL did not end the process");
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = step;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::legacy_catalog::{
        LegacyCatalog, LegacyCleanupPolicy, LegacyTopic, LegacyTopicConfig,
    };
    use super::*;

    fn legacy(topics: &[(u64, &str, u32)]) -> LegacyMetadata {
        let config = LegacyTopicConfig {
            retention_ms: None,
            retention_bytes: None,
            segment_bytes: 1 << 20,
            segment_ms: 1000,
            max_message_bytes: 1 << 16,
            cleanup_policy: LegacyCleanupPolicy::Delete,
        };
        LegacyMetadata {
            catalog: LegacyCatalog {
                version: 9,
                topics: topics
                    .iter()
                    .map(|(id, name, partitions)| {
                        (
                            (*name).to_owned(),
                            LegacyTopic {
                                id: *id,
                                name: (*name).to_owned(),
                                partitions: *partitions,
                                config,
                                created_at_ms: 5,
                            },
                        )
                    })
                    .collect::<BTreeMap<_, _>>(),
                next_topic_id: 12,
            },
            producer_id_block_end: 3072,
        }
    }

    #[test]
    fn the_catalog_is_imported_on_this_node_at_the_shards_it_used() {
        let commands = import_commands(&legacy(&[(0, "__groups", 2), (7, "orders", 3)]), 1, 2);
        assert_eq!(commands.len(), 1);
        let Command::ImportTopics {
            topics,
            next_topic_id,
            producer_id_block_end,
        } = &commands[0]
        else {
            panic!("an import: {commands:?}");
        };
        assert_eq!((*next_topic_id, *producer_id_block_end), (12, 3072));
        assert_eq!(topics[0].name, "__groups");
        assert!(topics[0].internal && !topics[1].internal);
        let shards: Vec<u16> = topics[1]
            .partitions
            .iter()
            .map(|replicas| replicas[0].shard.0)
            .collect();
        assert_eq!(shards, vec![1, 0, 1], "(topic id + partition) % shards");
        assert!(
            topics[1]
                .partitions
                .iter()
                .all(|replicas| replicas.len() == 1 && replicas[0].node == NodeId(1))
        );
    }

    #[test]
    fn a_large_catalog_is_imported_in_bounded_chunks() {
        let names: Vec<String> = (0..2_500).map(|id| format!("topic-{id}")).collect();
        let topics: Vec<(u64, &str, u32)> = names
            .iter()
            .enumerate()
            .map(|(id, name)| (id as u64, name.as_str(), 1))
            .collect();
        let commands = import_commands(&legacy(&topics), 1, 1);
        assert_eq!(commands.len(), 3);
        let sizes: Vec<usize> = commands
            .iter()
            .map(|command| match command {
                Command::ImportTopics { topics, .. } => topics.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(sizes, vec![1024, 1024, 452]);
        assert!(
            commands
                .iter()
                .all(|command| command.encode().len()
                    < corelog_controller::command::COMMAND_BYTES_MAX)
        );
    }

    #[test]
    fn every_chunk_of_a_large_catalog_applies() {
        let names: Vec<String> = (0..2_500).map(|id| format!("topic-{id}")).collect();
        let topics: Vec<(u64, &str, u32)> = names
            .iter()
            .enumerate()
            .map(|(id, name)| (id as u64, name.as_str(), 1))
            .collect();
        let mut legacy = legacy(&topics);
        legacy.catalog.next_topic_id = 2_600;
        let mut state = corelog_controller::MetadataState::default();
        for command in [
            Command::RegisterBroker {
                node: NodeId(1),
                host: "127.0.0.1".to_owned(),
                port: 7100,
                rack: None,
                shard_count: 1,
                incarnation: 1,
            },
            Command::UnfenceBroker {
                node: NodeId(1),
                incarnation: 1,
            },
        ] {
            state.apply(state.version() + 1, &command).unwrap();
        }
        // Before the chunks named their own next ids, the second chunk's
        // ids were below the first one's "next topic id" and refused.
        for command in import_commands(&legacy, 1, 1) {
            state.apply(state.version() + 1, &command).unwrap();
        }
        assert_eq!(state.topics().len(), 2_500);
        assert_eq!(state.next_topic_id(), TopicId(2_600));
    }

    #[test]
    fn a_migrated_partition_recovers_with_its_epoch_zero_log() {
        let meta = standalone_replica_meta();
        let recovered = corelog_replication::RecoveredLog {
            log_start: Offset(0),
            log_end: Offset(40),
            last_epoch: Some(LeaderEpoch(0)),
        };
        let (replica, actions) = corelog_replication::Replica::recover(
            corelog_replication::ReplicaId(1),
            corelog_wire::types::PartitionId {
                topic_id: 1,
                partition: 0,
            },
            corelog_replication::ReplicaConfig::default(),
            meta,
            recovered,
        )
        .unwrap();
        assert!(actions.is_empty());
        assert_eq!(
            replica.meta().history.epoch_before(Offset(40)),
            Some(LeaderEpoch(0))
        );
        let mut replica = replica;
        assert!(
            replica
                .become_leader(
                    corelog_controller::IMPORTED_LEADER_EPOCH,
                    &[corelog_replication::ReplicaId(1)],
                    0
                )
                .is_ok(),
            "the imported epoch is above the standalone one"
        );
    }
}
