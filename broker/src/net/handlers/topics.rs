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

use super::{refused, unencodable};
use crate::metadata::TopicConfig;
use crate::metadata::catalog::validate_topic_name;
use crate::metadata::snapshot::ClusterView;
use crate::net::Reply;
use crate::partition::{OffsetQuery, PartitionError};
use crate::runtime::command::{PartitionId, TopicOutcome, TopicToCreate};
use crate::runtime::shard::Shard;

pub(super) fn metadata(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<MetadataRequest>(body).map_err(refused)?;
    let snapshot = shard.snapshot();
    if let Some(cluster) = &snapshot.cluster {
        let wanted = request
            .topics
            .as_ref()
            .map(|names| names.iter().map(|name| name.to_string()).collect());
        let response = cluster_metadata(cluster, wanted);
        return Reply::message(&response, Vec::new()).map_err(unencodable);
    }
    let node_id = shard.config.node_id;
    let wanted: Vec<String> = match request.topics.as_ref() {
        Some(names) => names.iter().map(|name| name.to_string()).collect(),
        None => snapshot.topics.keys().cloned().collect(),
    };
    let topics = wanted
        .into_iter()
        .map(|name| match snapshot.topics.get(&name) {
            Some(view) => TopicMetadata {
                partitions: view
                    .partitions
                    .iter()
                    .enumerate()
                    .map(|(index, partition)| PartitionMetadata {
                        partition: index as u32,
                        error_code: ErrorCode::None.code(),
                        leader: Some(node_id),
                        leader_epoch: 0,
                        replicas: vec![node_id],
                        in_sync: vec![node_id],
                        owner_shard: partition.owner,
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
    let response = MetadataResponse {
        brokers: vec![BrokerInfo {
            node_id,
            host: shard.config.advertised_host.clone(),
            port: shard.config.listen.port(),
            rack: None,
        }],
        controller_id: Some(node_id),
        metadata_version: snapshot.version,
        topics,
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

/// Metadata in cluster mode, from the controller's state: every broker,
/// and each partition's leader, epoch and replicas.
fn cluster_metadata(cluster: &ClusterView, wanted: Option<Vec<String>>) -> MetadataResponse {
    let state = &cluster.state;
    let node_id = |node: corelog_controller::NodeId| u32::try_from(node.0).unwrap_or(u32::MAX);
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

pub(super) async fn create(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<CreateTopicsRequest>(body).map_err(refused)?;
    let mut refused_early = Vec::new();
    let mut to_create = Vec::new();
    for topic in request.topics.iter() {
        let name = topic.name.to_string();
        let entries = topic
            .configs
            .iter()
            .map(|entry| (entry.key.as_str(), entry.value.as_str()));
        match TopicConfig::with_entries(&shard.config.topic_defaults, entries) {
            Ok(config)
                if (config.max_message_bytes as usize) < shard.config.max_frame_bytes as usize =>
            {
                to_create.push(TopicToCreate {
                    name,
                    partitions: topic.partitions.to_native(),
                    replication_factor: topic.replication_factor.to_native(),
                    config,
                });
            }
            Ok(_) => refused_early.push(TopicOutcome {
                name,
                result: Err(PartitionError::new(
                    ErrorCode::InvalidConfig,
                    "max.message.bytes must be smaller than the broker's max_frame_bytes",
                )),
            }),
            Err(message) => refused_early.push(TopicOutcome {
                name,
                result: Err(PartitionError::new(ErrorCode::InvalidConfig, message)),
            }),
        }
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

pub(super) async fn delete(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<DeleteTopicsRequest>(body).map_err(refused)?;
    let names: Vec<String> = request.names.iter().map(|name| name.to_string()).collect();
    let mut checked = Vec::new();
    let mut invalid = Vec::new();
    for name in names {
        match validate_topic_name(&name) {
            Ok(()) => checked.push(name),
            Err(error) => invalid.push(TopicOutcome {
                name,
                result: Err(PartitionError::from(error)),
            }),
        }
    }
    let mut outcomes = shard.delete_topics(checked).await;
    outcomes.extend(invalid);
    Reply::message(
        &DeleteTopicsResponse {
            results: results(outcomes),
        },
        Vec::new(),
    )
    .map_err(unencodable)
}

pub(super) async fn describe(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<DescribeTopicsRequest>(body).map_err(refused)?;
    let snapshot = shard.snapshot();
    let names: Vec<String> = if request.names.is_empty() {
        snapshot.topics.keys().cloned().collect()
    } else {
        request.names.iter().map(|name| name.to_string()).collect()
    };
    let mut topics = Vec::with_capacity(names.len());
    for name in names {
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
            let hosted_here = partition
                .replication
                .as_ref()
                .is_none_or(|replication| replication.local);
            if !hosted_here {
                // Cluster mode, no replica here: the leader's bounds.
                match remote_state(shard, &name, index as u32).await {
                    Ok(state) => states.push(state),
                    Err(error) => failure = failure.or(Some(error)),
                }
                continue;
            }
            match shard.describe(id, partition.owner).await {
                Ok(summary) => states.push(PartitionState {
                    partition: index as u32,
                    log_start_offset: summary.log_start.0,
                    high_watermark: summary.high_watermark.0,
                    log_end_offset: summary.log_end.0,
                    size_bytes: summary.size_bytes,
                    segment_count: summary.segment_count,
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
            replication_factor: view
                .partitions
                .first()
                .and_then(|partition| partition.replication.as_ref())
                .map_or(1, |replication| {
                    u16::try_from(replication.replicas.len()).unwrap_or(u16::MAX)
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
    })
}
