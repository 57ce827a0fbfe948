//! The producer's buffer: per-partition batches being filled, batches ready
//! to send, and the bound on the bytes they hold.
//!
//! # Memory bound (C9)
//!
//! Every record takes permits from a semaphore of `buffer_bytes` permits
//! (its estimated encoded size) before it is appended, and its batch gives
//! them back when it completes — acknowledged, failed or expired. So the
//! records buffered *and* in flight never exceed `buffer_bytes`: `send`
//! waits for permits, `try_send` fails with
//! [`ClientError::BufferFull`](crate::ClientError::BufferFull).
//!
//! # Closing batches
//!
//! A partition has at most one open batch. It closes (becomes ready) when
//! the next record would take it past `batch_bytes`, on `flush`, or when
//! the producer closes. Once it has been open for `linger` it may be sent,
//! but it stays open until the sender takes it: while the partition's
//! in-flight window is full, records keep joining it up to `batch_bytes`
//! (as Kafka's accumulator does). Closing it at the linger deadline instead
//! made a producer that fell behind queue one small batch per linger per
//! partition, and the per-batch cost of those kept it behind (issue 14's
//! stall). Ready batches wait in FIFO order per partition; the sender takes
//! them in that order, then the open one, and only then assigns their
//! sequence numbers and encodes them (so that a producer id change never
//! leaves stale sequences in waiting batches).
//!
//! Concurrency: one `std::sync::Mutex`, held for short, await-free steps.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord, SCHEMA_HEADER};
use corelog_wire::types::TimestampMs;
use tokio::sync::{Notify, Semaphore, TryAcquireError, oneshot, watch};
use tokio::time::Instant;

use super::partitioner::{Sticky, sticky_seed};
use super::{Delivery, DeliveryFuture};
use crate::error::ClientError;

/// Bytes a record is counted for beyond its key, value and headers: the
/// varint lengths, attributes and deltas of the record encoding.
const RECORD_OVERHEAD_BYTES: usize = 32;

/// A topic partition, as the producer keys its state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: u32,
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// The accumulator's bounds and batching settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AccumulatorConfig {
    pub linger: Duration,
    pub batch_bytes: usize,
    pub buffer_bytes: usize,
    pub compression: Compression,
}

/// The size a record is counted for in batches and in the buffer bound.
#[must_use]
pub(crate) fn record_size(record: &NewRecord) -> usize {
    let field = |bytes: &Option<Bytes>| bytes.as_ref().map_or(0, Bytes::len);
    let headers: usize = record
        .headers
        .iter()
        .map(|header| header.key.len() + field(&header.value) + 8)
        .sum();
    RECORD_OVERHEAD_BYTES + field(&record.key) + field(&record.value) + headers
}

/// Checks what the batch encoder would refuse, before any permit is taken.
///
/// # Errors
/// [`ClientError::InvalidArgument`] for a header named `schema`.
pub(crate) fn check_record(record: &NewRecord) -> Result<(), ClientError> {
    if record
        .headers
        .iter()
        .any(|header| header.key == SCHEMA_HEADER)
    {
        return Err(ClientError::InvalidArgument(format!(
            "the header name {SCHEMA_HEADER:?} is reserved: set the record's schema instead"
        )));
    }
    Ok(())
}

/// Where one record's outcome goes.
#[derive(Debug)]
pub(crate) struct RecordSlot {
    pub timestamp: TimestampMs,
    pub reply: oneshot::Sender<Result<Delivery, ClientError>>,
}

/// Keeps a batch's buffer permits and its flush marker; gives both back
/// when the batch is dropped, however it ends.
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    memory_bytes: usize,
    memory: Arc<Semaphore>,
    registry: Arc<Mutex<BTreeMap<u64, watch::Receiver<()>>>>,
    _done: watch::Sender<()>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.registry).remove(&self.id);
        self.memory.add_permits(self.memory_bytes);
    }
}

/// A batch being filled or waiting to be sent. Not yet encoded: the sender
/// encodes it when it assigns its sequence.
#[derive(Debug)]
pub(crate) struct PendingBatch {
    pub topic_partition: TopicPartition,
    pub builder: BatchBuilder,
    pub records: Vec<RecordSlot>,
    pub created_at: Instant,
    pub ticket: Ticket,
}

impl PendingBatch {
    pub(crate) fn id(&self) -> u64 {
        self.ticket.id
    }

    /// Fails every record of the batch with `error`.
    pub(crate) fn fail(self, error: &ClientError) {
        for slot in self.records {
            let _ = slot.reply.send(Err(error.clone()));
        }
    }
}

#[derive(Debug, Default)]
struct PartitionQueue {
    open: Option<PendingBatch>,
    ready: VecDeque<PendingBatch>,
    /// Bytes and records of the batch filled last: a new batch starts with
    /// that much room, so that it rarely grows (and copies) while filling.
    last_bytes: usize,
    last_records: usize,
}

#[derive(Debug)]
struct State {
    /// Hashed: every record looks its partition up here, and a tree of
    /// hundreds of partitions compared topic names all the way down. The
    /// sender orders what it takes ([`Accumulator::ready`] is a set).
    queues: HashMap<TopicPartition, PartitionQueue>,
    sticky: HashMap<Arc<str>, Sticky>,
    next_batch_id: u64,
    /// The sender comes back to [`Accumulator::ready`] by this instant
    /// (the earliest deadline the last call saw, or a wake already
    /// signalled), so a batch opened with a later linger deadline need not
    /// wake it. `None`: no such promise.
    sender_back_by: Option<Instant>,
    /// Set by close or fencing: the reason new sends are refused.
    closed: Option<Option<String>>,
}

/// How the partition of a record is chosen.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    /// A known partition (explicit, or from the key).
    Partition(u32),
    /// The topic's sticky partition, for a keyless record.
    Sticky { partition_count: u32 },
}

/// Batches and the buffer bound, shared by the producer handles and the
/// sender task.
#[derive(Debug)]
pub(crate) struct Accumulator {
    config: AccumulatorConfig,
    memory: Arc<Semaphore>,
    registry: Arc<Mutex<BTreeMap<u64, watch::Receiver<()>>>>,
    state: Mutex<State>,
    sticky_seed: u64,
    /// Wakes the sender: a batch became ready, a partition got its first
    /// open batch (a new linger deadline), flush or close.
    pub(crate) wake: Notify,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves the state consistent before any
    // call that could panic; recover from poisoning.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Accumulator {
    pub(crate) fn new(config: AccumulatorConfig) -> Accumulator {
        Accumulator {
            memory: Arc::new(Semaphore::new(config.buffer_bytes)),
            registry: Arc::new(Mutex::new(BTreeMap::new())),
            state: Mutex::new(State {
                queues: HashMap::new(),
                sticky: HashMap::new(),
                next_batch_id: 0,
                sender_back_by: None,
                closed: None,
            }),
            sticky_seed: sticky_seed(),
            wake: Notify::new(),
            config,
        }
    }

    /// Checks the size of a record against the buffer.
    fn permits(&self, size: usize) -> Result<u32, ClientError> {
        u32::try_from(size)
            .ok()
            .filter(|_| size <= self.config.buffer_bytes)
            .ok_or(ClientError::RecordTooLarge {
                bytes: size,
                max: self.config.buffer_bytes,
            })
    }

    /// Waits until `size` bytes of buffer are free and takes them.
    ///
    /// # Errors
    /// [`ClientError::RecordTooLarge`] if `size` is over the whole buffer,
    /// [`ClientError::ProducerClosed`] if the producer closes meanwhile.
    pub(crate) async fn reserve(&self, size: usize) -> Result<(), ClientError> {
        let permits = self.permits(size)?;
        let permit = self
            .memory
            .acquire_many(permits)
            .await
            .map_err(|_| ClientError::ProducerClosed { reason: None })?;
        permit.forget();
        Ok(())
    }

    /// Takes `size` bytes of buffer if they are free now.
    ///
    /// # Errors
    /// [`ClientError::BufferFull`] if they are not.
    pub(crate) fn try_reserve(&self, size: usize) -> Result<(), ClientError> {
        let permits = self.permits(size)?;
        match self.memory.try_acquire_many(permits) {
            Ok(permit) => {
                permit.forget();
                Ok(())
            }
            Err(TryAcquireError::NoPermits) => Err(ClientError::BufferFull {
                buffer_bytes: self.config.buffer_bytes,
            }),
            Err(TryAcquireError::Closed) => Err(ClientError::ProducerClosed { reason: None }),
        }
    }

    /// Gives back bytes reserved for a record that was not appended.
    pub(crate) fn unreserve(&self, size: usize) {
        self.memory.add_permits(size);
    }

    /// Free bytes in the buffer, for tests and metrics.
    pub(crate) fn available_bytes(&self) -> usize {
        self.memory.available_permits()
    }

    /// Appends a record whose `size` bytes were reserved. On error the
    /// reservation is given back.
    ///
    /// # Errors
    /// [`ClientError::ProducerClosed`] after close.
    pub(crate) fn append(
        &self,
        topic: &Arc<str>,
        target: Target,
        record: &NewRecord,
        size: usize,
    ) -> Result<(u32, DeliveryFuture), ClientError> {
        let mut state = lock(&self.state);
        if let Some(reason) = state.closed.clone() {
            drop(state);
            self.unreserve(size);
            return Err(ClientError::ProducerClosed { reason });
        }
        let partition = match target {
            Target::Partition(partition) => partition,
            Target::Sticky { partition_count } => {
                self.sticky_partition(&mut state, topic, partition_count, size)
            }
        };
        let topic_partition = TopicPartition {
            topic: Arc::clone(topic),
            partition,
        };
        let (reply, delivery) = oneshot::channel();
        let slot = RecordSlot {
            timestamp: record.timestamp,
            reply,
        };
        let batch_id = self.push(&mut state, topic_partition, record, size, slot)?;
        if let (Target::Sticky { .. }, Some(sticky)) = (target, state.sticky.get_mut(topic)) {
            sticky.batch_id = Some(batch_id);
        }
        Ok((partition, DeliveryFuture::new(delivery)))
    }

    /// The sticky partition for a keyless record of `size` bytes: it moves
    /// on when the batch it was filling closed, or would overflow with this
    /// record.
    fn sticky_partition(
        &self,
        state: &mut State,
        topic: &Arc<str>,
        partition_count: u32,
        size: usize,
    ) -> u32 {
        let seed = self.sticky_seed;
        let mut sticky = state
            .sticky
            .get(topic)
            .copied()
            .unwrap_or_else(|| Sticky::start(seed, partition_count));
        let current = TopicPartition {
            topic: Arc::clone(topic),
            partition: sticky.partition % partition_count.max(1),
        };
        let batch_bytes = self.config.batch_bytes;
        let open_with_room = state
            .queues
            .get(&current)
            .and_then(|queue| queue.open.as_ref())
            .filter(|open| open.builder.uncompressed_bytes() + size <= batch_bytes)
            .map(PendingBatch::id);
        let partition = sticky.next(open_with_room, partition_count);
        state.sticky.insert(Arc::clone(topic), sticky);
        partition
    }

    /// Adds a record to its partition's open batch, closing that batch
    /// first if the record would take it past `batch_bytes`. Returns the id
    /// of the batch the record went into.
    fn push(
        &self,
        state: &mut State,
        topic_partition: TopicPartition,
        record: &NewRecord,
        size: usize,
        slot: RecordSlot,
    ) -> Result<u64, ClientError> {
        let batch_bytes = self.config.batch_bytes;
        let next_id = &mut state.next_batch_id;
        let queue = state.queues.entry(topic_partition.clone()).or_default();
        if let Some(open) = &queue.open
            && !open.records.is_empty()
            && open.builder.uncompressed_bytes() + size > batch_bytes
            && let Some(full) = queue.open.take()
        {
            queue.ready.push_back(full);
            self.wake.notify_one();
        }
        let opened = queue.open.is_none();
        if opened {
            *next_id += 1;
            let (done, marker) = watch::channel(());
            lock(&self.registry).insert(*next_id, marker);
            let capacity = (queue.last_bytes + size).min(batch_bytes);
            queue.open = Some(PendingBatch {
                topic_partition,
                builder: BatchBuilder::with_capacity(self.config.compression, capacity),
                records: Vec::with_capacity(queue.last_records + 1),
                created_at: Instant::now(),
                ticket: Ticket {
                    id: *next_id,
                    memory_bytes: 0,
                    memory: Arc::clone(&self.memory),
                    registry: Arc::clone(&self.registry),
                    _done: done,
                },
            });
        }
        let Some(open) = queue.open.as_mut() else {
            unreachable!("an open batch was just ensured");
        };
        if let Err(error) = open.builder.push(record) {
            self.unreserve(size);
            return Err(ClientError::InvalidArgument(error.to_string()));
        }
        open.ticket.memory_bytes += size;
        open.records.push(slot);
        queue.last_bytes = open.builder.uncompressed_bytes();
        queue.last_records = open.records.len();
        let id = open.id();
        let linger_deadline = open.created_at + self.config.linger;
        if open.builder.uncompressed_bytes() >= batch_bytes
            && let Some(full) = queue.open.take()
        {
            queue.ready.push_back(full);
            self.wake.notify_one();
        } else if opened
            && state
                .sender_back_by
                .is_none_or(|back_by| back_by > linger_deadline)
        {
            // A new linger deadline the sender does not expect: one wake
            // per linger, not one per batch (with one-record batches the
            // sender turned once per record, looking at every partition).
            state.sender_back_by = Some(Instant::now());
            self.wake.notify_one();
        }
        Ok(id)
    }

    /// Returns the partitions that have something to send (a ready batch,
    /// or an open one that lingered long enough), the next instant
    /// something here needs the sender (a linger deadline or a delivery
    /// deadline), and the earliest delivery deadline alone. With `force`,
    /// or after close, open batches close first.
    pub(crate) fn ready(
        &self,
        now: Instant,
        force: bool,
        delivery_timeout: Duration,
    ) -> (Vec<TopicPartition>, Option<Instant>, Option<Instant>) {
        let mut state = lock(&self.state);
        let force = force || state.closed.is_some();
        let linger = self.config.linger;
        let mut ready = Vec::new();
        let mut next: Option<Instant> = None;
        let mut expiry: Option<Instant> = None;
        let earliest = |slot: &mut Option<Instant>, at: Instant| {
            *slot = Some(slot.map_or(at, |current| current.min(at)));
        };
        for (topic_partition, queue) in &mut state.queues {
            if force && let Some(open) = queue.open.take() {
                queue.ready.push_back(open);
            }
            let oldest = queue.ready.front().or(queue.open.as_ref());
            if let Some(oldest) = oldest {
                earliest(&mut expiry, oldest.created_at + delivery_timeout);
            }
            let lingered = match &queue.open {
                Some(open) if open.created_at + linger > now => {
                    earliest(&mut next, open.created_at + linger);
                    false
                }
                Some(_) => true,
                None => false,
            };
            if lingered || !queue.ready.is_empty() {
                ready.push(topic_partition.clone());
            }
        }
        if let Some(expiry) = expiry {
            earliest(&mut next, expiry);
        }
        state.sender_back_by = next;
        (ready, next, expiry)
    }

    /// Takes the next batch of a partition to send: the oldest ready one,
    /// else the open one once it has lingered by `now` (closing it).
    pub(crate) fn pop_ready(
        &self,
        topic_partition: &TopicPartition,
        now: Instant,
    ) -> Option<PendingBatch> {
        let linger = self.config.linger;
        let mut state = lock(&self.state);
        let queue = state.queues.get_mut(topic_partition)?;
        if let Some(batch) = queue.ready.pop_front() {
            return Some(batch);
        }
        if queue
            .open
            .as_ref()
            .is_some_and(|open| open.created_at + linger <= now)
        {
            return queue.open.take();
        }
        None
    }

    /// Removes every unsent batch created at or before `deadline` (their
    /// delivery timeout has passed) and returns them to be failed.
    pub(crate) fn expire(&self, deadline: Instant) -> Vec<PendingBatch> {
        let mut state = lock(&self.state);
        let mut expired = Vec::new();
        for queue in state.queues.values_mut() {
            while queue
                .ready
                .front()
                .is_some_and(|batch| batch.created_at <= deadline)
            {
                expired.extend(queue.ready.pop_front());
            }
            if queue
                .open
                .as_ref()
                .is_some_and(|batch| batch.created_at <= deadline)
            {
                expired.extend(queue.open.take());
            }
        }
        expired
    }

    /// Removes every unsent batch (fencing, or a sender that must stop).
    pub(crate) fn drain_all(&self) -> Vec<PendingBatch> {
        let mut state = lock(&self.state);
        let mut all = Vec::new();
        for queue in state.queues.values_mut() {
            all.extend(queue.ready.drain(..));
            all.extend(queue.open.take());
        }
        all
    }

    /// Whether no batch is buffered (open or ready).
    pub(crate) fn is_empty(&self) -> bool {
        lock(&self.state)
            .queues
            .values()
            .all(|queue| queue.open.is_none() && queue.ready.is_empty())
    }

    /// Refuses new records from now on. `reason` is `None` for an orderly
    /// close.
    pub(crate) fn close(&self, reason: Option<String>) {
        {
            let mut state = lock(&self.state);
            if state.closed.is_none() || reason.is_some() {
                state.closed = Some(reason);
            }
        }
        self.wake.notify_one();
    }

    /// Whether [`Accumulator::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed.is_some()
    }

    /// The error for a record refused because of a close, if closed.
    pub(crate) fn closed_error(&self) -> Option<ClientError> {
        lock(&self.state)
            .closed
            .clone()
            .map(|reason| ClientError::ProducerClosed { reason })
    }

    /// Closes every open batch and returns markers that resolve when every
    /// batch that exists now (buffered or in flight) has completed.
    pub(crate) fn flush_markers(&self) -> Vec<watch::Receiver<()>> {
        {
            let mut state = lock(&self.state);
            for queue in state.queues.values_mut() {
                if let Some(open) = queue.open.take() {
                    queue.ready.push_back(open);
                }
            }
        }
        self.wake.notify_one();
        lock(&self.registry).values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(batch_bytes: usize, buffer_bytes: usize) -> AccumulatorConfig {
        AccumulatorConfig {
            linger: Duration::from_millis(5),
            batch_bytes,
            buffer_bytes,
            compression: Compression::None,
        }
    }

    fn record(value_bytes: usize) -> NewRecord {
        NewRecord {
            value: Some(Bytes::from(vec![7_u8; value_bytes])),
            timestamp: TimestampMs(1),
            ..NewRecord::default()
        }
    }

    fn append(accumulator: &Accumulator, partition: u32, value_bytes: usize) -> DeliveryFuture {
        let record = record(value_bytes);
        let size = record_size(&record);
        accumulator.try_reserve(size).unwrap();
        let topic: Arc<str> = Arc::from("t");
        accumulator
            .append(&topic, Target::Partition(partition), &record, size)
            .unwrap()
            .1
    }

    fn tp(partition: u32) -> TopicPartition {
        TopicPartition {
            topic: Arc::from("t"),
            partition,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn batch_closes_when_the_next_record_would_pass_batch_bytes() {
        let accumulator = Accumulator::new(config(1000, 1 << 20));
        let timeout = Duration::from_secs(120);
        for _ in 0..3 {
            drop(append(&accumulator, 0, 250));
        }
        // Three records of ~282 bytes plus the header: not full yet.
        let (ready, _, _) = accumulator.ready(Instant::now(), false, timeout);
        assert!(ready.is_empty());
        drop(append(&accumulator, 0, 250));
        let (ready, _, _) = accumulator.ready(Instant::now(), false, timeout);
        assert_eq!(ready, [tp(0)]);
        let batch = accumulator.pop_ready(&tp(0), Instant::now()).unwrap();
        assert_eq!(batch.records.len(), 3);
        assert!(batch.builder.uncompressed_bytes() <= 1000);
        assert!(accumulator.pop_ready(&tp(0), Instant::now()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_batch_wakes_the_sender_only_for_a_deadline_it_does_not_expect() {
        use futures::FutureExt;
        let accumulator = Accumulator::new(config(1 << 16, 1 << 20));
        let timeout = Duration::from_secs(120);
        let woken =
            |accumulator: &Accumulator| accumulator.wake.notified().now_or_never().is_some();
        drop(append(&accumulator, 0, 10));
        assert!(woken(&accumulator), "the first linger deadline is news");
        drop(append(&accumulator, 1, 10));
        assert!(
            !woken(&accumulator),
            "the sender has not looked since: one wake covers both"
        );
        let (_, next, _) = accumulator.ready(Instant::now(), false, timeout);
        assert_eq!(next, Some(Instant::now() + Duration::from_millis(5)));
        tokio::time::advance(Duration::from_millis(1)).await;
        drop(append(&accumulator, 2, 10));
        assert!(
            !woken(&accumulator),
            "the sender is back by an earlier deadline"
        );
        tokio::time::advance(Duration::from_millis(5)).await;
        for partition in 0..3 {
            assert!(
                accumulator
                    .pop_ready(&tp(partition), Instant::now())
                    .is_some()
            );
        }
        let (_, next, _) = accumulator.ready(Instant::now(), false, timeout);
        assert_eq!(next, None, "nothing buffered, nothing due");
        drop(append(&accumulator, 3, 10));
        assert!(
            woken(&accumulator),
            "without a promise every new batch wakes"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_may_be_sent_after_linger_and_the_deadline_is_reported() {
        let accumulator = Accumulator::new(config(1 << 16, 1 << 20));
        let timeout = Duration::from_secs(120);
        let start = Instant::now();
        drop(append(&accumulator, 1, 10));
        let (ready, next, _) = accumulator.ready(Instant::now(), false, timeout);
        assert!(ready.is_empty());
        assert_eq!(next, Some(start + Duration::from_millis(5)));
        tokio::time::advance(Duration::from_millis(4)).await;
        assert!(
            accumulator
                .ready(Instant::now(), false, timeout)
                .0
                .is_empty()
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        let (ready, next, _) = accumulator.ready(Instant::now(), false, timeout);
        assert_eq!(ready, [tp(1)]);
        // Now only the delivery deadline of the lingered batch remains.
        assert_eq!(next, Some(start + timeout));
    }

    /// Issue 14's stall: closing a batch at its linger deadline left a
    /// producer whose in-flight window was full with one small batch per
    /// linger per partition, and their per-batch cost kept it behind.
    #[tokio::test(start_paused = true)]
    async fn a_lingered_batch_keeps_taking_records_until_the_sender_takes_it() {
        let accumulator = Accumulator::new(config(1 << 16, 1 << 20));
        let timeout = Duration::from_secs(120);
        // The sender cannot take anything for 20 lingers (its window is
        // full) while a record arrives every linger.
        for _ in 0..20 {
            drop(append(&accumulator, 0, 100));
            tokio::time::advance(Duration::from_millis(5)).await;
            let (ready, next, _) = accumulator.ready(Instant::now(), false, timeout);
            assert_eq!(ready, [tp(0)]);
            assert!(next.is_some_and(|next| next > Instant::now()));
        }
        let batch = accumulator.pop_ready(&tp(0), Instant::now()).unwrap();
        assert_eq!(batch.records.len(), 20);
        assert!(accumulator.pop_ready(&tp(0), Instant::now()).is_none());
        // The next record opens a batch that lingers afresh.
        drop(append(&accumulator, 0, 100));
        assert!(accumulator.pop_ready(&tp(0), Instant::now()).is_none());
        tokio::time::advance(Duration::from_millis(5)).await;
        assert_eq!(
            accumulator
                .pop_ready(&tp(0), Instant::now())
                .map(|batch| batch.records.len()),
            Some(1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_buffer_makes_try_reserve_fail_and_reserve_wait_until_a_batch_completes() {
        let record = record(100);
        let size = record_size(&record);
        let accumulator = Arc::new(Accumulator::new(config(1 << 16, size * 2)));
        let _first = append(&accumulator, 0, 100);
        let _second = append(&accumulator, 0, 100);
        assert_eq!(accumulator.available_bytes(), 0);
        assert!(matches!(
            accumulator.try_reserve(size),
            Err(ClientError::BufferFull { .. })
        ));
        let waiter = {
            let accumulator = Arc::clone(&accumulator);
            tokio::spawn(async move { accumulator.reserve(size).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiter.is_finished(),
            "reserve must wait while the buffer is full"
        );
        // The batch completes (here: expires): its bytes come back.
        let expired = accumulator.expire(Instant::now());
        assert_eq!(expired.len(), 1);
        drop(expired);
        waiter.await.unwrap().unwrap();
        assert_eq!(accumulator.available_bytes(), size);
        // A record larger than the whole buffer can never fit.
        assert!(matches!(
            accumulator.try_reserve(size * 3),
            Err(ClientError::RecordTooLarge { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn flush_closes_open_batches_and_its_markers_resolve_on_completion() {
        let accumulator = Accumulator::new(config(1 << 16, 1 << 20));
        let _a = append(&accumulator, 0, 10);
        let _b = append(&accumulator, 1, 10);
        let mut markers = accumulator.flush_markers();
        assert_eq!(markers.len(), 2);
        let (mut ready, _, _) = accumulator.ready(Instant::now(), false, Duration::from_secs(1));
        ready.sort();
        assert_eq!(ready, [tp(0), tp(1)]);
        drop(accumulator.pop_ready(&tp(0), Instant::now()));
        assert!(
            markers[0].changed().await.is_err(),
            "completed batch resolves"
        );
        assert!(markers[1].has_changed().is_ok(), "pending batch does not");
    }

    #[tokio::test(start_paused = true)]
    async fn keyless_records_stick_to_one_partition_per_batch() {
        let accumulator = Accumulator::new(config(400, 1 << 20));
        let topic: Arc<str> = Arc::from("t");
        let mut partitions = Vec::new();
        for _ in 0..6 {
            let record = record(100);
            let size = record_size(&record);
            accumulator.try_reserve(size).unwrap();
            let (partition, _) = accumulator
                .append(&topic, Target::Sticky { partition_count: 3 }, &record, size)
                .unwrap();
            partitions.push(partition);
        }
        // Batches hold two of these records (the third would pass 400
        // bytes), so the partition changes every two records, round-robin.
        let first = partitions[0];
        let expected: Vec<u32> = (0..6).map(|i| (first + i / 2) % 3).collect();
        assert_eq!(partitions, expected);
    }

    #[tokio::test]
    async fn schema_header_is_refused_before_anything_is_reserved() {
        let mut record = record(1);
        record.headers.push(corelog_wire::batch::Header {
            key: "schema".to_owned(),
            value: None,
        });
        assert!(matches!(
            check_record(&record),
            Err(ClientError::InvalidArgument(_))
        ));
    }

    #[tokio::test]
    async fn closed_accumulator_refuses_records_and_returns_their_bytes() {
        let accumulator = Accumulator::new(config(1 << 16, 1000));
        accumulator.close(Some("fenced".to_owned()));
        let record = record(10);
        let size = record_size(&record);
        accumulator.try_reserve(size).unwrap();
        let topic: Arc<str> = Arc::from("t");
        let error = accumulator
            .append(&topic, Target::Partition(0), &record, size)
            .unwrap_err();
        assert!(error.to_string().contains("fenced"), "{error}");
        assert_eq!(accumulator.available_bytes(), 1000);
    }
}
