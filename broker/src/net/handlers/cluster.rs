//! The controller APIs (40–44, 48), `DescribeCluster` and `AlterCluster` as they arrive on any shard: shard 0 serves
//! them with its cluster role (`crate::cluster::api`), other shards forward
//! them there.

use std::rc::Rc;
use std::time::Duration;

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;

use corelog_controller::acls::{Operation, ResourceType};
use corelog_controller::decommission::Decommission;
use corelog_wire::message::alter_cluster::{
    AlterClusterRequest, AlterClusterResponse, ClusterChange,
};
use corelog_wire::message::describe_cluster::{
    DescribeClusterRequest, DescribeClusterRequestV1, DescribeClusterRequestV2,
};
use corelog_wire::message::encode_request;

use crate::api::{Reply, owned, unencodable};
use crate::metadata::ShardId;
use crate::net::access::Access;
use crate::runtime::shard::Shard;

/// Runs controller API `api_key` on shard 0.
///
/// # Errors
/// The top-level refusal code.
pub(super) async fn handle(
    shard: &Rc<Shard>,
    api_key: ApiKey,
    api_version: u16,
    body: &[u8],
) -> Result<Reply, ErrorCode> {
    let body = body.to_vec();
    shard
        .invoke_on(ShardId(0), move |shard| async move {
            shard.serve_cluster_api(api_key, api_version, &body).await
        })
        .await
        .map_err(|error| error.code)?
}

/// `DescribeCluster`: brokers and the controller for anyone; of the
/// topics, only those the principal may describe. A topic it may not
/// describe is left out whether it exists or not, so that the answer
/// reveals nothing about names it guesses.
pub(super) async fn describe(
    shard: &Rc<Shard>,
    body: &[u8],
    api_version: u16,
    access: &Access,
) -> Result<Reply, ErrorCode> {
    if !access.restricts() {
        return handle(shard, ApiKey::DescribeCluster, api_version, body).await;
    }
    // Every version asks the same question.
    let asked = match api_version {
        0 => owned::<DescribeClusterRequest>(body)?.topics,
        1 => owned::<DescribeClusterRequestV1>(body)?.topics,
        _ => owned::<DescribeClusterRequestV2>(body)?.topics,
    };
    let names = asked.unwrap_or_else(|| {
        shard
            .snapshot()
            .cluster
            .state
            .topics()
            .values()
            .map(|topic| topic.name.clone())
            .collect()
    });
    let visible: Vec<String> = names
        .into_iter()
        .filter(|name| access.allows(Operation::Describe, ResourceType::Topic, name))
        .collect();
    let topics = Some(visible);
    let body = match api_version {
        0 => encode_request(&DescribeClusterRequest { topics }, &[]),
        1 => encode_request(&DescribeClusterRequestV1 { topics }, &[]),
        _ => encode_request(&DescribeClusterRequestV2 { topics }, &[]),
    }
    .map_err(unencodable)?;
    handle(shard, ApiKey::DescribeCluster, api_version, &body).await
}

/// Longest an `AlterCluster` request waits for its change to show.
const ALTER_CLUSTER_TIMEOUT_MAX: Duration = Duration::from_secs(60);

/// `AlterCluster`: a leadership move, a broker's maintenance or
/// decommission, or a partition's reassignment, through the controller;
/// cluster administrators only.
pub(super) async fn alter(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let request: AlterClusterRequest = owned(body)?;
    let timeout = Duration::from_millis(u64::from(request.timeout_ms))
        .clamp(Duration::from_secs(1), ALTER_CLUSTER_TIMEOUT_MAX);
    let outcome = match access.cluster_admin() {
        Err(error) => Err(error),
        Ok(()) => match request.change {
            ClusterChange::ElectLeader {
                topic,
                partition,
                to,
            } => shard
                .elect_leader(topic, partition, to, timeout)
                .await
                .map(|(leader, epoch)| (u32::try_from(leader.0).ok(), epoch.0)),
            ClusterChange::SetMaintenance { broker, enabled } => shard
                .set_maintenance(broker, enabled, timeout)
                .await
                .map(|led| (None, u32::try_from(led).unwrap_or(u32::MAX))),
            ClusterChange::Reassign {
                topic,
                partition,
                replicas,
                throttle_bytes_per_s,
            } => shard
                .reassign(
                    topic,
                    partition,
                    Some(replicas),
                    throttle_bytes_per_s,
                    timeout,
                )
                .await
                .map(|()| (None, 0)),
            ClusterChange::CancelReassignment { topic, partition } => shard
                .reassign(topic, partition, None, 0, timeout)
                .await
                .map(|()| (None, 0)),
            ClusterChange::SetDecommission {
                broker,
                enabled,
                throttle_bytes_per_s,
                max_moves,
            } => {
                let plan = enabled.then_some(Decommission {
                    throttle_bytes_per_s,
                    max_moves,
                });
                shard
                    .set_decommission(broker, plan, timeout)
                    .await
                    .map(|value| (None, value))
            }
        },
    };
    let response = match outcome {
        Ok((leader, value)) => AlterClusterResponse {
            error_code: ErrorCode::None.code(),
            error_message: None,
            leader,
            value,
        },
        Err(error) => {
            shard.metrics.error(error.code);
            AlterClusterResponse {
                error_code: error.code.code(),
                error_message: Some(error.message),
                leader: None,
                value: 0,
            }
        }
    };
    Reply::encode(&response, Vec::new())
}
