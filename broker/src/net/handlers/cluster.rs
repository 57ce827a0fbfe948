//! The controller APIs (40–44, 48) and `DescribeCluster` as they arrive on any shard: shard 0 serves
//! them with its cluster role (`crate::cluster::api`), other shards forward
//! them there.

use std::rc::Rc;

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;

use corelog_controller::acls::{Operation, ResourceType};
use corelog_wire::message::describe_cluster::DescribeClusterRequest;
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
    body: &[u8],
) -> Result<Reply, ErrorCode> {
    let body = body.to_vec();
    shard
        .invoke_on(ShardId(0), move |shard| async move {
            shard.serve_cluster_api(api_key, &body).await
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
    access: &Access,
) -> Result<Reply, ErrorCode> {
    if !access.restricts() {
        return handle(shard, ApiKey::DescribeCluster, body).await;
    }
    let mut request: DescribeClusterRequest = owned(body)?;
    let names = request.topics.take().unwrap_or_else(|| {
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
    request.topics = Some(visible);
    let body = encode_request(&request, &[]).map_err(unencodable)?;
    handle(shard, ApiKey::DescribeCluster, &body).await
}
