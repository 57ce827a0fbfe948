//! The processing loop: [`GroupConsumer::run`] polls, hands records to the
//! application's handler under the group's poison policy — different keys
//! at once, each key in order — marks them complete, and commits the
//! completed prefix.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use corelog_wire::batch::Header;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::write_audit::{AuditAction, WriteAuditRequest};
use corelog_wire::types::Offset;
use futures::StreamExt;
use tokio::time::Instant;

use super::coordinator::Coordinator;
use super::membership::Shared;
use super::poison::{AuditEntry, Outcome, PoisonAction, PoisonEffects, PoisonPolicy, apply_policy};
use super::{GroupConsumer, GroupEvent, StoppedPartition, TopicPartition};
use crate::consumer::ConsumerRecord;
use crate::error::ClientError;
use crate::producer::{Producer, ProducerRecord};

/// The writes of the poison policy, through the group's coordinator and
/// the dead-letter producer.
struct GroupEffects<'a> {
    coordinator: &'a Coordinator,
    producer: Option<&'a Producer>,
    principal: &'a str,
}

impl PoisonEffects for GroupEffects<'_> {
    async fn dead_letter(
        &self,
        topic: &str,
        record: &ConsumerRecord,
        headers: Vec<Header>,
    ) -> Result<Offset, ClientError> {
        let producer = self.producer.ok_or_else(|| {
            ClientError::InvalidConfig("no dead-letter producer for this policy".to_owned())
        })?;
        let mut copy = ProducerRecord {
            topic: topic.to_owned(),
            partition: None,
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record.headers.clone(),
            timestamp: Some(record.timestamp),
            schema: record.schema,
        };
        copy.headers.extend(headers);
        let delivery = producer.send(copy).await?.await?;
        Ok(delivery.offset)
    }

    async fn audit(&self, entry: AuditEntry) -> Result<Offset, ClientError> {
        let (action, dead_letter_topic) = match entry.action {
            PoisonAction::Stop => (AuditAction::Stop, None),
            PoisonAction::Skip => (AuditAction::Skip, None),
            PoisonAction::Quarantine { dead_letter_topic } => {
                (AuditAction::Quarantine, Some(dead_letter_topic))
            }
        };
        let request = WriteAuditRequest {
            group: self.coordinator.group().to_owned(),
            topic: entry.topic,
            partition: entry.partition,
            offset: entry.offset.0,
            action,
            reason: entry.reason,
            principal: self.principal.to_owned(),
            dead_letter_topic,
            dead_letter_offset: entry
                .dead_letter_offset
                .map_or(-1, |offset| i64::try_from(offset.0).unwrap_or(i64::MAX)),
        };
        // A repeat after a lost answer may write the record twice; a
        // duplicate audit line is better than a skip without one.
        self.coordinator
            .retrying(|| self.coordinator.write_audit(&request))
            .await
    }
}

/// Runs records under the policy and completes them in the tracker.
struct Processor<'a> {
    group: &'a str,
    policy: &'a PoisonPolicy,
    shared: &'a Shared,
    effects: GroupEffects<'a>,
}

impl Processor<'_> {
    async fn process<H, Fut, E>(&self, record: &ConsumerRecord, handler: &H) -> Outcome
    where
        H: Fn(ConsumerRecord) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        let outcome = apply_policy(self.policy, self.group, record, handler, &self.effects).await;
        if outcome.is_complete() {
            let partition = TopicPartition::new(Arc::clone(&record.topic), record.partition);
            self.shared
                .lock()
                .tracker
                .complete(&partition, record.offset);
        }
        outcome
    }
}

/// Whether a commit error only means a rebalance got there first.
pub(super) fn superseded(error: &ClientError) -> bool {
    matches!(
        error.code(),
        Some(
            ErrorCode::IllegalGeneration
                | ErrorCode::UnknownMemberId
                | ErrorCode::NotOwner
                | ErrorCode::RebalanceInProgress
        )
    )
}

impl GroupConsumer {
    fn processor(&self) -> Processor<'_> {
        Processor {
            group: &self.config.group,
            policy: &self.config.poison,
            shared: &self.shared,
            effects: GroupEffects {
                coordinator: &self.coordinator,
                producer: self.dead_letters.as_ref(),
                principal: self
                    .config
                    .principal
                    .as_deref()
                    .unwrap_or(&self.config.client.client_name),
            },
        }
    }

    /// Runs `handler` on one record under the group's poison policy
    /// ([`super::poison`]) and marks it complete unless the outcome is
    /// [`Outcome::Stopped`], in which case the partition stops being
    /// fetched ([`GroupConsumer::stopped`]).
    pub async fn process_with_policy<H, Fut, E>(
        &mut self,
        record: &ConsumerRecord,
        handler: &H,
    ) -> Outcome
    where
        H: Fn(ConsumerRecord) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        let outcome = self.processor().process(record, handler).await;
        if let Outcome::Stopped { error, .. } = &outcome {
            self.stop_partition(StoppedPartition {
                partition: TopicPartition::new(Arc::clone(&record.topic), record.partition),
                offset: record.offset,
                error: error.clone(),
            });
        }
        outcome
    }

    /// Consumes until `shutdown` resolves: polls, runs `handler` on every
    /// record under the poison policy — up to `max_concurrency` keys at
    /// once, the records of one key (and the keyless records of one
    /// partition) one after another in offset order — and commits the
    /// completed prefix every `commit_interval` and at the end. Membership
    /// events are logged; use [`GroupConsumer::poll`] directly to act on
    /// them.
    ///
    /// A record handled successfully must have had its effect made durable
    /// by `handler` before it returns `Ok`: the offset may be committed any
    /// time after.
    ///
    /// # Errors
    /// [`ClientError::PoisonStopped`] when the Stop policy (or a failed
    /// quarantine) stopped a partition — after the other work of that poll
    /// finished and the completed prefix was committed; the consumer stays
    /// usable and keeps the partition stopped if `run` is called again.
    /// Non-retriable poll and commit errors.
    pub async fn run<H, Fut, E, S>(&mut self, handler: H, shutdown: S) -> Result<(), ClientError>
    where
        H: Fn(ConsumerRecord) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Display,
        S: Future<Output = ()>,
    {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut last_commit = Instant::now();
        let result = loop {
            let polled = tokio::select! {
                polled = self.poll() => polled,
                () = &mut shutdown => break Ok(()),
            };
            let polled = match polled {
                Ok(polled) => polled,
                Err(error) if error.is_retriable() => {
                    tracing::warn!(group = %self.config.group, %error, "poll failed; retrying");
                    tokio::time::sleep(self.config.retry_backoff).await;
                    continue;
                }
                Err(error) => break Err(error),
            };
            for event in &polled.events {
                match event {
                    GroupEvent::OffsetReset(_) | GroupEvent::Lost { .. } => {
                        tracing::warn!(group = %self.config.group, "{event}");
                    }
                    _ => tracing::info!(group = %self.config.group, "{event}"),
                }
            }
            let stops = self.process_batch(polled.records, &handler).await;
            let first_stop = stops.values().next().cloned();
            for stop in stops.into_values() {
                self.stop_partition(stop);
            }
            if let Some(stop) = first_stop {
                break Err(ClientError::PoisonStopped {
                    topic: stop.partition.topic.to_string(),
                    partition: stop.partition.partition,
                    offset: stop.offset.0,
                    error: stop.error,
                });
            }
            if last_commit.elapsed() >= self.config.commit_interval {
                last_commit = Instant::now();
                match self.commit().await {
                    Ok(_) => {}
                    Err(error) if superseded(&error) || error.is_retriable() => {
                        tracing::debug!(group = %self.config.group, %error, "commit skipped");
                    }
                    Err(error) => break Err(error),
                }
            }
        };
        match self.commit().await {
            Ok(_) => {}
            Err(error) if superseded(&error) => {
                tracing::debug!(group = %self.config.group, %error, "final commit superseded");
            }
            Err(error) => {
                if result.is_ok() {
                    return Err(error);
                }
                tracing::warn!(group = %self.config.group, %error, "final commit failed");
            }
        }
        result
    }

    /// Processes one poll's records: one lane per key (per partition for
    /// keyless records), lanes at once up to `max_concurrency`. Returns the
    /// partitions that stopped, each at its lowest poison offset.
    async fn process_batch<H, Fut, E>(
        &self,
        records: Vec<ConsumerRecord>,
        handler: &H,
    ) -> BTreeMap<TopicPartition, StoppedPartition>
    where
        H: Fn(ConsumerRecord) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: fmt::Display,
    {
        let mut lanes: Vec<Vec<ConsumerRecord>> = Vec::new();
        let mut lane_of: HashMap<(Arc<str>, u32, Option<Bytes>), usize> = HashMap::new();
        for record in records {
            let key = (
                Arc::clone(&record.topic),
                record.partition,
                record.key.clone(),
            );
            let lane = *lane_of.entry(key).or_insert_with(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            });
            lanes[lane].push(record);
        }
        let stopped: Mutex<BTreeMap<TopicPartition, StoppedPartition>> =
            Mutex::new(BTreeMap::new());
        let is_stopped = |partition: &TopicPartition| {
            stopped
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains_key(partition)
        };
        let processor = self.processor();
        futures::stream::iter(lanes)
            .for_each_concurrent(self.config.max_concurrency, |lane| {
                let processor = &processor;
                let stopped = &stopped;
                async move {
                    for record in lane {
                        let partition =
                            TopicPartition::new(Arc::clone(&record.topic), record.partition);
                        // Records after a stop stay outstanding: the
                        // committed offset cannot pass the poison record.
                        if is_stopped(&partition) || self.stopped.contains_key(&partition) {
                            break;
                        }
                        if let Outcome::Stopped { error, .. } =
                            processor.process(&record, handler).await
                        {
                            let mut stopped = stopped
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            let entry = stopped.entry(partition.clone()).or_insert_with(|| {
                                StoppedPartition {
                                    partition,
                                    offset: record.offset,
                                    error: error.clone(),
                                }
                            });
                            if record.offset < entry.offset {
                                entry.offset = record.offset;
                                entry.error = error;
                            }
                            break;
                        }
                    }
                }
            })
            .await;
        stopped
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
