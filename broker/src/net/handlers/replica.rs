//! The replication APIs (45–46): a leader's pushes and the controller's
//! election queries, answered by this broker's replica of the partition on
//! whichever shard owns it. A standalone broker holds no replicas and
//! refuses them with `UNSUPPORTED_VERSION`.

use std::rc::Rc;

use bytes::Bytes;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::decode_request;
use corelog_wire::message::replica_push::ReplicaPushRequest;
use corelog_wire::message::replica_query::ReplicaQueryRequest;
use rkyv::rancor;

use super::{refused, unencodable};
use crate::net::Reply;
use crate::runtime::shard::Shard;

fn cluster_mode(shard: &Rc<Shard>) -> Result<(), ErrorCode> {
    if shard.snapshot().cluster.is_none() {
        return Err(ErrorCode::UnsupportedVersion);
    }
    Ok(())
}

pub(super) async fn push(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    cluster_mode(shard)?;
    let (archived, raw) = decode_request::<ReplicaPushRequest>(body).map_err(refused)?;
    let request = rkyv::deserialize::<ReplicaPushRequest, rancor::Error>(archived)
        .map_err(|_| ErrorCode::InvalidRequest)?;
    let response = shard
        .replica_push(request, Bytes::copy_from_slice(raw))
        .await;
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

pub(super) async fn query(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    cluster_mode(shard)?;
    let (archived, _) = decode_request::<ReplicaQueryRequest>(body).map_err(refused)?;
    let request = rkyv::deserialize::<ReplicaQueryRequest, rancor::Error>(archived)
        .map_err(|_| ErrorCode::InvalidRequest)?;
    let response = shard.replica_query(request).await;
    Reply::message(&response, Vec::new()).map_err(unencodable)
}
