//! Request handlers, one module per API. Each decodes its body (validated
//! rkyv access only), does its work through the shard — which routes
//! partition operations to their owners — and returns the encoded reply.
//! A body that does not decode is refused whole with `INVALID_REQUEST`.

mod acls;
mod cluster;
mod fetch;
mod groups;
mod offsets;
mod produce;
mod quotas;
mod replica;
mod topics;
mod users;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use corelog_controller::acls::{Operation, ResourceType};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::api_versions::{
    ApiVersionsRequest, ApiVersionsResponse, supported_apis,
};
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::decode_request;
use corelog_wire::message::describe_shards::{DescribeShardsRequest, DescribeShardsResponse};
use corelog_wire::message::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};

use super::access::Access;
use super::request_body::RequestBody;
use super::shard_ports::ShardPortTable;
use super::throttle::Throttle;
use crate::api::{Reply, refused};
use crate::runtime::shard::Shard;

/// Who sent a request: where from, what it may do and how it is metered.
#[derive(Debug)]
pub struct Caller {
    /// Where the request came from.
    pub origin: Origin,
    /// The ACL decision.
    pub access: Access,
    /// The quota metering.
    pub throttle: Throttle,
}

impl Caller {
    /// This broker itself: allowed everything, unmetered.
    #[must_use]
    pub fn this_broker() -> Caller {
        Caller {
            origin: Origin::Loopback,
            access: Access::unrestricted(),
            throttle: Throttle::none(),
        }
    }
}

/// Where a request came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A connection, from this address when known.
    Network(Option<SocketAddr>),
    /// This broker itself (`crate::peer`'s loopback): its membership
    /// calling its controller, its controller querying its replicas.
    Loopback,
}

/// Runs the handler of `api_key`.
///
/// A single node (no `--controller-voters`) is a cluster of one: nothing
/// but itself speaks the inter-broker APIs to it, so from the network they
/// are refused with `UNSUPPORTED_VERSION`.
///
/// `caller` says what the request may do (see [`super::access`]), each
/// handler checking the operations it performs, and meters it (see
/// [`super::quota`]): produce and fetch take their bytes.
///
/// # Errors
/// The code of a top-level refusal (`INVALID_REQUEST` for a body that does
/// not decode, or a whole-request failure).
pub async fn dispatch(
    shard: &Rc<Shard>,
    api_key: ApiKey,
    api_version: u16,
    body: RequestBody,
    received: Instant,
    caller: &Caller,
    shard_ports: &ShardPortTable,
) -> Result<Reply, ErrorCode> {
    let access = &caller.access;
    let peer = match caller.origin {
        Origin::Network(peer) => {
            if api_key.is_inter_broker() && shard.config.is_single_node() {
                return Err(ErrorCode::UnsupportedVersion);
            }
            if access.is_undecided() && api_key != ApiKey::ApiVersions {
                return Err(ErrorCode::BrokerNotReady);
            }
            peer
        }
        Origin::Loopback => None,
    };
    // Every request's task holds this future, as large as its largest
    // arm: the rarer calls, whose futures are kilobytes, are boxed, so that
    // a produce or fetch task stays within what the allocator serves from
    // its per-thread cache (1 KiB) instead of 3 KiB.
    match api_key {
        ApiKey::ApiVersions => api_versions(&body),
        ApiKey::Metadata => topics::metadata(shard, &body, access),
        ApiKey::CreateTopics => Box::pin(topics::create(shard, &body, access)).await,
        ApiKey::DeleteTopics => Box::pin(topics::delete(shard, &body, access)).await,
        ApiKey::DescribeTopics => Box::pin(topics::describe(shard, &body, access)).await,
        ApiKey::Produce => produce::produce(shard, body, received, caller).await,
        ApiKey::Fetch => fetch::fetch(shard, &body, caller).await,
        ApiKey::ListOffsets => Box::pin(offsets::list_offsets(shard, &body, access)).await,
        ApiKey::InitProducerId => Box::pin(init_producer_id(shard, &body, access)).await,
        ApiKey::DescribeShards => describe_shards(shard, shard_ports, &body),
        ApiKey::FindCoordinator => groups::find_coordinator(shard, &body, access),
        ApiKey::JoinGroup => Box::pin(groups::join(shard, &body, peer, access)).await,
        ApiKey::Heartbeat => groups::heartbeat(shard, &body, access).await,
        ApiKey::LeaveGroup => Box::pin(groups::leave(shard, &body, access)).await,
        ApiKey::OffsetCommit => Box::pin(groups::commit(shard, &body, access)).await,
        ApiKey::OffsetFetch => groups::fetch_offsets(shard, &body, access).await,
        ApiKey::ListGroups => groups::list(shard, &body, access).await,
        ApiKey::DescribeGroups => {
            Box::pin(groups::describe(shard, &body, access, api_version)).await
        }
        ApiKey::DeleteGroups => Box::pin(groups::delete(shard, &body, access)).await,
        ApiKey::ResetOffsets => Box::pin(groups::reset(shard, &body, access)).await,
        ApiKey::WriteAudit => Box::pin(groups::write_audit(shard, &body, access)).await,
        ApiKey::DeleteOffsets => Box::pin(groups::delete_offsets(shard, &body, access)).await,
        ApiKey::DescribeUsers => users::describe(shard, &body, access),
        ApiKey::AlterUsers => Box::pin(users::alter(shard, &body, access)).await,
        ApiKey::DescribeAcls => acls::describe(shard, &body, access),
        ApiKey::AlterAcls => Box::pin(acls::alter(shard, &body, access)).await,
        ApiKey::DescribeQuotas => quotas::describe(shard, &body, api_version, access),
        ApiKey::AlterQuotas => Box::pin(quotas::alter(shard, &body, api_version, access)).await,
        ApiKey::DescribeCluster => {
            Box::pin(cluster::describe(shard, &body, api_version, access)).await
        }
        ApiKey::AlterCluster => Box::pin(cluster::alter(shard, &body, access)).await,
        // Controller APIs: served on shard 0, which holds the cluster role.
        ApiKey::ControllerRaft
        | ApiKey::BrokerRegister
        | ApiKey::BrokerHeartbeat
        | ApiKey::MetadataFetch
        | ApiKey::ControllerOperation
        | ApiKey::PartitionReport => {
            Box::pin(cluster::handle(shard, api_key, api_version, &body)).await
        }
        // Replication: answered by the replica's owning shard.
        ApiKey::ReplicaPush => Box::pin(replica::push(shard, body)).await,
        ApiKey::ReplicaQuery => replica::query(shard, &body).await,
        ApiKey::ReplicaStream => replica::stream(shard, body).await,
        // Changes the connection's own state: answered by the connection
        // (`net::session`) before dispatch, and never sent in-process.
        ApiKey::Authenticate => Err(ErrorCode::InvalidRequest),
    }
}

/// A user, ACL or quota change's outcome: error code, message, and
/// whether it created the user, rule or quota.
type Altered = (ErrorCode, Option<String>, bool);

/// Runs a user, ACL or quota change through the controller, for a
/// principal with `cluster-admin` only (checked before `op`, so that a
/// refused principal learns nothing from validation). `op` is the change,
/// or why it was refused here (so that a bad one costs no controller
/// trip). Answers once this broker's metadata shows the change.
async fn alter_security(
    shard: &Rc<Shard>,
    access: &Access,
    op: Result<ControllerOp, (ErrorCode, String)>,
) -> Altered {
    let altered = match access.cluster_admin().map(|()| op) {
        Err(error) => (error.code, Some(error.message), false),
        Ok(Err((code, reason))) => (code, Some(reason), false),
        Ok(Ok(op)) => match shard.alter_security(op).await {
            Ok(created) => (ErrorCode::None, None, created),
            Err(error) => (error.code, Some(error.message), false),
        },
    };
    if !altered.0.is_none() {
        shard.metrics.error(altered.0);
    }
    altered
}

fn api_versions(body: &[u8]) -> Result<Reply, ErrorCode> {
    decode_request::<ApiVersionsRequest>(body).map_err(refused)?;
    let response = ApiVersionsResponse {
        apis: supported_apis(),
        broker_version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    Reply::encode(&response, Vec::new())
}

fn describe_shards(
    shard: &Shard,
    shard_ports: &ShardPortTable,
    body: &[u8],
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<DescribeShardsRequest>(body).map_err(refused)?;
    let mut shards = shard_ports.endpoints();
    if let Some(wanted) = request.shards.as_ref() {
        shards.retain(|endpoint| {
            wanted
                .iter()
                .any(|shard| shard.to_native() == endpoint.shard)
        });
    }
    let response = DescribeShardsResponse {
        node_id: shard.config.node_id,
        shards,
    };
    Reply::encode(&response, Vec::new())
}

async fn init_producer_id(
    shard: &Rc<Shard>,
    body: &[u8],
    access: &Access,
) -> Result<Reply, ErrorCode> {
    let (request, _) = decode_request::<InitProducerIdRequest>(body).map_err(refused)?;
    // Producer ids are handed out only to principals that may produce
    // somewhere: an id block is a controller write.
    if !access.allows_any(Operation::Produce, ResourceType::Topic) {
        return Err(ErrorCode::TopicAuthorizationFailed);
    }
    // An id serves the principal it was given to (and its epoch is
    // bumped by it alone): another one would fence that producer or
    // append into its sequences.
    let principal = access.principal();
    let asked = request.producer_id.to_native();
    if asked >= 0 && !shard.producer_ids.owns(principal, asked) {
        shard.metrics.error(ErrorCode::ProducerIdNotOwned);
        return Err(ErrorCode::ProducerIdNotOwned);
    }
    let (given, producer_epoch) = shard
        .init_producer_id(asked, request.producer_epoch.to_native())
        .await
        .map_err(|error| error.code)?;
    let producer_id = if asked >= 0 {
        given
    } else {
        shard.producer_ids.bind(principal, given).map_err(|error| {
            tracing::error!(%error, "cannot give a producer id");
            ErrorCode::UnknownServerError
        })?
    };
    let response = InitProducerIdResponse {
        producer_id,
        producer_epoch,
    };
    Reply::encode(&response, Vec::new())
}
