//! The accept loop of one shard. Every shard binds the same port
//! (glommio sets SO_REUSEPORT) and the kernel spreads connections. The
//! broker-wide connection limit is a shared counter: a connection over it
//! is answered `TOO_MANY_CONNECTIONS` on its first request, then closed.
//!
//! With TLS on, a connection's first byte decides: a TLS handshake record
//! starts the handshake (which must finish within `frame_read_timeout_ms`),
//! anything else is a plaintext client, answered `TLS_REQUIRED` on its
//! first request and closed, so that it learns what the listener expects.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::connection;
use crate::runtime::shard::Shard;
use crate::tls::{self, ListenerTls, Stream};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{REQUEST_HEADER_BYTES, ResponseHeader};
use corelog_wire::message;

/// How long a refused connection has to send its first request.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts connections until the shard stops.
pub async fn accept_loop(
    shard: Rc<Shard>,
    listener: TcpListener,
    open_connections: Arc<AtomicU32>,
    tls: Option<ListenerTls>,
) {
    // Connections wait in the kernel's backlog until the shard knows its topics.
    shard.wait_ready().await;
    loop {
        let stopping = shard.stopping.listen();
        if shard.is_stopping() {
            return;
        }
        let accepted = futures::future::select(Box::pin(listener.accept()), stopping).await;
        let stream = match accepted {
            futures::future::Either::Left((Ok(stream), _)) => stream,
            futures::future::Either::Left((Err(error), _)) => {
                tracing::warn!(%error, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
            futures::future::Either::Right(_) => return,
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let open = open_connections.fetch_add(1, Ordering::Relaxed) + 1;
        let counter = open_connections.clone();
        let over_limit = open > shard.config.max_connections;
        let shard = shard.clone();
        let tls = tls.clone();
        glommio::spawn_local(async move {
            let address = stream.peer_addr().ok().map(|peer| peer.ip());
            if over_limit {
                refuse(stream, ErrorCode::TooManyConnections).await;
            } else if let Some(entity) =
                address.and_then(|address| over_address_quota(&shard, address))
            {
                tracing::debug!(entity, "a connection over its address's quota: refused");
                shard.metrics.connection_closed("connection_quota");
                refuse(stream, ErrorCode::TooManyConnectionsForPrincipal).await;
            } else {
                let peer = stream.peer_addr().ok();
                shard.connections.set(shard.connections.get() + 1);
                shard
                    .metrics
                    .connections
                    .set(i64::from(shard.connections.get()));
                if let Some((stream, certified)) = secured(&shard, stream, tls, peer).await {
                    connection::serve(shard.clone(), stream, peer, certified).await;
                }
                shard.connections.set(shard.connections.get() - 1);
                shard
                    .metrics
                    .connections
                    .set(i64::from(shard.connections.get()));
                if let Some(address) = address {
                    shard.quotas.borrow_mut().close_from(address);
                }
            }
            counter.fetch_sub(1, Ordering::Relaxed);
        })
        .detach();
    }
}

/// Counts a connection from `address`: `None` when within its quota,
/// else the entity whose connection limit it would exceed.
fn over_address_quota(shard: &Shard, address: std::net::IpAddr) -> Option<String> {
    let snapshot = shard.snapshot();
    shard
        .quotas
        .borrow_mut()
        .open_from(
            snapshot.cluster.state.quotas(),
            address,
            u32::from(shard.config.shards),
        )
        .err()
}

/// The connection's stream as it is served: TLS once its handshake is
/// done when the listener has TLS, else as it came; with the principal of
/// the client's certificate, if it presented one. `None` when the
/// connection was refused or its handshake failed (counted, logged at
/// debug: a scanner or a misconfigured client must not flood the log).
async fn secured(
    shard: &Shard,
    stream: TcpStream,
    tls: Option<ListenerTls>,
    peer: Option<SocketAddr>,
) -> Option<(Stream, Option<String>)> {
    let Some(acceptor) = tls else {
        return Some((Box::new(stream), None));
    };
    let deadline = Duration::from_millis(shard.config.frame_read_timeout_ms);
    let mut first = [0u8; 1];
    let peeked = within(deadline, stream.peek(&mut first)).await;
    match peeked {
        Some(Ok(1..)) if tls::is_tls_hello(first[0]) => {}
        Some(Ok(1..)) => {
            tracing::debug!(
                ?peer,
                "a plaintext client on a TLS listener: answered TLS_REQUIRED"
            );
            shard.metrics.connection_closed("plaintext_on_tls");
            refuse(stream, ErrorCode::TlsRequired).await;
            return None;
        }
        _ => return None,
    }
    match within(deadline, acceptor.accept(stream)).await {
        Some(Ok((secured, certified))) => {
            if let Some(principal) = &certified {
                tracing::debug!(
                    ?peer,
                    principal,
                    "a client certificate names the connection's principal"
                );
            }
            Some((Box::new(secured), certified))
        }
        Some(Err(error)) => {
            tracing::debug!(?peer, %error, "TLS handshake failed");
            shard.metrics.connection_closed("tls_handshake_failed");
            None
        }
        None => {
            shard.metrics.connection_closed("tls_handshake_failed");
            None
        }
    }
}

/// `work`'s output, or `None` if it takes longer than `deadline`.
async fn within<T>(deadline: Duration, work: impl std::future::Future<Output = T>) -> Option<T> {
    let timer = glommio::timer::sleep(deadline);
    match futures::future::select(Box::pin(work), Box::pin(timer)).await {
        futures::future::Either::Left((output, _)) => Some(output),
        futures::future::Either::Right(_) => None,
    }
}

/// Answers the first request of a connection with `code` (a connection
/// over the limit, a plaintext client on a TLS listener), then closes it.
async fn refuse(mut stream: TcpStream, code: ErrorCode) {
    if let Err(error) = stream.set_read_timeout(Some(REFUSAL_READ_TIMEOUT)) {
        tracing::debug!(%error, "cannot set a read timeout");
    }
    let mut header = [0u8; REQUEST_HEADER_BYTES];
    if stream.read_exact(&mut header).await.is_err() {
        return;
    }
    let correlation_id = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let body = message::encode_error_response(code);
    let Ok(frame_header) = (ResponseHeader { correlation_id }).encode(body.len()) else {
        return;
    };
    let _sent = stream.write_all(&frame_header).await;
    let _sent = stream.write_all(&body).await;
    let _closed = stream.close().await;
}
