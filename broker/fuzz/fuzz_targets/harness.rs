//! The handler target's driver, kept apart from libFuzzer so that the
//! normal test suite (`broker/tests/handler_regressions.rs`) replays the
//! seeds and every input that once failed through the same checks. The
//! input format and the invariants are described in `handler.rs`.

#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use corelog_broker::config::BrokerConfig;
use corelog_broker::server::{self, RunningBroker};
use corelog_wire::batch::{HEADER_BYTES, LOG_OVERHEAD_BYTES, compute_crc};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{
    ApiKey, FrameError, FrameLimits, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES, RequestHeader,
    decode_request_header, decode_response_header,
};
use corelog_wire::message::{
    BODY_PREFIX_BYTES, MessageError, copy_aligned, decode_response, encode_request,
};

/// The broker's frame limit: small, so that the fuzzer reaches it.
const MAX_FRAME_BYTES: u32 = 1 << 20;

/// Inputs served by one broker before it is replaced by an empty one.
pub const INPUTS_PER_BROKER: u64 = 5_000;

/// Longest the broker may take to answer everything and close. Fetches
/// wait at most `fetch_max_wait_ms` (set low below); nothing else should
/// come near this.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(15);

/// Where the CRC field sits in a RecordBatch v2 header.
const CRC_AT: usize = 17;

/// Correlation id of the handshake the harness sends first.
const HANDSHAKE_CORRELATION_ID: u32 = 0x7fff_0000;

/// A standalone one-shard broker on a temporary data directory, and the
/// loopback address it serves.
pub struct Harness {
    broker: Option<RunningBroker>,
    addr: SocketAddr,
    inputs: u64,
    /// Dropped after the broker has stopped.
    _dir: tempfile::TempDir,
}

impl Harness {
    /// Starts the broker; panics if it cannot start.
    pub fn start() -> Harness {
        let dir = tempfile::Builder::new()
            .prefix("corelog-handler-fuzz")
            .tempdir()
            .expect("temporary data directory");
        let addr = free_addr();
        let config = BrokerConfig {
            listen: addr,
            metrics_listen: free_addr(),
            data_dir: dir.path().join("data"),
            shards: 1,
            pin: false,
            io_memory_bytes: 1 << 20,
            max_frame_bytes: MAX_FRAME_BYTES,
            tail_cache_bytes: 8 << 20,
            fetch_max_bytes: 1 << 20,
            fetch_max_wait_ms: 200,
            group_topic_partitions: 2,
            // A join legitimately waits up to the largest rebalance timeout
            // in its group: kept well under ANSWER_DEADLINE.
            group_timeout_max_ms: 2_000,
            disk_reserve_bytes: 256 << 20,
            ..BrokerConfig::default()
        };
        let broker = server::start(config).expect("the broker starts");
        Harness {
            broker: Some(broker),
            addr,
            inputs: 0,
            _dir: dir,
        }
    }

    /// Inputs run on this broker so far.
    pub fn inputs(&self) -> u64 {
        self.inputs
    }

    /// Runs one input (see `handler.rs`) and checks every invariant;
    /// panics with the reason when one does not hold.
    pub fn run(&mut self, data: &[u8]) {
        self.inputs += 1;
        let stream = frames(data);
        let expected = expected_answers(&stream);
        exchange(self.addr, &stream, &expected);
        still_answers(self.addr);
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(broker) = self.broker.take() {
            broker.stop();
        }
    }
}

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// Reads the input's fields; anything past the end reads as zero.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (&byte, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(byte)
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8().unwrap_or(0), self.u8().unwrap_or(0)])
    }

    fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(len.min(self.0.len()));
        self.0 = rest;
        taken
    }
}

/// The byte stream an input stands for (see the module docs).
fn frames(data: &[u8]) -> Vec<u8> {
    let mut input = Cursor(data);
    let control = input.u8().unwrap_or(0);
    let mut stream = Vec::new();
    if control & 1 == 0 {
        stream.extend(handshake(HANDSHAKE_CORRELATION_ID));
    }
    let mut correlation_id = 1;
    while let Some(kind) = input.u8() {
        if kind & 0x80 != 0 {
            let len = usize::from(input.u16());
            stream.extend_from_slice(input.bytes(len));
            continue;
        }
        let api_key = ApiKey::ALL[usize::from(kind) % ApiKey::ALL.len()];
        let options = input.u8().unwrap_or(0);
        let api_version = if options & 4 != 0 {
            input.u16()
        } else {
            api_key.supported_versions().max
        };
        let raw_len = if options & 1 != 0 { input.u16() } else { 0 };
        let len = usize::from(input.u16());
        let payload = input.bytes(len);
        let mut body = if options & 1 != 0 {
            let raw_len = usize::from(raw_len).min(payload.len());
            let archive_len = (payload.len() - raw_len) as u32;
            let mut prefix = [0_u8; BODY_PREFIX_BYTES];
            prefix[0..4].copy_from_slice(&archive_len.to_be_bytes());
            prefix[4..8].copy_from_slice(&(raw_len as u32).to_be_bytes());
            let mut body = prefix.to_vec();
            body.extend_from_slice(payload);
            body
        } else {
            payload.to_vec()
        };
        if options & 2 != 0 {
            fix_batch_crcs(&mut body);
        }
        let header = RequestHeader {
            api_key,
            api_version,
            correlation_id,
            flags: 0,
        };
        stream.extend(header.encode(body.len()).expect("a u16-sized body fits"));
        stream.extend(body);
        correlation_id += 1;
    }
    stream
}

/// Recomputes the CRC of each batch in a request body's raw section.
fn fix_batch_crcs(body: &mut [u8]) {
    if body.len() < BODY_PREFIX_BYTES {
        return;
    }
    let archive_len = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
    let mut at = BODY_PREFIX_BYTES.saturating_add(archive_len);
    while at.saturating_add(HEADER_BYTES) <= body.len() {
        let batch_length =
            u32::from_be_bytes([body[at + 8], body[at + 9], body[at + 10], body[at + 11]]) as usize;
        let end = at
            .saturating_add(LOG_OVERHEAD_BYTES)
            .saturating_add(batch_length)
            .min(body.len());
        if end < at + HEADER_BYTES {
            return;
        }
        let crc = compute_crc(&body[at..end]);
        body[at + CRC_AT..at + CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        at = end;
    }
}

/// A valid ApiVersions request frame.
fn handshake(correlation_id: u32) -> Vec<u8> {
    let request = corelog_wire::message::api_versions::ApiVersionsRequest {
        client_name: "handler-fuzz".to_owned(),
        client_version: "0".to_owned(),
    };
    request_frame(ApiKey::ApiVersions, correlation_id, &request, &[])
}

/// A request frame at the API's newest version.
fn request_frame<T: corelog_wire::message::Request>(
    api_key: ApiKey,
    correlation_id: u32,
    request: &T,
    raw: &[u8],
) -> Vec<u8> {
    let body = encode_request(request, raw).expect("request encodes");
    let header = RequestHeader {
        api_key,
        api_version: api_key.supported_versions().max,
        correlation_id,
        flags: 0,
    };
    let mut frame = header.encode(body.len()).expect("header encodes").to_vec();
    frame.extend(body);
    frame
}

/// What the broker must answer for a stream.
#[derive(Debug)]
struct Expected {
    /// Correlation id of each complete frame, in order, with its API when
    /// the header named a known one.
    answers: Vec<(u32, Option<ApiKey>)>,
    /// The broker closes after the last answer (a frame it cannot skip).
    closes: bool,
}

/// Walks the stream as the broker's reader does.
fn expected_answers(stream: &[u8]) -> Expected {
    let limits = FrameLimits {
        max_frame_bytes: MAX_FRAME_BYTES,
    };
    let mut answers = Vec::new();
    let mut at = 0;
    while let Some(header) = stream
        .get(at..at + REQUEST_HEADER_BYTES)
        .and_then(|header| <&[u8; REQUEST_HEADER_BYTES]>::try_from(header).ok())
    {
        let (correlation_id, api_key, body_len) = match decode_request_header(header, &limits) {
            Ok(head) => (
                head.header.correlation_id,
                Some(head.header.api_key),
                head.body_len,
            ),
            Err(FrameError::UnknownApiKey {
                correlation_id,
                body_len,
                ..
            }) => (correlation_id, None, body_len as usize),
            Err(_) => {
                let correlation_id =
                    u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
                answers.push((correlation_id, None));
                return Expected {
                    answers,
                    closes: true,
                };
            }
        };
        let end = at + REQUEST_HEADER_BYTES + body_len;
        if end > stream.len() {
            // The client closes mid-body: the frame is never handled.
            break;
        }
        answers.push((correlation_id, api_key));
        at = end;
    }
    Expected {
        answers,
        closes: false,
    }
}

/// Writes the stream, half-closes, and checks every answer up to the
/// broker's close.
fn exchange(addr: SocketAddr, stream: &[u8], expected: &Expected) {
    let socket = TcpStream::connect(addr).expect("connect to the broker");
    socket.set_nodelay(true).expect("nodelay");
    let mut writer = socket.try_clone().expect("clone the socket");
    let (responses, written) = std::thread::scope(|scope| {
        let writing = scope.spawn(move || {
            writer.write_all(stream)?;
            writer.shutdown(Shutdown::Write)
        });
        let responses = read_responses(&socket, expected.closes);
        // The broker may close first (a refused frame): a failed write is
        // expected then, so the reader judges the outcome and the write's
        // result only goes into failure messages.
        let written = match writing.join() {
            Ok(Ok(())) => "the whole stream was written".to_owned(),
            Ok(Err(error)) => format!("writing the stream failed: {error}"),
            Err(_) => "the writer thread panicked".to_owned(),
        };
        (responses, written)
    });
    let mut got: Vec<u32> = responses.iter().map(|(id, _)| *id).collect();
    let mut want: Vec<u32> = expected.answers.iter().map(|(id, _)| *id).collect();
    got.sort_unstable();
    want.sort_unstable();
    if expected.closes {
        let mut left = want.clone();
        for id in &got {
            let found = left.iter().position(|wanted| wanted == id);
            let Some(found) = found else {
                panic!("answer {id} to no request; expected {expected:?}, got {got:?} ({written})");
            };
            left.swap_remove(found);
        }
    } else {
        assert_eq!(
            got, want,
            "answers do not match requests ({expected:?}; {written})"
        );
    }
    for (correlation_id, body) in &responses {
        let api_key = expected
            .answers
            .iter()
            .find(|(id, _)| id == correlation_id)
            .and_then(|(_, api_key)| *api_key);
        if let Err(reason) = well_formed(api_key, body) {
            panic!(
                "malformed response to {correlation_id} ({api_key:?}): {reason}; body {:?}",
                &body[..body.len().min(64)]
            );
        }
    }
}

/// Reads response frames until the broker closes; panics on a hang or a
/// frame that does not parse.
fn read_responses(mut socket: &TcpStream, may_reset: bool) -> Vec<(u32, Vec<u8>)> {
    let deadline = Instant::now() + ANSWER_DEADLINE;
    let mut buffer = Vec::new();
    let mut chunk = [0_u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the broker neither answered nor closed within {ANSWER_DEADLINE:?}"
        );
        socket.set_read_timeout(Some(left)).expect("read timeout");
        match socket.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) if may_reset && error.kind() == ErrorKind::ConnectionReset => break,
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "the broker neither answered nor closed within {ANSWER_DEADLINE:?} ({} bytes read)",
                    buffer.len()
                )
            }
            Err(error) => panic!("reading responses failed: {error}"),
        }
    }
    split_responses(&buffer, may_reset)
}

/// Cuts a response stream into (correlation id, body) pairs.
fn split_responses(mut buffer: &[u8], may_end_early: bool) -> Vec<(u32, Vec<u8>)> {
    let limits = FrameLimits {
        max_frame_bytes: u32::MAX,
    };
    let mut responses = Vec::new();
    while !buffer.is_empty() {
        let Some(header) = buffer.first_chunk::<RESPONSE_HEADER_BYTES>() else {
            assert!(may_end_early, "stream ends inside a response header");
            break;
        };
        let head = decode_response_header(header, &limits).expect("response header decodes");
        let end = RESPONSE_HEADER_BYTES + head.body_len;
        if buffer.len() < end {
            assert!(may_end_early, "stream ends inside a response body");
            break;
        }
        responses.push((
            head.header.correlation_id,
            buffer[RESPONSE_HEADER_BYTES..end].to_vec(),
        ));
        buffer = &buffer[end..];
    }
    responses
}

/// Whether a response body is valid for its API (or a bare refusal).
fn well_formed(api_key: Option<ApiKey>, body: &[u8]) -> Result<(), String> {
    let body = copy_aligned(body);
    let Some(api_key) = api_key else {
        // Unknown API or unparseable header: only a bare refusal fits.
        let code = body
            .get(..2)
            .map(|code| u16::from_be_bytes([code[0], code[1]]));
        return match code {
            Some(code)
                if body.len() == BODY_PREFIX_BYTES
                    && code != 0
                    && ErrorCode::from_code(code).is_some()
                    && body[2..].iter().all(|byte| *byte == 0) =>
            {
                Ok(())
            }
            _ => Err("not a bare refusal".to_owned()),
        };
    };
    match decode_as(api_key, &body) {
        Ok(()) => Ok(()),
        Err(MessageError::TopLevelError { error_code, .. })
            if ErrorCode::from_code(error_code).is_some() =>
        {
            Ok(())
        }
        Err(error) => Err(error.to_string()),
    }
}

macro_rules! decode_each {
    ($api_key:expr, $body:expr, $($key:ident => $module:ident :: $response:ident),* $(,)?) => {
        match $api_key {
            $(ApiKey::$key => decode_response::<corelog_wire::message::$module::$response>($body)
                .map(|_| ()),)*
        }
    };
}

fn decode_as(api_key: ApiKey, body: &[u8]) -> Result<(), MessageError> {
    decode_each!(api_key, body,
        ApiVersions => api_versions::ApiVersionsResponse,
        Metadata => metadata::MetadataResponse,
        CreateTopics => create_topics::CreateTopicsResponse,
        DeleteTopics => delete_topics::DeleteTopicsResponse,
        DescribeTopics => describe_topics::DescribeTopicsResponse,
        Produce => produce::ProduceResponse,
        Fetch => fetch::FetchResponse,
        ListOffsets => list_offsets::ListOffsetsResponse,
        InitProducerId => init_producer_id::InitProducerIdResponse,
        DescribeShards => describe_shards::DescribeShardsResponse,
        FindCoordinator => find_coordinator::FindCoordinatorResponse,
        JoinGroup => join_group::JoinGroupResponse,
        Heartbeat => heartbeat::HeartbeatResponse,
        LeaveGroup => leave_group::LeaveGroupResponse,
        OffsetCommit => offset_commit::OffsetCommitResponse,
        OffsetFetch => offset_fetch::OffsetFetchResponse,
        ListGroups => list_groups::ListGroupsResponse,
        DescribeGroups => describe_groups::DescribeGroupsResponse,
        DeleteGroups => delete_groups::DeleteGroupsResponse,
        ResetOffsets => reset_offsets::ResetOffsetsResponse,
        WriteAudit => write_audit::WriteAuditResponse,
        DeleteOffsets => delete_offsets::DeleteOffsetsResponse,
        ControllerRaft => controller_raft::ControllerRaftResponse,
        BrokerRegister => broker_register::BrokerRegisterResponse,
        BrokerHeartbeat => broker_heartbeat::BrokerHeartbeatResponse,
        MetadataFetch => metadata_fetch::MetadataFetchResponse,
        ControllerOperation => controller_operation::ControllerOperationResponse,
        ReplicaPush => replica_push::ReplicaPushResponse,
        ReplicaQuery => replica_query::ReplicaQueryResponse,
        ReplicaStream => replica_stream::ReplicaStreamResponse,
        DescribeCluster => describe_cluster::DescribeClusterResponse,
        PartitionReport => partition_report::PartitionReportResponse,
        Authenticate => authenticate::AuthenticateResponse,
        DescribeUsers => describe_users::DescribeUsersResponse,
        AlterUsers => alter_users::AlterUsersResponse,
        DescribeAcls => describe_acls::DescribeAclsResponse,
        AlterAcls => alter_acls::AlterAclsResponse,
        DescribeQuotas => describe_quotas::DescribeQuotasResponse,
        AlterQuotas => alter_quotas::AlterQuotasResponse,
        AlterCluster => alter_cluster::AlterClusterResponse,
    )
}

/// The broker still serves a new connection: handshake and Metadata, both
/// answered without a top-level error.
fn still_answers(addr: SocketAddr) {
    let mut socket = TcpStream::connect(addr).expect("the broker still accepts connections");
    let mut stream = handshake(1);
    let metadata = corelog_wire::message::metadata::MetadataRequest { topics: None };
    stream.extend(request_frame(ApiKey::Metadata, 2, &metadata, &[]));
    socket.write_all(&stream).expect("write the liveness check");
    socket.shutdown(Shutdown::Write).expect("half-close");
    let responses = read_responses(&socket, false);
    let mut ids: Vec<u32> = responses.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2], "liveness check answers");
    for (id, body) in &responses {
        let api_key = if *id == 1 {
            ApiKey::ApiVersions
        } else {
            ApiKey::Metadata
        };
        decode_as(api_key, &copy_aligned(body))
            .unwrap_or_else(|error| panic!("liveness check: {api_key:?} refused: {error}"));
    }
}
