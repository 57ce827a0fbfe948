//! A minimal blocking protocol client built on the wire crate alone, so
//! that broker behaviour is tested without the client library in between.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord, ProducerIdentity};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{
    ApiKey, FrameLimits, RESPONSE_HEADER_BYTES, RequestHeader, decode_response_header,
};
use corelog_wire::message::{self, MessageError, Request};
use corelog_wire::types::TimestampMs;

/// A blocking protocol client: one request at a time unless told otherwise.
#[derive(Debug)]
pub struct Client {
    pub stream: TcpStream,
    next_correlation: u32,
}

/// A decoded response body, kept aligned.
#[derive(Debug)]
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

    /// A client over a stream opened elsewhere (from a chosen source
    /// address, say).
    pub fn from_stream(stream: TcpStream) -> Client {
        Client {
            stream,
            next_correlation: 1,
        }
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

    /// Whether a broker answers the handshake as one: with ApiVersions,
    /// or, on a TLS listener, with `TLS_REQUIRED` (this client speaks
    /// plaintext).
    pub fn handshake_answered(&mut self) -> bool {
        match self.handshake_code() {
            Ok(code) => code == ErrorCode::None || code == ErrorCode::TlsRequired,
            Err(_) => false,
        }
    }

    fn handshake_code(&mut self) -> Result<ErrorCode, String> {
        let request = message::api_versions::ApiVersionsRequest {
            client_name: "broker-tests".to_owned(),
            client_version: "0".to_owned(),
        };
        let body = self
            .call(&request, &[])
            .map_err(|error| error.to_string())?;
        match message::decode_response::<message::api_versions::ApiVersionsResponse>(&body.bytes) {
            Ok(_) => Ok(ErrorCode::None),
            Err(error) => Ok(error.error_code()),
        }
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

/// A batch of `count` records `"{prefix}-{i}"` keyed `key`, stamped now:
/// time retention (seven days by default) would delete older records as
/// soon as their segment closes.
pub fn batch(prefix: &str, key: &str, count: usize, producer: ProducerIdentity) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(0));
    let mut builder = BatchBuilder::new(Compression::None).producer(producer);
    for index in 0..count {
        builder
            .push(&NewRecord {
                key: Some(Bytes::from(key.to_owned())),
                value: Some(Bytes::from(format!("{prefix}-{index}"))),
                timestamp: TimestampMs(now + index as i64),
                ..NewRecord::default()
            })
            .unwrap();
    }
    builder.build().unwrap().to_vec()
}

/// Values of every record in fetched bytes, control batches left out.
pub fn values(records: &Bytes) -> Vec<String> {
    let limits = corelog_wire::batch::BatchLimits::default();
    let mut out = Vec::new();
    let mut position = 0;
    for found in corelog_wire::batch::batches(records, &limits) {
        let found = found.unwrap();
        position = found.position + found.bytes.len();
        // Control batches (a new leader's epoch-start marker) are the
        // broker's, not records: consumers skip them.
        if found.header.is_control() {
            continue;
        }
        let batch = records.slice(found.position..found.position + found.bytes.len());
        for record in corelog_wire::batch::decode_records(&batch, &limits).unwrap() {
            out.push(String::from_utf8(record.value.unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(position, records.len());
    out
}

/// Sends `request` and returns the owned response (panics on a top-level error).
pub fn ask<T>(client: &mut Client, request: &T) -> <T as message::Request>::Response
where
    T: message::Request,
    <<T as message::Request>::Response as rkyv::Archive>::Archived: rkyv::Deserialize<
            <T as message::Request>::Response,
            rkyv::api::high::HighDeserializer<rkyv::rancor::Error>,
        >,
{
    let body = client.call(request, &[]).unwrap();
    let (archived, _) =
        message::decode_response::<<T as message::Request>::Response>(&body.bytes).unwrap();
    rkyv::deserialize::<<T as message::Request>::Response, rkyv::rancor::Error>(archived).unwrap()
}
