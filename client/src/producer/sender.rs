//! The producer's background task: takes ready batches from the
//! accumulator, sends them to partition leaders, and settles every record
//! from the answers — acknowledged, retried with the same bytes, or failed.
//!
//! It is one tokio task, so sequence assignment and the order of frames on
//! each connection are decided in one place. It waits on four things: the
//! accumulator's wake-up (a batch is ready, a linger deadline appeared,
//! flush, close), the earliest deadline (linger, retry backoff, delivery
//! timeout, producer id retry), responses, and a metadata refresh.
//!
//! The order rules and sequence bookkeeping live in
//! [`inflight`](super::inflight); this file does the I/O and applies their
//! verdicts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::produce::{ProducePartition, ProduceRequest, ProduceTopic};
use corelog_wire::types::{Offset, TimestampMs};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::accumulator::{Accumulator, TopicPartition};
use super::inflight::{PartitionInFlight, Verdict, classify};
use super::window::{Signal, Window};
use super::{Delivery, ProducerConfig, init_producer_id};
use crate::cluster::Cluster;
use crate::error::ClientError;

/// Longest sleep when nothing is due, so that a missed wake-up costs at most
/// this much latency.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// One partition's answer in a produce response, copied out of the archive.
#[derive(Debug)]
struct Answer {
    topic: String,
    partition: u32,
    error_code: u16,
    detail: Option<String>,
    base_offset: i64,
    log_append_time_ms: i64,
}

/// A produce request's fate: which batches it carried, and the answers.
struct Outcome {
    sent: Vec<(TopicPartition, u64)>,
    result: Result<Vec<Answer>, ClientError>,
    /// The broker shard it went to, when it was sent, and what its answer
    /// said about the broker's load; `None` if it never left.
    window: Option<((u32, u16), Instant, Signal)>,
}

/// A batch to put in a request: its partition, number and bytes.
type Item = (TopicPartition, u64, Bytes);

enum Event {
    Outcome(Outcome),
    Wake,
    RefreshDone,
}

/// The sender task's state.
pub(crate) struct Sender {
    cluster: Arc<Cluster>,
    accumulator: Arc<Accumulator>,
    config: ProducerConfig,
    /// Producer id and epoch; `None` without idempotence.
    producer: Option<(i64, i16)>,
    /// A new producer id is needed before new batches are taken; retried
    /// from this instant.
    reinit_at: Option<Instant>,
    fenced: bool,
    partitions: HashMap<TopicPartition, PartitionInFlight>,
    in_flight: FuturesUnordered<BoxFuture<'static, Outcome>>,
    /// A metadata refresh in flight. It runs as its own task: a future kept
    /// here and polled only by the loop's `select!` would sit suspended while
    /// the loop awaits a connection, and the refresh may hold the lock of the
    /// very connection slot the loop waits for (it does while it connects to
    /// a restarting broker): the producer would stop for good.
    refresh: Option<tokio::task::JoinHandle<()>>,
    refresh_wanted: bool,
    /// Brokers that could not be reached, and when to try again.
    unreachable: HashMap<u32, Instant>,
    /// Requests in flight allowed per broker shard ([`Window`]).
    windows: HashMap<(u32, u16), Window>,
    /// No batch's delivery deadline passes before this instant, so
    /// [`Sender::expire`] has nothing to do until then: it looks at every
    /// partition, and ran on every turn of the loop (once per answer).
    expiry_due: Instant,
}

impl Sender {
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        accumulator: Arc<Accumulator>,
        config: ProducerConfig,
        producer: Option<(i64, i16)>,
    ) -> Sender {
        Sender {
            cluster,
            accumulator,
            config,
            producer,
            reinit_at: None,
            fenced: false,
            partitions: HashMap::new(),
            in_flight: FuturesUnordered::new(),
            refresh: None,
            refresh_wanted: false,
            unreachable: HashMap::new(),
            windows: HashMap::new(),
            expiry_due: Instant::now(),
        }
    }

    /// Runs until the producer is closed and everything buffered has
    /// completed.
    pub(crate) async fn run(mut self) {
        loop {
            let now = Instant::now();
            self.expire(now);
            self.reinit_if_due(now).await;
            let wake_at = self.send_ready(now).await;
            if self.finished() {
                break;
            }
            self.start_refresh();
            let sleep = tokio::time::sleep_until(wake_at.unwrap_or(now + IDLE_WAKE));
            let event = tokio::select! {
                Some(outcome) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    Event::Outcome(outcome)
                }
                () = self.accumulator.wake.notified() => Event::Wake,
                () = sleep => Event::Wake,
                () = poll_refresh(&mut self.refresh), if self.refresh.is_some() => Event::RefreshDone,
            };
            match event {
                Event::Outcome(outcome) => {
                    if let Some((owner, sent_at, signal)) = outcome.window
                        && let Some(window) = self.windows.get_mut(&owner)
                    {
                        window.answered(sent_at, Instant::now(), signal);
                    }
                    self.settle(outcome);
                }
                Event::RefreshDone => self.refresh = None,
                Event::Wake => {}
            }
        }
    }

    fn finished(&self) -> bool {
        self.accumulator.is_closed()
            && self.accumulator.is_empty()
            && self.partitions.values().all(PartitionInFlight::is_empty)
    }

    fn start_refresh(&mut self) {
        if self.refresh_wanted && self.refresh.is_none() {
            self.refresh_wanted = false;
            let cluster = Arc::clone(&self.cluster);
            self.refresh = Some(tokio::spawn(async move {
                if let Err(error) = cluster.refresh_metadata(&[]).await {
                    tracing::debug!(%error, "metadata refresh failed");
                }
            }));
        }
    }

    /// Fails every batch whose delivery timeout passed while it was unsent
    /// or waiting for a resend.
    fn expire(&mut self, now: Instant) {
        if now < self.expiry_due {
            return;
        }
        let timeout = self.config.delivery_timeout;
        let Some(deadline) = now.checked_sub(timeout) else {
            return;
        };
        for batch in self.accumulator.expire(deadline) {
            // Never sent: not appended, and not the replicas' doing.
            let error = ClientError::BufferTimeout {
                topic: batch.topic_partition.topic.to_string(),
                partition: batch.topic_partition.partition,
                timeout,
            };
            batch.fail(&error);
        }
        let mut broken = Vec::new();
        for (topic_partition, partition) in &mut self.partitions {
            let expired = partition.expired_waiting(deadline);
            for number in &expired {
                if let Some(sent) = partition.remove(*number) {
                    let last = sent.last_error.as_ref().map(ToString::to_string);
                    sent.batch
                        .fail(&timeout_error(topic_partition, timeout, last));
                }
            }
            if !expired.is_empty() {
                broken.push(topic_partition.clone());
            }
        }
        // An expired batch may or may not have been appended: the
        // partition's sequence is unknown from here on.
        for topic_partition in broken {
            self.abort_partition(
                &topic_partition,
                "an earlier batch of the partition timed out",
            );
        }
    }

    /// Obtains a new producer id once nothing is outstanding under the old
    /// one.
    async fn reinit_if_due(&mut self, now: Instant) {
        let Some(at) = self.reinit_at else {
            return;
        };
        if at > now || self.fenced || !self.partitions.values().all(PartitionInFlight::is_empty) {
            return;
        }
        match init_producer_id(&self.cluster).await {
            Ok(producer) => {
                tracing::info!(?producer, "producer id re-initialised");
                self.producer = Some(producer);
                self.reinit_at = None;
                for partition in self.partitions.values_mut() {
                    partition.reset_sequence();
                }
            }
            Err(error) => {
                tracing::warn!(%error, "InitProducerId failed; retrying");
                self.reinit_at = Some(Instant::now() + self.config.retry_backoff_max);
            }
        }
    }

    /// Sends whatever may be sent now, and returns the next instant
    /// something will be due.
    async fn send_ready(&mut self, now: Instant) -> Option<Instant> {
        let timeout = self.config.delivery_timeout;
        let (ready, mut wake_at, buffered_expiry) = self.accumulator.ready(now, false, timeout);
        // A batch buffered from now on expires after now + timeout.
        let mut expiry_due = buffered_expiry.map_or(now + timeout, |at| at.min(now + timeout));
        let mut earliest = |at: Option<Instant>| {
            if let Some(at) = at {
                wake_at = Some(wake_at.map_or(at, |wake| wake.min(at)));
            }
        };
        earliest(self.reinit_at);
        let mut candidates: BTreeSet<TopicPartition> = ready.into_iter().collect();
        for (topic_partition, partition) in &self.partitions {
            if partition.in_recovery() {
                candidates.insert(topic_partition.clone());
                earliest(partition.next_retry_at());
                if let Some(created) = partition.oldest_waiting() {
                    earliest(Some(created + timeout));
                    expiry_due = expiry_due.min(created + timeout);
                }
            }
        }
        self.expiry_due = expiry_due;
        let metadata = self.cluster.metadata();
        // One request per owning shard of each leader: its own connection
        // spares the broker a hop between cores.
        let mut by_owner: BTreeMap<(u32, u16), Vec<TopicPartition>> = BTreeMap::new();
        for topic_partition in candidates {
            match metadata.leader_shard(&topic_partition.topic, topic_partition.partition) {
                Some(owner) => by_owner.entry(owner).or_default().push(topic_partition),
                None => self.refresh_wanted = true,
            }
        }
        for ((leader, shard), partitions) in by_owner {
            // A broker over this principal's quota said when to come back.
            if let Some(until) = self.cluster.throttles.until(leader, shard) {
                earliest(Some(until));
                continue;
            }
            if let Some(&retry_at) = self.unreachable.get(&leader) {
                if retry_at > now {
                    earliest(Some(retry_at));
                    continue;
                }
                self.unreachable.remove(&leader);
            }
            // A full window opens with the next answer, which wakes the loop.
            let max_in_flight = self.config.max_in_flight_requests;
            let room = self
                .windows
                .entry((leader, shard))
                .or_insert_with(|| Window::new(max_in_flight))
                .room();
            if room == 0 {
                continue;
            }
            let connection = match self.cluster.connection_to_shard(leader, shard).await {
                Ok(connection) => connection,
                Err(error) => {
                    tracing::debug!(leader, %error, "cannot reach the leader");
                    let retry_at = now + self.config.client.reconnect_backoff;
                    self.unreachable.insert(leader, retry_at);
                    earliest(Some(retry_at));
                    self.refresh_wanted = true;
                    continue;
                }
            };
            for items in self.take_requests(&partitions, now, room) {
                let sent: Vec<(TopicPartition, u64)> = items
                    .iter()
                    .map(|(topic_partition, number, _)| (topic_partition.clone(), *number))
                    .collect();
                let (request, raw) = self.produce_request(items);
                match connection.send(&request, raw, Duration::ZERO).await {
                    Ok(pending) => {
                        if let Some(window) = self.windows.get_mut(&(leader, shard)) {
                            window.sent();
                        }
                        let sent_at = Instant::now();
                        let cluster = self.cluster.clone();
                        self.in_flight.push(Box::pin(async move {
                            let mut throttled = false;
                            let result = match pending.wait().await {
                                Ok(reply) => reply.decode().map(|(response, _)| {
                                    let throttle_ms = response.throttle_ms.to_native();
                                    throttled = throttle_ms > 0;
                                    cluster.throttles.note(leader, shard, throttle_ms);
                                    answers(response)
                                }),
                                Err(error) => Err(error),
                            };
                            let signal = load_signal(&result, throttled);
                            Outcome {
                                sent,
                                result,
                                window: Some(((leader, shard), sent_at, signal)),
                            }
                        }));
                    }
                    Err(error) => self.settle(Outcome {
                        sent,
                        result: Err(error),
                        window: None,
                    }),
                }
            }
        }
        wake_at
    }

    /// Takes batches for the given partitions of one leader and groups them
    /// into requests: round by round, one batch per partition per request,
    /// so that a partition's batches go out in sequence order. No new round
    /// once `max_requests` are made (a round split by size may pass it).
    fn take_requests(
        &mut self,
        partitions: &[TopicPartition],
        now: Instant,
        max_requests: usize,
    ) -> Vec<Vec<Item>> {
        let mut requests = Vec::new();
        while requests.len() < max_requests {
            let round: Vec<Item> = partitions
                .iter()
                .filter_map(|topic_partition| {
                    self.take_next(topic_partition, now)
                        .map(|(number, bytes)| (topic_partition.clone(), number, bytes))
                })
                .collect();
            if round.is_empty() {
                return requests;
            }
            let mut request: Vec<Item> = Vec::new();
            let mut request_bytes = 0;
            for item in round {
                if !request.is_empty()
                    && request_bytes + item.2.len() > self.config.request_bytes_max
                {
                    requests.push(std::mem::take(&mut request));
                    request_bytes = 0;
                }
                request_bytes += item.2.len();
                request.push(item);
            }
            requests.push(request);
        }
        requests
    }

    /// The next batch of a partition to put on the wire: in recovery, the
    /// resend that is due; otherwise a new batch, if the in-flight limit and
    /// the producer id allow.
    fn take_next(
        &mut self,
        topic_partition: &TopicPartition,
        now: Instant,
    ) -> Option<(u64, Bytes)> {
        let max_in_flight = self.config.max_in_flight_per_partition;
        let blocked = self.fenced || self.reinit_at.is_some();
        let partition = self.partitions.entry(topic_partition.clone()).or_default();
        if partition.in_recovery() {
            return partition.next_retry(now);
        }
        if blocked || !partition.can_start(max_in_flight) {
            return None;
        }
        loop {
            let batch = self.accumulator.pop_ready(topic_partition, now)?;
            match partition.start(batch, self.producer) {
                Ok(started) => return Some(started),
                Err(error) => tracing::warn!(%topic_partition, %error, "batch failed to encode"),
            }
        }
    }

    fn produce_request(&self, items: Vec<Item>) -> (ProduceRequest, Vec<Bytes>) {
        let mut topics: BTreeMap<Arc<str>, Vec<(u32, Bytes)>> = BTreeMap::new();
        for (topic_partition, _, bytes) in items {
            topics
                .entry(topic_partition.topic)
                .or_default()
                .push((topic_partition.partition, bytes));
        }
        let mut raw = Vec::new();
        let topics = topics
            .into_iter()
            .map(|(name, partitions)| ProduceTopic {
                name: name.to_string(),
                partitions: partitions
                    .into_iter()
                    .map(|(partition, bytes)| {
                        // A batch is below request_bytes_max, itself checked
                        // to be far below 4 GiB.
                        let records_len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                        raw.push(bytes);
                        ProducePartition {
                            partition,
                            records_len,
                        }
                    })
                    .collect(),
            })
            .collect();
        let timeout_ms = u32::try_from(self.config.ack_timeout.as_millis()).unwrap_or(u32::MAX);
        let request = ProduceRequest {
            acks: self.config.acks,
            timeout_ms,
            topics,
        };
        (request, raw)
    }

    /// Applies a request's outcome to each batch it carried.
    fn settle(&mut self, outcome: Outcome) {
        match outcome.result {
            Err(error) => {
                for (topic_partition, number) in outcome.sent {
                    let code = error.code();
                    match code {
                        // The broker refused the whole request.
                        Some(code) => self.apply(&topic_partition, number, code, error.clone()),
                        None if error.is_retriable()
                            || matches!(error, ClientError::Protocol { .. }) =>
                        {
                            self.retry(&topic_partition, number, error.clone());
                        }
                        None => self.fail_batch(&topic_partition, number, error.clone()),
                    }
                }
            }
            Ok(answers) => {
                for (topic_partition, number) in outcome.sent {
                    let answer = answers.iter().find(|answer| {
                        answer.partition == topic_partition.partition
                            && *answer.topic == *topic_partition.topic
                    });
                    let Some(answer) = answer else {
                        let error = ClientError::Protocol {
                            addr: String::new(),
                            detail: format!("produce response has no answer for {topic_partition}"),
                        };
                        self.retry(&topic_partition, number, error);
                        continue;
                    };
                    if answer.error_code == 0 {
                        self.complete(&topic_partition, number, answer);
                        continue;
                    }
                    let code = ClientError::wire_code(answer.error_code);
                    let context = || format!("produce to {topic_partition}");
                    let error =
                        ClientError::from_wire(answer.error_code, context, answer.detail.clone())
                            .unwrap_or_else(|| ClientError::Protocol {
                                addr: String::new(),
                                detail: "error code 0 with an error".to_owned(),
                            });
                    self.apply(&topic_partition, number, code, error);
                }
            }
        }
    }

    fn apply(
        &mut self,
        topic_partition: &TopicPartition,
        number: u64,
        code: corelog_wire::error::ErrorCode,
        error: ClientError,
    ) {
        let Some(partition) = self.partitions.get(topic_partition) else {
            return;
        };
        if partition.get(number).is_none() {
            // Aborted or expired meanwhile; nothing left to settle.
            return;
        }
        match classify(code, partition.is_first(number)) {
            Verdict::Success => {}
            Verdict::Retry { refresh_metadata } => {
                self.refresh_wanted |= refresh_metadata;
                self.retry(topic_partition, number, error);
            }
            Verdict::FailBatch => self.fail_batch(topic_partition, number, error),
            Verdict::AbortPartition => {
                let reason = format!("the broker refused an earlier batch: {error}");
                self.fail_batch_only(topic_partition, number, &error);
                self.abort_partition(topic_partition, &reason);
            }
            Verdict::Fenced => self.fence(&error),
        }
    }

    fn complete(&mut self, topic_partition: &TopicPartition, number: u64, answer: &Answer) {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return;
        };
        let Ok(base_offset) = u64::try_from(answer.base_offset) else {
            let error = ClientError::Protocol {
                addr: String::new(),
                detail: format!(
                    "produce to {topic_partition} succeeded with base offset {}",
                    answer.base_offset
                ),
            };
            self.retry(topic_partition, number, error);
            return;
        };
        let Some(sent) = partition.remove(number) else {
            return;
        };
        for (index, slot) in sent.batch.records.into_iter().enumerate() {
            let timestamp = if answer.log_append_time_ms >= 0 {
                TimestampMs(answer.log_append_time_ms)
            } else {
                slot.timestamp
            };
            let _ = slot.reply.send(Ok(Delivery {
                topic: Arc::clone(&topic_partition.topic),
                partition: topic_partition.partition,
                offset: Offset(base_offset + index as u64),
                timestamp,
            }));
        }
    }

    /// Schedules a resend of the same bytes after a backoff, or fails the
    /// batch if its delivery timeout would pass first.
    fn retry(&mut self, topic_partition: &TopicPartition, number: u64, error: ClientError) {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return;
        };
        let Some(sent) = partition.get(number) else {
            return;
        };
        let now = Instant::now();
        let exponent = sent.attempts.saturating_sub(1).min(16);
        let backoff = first_backoff(&error, self.config.retry_backoff)
            .saturating_mul(1 << exponent)
            .min(self.config.retry_backoff_max);
        if sent.batch.created_at + self.config.delivery_timeout <= now + backoff {
            let timeout = self.config.delivery_timeout;
            if let Some(sent) = partition.remove(number) {
                sent.batch.fail(&timeout_error(
                    topic_partition,
                    timeout,
                    Some(error.to_string()),
                ));
            }
            self.abort_partition(
                topic_partition,
                "an earlier batch of the partition timed out",
            );
            return;
        }
        tracing::debug!(%topic_partition, number, %error, ?backoff, "retrying batch");
        self.expiry_due = self
            .expiry_due
            .min(sent.batch.created_at + self.config.delivery_timeout);
        partition.wait_for_retry(number, error, now + backoff);
    }

    /// Fails one batch that cannot succeed, and keeps the partition's
    /// sequence consistent for the batches after it.
    fn fail_batch(&mut self, topic_partition: &TopicPartition, number: u64, error: ClientError) {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return;
        };
        let later = partition.has_later(number);
        let Some(sent) = partition.remove(number) else {
            return;
        };
        let first_attempt = sent.attempts == 1;
        let base_sequence = sent.base_sequence;
        sent.batch.fail(&error);
        if self.producer.is_none() {
            return;
        }
        if first_attempt && !later {
            // The broker refused the only attempt of the newest batch: its
            // sequence was never used, so the next batch may take it.
            partition.rewind(base_sequence);
        } else {
            let reason = format!("an earlier batch of the partition failed: {error}");
            self.abort_partition(topic_partition, &reason);
        }
    }

    /// Fails one batch without touching the others.
    fn fail_batch_only(
        &mut self,
        topic_partition: &TopicPartition,
        number: u64,
        error: &ClientError,
    ) {
        if let Some(sent) = self
            .partitions
            .get_mut(topic_partition)
            .and_then(|partition| partition.remove(number))
        {
            sent.batch.fail(error);
        }
    }

    /// Gives up every unacknowledged batch of a partition and, with
    /// idempotence, asks for a new producer id once nothing is outstanding.
    fn abort_partition(&mut self, topic_partition: &TopicPartition, reason: &str) {
        if let Some(partition) = self.partitions.get_mut(topic_partition) {
            for sent in partition.drain() {
                sent.batch.fail(&ClientError::Aborted {
                    topic: topic_partition.topic.to_string(),
                    partition: topic_partition.partition,
                    reason: reason.to_owned(),
                });
            }
        }
        if self.producer.is_some() && self.reinit_at.is_none() {
            tracing::warn!(%topic_partition, reason, "partition sequence broken; a new producer id will be used");
            self.reinit_at = Some(Instant::now());
        }
    }

    /// A newer producer with our id exists: fail everything and refuse new
    /// records.
    fn fence(&mut self, error: &ClientError) {
        self.fenced = true;
        self.accumulator.close(Some(format!(
            "fenced by a newer producer with the same id: {error}"
        )));
        for partition in self.partitions.values_mut() {
            for sent in partition.drain() {
                sent.batch.fail(error);
            }
        }
        for batch in self.accumulator.drain_all() {
            batch.fail(error);
        }
    }
}

async fn poll_refresh(refresh: &mut Option<tokio::task::JoinHandle<()>>) {
    if let Some(refresh) = refresh {
        // A refresh that panicked or was cancelled is simply over.
        let _ = refresh.await;
    }
}

/// What a produce's outcome says about its broker's load: a throttle or
/// an append that timed out there is pushback; no answer says nothing.
fn load_signal(result: &Result<Vec<Answer>, ClientError>, throttled: bool) -> Signal {
    match result {
        Err(_) => Signal::Lost,
        Ok(answers)
            if throttled
                || answers
                    .iter()
                    .any(|answer| answer.error_code == ErrorCode::RequestTimedOut.code()) =>
        {
            Signal::Pushback
        }
        Ok(_) => Signal::Prompt,
    }
}

fn timeout_error(
    topic_partition: &TopicPartition,
    timeout: Duration,
    last_error: Option<String>,
) -> ClientError {
    ClientError::DeliveryTimeout {
        topic: topic_partition.topic.to_string(),
        partition: topic_partition.partition,
        timeout,
        last_error,
    }
}

fn answers(response: &corelog_wire::message::produce::ArchivedProduceResponse) -> Vec<Answer> {
    response
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(move |partition| Answer {
                topic: topic.name.to_string(),
                partition: partition.partition.to_native(),
                error_code: partition.error_code.to_native(),
                detail: partition.error_message.as_ref().map(|m| m.to_string()),
                base_offset: partition.base_offset.to_native(),
                log_append_time_ms: partition.log_append_time_ms.to_native(),
            })
        })
        .collect()
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("producer", &self.producer)
            .field("partitions", &self.partitions.len())
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

/// The first backoff before resending a batch refused with `error`.
///
/// A leadership that moved (a controlled shutdown, `elect-leader`,
/// maintenance) is settled within one election round, a few milliseconds:
/// the full `retry_backoff` would stall the partition 100 ms at every
/// planned move. The resend still doubles its wait while the leader stays
/// unknown.
fn first_backoff(error: &ClientError, retry_backoff: Duration) -> Duration {
    match error.code() {
        Some(
            ErrorCode::NotLeader | ErrorCode::FencedLeaderEpoch | ErrorCode::LeaderNotAvailable,
        ) => retry_backoff.min(LEADER_MOVED_BACKOFF),
        _ => retry_backoff,
    }
}

/// See [`first_backoff`].
const LEADER_MOVED_BACKOFF: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: ErrorCode) -> ClientError {
        ClientError::Broker {
            code,
            context: "produce to orders/0".to_owned(),
            detail: None,
        }
    }

    #[test]
    fn a_moved_leadership_is_retried_sooner_than_other_refusals() {
        let configured = Duration::from_millis(100);
        for code in [
            ErrorCode::NotLeader,
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::LeaderNotAvailable,
        ] {
            assert_eq!(
                first_backoff(&refused(code), configured),
                LEADER_MOVED_BACKOFF
            );
        }
        for code in [
            ErrorCode::NotEnoughReplicas,
            ErrorCode::QueueFull,
            ErrorCode::StorageError,
        ] {
            assert_eq!(first_backoff(&refused(code), configured), configured);
        }
        // A configured backoff below it is kept.
        let short = Duration::from_millis(2);
        assert_eq!(first_backoff(&refused(ErrorCode::NotLeader), short), short);
    }
}
