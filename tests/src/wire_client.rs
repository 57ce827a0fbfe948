//! Test support: a real `corelogd` process on loopback with its own ports
//! and data directory, and a minimal blocking protocol client built on the
//! wire crate alone (so broker tests do not depend on the client library).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord, ProducerIdentity};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{
    ApiKey, FrameLimits, RESPONSE_HEADER_BYTES, RequestHeader, decode_response_header,
};
use corelog_wire::message::{self, MessageError, Request};
use corelog_wire::types::TimestampMs;

/// A free loopback port (bound then released; fine for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `corelogd` child process, killed when dropped.
pub struct Broker {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub data_dir: PathBuf,
    pub extra_args: Vec<String>,
    _temp: Option<tempfile::TempDir>,
}

impl Broker {
    /// Starts a broker with one shard and `extra_args`.
    pub fn start(extra_args: &[&str]) -> Broker {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = temp.path().join("data");
        let mut broker = Broker {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            data_dir,
            extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
            _temp: Some(temp),
        };
        broker.spawn();
        broker
    }

    /// Starts the process again on the same ports and data directory.
    pub fn spawn(&mut self) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_corelogd"));
        command
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--metrics-listen")
            .arg(self.metrics_addr.to_string())
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--disk-reserve-bytes")
            .arg("0")
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if !self.extra_args.iter().any(|arg| arg == "--shards") {
            command.arg("--shards").arg("1");
        }
        self.child = Some(command.spawn().expect("corelogd starts"));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().unwrap())
            {
                panic!("corelogd exited at start-up: {status}");
            }
            if let Ok(mut client) = Client::connect(self.addr)
                && client.handshake().is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("corelogd did not become ready");
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM, then wait for exit; returns whether it exited cleanly.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap();
        false
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// A connected client that has done the ApiVersions handshake.
    pub fn client(&self) -> Client {
        let mut client = Client::connect(self.addr).unwrap();
        client.handshake().unwrap();
        client
    }

    /// The `/metrics` text.
    pub fn metrics(&self) -> String {
        let mut stream = TcpStream::connect(self.metrics_addr).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A blocking protocol client: one request at a time unless told otherwise.
pub struct Client {
    pub stream: TcpStream,
    next_correlation: u32,
}

/// A decoded response body, kept aligned.
pub struct Body {
    pub bytes: rkyv::util::AlignedVec<16>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            next_correlation: 1,
        })
    }

    pub fn handshake(&mut self) -> Result<(), String> {
        let request = message::api_versions::ApiVersionsRequest {
            client_name: "broker-tests".to_owned(),
            client_version: "0".to_owned(),
        };
        let body = self
            .call(&request, &[])
            .map_err(|error| error.to_string())?;
        message::decode_response::<message::api_versions::ApiVersionsResponse>(&body.bytes)
            .map(drop)
            .map_err(|error| error.to_string())
    }

    /// Sends a raw frame and returns its correlation id.
    pub fn send_frame(&mut self, api_key: ApiKey, body: &[u8]) -> std::io::Result<u32> {
        let correlation_id = self.next_correlation;
        self.next_correlation += 1;
        let header = RequestHeader {
            api_key,
            api_version: 0,
            correlation_id,
            flags: 0,
        }
        .encode(body.len())
        .unwrap();
        self.stream.write_all(&header)?;
        self.stream.write_all(body)?;
        Ok(correlation_id)
    }

    /// Reads one response frame: its correlation id and body.
    pub fn read_response(&mut self) -> std::io::Result<(u32, Body)> {
        let mut header = [0u8; RESPONSE_HEADER_BYTES];
        self.stream.read_exact(&mut header)?;
        let head = decode_response_header(
            &header,
            &FrameLimits {
                max_frame_bytes: 64 << 20,
            },
        )
        .map_err(|error| std::io::Error::other(error.to_string()))?;
        let mut bytes = rkyv::util::AlignedVec::<16>::with_capacity(head.body_len);
        bytes.resize(head.body_len, 0);
        self.stream.read_exact(&mut bytes)?;
        Ok((head.header.correlation_id, Body { bytes }))
    }

    /// One request, one response.
    pub fn call<T: Request>(&mut self, request: &T, raw: &[u8]) -> std::io::Result<Body> {
        let body = message::encode_request(request, raw).unwrap();
        let sent = self.send_frame(T::API_KEY, &body)?;
        let (correlation_id, body) = self.read_response()?;
        assert_eq!(
            correlation_id, sent,
            "responses of sequential calls arrive in order"
        );
        Ok(body)
    }

    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: u32,
        configs: &[(&str, &str)],
    ) -> ErrorCode {
        use message::create_topics::*;
        let request = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.to_owned(),
                partitions,
                replication_factor: 1,
                configs: configs
                    .iter()
                    .map(|(key, value)| message::ConfigEntry {
                        key: (*key).to_owned(),
                        value: (*value).to_owned(),
                    })
                    .collect(),
            }],
            timeout_ms: 10_000,
            validate_only: false,
        };
        let body = self.call(&request, &[]).unwrap();
        let (response, _) =
            message::decode_response::<CreateTopicsResponseBody>(&body.bytes).unwrap();
        ErrorCode::from_code(response.results[0].error_code.to_native()).unwrap()
    }

    /// Produces one batch to one partition: (error code, base offset).
    pub fn produce(&mut self, topic: &str, partition: u32, batch: &[u8]) -> (ErrorCode, i64) {
        let body = self
            .call(&produce_request(topic, partition, batch.len()), batch)
            .unwrap();
        decode_produce(&body)
    }

    /// Fetches one partition: (error code, next offset, records bytes, response body).
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_wait_ms: u32,
    ) -> FetchResult {
        let body = self
            .call(&fetch_request(topic, partition, offset, max_wait_ms), &[])
            .unwrap();
        decode_fetch(&body)
    }
}

pub type CreateTopicsResponseBody = message::create_topics::CreateTopicsResponse;

pub fn produce_request(
    topic: &str,
    partition: u32,
    records_len: usize,
) -> message::produce::ProduceRequest {
    use message::produce::*;
    ProduceRequest {
        acks: Acks::Quorum,
        timeout_ms: 10_000,
        topics: vec![ProduceTopic {
            name: topic.to_owned(),
            partitions: vec![ProducePartition {
                partition,
                records_len: records_len as u32,
            }],
        }],
    }
}

pub fn decode_produce(body: &Body) -> (ErrorCode, i64) {
    match message::decode_response::<message::produce::ProduceResponse>(&body.bytes) {
        Ok((response, _)) => {
            let partition = &response.topics[0].partitions[0];
            (
                ErrorCode::from_code(partition.error_code.to_native()).unwrap(),
                partition.base_offset.to_native(),
            )
        }
        Err(MessageError::TopLevelError { error_code, .. }) => {
            (ErrorCode::from_code(error_code).unwrap(), -1)
        }
        Err(error) => panic!("undecodable produce response: {error}"),
    }
}

pub fn fetch_request(
    topic: &str,
    partition: u32,
    offset: u64,
    max_wait_ms: u32,
) -> message::fetch::FetchRequest {
    use message::fetch::*;
    FetchRequest {
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 4 << 20,
        topics: vec![FetchTopic {
            name: topic.to_owned(),
            partitions: vec![FetchPartition {
                partition,
                fetch_offset: offset,
                partition_max_bytes: 4 << 20,
                current_leader_epoch: None,
            }],
        }],
    }
}

#[derive(Debug)]
pub struct FetchResult {
    pub code: ErrorCode,
    pub next_offset: u64,
    pub log_start: u64,
    pub high_watermark: u64,
    pub records: Bytes,
    pub gap: Option<message::fetch::Gap>,
}

pub fn decode_fetch(body: &Body) -> FetchResult {
    let (response, raw) =
        message::decode_response::<message::fetch::FetchResponse>(&body.bytes).unwrap();
    let partition = &response.topics[0].partitions[0];
    let gap = partition
        .gap
        .as_ref()
        .map(|gap| rkyv::deserialize::<message::fetch::Gap, rkyv::rancor::Error>(gap).unwrap());
    FetchResult {
        code: ErrorCode::from_code(partition.error_code.to_native()).unwrap(),
        next_offset: partition.next_offset.to_native(),
        log_start: partition.log_start_offset.to_native(),
        high_watermark: partition.high_watermark.to_native(),
        records: Bytes::copy_from_slice(raw),
        gap,
    }
}

/// A batch of `count` records `"{prefix}-{i}"` keyed `key`.
pub fn batch(prefix: &str, key: &str, count: usize, producer: ProducerIdentity) -> Vec<u8> {
    let mut builder = BatchBuilder::new(Compression::None).producer(producer);
    for index in 0..count {
        builder
            .push(&NewRecord {
                key: Some(Bytes::from(key.to_owned())),
                value: Some(Bytes::from(format!("{prefix}-{index}"))),
                timestamp: TimestampMs(1_700_000_000_000 + index as i64),
                ..NewRecord::default()
            })
            .unwrap();
    }
    builder.build().unwrap().to_vec()
}

/// Values of every record in fetched bytes.
pub fn values(records: &Bytes) -> Vec<String> {
    let limits = corelog_wire::batch::BatchLimits::default();
    let mut out = Vec::new();
    let mut position = 0;
    for found in corelog_wire::batch::batches(records, &limits) {
        let found = found.unwrap();
        let batch = records.slice(found.position..found.position + found.bytes.len());
        for record in corelog_wire::batch::decode_records(&batch, &limits).unwrap() {
            out.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
        }
        position = found.position + found.bytes.len();
    }
    assert_eq!(position, records.len());
    out
}
