//! The controller APIs (40–44, 48) and `DescribeCluster` as they arrive on any shard: shard 0 serves
//! them with its cluster role (`crate::cluster::api`), other shards forward
//! them there.

use std::rc::Rc;

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;

use crate::api::Reply;
use crate::metadata::ShardId;
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
    if shard.id != ShardId(0) {
        return shard.forward_cluster(api_key, body.to_vec()).await;
    }
    shard.serve_cluster_api(api_key, body).await
}
