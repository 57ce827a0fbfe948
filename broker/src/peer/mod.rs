//! RPC to other brokers: the glommio-side client for the inter-broker APIs
//! (controller Raft, registration, metadata, replication pushes, election
//! queries). One pipelined connection per peer per shard, opened on first
//! use, handshaken with ApiVersions like any client, replaced when it
//! breaks; requests carry deadlines.
//!
//! A broker that listens on a specific IP opens its peer connections from
//! that IP too ([`bind_outbound_to`]), so that a firewall (the partition
//! tests' nftables rules, a production ACL) can tell one broker's traffic
//! from another's and from clients' on a shared host.
//!
//! Each connection proves the cluster secret (`CORELOG-CLUSTER`) right
//! after the handshake when the broker has one ([`prove_cluster_secret`]):
//! a peer serves inter-broker APIs only on connections that did.
//!
//! A call addressed to this broker itself ([`Peers::call_node`] with its
//! own node id: its controller, its replicas' election queries) is served
//! in-process by the same handlers a network request reaches
//! ([`serve_locally`]), so a single node never talks to itself over TCP.

mod connection;

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use ahash::AHashMap;
use bytes::Bytes;
use corelog_wire::frame::ApiKey;
use corelog_wire::message::{MessageError, Request};
use corelog_wire::sasl::cluster::ClusterSecret;
use futures::future::{Either, LocalBoxFuture, select};
use rkyv::rancor;
use rkyv::util::AlignedVec;

pub use connection::PeerConnection;

use crate::api::Reply;
use crate::tls::PeerConnector;

thread_local! {
    /// The source address of this executor's peer connections. Per thread
    /// rather than per process: each shard executor is one thread of one
    /// broker, while an in-process harness may run several brokers.
    static OUTBOUND_SOURCE: Cell<Option<IpAddr>> = const { Cell::new(None) };
    /// This executor's broker, for calls addressed to itself.
    static LOOPBACK: RefCell<Option<Loopback>> = const { RefCell::new(None) };
    /// This executor's broker id and the cluster secret it proves on every
    /// peer connection.
    static CLUSTER_PROOF: RefCell<Option<(u32, ClusterSecret)>> = const { RefCell::new(None) };
    /// TLS for this executor's peer connections, when the cluster has it.
    static PEER_TLS: RefCell<Option<PeerConnector>> = const { RefCell::new(None) };
}

/// Makes the peer connections opened on the calling (executor) thread
/// speak TLS, verifying each peer's certificate against the cluster's CA.
/// Called once per shard at start-up, before any peer call.
pub fn connect_with_tls(connector: PeerConnector) {
    PEER_TLS.with(|cell| *cell.borrow_mut() = Some(connector));
}

/// Makes the peer connections opened on the calling (executor) thread
/// prove `secret` as broker `node_id` before their first inter-broker
/// request. Called once per shard at start-up, before any peer call.
pub fn prove_cluster_secret(node_id: u32, secret: ClusterSecret) {
    CLUSTER_PROOF.with(|cell| *cell.borrow_mut() = Some((node_id, secret)));
}

/// Serves a request addressed to this broker, in-process: the broker's own
/// request dispatch, given the encoded body as a connection would read it.
pub trait LocalService {
    /// The encoded response to version `api_version` of `api_key` with
    /// request `body`.
    fn serve(
        &self,
        api_key: ApiKey,
        api_version: u16,
        body: Vec<u8>,
    ) -> LocalBoxFuture<'static, Reply>;
}

#[derive(Clone)]
struct Loopback {
    node_id: u32,
    service: Rc<dyn LocalService>,
}

/// Makes calls to `node_id` (this broker) on the calling executor thread go
/// to `service` instead of the network. Called once per shard at start-up.
pub fn serve_locally(node_id: u32, service: Rc<dyn LocalService>) {
    LOOPBACK.with(|cell| *cell.borrow_mut() = Some(Loopback { node_id, service }));
}

fn loopback_for(node_id: u32) -> Option<Rc<dyn LocalService>> {
    LOOPBACK.with(|cell| {
        cell.borrow()
            .as_ref()
            .filter(|loopback| loopback.node_id == node_id)
            .map(|loopback| loopback.service.clone())
    })
}

/// Makes the peer connections opened on the calling (executor) thread
/// start from `listen`, the broker's listen IP, unless it is the wildcard
/// (0.0.0.0 or ::), in which case the kernel picks the source as before.
/// Called once per shard at start-up, before any peer call.
pub fn bind_outbound_to(listen: IpAddr) {
    let source = (!listen.is_unspecified()).then_some(listen);
    OUTBOUND_SOURCE.with(|cell| cell.set(source));
}

/// Why a call to a peer failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The peer cannot be reached or the connection broke.
    #[error("peer {addr} unreachable: {reason}")]
    Unreachable {
        /// The peer.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// No answer within the deadline.
    #[error("peer {addr} did not answer within {timeout:?}")]
    Timeout {
        /// The peer.
        addr: SocketAddr,
        /// The deadline.
        timeout: Duration,
    },
    /// The answer was not a valid response.
    #[error("peer {addr} answered badly: {reason}")]
    Protocol {
        /// The peer.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The peer refused the request as a whole.
    #[error("peer {addr} refused the request: error code {code}")]
    Refused {
        /// The peer.
        addr: SocketAddr,
        /// The top-level error code.
        code: u16,
    },
}

/// A decoded response and its raw section.
#[derive(Debug)]
pub struct Answer<T> {
    /// The response.
    pub message: T,
    /// The raw section (record batches, encoded state), if any.
    pub raw: Bytes,
}

/// Decodes a response body into its owned form.
fn decode<T>(addr: SocketAddr, body: &[u8]) -> Result<Answer<T::Response>, PeerError>
where
    T: Request,
    <T::Response as rkyv::Archive>::Archived:
        rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rancor::Error>>,
{
    let (archived, raw) = match corelog_wire::message::decode_response::<T::Response>(body) {
        Ok(decoded) => decoded,
        Err(MessageError::TopLevelError { error_code, .. }) => {
            return Err(PeerError::Refused {
                addr,
                code: error_code,
            });
        }
        Err(error) => {
            return Err(PeerError::Protocol {
                addr,
                reason: error.to_string(),
            });
        }
    };
    let message = rkyv::deserialize::<T::Response, rancor::Error>(archived).map_err(|error| {
        PeerError::Protocol {
            addr,
            reason: error.to_string(),
        }
    })?;
    Ok(Answer {
        message,
        raw: Bytes::copy_from_slice(raw),
    })
}

/// The peers one shard talks to, by address.
#[derive(Debug, Default)]
pub struct Peers {
    connections: RefCell<AHashMap<SocketAddr, Rc<PeerConnection>>>,
}

impl Peers {
    /// No connections yet.
    #[must_use]
    pub fn new() -> Rc<Peers> {
        Rc::new(Peers::default())
    }

    /// Calls `request` on the broker at `addr`, with `raw` as its raw
    /// section, waiting at most `timeout`.
    ///
    /// # Errors
    /// [`PeerError`] when the peer is unreachable, slow, or answers badly.
    pub async fn call<T>(
        &self,
        addr: SocketAddr,
        request: &T,
        raw: &[u8],
        timeout: Duration,
    ) -> Result<Answer<T::Response>, PeerError>
    where
        T: Request,
        <T::Response as rkyv::Archive>::Archived:
            rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rancor::Error>>,
    {
        self.call_parts(addr, request, &[raw], timeout).await
    }

    /// [`call`](Self::call) with the raw section in pieces (a push's
    /// batches), which are copied once, into the frame.
    ///
    /// # Errors
    /// [`PeerError`] when the peer is unreachable, slow, or answers badly.
    pub async fn call_parts<T>(
        &self,
        addr: SocketAddr,
        request: &T,
        raw: &[&[u8]],
        timeout: Duration,
    ) -> Result<Answer<T::Response>, PeerError>
    where
        T: Request,
        <T::Response as rkyv::Archive>::Archived:
            rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rancor::Error>>,
    {
        let raw_len = raw.iter().map(|part| part.len()).sum();
        let archive =
            corelog_wire::message::encode_request_archive(request, raw_len).map_err(|error| {
                PeerError::Protocol {
                    addr,
                    reason: error.to_string(),
                }
            })?;
        let mut body: Vec<&[u8]> = Vec::with_capacity(raw.len() + 1);
        body.push(&archive);
        body.extend_from_slice(raw);
        let connection = self.connection(addr, timeout).await?;
        let result = connection
            .call((T::API_KEY, T::API_VERSION), &body, timeout)
            .await;
        if result.is_err() && connection.is_broken() {
            self.connections.borrow_mut().remove(&addr);
        }
        let response = result?;
        decode::<T>(addr, &response)
    }

    /// [`call`](Self::call) to broker `node` at `addr`: in-process when
    /// `node` is this broker (see [`serve_locally`]), else over the network.
    ///
    /// # Errors
    /// [`PeerError`] when the peer is unreachable, slow, or answers badly.
    pub async fn call_node<T>(
        &self,
        node: u32,
        addr: SocketAddr,
        request: &T,
        raw: &[u8],
        timeout: Duration,
    ) -> Result<Answer<T::Response>, PeerError>
    where
        T: Request,
        <T::Response as rkyv::Archive>::Archived:
            rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rancor::Error>>,
    {
        let Some(service) = loopback_for(node) else {
            return self.call(addr, request, raw, timeout).await;
        };
        let body = corelog_wire::message::encode_request(request, raw).map_err(|error| {
            PeerError::Protocol {
                addr,
                reason: error.to_string(),
            }
        })?;
        let served = service.serve(T::API_KEY, T::API_VERSION, body);
        let deadline = Box::pin(glommio::timer::sleep(timeout));
        let reply = match select(served, deadline).await {
            Either::Left((reply, _)) => reply,
            Either::Right(_) => return Err(PeerError::Timeout { addr, timeout }),
        };
        let mut response = AlignedVec::<16>::with_capacity(reply.len());
        response.extend_from_slice(&reply.head);
        for part in &reply.raw {
            response.extend_from_slice(part);
        }
        decode::<T>(addr, &response)
    }

    async fn connection(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Rc<PeerConnection>, PeerError> {
        if let Some(existing) = self.connections.borrow().get(&addr)
            && !existing.is_broken()
        {
            return Ok(existing.clone());
        }
        let source = OUTBOUND_SOURCE.with(Cell::get);
        let proof = CLUSTER_PROOF.with(|cell| cell.borrow().clone());
        let tls = PEER_TLS.with(|cell| cell.borrow().clone());
        let connection = PeerConnection::connect(addr, source, tls, proof, timeout).await?;
        self.connections
            .borrow_mut()
            .insert(addr, connection.clone());
        Ok(connection)
    }
}

#[cfg(test)]
mod tests {
    use corelog_wire::error::ErrorCode;
    use corelog_wire::message::partition_report::{
        PartitionReportRequest, PartitionReportRequestV1,
    };
    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;

    /// Records the version of each request it is given, and refuses it.
    struct Recorder(Rc<RefCell<Vec<(ApiKey, u16)>>>);

    impl LocalService for Recorder {
        fn serve(
            &self,
            api_key: ApiKey,
            api_version: u16,
            _body: Vec<u8>,
        ) -> LocalBoxFuture<'static, Reply> {
            self.0.borrow_mut().push((api_key, api_version));
            Box::pin(async { Reply::error(ErrorCode::InvalidRequest) })
        }
    }

    /// A broker calling itself hands its own dispatch the request's
    /// version: it once said 0 for every request.
    #[test]
    fn a_call_to_this_broker_keeps_the_requests_version() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let recorder = Recorder(seen.clone());
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor starts")
            .run(async move {
                serve_locally(7, Rc::new(recorder));
                let peers = Peers::new();
                let addr: SocketAddr = "127.0.0.1:1".parse().expect("an address");
                let v0 = PartitionReportRequest {
                    node_id: 7,
                    incarnation: 1,
                    partitions: Vec::new(),
                };
                let v1 = PartitionReportRequestV1 {
                    node_id: 7,
                    incarnation: 1,
                    partitions: Vec::new(),
                };
                let timeout = Duration::from_secs(1);
                assert!(peers.call_node(7, addr, &v0, &[], timeout).await.is_err());
                assert!(peers.call_node(7, addr, &v1, &[], timeout).await.is_err());
            });
        assert_eq!(
            *seen.borrow(),
            vec![(ApiKey::PartitionReport, 0), (ApiKey::PartitionReport, 1)]
        );
    }
}
