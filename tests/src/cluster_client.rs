//! Wire-level questions to a cluster of brokers, shared by the
//! multi-process tests: the client library's runtime and settings,
//! metadata polls, leader lookup, topic creation,
//! produce with retries across leader changes, reading a partition back
//! and waiting for followers to catch up.
//!
//! A test's own cluster type implements [`WireCluster`] (which broker is
//! which, and which may be asked now: a frozen or cut-off broker would not
//! answer) and gets the rest as provided methods.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_client::{ClientConfig, Producer, ProducerConfig, ProducerRecord};
use corelog_wire::batch::{BatchLimits, batches, decode_records};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::create_topics::{CreatableTopic, CreateTopicsRequest};
use corelog_wire::message::fetch::FetchResponse;
use corelog_wire::message::metadata::{MetadataRequest, MetadataResponse, PartitionMetadata};
use corelog_wire::message::{self, MessageError, Request};

use crate::Broker;
use crate::wire_client::{Client, decode_produce, fetch_request, produce_request};

/// A two-thread tokio runtime for the client library's side of a test.
#[must_use]
pub fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Client library settings for failover tests: every broker of
/// `bootstrap`, and timeouts and backoffs short enough to fit the tests'
/// deadlines.
#[must_use]
pub fn client_config(bootstrap: Vec<String>) -> ClientConfig {
    let mut config = ClientConfig::new(bootstrap[0].clone());
    config.bootstrap = bootstrap;
    config.connect_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_secs(8);
    config.reconnect_backoff = Duration::from_millis(50);
    config.metadata_refresh_backoff = Duration::from_millis(50);
    config
}

/// Producer settings for failover tests: [`client_config`], short
/// backoffs, and ack and delivery timeouts that fit the tests' deadlines.
#[must_use]
pub fn producer_config(bootstrap: Vec<String>) -> ProducerConfig {
    let mut config = ProducerConfig::new(bootstrap[0].clone());
    config.client = client_config(bootstrap);
    config.linger = Duration::from_millis(1);
    config.retry_backoff = Duration::from_millis(20);
    config.retry_backoff_max = Duration::from_millis(250);
    config.ack_timeout = Duration::from_secs(5);
    config.delivery_timeout = Duration::from_secs(25);
    config
}

/// Connects a producer, retrying retriable failures (a cluster still
/// electing, a broker restarting) for up to `patience`.
///
/// # Panics
/// When it cannot connect in time, or on a failure that is not retriable.
pub async fn connect_producer(config: ProducerConfig, patience: Duration) -> Producer {
    let deadline = Instant::now() + patience;
    loop {
        match Producer::connect(config.clone()).await {
            Ok(producer) => return producer,
            Err(error) if error.is_retriable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the producer could not connect: {error}"),
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the other tests of this test binary off until the guard drops,
/// whether the current one failed or not: their clusters would compete
/// for the machine's two cores and skew failover times.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long the waits below poll before they give up.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The error code of a wire value; unknown codes count as
/// `UnknownServerError`.
#[must_use]
pub fn error_code(value: u16) -> ErrorCode {
    ErrorCode::from_code(value).unwrap_or(ErrorCode::UnknownServerError)
}

/// Sends `request` and returns the owned response, or what went wrong
/// (connection, top-level error code, decoding).
///
/// # Errors
/// The failure, as text for a test's message.
pub fn try_ask<T: Request>(client: &mut Client, request: &T) -> Result<T::Response, String>
where
    <T::Response as rkyv::Archive>::Archived:
        rkyv::Deserialize<T::Response, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
{
    let body = client
        .call(request, &[])
        .map_err(|error| error.to_string())?;
    let (archived, _) =
        message::decode_response::<T::Response>(&body.bytes).map_err(|error| error.to_string())?;
    rkyv::deserialize::<T::Response, rkyv::rancor::Error>(archived)
        .map_err(|error| error.to_string())
}

/// Every non-control record in fetched bytes, as `(offset, value)`.
///
/// # Errors
/// A batch that fails its CRC check or whose records do not decode.
pub fn fetched_records(bytes: &Bytes) -> Result<Vec<(u64, String)>, String> {
    let limits = BatchLimits::default();
    let mut out = Vec::new();
    for found in batches(bytes, &limits) {
        let found = found.map_err(|error| format!("a batch fails its CRC check: {error}"))?;
        if found.header.is_control() {
            continue;
        }
        let batch = bytes.slice(found.position..found.position + found.bytes.len());
        let records = decode_records(&batch, &limits)
            .map_err(|error| format!("records do not decode: {error}"))?;
        for record in records {
            let value = record
                .value
                .map(|value| String::from_utf8_lossy(&value).into_owned())
                .unwrap_or_default();
            out.push((record.offset.0, value));
        }
    }
    Ok(out)
}

/// A partition's leader as metadata reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leader {
    pub id: u32,
    pub epoch: u32,
}

/// A partition read back by [`WireCluster::read_partition`].
#[derive(Clone, Debug, Default)]
pub struct PartitionLog {
    /// `(offset, value)` of every record below the high watermark, in
    /// the order served.
    pub records: Vec<(u64, String)>,
    pub high_watermark: u64,
}

/// A cluster whose broker `n` is node id `n`, asked over the wire.
pub trait WireCluster {
    /// Broker `id` (node id `id`).
    fn broker(&self, id: u32) -> &Broker;

    /// Every node id, in order.
    fn ids(&self) -> Vec<u32>;

    /// Whether broker `id` may be asked now: running, and not frozen or
    /// cut off by the test.
    fn answers(&self, id: u32) -> bool {
        self.broker(id).is_running()
    }

    /// The brokers that may be asked now.
    fn answering(&self) -> Vec<u32> {
        self.ids()
            .into_iter()
            .filter(|&id| self.answers(id))
            .collect()
    }

    /// A handshaken connection to broker `id` whose reads give up after
    /// `timeout`; `None` if it may not be asked or does not answer.
    fn client_with_timeout(&self, id: u32, timeout: Duration) -> Option<Client> {
        if !self.answers(id) {
            return None;
        }
        let mut client = Client::connect(self.broker(id).addr).ok()?;
        client.stream.set_read_timeout(Some(timeout)).ok()?;
        client.handshake().ok()?;
        Some(client)
    }

    /// Broker `id`'s metadata of every topic, if it answers.
    fn metadata(&self, id: u32) -> Option<MetadataResponse> {
        let mut client = self.client_with_timeout(id, Duration::from_secs(3))?;
        try_ask(&mut client, &MetadataRequest { topics: None }).ok()
    }

    /// Polls broker `id`'s metadata until `done` holds, for up to
    /// [`PATIENCE`].
    ///
    /// # Errors
    /// What was awaited and the last metadata seen.
    fn try_wait_metadata(
        &self,
        id: u32,
        what: &str,
        done: impl Fn(&MetadataResponse) -> bool,
    ) -> Result<MetadataResponse, String> {
        let deadline = Instant::now() + PATIENCE;
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(found) = self.metadata(id) {
                if done(&found) {
                    return Ok(found);
                }
                last = Some(found);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "timed out waiting for {what} on broker {id}; its last metadata: {last:?}"
        ))
    }

    /// [`WireCluster::try_wait_metadata`], panicking when it times out.
    fn wait_metadata(
        &self,
        id: u32,
        what: &str,
        done: impl Fn(&MetadataResponse) -> bool,
    ) -> MetadataResponse {
        self.try_wait_metadata(id, what, done)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// Broker `id`'s metadata of `topic/partition`.
    fn partition_metadata(
        &self,
        id: u32,
        topic: &str,
        partition: u32,
    ) -> Option<PartitionMetadata> {
        self.metadata(id)?
            .topics
            .into_iter()
            .find(|found| found.name == topic)?
            .partitions
            .into_iter()
            .find(|found| found.partition == partition)
    }

    /// Waits until an answering broker other than `not` leads
    /// `topic/partition`, by the error-free metadata of some answering
    /// broker and by the leader's own (same leader, same epoch, no error).
    fn wait_for_leader(&self, topic: &str, partition: u32, not: Option<u32>) -> Leader {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            seen.clear();
            for asked in self.answering() {
                let found = self.partition_metadata(asked, topic, partition);
                seen.push((asked, found.clone()));
                let Some(found) = found else { continue };
                let Some(leader) = found.leader else { continue };
                if Some(leader) == not
                    || !self.answers(leader)
                    || error_code(found.error_code) != ErrorCode::None
                {
                    continue;
                }
                if let Some(own) = self.partition_metadata(leader, topic, partition)
                    && own.leader == Some(leader)
                    && own.leader_epoch == found.leader_epoch
                    && error_code(own.error_code) == ErrorCode::None
                {
                    return Leader {
                        id: leader,
                        epoch: found.leader_epoch,
                    };
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "no answering leader of {topic}/{partition} other than {not:?} within {PATIENCE:?}; answering brokers {:?}, their last metadata of it: {seen:?}",
            self.answering()
        );
    }

    /// Creates `name` with one partition on three replicas (retrying
    /// while brokers are not all unfenced yet), waits until every
    /// answering broker sees it on three replicas, and returns its first
    /// leader.
    fn create_replicated_topic(&self, name: &str) -> Leader {
        let request = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.to_owned(),
                partitions: 1,
                replication_factor: 3,
                configs: Vec::new(),
            }],
            timeout_ms: 10_000,
            validate_only: false,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let outcome = self.answering().into_iter().find_map(|id| {
                let mut client = self.client_with_timeout(id, Duration::from_secs(15))?;
                try_ask(&mut client, &request)
                    .ok()
                    .map(|response| error_code(response.results[0].error_code))
            });
            match outcome {
                Some(ErrorCode::None | ErrorCode::TopicAlreadyExists) => break,
                // Brokers just registered may not be unfenced yet: three
                // replicas fit once they are.
                Some(ErrorCode::InvalidReplicationFactor) => {}
                Some(refused) if !refused.is_retriable() => {
                    panic!("creating {name} with replication factor 3 was refused: {refused}")
                }
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "topic {name} was not created within {PATIENCE:?}: {outcome:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        for id in self.answering() {
            self.wait_metadata(id, "the topic on three replicas", |found| {
                found.topics.iter().any(|topic| {
                    topic.name == name
                        && topic.partitions.len() == 1
                        && topic.partitions[0].replicas.len() == 3
                })
            });
        }
        self.wait_for_leader(name, 0, None)
    }

    /// One produce request of `batch` to partition 0 of `topic` on broker
    /// `id`, which may wait `timeout_ms` for the quorum: the answer's code
    /// and base offset.
    ///
    /// # Errors
    /// The broker does not answer or the connection fails.
    fn produce_once(
        &self,
        id: u32,
        topic: &str,
        batch: &[u8],
        timeout_ms: u32,
    ) -> Result<(ErrorCode, i64), String> {
        let wait = Duration::from_millis(u64::from(timeout_ms)) + Duration::from_secs(5);
        let mut client = self
            .client_with_timeout(id, wait)
            .ok_or_else(|| format!("broker {id} does not answer"))?;
        let mut request = produce_request(topic, 0, batch.len());
        request.timeout_ms = timeout_ms;
        let body = client
            .call(&request, batch)
            .map_err(|error| format!("produce to broker {id}: {error}"))?;
        Ok(decode_produce(&body))
    }

    /// Produces `batch` to the current leader of partition 0 (not `not`),
    /// following leader changes and retrying retriable answers until it is
    /// appended: the leader and the base offset.
    ///
    /// # Errors
    /// A non-retriable answer.
    fn produce_to_leader(
        &self,
        topic: &str,
        batch: &[u8],
        not: Option<u32>,
    ) -> Result<(Leader, u64), ErrorCode> {
        let deadline = Instant::now() + PATIENCE;
        let mut last = String::new();
        while Instant::now() < deadline {
            let leader = self.wait_for_leader(topic, 0, not);
            match self.produce_once(leader.id, topic, batch, 5_000) {
                Ok((ErrorCode::None, offset)) => {
                    return Ok((leader, u64::try_from(offset).expect("a base offset")));
                }
                Ok((refused, _)) if !refused.is_retriable() => return Err(refused),
                Ok((refused, _)) => last = format!("broker {}: {refused}", leader.id),
                Err(error) => last = error,
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no append to {topic}/0 within {PATIENCE:?}; last answer: {last}");
    }

    /// The committed records of `topic/partition` on broker `id` from
    /// offset 0 up to its high watermark, each connection read giving up
    /// after `timeout`. Panics if the broker serves a damaged batch or a
    /// record at or above its high watermark: readers must see only
    /// committed records (C4).
    ///
    /// # Errors
    /// The broker does not answer, refuses the fetch, or stalls below its
    /// high watermark for [`PATIENCE`].
    fn read_partition(
        &self,
        id: u32,
        topic: &str,
        partition: u32,
        timeout: Duration,
    ) -> Result<PartitionLog, String> {
        let mut client = self
            .client_with_timeout(id, timeout)
            .ok_or_else(|| format!("broker {id} does not answer"))?;
        let mut out = Vec::new();
        let mut offset = 0;
        let deadline = Instant::now() + PATIENCE;
        loop {
            let body = client
                .call(&fetch_request(topic, partition, offset, 100), &[])
                .map_err(|error| format!("fetch from broker {id}: {error}"))?;
            let (response, raw) = match message::decode_response::<FetchResponse>(&body.bytes) {
                Ok(decoded) => decoded,
                Err(MessageError::TopLevelError {
                    error_code: code, ..
                }) => {
                    return Err(format!("fetch from broker {id}: {}", error_code(code)));
                }
                Err(error) => panic!("undecodable fetch response from broker {id}: {error}"),
            };
            let found = &response.topics[0].partitions[0];
            let refused = error_code(found.error_code.to_native());
            if refused != ErrorCode::None {
                return Err(format!(
                    "fetch of {topic}/{partition} at {offset} from broker {id}: {refused}"
                ));
            }
            let high_watermark = found.high_watermark.to_native();
            // A served batch that fails its CRC is the worst outcome:
            // panic at once, whatever else the test shows.
            let fetched = fetched_records(&Bytes::copy_from_slice(raw)).unwrap_or_else(|error| {
                panic!("broker {id} served {topic}/{partition} at {offset} damaged: {error}")
            });
            for (at, value) in fetched {
                assert!(
                    at < high_watermark,
                    "broker {id} served offset {at} of {topic}/{partition} at or above its high watermark {high_watermark}: readers must see only committed records (C4)"
                );
                if at >= offset {
                    out.push((at, value));
                }
            }
            offset = offset.max(found.next_offset.to_native());
            if offset >= high_watermark {
                return Ok(PartitionLog {
                    records: out,
                    high_watermark,
                });
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "reading {topic}/{partition} from broker {id} stalled at {offset} below the high watermark {high_watermark}"
                ));
            }
        }
    }

    /// Checks that every record of `acked` (by offset) reads back at its
    /// offset from the current leader of partition 0 of `topic`, waiting up
    /// to `patience` for the leader's high watermark to pass them; `what`
    /// names the change the records lived through.
    fn check_read_back(
        &self,
        topic: &str,
        acked: &BTreeMap<u64, String>,
        what: &str,
        patience: Duration,
    ) {
        let through = *acked.keys().next_back().expect("records acknowledged");
        let leader = self.wait_for_leader(topic, 0, None);
        let deadline = Instant::now() + patience;
        let stored = loop {
            match self.read_partition(leader.id, topic, 0, Duration::from_secs(3)) {
                Ok(PartitionLog {
                    records,
                    high_watermark,
                }) if high_watermark > through => break records,
                other => assert!(
                    Instant::now() < deadline,
                    "{topic}/0 not readable through {through} from broker {}: {:?}",
                    leader.id,
                    other.map(|log| log.high_watermark)
                ),
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let stored: BTreeMap<u64, String> = stored.into_iter().collect();
        for (offset, value) in acked {
            assert_eq!(
                stored.get(offset),
                Some(value),
                "acknowledged record {value} at offset {offset} after {what}"
            );
        }
    }

    /// Waits until every answering broker names the same leader of
    /// `topic/partition` and that leader reports nothing outstanding on
    /// its followers ([`Broker::replica_lag`] at 0): every replica holds
    /// the whole log. Metadata's `in_sync` cannot tell, it lists only the
    /// leader. Returns the leader.
    ///
    /// # Errors
    /// What was last seen, after [`PATIENCE`].
    fn wait_followers_caught_up(&self, topic: &str, partition: u32) -> Result<u32, String> {
        let deadline = Instant::now() + PATIENCE;
        let mut last = String::new();
        while Instant::now() < deadline {
            let leaders: std::collections::BTreeSet<Option<u32>> = self
                .answering()
                .into_iter()
                .map(|asked| {
                    self.partition_metadata(asked, topic, partition)
                        .and_then(|found| found.leader)
                })
                .collect();
            if let [Some(leader)] = leaders.iter().copied().collect::<Vec<_>>()[..] {
                let lag = self.broker(leader).replica_lag();
                if lag == Some(0) {
                    return Ok(leader);
                }
                last = format!("leader {leader}: followers lag {lag:?} records");
            } else {
                last = format!("leaders named: {leaders:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "followers of {topic}/{partition} did not catch up within {PATIENCE:?}: {last}"
        ))
    }
}

/// One producer appending to one partition at a steady pace on a client
/// runtime, keeping every acknowledged `(offset, value)` and every failure:
/// the load of the tests that change a cluster under it.
#[derive(Debug)]
pub struct SteadyProducer {
    acked: Arc<Mutex<Vec<(u64, String)>>>,
    failed: Arc<Mutex<Vec<(String, String)>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

/// What a [`SteadyProducer`] saw.
#[derive(Debug)]
pub struct SteadyOutcome {
    /// Records sent: `r-0` to `r-{sent - 1}`.
    pub sent: u64,
    /// Every acknowledged record's value, by offset (no offset was
    /// acknowledged for two values: [`SteadyProducer::finish`] checks).
    pub acked: BTreeMap<u64, String>,
    /// Every failed record's value and error.
    pub failed: Vec<(String, String)>,
}

impl SteadyProducer {
    /// Starts appending `r-0`, `r-1`, … to `partition` of `topic`, one
    /// record every `pause`, without waiting for acknowledgements.
    pub fn start(
        rt: &tokio::runtime::Runtime,
        producer: Producer,
        topic: &str,
        partition: u32,
        pause: Duration,
    ) -> SteadyProducer {
        let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
        let failed: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let topic = topic.to_owned();
        let task = {
            let (acked, failed, stop) = (acked.clone(), failed.clone(), stop.clone());
            rt.spawn(async move {
                let mut outcomes = Vec::new();
                let mut index = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    let value = format!("r-{index}");
                    index += 1;
                    let record =
                        ProducerRecord::new(topic.clone(), value.clone()).partition(partition);
                    match producer.send(record).await {
                        Ok(delivery) => {
                            let (acked, failed) = (acked.clone(), failed.clone());
                            outcomes.push(tokio::spawn(async move {
                                match delivery.await {
                                    Ok(done) => lock(&acked).push((done.offset.0, value)),
                                    Err(error) => lock(&failed).push((value, error.to_string())),
                                }
                            }));
                        }
                        Err(error) => lock(&failed).push((value, error.to_string())),
                    }
                    tokio::time::sleep(pause).await;
                }
                for outcome in outcomes {
                    let _ = outcome.await;
                }
                let _ = producer.close().await;
                index
            })
        };
        SteadyProducer {
            acked,
            failed,
            stop,
            task,
        }
    }

    /// Records acknowledged so far.
    pub fn acked_count(&self) -> usize {
        lock(&self.acked).len()
    }

    /// Records failed so far.
    pub fn failed_count(&self) -> usize {
        lock(&self.failed).len()
    }

    /// Waits until `count` records are acknowledged; panics with `what`
    /// and the first failures after `patience`.
    pub fn wait_acked(&self, count: usize, what: &str, patience: Duration) {
        let deadline = Instant::now() + patience;
        while self.acked_count() < count {
            assert!(
                Instant::now() < deadline,
                "{what}: {} of {count} acknowledged; failures: {:?}",
                self.acked_count(),
                lock(&self.failed).iter().take(5).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for `more` acknowledgements beyond those so far.
    pub fn wait_more(&self, more: usize, what: &str, patience: Duration) {
        self.wait_acked(self.acked_count() + more, what, patience);
    }

    /// Stops appending, waits for the outcome of every record sent, and
    /// returns them.
    ///
    /// # Panics
    /// If one offset was acknowledged for two records (C1).
    pub fn finish(self, rt: &tokio::runtime::Runtime) -> SteadyOutcome {
        self.stop.store(true, Ordering::Relaxed);
        let sent = rt.block_on(self.task).expect("the producer task ends");
        let mut acked = BTreeMap::new();
        for (offset, value) in lock(&self.acked).iter() {
            if let Some(other) = acked.insert(*offset, value.clone()) {
                panic!("offset {offset} was acknowledged for both {other} and {value} (C1)");
            }
        }
        SteadyOutcome {
            sent,
            acked,
            failed: lock(&self.failed).clone(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
