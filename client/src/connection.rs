//! One TCP connection to one broker: the ApiVersions handshake, pipelined
//! requests matched to their responses by correlation id, and a bound on
//! requests in flight.
//!
//! # Ordering
//!
//! Frames are written in the order [`Connection::send`] is called and
//! completes: `send` hands the whole frame to the connection's writer task
//! through a FIFO channel before it returns. The broker processes requests
//! for one partition in the order they arrive on a connection, so a caller
//! that awaits `send` for batch N before calling it for batch N+1 keeps the
//! two in order (the idempotent producer relies on this). Responses may come
//! back in any order.
//!
//! # Bounds (C9)
//!
//! At most `max_in_flight_per_connection` requests are in flight: `send`
//! waits for a slot. The slot is freed when the response is read (by the
//! reader task, which always reads, so the broker can always write its
//! responses and the two sides never wait on each other). A response frame
//! longer than `max_response_bytes` is refused from its header and closes
//! the connection before anything is allocated for it.
//!
//! # Failure
//!
//! Any read or write error, an unknown correlation id, or a request that
//! times out closes the connection: every request in flight on it fails with
//! [`ClientError::ConnectionLost`], and the owner opens a new connection.
//! Nothing is retried here; retrying is the caller's decision.

mod login;

use std::collections::HashMap;
use std::io::IoSlice;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::frame::{
    ApiKey, FrameLimits, RESPONSE_HEADER_BYTES, RequestHeader, decode_response_header,
};
use corelog_wire::message::api_versions::{ApiVersionRange, ApiVersionsRequest};
use corelog_wire::message::{
    BODY_ALIGNMENT, MessageError, Request, decode_response, encode_request_archive,
};
use rkyv::util::AlignedVec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::AbortHandle;

use crate::config::ClientConfig;
use crate::error::ClientError;

/// Frames gathered into one write at most, which bounds the slice list
/// (a frame is its head and its batches; a call writes up to IOV_MAX of them).
const FRAMES_PER_WRITE_MAX: usize = 64;

/// A connection's read side, plaintext or TLS.
type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// A connection's write side, plaintext or TLS.
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The pause before opening again a connection lost during its handshake.
const HANDSHAKE_RETRY_BACKOFF: Duration = Duration::from_millis(50);

/// A response body, 16-aligned as the wire decoders require, for a request
/// of type `R`.
pub(crate) struct Reply<R: Request> {
    addr: Arc<str>,
    body: AlignedVec<BODY_ALIGNMENT>,
    _request: PhantomData<fn() -> R>,
}

impl<R: Request> std::fmt::Debug for Reply<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("api", &R::API_KEY)
            .field("addr", &self.addr)
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl<R: Request> Reply<R> {
    /// The validated archived response and its raw section.
    ///
    /// # Errors
    /// [`ClientError::Broker`] if the broker refused the whole request (a
    /// top-level error code), [`ClientError::Protocol`] if the body does not
    /// decode.
    pub(crate) fn decode(
        &self,
    ) -> Result<(&<R::Response as rkyv::Archive>::Archived, &[u8]), ClientError> {
        decode_response::<R::Response>(&self.body).map_err(|error| match error {
            MessageError::TopLevelError { error_code, .. } => ClientError::from_wire(
                error_code,
                || format!("{} request to {}", R::API_KEY.name(), self.addr),
                None,
            )
            .unwrap_or_else(|| protocol_error(&self.addr, "refusal with error code 0")),
            other => protocol_error(&self.addr, &other.to_string()),
        })
    }

    /// The broker this came from.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }
}

fn protocol_error(addr: &str, detail: &str) -> ClientError {
    ClientError::Protocol {
        addr: addr.to_owned(),
        detail: detail.to_owned(),
    }
}

/// A whole frame on its way to the writer task: header and archive in one
/// buffer, then record batches as they were built (never copied).
struct Outgoing {
    head: Vec<u8>,
    raw: Vec<Bytes>,
}

/// A request waiting for its response.
struct Pending {
    reply: oneshot::Sender<Result<AlignedVec<BODY_ALIGNMENT>, ClientError>>,
    /// Frees the in-flight slot when the entry is dropped: on response, on
    /// close.
    _slot: OwnedSemaphorePermit,
}

struct State {
    pending: HashMap<u32, Pending>,
    /// Why the connection closed, once it has.
    closed: Option<String>,
    /// The first bytes of a response that was not a corelog frame, when
    /// that is what closed the connection.
    unframed: Option<Vec<u8>>,
    /// Why the broker ended TLS on the connection, if it did: under TLS
    /// 1.3 a refused client certificate shows on the first read.
    tls_refused: Option<String>,
}

/// State shared by the handles and the reader and writer tasks.
struct Shared {
    addr: Arc<str>,
    state: Mutex<State>,
    slots: Arc<Semaphore>,
    closed: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock would be a bug in this file; the
        // map stays consistent at every await-free step, so recover it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lost(&self, reason: &str) -> ClientError {
        ClientError::ConnectionLost {
            addr: self.addr.to_string(),
            reason: reason.to_owned(),
        }
    }

    /// Closes the connection once: fails every pending request and wakes
    /// the tasks so they stop.
    fn close(&self, reason: &str) {
        let pending = {
            let mut state = self.lock();
            if state.closed.is_some() {
                return;
            }
            state.closed = Some(reason.to_owned());
            std::mem::take(&mut state.pending)
        };
        tracing::debug!(addr = %self.addr, reason, "connection closed");
        self.slots.close();
        self.closed.send_replace(true);
        for (_, entry) in pending {
            let _ = entry.reply.send(Err(self.lost(reason)));
        }
    }

    fn deliver(&self, correlation_id: u32, body: AlignedVec<BODY_ALIGNMENT>) -> Result<(), String> {
        let entry = self.lock().pending.remove(&correlation_id);
        match entry {
            // The requester may have given up waiting; that is its business.
            Some(entry) => {
                let _ = entry.reply.send(Ok(body));
                Ok(())
            }
            None => Err(format!(
                "response for unknown correlation id {correlation_id}"
            )),
        }
    }
}

/// Aborts the reader and writer tasks when the last handle goes away.
struct Tasks {
    shared: Arc<Shared>,
    handles: Vec<AbortHandle>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.shared.close("connection dropped by the client");
        for handle in &self.handles {
            handle.abort();
        }
    }
}

/// A connection to one broker, after a successful ApiVersions handshake.
/// Cheap to clone; the connection closes when the last clone is dropped or
/// on the first failure.
#[derive(Clone)]
pub(crate) struct Connection {
    shared: Arc<Shared>,
    outgoing: mpsc::Sender<Outgoing>,
    next_correlation: Arc<AtomicU32>,
    request_timeout: Duration,
    supported: Arc<OnceLock<Vec<ApiVersionRange>>>,
    broker_version: Arc<OnceLock<String>>,
    _tasks: Arc<Tasks>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.shared.addr)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Connection {
    /// Opens a connection and performs the ApiVersions handshake, which the
    /// broker requires before any other request. Resolving the address,
    /// connecting and the handshake together take at most
    /// `connect_timeout`.
    ///
    /// # Errors
    /// [`ClientError::Resolve`] if the host name does not resolve;
    /// [`ClientError::Connect`] or [`ClientError::ConnectTimeout`] if the
    /// socket does not open; [`ClientError::HandshakeTimeout`] or
    /// [`ClientError::NotABroker`] if what listens does not speak the
    /// protocol; the handshake's errors otherwise (for example
    /// `TOO_MANY_CONNECTIONS`).
    pub(crate) async fn open(addr: &str, config: &ClientConfig) -> Result<Connection, ClientError> {
        let deadline = tokio::time::Instant::now() + config.connect_timeout;
        let targets = resolve(addr, config.connect_timeout, deadline).await?;
        loop {
            match Connection::open_once(addr, &targets, config, deadline).await {
                // A listener of a broker that was just killed can linger
                // while the kernel tears it down: it accepts, then resets.
                // Its successor listens once it serves, so a connection
                // lost before the handshake answered is opened again.
                Err(ClientError::ConnectionLost { .. })
                    if tokio::time::Instant::now() + HANDSHAKE_RETRY_BACKOFF < deadline =>
                {
                    tokio::time::sleep(HANDSHAKE_RETRY_BACKOFF).await;
                }
                outcome => return outcome,
            }
        }
    }

    async fn open_once(
        addr: &str,
        targets: &[SocketAddr],
        config: &ClientConfig,
        deadline: tokio::time::Instant,
    ) -> Result<Connection, ClientError> {
        let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(targets)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => {
                return Err(ClientError::Connect {
                    addr: addr.to_owned(),
                    source: Arc::new(source),
                });
            }
            Err(_) => {
                return Err(ClientError::ConnectTimeout {
                    addr: addr.to_owned(),
                    timeout: config.connect_timeout,
                });
            }
        };
        // Latency matters more than packet count: a produce waits on its ack.
        stream
            .set_nodelay(true)
            .map_err(|source| ClientError::Connect {
                addr: addr.to_owned(),
                source: Arc::new(source),
            })?;
        let (reader, writer): (Reader, Writer) = match &config.tls {
            None => {
                let (reader, writer) = stream.into_split();
                (Box::new(reader), Box::new(writer))
            }
            Some(tls) => match tokio::time::timeout_at(deadline, tls.connect(addr, stream)).await {
                Ok(Ok(secured)) => {
                    let (reader, writer) = tokio::io::split(secured);
                    (Box::new(reader), Box::new(writer))
                }
                Ok(Err(error)) => return Err(error),
                Err(_) => {
                    return Err(ClientError::HandshakeTimeout {
                        addr: addr.to_owned(),
                        timeout: config.connect_timeout,
                    });
                }
            },
        };
        let connection = Connection::start(addr, reader, writer, config);
        // Bounded by the connect deadline rather than the request timeout:
        // a server of another protocol may wait silently for a request of
        // its own, and a corelog broker answers this at once.
        let opened = async {
            connection.handshake(&config.client_name).await?;
            if let Some(credentials) = &config.sasl {
                login::login(&connection, credentials).await?;
            }
            Ok(())
        };
        match tokio::time::timeout_at(deadline, opened).await {
            Ok(Ok(())) => Ok(connection),
            Ok(Err(error)) => Err(connection.handshake_error(error)),
            Err(_) => {
                connection.close("no answer to the handshake");
                Err(ClientError::HandshakeTimeout {
                    addr: addr.to_owned(),
                    timeout: config.connect_timeout,
                })
            }
        }
    }

    fn start(
        addr: &str,
        read_half: Reader,
        write_half: Writer,
        config: &ClientConfig,
    ) -> Connection {
        let slots = config.max_in_flight_per_connection;
        let (closed, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            addr: Arc::from(addr),
            state: Mutex::new(State {
                pending: HashMap::new(),
                closed: None,
                unframed: None,
                tls_refused: None,
            }),
            slots: Arc::new(Semaphore::new(slots)),
            closed,
        });
        // The channel never holds more frames than there are slots.
        let (outgoing, frames) = mpsc::channel(slots);
        let limits = FrameLimits {
            max_frame_bytes: config.max_response_bytes,
        };
        let reader = tokio::spawn(read_loop(Arc::clone(&shared), read_half, limits));
        let writer = tokio::spawn(write_loop(Arc::clone(&shared), frames, write_half));
        Connection {
            outgoing,
            next_correlation: Arc::new(AtomicU32::new(1)),
            request_timeout: config.request_timeout,
            supported: Arc::new(OnceLock::new()),
            broker_version: Arc::new(OnceLock::new()),
            _tasks: Arc::new(Tasks {
                shared: Arc::clone(&shared),
                handles: vec![reader.abort_handle(), writer.abort_handle()],
            }),
            shared,
        }
    }

    async fn handshake(&self, client_name: &str) -> Result<(), ClientError> {
        let request = ApiVersionsRequest {
            client_name: client_name.to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        let reply = self.call(&request, Vec::new(), Duration::ZERO).await?;
        let (response, _) = reply.decode()?;
        let apis = response
            .apis
            .iter()
            .map(|range| ApiVersionRange {
                api_key: range.api_key.to_native(),
                min_version: range.min_version.to_native(),
                max_version: range.max_version.to_native(),
            })
            .collect();
        let _ = self.supported.set(apis);
        let _ = self.broker_version.set(response.broker_version.to_string());
        Ok(())
    }

    /// The error to report for a failed handshake: an answer that is not
    /// a corelog frame, or not an ApiVersions response, means another
    /// protocol's server listens at the address.
    fn handshake_error(&self, error: ClientError) -> ClientError {
        let (unframed, tls_refused) = {
            let state = self.shared.lock();
            (state.unframed.clone(), state.tls_refused.clone())
        };
        if let (ClientError::ConnectionLost { .. }, Some(detail)) = (&error, tls_refused) {
            return ClientError::Tls {
                addr: self.addr().to_owned(),
                detail,
            };
        }
        match (error, unframed) {
            (ClientError::ConnectionLost { .. }, Some(answer)) => ClientError::NotABroker {
                addr: self.addr().to_owned(),
                answer: describe_answer(&answer),
            },
            (ClientError::Protocol { detail, .. }, _) => ClientError::NotABroker {
                addr: self.addr().to_owned(),
                answer: format!("a frame that is not an ApiVersions response ({detail})"),
            },
            (error, _) => error,
        }
    }

    /// Whether `other` is a clone of this same connection.
    pub(crate) fn same_as(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The broker's address.
    pub(crate) fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// Whether the connection has closed; a closed connection fails every
    /// request and should be replaced.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().closed.is_some()
    }

    /// Closes the connection, failing its requests in flight.
    pub(crate) fn close(&self, reason: &str) {
        self.shared.close(reason);
    }

    /// Whether the broker speaks `version` of `api` (as far as known: before
    /// the handshake completes, only version 0 is assumed).
    pub(crate) fn supports(&self, api: ApiKey, version: u16) -> bool {
        match self.supported.get() {
            Some(apis) => apis.iter().any(|range| {
                range.api_key == api.code()
                    && (range.min_version..=range.max_version).contains(&version)
            }),
            None => version == 0,
        }
    }

    fn check_supported(&self, api: ApiKey, version: u16) -> Result<(), ClientError> {
        // Before the handshake completes, only ApiVersions itself is sent.
        if self.supported.get().is_none() || self.supports(api, version) {
            Ok(())
        } else {
            Err(ClientError::UnsupportedApi {
                addr: self.shared.addr.to_string(),
                api,
                broker_version: self.broker_version.get().cloned().unwrap_or_default(),
            })
        }
    }

    /// Writes a request and returns a handle that waits for its response.
    /// Waits for an in-flight slot first. When this returns, the frame is
    /// queued on the connection after every frame sent before it.
    ///
    /// `raw` is the raw section (record batches), sent after the archive
    /// without being copied. `extra_wait` is added to the request timeout
    /// for requests that the broker may hold on purpose (a long-polling
    /// fetch).
    ///
    /// # Errors
    /// [`ClientError::ConnectionLost`] if the connection is closed,
    /// [`ClientError::UnsupportedApi`] if the broker does not speak the API,
    /// [`ClientError::Protocol`] if the request cannot be encoded.
    pub(crate) async fn send<R: Request>(
        &self,
        request: &R,
        raw: Vec<Bytes>,
        extra_wait: Duration,
    ) -> Result<PendingReply<R>, ClientError> {
        self.check_supported(R::API_KEY, R::API_VERSION)?;
        let frame = self.encode(request, raw)?;
        let slot = Arc::clone(&self.shared.slots)
            .acquire_owned()
            .await
            .map_err(|_| self.closed_error())?;
        let correlation_id = self.next_correlation.fetch_add(1, Ordering::Relaxed);
        let (reply, response) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if let Some(reason) = &state.closed {
                return Err(self.shared.lost(reason));
            }
            state
                .pending
                .insert(correlation_id, Pending { reply, _slot: slot });
        }
        let mut frame = frame;
        frame.head[8..12].copy_from_slice(&correlation_id.to_be_bytes());
        if self.outgoing.send(frame).await.is_err() {
            self.shared.lock().pending.remove(&correlation_id);
            return Err(self.closed_error());
        }
        Ok(PendingReply {
            connection: self.clone(),
            response,
            timeout: self.request_timeout + extra_wait,
            _request: PhantomData,
        })
    }

    /// Sends a request and waits for its response; see [`Connection::send`].
    ///
    /// # Errors
    /// As [`Connection::send`] and [`PendingReply::wait`].
    pub(crate) async fn call<R: Request>(
        &self,
        request: &R,
        raw: Vec<Bytes>,
        extra_wait: Duration,
    ) -> Result<Reply<R>, ClientError> {
        self.send(request, raw, extra_wait).await?.wait().await
    }

    fn closed_error(&self) -> ClientError {
        let reason = self
            .shared
            .lock()
            .closed
            .clone()
            .unwrap_or_else(|| "closed".to_owned());
        self.shared.lost(&reason)
    }

    /// The frame for `request`, with correlation id 0 (set by `send`).
    fn encode<R: Request>(&self, request: &R, raw: Vec<Bytes>) -> Result<Outgoing, ClientError> {
        let raw_len: usize = raw.iter().map(Bytes::len).sum();
        let archive = encode_request_archive(request, raw_len)
            .map_err(|error| protocol_error(self.addr(), &format!("cannot encode: {error}")))?;
        let header = RequestHeader {
            api_key: R::API_KEY,
            api_version: R::API_VERSION,
            correlation_id: 0,
            flags: 0,
        }
        .encode(archive.len() + raw_len)
        .map_err(|error| protocol_error(self.addr(), &format!("cannot encode: {error}")))?;
        let mut head = Vec::with_capacity(header.len() + archive.len());
        head.extend_from_slice(&header);
        head.extend_from_slice(&archive);
        Ok(Outgoing { head, raw })
    }
}

/// A request on the wire, waiting for its response.
pub(crate) struct PendingReply<R: Request> {
    connection: Connection,
    response: oneshot::Receiver<Result<AlignedVec<BODY_ALIGNMENT>, ClientError>>,
    timeout: Duration,
    _request: PhantomData<fn() -> R>,
}

impl<R: Request> std::fmt::Debug for PendingReply<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingReply")
            .field("api", &R::API_KEY)
            .field("addr", &self.connection.addr())
            .finish()
    }
}

impl<R: Request> PendingReply<R> {
    /// Waits for the response.
    ///
    /// # Errors
    /// [`ClientError::RequestTimeout`] if none comes in time (the connection
    /// is then closed), [`ClientError::ConnectionLost`] if the connection
    /// closes first.
    pub(crate) async fn wait(self) -> Result<Reply<R>, ClientError> {
        match tokio::time::timeout(self.timeout, self.response).await {
            Ok(Ok(Ok(body))) => Ok(Reply {
                addr: Arc::clone(&self.connection.shared.addr),
                body,
                _request: PhantomData,
            }),
            Ok(Ok(Err(error))) => Err(error),
            Ok(Err(_)) => Err(self.connection.closed_error()),
            Err(_) => {
                // The request's fate is unknown: nothing later on this
                // connection can be trusted to be ordered after it.
                self.connection.close("a request timed out");
                Err(ClientError::RequestTimeout {
                    addr: self.connection.addr().to_owned(),
                    api: R::API_KEY,
                    timeout: self.timeout,
                })
            }
        }
    }
}

async fn read_loop(shared: Arc<Shared>, mut reader: Reader, limits: FrameLimits) {
    let mut closed = shared.closed.subscribe();
    tokio::select! {
        end = read_frames(&shared, &mut reader, limits) => {
            match &end {
                ReadEnd::Unframed { head, .. } => shared.lock().unframed = Some(head.to_vec()),
                ReadEnd::TlsRefused(detail) => shared.lock().tls_refused = Some(detail.clone()),
                ReadEnd::Failed(_) => {}
            }
            shared.close(end.reason());
        }
        _ = closed.wait_for(|closed| *closed) => {}
    }
}

/// Why reading a connection stopped.
enum ReadEnd {
    /// The stream ended or failed, or a frame broke the protocol.
    Failed(String),
    /// The broker ended TLS (an alert), for the reason given.
    TlsRefused(String),
    /// A response did not even have a corelog frame header.
    Unframed {
        reason: String,
        head: [u8; RESPONSE_HEADER_BYTES],
    },
}

impl ReadEnd {
    fn reason(&self) -> &str {
        match self {
            ReadEnd::Failed(reason)
            | ReadEnd::TlsRefused(reason)
            | ReadEnd::Unframed { reason, .. } => reason,
        }
    }
}

/// Reads frames until something goes wrong, and says what.
async fn read_frames(shared: &Shared, reader: &mut Reader, limits: FrameLimits) -> ReadEnd {
    loop {
        let mut head = [0_u8; RESPONSE_HEADER_BYTES];
        if let Err(error) = reader.read_exact(&mut head).await {
            if crate::tls::rustls_error(&error).is_some() {
                return ReadEnd::TlsRefused(crate::tls::explain(&error, &"--tls-ca"));
            }
            return ReadEnd::Failed(if error.kind() == std::io::ErrorKind::UnexpectedEof {
                "the broker closed the connection".to_owned()
            } else {
                format!("read failed: {error}")
            });
        }
        let decoded = match decode_response_header(&head, &limits) {
            Ok(decoded) => decoded,
            Err(error) => {
                return ReadEnd::Unframed {
                    reason: format!("bad response frame: {error}"),
                    head,
                };
            }
        };
        let mut body = AlignedVec::<BODY_ALIGNMENT>::with_capacity(decoded.body_len);
        body.resize(decoded.body_len, 0);
        if let Err(error) = reader.read_exact(body.as_mut_slice()).await {
            return ReadEnd::Failed(format!("read failed inside a frame: {error}"));
        }
        if let Err(reason) = shared.deliver(decoded.header.correlation_id, body) {
            return ReadEnd::Failed(reason);
        }
    }
}

/// The first bytes of an answer that is not a corelog frame, for a person:
/// quoted text when printable (`"HTTP/1.1"`), else hex.
fn describe_answer(head: &[u8]) -> String {
    if head
        .iter()
        .all(|byte| byte.is_ascii_graphic() || *byte == b' ')
    {
        format!("{:?}", String::from_utf8_lossy(head))
    } else {
        let hex: Vec<String> = head.iter().map(|byte| format!("{byte:02x}")).collect();
        format!("the bytes {}", hex.join(" "))
    }
}

/// The socket addresses of `addr` (`host:port`), looked up once per
/// connection attempt and within the connect deadline.
async fn resolve(
    addr: &str,
    timeout: Duration,
    deadline: tokio::time::Instant,
) -> Result<Vec<SocketAddr>, ClientError> {
    let resolve_error = |detail: String| ClientError::Resolve {
        addr: addr.to_owned(),
        detail,
    };
    match tokio::time::timeout_at(deadline, tokio::net::lookup_host(addr)).await {
        Ok(Ok(found)) => {
            let found: Vec<SocketAddr> = found.collect();
            if found.is_empty() {
                return Err(resolve_error("no address was found for it".to_owned()));
            }
            Ok(found)
        }
        Ok(Err(error)) => Err(resolve_error(error.to_string())),
        Err(_) => Err(resolve_error(format!(
            "no answer from the resolver within {timeout:?}"
        ))),
    }
}

async fn write_loop(shared: Arc<Shared>, mut frames: mpsc::Receiver<Outgoing>, mut writer: Writer) {
    let mut closed = shared.closed.subscribe();
    tokio::select! {
        result = write_frames(&mut frames, &mut writer) => {
            if let Err(error) = result {
                shared.close(&format!("write failed: {error}"));
            }
        }
        _ = closed.wait_for(|closed| *closed) => {}
    }
    if let Err(error) = writer.shutdown().await {
        // The connection is being closed either way.
        tracing::debug!(%error, "shutting down a closed connection's writer failed");
    }
}

/// Writes frames in channel order, until every sender is gone: whatever is
/// queued goes out in one gathered write, record bytes uncopied.
async fn write_frames(
    frames: &mut mpsc::Receiver<Outgoing>,
    writer: &mut Writer,
) -> std::io::Result<()> {
    let mut queued = Vec::new();
    while let Some(frame) = frames.recv().await {
        queued.push(frame);
        while queued.len() < FRAMES_PER_WRITE_MAX
            && let Ok(frame) = frames.try_recv()
        {
            queued.push(frame);
        }
        write_gathered(writer, &queued).await?;
        queued.clear();
    }
    Ok(())
}

async fn write_gathered<W: AsyncWrite + Unpin + ?Sized>(
    writer: &mut W,
    frames: &[Outgoing],
) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = frames
        .iter()
        .flat_map(|frame| {
            std::iter::once(frame.head.as_slice()).chain(frame.raw.iter().map(|batch| &batch[..]))
        })
        .filter(|slice| !slice.is_empty())
        .map(IoSlice::new)
        .collect();
    let mut unwritten = &mut slices[..];
    while !unwritten.is_empty() {
        let written = writer.write_vectored(unwritten).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut unwritten, written);
    }
    // TLS holds the last record until flushed; a socket has nothing to do.
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;

    use super::{FRAMES_PER_WRITE_MAX, Outgoing, describe_answer, write_frames};

    #[test]
    fn an_answer_that_is_not_a_frame_is_shown_as_text_or_hex() {
        assert_eq!(describe_answer(b"HTTP/1.1"), "\"HTTP/1.1\"");
        assert_eq!(describe_answer(&[0xFF, 0x00, 0x41]), "the bytes ff 00 41");
    }

    /// More frames than one gathered write takes, with batches larger than
    /// the socket buffer (partial writes) and empty pieces, arrive whole and
    /// in order.
    #[tokio::test]
    async fn gathered_writes_deliver_every_byte_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (frames_in, mut frames) = mpsc::channel(1024);
        let mut expected = Vec::new();
        for index in 0..(FRAMES_PER_WRITE_MAX * 3) {
            let head = vec![index as u8; 1 + index % 7];
            let raw: Vec<Bytes> = (0..index % 4)
                .map(|batch| {
                    let length = if index % 50 == 1 {
                        3 << 20
                    } else {
                        batch * 100
                    };
                    Bytes::from(vec![(index + batch) as u8; length])
                })
                .collect();
            expected.extend_from_slice(&head);
            for batch in &raw {
                expected.extend_from_slice(batch);
            }
            frames_in.send(Outgoing { head, raw }).await.unwrap();
        }
        drop(frames_in);
        let reader = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut received = Vec::new();
            stream.read_to_end(&mut received).await.unwrap();
            received
        });
        let stream = TcpStream::connect(address).await.unwrap();
        let (_read, write) = stream.into_split();
        let mut write: super::Writer = Box::new(write);
        write_frames(&mut frames, &mut write).await.unwrap();
        drop(write);
        let received = reader.await.unwrap();
        assert_eq!(received.len(), expected.len());
        assert!(received == expected, "bytes differ");
    }
}
