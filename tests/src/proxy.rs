//! A seeded userspace fault proxy for corelog's wire protocol (issue 6).
//!
//! [`FaultProxy`] sits between a listen address and one upstream broker. It
//! opens one upstream connection per accepted connection and forwards whole
//! frames (wire/src/frame.rs) in both directions, injecting faults chosen by
//! a seeded generator with the probabilities in [`Faults`]:
//!
//! - **delay**: a frame waits a random time in the delay range before it is
//!   written; frames behind it wait too (one TCP stream, head of line).
//! - **reorder**: a *response* is held back and written after the next
//!   response on the same connection (or after a short hold, when no next
//!   one comes). Only responses: the broker writes them as they complete
//!   and both the client library (client/src/connection.rs) and the peer
//!   connection (broker/src/peer/connection.rs) match them by correlation
//!   id, so any order is legal. Requests are never reordered: the broker
//!   appends pipelined produces in arrival order and the idempotent producer
//!   relies on it, and TCP never reorders a stream.
//! - **duplicate**: a *request* is written twice, so the broker acts twice
//!   and answers twice with the same correlation id. The peer connection
//!   ignores the extra answer; the client library treats a response for an
//!   unknown correlation id as a protocol violation and closes the
//!   connection, failing its requests in flight as `ConnectionLost` (which
//!   producers retry).
//! - **drop**: a frame (either direction) is discarded and both sides of the
//!   connection are reset. A lost TCP segment stalls the stream until the
//!   connection dies; a reset is what the endpoints can observe.
//! - **corrupt**: one bit is flipped inside the CRC32C-covered bytes of the
//!   first record batch of a raw section: Produce and ReplicaPush requests,
//!   Fetch responses. Frame headers and message bodies carry no checksum of
//!   their own on the wire (TCP's covers them), so flipping bits there would
//!   test nothing the protocol claims to detect; the proxy never does.
//! - **lost reply**: a request is forwarded and the broker acts on it, then
//!   its response is swallowed and both sides of the connection are reset,
//!   so the sender must retry with the same identity.
//!
//! A frame that does not parse (bad length, unknown api key, over
//! [`REQUEST_FRAME_BYTES_MAX`] / [`RESPONSE_FRAME_BYTES_MAX`]) is
//! forwarded as it is, and that direction switches to a plain byte copy
//! without faults: the receiver must see bad input too.
//!
//! # Determinism
//!
//! Every random choice comes from splitmix64 generators seeded from the
//! proxy's seed, the connection's index (in accept order) and the direction.
//! A replay with the same seed makes the same choices for the same frame
//! sequence; the frame sequence itself depends on real timing.
//!
//! # Runtime
//!
//! Each proxy runs on its own one-thread tokio runtime, so a synchronous
//! caller (a test, the nemesis runner) needs no runtime context, and the
//! proxy keeps forwarding while the caller's runtime is busy or blocked.
//! Dropping the proxy stops the runtime: listener and connections close.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corelog_wire::batch::{HEADER_BYTES, LOG_OVERHEAD_BYTES};
use corelog_wire::frame::{
    ApiKey, FrameLimits, LENGTH_FIELD_BYTES, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES,
    decode_request_header, decode_response_header,
};
use corelog_wire::message::BODY_PREFIX_BYTES;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use corelog_wire::rng::SplitMix64;

/// Largest request frame the proxy parses (the `length` field): the
/// broker's default limit, so that an oversized request reaches the broker
/// from its header alone, as it would without the proxy, and is refused
/// there. Larger ones are passed through unparsed.
pub const REQUEST_FRAME_BYTES_MAX: u32 = FrameLimits::DEFAULT_MAX_FRAME_BYTES;

/// Largest response frame the proxy parses: the client library's default
/// response limit.
pub const RESPONSE_FRAME_BYTES_MAX: u32 = 64 << 20;

/// Longest time a response held back for reordering waits for the next
/// one: a request/response exchange with nothing else in flight must not
/// stall for good.
const REORDER_HOLD_MAX: Duration = Duration::from_millis(50);

/// Correlation ids remembered per connection (requests whose response has
/// not come back). A broker answers everything or closes, so this bound is
/// only reached by a peer that never reads; then the oldest knowledge is
/// forgotten, and a forgotten response is just forwarded without faults
/// that need its request (corrupt, lost reply).
const PENDING_MAX: usize = 4096;

/// Where in the batch header `batch_length` starts (wire/src/batch/header.rs).
const BATCH_LENGTH_AT: usize = 8;

/// First CRC-covered byte of a batch: `attributes`, after the CRC itself.
const CRC_COVERED_FROM: usize = 21;

/// Fault probabilities, each per frame (0.0 = off), and the delay range.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Faults {
    /// Delay a frame (either direction) by a time in `delay_min..=delay_max`.
    pub delay: f64,
    /// Shortest injected delay.
    pub delay_min: Duration,
    /// Longest injected delay.
    pub delay_max: Duration,
    /// Hold a response back and send it after the next one.
    pub reorder: f64,
    /// Send a request twice.
    pub duplicate: f64,
    /// Discard a frame (either direction) and reset the connection.
    pub drop: f64,
    /// Flip a bit in the first record batch of a Produce or ReplicaPush
    /// request or a Fetch response.
    pub corrupt: f64,
    /// Forward a request, swallow its response and reset the connection.
    pub lost_reply: f64,
}

impl Faults {
    /// No faults: the proxy forwards every frame at once, unchanged.
    #[must_use]
    pub const fn none() -> Faults {
        Faults {
            delay: 0.0,
            delay_min: Duration::ZERO,
            delay_max: Duration::ZERO,
            reorder: 0.0,
            duplicate: 0.0,
            drop: 0.0,
            corrupt: 0.0,
            lost_reply: 0.0,
        }
    }

    /// A mix of every fault, rare enough that a cluster keeps making
    /// progress (heartbeats and Raft messages are frames too, so a frame
    /// drop rate of 0.5 % already resets a busy connection every few
    /// seconds) and common enough that a 15 s run sees each many times.
    #[must_use]
    pub const fn mixed() -> Faults {
        Faults {
            delay: 0.05,
            delay_min: Duration::from_millis(1),
            delay_max: Duration::from_millis(30),
            reorder: 0.05,
            duplicate: 0.01,
            drop: 0.005,
            corrupt: 0.005,
            lost_reply: 0.005,
        }
    }
}

impl Default for Faults {
    fn default() -> Faults {
        Faults::none()
    }
}

/// What a proxy did, counted since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Accepted connections whose upstream connection could not be opened.
    pub upstream_failures: u64,
    /// Frames written to the other side (a duplicate counts twice).
    pub frames_forwarded: u64,
    /// Frames delayed.
    pub delayed: u64,
    /// Responses held back and sent after a later one.
    pub reordered: u64,
    /// Requests sent twice.
    pub duplicated: u64,
    /// Frames discarded (each followed by a reset).
    pub dropped: u64,
    /// Record batches with a flipped bit.
    pub corrupted: u64,
    /// Responses swallowed after the broker acted (each followed by a reset).
    pub lost_replies: u64,
    /// Directions that stopped parsing at a bad frame and copied bytes.
    pub passthrough: u64,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    upstream_failures: AtomicU64,
    frames_forwarded: AtomicU64,
    delayed: AtomicU64,
    reordered: AtomicU64,
    duplicated: AtomicU64,
    dropped: AtomicU64,
    corrupted: AtomicU64,
    lost_replies: AtomicU64,
    passthrough: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ProxyStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProxyStats {
            connections: read(&self.connections),
            upstream_failures: read(&self.upstream_failures),
            frames_forwarded: read(&self.frames_forwarded),
            delayed: read(&self.delayed),
            reordered: read(&self.reordered),
            duplicated: read(&self.duplicated),
            dropped: read(&self.dropped),
            corrupted: read(&self.corrupted),
            lost_replies: read(&self.lost_replies),
            passthrough: read(&self.passthrough),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// State shared by the proxy handle and its tasks.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    seed: u64,
    faults: Mutex<Faults>,
    counters: Counters,
}

impl Shared {
    fn faults(&self) -> Faults {
        *self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running proxy: accepts on `listen`, forwards to `upstream`. Stops
/// (listener and every connection closed) when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    listen: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FaultProxy {
    /// Binds `listen` and starts forwarding to `upstream` with no faults;
    /// see [`FaultProxy::set_faults`]. The upstream need not be up yet: a
    /// connection accepted while it is down is closed.
    ///
    /// # Errors
    /// The bind error, or the error of building the proxy's runtime.
    pub fn start(listen: SocketAddr, upstream: SocketAddr, seed: u64) -> io::Result<FaultProxy> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let listen = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("fault-proxy-{listen}"))
            .enable_all()
            .build()?;
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let shared = Arc::new(Shared {
            upstream,
            seed,
            faults: Mutex::new(Faults::none()),
            counters: Counters::default(),
        });
        runtime.spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(FaultProxy {
            listen,
            shared,
            runtime: Some(runtime),
        })
    }

    /// Where the proxy listens.
    #[must_use]
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Where the proxy forwards to.
    #[must_use]
    pub fn upstream_addr(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Replaces the fault probabilities; frames read from now on use them.
    pub fn set_faults(&self, faults: Faults) {
        *self
            .shared
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = faults;
    }

    /// The current fault probabilities.
    #[must_use]
    pub fn faults(&self) -> Faults {
        self.shared.faults()
    }

    /// Counts of frames forwarded and faults injected so far.
    #[must_use]
    pub fn stats(&self) -> ProxyStats {
        self.shared.counters.snapshot()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Drops every task, and with them the listener and all sockets.
        // `shutdown_background` does not block, so a proxy may be dropped
        // inside another runtime's task.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl ProxyStats {
    /// Applies `op` to each count of `self` and `other`.
    fn zip_with(self, other: ProxyStats, op: impl Fn(u64, u64) -> u64) -> ProxyStats {
        ProxyStats {
            connections: op(self.connections, other.connections),
            upstream_failures: op(self.upstream_failures, other.upstream_failures),
            frames_forwarded: op(self.frames_forwarded, other.frames_forwarded),
            delayed: op(self.delayed, other.delayed),
            reordered: op(self.reordered, other.reordered),
            duplicated: op(self.duplicated, other.duplicated),
            dropped: op(self.dropped, other.dropped),
            corrupted: op(self.corrupted, other.corrupted),
            lost_replies: op(self.lost_replies, other.lost_replies),
            passthrough: op(self.passthrough, other.passthrough),
        }
    }
}

impl std::ops::Add for ProxyStats {
    type Output = ProxyStats;

    fn add(self, other: ProxyStats) -> ProxyStats {
        self.zip_with(other, u64::saturating_add)
    }
}

/// What happened between two readings of the counts.
impl std::ops::Sub for ProxyStats {
    type Output = ProxyStats;

    fn sub(self, other: ProxyStats) -> ProxyStats {
        self.zip_with(other, u64::saturating_sub)
    }
}

/// The proxy's generator: [`SplitMix64`], one draw in, so that
/// neighbouring seeds (connection indexes) start far apart.
fn rng(seed: u64) -> SplitMix64 {
    let mut rng = SplitMix64::new(seed);
    rng.next_u64();
    rng
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut index: u64 = 0;
    loop {
        let (client, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors and the like: wait instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        bump(&shared.counters.connections);
        tokio::spawn(serve(client, Arc::clone(&shared), index));
        index += 1;
    }
}

/// What the request direction tells the response direction about one
/// correlation id.
#[derive(Clone, Copy, Debug)]
struct Sent {
    api_key: ApiKey,
    lose_reply: bool,
}

type PendingMap = Arc<Mutex<HashMap<u32, Sent>>>;

/// How one direction ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The sender closed its side; the other direction may go on.
    Eof,
    /// A fault or an error: reset the whole connection.
    Reset,
}

async fn serve(client: TcpStream, shared: Arc<Shared>, index: u64) {
    let upstream = match TcpStream::connect(shared.upstream).await {
        Ok(upstream) => upstream,
        Err(_) => {
            // Dropping the accepted socket closes it: to the connecting
            // side, the broker is down.
            bump(&shared.counters.upstream_failures);
            return;
        }
    };
    for stream in [&client, &upstream] {
        // Only latency is at stake: both ends set it themselves.
        let _latency = stream.set_nodelay(true);
    }
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let pending: PendingMap = Arc::new(Mutex::new(HashMap::new()));
    // Distinct streams per connection and direction, all from the seed.
    let base = shared.seed ^ index.wrapping_mul(0xA24B_AED4_963E_E407);
    let requests = Direction {
        shared: Arc::clone(&shared),
        rng: rng(base),
        pending: Arc::clone(&pending),
        kind: Kind::Requests,
    };
    let responses = Direction {
        shared,
        rng: rng(base ^ 0x5555_5555_5555_5555),
        pending,
        kind: Kind::Responses,
    };
    let mut forward = tokio::spawn(requests.run(client_read, upstream_write));
    let mut backward = tokio::spawn(responses.run(upstream_read, client_write));
    // A reset in either direction ends both; an end of stream in one lets
    // the other finish (a half-closed TCP connection).
    let first = tokio::select! {
        ended = &mut forward => (ended, &mut backward),
        ended = &mut backward => (ended, &mut forward),
    };
    let (ended, other) = first;
    match ended {
        Ok(End::Eof) => {
            let _finished = other.await;
        }
        Ok(End::Reset) | Err(_) => other.abort(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Client (or peer broker) to broker.
    Requests,
    /// Broker to client.
    Responses,
}

impl Kind {
    fn header_bytes(self) -> usize {
        match self {
            Kind::Requests => REQUEST_HEADER_BYTES,
            Kind::Responses => RESPONSE_HEADER_BYTES,
        }
    }
}

/// One frame read whole, header included.
#[derive(Debug)]
struct Frame {
    bytes: Vec<u8>,
    correlation_id: u32,
    /// The request's api key (for a response, the key of its request, if
    /// known).
    api_key: Option<ApiKey>,
}

/// What reading the next frame gave.
#[derive(Debug)]
enum Read {
    Frame(Frame),
    /// End of stream after `partial` bytes of an unfinished frame.
    Eof {
        partial: Vec<u8>,
    },
    /// Bytes that do not start a frame this proxy accepts: forward them and
    /// copy the rest of the stream.
    Bad {
        prefix: Vec<u8>,
    },
}

/// One direction of one connection.
struct Direction {
    shared: Arc<Shared>,
    rng: SplitMix64,
    pending: PendingMap,
    kind: Kind,
}

impl Direction {
    async fn run(mut self, mut from: OwnedReadHalf, mut to: OwnedWriteHalf) -> End {
        match self.forward_frames(&mut from, &mut to).await {
            Ok(End::Eof) => {
                // Pass the half-close on, as TCP would.
                let _closed = to.shutdown().await;
                End::Eof
            }
            Ok(End::Reset) => {
                // A reset rather than an orderly close: discard unsent
                // bytes and send RST on both sockets.
                // Without it the close is an orderly FIN: still a closed
                // connection to both ends, so a failure here changes little.
                let _linger = from.as_ref().set_zero_linger();
                let _linger = to.as_ref().set_zero_linger();
                End::Reset
            }
            // A read or write failed: one side is gone, so is the pair.
            Err(_) => End::Reset,
        }
    }

    async fn forward_frames(
        &mut self,
        from: &mut OwnedReadHalf,
        to: &mut OwnedWriteHalf,
    ) -> io::Result<End> {
        let mut held: Option<Frame> = None;
        loop {
            let read = match held {
                // A held response goes out after the next one, or alone
                // when none comes soon.
                Some(_) => match tokio::time::timeout(REORDER_HOLD_MAX, self.read(from)).await {
                    Ok(read) => Some(read?),
                    Err(_) => None,
                },
                None => Some(self.read(from).await?),
            };
            let frame = match read {
                None => {
                    if let Some(frame) = held.take() {
                        self.write(to, &frame.bytes).await?;
                    }
                    continue;
                }
                Some(Read::Frame(frame)) => frame,
                Some(Read::Eof { partial }) => {
                    if let Some(frame) = held.take() {
                        self.write(to, &frame.bytes).await?;
                    }
                    to.write_all(&partial).await?;
                    return Ok(End::Eof);
                }
                Some(Read::Bad { prefix }) => {
                    if let Some(frame) = held.take() {
                        self.write(to, &frame.bytes).await?;
                    }
                    bump(&self.shared.counters.passthrough);
                    to.write_all(&prefix).await?;
                    tokio::io::copy(from, to).await?;
                    return Ok(End::Eof);
                }
            };
            match self.apply_faults(frame).await {
                Action::Reset => return Ok(End::Reset),
                Action::Send { frame, copies } => {
                    for _ in 0..copies {
                        self.write(to, &frame.bytes).await?;
                    }
                    if let Some(earlier) = held.take() {
                        self.write(to, &earlier.bytes).await?;
                    }
                }
                Action::Hold(frame) => {
                    bump(&self.shared.counters.reordered);
                    if let Some(earlier) = held.replace(frame) {
                        // Two in a row: the earlier one goes now, behind
                        // nothing; the new one waits.
                        self.write(to, &earlier.bytes).await?;
                    }
                }
            }
        }
    }

    async fn write(&self, to: &mut OwnedWriteHalf, bytes: &[u8]) -> io::Result<()> {
        to.write_all(bytes).await?;
        bump(&self.shared.counters.frames_forwarded);
        Ok(())
    }

    /// Decides this frame's faults. Delays happen here, before the frame
    /// is written.
    async fn apply_faults(&mut self, mut frame: Frame) -> Action {
        let faults = self.shared.faults();
        let shared = Arc::clone(&self.shared);
        let counters = &shared.counters;
        if self.rng.chance(faults.drop) {
            bump(&counters.dropped);
            return Action::Reset;
        }
        match self.kind {
            Kind::Requests => {
                if let Some(api_key) = frame.api_key {
                    let lose_reply = self.rng.chance(faults.lost_reply);
                    self.remember(
                        frame.correlation_id,
                        Sent {
                            api_key,
                            lose_reply,
                        },
                    );
                }
            }
            Kind::Responses => {
                let sent = self.forget(frame.correlation_id);
                frame.api_key = sent.map(|sent| sent.api_key);
                if sent.is_some_and(|sent| sent.lose_reply) {
                    bump(&counters.lost_replies);
                    return Action::Reset;
                }
            }
        }
        if self.rng.chance(faults.corrupt) && self.corrupt(&mut frame) {
            bump(&counters.corrupted);
        }
        let mut copies = 1;
        if self.kind == Kind::Requests && self.rng.chance(faults.duplicate) {
            bump(&counters.duplicated);
            copies = 2;
        }
        if self.rng.chance(faults.delay) {
            bump(&counters.delayed);
            let pause = self.rng.duration(faults.delay_min, faults.delay_max);
            tokio::time::sleep(pause).await;
        }
        if self.kind == Kind::Responses && self.rng.chance(faults.reorder) {
            return Action::Hold(frame);
        }
        Action::Send { frame, copies }
    }

    fn remember(&self, correlation_id: u32, sent: Sent) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.len() >= PENDING_MAX {
            pending.clear();
        }
        pending.insert(correlation_id, sent);
    }

    fn forget(&self, correlation_id: u32) -> Option<Sent> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&correlation_id)
    }

    /// Flips one bit in the CRC-covered bytes of the first record batch of
    /// the frame's raw section, if the frame carries record batches.
    /// Returns whether it did.
    fn corrupt(&mut self, frame: &mut Frame) -> bool {
        let carries_batches = matches!(
            (self.kind, frame.api_key),
            (Kind::Requests, Some(ApiKey::Produce | ApiKey::ReplicaPush))
                | (Kind::Responses, Some(ApiKey::Fetch))
        );
        if !carries_batches {
            return false;
        }
        let Some(covered) = first_batch_crc_range(&frame.bytes, self.kind) else {
            return false;
        };
        let byte = covered.start + self.rng.below((covered.end - covered.start) as u64) as usize;
        let bit = self.rng.below(8) as u8;
        frame.bytes[byte] ^= 1 << bit;
        true
    }

    /// Reads the next whole frame.
    async fn read(&self, from: &mut OwnedReadHalf) -> io::Result<Read> {
        let header_bytes = self.kind.header_bytes();
        let mut bytes = vec![0_u8; header_bytes];
        let got = read_up_to(from, &mut bytes).await?;
        if got < header_bytes {
            bytes.truncate(got);
            return Ok(Read::Eof { partial: bytes });
        }
        let limits = FrameLimits {
            max_frame_bytes: match self.kind {
                Kind::Requests => REQUEST_FRAME_BYTES_MAX,
                Kind::Responses => RESPONSE_FRAME_BYTES_MAX,
            },
        };
        let (body_len, correlation_id, api_key) = match self.kind {
            Kind::Requests => match bytes
                .first_chunk::<REQUEST_HEADER_BYTES>()
                .map(|header| decode_request_header(header, &limits))
            {
                Some(Ok(head)) => (
                    head.body_len,
                    head.header.correlation_id,
                    Some(head.header.api_key),
                ),
                _ => return Ok(Read::Bad { prefix: bytes }),
            },
            Kind::Responses => match bytes
                .first_chunk::<RESPONSE_HEADER_BYTES>()
                .map(|header| decode_response_header(header, &limits))
            {
                Some(Ok(head)) => (head.body_len, head.header.correlation_id, None),
                _ => return Ok(Read::Bad { prefix: bytes }),
            },
        };
        bytes.resize(header_bytes + body_len, 0);
        let got = read_up_to(from, &mut bytes[header_bytes..]).await?;
        if got < body_len {
            bytes.truncate(header_bytes + got);
            return Ok(Read::Eof { partial: bytes });
        }
        Ok(Read::Frame(Frame {
            bytes,
            correlation_id,
            api_key,
        }))
    }
}

/// What to do with a frame after its faults were decided.
#[derive(Debug)]
enum Action {
    /// Write it `copies` times (then any held response).
    Send { frame: Frame, copies: usize },
    /// Hold it back until after the next frame.
    Hold(Frame),
    /// Reset the connection (drop, lost reply).
    Reset,
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
async fn read_up_to(from: &mut OwnedReadHalf, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let got = from.read(&mut buf[filled..]).await?;
        if got == 0 {
            break;
        }
        filled += got;
    }
    Ok(filled)
}

fn be_u32(bytes: &[u8], at: usize) -> Option<usize> {
    let field = bytes.get(at..at + 4)?;
    let mut word = [0_u8; 4];
    word.copy_from_slice(field);
    Some(u32::from_be_bytes(word) as usize)
}

/// The byte range, within a whole frame, that the CRC of the first record
/// batch of its raw section covers; `None` when the raw section is empty or
/// does not start with a whole batch.
///
/// Bodies (wire/src/message/mod.rs) start with a 16-byte prefix holding
/// `archive_len` and `raw_len` (at 0 and 4 in a request body, at 4 and 8 in
/// a response body); the raw section follows the archive.
fn first_batch_crc_range(frame: &[u8], kind: Kind) -> Option<std::ops::Range<usize>> {
    let (body_at, lengths_at) = match kind {
        Kind::Requests => (REQUEST_HEADER_BYTES, 0),
        Kind::Responses => (RESPONSE_HEADER_BYTES, 4),
    };
    let archive_len = be_u32(frame, body_at + lengths_at)?;
    let raw_len = be_u32(frame, body_at + lengths_at + 4)?;
    let raw_at = body_at
        .checked_add(BODY_PREFIX_BYTES)?
        .checked_add(archive_len)?;
    let raw_end = raw_at.checked_add(raw_len)?;
    if raw_end > frame.len() || raw_len < HEADER_BYTES {
        return None;
    }
    let batch_length = be_u32(frame, raw_at + BATCH_LENGTH_AT)?;
    let batch_end = raw_at
        .checked_add(LOG_OVERHEAD_BYTES)?
        .checked_add(batch_length)?;
    let covered = raw_at + CRC_COVERED_FROM..batch_end;
    (batch_end <= raw_end && covered.start < covered.end).then_some(covered)
}

const _: () = assert!(LENGTH_FIELD_BYTES == 4);
const _: () = assert!(CRC_COVERED_FROM < HEADER_BYTES);

#[cfg(test)]
mod tests {
    use super::*;
    use corelog_wire::batch::{BatchLimits, ProducerIdentity, validate};
    use corelog_wire::frame::{RequestHeader, ResponseHeader};
    use corelog_wire::message::fetch::{FetchPartitionResponse, FetchResponse, FetchTopicResponse};
    use corelog_wire::message::{encode_request, encode_response};

    use crate::wire_client::{batch, produce_request};

    fn produce_frame(records: &[u8]) -> Vec<u8> {
        let body = encode_request(&produce_request("t", 0, records.len()), records).unwrap();
        let header = RequestHeader {
            api_key: ApiKey::Produce,
            api_version: 0,
            correlation_id: 9,
            flags: 0,
        };
        let mut frame = header.encode(body.len()).unwrap().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    fn fetch_response_frame(records: &[u8]) -> Vec<u8> {
        let response = FetchResponse {
            topics: vec![FetchTopicResponse {
                name: "t".to_owned(),
                partitions: vec![FetchPartitionResponse {
                    partition: 0,
                    error_code: 0,
                    error_message: None,
                    high_watermark: 3,
                    log_start_offset: 0,
                    next_offset: 3,
                    records_len: records.len() as u32,
                    gap: None,
                }],
            }],
            throttle_ms: 0,
        };
        let body = encode_response(&response, records).unwrap();
        let header = ResponseHeader { correlation_id: 9 };
        let mut frame = header.encode(body.len()).unwrap().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    /// The range found is exactly the first batch's CRC-covered bytes:
    /// flipping any bit in it fails the batch's check, and the bytes
    /// before it (frame header, body prefix, archive, batch header up to
    /// the CRC) are never in it.
    #[test]
    fn corruption_lands_inside_the_first_batch_crc_coverage() {
        let first = batch("a", "k", 3, ProducerIdentity::NONE);
        let second = batch("b", "k", 2, ProducerIdentity::NONE);
        let records = [first.clone(), second].concat();
        let limits = BatchLimits::default();
        for (kind, frame) in [
            (Kind::Requests, produce_frame(&records)),
            (Kind::Responses, fetch_response_frame(&records)),
        ] {
            let range = first_batch_crc_range(&frame, kind).unwrap();
            let batch_at = frame.len() - records.len();
            assert_eq!(range, batch_at + CRC_COVERED_FROM..batch_at + first.len());
            for byte in [range.start, range.start + 7, range.end - 1] {
                let mut corrupted = frame.clone();
                corrupted[byte] ^= 0x10;
                let first_batch = batch_at..batch_at + first.len();
                assert!(validate(&corrupted[first_batch.clone()], &limits).is_err());
                assert!(validate(&frame[first_batch], &limits).is_ok());
            }
        }
        // No raw section, or one too short for a batch: nothing to corrupt.
        assert_eq!(
            first_batch_crc_range(&produce_frame(&[]), Kind::Requests),
            None
        );
        assert_eq!(
            first_batch_crc_range(&produce_frame(&first[..40]), Kind::Requests),
            None
        );
    }
}
