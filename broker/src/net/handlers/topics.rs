//! Metadata, CreateTopics, DeleteTopics and DescribeTopics.

use std::rc::Rc;

use corelog_wire::error::ErrorCode;
use corelog_wire::message::create_topics::{CreateTopicsRequest, CreateTopicsResponse};
use corelog_wire::message::decode_request;
use corelog_wire::message::delete_topics::{DeleteTopicsRequest, DeleteTopicsResponse};
use corelog_wire::message::describe_topics::{
    DescribeTopicsRequest, DescribeTopicsResponse, PartitionState, TopicDescription,
};
use corelog_wire::message::metadata::{
    BrokerInfo, MetadataRequest, MetadataResponse, PartitionMetadata, TopicMetadata,
};
use corelog_wire::message::{ConfigEntry, TopicResult};

use corelog_controller::acls::{Operation, ResourceType};

use crate::api::{Reply, refused, unencodable};
use crate::cluster::membership::{TopicOutcome, TopicToCreate};
use crate::metadata::snapshot::{ClusterView, broker_id};
use crate::net::access::Access;
use crate::partition::{OffsetQuery, PartitionError, ReplicaSummary};
use crate::runtime::shard::Shard;
use corelog_wire::types::PartitionId;

pub(super) fn metadata(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<MetadataRequest>(body).map_err(refused)?;
    let snapshot = shard.snapshot();
    let wanted = request
        .topics
        .as_ref()
        .map(|names| names.iter().map(|name| name.to_string()).collect());
    let listing_all = wanted.is_none();
    let mut response = cluster_metadata(&snapshot.cluster, wanted);
    if listing_all {
        list_deleting(&mut response, shard);
    }
    if access.restricts() {
        hide_undescribable(&mut response, access, listing_all);
    }
    Reply::encode(&response, Vec::new())
}

/// What a principal may not describe: left out of a listing, and answered
/// `TOPIC_AUTHORIZATION_FAILED` when named, exactly as a topic that does
/// not exist is (so a guessed name reveals nothing).
fn hide_undescribable(response: &mut MetadataResponse, access: &Access, listing_all: bool) {
    let visible = |name: &str| access.allows(Operation::Describe, ResourceType::Topic, name);
    if listing_all {
        response.topics.retain(|topic| visible(&topic.name));
        return;
    }
    for topic in &mut response.topics {
        if !visible(&topic.name) {
            topic.error_code = ErrorCode::TopicAuthorizationFailed.code();
            topic.partitions.clear();
        }
    }
}

/// Adds the deleted topics whose files this broker is still removing, as
/// `TOPIC_DELETION_IN_PROGRESS` without partitions, unless a new topic took
/// the name already.
fn list_deleting(response: &mut MetadataResponse, shard: &Shard) {
    for deleting in shard.topic_deletions.deleting() {
        if response
            .topics
            .iter()
            .any(|topic| topic.name == deleting.name)
        {
            continue;
        }
        response.topics.push(TopicMetadata {
            name: deleting.name,
            error_code: ErrorCode::TopicDeletionInProgress.code(),
            partitions: Vec::new(),
        });
    }
}

/// Metadata from the controller's state: every broker, and each
/// partition's leader, epoch and replicas.
fn cluster_metadata(cluster: &ClusterView, wanted: Option<Vec<String>>) -> MetadataResponse {
    let state = &cluster.state;
    let node_id = broker_id;
    let wanted = wanted.unwrap_or_else(|| {
        state
            .topics()
            .values()
            .map(|topic| topic.name.clone())
            .collect()
    });
    let topics = wanted
        .into_iter()
        .map(|name| match state.topic_by_name(&name) {
            Some(topic) => TopicMetadata {
                partitions: topic
                    .partitions
                    .iter()
                    .enumerate()
                    .map(|(index, partition)| {
                        let leader_replica = partition
                            .leader
                            .and_then(|leader| partition.replica_on(leader));
                        PartitionMetadata {
                            partition: index as u32,
                            error_code: if partition.leader.is_some() {
                                ErrorCode::None.code()
                            } else {
                                ErrorCode::LeaderNotAvailable.code()
                            },
                            leader: partition.leader.map(node_id),
                            leader_epoch: partition.leader_epoch.0,
                            replicas: partition
                                .replicas
                                .iter()
                                .map(|replica| node_id(replica.node))
                                .collect(),
                            in_sync: partition.leader.map(node_id).into_iter().collect(),
                            owner_shard: leader_replica.map_or(0, |replica| replica.shard.0),
                        }
                    })
                    .collect(),
                name,
                error_code: ErrorCode::None.code(),
            },
            None => TopicMetadata {
                name,
                error_code: ErrorCode::UnknownTopicOrPartition.code(),
                partitions: Vec::new(),
            },
        })
        .collect();
    MetadataResponse {
        brokers: state
            .brokers()
            .values()
            .map(|broker| BrokerInfo {
                node_id: node_id(broker.id),
                host: broker.host.clone(),
                port: broker.port,
                rack: broker.rack.clone(),
            })
            .collect(),
        controller_id: cluster.controller,
        metadata_version: state.version(),
        topics,
    }
}

fn results(outcomes: Vec<TopicOutcome>) -> Vec<TopicResult> {
    outcomes
        .into_iter()
        .map(|outcome| match outcome.result {
            Ok(()) => TopicResult {
                name: outcome.name,
                error_code: ErrorCode::None.code(),
                message: None,
            },
            Err(error) => TopicResult {
                name: outcome.name,
                error_code: error.code.code(),
                message: Some(error.message),
            },
        })
        .collect()
}

pub(super) async fn create(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<CreateTopicsRequest>(body).map_err(refused)?;
    let mut refused_early = Vec::new();
    let mut to_create = Vec::new();
    for topic in request.topics.iter() {
        let name = topic.name.to_string();
        if let Err(error) = access.topic(Operation::Create, &name) {
            refused_early.push(TopicOutcome {
                name,
                result: Err(error),
            });
            continue;
        }
        // The request's entries over this broker's defaults; the controller
        // checks them (and the name) by the one set of rules.
        let mut config = shard.config.topic_defaults.entries();
        for entry in topic.configs.iter() {
            config.insert(entry.key.to_string(), entry.value.to_string());
        }
        if let Some(error) =
            frame_limit_exceeded(&config, shard.config.max_frame_bytes).or_else(|| {
                decompressed_limit_exceeded(
                    &config,
                    shard.config.log.batch_limits.decompressed_bytes_max,
                )
            })
        {
            refused_early.push(TopicOutcome {
                name,
                result: Err(error),
            });
            continue;
        }
        to_create.push(TopicToCreate {
            name,
            partitions: topic.partitions.to_native(),
            replication_factor: topic.replication_factor.to_native(),
            config,
            owner: access.limited_principal().map(str::to_owned),
        });
    }
    let mut outcomes = shard.create_topics(to_create, request.validate_only).await;
    outcomes.extend(refused_early);
    for outcome in &outcomes {
        if let Err(error) = &outcome.result {
            shard.metrics.error(error.code);
        }
    }
    // Answer in request order.
    let order: Vec<String> = request
        .topics
        .iter()
        .map(|topic| topic.name.to_string())
        .collect();
    outcomes.sort_by_key(|outcome| order.iter().position(|name| *name == outcome.name));
    Reply::message(
        &CreateTopicsResponse {
            results: results(outcomes),
        },
        Vec::new(),
    )
    .map_err(unencodable)
}

/// A broker limit, not a topic rule: a batch of `max.message.bytes` must
/// fit in a request frame this broker accepts. `None` when it does (or
/// when the value does not parse: the controller refuses that by itself).
fn frame_limit_exceeded(
    config: &std::collections::BTreeMap<String, String>,
    max_frame_bytes: u32,
) -> Option<PartitionError> {
    let max_message_bytes: u64 = config.get("max.message.bytes")?.trim().parse().ok()?;
    (max_message_bytes >= u64::from(max_frame_bytes)).then(|| {
        PartitionError::new(
            ErrorCode::InvalidConfig,
            format!(
                "max.message.bytes must be smaller than the broker's max_frame_bytes ({max_frame_bytes})"
            ),
        )
    })
}

/// A broker limit, not a topic rule: a topic may not let a batch inflate
/// past what this broker decompresses at all. `None` when it does not (or
/// when the value does not parse: the controller refuses that by itself).
fn decompressed_limit_exceeded(
    config: &std::collections::BTreeMap<String, String>,
    decompressed_bytes_max: usize,
) -> Option<PartitionError> {
    let bytes: u64 = config
        .get("max.uncompressed.message.bytes")?
        .trim()
        .parse()
        .ok()?;
    (bytes > decompressed_bytes_max as u64).then(|| {
        PartitionError::new(
            ErrorCode::InvalidConfig,
            format!(
                "max.uncompressed.message.bytes must be at most the broker's limit on a decompressed batch ({decompressed_bytes_max})"
            ),
        )
    })
}

pub(super) async fn delete(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<DeleteTopicsRequest>(body).map_err(refused)?;
    let (names, refused_early): (Vec<String>, Vec<String>) = request
        .names
        .iter()
        .map(|name| name.to_string())
        .partition(|name| access.topic(Operation::Delete, name).is_ok());
    let mut outcomes = shard.delete_topics(names).await;
    outcomes.extend(refused_early.into_iter().map(|name| TopicOutcome {
        result: access.topic(Operation::Delete, &name),
        name,
    }));
    // Answer in request order.
    let order: Vec<&str> = request.names.iter().map(|name| name.as_str()).collect();
    outcomes.sort_by_key(|outcome| order.iter().position(|name| *name == outcome.name));
    for outcome in &outcomes {
        if let Err(error) = &outcome.result {
            shard.metrics.error(error.code);
        }
    }
    Reply::encode(
        &DeleteTopicsResponse {
            results: results(outcomes),
        },
        Vec::new(),
    )
}

pub(super) async fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<DescribeTopicsRequest>(body).map_err(refused)?;
    let snapshot = shard.snapshot();
    let names: Vec<String> = if request.names.is_empty() {
        snapshot
            .topics
            .keys()
            .filter(|name| access.allows(Operation::Describe, ResourceType::Topic, name))
            .cloned()
            .collect()
    } else {
        request.names.iter().map(|name| name.to_string()).collect()
    };
    let mut topics = Vec::with_capacity(names.len());
    for name in names {
        if let Err(error) = access.topic(Operation::Describe, &name) {
            shard.metrics.error(error.code);
            topics.push(TopicDescription {
                message: Some(error.message),
                name,
                error_code: error.code.code(),
                partitions: 0,
                replication_factor: 0,
                configs: Vec::new(),
                partition_states: Vec::new(),
            });
            continue;
        }
        let Some(view) = snapshot.topics.get(&name) else {
            topics.push(TopicDescription {
                message: Some(format!("topic {name:?} does not exist")),
                name,
                error_code: ErrorCode::UnknownTopicOrPartition.code(),
                partitions: 0,
                replication_factor: 0,
                configs: Vec::new(),
                partition_states: Vec::new(),
            });
            continue;
        };
        let mut states = Vec::with_capacity(view.partitions.len());
        let mut failure: Option<PartitionError> = None;
        for (index, partition) in view.partitions.iter().enumerate() {
            let id = PartitionId {
                topic_id: view.record.id,
                partition: index as u32,
            };
            if !partition.replication.local {
                // No replica here: the leader's bounds.
                match remote_state(shard, &name, index as u32).await {
                    Ok(state) => states.push(state),
                    Err(error) => failure = failure.or(Some(error)),
                }
                continue;
            }
            match shard.describe(id, partition.owner).await {
                Ok(ReplicaSummary { log, epoch_starts }) => states.push(PartitionState {
                    partition: index as u32,
                    log_start_offset: log.log_start.0,
                    high_watermark: log.high_watermark.0,
                    log_end_offset: log.log_end.0,
                    size_bytes: log.size_bytes,
                    segment_count: log.segment_count,
                    epoch_starts: epoch_starts.into_iter().map(|start| start.0).collect(),
                }),
                Err(error) => failure = failure.or(Some(error)),
            }
        }
        topics.push(TopicDescription {
            name,
            error_code: failure
                .as_ref()
                .map_or(ErrorCode::None, |error| error.code)
                .code(),
            message: failure.map(|error| error.message),
            partitions: view.record.partitions,
            replication_factor: view.partitions.first().map_or(1, |partition| {
                u16::try_from(partition.replication.replicas.len()).unwrap_or(u16::MAX)
            }),
            configs: view
                .record
                .config
                .entries()
                .into_iter()
                .map(|(key, value)| ConfigEntry { key, value })
                .collect(),
            partition_states: states,
        });
    }
    Reply::message(&DescribeTopicsResponse { topics }, Vec::new()).map_err(unencodable)
}

/// A partition led by another broker, described by its leader's log start
/// and high watermark (sizes are the leader's to know).
async fn remote_state(
    shard: &Rc<Shard>,
    topic: &str,
    partition: u32,
) -> Result<PartitionState, PartitionError> {
    let bound = |query| async move {
        let found = shard.offset_anywhere(topic, partition, query).await?;
        Ok::<u64, PartitionError>(found.map_or(0, |(offset, _)| offset.0))
    };
    let log_start_offset = bound(OffsetQuery::Earliest).await?;
    let high_watermark = bound(OffsetQuery::Latest).await?;
    Ok(PartitionState {
        partition,
        log_start_offset,
        high_watermark,
        log_end_offset: high_watermark,
        size_bytes: 0,
        segment_count: 0,
        // Not needed by a describing client; consumer lag asks the leader.
        epoch_starts: Vec::new(),
    })
}
