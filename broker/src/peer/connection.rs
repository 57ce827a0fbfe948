//! One pipelined connection to a peer broker.

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use ahash::AHashMap;
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{
    ApiKey, FrameLimits, RESPONSE_HEADER_BYTES, RequestHeader, decode_response_header,
};
use corelog_wire::message::api_versions::ApiVersionsRequest;
use corelog_wire::message::authenticate::{AuthenticateRequest, AuthenticateResponse};
use corelog_wire::sasl::cluster::{self, ClientExchange, ClusterSecret, NONCE_BYTES};
use futures::channel::oneshot;
use futures::io::{ReadHalf, WriteHalf};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use rkyv::util::AlignedVec;

use super::PeerError;
use crate::tls::{PeerConnector, Stream};

/// Largest response accepted from a peer: metadata states and pushes of
/// several batches, well below this.
const RESPONSE_BYTES_MAX: u32 = 64 << 20;

type Pending = AHashMap<u32, oneshot::Sender<Result<AlignedVec<16>, PeerError>>>;

/// A frame buffer larger than this is not kept for the next request: one
/// unusually large request must not pin its memory for good. Replication
/// frames (4 MiB of batches) fit.
const FRAME_BUFFER_KEPT_MAX: usize = 8 << 20;

/// The write side: the socket and the buffer each request's frame is
/// gathered in. glommio's sockets write one buffer per call (no writev),
/// so the parts are copied once into it; it is kept from request to
/// request, since a fresh multi-megabyte allocation per frame costs page
/// faults and zeroing on top of the copy.
struct Writer {
    socket: WriteHalf<Stream>,
    frame: Vec<u8>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("frame_capacity", &self.frame.capacity())
            .finish_non_exhaustive()
    }
}

/// A connection with requests in flight, matched to responses by
/// correlation id.
#[derive(Debug)]
pub struct PeerConnection {
    addr: SocketAddr,
    writer: async_lock::Mutex<Writer>,
    pending: Rc<RefCell<Pending>>,
    next_correlation: Cell<u32>,
    broken: Rc<Cell<bool>>,
}

impl PeerConnection {
    /// Connects from `source` (any local address when `None`), over TLS
    /// when given a connector, starts the reader, does the ApiVersions
    /// handshake, and proves the cluster secret as broker `node_id` when it
    /// has one.
    ///
    /// # Errors
    /// [`PeerError::Unreachable`] or [`PeerError::Timeout`];
    /// [`PeerError::Refused`] when the peer does not accept the proof (or
    /// cannot prove the secret itself).
    pub async fn connect(
        addr: SocketAddr,
        source: Option<IpAddr>,
        tls: Option<PeerConnector>,
        proof: Option<(u32, ClusterSecret)>,
        timeout: Duration,
    ) -> Result<Rc<PeerConnection>, PeerError> {
        let opened = match source {
            Some(source) => connect_from(source, addr, timeout).await,
            None => TcpStream::connect_timeout(addr, timeout)
                .await
                .map_err(|error| error.to_string()),
        };
        let stream = opened.map_err(|reason| PeerError::Unreachable { addr, reason })?;
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a peer connection");
        }
        let stream: Stream = match tls {
            None => Box::new(stream),
            Some(connector) => {
                let handshake = connector.connect(addr, stream);
                let timer = glommio::timer::sleep(timeout);
                match futures::future::select(Box::pin(handshake), Box::pin(timer)).await {
                    futures::future::Either::Left((Ok(secured), _)) => Box::new(secured),
                    futures::future::Either::Left((Err(error), _)) => {
                        return Err(PeerError::Unreachable {
                            addr,
                            reason: format!("TLS handshake failed: {error}"),
                        });
                    }
                    futures::future::Either::Right(_) => {
                        return Err(PeerError::Unreachable {
                            addr,
                            reason: format!("TLS handshake not done within {timeout:?}"),
                        });
                    }
                }
            }
        };
        let (reader, writer) = stream.split();
        let pending: Rc<RefCell<Pending>> = Rc::new(RefCell::new(AHashMap::new()));
        let broken = Rc::new(Cell::new(false));
        glommio::spawn_local(read_responses(
            addr,
            reader,
            pending.clone(),
            broken.clone(),
        ))
        .detach();
        let connection = Rc::new(PeerConnection {
            addr,
            writer: async_lock::Mutex::new(Writer {
                socket: writer,
                frame: Vec::new(),
            }),
            pending,
            next_correlation: Cell::new(1),
            broken,
        });
        let handshake = corelog_wire::message::encode_request(
            &ApiVersionsRequest {
                client_name: "corelogd-peer".to_owned(),
                client_version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            &[],
        )
        .map_err(|error| PeerError::Protocol {
            addr,
            reason: error.to_string(),
        })?;
        connection
            .call((ApiKey::ApiVersions, 0), &[&handshake], timeout)
            .await?;
        if let Some((node_id, secret)) = proof {
            connection.prove(node_id, secret, timeout).await?;
        }
        Ok(connection)
    }

    /// The `CORELOG-CLUSTER` exchange: both sides prove the shared secret.
    async fn prove(
        &self,
        node_id: u32,
        secret: ClusterSecret,
        timeout: Duration,
    ) -> Result<(), PeerError> {
        let addr = self.addr;
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|error| PeerError::Protocol {
            addr,
            reason: format!("no randomness for the cluster-secret nonce: {error}"),
        })?;
        let exchange = ClientExchange::new(secret, node_id, nonce);
        let server_first = self.authenticate_step(exchange.first(), timeout).await?;
        let client_final = exchange.answer(&server_first.payload).map_err(|error| {
            tracing::warn!(%addr, %error, "a peer failed to prove the cluster secret");
            PeerError::Refused {
                addr,
                code: ErrorCode::AuthenticationFailed.code(),
            }
        })?;
        let last = self.authenticate_step(client_final, timeout).await?;
        if !last.complete {
            return Err(PeerError::Protocol {
                addr,
                reason: "the cluster-secret exchange did not complete".to_owned(),
            });
        }
        Ok(())
    }

    async fn authenticate_step(
        &self,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<AuthenticateResponse, PeerError> {
        let addr = self.addr;
        let request = AuthenticateRequest {
            mechanism: cluster::MECHANISM.to_owned(),
            payload,
        };
        let body = corelog_wire::message::encode_request(&request, &[]).map_err(|error| {
            PeerError::Protocol {
                addr,
                reason: error.to_string(),
            }
        })?;
        let response = self
            .call((ApiKey::Authenticate, 0), &[&body], timeout)
            .await?;
        let answer = super::decode::<AuthenticateRequest>(addr, &response)?.message;
        if answer.error_code != ErrorCode::None.code() {
            tracing::warn!(
                %addr,
                code = answer.error_code,
                reason = answer.error_message.as_deref().unwrap_or(""),
                "a peer refused this broker's cluster-secret proof"
            );
            return Err(PeerError::Refused {
                addr,
                code: answer.error_code,
            });
        }
        Ok(answer)
    }

    /// Whether the connection failed and must be replaced.
    #[must_use]
    pub fn is_broken(&self) -> bool {
        self.broken.get()
    }

    /// Sends one request body of version `api_version` of `api_key`, given
    /// in parts (the encoded message, then its raw section's pieces, copied
    /// once into the connection's frame buffer), and waits for its
    /// response body.
    ///
    /// # Errors
    /// [`PeerError`] on a broken connection or a missed deadline.
    pub async fn call(
        &self,
        (api_key, api_version): (ApiKey, u16),
        body: &[&[u8]],
        timeout: Duration,
    ) -> Result<AlignedVec<16>, PeerError> {
        let addr = self.addr;
        if self.broken.get() {
            return Err(PeerError::Unreachable {
                addr,
                reason: "connection broken".to_owned(),
            });
        }
        let correlation_id = self.next_correlation.get();
        self.next_correlation.set(correlation_id.wrapping_add(1));
        let header = RequestHeader {
            api_key,
            api_version,
            correlation_id,
            flags: 0,
        }
        .encode(body.iter().map(|part| part.len()).sum())
        .map_err(|error| PeerError::Protocol {
            addr,
            reason: error.to_string(),
        })?;
        let (sender, answer) = oneshot::channel();
        self.pending.borrow_mut().insert(correlation_id, sender);
        let written = {
            let mut writer = self.writer.lock().await;
            let Writer { socket, frame } = &mut *writer;
            frame.clear();
            frame.extend_from_slice(&header);
            for part in body {
                frame.extend_from_slice(part);
            }
            let written = match socket.write_all(frame).await {
                Ok(()) => socket.flush().await,
                Err(error) => Err(error),
            };
            if frame.capacity() > FRAME_BUFFER_KEPT_MAX {
                *frame = Vec::new();
            }
            written
        };
        if let Err(error) = written {
            self.pending.borrow_mut().remove(&correlation_id);
            self.broken.set(true);
            return Err(PeerError::Unreachable {
                addr,
                reason: error.to_string(),
            });
        }
        let deadline = glommio::timer::sleep(timeout);
        match futures::future::select(answer, Box::pin(deadline)).await {
            futures::future::Either::Left((Ok(result), _)) => result,
            futures::future::Either::Left((Err(_), _)) => Err(PeerError::Unreachable {
                addr,
                reason: "connection closed".to_owned(),
            }),
            futures::future::Either::Right(_) => {
                self.pending.borrow_mut().remove(&correlation_id);
                Err(PeerError::Timeout { addr, timeout })
            }
        }
    }
}

/// Longest pause between two checks of a connect in progress: bounds the
/// delay a completed handshake waits to be noticed.
const CONNECT_POLL_MAX: Duration = Duration::from_millis(10);

/// Opens a TCP connection to `addr` from `source` (port chosen by the
/// kernel). glommio's own connect cannot bind first, so this is a
/// non-blocking connect polled on the executor's timer: a blocking one
/// would stall the shard, or its one blocking thread (renames, removes),
/// for the whole timeout when a partition drops the SYN.
async fn connect_from(
    source: IpAddr,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, String> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|error| format!("cannot create a socket: {error}"))?;
    socket
        .bind(&SocketAddr::new(source, 0).into())
        .map_err(|error| format!("cannot bind to the listen address {source}: {error}"))?;
    socket
        .set_nonblocking(true)
        .map_err(|error| error.to_string())?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(error)
            if error.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
        Err(error) => return Err(error.to_string()),
    }
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(50);
    loop {
        // SO_ERROR reports a refused or unreachable connect; a peer
        // address appears once the handshake completed.
        if let Some(error) = socket.take_error().map_err(|error| error.to_string())? {
            return Err(error.to_string());
        }
        if socket.peer_addr().is_ok() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!("connection timed out after {timeout:?}"));
        }
        glommio::timer::sleep(pause).await;
        pause = (pause * 2).min(CONNECT_POLL_MAX);
    }
    // glommio's streams expect the blocking mode its own connect leaves.
    socket
        .set_nonblocking(false)
        .map_err(|error| error.to_string())?;
    Ok(TcpStream::from(socket))
}

async fn read_responses(
    addr: SocketAddr,
    mut reader: ReadHalf<Stream>,
    pending: Rc<RefCell<Pending>>,
    broken: Rc<Cell<bool>>,
) {
    let limits = FrameLimits {
        max_frame_bytes: RESPONSE_BYTES_MAX,
    };
    let failure = loop {
        let mut header = [0u8; RESPONSE_HEADER_BYTES];
        if let Err(error) = reader.read_exact(&mut header).await {
            break error.to_string();
        }
        let head = match decode_response_header(&header, &limits) {
            Ok(head) => head,
            Err(error) => break error.to_string(),
        };
        let mut body = AlignedVec::<16>::with_capacity(head.body_len);
        body.resize(head.body_len, 0);
        if let Err(error) = reader.read_exact(&mut body).await {
            break error.to_string();
        }
        let waiter = pending.borrow_mut().remove(&head.header.correlation_id);
        if let Some(waiter) = waiter {
            // The caller may have given up (deadline): nothing to do then.
            let _delivered = waiter.send(Ok(body));
        }
    };
    broken.set(true);
    let waiters: Vec<_> = pending
        .borrow_mut()
        .drain()
        .map(|(_, waiter)| waiter)
        .collect();
    for waiter in waiters {
        let _delivered = waiter.send(Err(PeerError::Unreachable {
            addr,
            reason: failure.clone(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, TcpListener};

    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;

    fn on_executor<T>(test: impl std::future::Future<Output = T>) -> T {
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor starts")
            .run(test)
    }

    /// All of 127.0.0.0/8 is local on lo, so a listener on 127.0.0.1 sees
    /// which loopback address a connection came from.
    #[test]
    fn connection_from_a_listen_ip_starts_from_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let source = IpAddr::from(Ipv4Addr::new(127, 0, 0, 7));
        let stream = on_executor(connect_from(source, addr, Duration::from_secs(5)));
        let stream = stream.expect("connects");
        let (_accepted, from) = listener.accept().unwrap();
        assert_eq!(from.ip(), source);
        assert_eq!(stream.local_addr().unwrap().ip(), source);
    }

    #[test]
    fn connection_refused_from_a_listen_ip_fails_fast() {
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let source = IpAddr::from(Ipv4Addr::new(127, 0, 0, 7));
        let started = Instant::now();
        let result = on_executor(connect_from(source, closed, Duration::from_secs(5)));
        let reason = result.expect_err("nothing listens there");
        assert!(reason.contains("refused"), "{reason}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
