//! One client connection.
//!
//! Reading: the fixed 14-byte header is read first and judged alone
//! (length against `max_frame_bytes`, API key, version) before a byte of
//! body is allocated; the body is then read into a 16-aligned buffer so
//! that its archive can be validated in place. An oversized frame is
//! answered `FRAME_TOO_LARGE` and the connection closed, since the stream
//! cannot be resynchronised without reading the body.
//!
//! Deadlines: a connection with no request in flight that sends nothing
//! for `connection_idle_timeout_ms` is closed, and so is one whose frame is
//! not whole `frame_read_timeout_ms` after its first byte (a header that
//! promises a large body and stops would otherwise hold the connection and
//! its slot for good). A connection must also log in (with authentication
//! required; else, do its `ApiVersions` handshake) within
//! `login_timeout_ms` of being accepted, so that idle connections that
//! never identify themselves cannot hold the broker's connection slots.
//! All three are counted in `corelog_connections_closed_total`. A frame
//! that is already whole costs no timer.
//!
//! Backpressure: at most `max_in_flight_per_connection` requests are
//! handled at once; the next frame is not read until one finishes, so a
//! fast client cannot make the broker buffer without bound. A produce
//! also waits for the shard's admission ([`super::admission`]) before it
//! is handed on, and the connection reads nothing more meanwhile: past its
//! capacity the shard holds `produce_bytes_in_flight_max` of produce work
//! and pushes the rest back to the producers.
//!
//! Order: requests are handed to handlers in arrival order, and a handler
//! runs synchronously up to the point where it orders its work (a produce
//! assigns offsets or queues to the owning shard), so pipelined produces to
//! one partition append in order. Responses are written as they complete,
//! matched to requests by correlation id.

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{
    ApiKey, FrameError, FrameLimits, REQUEST_HEADER_BYTES, RequestHeader, ResponseHeader,
    decode_request_header,
};
use corelog_wire::message::authenticate::AuthenticateRequest;
use corelog_wire::message::decode_request;
use corelog_wire::sasl::cluster::NONCE_BYTES;
use corelog_wire::sasl::scram::{ITERATIONS_DEFAULT, ScramMechanism};
use futures::io::{ReadHalf, WriteHalf};
use futures::{AsyncReadExt, AsyncWriteExt, FutureExt};

use super::access::Access;
use super::admission::Admitted;
use super::connection_counts::Refusal;
use super::edge::PrincipalSlot;
use super::front::Front;
use super::handlers::{self, Caller, Origin};
use super::login_ledger::Turn;
use super::quota::Kind;
use super::request_body::RequestBody;
use super::session::{Credentials, Principal, Session, Step};
use super::throttle::Throttle;
use crate::api::Reply;
use crate::api::refused;
use crate::config::Authentication;
use crate::log_limit::LogLimit;
use crate::runtime::shard::Shard;
use crate::tls::Stream;

/// Responses smaller than this are copied into one buffer and written with
/// one call; larger ones are written piece by piece, record bytes uncopied.
const COALESCE_BYTES_MAX: usize = 64 << 10;

/// How long a connection whose user was deleted or re-keyed may still
/// write responses already under way before it is closed.
const REVOKED_GRACE: Duration = Duration::from_millis(500);

/// A response on its way to the writer.
struct Outgoing {
    correlation_id: u32,
    reply: Reply,
    /// Close the connection after writing this response.
    then_close: bool,
    /// The request's in-flight slot, freed once the response is written:
    /// a client that stops reading stops the broker reading its requests,
    /// instead of responses piling up unsent (C9).
    _slot: RequestSlot,
}

/// One of a connection's `max_in_flight_per_connection` request slots.
type RequestSlot = async_lock::SemaphoreGuardArc;

/// Serves one connection, accepted at `accepted`, until the client closes
/// it, it breaks the protocol beyond recovery, or the shard stops.
pub async fn serve(
    front: Rc<Front>,
    stream: Stream,
    peer: Option<SocketAddr>,
    certified: Option<String>,
    accepted: Instant,
) {
    let (reader, writer) = stream.split();
    let (outgoing, responses) = flume::unbounded::<Outgoing>();
    let writer_task = glommio::spawn_local(write_responses(writer, responses));
    let mut session = certified.map_or_else(Session::default, Session::certified);
    let shard = &front.shard;
    let login_by = accepted + Duration::from_millis(shard.config.login_timeout_ms);
    let result = read_requests(&front, reader, outgoing, peer, &mut session, login_by).await;
    abandoned(&front, &session, peer);
    if let Err(reason) = result {
        if let Some(counted) = reason.counted_as() {
            shard.metrics.connection_closed(counted);
        }
        tracing::debug!(?peer, %reason, "closing connection");
        if let CloseReason::CredentialRevoked(user) = &reason {
            // Responses already under way (the user's own password change,
            // say) get a moment to go out; a long-polling fetch does not
            // hold the connection open past it: dropping the writer task
            // cancels it and closes the socket.
            let grace = glommio::timer::sleep(REVOKED_GRACE);
            let _drained = futures::future::select(writer_task, Box::pin(grace)).await;
            tracing::info!(
                ?peer,
                user,
                "closed a connection of a user deleted or given a new password"
            );
            return;
        }
    }
    // The writer ends once every in-flight handler has dropped its sender.
    writer_task.await;
}

async fn write_responses(mut writer: WriteHalf<Stream>, responses: flume::Receiver<Outgoing>) {
    while let Ok(outgoing) = responses.recv_async().await {
        let close = outgoing.then_close;
        if let Err(error) = write_response(&mut writer, outgoing).await {
            tracing::debug!(%error, "writing a response failed");
            return;
        }
        if close {
            break;
        }
    }
    if let Err(error) = writer.close().await {
        tracing::debug!(%error, "closing a connection failed");
    }
}

async fn write_response(writer: &mut WriteHalf<Stream>, outgoing: Outgoing) -> std::io::Result<()> {
    let body_len = outgoing.reply.len();
    let header = ResponseHeader {
        correlation_id: outgoing.correlation_id,
    }
    .encode(body_len)
    .map_err(|error| std::io::Error::other(error.to_string()))?;
    if body_len <= COALESCE_BYTES_MAX {
        let mut frame = Vec::with_capacity(header.len() + body_len);
        frame.extend_from_slice(&header);
        frame.extend_from_slice(&outgoing.reply.head);
        for chunk in &outgoing.reply.raw {
            frame.extend_from_slice(chunk);
        }
        writer.write_all(&frame).await?;
    } else {
        let mut head = Vec::with_capacity(header.len() + outgoing.reply.head.len());
        head.extend_from_slice(&header);
        head.extend_from_slice(&outgoing.reply.head);
        writer.write_all(&head).await?;
        for chunk in &outgoing.reply.raw {
            writer.write_all(chunk).await?;
        }
    }
    writer.flush().await
}

/// Why a connection was closed by the broker.
#[derive(Debug, thiserror::Error)]
enum CloseReason {
    #[error("client closed the connection")]
    ClientClosed,
    #[error("read failed: {0}")]
    Read(std::io::Error),
    #[error("frame refused: {0}")]
    Frame(FrameError),
    #[error("the shard is stopping")]
    Stopping,
    #[error("idle for {0:?} with nothing in flight")]
    IdleTimeout(Duration),
    #[error("a request frame was not whole {0:?} after its first byte")]
    FrameTimeout(Duration),
    #[error("authentication failed")]
    AuthenticationFailed,
    #[error("a request before authentication, which this broker requires")]
    AuthenticationRequired,
    #[error("user {0:?} was deleted or given a new password")]
    CredentialRevoked(String),
    #[error("{0} is at its connection quota")]
    ConnectionQuota(String),
    #[error("not logged in by the login deadline")]
    LoginTimeout,
}

impl CloseReason {
    /// The `reason` label of `corelog_connections_closed_total`, for the
    /// closes that metric counts.
    fn counted_as(&self) -> Option<&'static str> {
        match self {
            CloseReason::IdleTimeout(_) => Some("idle_timeout"),
            CloseReason::FrameTimeout(_) => Some("frame_timeout"),
            CloseReason::AuthenticationRequired => Some("authentication_required"),
            CloseReason::CredentialRevoked(_) => Some("credential_revoked"),
            CloseReason::LoginTimeout => Some("login_timeout"),
            _ => None,
        }
    }
}

fn read_error(error: std::io::Error) -> CloseReason {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        CloseReason::ClientClosed
    } else {
        CloseReason::Read(error)
    }
}

/// A connection's read deadlines (see the module docs).
#[derive(Clone, Copy)]
struct Deadlines {
    /// `None`: a connection may idle for good.
    idle: Option<Duration>,
    frame: Duration,
    /// When the connection must have logged in (or done its handshake);
    /// `None` once it has.
    login: Option<Instant>,
}

/// Waits for the first bytes of the next frame header (as long as the
/// connection may idle, or the shard stops), then for the rest of it.
/// Returns the frame's deadline, which its body must meet too.
async fn read_header(
    shard: &Shard,
    reader: &mut ReadHalf<Stream>,
    header: &mut [u8; REQUEST_HEADER_BYTES],
    deadlines: Deadlines,
    in_flight: &Cell<u32>,
    user: Option<&(String, u64)>,
) -> Result<Instant, CloseReason> {
    let stopping = shard.stopping.listen();
    if shard.is_stopping() {
        return Err(CloseReason::Stopping);
    }
    let mut stopping = stopping.fuse();
    let filled = {
        let mut read = pin!(reader.read(header).fuse());
        // Under load the next header is there already: no timer for it.
        let ready = (&mut read).now_or_never();
        if let Some(result) = ready {
            result.map_err(read_error)?
        } else {
            loop {
                let idle = async {
                    match deadlines.idle {
                        Some(timeout) => glommio::timer::sleep(timeout).await,
                        None => futures::future::pending().await,
                    }
                };
                let login = async {
                    match deadlines.login {
                        Some(by) => {
                            glommio::timer::sleep(by.saturating_duration_since(Instant::now()))
                                .await;
                        }
                        None => futures::future::pending().await,
                    }
                };
                futures::select_biased! {
                    read = read => break read.map_err(read_error)?,
                    () = stopping => return Err(CloseReason::Stopping),
                    () = login.fuse() => return Err(CloseReason::LoginTimeout),
                    name = revoked(shard, user).fuse() => {
                        return Err(CloseReason::CredentialRevoked(name));
                    }
                    () = idle.fuse() => {
                        // A long-polling fetch or a slow append is activity.
                        if in_flight.get() == 0 {
                            return Err(CloseReason::IdleTimeout(deadlines.idle.unwrap_or_default()));
                        }
                    }
                }
            }
        }
    };
    if filled == 0 {
        return Err(CloseReason::ClientClosed);
    }
    let deadline = Instant::now() + deadlines.frame;
    read_exact_by(reader, &mut header[filled..], deadline, deadlines.frame).await?;
    Ok(deadline)
}

/// Completes, with the user's name, once the metadata no longer holds the
/// credential `user` (name, changed-at) authenticated with: the user was
/// deleted or given a new password. Never completes without a user.
async fn revoked(shard: &Shard, user: Option<&(String, u64)>) -> String {
    let Some((name, changed_at)) = user else {
        return futures::future::pending().await;
    };
    loop {
        let applied = shard.metadata_applied.listen();
        let stands = shard
            .snapshot()
            .cluster
            .state
            .users()
            .get(name)
            .is_some_and(|record| record.changed_at == *changed_at);
        if !stands {
            return name.clone();
        }
        applied.await;
    }
}

/// Fills `buf` by `deadline`; `frame` is the timeout it stands for.
async fn read_exact_by(
    reader: &mut ReadHalf<Stream>,
    buf: &mut [u8],
    deadline: Instant,
    frame: Duration,
) -> Result<(), CloseReason> {
    if buf.is_empty() {
        return Ok(());
    }
    let mut read = pin!(reader.read_exact(buf).fuse());
    // Most frames arrive whole: no timer for those.
    if let Some(result) = (&mut read).now_or_never() {
        return result.map_err(read_error);
    }
    let late = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
    futures::select_biased! {
        result = read => result.map_err(read_error),
        () = late.fuse() => Err(CloseReason::FrameTimeout(frame)),
    }
}

async fn read_requests(
    front: &Rc<Front>,
    mut reader: ReadHalf<Stream>,
    outgoing: flume::Sender<Outgoing>,
    peer: Option<std::net::SocketAddr>,
    session: &mut Session,
    login_by: Instant,
) -> Result<(), CloseReason> {
    let shard = &front.shard;
    let limits = FrameLimits {
        max_frame_bytes: shard.config.max_frame_bytes,
    };
    let permits = Arc::new(async_lock::Semaphore::new(
        shard.config.max_in_flight_per_connection as usize,
    ));
    let mut deadlines = Deadlines {
        idle: (shard.config.connection_idle_timeout_ms > 0)
            .then(|| Duration::from_millis(shard.config.connection_idle_timeout_ms)),
        frame: Duration::from_millis(shard.config.frame_read_timeout_ms),
        login: Some(login_by),
    };
    // Requests being handled: a connection waiting on them is not idle.
    let in_flight = Rc::new(Cell::new(0u32));
    // This connection's place in its principal's connection count.
    let mut counted_as = count_principal(front, session).map_err(|entity| {
        shard.metrics.connection_closed("connection_quota");
        CloseReason::ConnectionQuota(entity)
    })?;
    let mut handshake_done = false;
    loop {
        // Backpressure: no next frame until a request slot is free; a slot
        // is freed when its response has been written.
        let permit = permits.acquire_arc().await;
        // Quotas: nothing more is read while the connection's principal
        // owes, whichever of its connections ran the debt up.
        metering(front, session).hold().await;
        if !needs_login(shard, session, handshake_done) {
            deadlines.login = None;
        } else if deadlines.login.is_some_and(|by| Instant::now() >= by) {
            return Err(CloseReason::LoginTimeout);
        }
        let mut header_bytes = [0u8; REQUEST_HEADER_BYTES];
        let user = match session.principal() {
            Some(Principal::User { name, changed_at }) => Some((name.clone(), *changed_at)),
            _ => None,
        };
        let frame_deadline = read_header(
            shard,
            &mut reader,
            &mut header_bytes,
            deadlines,
            &in_flight,
            user.as_ref(),
        )
        .await?;
        let received = Instant::now();
        let head = match decode_request_header(&header_bytes, &limits) {
            Ok(head) => head,
            Err(FrameError::UnknownApiKey {
                correlation_id,
                body_len,
                ..
            }) => {
                // The length was acceptable: skip the body and refuse the request.
                discard(
                    &mut reader,
                    body_len as usize,
                    frame_deadline,
                    deadlines.frame,
                )
                .await?;
                shard.metrics.error(ErrorCode::InvalidRequest);
                send(
                    &outgoing,
                    permit,
                    correlation_id,
                    Reply::error(ErrorCode::InvalidRequest),
                    false,
                );
                continue;
            }
            Err(error) => {
                let correlation_id = u32::from_be_bytes([
                    header_bytes[8],
                    header_bytes[9],
                    header_bytes[10],
                    header_bytes[11],
                ]);
                let code = match error {
                    FrameError::TooLarge { .. } => ErrorCode::FrameTooLarge,
                    _ => ErrorCode::InvalidRequest,
                };
                shard.metrics.error(code);
                send(&outgoing, permit, correlation_id, Reply::error(code), true);
                return Err(CloseReason::Frame(error));
            }
        };
        let mut body = RequestBody::zeroed(head.body_len);
        read_exact_by(&mut reader, &mut body, frame_deadline, deadlines.frame).await?;
        let header = head.header;
        if !header.api_key.supports(header.api_version) {
            shard.metrics.error(ErrorCode::UnsupportedVersion);
            send(
                &outgoing,
                permit,
                header.correlation_id,
                Reply::error(ErrorCode::UnsupportedVersion),
                false,
            );
            continue;
        }
        if !handshake_done && header.api_key != ApiKey::ApiVersions {
            shard.metrics.error(ErrorCode::InvalidRequest);
            send(
                &outgoing,
                permit,
                header.correlation_id,
                Reply::error(ErrorCode::InvalidRequest),
                false,
            );
            continue;
        }
        handshake_done = true;
        if header.api_key == ApiKey::Authenticate {
            let step = authenticate(front, session, &body, peer).await;
            shard.metrics.request(header.api_key.name());
            let step = step.map(|step| match count_principal(front, session) {
                Ok(slot) if step.response.complete => {
                    counted_as = slot;
                    step
                }
                Ok(_) => step,
                Err(entity) => {
                    shard.metrics.connection_closed("connection_quota");
                    Step::refused(
                        ErrorCode::TooManyConnectionsForPrincipal,
                        format!("{entity} has as many connections open as its quota allows"),
                    )
                }
            });
            match step {
                Ok(step) => {
                    let close = step.close;
                    let reply =
                        Reply::encode(&step.response, Vec::new()).unwrap_or_else(Reply::error);
                    send(&outgoing, permit, header.correlation_id, reply, close);
                    if close {
                        return Err(CloseReason::AuthenticationFailed);
                    }
                }
                Err(code) => {
                    shard.metrics.error(code);
                    send(
                        &outgoing,
                        permit,
                        header.correlation_id,
                        Reply::error(code),
                        false,
                    );
                }
            }
            continue;
        }
        if shard.config.authentication == Authentication::Required
            && session.principal().is_none()
            && header.api_key != ApiKey::ApiVersions
        {
            // Nothing but the handshake and the exchange before a login.
            shard.metrics.error(ErrorCode::AuthenticationRequired);
            send(
                &outgoing,
                permit,
                header.correlation_id,
                Reply::error(ErrorCode::AuthenticationRequired),
                true,
            );
            return Err(CloseReason::AuthenticationRequired);
        }
        if header.api_key.is_inter_broker() && !session.may_speak_inter_broker() {
            // Only brokers of this cluster speak Raft and replication.
            if session.note_refusal() && REFUSAL_WARNINGS.with(admit_line) {
                tracing::warn!(
                    api = header.api_key.name(),
                    peer = ?peer,
                    "refused an inter-broker request from a connection that has not proved the cluster secret (logged once per connection, at most every 10 s)"
                );
            }
            shard.metrics.inter_broker_refused(header.api_key.name());
            shard.metrics.error(ErrorCode::ClusterAuthorizationFailed);
            send(
                &outgoing,
                permit,
                header.correlation_id,
                Reply::error(ErrorCode::ClusterAuthorizationFailed),
                false,
            );
            continue;
        }
        // Decided by the ACLs and quotas as of now: a change applies from
        // the next request of every open connection.
        let caller = caller(front, session, peer);
        if header.api_key == ApiKey::Produce {
            // Taken as the frame is read, so that the next frame of the
            // principal, pipelined here or on another connection, is held
            // if this one ran it into debt.
            caller
                .throttle
                .take(&shard.metrics, Kind::Produce, body.len() as f64);
        }
        let admitted = if header.api_key == ApiKey::Produce {
            Some(admit_produce(front, body.len()).await?)
        } else {
            None
        };
        let request = shard.begin_request();
        let front = front.clone();
        let outgoing = outgoing.clone();
        let in_flight = in_flight.clone();
        in_flight.set(in_flight.get() + 1);
        glommio::spawn_local(async move {
            let reply = handle(&front, header, body, received, &caller).await;
            drop(admitted);
            send(&outgoing, permit, header.correlation_id, reply, false);
            in_flight.set(in_flight.get() - 1);
            drop(request);
        })
        .detach();
    }
}

/// Waits until the shard admits a produce of `bytes`
/// ([`super::admission`]); the connection reads nothing meanwhile.
async fn admit_produce(front: &Front, bytes: usize) -> Result<Admitted, CloseReason> {
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    let shard = &front.shard;
    let admitted = match front.admission.try_admit(bytes) {
        Some(admitted) => admitted,
        None => {
            shard.metrics.produce_admission_waits.inc();
            let started = Instant::now();
            let stopping = shard.stopping.listen();
            if shard.is_stopping() {
                return Err(CloseReason::Stopping);
            }
            let admitted = futures::select_biased! {
                admitted = front.admission.admit(bytes).fuse() => admitted,
                () = stopping.fuse() => return Err(CloseReason::Stopping),
            };
            shard
                .metrics
                .produce_admission_wait_seconds
                .inc_by(started.elapsed().as_secs_f64());
            admitted
        }
    };
    Ok(admitted)
}

/// One `Authenticate` step on this connection, checked against the
/// broker's failed-login ledger ([`super::login_ledger`]): a user name
/// locked out is refused at its first step; a proof waits for its turn
/// (no earlier failure of its user name or address still being waited
/// out), and a wrong one is answered after the delay it earned.
async fn authenticate(
    front: &Front,
    session: &mut Session,
    body: &[u8],
    peer: Option<std::net::SocketAddr>,
) -> Result<Step, ErrorCode> {
    let (request, _) = decode_request::<AuthenticateRequest>(body).map_err(refused)?;
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce).map_err(|error| {
        tracing::error!(%error, "no randomness for an authentication nonce");
        ErrorCode::UnknownServerError
    })?;
    let shard = &front.shard;
    let snapshot = shard.snapshot();
    let users = snapshot.cluster.state.users();
    let lookup = |name: &str| users.get(name).cloned();
    let mechanism = ScramMechanism::from_name(request.mechanism.as_str());
    let credentials = Credentials {
        cluster_secret: shard.config.cluster_secret.as_ref(),
        user: &lookup,
        users_loaded: snapshot.is_loaded(),
        decoy_key: front.edge.decoy_key(),
        decoy_iterations: mechanism.map_or(ITERATIONS_DEFAULT, |mechanism| {
            usual_iterations(users.values(), mechanism)
        }),
    };
    let address = peer.map(|peer| peer.ip());
    let (step, delay) = match (session.pending_user().map(str::to_owned), address) {
        (Some(user), Some(address)) => loop {
            let now = Instant::now();
            // Checked under the ledger's lock: a proof from another shard
            // cannot slip in between this check and its record.
            let checked = {
                let mut ledger = front.edge.logins();
                match ledger.turn(&user, address, now) {
                    Turn::Now => {
                        let step = session.authenticate(&credentials, request, nonce);
                        let mut delay = Duration::ZERO;
                        if step.is_failed_proof() {
                            delay = ledger.failed(&user, address, now);
                        } else if step.response.complete {
                            ledger.succeeded(&user, address, now);
                        }
                        Ok((step, delay))
                    }
                    Turn::After(until) => Err(until),
                }
            };
            match checked {
                Ok(done) => break done,
                Err(until) => glommio::timer::sleep(until.saturating_duration_since(now)).await,
            }
        },
        _ => {
            let step = session.authenticate(&credentials, request, nonce);
            let delay = match address {
                // A wrong cluster secret: the address's delay still holds.
                Some(address) if step.is_failed_proof() => {
                    front.edge.logins().failed_from(address, Instant::now())
                }
                _ => Duration::ZERO,
            };
            (locked_out(front, session, address).unwrap_or(step), delay)
        }
    };
    if let Some(outcome) = step.outcome {
        shard.metrics.authentication(outcome);
        log_outcome(session, &step, outcome, peer);
    }
    if !delay.is_zero() {
        glommio::timer::sleep(delay).await;
    }
    Ok(step)
}

/// The refusal of an exchange just started for a user name that is locked
/// out for logins from `address`; the exchange is dropped (it is not a
/// failure: nothing was guessed).
fn locked_out(front: &Front, session: &mut Session, address: Option<IpAddr>) -> Option<Step> {
    let user = session.pending_user()?;
    let until = front
        .edge
        .logins()
        .locked_out(user, address?, Instant::now())?;
    let seconds = until.saturating_duration_since(Instant::now()).as_secs() + 1;
    session.drop_exchange();
    Some(Step::locked_out(seconds))
}

fn log_outcome(session: &Session, step: &Step, outcome: &str, peer: Option<SocketAddr>) {
    match session.principal() {
        Some(Principal::Broker(node)) => {
            tracing::debug!(node, peer = ?peer, "a broker proved the cluster secret");
        }
        Some(Principal::User { name, .. }) if step.response.complete => {
            tracing::debug!(user = name, peer = ?peer, "a user authenticated");
        }
        _ => {
            // A guesser makes one of these per guess: rate-limited.
            if let Some(held_back) =
                AUTHENTICATION_WARNINGS.with(|limit| limit.borrow_mut().admit(Instant::now()))
            {
                tracing::warn!(
                    peer = ?peer,
                    outcome,
                    held_back,
                    reason = step.response.error_message.as_deref().unwrap_or(""),
                    "authentication failed; closing the connection (logged at most every 10 s)"
                );
            }
        }
    }
}

/// Counts an exchange that a closing connection left without its proof as
/// a failed login of its user name from its address: it learnt the salt
/// and iterations, and would otherwise be a free probe.
fn abandoned(front: &Front, session: &Session, peer: Option<SocketAddr>) {
    let (Some(user), Some(peer)) = (session.pending_user(), peer) else {
        return;
    };
    front
        .edge
        .logins()
        .abandoned(user, peer.ip(), Instant::now());
    front.shard.metrics.authentication("abandoned");
}

/// The iteration count most of the users' credentials of `mechanism`
/// have (the smallest of equals), else [`ITERATIONS_DEFAULT`] (what the CLI
/// gives a new user): an unknown user's decoy must not stand out by its
/// count.
fn usual_iterations<'a>(
    users: impl Iterator<Item = &'a corelog_controller::users::UserRecord>,
    mechanism: ScramMechanism,
) -> u32 {
    let mut counts: std::collections::BTreeMap<u32, usize> = std::collections::BTreeMap::new();
    for credential in users.filter_map(|user| user.credential(mechanism)) {
        *counts.entry(credential.iterations).or_insert(0) += 1;
    }
    counts
        .iter()
        .max_by_key(|(iterations, count)| (**count, std::cmp::Reverse(**iterations)))
        .map_or(ITERATIONS_DEFAULT, |(iterations, _)| *iterations)
}

thread_local! {
    /// Lines about failed logins this shard may write (rate-limited).
    static AUTHENTICATION_WARNINGS: std::cell::RefCell<LogLimit> =
        std::cell::RefCell::new(LogLimit::default());
    /// Lines about refused inter-broker requests this shard may write.
    static REFUSAL_WARNINGS: std::cell::RefCell<LogLimit> =
        std::cell::RefCell::new(LogLimit::default());
}

/// Whether `limit` lets a line through now.
fn admit_line(limit: &std::cell::RefCell<LogLimit>) -> bool {
    limit.borrow_mut().admit(Instant::now()).is_some()
}

/// Whether the connection still has to log in: with authentication
/// required, until it has a principal; otherwise, until its handshake.
fn needs_login(shard: &Shard, session: &Session, handshake_done: bool) -> bool {
    match shard.config.authentication {
        Authentication::Required => session.principal().is_none(),
        Authentication::None => !handshake_done,
    }
}

async fn handle(
    front: &Front,
    header: RequestHeader,
    body: RequestBody,
    received: Instant,
    caller: &Caller,
) -> Reply {
    let shard = &front.shard;
    shard.metrics.request(header.api_key.name());
    let dispatched = handlers::dispatch(
        shard,
        header.api_key,
        header.api_version,
        body,
        received,
        caller,
        &front.shard_ports,
    );
    // The request-time quota meters the time this shard spent running the
    // handler, not the time it waited (for a disk, a quorum, a long poll).
    let (result, busy) = BusyTime::new(dispatched).await;
    if caller.throttle.is_metered() {
        caller
            .throttle
            .take(&shard.metrics, Kind::RequestTime, busy.as_nanos() as f64);
    }
    result.unwrap_or_else(|code| {
        shard.metrics.error(code);
        Reply::error(code)
    })
}

fn send(
    outgoing: &flume::Sender<Outgoing>,
    slot: RequestSlot,
    correlation_id: u32,
    reply: Reply,
    then_close: bool,
) {
    let sent = outgoing.send(Outgoing {
        correlation_id,
        reply,
        then_close,
        _slot: slot,
    });
    if sent.is_err() {
        tracing::debug!(
            correlation_id,
            "connection closed before its response was written"
        );
    }
}

/// Reads and drops `len` bytes by `deadline`, in small pieces (no
/// allocation of `len`).
async fn discard(
    reader: &mut ReadHalf<Stream>,
    len: usize,
    deadline: Instant,
    frame: Duration,
) -> Result<(), CloseReason> {
    let mut scratch = [0u8; 4096];
    let mut left = len;
    while left > 0 {
        let take = left.min(scratch.len());
        read_exact_by(reader, &mut scratch[..take], deadline, frame).await?;
        left -= take;
    }
    Ok(())
}

/// What the request may do and how it is metered, by the connection's
/// principal and the metadata as of now.
fn caller(front: &Front, session: &Session, peer: Option<SocketAddr>) -> Caller {
    let shard = &front.shard;
    Caller {
        origin: Origin::Network(peer),
        throttle: metering(front, session),
        access: Access::of(&shard.config, session.principal(), shard.snapshot()),
    }
}

/// How the connection's requests are metered, by the quotas as of now.
fn metering(front: &Front, session: &Session) -> Throttle {
    match session.principal() {
        Some(Principal::Broker(_)) => Throttle::none(),
        principal => Throttle::of(
            &front.shard.snapshot(),
            principal.and_then(Principal::name),
            &front.edge,
        ),
    }
}

/// Counts the session's principal (a user or certificate name) in the
/// broker's connection counts; `Ok(None)` for one that did not log in, or
/// a broker.
///
/// # Errors
/// The quota entity at its connection limit.
fn count_principal(front: &Front, session: &Session) -> Result<Option<PrincipalSlot>, String> {
    let Some(name) = session.principal().and_then(Principal::name) else {
        return Ok(None);
    };
    let snapshot = front.shard.snapshot();
    front
        .edge
        .admit_principal(name, snapshot.cluster.state.quotas())
        .map(Some)
        .map_err(|refusal| match refusal {
            Refusal::Entity(entity) => entity,
            Refusal::Broker => "the broker".to_owned(),
        })
}

/// A future and the time spent polling it: what it cost this shard.
struct BusyTime<F> {
    inner: std::pin::Pin<Box<F>>,
    busy: Duration,
}

impl<F: std::future::Future> BusyTime<F> {
    fn new(inner: F) -> BusyTime<F> {
        BusyTime {
            inner: Box::pin(inner),
            busy: Duration::ZERO,
        }
    }
}

impl<F: std::future::Future> std::future::Future for BusyTime<F> {
    type Output = (F::Output, Duration);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let started = Instant::now();
        let polled = self.inner.as_mut().poll(context);
        self.busy += started.elapsed();
        polled.map(|output| (output, self.busy))
    }
}
