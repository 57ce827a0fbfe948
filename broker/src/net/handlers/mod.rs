//! Request handlers, one module per API. Each decodes its body (validated
//! rkyv access only), does its work through the shard — which routes
//! partition operations to their owners — and returns the encoded reply.
//! A body that does not decode is refused whole with `INVALID_REQUEST`.

mod cluster;
mod fetch;
mod groups;
mod offsets;
mod produce;
mod replica;
mod topics;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::api_versions::{
    ApiVersionsRequest, ApiVersionsResponse, supported_apis,
};
use corelog_wire::message::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use corelog_wire::message::{MessageError, decode_request};

use super::Reply;
use crate::runtime::shard::Shard;

/// Runs the handler of `api_key`.
///
/// # Errors
/// The code of a top-level refusal (`INVALID_REQUEST` for a body that does
/// not decode, or a whole-request failure).
pub async fn dispatch(
    shard: &Rc<Shard>,
    api_key: ApiKey,
    body: &[u8],
    received: Instant,
    peer: Option<SocketAddr>,
) -> Result<Reply, ErrorCode> {
    match api_key {
        ApiKey::ApiVersions => api_versions(body),
        ApiKey::Metadata => topics::metadata(shard, body),
        ApiKey::CreateTopics => topics::create(shard, body).await,
        ApiKey::DeleteTopics => topics::delete(shard, body).await,
        ApiKey::DescribeTopics => topics::describe(shard, body).await,
        ApiKey::Produce => produce::produce(shard, body, received).await,
        ApiKey::Fetch => fetch::fetch(shard, body).await,
        ApiKey::ListOffsets => offsets::list_offsets(shard, body).await,
        ApiKey::InitProducerId => init_producer_id(shard, body).await,
        ApiKey::FindCoordinator => groups::find_coordinator(shard, body),
        ApiKey::JoinGroup => groups::join(shard, body, peer).await,
        ApiKey::Heartbeat => groups::heartbeat(shard, body).await,
        ApiKey::LeaveGroup => groups::leave(shard, body).await,
        ApiKey::OffsetCommit => groups::commit(shard, body).await,
        ApiKey::OffsetFetch => groups::fetch_offsets(shard, body).await,
        ApiKey::ListGroups => groups::list(shard, body).await,
        ApiKey::DescribeGroups => groups::describe(shard, body).await,
        ApiKey::DeleteGroups => groups::delete(shard, body).await,
        ApiKey::ResetOffsets => groups::reset(shard, body).await,
        ApiKey::WriteAudit => groups::write_audit(shard, body).await,
        // Controller APIs: served on shard 0 in cluster mode; a standalone
        // broker is its own controller and refuses them.
        ApiKey::ControllerRaft
        | ApiKey::BrokerRegister
        | ApiKey::BrokerHeartbeat
        | ApiKey::MetadataFetch
        | ApiKey::ControllerOperation => cluster::handle(shard, api_key, body).await,
        // Replication: answered by the replica's owning shard.
        ApiKey::ReplicaPush => replica::push(shard, body).await,
        ApiKey::ReplicaQuery => replica::query(shard, body).await,
    }
}

/// Runs a controller API forwarded to shard 0 by another shard.
///
/// # Errors
/// The top-level refusal code.
pub async fn cluster_on_shard_zero(
    shard: &Rc<Shard>,
    api_key: ApiKey,
    body: &[u8],
) -> Result<Reply, ErrorCode> {
    cluster::handle(shard, api_key, body).await
}

/// Maps a message codec failure to the code it is answered with.
pub(super) fn refused(error: MessageError) -> ErrorCode {
    tracing::debug!(%error, "request body refused");
    error.error_code()
}

/// Maps a response encoding failure (a bug: responses are built here).
pub(super) fn unencodable(error: MessageError) -> ErrorCode {
    tracing::error!(%error, "cannot encode a response");
    ErrorCode::UnknownServerError
}

fn api_versions(body: &[u8]) -> Result<Reply, ErrorCode> {
    decode_request::<ApiVersionsRequest>(body).map_err(refused)?;
    let response = ApiVersionsResponse {
        apis: supported_apis(),
        broker_version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}

async fn init_producer_id(shard: &Rc<Shard>, body: &[u8]) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<InitProducerIdRequest>(body).map_err(refused)?;
    let (producer_id, producer_epoch) = shard
        .init_producer_id(
            request.producer_id.to_native(),
            request.producer_epoch.to_native(),
        )
        .await
        .map_err(|error| error.code)?;
    let response = InitProducerIdResponse {
        producer_id,
        producer_epoch,
    };
    Reply::message(&response, Vec::new()).map_err(unencodable)
}
