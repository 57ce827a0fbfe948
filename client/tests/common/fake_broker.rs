//! A small in-process broker for the client's tests: tokio, one node,
//! in-memory logs, speaking the real wire protocol through corelog-wire.
//!
//! It implements what the client relies on — the ApiVersions-first rule,
//! idempotent produce with duplicate detection (same sequence and bytes →
//! the original offset; same sequence, other bytes → conflict; gap → out of
//! order; no state for the producer and a sequence other than 0 → unknown
//! producer), whole-batch fetch with long polling, ListOffsets, topic admin,
//! and retention gaps — plus faults a real broker cannot be asked for: lose
//! the reply of an appended batch, answer an error instead of appending,
//! hold produce answers back.
//!
//! Consumer groups are served by a small coordinator in `fake_groups.rs`.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::batch::{self, BatchLimits, Record};
use corelog_wire::error::ErrorCode;
use corelog_wire::frame::{
    ApiKey, FrameLimits, REQUEST_HEADER_BYTES, ResponseHeader, decode_request_header,
};
use corelog_wire::message::TopicResult;
use corelog_wire::message::api_versions::{
    ApiVersionRange, ApiVersionsRequest, ApiVersionsResponse, supported_apis,
};
use corelog_wire::message::create_topics::{CreateTopicsRequest, CreateTopicsResponse};
use corelog_wire::message::delete_topics::{DeleteTopicsRequest, DeleteTopicsResponse};
use corelog_wire::message::describe_shards::{
    DescribeShardsRequest, DescribeShardsResponse, ShardEndpoint,
};
use corelog_wire::message::describe_topics::{
    DescribeTopicsRequest, DescribeTopicsResponse, PartitionState, TopicDescription,
};
use corelog_wire::message::fetch::{
    self, DeletedRange, DeletionCause, FetchPartitionResponse, FetchRequest, FetchResponse,
    FetchTopicResponse, Gap,
};
use corelog_wire::message::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};
use corelog_wire::message::list_offsets::{
    ArchivedOffsetSpec, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse,
};
use corelog_wire::message::metadata::{
    BrokerInfo, MetadataRequest, MetadataResponse, PartitionMetadata, TopicMetadata,
};
use corelog_wire::message::produce::{
    self, ProducePartitionResponse, ProduceRequest, ProduceResponse, ProduceTopicResponse,
};
use corelog_wire::message::{
    BODY_ALIGNMENT, ConfigEntry, Request, Response, decode_request, encode_error_response,
    encode_response,
};
use corelog_wire::types::Offset;
use rkyv::util::AlignedVec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// One stored batch.
#[derive(Clone, Debug)]
struct Stored {
    base_offset: u64,
    next_offset: u64,
    bytes: Vec<u8>,
}

/// An idempotent producer's state on one partition.
#[derive(Debug, Default)]
struct ProducerState {
    next_sequence: i32,
    /// (base sequence, CRC, base offset) of recent batches.
    recent: VecDeque<(i32, u32, u64)>,
}

#[derive(Debug, Default)]
pub(crate) struct PartitionLog {
    batches: Vec<Stored>,
    pub(crate) log_start: u64,
    pub(crate) next_offset: u64,
    deleted: Vec<DeletedRange>,
    producers: HashMap<i64, ProducerState>,
}

/// What a produce attempt looked like, for the tests' eyes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub topic: String,
    pub partition: u32,
    pub producer_id: i64,
    pub base_sequence: i32,
    pub bytes: Vec<u8>,
}

/// Faults to inject into the next produce answers.
#[derive(Debug, Default)]
struct Faults {
    /// Append, then lose the answer (close the connection if set).
    lose_replies: u32,
    close_on_lost_reply: bool,
    /// Answer these codes instead of appending, one per request.
    errors: VecDeque<ErrorCode>,
    /// Close the connection instead of answering this many Metadata
    /// requests.
    drop_metadata: u32,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) topics: BTreeMap<String, Vec<PartitionLog>>,
    pub(crate) configs: BTreeMap<String, Vec<(String, String)>>,
    next_producer_id: i64,
    init_producer_id_count: u32,
    attempts: Vec<Attempt>,
    faults: Faults,
    connections: u32,
    produce_received: u32,
    /// What DescribeShards lists, by shard (empty: the shared port only).
    shard_ports: Vec<u16>,
    /// Connections accepted on the listeners of [`FakeBroker::add_shard_listener`].
    shard_connections: u32,
    describe_shards_count: u32,
    /// Deleted topics `Metadata` lists as still being removed.
    deleting: Vec<String>,
}

/// A running fake broker. It serves until the test's runtime ends.
#[derive(Clone)]
pub struct FakeBroker {
    pub(crate) addr: SocketAddr,
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) appended: Arc<Notify>,
    hold: Arc<watch::Sender<bool>>,
    hold_handshakes: Arc<watch::Sender<bool>>,
    pub(crate) groups: Arc<Mutex<crate::common::fake_groups::Groups>>,
}

impl FakeBroker {
    pub async fn start() -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let appended = Arc::new(Notify::new());
        let (hold, _) = watch::channel(false);
        let (hold_handshakes, _) = watch::channel(false);
        let broker = FakeBroker {
            addr,
            state,
            appended,
            hold: Arc::new(hold),
            hold_handshakes: Arc::new(hold_handshakes),
            groups: Arc::default(),
        };
        broker.accept(listener, false);
        broker
    }

    fn accept(&self, listener: TcpListener, shard_port: bool) {
        let server = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                {
                    let mut state = server.state.lock().unwrap();
                    state.connections += 1;
                    if shard_port {
                        state.shard_connections += 1;
                    }
                }
                let connection = server.clone();
                tokio::spawn(async move { connection.serve(stream).await });
            }
        });
    }

    /// Opens another port serving the same broker, as a shard's own
    /// listener, and returns it.
    pub async fn add_shard_listener(&self) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        self.accept(listener, true);
        port
    }

    /// What DescribeShards answers from now on, by shard.
    pub fn list_shard_ports(&self, ports: &[u16]) {
        self.state.lock().unwrap().shard_ports = ports.to_vec();
    }

    /// Connections accepted on shard listeners so far.
    pub fn shard_connection_count(&self) -> u32 {
        self.state.lock().unwrap().shard_connections
    }

    /// DescribeShards requests answered so far.
    pub fn describe_shards_count(&self) -> u32 {
        self.state.lock().unwrap().describe_shards_count
    }

    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Lists `name` as a deleted topic whose files are still being removed.
    pub fn mark_deleting(&self, name: &str) {
        self.state.lock().unwrap().deleting.push(name.to_owned());
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let mut state = self.state.lock().unwrap();
        state.topics.insert(
            name.to_owned(),
            (0..partitions).map(|_| PartitionLog::default()).collect(),
        );
        state.configs.insert(name.to_owned(), Vec::new());
    }

    /// The next `count` produce requests are appended but their answers
    /// are lost; with `close`, the connection closes instead of answering.
    pub fn lose_produce_replies(&self, count: u32, close: bool) {
        let mut state = self.state.lock().unwrap();
        state.faults.lose_replies = count;
        state.faults.close_on_lost_reply = close;
    }

    /// The next produce requests are answered with these codes, one per
    /// request, without appending.
    pub fn fail_produce_with(&self, codes: &[ErrorCode]) {
        self.state.lock().unwrap().faults.errors.extend(codes);
    }

    /// The next `count` Metadata requests close their connection
    /// unanswered, as a broker that restarts meanwhile would.
    pub fn drop_metadata_requests(&self, count: u32) {
        self.state.lock().unwrap().faults.drop_metadata = count;
    }

    /// Holds produce answers back until released.
    pub fn hold_produce(&self, hold: bool) {
        self.hold.send_replace(hold);
    }

    /// Holds ApiVersions answers (the handshake of every new connection)
    /// back until released: a broker that accepts but is still starting.
    pub fn hold_handshakes(&self, hold: bool) {
        self.hold_handshakes.send_replace(hold);
    }

    /// Deletes whole batches below `offset` as retention would, remembering
    /// the deletion for gap reports.
    pub fn delete_before(&self, topic: &str, partition: u32, offset: u64, deleted_at_ms: i64) {
        let mut state = self.state.lock().unwrap();
        let log = &mut state.topics.get_mut(topic).unwrap()[partition as usize];
        let start = log.log_start;
        let mut bytes = 0;
        log.batches.retain(|stored| {
            let keep = stored.next_offset > offset;
            if !keep {
                bytes += stored.bytes.len() as u64;
            }
            keep
        });
        log.log_start = log
            .batches
            .first()
            .map_or(log.next_offset, |b| b.base_offset);
        log.deleted.push(DeletedRange {
            start_offset: start,
            end_offset: log.log_start,
            bytes,
            record_count: log.log_start - start,
            cause: DeletionCause::RetentionTime,
            deleted_at_ms,
        });
    }

    /// Every record stored in a partition, decoded.
    pub fn records(&self, topic: &str, partition: u32) -> Vec<Record> {
        let state = self.state.lock().unwrap();
        let log = &state.topics[topic][partition as usize];
        log.batches
            .iter()
            .flat_map(|stored| {
                batch::decode_records(&Bytes::from(stored.bytes.clone()), &BatchLimits::default())
                    .unwrap()
            })
            .collect()
    }

    pub fn attempts(&self) -> Vec<Attempt> {
        self.state.lock().unwrap().attempts.clone()
    }

    pub fn init_producer_id_count(&self) -> u32 {
        self.state.lock().unwrap().init_producer_id_count
    }

    /// Produce requests read so far, answered or not.
    pub fn produce_received(&self) -> u32 {
        self.state.lock().unwrap().produce_received
    }

    pub fn connection_count(&self) -> u32 {
        self.state.lock().unwrap().connections
    }

    /// Reads requests as they come (like the real broker, which reads
    /// ahead up to its in-flight bound) and processes them one at a time in
    /// arrival order.
    async fn serve(&self, stream: TcpStream) {
        let (mut reader, mut writer) = stream.into_split();
        let (requests, mut queue) = tokio::sync::mpsc::unbounded_channel();
        let counter = self.clone();
        let read = tokio::spawn(async move {
            loop {
                let mut header = [0_u8; REQUEST_HEADER_BYTES];
                if reader.read_exact(&mut header).await.is_err() {
                    return;
                }
                let Ok(head) = decode_request_header(&header, &FrameLimits::default()) else {
                    return;
                };
                let mut body = AlignedVec::<BODY_ALIGNMENT>::with_capacity(head.body_len);
                body.resize(head.body_len, 0);
                if reader.read_exact(body.as_mut_slice()).await.is_err() {
                    return;
                }
                if head.header.api_key == ApiKey::Produce {
                    counter.state.lock().unwrap().produce_received += 1;
                }
                if requests.send((head, body)).is_err() {
                    return;
                }
            }
        });
        let mut first = true;
        while let Some((head, body)) = queue.recv().await {
            let api = head.header.api_key;
            if api == ApiKey::Metadata {
                let faults = &mut self.state.lock().unwrap().faults;
                if faults.drop_metadata > 0 {
                    faults.drop_metadata -= 1;
                    break;
                }
            }
            let response = if first && api != ApiKey::ApiVersions {
                Some(encode_error_response(ErrorCode::InvalidRequest).to_vec())
            } else {
                first = false;
                self.handle(api, &body).await
            };
            let Some(response) = response else {
                // A lost reply.
                if self.state.lock().unwrap().faults.close_on_lost_reply {
                    break;
                }
                continue;
            };
            let mut frame = ResponseHeader {
                correlation_id: head.header.correlation_id,
            }
            .encode(response.len())
            .unwrap()
            .to_vec();
            frame.extend_from_slice(&response);
            if writer.write_all(&frame).await.is_err() {
                break;
            }
        }
        read.abort();
    }

    async fn handle(&self, api: ApiKey, body: &[u8]) -> Option<Vec<u8>> {
        match api {
            ApiKey::ApiVersions => {
                let mut held = self.hold_handshakes.subscribe();
                let _ = held.wait_for(|hold| !*hold).await;
                answer::<ApiVersionsRequest>(body, |_, _| {
                    (
                        ApiVersionsResponse {
                            // Version 0 of every API, as brokers spoke
                            // before DescribeGroups had a version 1: the
                            // client keeps working with them.
                            apis: supported_apis()
                                .into_iter()
                                .map(|range| ApiVersionRange {
                                    max_version: range.min_version,
                                    ..range
                                })
                                .collect(),
                            broker_version: "fake".to_owned(),
                        },
                        Vec::new(),
                    )
                })
            }
            ApiKey::Metadata => {
                answer::<MetadataRequest>(body, |request, _| self.metadata(request))
            }
            ApiKey::DescribeShards => answer::<DescribeShardsRequest>(body, |_, _| {
                let ports = {
                    let mut state = self.state.lock().unwrap();
                    state.describe_shards_count += 1;
                    state.shard_ports.clone()
                };
                let shards = (0u16..)
                    .zip(ports)
                    .map(|(shard, port)| ShardEndpoint { shard, port })
                    .collect();
                (DescribeShardsResponse { node_id: 1, shards }, Vec::new())
            }),
            ApiKey::InitProducerId => answer::<InitProducerIdRequest>(body, |_, _| {
                let mut state = self.state.lock().unwrap();
                state.next_producer_id += 1;
                state.init_producer_id_count += 1;
                (
                    InitProducerIdResponse {
                        producer_id: 1000 + state.next_producer_id,
                        producer_epoch: 0,
                    },
                    Vec::new(),
                )
            }),
            ApiKey::Produce => self.produce(body).await,
            ApiKey::Fetch => Some(self.fetch(body).await),
            ApiKey::ListOffsets => {
                answer::<ListOffsetsRequest>(body, |request, _| self.list_offsets(request))
            }
            ApiKey::CreateTopics => {
                answer::<CreateTopicsRequest>(body, |request, _| self.create_topics(request))
            }
            ApiKey::DeleteTopics => answer::<DeleteTopicsRequest>(body, |request, _| {
                let mut state = self.state.lock().unwrap();
                let results = request
                    .names
                    .iter()
                    .map(|name| {
                        let existed = state.topics.remove(name.as_str()).is_some();
                        topic_result(
                            name,
                            if existed {
                                ErrorCode::None
                            } else {
                                ErrorCode::UnknownTopicOrPartition
                            },
                        )
                    })
                    .collect();
                (DeleteTopicsResponse { results }, Vec::new())
            }),
            ApiKey::DescribeTopics => {
                answer::<DescribeTopicsRequest>(body, |request, _| self.describe(request))
            }
            ApiKey::JoinGroup => Some(self.join_group(body).await),
            ApiKey::FindCoordinator
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::ListGroups
            | ApiKey::DescribeGroups
            | ApiKey::DeleteGroups
            | ApiKey::ResetOffsets
            | ApiKey::WriteAudit => Some(self.handle_group(api, body)),
            // The inter-broker APIs: a fake broker has no peers.
            _ => None,
        }
    }

    fn metadata(
        &self,
        request: &corelog_wire::message::metadata::ArchivedMetadataRequest,
    ) -> (MetadataResponse, Vec<u8>) {
        let state = self.state.lock().unwrap();
        let names: Vec<String> = match request.topics.as_ref() {
            Some(names) => names.iter().map(|n| n.to_string()).collect(),
            None => state.topics.keys().cloned().collect(),
        };
        let deleting = if request.topics.is_none() {
            state.deleting.clone()
        } else {
            Vec::new()
        };
        let deleting = deleting.into_iter().map(|name| TopicMetadata {
            name,
            error_code: ErrorCode::TopicDeletionInProgress.code(),
            partitions: Vec::new(),
        });
        let topics = names
            .into_iter()
            .map(|name| match state.topics.get(&name) {
                Some(partitions) => TopicMetadata {
                    name,
                    error_code: 0,
                    partitions: (0..partitions.len() as u32)
                        .map(|partition| PartitionMetadata {
                            partition,
                            error_code: 0,
                            leader: Some(1),
                            leader_epoch: 1,
                            replicas: vec![1],
                            in_sync: vec![1],
                            owner_shard: 0,
                        })
                        .collect(),
                },
                None => TopicMetadata {
                    name,
                    error_code: ErrorCode::UnknownTopicOrPartition.code(),
                    partitions: Vec::new(),
                },
            })
            .chain(deleting)
            .collect();
        (
            MetadataResponse {
                brokers: vec![BrokerInfo {
                    node_id: 1,
                    host: "0.0.0.0".to_owned(),
                    port: self.addr.port(),
                    rack: None,
                }],
                controller_id: Some(1),
                metadata_version: 1,
                topics,
            },
            Vec::new(),
        )
    }

    async fn produce(&self, body: &[u8]) -> Option<Vec<u8>> {
        let (request, raw) = decode_request::<ProduceRequest>(body).unwrap();
        let sections = produce::partition_records(request, raw).unwrap();
        let mut held = self.hold.subscribe();
        let _ = held.wait_for(|hold| !*hold).await;
        let mut state = self.state.lock().unwrap();
        let injected = state.faults.errors.pop_front();
        let lose = state.faults.lose_replies > 0;
        if lose {
            state.faults.lose_replies -= 1;
        }
        let mut topics: BTreeMap<String, Vec<ProducePartitionResponse>> = BTreeMap::new();
        for section in sections {
            let partition = section.partition.partition.to_native();
            let header = batch::validate(section.records, &BatchLimits::default()).unwrap();
            state.attempts.push(Attempt {
                topic: section.topic.to_owned(),
                partition,
                producer_id: header.producer.producer_id,
                base_sequence: header.producer.base_sequence,
                bytes: section.records.to_vec(),
            });
            let (code, base_offset) = match injected {
                Some(code) => (code, -1),
                None => append(
                    &mut state,
                    section.topic,
                    partition,
                    section.records,
                    &header,
                ),
            };
            topics
                .entry(section.topic.to_owned())
                .or_default()
                .push(ProducePartitionResponse {
                    partition,
                    error_code: code.code(),
                    error_message: None,
                    base_offset,
                    log_append_time_ms: -1,
                    log_start_offset: 0,
                });
        }
        drop(state);
        self.appended.notify_waiters();
        if lose {
            return None;
        }
        let response = ProduceResponse {
            topics: topics
                .into_iter()
                .map(|(name, partitions)| ProduceTopicResponse { name, partitions })
                .collect(),
            throttle_ms: 0,
        };
        Some(encode_response(&response, &[]).unwrap())
    }

    async fn fetch(&self, body: &[u8]) -> Vec<u8> {
        let (request, _) = decode_request::<FetchRequest>(body).unwrap();
        let wait = Duration::from_millis(u64::from(request.max_wait_ms.to_native()));
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let appended = self.appended.notified();
            let (response, raw) = self.fetch_now(request);
            if !raw.is_empty() || tokio::time::Instant::now() >= deadline {
                return encode_response(&response, &raw).unwrap();
            }
            let _ = tokio::time::timeout_at(deadline, appended).await;
        }
    }

    fn fetch_now(&self, request: &fetch::ArchivedFetchRequest) -> (FetchResponse, Vec<u8>) {
        let state = self.state.lock().unwrap();
        let mut raw = Vec::new();
        let topics = request
            .topics
            .iter()
            .map(|topic| FetchTopicResponse {
                name: topic.name.to_string(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|wanted| {
                        let partition = wanted.partition.to_native();
                        let offset = wanted.fetch_offset.to_native();
                        let max = wanted.partition_max_bytes.to_native() as usize;
                        let log = state
                            .topics
                            .get(topic.name.as_str())
                            .and_then(|partitions| partitions.get(partition as usize));
                        let Some(log) = log else {
                            return fetch_error(
                                partition,
                                ErrorCode::UnknownTopicOrPartition,
                                None,
                            );
                        };
                        if offset < log.log_start || offset > log.next_offset {
                            let gap = (offset < log.log_start).then(|| Gap {
                                requested_offset: offset,
                                log_start_offset: log.log_start,
                                deleted: log.deleted.clone(),
                            });
                            let mut answer =
                                fetch_error(partition, ErrorCode::OffsetOutOfRange, gap);
                            answer.log_start_offset = log.log_start;
                            answer.high_watermark = log.next_offset;
                            return answer;
                        }
                        let mut bytes = Vec::new();
                        let mut next = offset;
                        for stored in log.batches.iter().filter(|b| b.next_offset > offset) {
                            if !bytes.is_empty() && bytes.len() + stored.bytes.len() > max {
                                break;
                            }
                            bytes.extend_from_slice(&stored.bytes);
                            next = stored.next_offset;
                        }
                        let records_len = bytes.len() as u32;
                        raw.extend(bytes);
                        FetchPartitionResponse {
                            partition,
                            error_code: 0,
                            error_message: None,
                            high_watermark: log.next_offset,
                            log_start_offset: log.log_start,
                            next_offset: next,
                            records_len,
                            gap: None,
                        }
                    })
                    .collect(),
            })
            .collect();
        (
            FetchResponse {
                topics,
                throttle_ms: 0,
            },
            raw,
        )
    }

    fn list_offsets(
        &self,
        request: &corelog_wire::message::list_offsets::ArchivedListOffsetsRequest,
    ) -> (ListOffsetsResponse, Vec<u8>) {
        let state = self.state.lock().unwrap();
        let topics = request
            .topics
            .iter()
            .map(|topic| ListOffsetsTopicResponse {
                name: topic.name.to_string(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|wanted| {
                        let partition = wanted.partition.to_native();
                        let log = &state.topics[topic.name.as_str()][partition as usize];
                        let (offset, timestamp) = match wanted.spec {
                            ArchivedOffsetSpec::Earliest => (log.log_start as i64, -1),
                            ArchivedOffsetSpec::Latest => (log.next_offset as i64, -1),
                            ArchivedOffsetSpec::Timestamp(time) => log
                                .batches
                                .iter()
                                .flat_map(|stored| {
                                    batch::decode_records(
                                        &Bytes::from(stored.bytes.clone()),
                                        &BatchLimits::default(),
                                    )
                                    .unwrap()
                                })
                                .find(|record| record.timestamp.0 >= time.to_native())
                                .map_or((-1, -1), |record| {
                                    (record.offset.0 as i64, record.timestamp.0)
                                }),
                        };
                        ListOffsetsPartitionResponse {
                            partition,
                            error_code: 0,
                            offset,
                            timestamp,
                        }
                    })
                    .collect(),
            })
            .collect();
        (ListOffsetsResponse { topics }, Vec::new())
    }

    fn create_topics(
        &self,
        request: &corelog_wire::message::create_topics::ArchivedCreateTopicsRequest,
    ) -> (CreateTopicsResponse, Vec<u8>) {
        let mut state = self.state.lock().unwrap();
        let results = request
            .topics
            .iter()
            .map(|topic| {
                let name = topic.name.to_string();
                let bad_policy = topic
                    .configs
                    .iter()
                    .any(|entry| entry.key == "cleanup.policy" && entry.value != "delete");
                let code = if state.topics.contains_key(&name) {
                    ErrorCode::TopicAlreadyExists
                } else if bad_policy {
                    ErrorCode::InvalidConfig
                } else {
                    let partitions = topic.partitions.to_native();
                    state.topics.insert(
                        name.clone(),
                        (0..partitions).map(|_| PartitionLog::default()).collect(),
                    );
                    let configs = topic
                        .configs
                        .iter()
                        .map(|entry| (entry.key.to_string(), entry.value.to_string()))
                        .collect();
                    state.configs.insert(name.clone(), configs);
                    ErrorCode::None
                };
                topic_result(&name, code)
            })
            .collect();
        (CreateTopicsResponse { results }, Vec::new())
    }

    fn describe(
        &self,
        request: &corelog_wire::message::describe_topics::ArchivedDescribeTopicsRequest,
    ) -> (DescribeTopicsResponse, Vec<u8>) {
        let state = self.state.lock().unwrap();
        let names: Vec<String> = if request.names.is_empty() {
            state.topics.keys().cloned().collect()
        } else {
            request.names.iter().map(|n| n.to_string()).collect()
        };
        let topics = names
            .into_iter()
            .map(|name| match state.topics.get(&name) {
                Some(partitions) => TopicDescription {
                    partitions: partitions.len() as u32,
                    replication_factor: 1,
                    configs: state.configs[&name]
                        .iter()
                        .map(|(key, value)| ConfigEntry {
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    partition_states: partitions
                        .iter()
                        .enumerate()
                        .map(|(index, log)| PartitionState {
                            partition: index as u32,
                            log_start_offset: log.log_start,
                            high_watermark: log.next_offset,
                            log_end_offset: log.next_offset,
                            size_bytes: log.batches.iter().map(|b| b.bytes.len() as u64).sum(),
                            segment_count: 1,
                            epoch_starts: Vec::new(),
                        })
                        .collect(),
                    name,
                    error_code: 0,
                    message: None,
                },
                None => TopicDescription {
                    name,
                    error_code: ErrorCode::UnknownTopicOrPartition.code(),
                    message: None,
                    partitions: 0,
                    replication_factor: 0,
                    configs: Vec::new(),
                    partition_states: Vec::new(),
                },
            })
            .collect();
        (DescribeTopicsResponse { topics }, Vec::new())
    }
}

/// Appends a batch with the broker's idempotence rules; returns the code
/// and the base offset.
pub(crate) fn append(
    state: &mut State,
    topic: &str,
    partition: u32,
    records: &[u8],
    header: &batch::BatchHeader,
) -> (ErrorCode, i64) {
    let Some(log) = state
        .topics
        .get_mut(topic)
        .and_then(|partitions| partitions.get_mut(partition as usize))
    else {
        return (ErrorCode::UnknownTopicOrPartition, -1);
    };
    let identity = header.producer;
    if identity.is_idempotent() {
        // As the real broker: no state yet and a batch that does not start
        // the sequence (its predecessor was refused or is still on its way).
        if identity.base_sequence != 0 && !log.producers.contains_key(&identity.producer_id) {
            return (ErrorCode::UnknownProducerId, -1);
        }
        let producer = log.producers.entry(identity.producer_id).or_default();
        if let Some(&(_, crc, base_offset)) = producer
            .recent
            .iter()
            .find(|(sequence, _, _)| *sequence == identity.base_sequence)
        {
            return if crc == header.crc {
                (ErrorCode::None, base_offset as i64)
            } else {
                (ErrorCode::DuplicateSequenceConflict, -1)
            };
        }
        if identity.base_sequence != producer.next_sequence {
            return (ErrorCode::OutOfOrderSequence, -1);
        }
        producer.next_sequence = identity.base_sequence + header.record_count as i32;
        producer
            .recent
            .push_back((identity.base_sequence, header.crc, log.next_offset));
        if producer.recent.len() > 5 {
            producer.recent.pop_front();
        }
    }
    let base_offset = log.next_offset;
    let mut bytes = records.to_vec();
    batch::set_base_offset(&mut bytes, Offset(base_offset));
    log.next_offset = base_offset + header.offset_count();
    log.batches.push(Stored {
        base_offset,
        next_offset: log.next_offset,
        bytes,
    });
    (ErrorCode::None, base_offset as i64)
}

fn fetch_error(partition: u32, code: ErrorCode, gap: Option<Gap>) -> FetchPartitionResponse {
    FetchPartitionResponse {
        partition,
        error_code: code.code(),
        error_message: None,
        high_watermark: 0,
        log_start_offset: 0,
        next_offset: 0,
        records_len: 0,
        gap,
    }
}

fn topic_result(name: &str, code: ErrorCode) -> TopicResult {
    TopicResult {
        name: name.to_owned(),
        error_code: code.code(),
        message: None,
    }
}

/// Decodes a request of type `Q` and encodes the response `f` builds.
pub(crate) fn answer<Q: Request>(
    body: &[u8],
    f: impl FnOnce(&Q::Archived, &[u8]) -> (Q::Response, Vec<u8>),
) -> Option<Vec<u8>>
where
    Q::Response: Response,
{
    match decode_request::<Q>(body) {
        Ok((request, raw)) => {
            let (response, raw) = f(request, raw);
            Some(encode_response(&response, &raw).unwrap())
        }
        Err(error) => Some(encode_error_response(error.error_code()).to_vec()),
    }
}
