//! The replication APIs (45–46): a leader's pushes and the controller's
//! election queries, answered by this broker's replica of the partition on
//! whichever shard owns it.

use std::rc::Rc;

use bytes::Bytes;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::decode_request;
use corelog_wire::message::replica_push::ReplicaPushRequest;
use corelog_wire::message::replica_query::ReplicaQueryRequest;
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

pub(super) async fn query(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    let request = owned::<ReplicaQueryRequest>(body)?;
    let response = shard.replica_query(request).await;
    Reply::encode(&response, Vec::new())
}
