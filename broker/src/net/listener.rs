//! The accept loop of one shard. Every shard binds the same port
//! (glommio sets SO_REUSEPORT) and the kernel spreads connections. Each
//! accepted connection is counted in the broker's [`Edge`] against the
//! broker's limit (`max_connections`) and its source address's (its
//! quota, else `max_connections_per_address`, on by default): a
//! connection over either is answered `TOO_MANY_CONNECTIONS` or
//! `TOO_MANY_CONNECTIONS_FOR_PRINCIPAL` on its first request, then closed,
//! so that one host cannot lock every other client out.
//!
//! With TLS on, a connection's first byte decides: a TLS handshake record
//! starts the handshake (which must finish by the login deadline), anything
//! else is a plaintext client, answered `TLS_REQUIRED` on its first request
//! and closed, so that it learns what the listener expects. A refused TLS
//! client is refused over TLS: answered in plaintext, it would be told that
//! the broker does not speak TLS.
//!
//! A failed accept (out of descriptors, mostly) pauses the loop, longer
//! each time in a row, and is logged at most once per interval
//! ([`AcceptBackoff`]).

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::accept_backoff::{AcceptBackoff, is_out_of_descriptors};
use super::connection;
use super::connection_counts::Refusal;
use super::edge::ConnectionLimits;
use super::front::Front;
use crate::runtime::shard::Shard;
use crate::tls::{self, ListenerTls, Stream};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{REQUEST_HEADER_BYTES, ResponseHeader};
use corelog_wire::message;

/// How long a refused connection has to send its first request.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Refusals one accept loop waits for at once (each for up to
/// [`REFUSAL_READ_TIMEOUT`]); past them a refused connection is answered
/// only if its first request is there within [`QUICK_REFUSAL_TIMEOUT`]
/// (a client sends it right after connecting), else closed, so that a
/// flood of silent connections cannot hold descriptors for the refusals'
/// timeouts.
const REFUSALS_IN_FLIGHT_MAX: u32 = 64;
/// How long a refused connection past [`REFUSALS_IN_FLIGHT_MAX`] has to
/// send its first request.
const QUICK_REFUSAL_TIMEOUT: Duration = Duration::from_millis(50);

/// Accepts connections until the shard stops.
pub async fn accept_loop(front: Rc<Front>, listener: TcpListener, tls: Option<ListenerTls>) {
    let shard = front.shard.clone();
    // Connections wait in the kernel's backlog until the shard knows its topics.
    shard.wait_ready().await;
    let mut backoff = AcceptBackoff::default();
    let refusing = Rc::new(Cell::new(0u32));
    loop {
        let stopping = shard.stopping.listen();
        if shard.is_stopping() {
            return;
        }
        let accepted = futures::future::select(Box::pin(listener.accept()), stopping).await;
        let stream = match accepted {
            futures::future::Either::Left((Ok(stream), _)) => stream,
            futures::future::Either::Left((Err(error), _)) => {
                let error = std::io::Error::from(error);
                let after = backoff.failed(Instant::now());
                if let Some(held_back) = after.log {
                    tracing::warn!(
                        %error,
                        out_of_descriptors = is_out_of_descriptors(&error),
                        held_back,
                        pause_ms = after.pause.as_millis() as u64,
                        "accept failed; pausing the accept loop (logged at most every 10 s)"
                    );
                }
                glommio::timer::sleep(after.pause).await;
                continue;
            }
            futures::future::Either::Right(_) => return,
        };
        backoff.accepted();
        let accepted_at = Instant::now();
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let peer = stream.peer_addr().ok();
        let snapshot = shard.snapshot();
        let limits = ConnectionLimits {
            total_max: shard.config.max_connections,
            per_address_max: (shard.config.max_connections_per_address > 0)
                .then_some(shard.config.max_connections_per_address),
        };
        let admitted = front.edge.admit_connection(
            peer.map(|peer| peer.ip()),
            snapshot.cluster.state.quotas(),
            limits,
        );
        let slot = match admitted {
            Ok(slot) => slot,
            Err(refusal) => {
                refuse_later(&shard, stream, refusal, tls.clone(), &refusing);
                continue;
            }
        };
        let front = front.clone();
        let tls = tls.clone();
        glommio::spawn_local(async move {
            front.connection_opened();
            if let Some((stream, certified)) = secured(&front.shard, stream, tls, peer).await {
                connection::serve(front.clone(), stream, peer, certified, accepted_at).await;
            }
            front.connection_closed();
            drop(slot);
        })
        .detach();
    }
}

/// Refuses a connection over a limit: answers its first request with the
/// refusal's code (over TLS on a TLS listener), unless this loop already
/// answers [`REFUSALS_IN_FLIGHT_MAX`] refusals: then it is closed at once.
fn refuse_later(
    shard: &Rc<Shard>,
    stream: TcpStream,
    refusal: Refusal,
    tls: Option<ListenerTls>,
    refusing: &Rc<Cell<u32>>,
) {
    let code = match &refusal {
        Refusal::Broker => ErrorCode::TooManyConnections,
        Refusal::Entity(entity) => {
            tracing::debug!(entity, "a connection over its address's limit: refused");
            ErrorCode::TooManyConnectionsForPrincipal
        }
    };
    shard.metrics.connection_closed(match refusal {
        Refusal::Broker => "connection_limit",
        Refusal::Entity(_) => "connection_quota",
    });
    if refusing.get() >= REFUSALS_IN_FLIGHT_MAX {
        // No TLS handshake for these: it would take round trips.
        if tls.is_none() {
            glommio::spawn_local(async move {
                answer_first_request(stream, code, QUICK_REFUSAL_TIMEOUT).await;
            })
            .detach();
        }
        return;
    }
    refusing.set(refusing.get() + 1);
    let refusing = refusing.clone();
    glommio::spawn_local(async move {
        refuse(stream, code, tls).await;
        refusing.set(refusing.get() - 1);
    })
    .detach();
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
    let deadline = Duration::from_millis(
        shard
            .config
            .frame_read_timeout_ms
            .min(shard.config.login_timeout_ms),
    );
    match first_byte_is_tls(&stream, deadline).await {
        Some(true) => {}
        Some(false) => {
            tracing::debug!(
                ?peer,
                "a plaintext client on a TLS listener: answered TLS_REQUIRED"
            );
            shard.metrics.connection_closed("plaintext_on_tls");
            refuse(stream, ErrorCode::TlsRequired, None).await;
            return None;
        }
        None => return None,
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

/// Whether the connection's first byte starts a TLS handshake; `None` when
/// nothing came within `deadline` or the connection ended.
async fn first_byte_is_tls(stream: &TcpStream, deadline: Duration) -> Option<bool> {
    let mut first = [0u8; 1];
    match within(deadline, stream.peek(&mut first)).await {
        Some(Ok(1..)) => Some(tls::is_tls_hello(first[0])),
        _ => None,
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
/// over a limit, a plaintext client on a TLS listener), then closes it.
/// With `tls`, a client that starts a TLS handshake is answered over TLS.
async fn refuse(stream: TcpStream, code: ErrorCode, tls: Option<ListenerTls>) {
    if let Err(error) = stream.set_read_timeout(Some(REFUSAL_READ_TIMEOUT)) {
        tracing::debug!(%error, "cannot set a read timeout");
    }
    let Some(acceptor) = tls else {
        answer_first_request(stream, code, REFUSAL_READ_TIMEOUT).await;
        return;
    };
    match first_byte_is_tls(&stream, REFUSAL_READ_TIMEOUT).await {
        Some(true) => {
            if let Some(Ok((secured, _))) =
                within(REFUSAL_READ_TIMEOUT, acceptor.accept(stream)).await
            {
                answer_first_request(secured, code, REFUSAL_READ_TIMEOUT).await;
            }
        }
        Some(false) => answer_first_request(stream, code, REFUSAL_READ_TIMEOUT).await,
        None => {}
    }
}

/// Reads a request header from `stream` within `timeout` and answers it
/// with `code`, then closes the stream.
async fn answer_first_request<S>(mut stream: S, code: ErrorCode, timeout: Duration)
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let mut header = [0u8; REQUEST_HEADER_BYTES];
    let read = within(timeout, stream.read_exact(&mut header)).await;
    if !matches!(read, Some(Ok(()))) {
        return;
    }
    let correlation_id = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let body = message::encode_error_response(code);
    let Ok(frame_header) = (ResponseHeader { correlation_id }).encode(body.len()) else {
        return;
    };
    let _sent = stream.write_all(&frame_header).await;
    let _sent = stream.write_all(&body).await;
    let _flushed = stream.flush().await;
    let _closed = stream.close().await;
}
