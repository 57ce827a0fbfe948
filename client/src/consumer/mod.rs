//! The consumer: reads assigned partitions from chosen positions with
//! long-polling fetches (C4), and reports gaps left by retention explicitly
//! (C7).
//!
//! ```no_run
//! use corelog_client::{Consumer, ConsumerConfig, Notice, StartFrom};
//!
//! # async fn example() -> Result<(), corelog_client::ClientError> {
//! let mut consumer = Consumer::connect(ConsumerConfig::new("127.0.0.1:7100")).await?;
//! consumer.assign_topic("orders", StartFrom::Earliest).await?;
//! loop {
//!     let polled = consumer.poll().await?;
//!     for notice in &polled.notices {
//!         eprintln!("{notice}");
//!     }
//!     for record in &polled.records {
//!         println!("{}/{}@{}: {:?} (schema {:?})",
//!             record.topic, record.partition, record.offset, record.value, record.schema);
//!     }
//! }
//! # }
//! ```
//!
//! This consumer reads the partitions the application assigns and keeps
//! positions itself ([`Consumer::position`], [`Consumer::seek`]). For a
//! consumer group with durable committed offsets, see
//! [`GroupConsumer`](crate::group::GroupConsumer), which is built on it.
//!
//! # When the position is no longer in the log
//!
//! Retention may delete records before they are read. A fetch below the log
//! start answers `OFFSET_OUT_OF_RANGE` with what was deleted ([`GapInfo`]).
//! The consumer never moves past that silently; the caller picks the policy
//! ([`OffsetOutOfRangePolicy`]):
//! - `Error` (the default): `poll` fails with
//!   [`ClientError::OffsetOutOfRange`] carrying the gap, and no position
//!   moves; the caller may [`Consumer::seek`] and poll again.
//! - `ResetToEarliest`: the position jumps to the log start and `poll`
//!   returns a [`Notice::OffsetReset`] describing the jump and the gap.
//!
//! An offset above the high watermark is out of range too; the broker then
//! sends no deletion record, and `ResetToEarliest` also moves to the log
//! start.

mod fetch;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::batch::{BatchLimits, Header, SchemaVersion};
use corelog_wire::message::fetch::{FetchPartition, FetchRequest, FetchTopic};
use corelog_wire::message::list_offsets::OffsetSpec;
use corelog_wire::types::{Offset, TimestampMs};
use tokio::time::Instant;

pub use crate::gap::{DeletedRange, DeletionCause, GapInfo};

use self::fetch::{
    InflationBudget, PartitionAnswer, PartitionOutcome, most_common_shard, partition_outcome,
};
use crate::cluster::Cluster;
use crate::config::ClientConfig;
use crate::error::ClientError;

/// What to do when the position is outside the log; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OffsetOutOfRangePolicy {
    /// `poll` fails with [`ClientError::OffsetOutOfRange`].
    #[default]
    Error,
    /// Jump to the log start and report it with [`Notice::OffsetReset`].
    ResetToEarliest,
}

/// Where a newly assigned partition starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// The oldest record still stored.
    Earliest,
    /// The next record to be written: only new records.
    Latest,
    /// This offset.
    Offset(Offset),
    /// The first record whose timestamp is at or after this time; the
    /// latest position when there is none.
    Timestamp(TimestampMs),
}

/// Consumer settings. [`ConsumerConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// Where the cluster is.
    pub client: ClientConfig,
    /// Longest time the broker holds a fetch waiting for records. Default
    /// 500 ms.
    pub fetch_max_wait: Duration,
    /// The broker answers as soon as this many bytes are available.
    /// Default 1.
    pub fetch_min_bytes: u32,
    /// Most bytes of records in one fetch response. Default 16 MiB.
    pub fetch_max_bytes: u32,
    /// Most bytes of records per partition in one response (at least one
    /// batch is always returned). Default 1 MiB.
    pub partition_max_bytes: u32,
    /// What to do when the position is out of range. Default `Error`.
    pub offset_out_of_range: OffsetOutOfRangePolicy,
    /// Bounds on batches read (C9).
    pub batch_limits: BatchLimits,
    /// Most bytes one fetch decompresses (C9). The first batch of a fetch
    /// is always decoded; after that, batches are decompressed only while
    /// this budget lasts, and the rest are fetched again by the next poll.
    /// So a poll holds at most this plus one batch
    /// (`batch_limits.decompressed_bytes_max`) of decompressed records per
    /// leader, however far a producer's batches inflate. Default 64 MiB.
    pub fetch_decompressed_bytes_max: usize,
    /// Wait before fetching a partition again after a retriable error.
    /// Default 100 ms.
    pub retry_backoff: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> ConsumerConfig {
        ConsumerConfig {
            client: ClientConfig::default(),
            fetch_max_wait: Duration::from_millis(500),
            fetch_min_bytes: 1,
            fetch_max_bytes: 16 << 20,
            partition_max_bytes: 1 << 20,
            offset_out_of_range: OffsetOutOfRangePolicy::Error,
            batch_limits: BatchLimits::default(),
            fetch_decompressed_bytes_max: 64 << 20,
            retry_backoff: Duration::from_millis(100),
        }
    }
}

impl ConsumerConfig {
    /// Defaults, with one bootstrap address.
    #[must_use]
    pub fn new(bootstrap: impl Into<String>) -> ConsumerConfig {
        ConsumerConfig {
            client: ClientConfig::new(bootstrap),
            ..ConsumerConfig::default()
        }
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), ClientError> {
        self.client.validate()?;
        if self.fetch_max_bytes == 0
            || self.partition_max_bytes == 0
            || self.fetch_decompressed_bytes_max == 0
        {
            return Err(ClientError::InvalidConfig(
                "fetch byte limits must be positive".to_owned(),
            ));
        }
        // A response carries the records plus a small archive.
        if u64::from(self.fetch_max_bytes) + (1 << 20) > u64::from(self.client.max_response_bytes) {
            return Err(ClientError::InvalidConfig(
                "fetch_max_bytes must be at least 1 MiB below max_response_bytes".to_owned(),
            ));
        }
        if u32::try_from(self.fetch_max_wait.as_millis()).is_err() {
            return Err(ClientError::InvalidConfig(
                "fetch_max_wait is too long".to_owned(),
            ));
        }
        Ok(())
    }
}

/// A record read from a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: u32,
    /// Offset in the partition.
    pub offset: Offset,
    /// Creation time (or append time, for topics that use it).
    pub timestamp: TimestampMs,
    /// Key.
    pub key: Option<Bytes>,
    /// Payload.
    pub value: Option<Bytes>,
    /// Application headers.
    pub headers: Vec<Header>,
    /// Schema version of the payload (C12).
    pub schema: Option<SchemaVersion>,
}

/// Something the caller should know about that is not a record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// The position was out of range and moved to the log start
    /// ([`OffsetOutOfRangePolicy::ResetToEarliest`]).
    OffsetReset {
        /// Topic.
        topic: Arc<str>,
        /// Partition.
        partition: u32,
        /// The position before the jump.
        from: Offset,
        /// The position after it.
        to: Offset,
        /// What the broker said about the records skipped.
        gap: GapInfo,
    },
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::OffsetReset {
                topic,
                partition,
                from,
                to,
                gap,
            } => write!(
                f,
                "{topic}/{partition}: position reset from {from} to {to}: {gap}"
            ),
        }
    }
}

/// What one [`Consumer::poll`] returned.
#[derive(Clone, Debug, Default)]
pub struct Polled {
    /// Records, in offset order within each partition.
    pub records: Vec<ConsumerRecord>,
    /// Position jumps and other notices, to be shown or logged.
    pub notices: Vec<Notice>,
}

/// One assigned partition.
#[derive(Clone, Debug)]
struct Assignment {
    start: StartFrom,
    position: Option<Offset>,
    high_watermark: Option<Offset>,
    log_start_offset: Option<Offset>,
    not_before: Option<Instant>,
    /// Not fetched while set ([`Consumer::pause`]).
    paused: bool,
}

type Key = (Arc<str>, u32);

/// A partition a poll fetches: where from, and what the metadata says of
/// its leader.
struct Wanted {
    key: Key,
    position: Offset,
    /// The leader's shard that owns the partition.
    shard: u16,
    /// The leader epoch the fetch names, so that a broker whose metadata
    /// differs fences it (C11) rather than serving it.
    leader_epoch: Option<u32>,
}

/// A consumer of assigned partitions. Not shared: one task owns it.
pub struct Consumer {
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    assignments: BTreeMap<Key, Assignment>,
    /// Fetches made, to rotate which partition a fetch decodes first:
    /// once its decompression budget is spent the others wait, and none
    /// may wait for ever.
    fetches: AtomicUsize,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("assignments", &self.assignments.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// How often, and for how long, brokers throttled this consumer's
    /// fetches for going over its principal's quota.
    #[must_use]
    pub fn throttle_stats(&self) -> crate::ThrottleStats {
        self.cluster.throttles.stats()
    }

    /// Connects to the cluster.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] or connection errors.
    pub async fn connect(config: ConsumerConfig) -> Result<Consumer, ClientError> {
        config.validate()?;
        let cluster = Cluster::connect(config.client.clone()).await?;
        Ok(Consumer {
            cluster,
            config,
            assignments: BTreeMap::new(),
            fetches: AtomicUsize::new(0),
        })
    }

    /// The connections and metadata this consumer uses, for the group
    /// consumer built on it.
    pub(crate) fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Assigns every partition of a topic, starting at `start`, and returns
    /// the partitions.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION` if the topic does not exist; connection
    /// errors.
    pub async fn assign_topic(
        &mut self,
        topic: &str,
        start: StartFrom,
    ) -> Result<Vec<u32>, ClientError> {
        let metadata = self.cluster.topic_metadata(topic).await?;
        let partitions: Vec<u32> = metadata
            .topic(topic)?
            .partitions
            .iter()
            .map(|partition| partition.partition)
            .collect();
        for &partition in &partitions {
            self.assign(topic, partition, start);
        }
        Ok(partitions)
    }

    /// Assigns chosen partitions of a topic, checking that they exist.
    ///
    /// # Errors
    /// [`ClientError::UnknownPartition`] for a partition the topic does not
    /// have; as [`Consumer::assign_topic`] otherwise.
    pub async fn assign_partitions(
        &mut self,
        topic: &str,
        partitions: &[u32],
        start: StartFrom,
    ) -> Result<(), ClientError> {
        let metadata = self.cluster.topic_metadata(topic).await?;
        let topic_metadata = metadata.topic(topic)?;
        for &partition in partitions {
            if topic_metadata.partition(partition).is_none() {
                return Err(ClientError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    partition_count: topic_metadata.partition_count(),
                });
            }
        }
        for &partition in partitions {
            self.assign(topic, partition, start);
        }
        Ok(())
    }

    /// Assigns one partition without checking it; the start position is
    /// looked up on the next poll. Re-assigning moves the position.
    pub fn assign(&mut self, topic: &str, partition: u32, start: StartFrom) {
        let position = match start {
            StartFrom::Offset(offset) => Some(offset),
            _ => None,
        };
        self.assignments.insert(
            (Arc::from(topic), partition),
            Assignment {
                start,
                position,
                high_watermark: None,
                log_start_offset: None,
                not_before: None,
                paused: false,
            },
        );
    }

    /// Stops reading a partition.
    pub fn unassign(&mut self, topic: &str, partition: u32) {
        self.assignments.remove(&(Arc::from(topic), partition));
    }

    /// Moves a partition's position; the same as assigning it again, except
    /// that a paused partition stays paused.
    pub fn seek(&mut self, topic: &str, partition: u32, start: StartFrom) {
        let paused = self.is_paused(topic, partition);
        self.assign(topic, partition, start);
        if paused {
            self.pause(topic, partition);
        }
    }

    /// Stops fetching a partition without forgetting its position, for
    /// example while the application cannot take more of its records.
    /// Does nothing for a partition that is not assigned.
    pub fn pause(&mut self, topic: &str, partition: u32) {
        if let Some(assignment) = self.assignments.get_mut(&(Arc::from(topic), partition)) {
            assignment.paused = true;
        }
    }

    /// Fetches a paused partition again.
    pub fn resume(&mut self, topic: &str, partition: u32) {
        if let Some(assignment) = self.assignments.get_mut(&(Arc::from(topic), partition)) {
            assignment.paused = false;
        }
    }

    /// Whether a partition is paused.
    #[must_use]
    pub fn is_paused(&self, topic: &str, partition: u32) -> bool {
        self.assignments
            .get(&(Arc::from(topic), partition))
            .is_some_and(|assignment| assignment.paused)
    }

    /// The assigned partitions.
    #[must_use]
    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.assignments
            .keys()
            .map(|(topic, partition)| (topic.to_string(), *partition))
            .collect()
    }

    /// The offset the next record of a partition will have; `None` before
    /// the start position was looked up.
    #[must_use]
    pub fn position(&self, topic: &str, partition: u32) -> Option<Offset> {
        self.assignments
            .get(&(Arc::from(topic), partition))
            .and_then(|assignment| assignment.position)
    }

    /// The partition's high watermark as of the last fetch.
    #[must_use]
    pub fn high_watermark(&self, topic: &str, partition: u32) -> Option<Offset> {
        self.assignments
            .get(&(Arc::from(topic), partition))
            .and_then(|assignment| assignment.high_watermark)
    }

    /// Whether every assigned partition's position has reached its high
    /// watermark as of the last fetch: nothing more to read for now. Paused
    /// partitions count too.
    #[must_use]
    pub fn caught_up(&self) -> bool {
        self.assignments.values().all(|assignment| {
            matches!((assignment.position, assignment.high_watermark),
                (Some(position), Some(high_watermark)) if position >= high_watermark)
        })
    }

    /// Fetches from every assigned partition once, waiting up to
    /// `fetch_max_wait` for records, and returns what arrived (possibly
    /// nothing). Positions move past the returned records.
    ///
    /// # Errors
    /// [`ClientError::OffsetOutOfRange`] under the `Error` policy,
    /// [`ClientError::CorruptBatch`], non-retriable broker errors, and
    /// connection errors (retriable: poll again). On error no position
    /// moves and no record is lost.
    ///
    /// Cancel-safe in the same sense: dropping the future (for example in
    /// a `select!` with a timeout) loses the records of that fetch but
    /// moves no position, so the next poll reads them again.
    pub async fn poll(&mut self) -> Result<Polled, ClientError> {
        self.resolve_positions().await?;
        let now = Instant::now();
        let metadata = self.metadata_with_leaders().await;
        let mut by_leader: BTreeMap<u32, Vec<Wanted>> = BTreeMap::new();
        for (key, assignment) in &self.assignments {
            let Some(position) = assignment.position else {
                continue;
            };
            if assignment.paused || assignment.not_before.is_some_and(|at| at > now) {
                continue;
            }
            if let Some((leader, shard)) = metadata.leader_shard(&key.0, key.1) {
                by_leader.entry(leader).or_default().push(Wanted {
                    key: key.clone(),
                    position,
                    shard,
                    leader_epoch: metadata.leader_epoch(&key.0, key.1),
                });
            }
        }
        if by_leader.is_empty() {
            // Nothing can be fetched now; do not spin.
            tokio::time::sleep(self.config.retry_backoff.min(self.config.fetch_max_wait)).await;
            return Ok(Polled::default());
        }
        let this = &*self;
        let fetches = by_leader
            .into_iter()
            .map(|(leader, partitions)| async move {
                let fetched: Vec<(Key, Offset)> = partitions
                    .iter()
                    .map(|wanted| (wanted.key.clone(), wanted.position))
                    .collect();
                (fetched, this.fetch_from(leader, partitions).await)
            });
        let results = futures::future::join_all(fetches).await;
        // A leader that cannot be reached has most likely died, and the
        // cluster elects another: its partitions are looked up again
        // (`apply` refreshes the metadata for a retry) while the other
        // leaders' records are delivered. Only when no leader answered is
        // the poll an error, after a refresh, so that the next poll goes to
        // whichever brokers lead now.
        let reached_any = results
            .iter()
            .any(|(_, result)| !matches!(result, Err(error) if error.is_connect_failure()));
        let mut outcomes = Vec::new();
        for (fetched, result) in results {
            match result {
                Ok(answered) => outcomes.extend(answered),
                Err(error) if error.is_connect_failure() && reached_any => {
                    outcomes.extend(fetched.into_iter().map(|(key, offset)| {
                        let error = error.clone();
                        (key, offset, PartitionOutcome::Retry { error })
                    }));
                }
                Err(error) if error.is_connect_failure() => {
                    let topics: Vec<&str> =
                        self.assignments.keys().map(|(topic, _)| &**topic).collect();
                    if let Err(refresh) = self.cluster.refresh_metadata(&topics).await {
                        tracing::debug!(error = %refresh, "metadata refresh failed");
                    }
                    return Err(error);
                }
                Err(error) => return Err(error),
            }
        }
        self.apply(outcomes).await
    }

    /// The metadata, refreshed first if it lacks a leader for an assigned
    /// partition (a partition without one is skipped this round).
    async fn metadata_with_leaders(&self) -> Arc<crate::metadata::ClusterMetadata> {
        let metadata = self.cluster.metadata();
        if self
            .assignments
            .keys()
            .all(|(topic, partition)| metadata.leader(topic, *partition).is_some())
        {
            return metadata;
        }
        let topics: Vec<&str> = self.assignments.keys().map(|(topic, _)| &**topic).collect();
        match self.cluster.refresh_metadata(&topics).await {
            Ok(refreshed) => refreshed,
            Err(error) => {
                tracing::debug!(%error, "metadata refresh failed");
                metadata
            }
        }
    }

    /// Looks up the start position of partitions that have none yet.
    async fn resolve_positions(&mut self) -> Result<(), ClientError> {
        let now = Instant::now();
        let unresolved: Vec<(Key, StartFrom)> = self
            .assignments
            .iter()
            .filter(|(_, a)| a.position.is_none() && a.not_before.is_none_or(|at| at <= now))
            .map(|(key, a)| (key.clone(), a.start))
            .collect();
        for (key, start) in unresolved {
            let result = self.start_offset(&key.0, key.1, start).await;
            let Some(assignment) = self.assignments.get_mut(&key) else {
                continue;
            };
            match result {
                Ok(offset) => {
                    assignment.position = Some(offset);
                    assignment.not_before = None;
                }
                Err(error) if error.is_retriable() => {
                    tracing::debug!(topic = %key.0, partition = key.1, %error, "start offset lookup failed; retrying");
                    assignment.not_before = Some(now + self.config.retry_backoff);
                    let _ = self.cluster.refresh_metadata(&[&key.0]).await;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    async fn start_offset(
        &self,
        topic: &str,
        partition: u32,
        start: StartFrom,
    ) -> Result<Offset, ClientError> {
        let spec = match start {
            StartFrom::Offset(offset) => return Ok(offset),
            StartFrom::Earliest => OffsetSpec::Earliest,
            StartFrom::Latest => OffsetSpec::Latest,
            StartFrom::Timestamp(time) => OffsetSpec::Timestamp(time.0),
        };
        match self.cluster.list_offset(topic, partition, spec).await? {
            Some(offset) => Ok(offset),
            // No record at or after the time: start with the next one.
            None => self
                .cluster
                .list_offset(topic, partition, OffsetSpec::Latest)
                .await?
                .ok_or_else(|| ClientError::Protocol {
                    addr: String::new(),
                    detail: format!("ListOffsets latest of {topic}/{partition} returned no offset"),
                }),
        }
    }

    /// Sends one fetch to a leader and turns its answer into per-partition
    /// outcomes. A failed request becomes a retry outcome for each of its
    /// partitions, except a top-level refusal that retrying cannot fix.
    ///
    /// One fetch per leader, not per shard: a fetch waits until any of its
    /// partitions has data, and fetches split by shard would each wait
    /// their own `fetch_max_wait`. It goes to the shard that owns most of
    /// its partitions, which serves those without a hop between cores.
    async fn fetch_from(
        &self,
        leader: u32,
        wanted: Vec<Wanted>,
    ) -> Result<Vec<(Key, Offset, PartitionOutcome)>, ClientError> {
        let shard = most_common_shard(wanted.iter().map(|wanted| wanted.shard));
        let request = self.fetch_request(&wanted);
        let partitions: Vec<(Key, Offset)> = wanted
            .into_iter()
            .map(|wanted| (wanted.key, wanted.position))
            .collect();
        let retry_all = |error: ClientError, partitions: Vec<(Key, Offset)>| {
            partitions
                .into_iter()
                .map(|(key, offset)| {
                    let error = error.clone();
                    (key, offset, PartitionOutcome::Retry { error })
                })
                .collect()
        };
        let connection = match self.cluster.connection_to_shard(leader, shard).await {
            Ok(connection) => connection,
            Err(error) if error.is_retriable() && !error.is_connect_failure() => {
                return Ok(retry_all(error, partitions));
            }
            Err(error) => return Err(error),
        };
        // A broker over this principal's quota said when to come back.
        if let Some(until) = self.cluster.throttles.until(leader, shard) {
            tokio::time::sleep_until(until).await;
        }
        let reply = match connection
            .call(&request, Vec::new(), self.config.fetch_max_wait)
            .await
        {
            Ok(reply) => reply,
            Err(error) if error.is_retriable() => return Ok(retry_all(error, partitions)),
            Err(error) => return Err(error),
        };
        let (response, raw) = reply.decode()?;
        self.cluster
            .throttles
            .note(leader, shard, response.throttle_ms.to_native());
        let sections =
            corelog_wire::message::fetch::partition_records(response, raw).map_err(|error| {
                ClientError::Protocol {
                    addr: reply.addr().to_owned(),
                    detail: error.to_string(),
                }
            })?;
        let raw = Bytes::copy_from_slice(raw);
        let mut at = 0;
        let mut answers: BTreeMap<Key, (PartitionAnswer, Bytes)> = BTreeMap::new();
        for section in sections {
            let len = section.records.len();
            let key = (
                Arc::from(section.topic),
                section.partition.partition.to_native(),
            );
            let answer = PartitionAnswer::from_archived(section.partition);
            answers.insert(key, (answer, raw.slice(at..at + len)));
            at += len;
        }
        let policy = self.config.offset_out_of_range;
        let mut budget = InflationBudget::new(
            self.config.batch_limits,
            self.config.fetch_decompressed_bytes_max,
        );
        // Decoded from a partition that moves on with every fetch, and
        // answered in request order.
        let count = partitions.len().max(1);
        let first = self.fetches.fetch_add(1, Ordering::Relaxed) % count;
        let mut outcomes: Vec<Option<(Key, Offset, PartitionOutcome)>> =
            partitions.iter().map(|_| None).collect();
        for index in (first..partitions.len()).chain(0..first) {
            let (key, offset) = partitions[index].clone();
            let outcome = match answers.get(&key) {
                Some((answer, records)) => {
                    partition_outcome(&key.0, key.1, offset, answer, records, policy, &mut budget)
                }
                None => PartitionOutcome::Retry {
                    error: ClientError::Protocol {
                        addr: reply.addr().to_owned(),
                        detail: format!("fetch response has no answer for {}/{}", key.0, key.1),
                    },
                },
            };
            outcomes[index] = Some((key, offset, outcome));
        }
        Ok(outcomes.into_iter().flatten().collect())
    }

    fn fetch_request(&self, partitions: &[Wanted]) -> FetchRequest {
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for wanted in partitions {
            topics
                .entry(&wanted.key.0)
                .or_default()
                .push(FetchPartition {
                    partition: wanted.key.1,
                    fetch_offset: wanted.position.0,
                    partition_max_bytes: self.config.partition_max_bytes,
                    current_leader_epoch: wanted.leader_epoch,
                });
        }
        FetchRequest {
            max_wait_ms: u32::try_from(self.config.fetch_max_wait.as_millis()).unwrap_or(u32::MAX),
            min_bytes: self.config.fetch_min_bytes,
            max_bytes: self.config.fetch_max_bytes,
            topics: topics
                .into_iter()
                .map(|(name, partitions)| FetchTopic {
                    name: name.to_owned(),
                    partitions,
                })
                .collect(),
        }
    }

    /// Applies the outcomes of one poll: all of them, or — if any must be
    /// reported as an error — none, so that no record is lost.
    async fn apply(
        &mut self,
        outcomes: Vec<(Key, Offset, PartitionOutcome)>,
    ) -> Result<Polled, ClientError> {
        for (_, _, outcome) in &outcomes {
            if let PartitionOutcome::Fail { error } = outcome {
                return Err(error.clone());
            }
        }
        let now = Instant::now();
        let mut polled = Polled::default();
        let mut refresh = false;
        for (key, fetched_at, outcome) in outcomes {
            let Some(assignment) = self.assignments.get_mut(&key) else {
                continue;
            };
            // A seek during the fetch wins over the fetch's result.
            if assignment.position != Some(fetched_at) {
                continue;
            }
            match outcome {
                PartitionOutcome::Records {
                    records,
                    next_offset,
                    high_watermark,
                    log_start_offset,
                } => {
                    assignment.position = Some(next_offset);
                    assignment.high_watermark = Some(high_watermark);
                    assignment.log_start_offset = Some(log_start_offset);
                    polled.records.extend(records);
                }
                PartitionOutcome::Reset { to, gap } => {
                    assignment.position = Some(to);
                    assignment.high_watermark = Some(gap.high_watermark);
                    assignment.log_start_offset = Some(gap.log_start_offset);
                    polled.notices.push(Notice::OffsetReset {
                        topic: Arc::clone(&key.0),
                        partition: key.1,
                        from: fetched_at,
                        to,
                        gap,
                    });
                }
                PartitionOutcome::Retry { error } => {
                    tracing::debug!(topic = %key.0, partition = key.1, %error, "fetch will be retried");
                    assignment.not_before = Some(now + self.config.retry_backoff);
                    refresh = true;
                }
                PartitionOutcome::Fail { .. } => {}
            }
        }
        if refresh {
            let topics: Vec<&str> = self.assignments.keys().map(|(topic, _)| &**topic).collect();
            if let Err(error) = self.cluster.refresh_metadata(&topics).await {
                tracing::debug!(%error, "metadata refresh failed");
            }
        }
        Ok(polled)
    }
}
