//! The replication APIs (45–47): a leader's pushes (alone, or many
//! partitions' in one stream frame) and the controller's election queries,
//! answered by this broker's replica of each partition on whichever shard
//! owns it.

use std::rc::Rc;

use bytes::Bytes;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::decode_request;
use corelog_wire::message::replica_push::ReplicaPushRequest;
use corelog_wire::message::replica_query::ReplicaQueryRequest;
use corelog_wire::message::replica_stream::ReplicaStreamRequest;
use rkyv::rancor;

use crate::api::{Reply, owned, refused};
use crate::net::request_body::RequestBody;
use crate::runtime::shard::Shard;

pub(super) async fn push(shard: &Rc<Shard>, body: RequestBody) -> Result<Reply, ErrorCode> {
    let (request, raw) = {
        let (archived, raw) = decode_request::<ReplicaPushRequest>(&body).map_err(refused)?;
        let request = rkyv::deserialize::<ReplicaPushRequest, rancor::Error>(archived)
            .map_err(|_| ErrorCode::InvalidRequest)?;
        (request, body.range_of(raw))
    };
    // The batches stay in the request's buffer: cut out, not copied.
    let raw: Bytes = body.split_into(&[raw]).pop().unwrap_or_default().freeze();
    let response = shard.replica_push(request, raw).await;
    Reply::encode(&response, Vec::new())
}

/// A frame of a leader shard's replication stream: every push goes to its
/// replica at once, so that their appends share one group commit here.
pub(super) async fn stream(shard: &Rc<Shard>, body: RequestBody) -> Result<Reply, ErrorCode> {
    let (request, raw) = {
        let (archived, raw) = decode_request::<ReplicaStreamRequest>(&body).map_err(refused)?;
        let request = rkyv::deserialize::<ReplicaStreamRequest, rancor::Error>(archived)
            .map_err(|_| ErrorCode::InvalidRequest)?;
        (request, body.range_of(raw))
    };
    let raw: Bytes = body.split_into(&[raw]).pop().unwrap_or_default().freeze();
    let response = shard.replica_stream(request, raw).await;
    Reply::encode(&response, Vec::new())
}

pub(super) async fn query(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    let request = owned::<ReplicaQueryRequest>(body)?;
    let response = shard.replica_query(request).await;
    Reply::encode(&response, Vec::new())
}
