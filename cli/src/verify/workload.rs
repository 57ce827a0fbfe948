//! The `corelog verify` workload, for any cluster: idempotent producers
//! send unique checksummed records at a steady rate, a consumer group reads
//! them and commits the completed prefix every second, and at the end a
//! plain consumer reads every partition from its start. Every operation is
//! recorded in a [`History`] for [`super::check`].
//!
//! - Each value carries its [`ValueId`] and a checksum of itself, so a
//!   reader can tell which send it sees and whether it is intact.
//! - Each producer sends to a partition from one task, so the client's
//!   order promise applies; the [`ProducerStamp`] recorded is that
//!   producer's send order on the partition.
//! - A send that fails is recorded as unknown (a timeout or a lost
//!   connection cannot tell whether the record was written), which the
//!   checker accepts either way; only an acknowledged record is owed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::watch;

use super::{ClientId, EventKind, History, Key, ProducerStamp, ValueId};
use corelog_client::ClientError;
use corelog_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, ErrorCode, GroupConfig, GroupConsumer, NewTopic,
    Offset, Producer, ProducerConfig, ProducerRecord, StartFrom, TopicPartition, partition_for_key,
};

/// What to run, and against which cluster.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The cluster.
    pub client: ClientConfig,
    /// Topic written and read (see [`prepare_topic`]).
    pub topic: String,
    /// Consumer group that reads it.
    pub group: String,
    /// Producer clients, each with its own connections.
    pub producers: u32,
    /// Records per second, over all producers.
    pub rate: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Payload bytes per record, after the 24-byte header.
    pub payload_bytes: usize,
    /// How long to produce.
    pub duration: Duration,
    /// After producing, how long the group and the final read may take to
    /// reach the end of every partition.
    pub drain_timeout: Duration,
    /// Event times count from here; `None` for the start of [`run`]. A
    /// fault injector that adds events of its own passes its clock.
    pub clock_origin: Option<Instant>,
}

/// Marks a workload record's value.
const MAGIC: &[u8; 4] = b"CLV1";
/// Magic, value id, payload length, checksum.
const VALUE_HEADER_BYTES: usize = 4 + 8 + 4 + 8;
/// Progress is reported this often.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The group commits its completed prefix this often.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
/// Pacing granularity of the producers.
const TICK: Duration = Duration::from_millis(10);

/// A workload value: header (magic, id, payload length, checksum of the
/// id and payload) then a payload derived from the id.
fn encode_value(id: ValueId, payload_bytes: usize) -> Bytes {
    let mut payload = Vec::with_capacity(payload_bytes);
    let mut state = id.0 ^ 0x9E37_79B9_7F4A_7C15;
    while payload.len() < payload_bytes {
        // xorshift: cheap bytes that differ per record.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        payload.extend_from_slice(&state.to_le_bytes());
    }
    payload.truncate(payload_bytes);
    let mut value = BytesMut::with_capacity(VALUE_HEADER_BYTES + payload_bytes);
    value.put_slice(MAGIC);
    value.put_u64_le(id.0);
    value.put_u32_le(u32::try_from(payload_bytes).unwrap_or(u32::MAX));
    value.put_u64_le(checksum(id, &payload));
    value.put_slice(&payload);
    value.freeze()
}

fn checksum(id: ValueId, payload: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(payload, id.0)
}

/// The id in a value and whether its checksum holds; `None` for a value
/// that is not a workload record.
fn decode_value(value: &[u8]) -> Option<(ValueId, bool)> {
    let header = value.get(..VALUE_HEADER_BYTES)?;
    if &header[..4] != MAGIC {
        return None;
    }
    let field = |range: std::ops::Range<usize>| header.get(range);
    let id = ValueId(u64::from_le_bytes(field(4..12)?.try_into().ok()?));
    let len = u32::from_le_bytes(field(12..16)?.try_into().ok()?) as usize;
    let sum = u64::from_le_bytes(field(16..24)?.try_into().ok()?);
    let payload = &value[VALUE_HEADER_BYTES..];
    Some((id, payload.len() == len && checksum(id, payload) == sum))
}

fn key_of(key: Option<&Bytes>) -> Option<Key> {
    key.map(|key| Key::Str(String::from_utf8_lossy(key).into_owned()))
}

/// The history, shared by every task, with the run's clock.
#[derive(Clone)]
struct Recorder {
    history: Arc<Mutex<History>>,
    started: Instant,
}

impl Recorder {
    fn record(&self, client: ClientId, kind: EventKind) {
        // A poisoned lock means a recording task panicked; the run is void.
        if let Ok(mut history) = self.history.lock() {
            // Read the clock under the lock, so that times follow the
            // order of the events even with tasks on several threads.
            let at_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            history.record(at_ms, client, kind);
        }
    }
}

/// Counters for the progress lines.
#[derive(Default)]
struct Progress {
    sent: u64,
    acknowledged: u64,
    unknown: u64,
    read: u64,
    committed: u64,
    /// Per partition, the offset after the highest record the group read.
    read_ends: BTreeMap<u32, u64>,
}

type SharedProgress = Arc<Mutex<Progress>>;

fn bump(progress: &SharedProgress, update: impl FnOnce(&mut Progress)) {
    if let Ok(mut progress) = progress.lock() {
        update(&mut progress);
    }
}

/// Runs `workload` against the topic (which must exist with `partitions`
/// partitions) and returns everything it did. `on_progress` is called
/// every [`PROGRESS_EVERY`] and at each phase change, with a line for
/// people.
///
/// # Errors
/// Connecting the clients, or the final read not reaching the end of every
/// partition within the drain timeout. Failed sends, polls and commits are
/// recorded, not returned.
pub async fn run(
    workload: &Workload,
    partitions: u32,
    mut on_progress: impl FnMut(&str),
) -> Result<History, ClientError> {
    if workload.producers == 0 || workload.rate == 0 || partitions == 0 || workload.keys == 0 {
        return Err(ClientError::InvalidConfig(
            "producers, rate, partitions and keys must be positive".to_owned(),
        ));
    }
    let recorder = Recorder {
        history: Arc::new(Mutex::new(History::new())),
        started: workload.clock_origin.unwrap_or_else(Instant::now),
    };
    let progress = SharedProgress::default();
    let (stop_producing, producing) = watch::channel(false);
    let (stop_consuming, consuming) = watch::channel(false);

    let mut producers = Vec::new();
    for index in 0..workload.producers {
        let producer = Producer::connect(ProducerConfig {
            client: workload.client.clone(),
            ..ProducerConfig::default()
        })
        .await?;
        producers.push(tokio::spawn(produce(
            ProducerTask {
                index,
                topic: workload.topic.clone(),
                partitions,
                rate: workload.rate.div_ceil(u64::from(workload.producers)),
                keys: workload.keys,
                payload_bytes: workload.payload_bytes,
            },
            producer,
            recorder.clone(),
            progress.clone(),
            producing.clone(),
        )));
    }
    let mut group_config = GroupConfig::new(
        String::new(),
        workload.group.clone(),
        [workload.topic.clone()],
    );
    group_config.client = workload.client.clone();
    group_config.start_from = StartFrom::Earliest;
    let consumer = GroupConsumer::connect(group_config).await?;
    let reader = tokio::spawn(consume(
        consumer,
        workload.producers,
        recorder.clone(),
        progress.clone(),
        consuming,
    ));

    let deadline = Instant::now() + workload.duration;
    while Instant::now() < deadline {
        tokio::time::sleep(PROGRESS_EVERY.min(deadline - Instant::now())).await;
        on_progress(&progress_line(&progress, recorder.started));
    }
    // Nobody else holds the receivers' senders: a send cannot fail.
    let _ = stop_producing.send(true);
    let mut acknowledged_end: BTreeMap<u32, u64> = BTreeMap::new();
    for producer in producers {
        match producer.await {
            Ok(Ok(ends)) => {
                for (partition, end) in ends {
                    let known = acknowledged_end.entry(partition).or_default();
                    *known = (*known).max(end);
                }
            }
            Ok(Err(error)) => on_progress(&format!("a producer stopped early: {error}")),
            Err(error) => on_progress(&format!("a producer task failed: {error}")),
        }
    }
    on_progress("producers stopped; the group drains the topic");
    let drain_deadline = Instant::now() + workload.drain_timeout;
    if !wait_group_drained(&acknowledged_end, &progress, drain_deadline).await {
        on_progress("the group did not reach the end of every partition in time");
    }
    let _ = stop_consuming.send(true);
    match reader.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => on_progress(&format!("the group consumer stopped: {error}")),
        Err(error) => on_progress(&format!("the group consumer task failed: {error}")),
    }
    on_progress("final read of every partition from its start");
    final_read(
        &workload.client,
        &workload.topic,
        partitions,
        &recorder,
        drain_deadline,
    )
    .await?;
    let history = recorder
        .history
        .lock()
        .map_err(|_| ClientError::InvalidConfig("a recording task panicked".to_owned()))?
        .clone();
    Ok(history)
}

/// Creates `topic` with `partitions` partitions and `replication_factor`
/// replicas (0: the cluster's default) unless it exists, and returns its
/// partition count.
///
/// # Errors
/// The admin client's, or a topic without partitions.
pub async fn prepare_topic(
    client: &ClientConfig,
    topic: &str,
    partitions: u32,
    replication_factor: u16,
) -> Result<u32, ClientError> {
    let admin = Admin::connect(client.clone()).await?;
    let mut new_topic = NewTopic::new(topic, partitions);
    new_topic.replication_factor = replication_factor;
    match admin.create_topic(new_topic).await {
        Ok(())
        | Err(ClientError::Broker {
            code: ErrorCode::TopicAlreadyExists,
            ..
        }) => {}
        Err(error) => return Err(error),
    }
    let (_, described) = admin
        .describe_topics(&[topic.to_owned()])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ClientError::InvalidConfig(format!("topic {topic} was not described")))?;
    let partitions = described?.partitions;
    if partitions == 0 {
        return Err(ClientError::InvalidConfig(format!(
            "topic {topic} has no partitions"
        )));
    }
    Ok(partitions)
}

struct ProducerTask {
    index: u32,
    topic: String,
    partitions: u32,
    rate: u64,
    keys: u64,
    payload_bytes: usize,
}

/// Sends at the task's rate until told to stop, then waits for every
/// delivery. Returns, per partition, the offset after the highest
/// acknowledged record.
async fn produce(
    task: ProducerTask,
    producer: Producer,
    recorder: Recorder,
    progress: SharedProgress,
    mut stop: watch::Receiver<bool>,
) -> Result<BTreeMap<u32, u64>, ClientError> {
    let client = ClientId(task.index + 1);
    let mut sequences: BTreeMap<u32, i32> = BTreeMap::new();
    let mut deliveries = tokio::task::JoinSet::new();
    let per_tick = (task.rate * TICK.as_millis() as u64).div_ceil(1000).max(1);
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut counter = 0u64;
    let mut ends = BTreeMap::new();
    'sending: loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => break 'sending,
        }
        for _ in 0..per_tick {
            // Ids are unique across producers: the producer in the high bits.
            let id = ValueId((u64::from(task.index) << 40) | counter);
            let key_text = format!("k{}", counter % task.keys);
            counter += 1;
            let partition = partition_for_key(key_text.as_bytes(), task.partitions);
            let sequence = sequences.entry(partition).or_insert(0);
            // The stamp is this producer's send order on the partition:
            // one task sends, so acknowledged offsets must follow it.
            let stamp = ProducerStamp {
                producer_id: i64::from(task.index),
                epoch: 0,
                sequence: *sequence,
            };
            *sequence = sequence.wrapping_add(1);
            recorder.record(
                client,
                EventKind::ProduceInvoke {
                    value_id: id,
                    key: Some(Key::Str(key_text.clone())),
                    topic: task.topic.clone(),
                    partition: Some(partition),
                    producer: Some(stamp),
                },
            );
            let record =
                ProducerRecord::new(task.topic.clone(), encode_value(id, task.payload_bytes))
                    .key(key_text)
                    .partition(partition);
            bump(&progress, |progress| progress.sent += 1);
            match producer.send(record).await {
                Ok(delivery) => {
                    let recorder = recorder.clone();
                    let progress = progress.clone();
                    deliveries.spawn(async move {
                        let outcome = delivery.await;
                        settle(&recorder, &progress, client, id, outcome)
                    });
                }
                Err(error) => {
                    settle(&recorder, &progress, client, id, Err(error));
                }
            }
        }
    }
    producer.flush().await;
    while let Some(done) = deliveries.join_next().await {
        if let Ok(Some((partition, offset))) = done {
            let end = ends.entry(partition).or_insert(0);
            *end = (*end).max(offset + 1);
        }
    }
    producer.close().await?;
    Ok(ends)
}

/// Records a send's outcome; returns where an acknowledged record went.
fn settle(
    recorder: &Recorder,
    progress: &SharedProgress,
    client: ClientId,
    id: ValueId,
    outcome: Result<corelog_client::Delivery, ClientError>,
) -> Option<(u32, u64)> {
    match outcome {
        Ok(delivery) => {
            recorder.record(
                client,
                EventKind::ProduceOk {
                    value_id: id,
                    partition: delivery.partition,
                    offset: delivery.offset.0,
                },
            );
            bump(progress, |progress| progress.acknowledged += 1);
            Some((delivery.partition, delivery.offset.0))
        }
        Err(error) => {
            // Whether a failed send reached the log cannot be told from
            // here in general: unknown is the safe record.
            recorder.record(
                client,
                EventKind::ProduceUnknown {
                    value_id: id,
                    error: error.to_string(),
                },
            );
            bump(progress, |progress| progress.unknown += 1);
            None
        }
    }
}

/// Reads with the group until told to stop, completing every record and
/// committing the completed prefix every second.
async fn consume(
    mut consumer: GroupConsumer,
    producers: u32,
    recorder: Recorder,
    progress: SharedProgress,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ClientError> {
    let client = ClientId(producers + 1);
    let group = consumer.group().to_owned();
    let mut last_commit = Instant::now();
    loop {
        let polled = tokio::select! {
            polled = consumer.poll() => polled,
            _ = stop.changed() => break,
        };
        let polled = match polled {
            Ok(polled) => polled,
            Err(error) => {
                // Faults under test make polls fail; the consumer retries.
                tracing::debug!(%error, "poll failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let generation = consumer.generation().map(|member| member.generation);
        for record in &polled.records {
            let decoded = record.value.as_deref().and_then(decode_value);
            recorder.record(
                client,
                EventKind::Read {
                    group: Some(group.clone()),
                    generation,
                    topic: record.topic.to_string(),
                    partition: record.partition,
                    offset: record.offset.0,
                    value_id: decoded.map(|(id, _)| id),
                    key: key_of(record.key.as_ref()),
                    checksum_ok: decoded.is_some_and(|(_, ok)| ok),
                },
            );
            consumer.complete(record);
        }
        bump(&progress, |progress| {
            progress.read += polled.records.len() as u64;
            for record in &polled.records {
                let end = progress.read_ends.entry(record.partition).or_insert(0);
                *end = (*end).max(record.offset.0 + 1);
            }
        });
        if last_commit.elapsed() >= COMMIT_EVERY {
            commit(&consumer, client, &recorder, &progress).await;
            last_commit = Instant::now();
        }
    }
    commit(&consumer, client, &recorder, &progress).await;
    consumer.close().await
}

async fn commit(
    consumer: &GroupConsumer,
    client: ClientId,
    recorder: &Recorder,
    progress: &SharedProgress,
) {
    let Some(generation) = consumer.generation().map(|member| member.generation) else {
        return;
    };
    let group = consumer.group().to_owned();
    let wanted: Vec<(TopicPartition, Offset)> = consumer
        .assignment()
        .into_iter()
        .filter_map(|partition| {
            consumer
                .committable(&partition)
                .map(|offset| (partition, offset))
        })
        .collect();
    if wanted.is_empty() {
        return;
    }
    for (partition, offset) in &wanted {
        recorder.record(
            client,
            EventKind::CommitInvoke {
                group: group.clone(),
                generation,
                topic: partition.topic.to_string(),
                partition: partition.partition,
                offset: offset.0,
            },
        );
    }
    match consumer.commit().await {
        Ok(committed) => {
            for (partition, offset) in committed {
                recorder.record(
                    client,
                    EventKind::CommitOk {
                        group: group.clone(),
                        generation,
                        topic: partition.topic.to_string(),
                        partition: partition.partition,
                        offset: offset.0,
                    },
                );
                bump(progress, |progress| progress.committed += 1);
            }
        }
        Err(error) => {
            for (partition, offset) in wanted {
                recorder.record(
                    client,
                    EventKind::CommitFail {
                        group: group.clone(),
                        generation,
                        topic: partition.topic.to_string(),
                        partition: partition.partition,
                        offset: offset.0,
                        error: error.to_string(),
                    },
                );
            }
        }
    }
}

/// Waits until the group has read every acknowledged record; false if the
/// deadline passed first.
async fn wait_group_drained(
    acknowledged_end: &BTreeMap<u32, u64>,
    progress: &SharedProgress,
    deadline: Instant,
) -> bool {
    loop {
        let drained = progress.lock().is_ok_and(|progress| {
            acknowledged_end.iter().all(|(partition, end)| {
                progress
                    .read_ends
                    .get(partition)
                    .is_some_and(|read| read >= end)
            })
        });
        if drained {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads every partition from its start to its high watermark with a
/// plain consumer, recording what it serves.
async fn final_read(
    client_config: &ClientConfig,
    topic: &str,
    partitions: u32,
    recorder: &Recorder,
    deadline: Instant,
) -> Result<(), ClientError> {
    let client = ClientId(u32::MAX);
    let mut consumer = Consumer::connect(ConsumerConfig {
        client: client_config.clone(),
        ..ConsumerConfig::default()
    })
    .await?;
    consumer.assign_topic(topic, StartFrom::Earliest).await?;
    let mut records: BTreeMap<u32, Vec<(u64, Option<ValueId>)>> = (0..partitions)
        .map(|partition| (partition, Vec::new()))
        .collect();
    loop {
        let polled = consumer.poll().await?;
        for record in &polled.records {
            let id = record
                .value
                .as_deref()
                .and_then(decode_value)
                .map(|(id, _)| id);
            records
                .entry(record.partition)
                .or_default()
                .push((record.offset.0, id));
        }
        if polled.records.is_empty() && consumer.caught_up() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(ClientError::InvalidConfig(
                "the final read did not reach the end of every partition within --drain-timeout"
                    .to_owned(),
            ));
        }
    }
    for (partition, records) in records {
        recorder.record(
            client,
            EventKind::FinalRead {
                topic: topic.to_owned(),
                partition,
                records,
            },
        );
    }
    Ok(())
}

fn progress_line(progress: &SharedProgress, started: Instant) -> String {
    progress.lock().map_or_else(
        |_| "a recording task panicked".to_owned(),
        |progress| {
            format!(
                "{:>5}s  sent {}  acknowledged {}  unknown {}  read {}  commits {}",
                started.elapsed().as_secs(),
                progress.sent,
                progress.acknowledged,
                progress.unknown,
                progress.read,
                progress.committed
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_damage_is_detected() {
        let value = encode_value(ValueId(42), 100);
        assert_eq!(decode_value(&value), Some((ValueId(42), true)));
        let mut damaged = value.to_vec();
        damaged[VALUE_HEADER_BYTES + 3] ^= 1;
        assert_eq!(decode_value(&damaged), Some((ValueId(42), false)));
        let mut truncated = value.to_vec();
        truncated.pop();
        assert_eq!(decode_value(&truncated), Some((ValueId(42), false)));
        assert_eq!(decode_value(b"plain text record"), None);
        assert_eq!(decode_value(b""), None);
    }

    #[test]
    fn values_differ_per_record() {
        assert_ne!(encode_value(ValueId(1), 64), encode_value(ValueId(2), 64));
        assert_eq!(encode_value(ValueId(7), 0).len(), VALUE_HEADER_BYTES);
    }
}
