//! The producer: appends records to topic partitions and reports each
//! record's `(partition, offset)` once it is durable (C1).
//!
//! ```no_run
//! use corelog_client::{Producer, ProducerConfig, ProducerRecord};
//!
//! # async fn example() -> Result<(), corelog_client::ClientError> {
//! let producer = Producer::connect(ProducerConfig::new("127.0.0.1:7100")).await?;
//! // `send` waits for buffer space and returns a handle; awaiting the
//! // handle waits for the broker's acknowledgement (after its fsync).
//! let delivery = producer
//!     .send(ProducerRecord::new("orders", "order O51 paid").key("customer42").schema(3))
//!     .await?;
//! let delivered = delivery.await?;
//! println!("stored at {}/{} offset {}", delivered.topic, delivered.partition, delivered.offset);
//! producer.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # How records travel
//!
//! 1. [`Producer::send`] picks the partition ([`partition_for_key`] for a
//!    keyed record, a sticky partition for a keyless one), reserves buffer
//!    space and appends the record to the partition's open batch
//!    (`producer/accumulator.rs`).
//! 2. A batch may be sent once full (`batch_bytes`) or after `linger`;
//!    until the sender takes it (its partition's in-flight window may be
//!    full), a lingered batch keeps taking records. The
//!    sender task takes ready batches in order, stamps the idempotent
//!    producer id and sequence, encodes and compresses them, and sends them
//!    to each partition's leader, one batch per partition per request, up to
//!    `max_in_flight_per_partition` batches per partition at once
//!    (`producer/sender.rs`, `producer/inflight.rs`).
//! 3. A retriable failure resends the same bytes after a backoff, in
//!    sequence order, until `delivery_timeout`; the broker recognises a
//!    resend of an appended batch and answers with the original offset, so
//!    retries never duplicate. Leader errors refresh metadata first.
//!
//! # Sequence failures
//!
//! When the broker reports a real sequence gap (`OUT_OF_ORDER_SEQUENCE` for
//! a batch all of whose predecessors were acknowledged), a conflicting
//! payload (`DUPLICATE_SEQUENCE_CONFLICT`) or a forgotten producer
//! (`UNKNOWN_PRODUCER_ID`, likewise only when every predecessor was
//! acknowledged: before that, the leader may just not hold the producer's
//! first batch yet, and the batch is resent after it), the producer fails
//! that batch with the broker's error, fails the partition's other unacknowledged batches with
//! [`ClientError::Aborted`], waits until nothing is in flight anywhere, and
//! continues under a new producer id (sequences restart at 0). Nothing is
//! resent under the new id automatically: a failed record was not
//! acknowledged, and whether to send it again is the application's call.
//! `INVALID_PRODUCER_EPOCH` (a newer producer with the same id) closes the
//! producer: every pending record fails and later sends are refused.

pub(crate) mod accumulator;
pub(crate) mod inflight;
mod partitioner;
pub(crate) mod sender;
pub(crate) mod window;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_wire::batch::{Compression, Header, NewRecord, SchemaVersion};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::init_producer_id::InitProducerIdRequest;
use corelog_wire::message::produce::Acks;
use corelog_wire::types::{Offset, TimestampMs};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use self::accumulator::{Accumulator, AccumulatorConfig, Target, check_record, record_size};
pub use self::partitioner::partition_for_key;
use crate::cluster::Cluster;
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::metadata::ClusterMetadata;

/// Producer settings. [`ProducerConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// Where the cluster is.
    pub client: ClientConfig,
    /// When the broker acknowledges (C1). Default `Quorum`.
    pub acks: Acks,
    /// How long a batch waits for more records before it may be sent; it
    /// keeps growing (up to `batch_bytes`) while its partition already has
    /// `max_in_flight_per_partition` batches in flight. Default 5 ms.
    pub linger: Duration,
    /// A batch closes when the next record would take it past this size.
    /// Default 64 KiB.
    pub batch_bytes: usize,
    /// Bytes of records buffered and in flight, in all. `send` waits when
    /// it is full; `try_send` fails. Default 32 MiB.
    pub buffer_bytes: usize,
    /// Largest single record. Default 1 MiB (the broker's batch limit is
    /// 4 MiB by default).
    pub record_bytes_max: usize,
    /// Largest produce request; more batches wait for the next request.
    /// Default 8 MiB (the broker's frame limit is 16 MiB by default).
    pub request_bytes_max: usize,
    /// Codec for batches. Default none.
    pub compression: Compression,
    /// Idempotent produce (C5): retries never duplicate and per-partition
    /// order survives retries. Default on.
    pub idempotence: bool,
    /// Batches in flight per partition. At most 5 with idempotence. Default 5.
    pub max_in_flight_per_partition: usize,
    /// Produce requests in flight per broker shard, at most. The producer
    /// keeps fewer while the broker pushes back (an AIMD window: halved on
    /// a throttle, an append timed out in the broker or an answer slower
    /// than a second and far slower than usual; grown by one per window of
    /// prompt answers), and
    /// the records it holds back wait in the buffer, batched. Default 16.
    pub max_in_flight_requests: usize,
    /// First retry backoff; doubles per attempt up to `retry_backoff_max`.
    /// Default 100 ms.
    pub retry_backoff: Duration,
    /// Longest retry backoff. Default 1 s.
    pub retry_backoff_max: Duration,
    /// Longest time from a record's batch opening to its acknowledgement;
    /// past it the record fails with [`ClientError::DeliveryTimeout`]
    /// ([`ClientError::BufferTimeout`] if it was never sent).
    /// Default 120 s.
    pub delivery_timeout: Duration,
    /// How long `send` waits for a topic the brokers do not know yet
    /// before it fails with `UNKNOWN_TOPIC_OR_PARTITION`: a topic just
    /// created reaches every broker's metadata moments after its creation
    /// was answered, and a producer that starts then must not fail its
    /// first records. Default 5 s, at most `delivery_timeout`; zero fails
    /// at once.
    pub topic_wait: Duration,
    /// How long the broker may wait for the acknowledgement condition
    /// before answering `REQUEST_TIMED_OUT` (sent in the request). Below
    /// the client's `request_timeout`, so that the broker's answer comes
    /// before the client gives up on the connection. Default 20 s.
    pub ack_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> ProducerConfig {
        ProducerConfig {
            client: ClientConfig::default(),
            acks: Acks::Quorum,
            linger: Duration::from_millis(5),
            batch_bytes: 64 * 1024,
            buffer_bytes: 32 << 20,
            record_bytes_max: 1 << 20,
            request_bytes_max: 8 << 20,
            compression: Compression::None,
            idempotence: true,
            max_in_flight_per_partition: 5,
            max_in_flight_requests: 16,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            delivery_timeout: Duration::from_secs(120),
            topic_wait: Duration::from_secs(5),
            ack_timeout: Duration::from_secs(20),
        }
    }
}

impl ProducerConfig {
    /// Defaults, with one bootstrap address.
    #[must_use]
    pub fn new(bootstrap: impl Into<String>) -> ProducerConfig {
        ProducerConfig {
            client: ClientConfig::new(bootstrap),
            ..ProducerConfig::default()
        }
    }

    /// Checks the settings against each other.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), ClientError> {
        self.client.validate()?;
        let invalid = |text: &str| Err(ClientError::InvalidConfig(text.to_owned()));
        if self.batch_bytes < 1024 || self.batch_bytes > self.request_bytes_max {
            return invalid("batch_bytes must be between 1 KiB and request_bytes_max");
        }
        if self.record_bytes_max > self.buffer_bytes
            || self.record_bytes_max > self.request_bytes_max
        {
            return invalid("record_bytes_max must fit in buffer_bytes and request_bytes_max");
        }
        if u32::try_from(self.buffer_bytes).is_err() {
            return invalid("buffer_bytes must be below 4 GiB");
        }
        let in_flight_max = if self.idempotence { 5 } else { 64 };
        if self.max_in_flight_per_partition == 0 || self.max_in_flight_per_partition > in_flight_max
        {
            return invalid(
                "max_in_flight_per_partition must be 1 to 5 with idempotence (the broker remembers 5 batches per producer)",
            );
        }
        if self.max_in_flight_requests == 0 {
            return invalid("max_in_flight_requests must be at least 1");
        }
        if self.delivery_timeout < self.client.request_timeout + self.linger {
            return invalid("delivery_timeout must be at least request_timeout + linger");
        }
        if self.retry_backoff.is_zero() || self.retry_backoff_max < self.retry_backoff {
            return invalid("retry_backoff must be positive and at most retry_backoff_max");
        }
        if self.ack_timeout >= self.client.request_timeout {
            return invalid("ack_timeout must be below the client's request_timeout");
        }
        Ok(())
    }
}

/// A record to send: its topic, optionally its partition, and the record.
#[derive(Clone, Debug)]
pub struct ProducerRecord {
    /// Topic.
    pub topic: String,
    /// Partition; `None` to choose by key (or sticky, without a key).
    pub partition: Option<u32>,
    /// Routing key (C3).
    pub key: Option<Bytes>,
    /// Payload.
    pub value: Option<Bytes>,
    /// Application headers (`schema` is reserved: use `schema`).
    pub headers: Vec<Header>,
    /// Creation time; `None` for now.
    pub timestamp: Option<TimestampMs>,
    /// Schema version of the payload (C12).
    pub schema: Option<SchemaVersion>,
}

impl ProducerRecord {
    /// A record with a value and nothing else set.
    #[must_use]
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into(),
            partition: None,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
            timestamp: None,
            schema: None,
        }
    }

    /// Sets the key.
    #[must_use]
    pub fn key(mut self, key: impl Into<Bytes>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }

    /// Sends to this partition instead of choosing one.
    #[must_use]
    pub fn partition(mut self, partition: u32) -> ProducerRecord {
        self.partition = Some(partition);
        self
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        self.headers.push(Header {
            key: key.into(),
            value: Some(value.into()),
        });
        self
    }

    /// Sets the creation time.
    #[must_use]
    pub fn timestamp(mut self, timestamp: TimestampMs) -> ProducerRecord {
        self.timestamp = Some(timestamp);
        self
    }

    /// Sets the payload's schema version (C12).
    #[must_use]
    pub fn schema(mut self, version: u32) -> ProducerRecord {
        self.schema = Some(SchemaVersion(version));
        self
    }

    fn into_parts(self) -> (String, Option<u32>, NewRecord) {
        let record = NewRecord {
            key: self.key,
            value: self.value,
            headers: self.headers,
            timestamp: self.timestamp.unwrap_or_else(now_ms),
            schema: self.schema,
        };
        (self.topic, self.partition, record)
    }
}

fn now_ms() -> TimestampMs {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis());
    TimestampMs(i64::try_from(millis).unwrap_or(i64::MAX))
}

/// Where an acknowledged record was stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: u32,
    /// The record's offset.
    pub offset: Offset,
    /// The record's timestamp (the broker's append time if the topic uses
    /// it).
    pub timestamp: TimestampMs,
}

/// Resolves to the record's [`Delivery`] once the broker acknowledged it,
/// or to the error that ended its delivery. Dropping it does not cancel the
/// delivery.
#[derive(Debug)]
#[must_use = "a delivery handle tells whether the record was stored"]
pub struct DeliveryFuture {
    receiver: oneshot::Receiver<Result<Delivery, ClientError>>,
}

impl DeliveryFuture {
    pub(crate) fn new(receiver: oneshot::Receiver<Result<Delivery, ClientError>>) -> Self {
        DeliveryFuture { receiver }
    }
}

impl Future for DeliveryFuture {
    type Output = Result<Delivery, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.receiver).poll(cx).map(|result| {
            result.unwrap_or_else(|_| {
                Err(ClientError::ProducerClosed {
                    reason: Some("the producer stopped before the record completed".to_owned()),
                })
            })
        })
    }
}

/// Shared by every clone of a producer; closing happens when the last one
/// goes.
struct ProducerInner {
    cluster: Arc<Cluster>,
    accumulator: Arc<Accumulator>,
    config: ProducerConfig,
    sender: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for ProducerInner {
    fn drop(&mut self) {
        // The sender drains what is buffered, then stops.
        self.accumulator.close(None);
    }
}

/// An idempotent producer. Cheap to clone and usable from many tasks at
/// once; records sent from one task to one partition keep their order.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<ProducerInner>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("bootstrap", &self.inner.config.client.bootstrap)
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// How often, and for how long, brokers throttled this client for
    /// going over its principal's quota (shared by every producer,
    /// consumer and admin of one client).
    #[must_use]
    pub fn throttle_stats(&self) -> crate::ThrottleStats {
        self.inner.cluster.throttles.stats()
    }

    /// Connects, obtains a producer id (with idempotence) and starts the
    /// sender task. Needs a tokio runtime.
    ///
    /// With idempotence, a producer id comes from the controller: while
    /// it has no leader (an election, or a lost quorum) the request is
    /// retried until `delivery_timeout`, as a send would be.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`], connection errors, or the broker's
    /// refusal of InitProducerId (after retrying through the delivery
    /// timeout when it is retriable).
    pub async fn connect(config: ProducerConfig) -> Result<Producer, ClientError> {
        config.validate()?;
        let cluster = Cluster::connect(config.client.clone()).await?;
        let producer_id = if config.idempotence {
            Some(init_producer_id_retrying(&cluster, &config).await?)
        } else {
            None
        };
        let accumulator = Arc::new(Accumulator::new(AccumulatorConfig {
            linger: config.linger,
            batch_bytes: config.batch_bytes,
            buffer_bytes: config.buffer_bytes,
            compression: config.compression,
        }));
        let task = sender::Sender::new(
            Arc::clone(&cluster),
            Arc::clone(&accumulator),
            config.clone(),
            producer_id,
        );
        let handle = tokio::spawn(task.run());
        Ok(Producer {
            inner: Arc::new(ProducerInner {
                cluster,
                accumulator,
                config,
                sender: Mutex::new(Some(handle)),
            }),
        })
    }

    /// Fetches the metadata of `topic` so that [`Producer::try_send`] can
    /// route records to it.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION` if the topic does not exist; connection
    /// errors.
    pub async fn prepare_topic(&self, topic: &str) -> Result<u32, ClientError> {
        let metadata = self.topic_metadata(topic).await?;
        Ok(metadata.topic(topic)?.partition_count())
    }

    /// The topic's metadata, from the cache or a broker. A lookup that
    /// fails in transport (a broker restarting, a dropped connection, a
    /// timeout) is retried with the producer's backoff until the delivery
    /// timeout, as a batch would be: the record has no delivery handle yet
    /// to report such a failure on. A topic the broker does not know is
    /// looked up again until `topic_wait` (it may have been created a
    /// moment ago); other answers from a broker return at once.
    async fn topic_metadata(&self, topic: &str) -> Result<Arc<ClusterMetadata>, ClientError> {
        let config = &self.inner.config;
        let started = Instant::now();
        let deadline = started + config.delivery_timeout;
        let topic_deadline = started + config.topic_wait.min(config.delivery_timeout);
        let mut backoff = config.retry_backoff;
        loop {
            let outcome = self.inner.cluster.topic_metadata(topic).await;
            let retry_until = match &outcome {
                Err(error) if is_transport_failure(error) => deadline,
                Err(error) if error.code() == Some(ErrorCode::UnknownTopicOrPartition) => {
                    topic_deadline
                }
                _ => return outcome,
            };
            if Instant::now() + backoff >= retry_until {
                return outcome;
            }
            if let Err(error) = &outcome {
                tracing::debug!(topic, %error, ?backoff, "metadata lookup failed; retrying");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(config.retry_backoff_max);
        }
    }

    /// Buffers a record, waiting for buffer space and for the topic's
    /// metadata if needed, and returns its delivery handle.
    ///
    /// # Errors
    /// [`ClientError::RecordTooLarge`], [`ClientError::InvalidArgument`]
    /// (a header named `schema`), [`ClientError::UnknownPartition`],
    /// `UNKNOWN_TOPIC_OR_PARTITION`, [`ClientError::ProducerClosed`]; a
    /// transport error such as [`ClientError::ConnectionLost`] only when
    /// the topic's metadata could not be looked up for `delivery_timeout`.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        let (topic, partition, record) = record.into_parts();
        let size = self.check(&record)?;
        let metadata = self.topic_metadata(&topic).await?;
        let target = target(&metadata, &topic, partition, record.key.as_deref())?;
        self.inner.accumulator.reserve(size).await?;
        let topic: Arc<str> = Arc::from(topic);
        let (_, delivery) = self
            .inner
            .accumulator
            .append(&topic, target, &record, size)?;
        Ok(delivery)
    }

    /// Buffers a record without waiting.
    ///
    /// # Errors
    /// [`ClientError::BufferFull`] when the buffer is full,
    /// [`ClientError::MetadataNotReady`] when the topic's metadata is not
    /// cached (see [`Producer::prepare_topic`]); otherwise as
    /// [`Producer::send`].
    pub fn try_send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        let (topic, partition, record) = record.into_parts();
        let size = self.check(&record)?;
        let metadata = self.inner.cluster.metadata();
        if !metadata.topics.contains_key(&topic) {
            return Err(ClientError::MetadataNotReady { topic });
        }
        let target = target(&metadata, &topic, partition, record.key.as_deref())?;
        self.inner.accumulator.try_reserve(size)?;
        let topic: Arc<str> = Arc::from(topic);
        let (_, delivery) = self
            .inner
            .accumulator
            .append(&topic, target, &record, size)?;
        Ok(delivery)
    }

    fn check(&self, record: &NewRecord) -> Result<usize, ClientError> {
        if let Some(error) = self.inner.accumulator.closed_error() {
            return Err(error);
        }
        check_record(record)?;
        let size = record_size(record);
        let max = self.inner.config.record_bytes_max;
        if size > max {
            return Err(ClientError::RecordTooLarge { bytes: size, max });
        }
        Ok(size)
    }

    /// Sends every buffered record now and waits until each record sent
    /// before this call has completed (acknowledged or failed; the outcome
    /// of each is on its own handle).
    pub async fn flush(&self) {
        for mut marker in self.inner.accumulator.flush_markers() {
            // The marker's sender is dropped when its batch completes.
            while marker.changed().await.is_ok() {}
        }
    }

    /// Refuses new records, delivers every buffered one, and stops the
    /// sender. Affects every clone of this producer.
    ///
    /// # Errors
    /// [`ClientError::ProducerClosed`] if the sender task had stopped
    /// abnormally (a panic, which would be a bug).
    pub async fn close(&self) -> Result<(), ClientError> {
        self.inner.accumulator.close(None);
        self.flush().await;
        let handle = self
            .inner
            .sender
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            handle.await.map_err(|error| ClientError::ProducerClosed {
                reason: Some(format!("the sender task failed: {error}")),
            })?;
        }
        Ok(())
    }

    /// Free bytes in the producer's buffer.
    #[must_use]
    pub fn buffer_available_bytes(&self) -> usize {
        self.inner.accumulator.available_bytes()
    }
}

/// Chooses how a record is routed: an explicit partition (checked), the
/// key's partition (C3), or the sticky partition.
fn target(
    metadata: &crate::metadata::ClusterMetadata,
    topic: &str,
    partition: Option<u32>,
    key: Option<&[u8]>,
) -> Result<Target, ClientError> {
    let partition_count = metadata.topic(topic)?.partition_count();
    if partition_count == 0 {
        return Err(ClientError::Broker {
            code: ErrorCode::LeaderNotAvailable,
            context: format!("topic {topic} has no partitions in the metadata"),
            detail: None,
        });
    }
    Ok(match (partition, key) {
        (Some(partition), _) if partition >= partition_count => {
            return Err(ClientError::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                partition_count,
            });
        }
        (Some(partition), _) => Target::Partition(partition),
        (None, Some(key)) => Target::Partition(partition_for_key(key, partition_count)),
        (None, None) => Target::Sticky { partition_count },
    })
}

/// Obtains a producer id, retrying what is retriable (no controller
/// leader, a broker unreachable) with backoff until the delivery timeout;
/// then fails saying what was tried and why.
async fn init_producer_id_retrying(
    cluster: &Cluster,
    config: &ProducerConfig,
) -> Result<(i64, i16), ClientError> {
    let started = tokio::time::Instant::now();
    let deadline = started + config.delivery_timeout;
    let mut backoff = config.retry_backoff;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let error = match init_producer_id(cluster).await {
            Ok(producer) => return Ok(producer),
            Err(error) => error,
        };
        let retriable = error.is_retriable() || is_transport_failure(&error);
        if !retriable || tokio::time::Instant::now() + backoff >= deadline {
            if !retriable {
                return Err(error);
            }
            return Err(ClientError::ProducerIdUnavailable {
                waited: started.elapsed(),
                attempts,
                source: Box::new(error),
            });
        }
        tracing::info!(%error, attempts, "no producer id yet; retrying until the delivery timeout");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(config.retry_backoff_max);
    }
}

/// Obtains a new producer id and epoch.
///
/// # Errors
/// Connection errors and the broker's refusal.
pub(crate) async fn init_producer_id(cluster: &Cluster) -> Result<(i64, i16), ClientError> {
    let connection = cluster.any_connection().await?;
    let request = InitProducerIdRequest {
        transactional_id: None,
        producer_id: -1,
        producer_epoch: -1,
    };
    let reply = connection
        .call(&request, Vec::new(), Duration::ZERO)
        .await?;
    let (response, _) = reply.decode()?;
    let producer_id = response.producer_id.to_native();
    let producer_epoch = response.producer_epoch.to_native();
    if producer_id < 0 || producer_epoch < 0 {
        return Err(ClientError::Protocol {
            addr: reply.addr().to_owned(),
            detail: format!("InitProducerId returned id {producer_id} epoch {producer_epoch}"),
        });
    }
    Ok((producer_id, producer_epoch))
}

/// Whether `error` is a failure to reach a broker or to hear back from it,
/// rather than an answer.
fn is_transport_failure(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Connect { .. }
            | ClientError::Resolve { .. }
            | ClientError::ConnectTimeout { .. }
            | ClientError::HandshakeTimeout { .. }
            | ClientError::ConnectionLost { .. }
            | ClientError::RequestTimeout { .. }
    )
}
