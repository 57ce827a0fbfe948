//! Consumer groups: members share a topic's partitions, one owner per
//! partition per group, and the group's progress is a committed next offset
//! per partition that the coordinator keeps durably (C6).
//!
//! ```no_run
//! use corelog_client::group::{GroupConfig, GroupConsumer};
//!
//! # async fn example() -> Result<(), corelog_client::ClientError> {
//! let config = GroupConfig::new("127.0.0.1:7100", "search", ["orders"]);
//! let mut consumer = GroupConsumer::connect(config).await?;
//! loop {
//!     let polled = consumer.poll().await?;
//!     for event in &polled.events {
//!         eprintln!("{event}");
//!     }
//!     for record in &polled.records {
//!         // ... apply the record to the sink, in the sink's own transaction ...
//!         consumer.complete(record);
//!     }
//!     consumer.commit().await?;
//! }
//! # }
//! ```
//!
//! # Progress is what completed, never what was fetched
//!
//! Records handed out by [`GroupConsumer::poll`] are *outstanding* until the
//! application calls [`GroupConsumer::complete`] (or a [`Completer`] from
//! another task). [`GroupConsumer::commit`] commits, per partition, only the
//! completed prefix ([`tracker`]): with 117 and 119 complete and 118 still
//! running, it commits 118. That is the seed's rule (§12): the bookmark
//! moves only past records whose work has all finished, so a crash repeats
//! work and never skips it. The repeats are why the sink must be
//! duplicate-safe (see `examples/search_projection/`). Auto-commit
//! (`auto_commit`, off by default) commits the same completed prefix every
//! `commit_interval` from the background.
//!
//! # Membership and rebalances
//!
//! A background task (`group/membership.rs`) joins the group, sends
//! heartbeats at the interval the coordinator asks for, and rejoins when
//! the coordinator starts a rebalance. The heartbeats go on while the
//! application is busy, so a slow record does not cost the membership; a
//! member that is stuck for good must be stopped by the application (there
//! is no poll-interval watchdog). Assignment is computed by the
//! coordinator: sticky and cooperative, so a member keeps consuming what it
//! keeps and only partitions that move are revoked. Changes reach the application as
//! [`GroupEvent`]s in the next [`GroupPolled`], in this order: revoked (and
//! lost) partitions have already stopped being fetched and their later
//! completions are ignored; newly assigned partitions start at the group's
//! committed offset, or at [`GroupConfig::start_from`] when there is none.
//!
//! Before rejoining, the task commits the completed prefix in the current
//! generation. A commit racing a rebalance may still be refused
//! (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `NOT_OWNER`): the new owner
//! then replays those records, which the duplicate-safe sink absorbs.
//!
//! # Static membership
//!
//! With [`GroupConfig::instance_id`] set, a restarted member that joins with
//! the same instance id within the session timeout gets its old member id,
//! generation and assignment back without a rebalance. That is why
//! [`GroupConsumer::close`] does **not** send LeaveGroup for a static
//! member: leaving would rebalance the group at every restart. A static
//! member that goes away for good is removed after the session timeout
//! (or by `corelog group delete` once the group is empty). Dynamic members
//! (no instance id) leave on close, so their partitions move at once.
//!
//! # Poison records
//!
//! [`GroupConsumer::run`] applies the group's [`PoisonPolicy`] to each
//! record: bounded retries, then stop, skip or quarantine, each with an
//! audit record. See [`poison`].

pub(crate) mod coordinator;
mod membership;
pub mod poison;
mod runner;
pub mod tracker;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use corelog_wire::batch::BatchLimits;
use corelog_wire::error::ErrorCode;
use corelog_wire::topic::{INTERNAL_TOPIC_PREFIX, check_topic_name};
use corelog_wire::types::Offset;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::coordinator::Coordinator;
pub use self::coordinator::{CommitResults, CommittedOffset, MemberGeneration, OffsetToCommit};
use self::membership::Shared;
pub use self::poison::{Outcome, PoisonAction, PoisonPolicy, RetryPolicy};
pub use self::tracker::{DEFAULT_WINDOW_RECORDS, OffsetTracker, TopicPartition, TrackError};
use crate::config::ClientConfig;
use crate::consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, Notice, OffsetOutOfRangePolicy, StartFrom,
};
use crate::error::ClientError;
use crate::producer::{Producer, ProducerConfig};

/// Longest group id, in bytes (the wire crate's rule).
pub use corelog_wire::group::GROUP_ID_BYTES_MAX;

/// Group consumer settings. [`GroupConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// Where the cluster is. `client_name` is the member's client id.
    pub client: ClientConfig,
    /// Group id.
    pub group: String,
    /// Topics to consume.
    pub topics: Vec<String>,
    /// A member silent for this long is removed by the coordinator (and
    /// stops consuming on its own side). Default 10 s.
    pub session_timeout: Duration,
    /// How long a rebalance may wait for members to rejoin. Default 30 s.
    pub rebalance_timeout: Duration,
    /// Static membership id; see the module docs. Default none.
    pub instance_id: Option<String>,
    /// Where a partition starts when the group has no committed offset for
    /// it. Default `Earliest`: a new group reads the retained history.
    pub start_from: StartFrom,
    /// Commit the completed prefix every `commit_interval` from the
    /// background. Default off: the application commits.
    pub auto_commit: bool,
    /// How often auto-commit and [`GroupConsumer::run`] commit. Default 1 s.
    pub commit_interval: Duration,
    /// What [`GroupConsumer::run`] does with a record whose handler keeps
    /// failing. Default: three retries, then stop.
    pub poison: PoisonPolicy,
    /// Who the audit records of poison decisions name; `None` (the
    /// default) names the client (`client.client_name`).
    pub principal: Option<String>,
    /// Outstanding records per partition before its fetching pauses
    /// ([`tracker`]). Default 10,000.
    pub window_records: usize,
    /// Keys processed at once by [`GroupConsumer::run`]. Default 16.
    pub max_concurrency: usize,
    /// Longest time the broker holds a fetch. Default 500 ms.
    pub fetch_max_wait: Duration,
    /// Most bytes of records in one fetch response. Default 16 MiB.
    pub fetch_max_bytes: u32,
    /// Most bytes per partition in one fetch response. Default 1 MiB.
    pub partition_max_bytes: u32,
    /// What to do when a position was deleted by retention. Default
    /// `Error` (C7).
    pub offset_out_of_range: OffsetOutOfRangePolicy,
    /// Wait before retrying after a retriable error. Default 100 ms.
    pub retry_backoff: Duration,
}

impl GroupConfig {
    /// Defaults for `group` consuming `topics` from one bootstrap address.
    #[must_use]
    pub fn new<T: Into<String>>(
        bootstrap: impl Into<String>,
        group: impl Into<String>,
        topics: impl IntoIterator<Item = T>,
    ) -> GroupConfig {
        GroupConfig::with_client(ClientConfig::new(bootstrap), group, topics)
    }

    /// Defaults for `group` consuming `topics`, reaching the cluster as
    /// `client` says.
    #[must_use]
    pub fn with_client<T: Into<String>>(
        client: ClientConfig,
        group: impl Into<String>,
        topics: impl IntoIterator<Item = T>,
    ) -> GroupConfig {
        let defaults = ConsumerConfig::default();
        GroupConfig {
            principal: None,
            client,
            group: group.into(),
            topics: topics.into_iter().map(Into::into).collect(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            instance_id: None,
            start_from: StartFrom::Earliest,
            auto_commit: false,
            commit_interval: Duration::from_secs(1),
            poison: PoisonPolicy::default(),
            window_records: DEFAULT_WINDOW_RECORDS,
            max_concurrency: 16,
            fetch_max_wait: defaults.fetch_max_wait,
            fetch_max_bytes: defaults.fetch_max_bytes,
            partition_max_bytes: defaults.partition_max_bytes,
            offset_out_of_range: defaults.offset_out_of_range,
            retry_backoff: defaults.retry_backoff,
        }
    }

    fn consumer_config(&self) -> ConsumerConfig {
        ConsumerConfig {
            client: self.client.clone(),
            fetch_max_wait: self.fetch_max_wait,
            fetch_min_bytes: 1,
            fetch_max_bytes: self.fetch_max_bytes,
            partition_max_bytes: self.partition_max_bytes,
            offset_out_of_range: self.offset_out_of_range,
            batch_limits: BatchLimits::default(),
            fetch_decompressed_bytes_max: ConsumerConfig::default().fetch_decompressed_bytes_max,
            retry_backoff: self.retry_backoff,
        }
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), ClientError> {
        let invalid = |text: &str| Err(ClientError::InvalidConfig(text.to_owned()));
        self.consumer_config().validate()?;
        validate_group_id(&self.group)
            .map_err(|error| ClientError::InvalidConfig(error.to_string()))?;
        if self.topics.is_empty() {
            return invalid("a group consumer needs at least one topic");
        }
        for topic in &self.topics {
            // The broker's rule (corelog_wire::topic), with `__` allowed as
            // the prefix of an internal topic: a group may read the audit log.
            check_topic_name(topic, topic.starts_with(INTERNAL_TOPIC_PREFIX))
                .map_err(|error| ClientError::InvalidConfig(error.to_string()))?;
        }
        // The coordinator refuses shorter timeouts: a member could not
        // heartbeat reliably.
        if self.session_timeout < Duration::from_secs(1)
            || self.rebalance_timeout < Duration::from_secs(1)
        {
            return invalid("session_timeout and rebalance_timeout must be at least 1 s");
        }
        if self.commit_interval.is_zero() {
            return invalid("commit_interval must be positive");
        }
        if self.window_records == 0 || self.max_concurrency == 0 {
            return invalid("window_records and max_concurrency must be at least 1");
        }
        if self.instance_id.as_ref().is_some_and(String::is_empty) {
            return invalid("instance_id must not be empty (use None for dynamic membership)");
        }
        self.poison.validate()
    }
}

/// Checks a group id: 1 to [`GROUP_ID_BYTES_MAX`] bytes, no control
/// characters.
///
/// # Errors
/// [`ClientError::InvalidArgument`] saying what is wrong.
pub fn validate_group_id(group: &str) -> Result<(), ClientError> {
    corelog_wire::group::check_group_id(group)
        .map_err(|invalid| ClientError::InvalidArgument(invalid.to_string()))
}

/// A change the application should know about, returned by
/// [`GroupConsumer::poll`] before the records of the same poll.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupEvent {
    /// These partitions are now this member's, starting at the group's
    /// committed offsets.
    Assigned {
        /// The generation they were assigned in.
        generation: i32,
        /// The partitions.
        partitions: Vec<TopicPartition>,
    },
    /// These partitions moved to another member (or were withheld for a
    /// round): they are no longer fetched, and completions of their
    /// records are ignored.
    Revoked {
        /// The generation that no longer includes them.
        generation: i32,
        /// The partitions.
        partitions: Vec<TopicPartition>,
    },
    /// The membership was lost (session timeout, fenced generation): every
    /// partition was dropped without a final commit; another member may
    /// own them already. The member joins again as new.
    Lost {
        /// The partitions dropped.
        partitions: Vec<TopicPartition>,
    },
    /// A position was out of range and jumped to the log start (under
    /// `OffsetOutOfRangePolicy::ResetToEarliest`).
    OffsetReset(Notice),
}

fn list(partitions: &[TopicPartition]) -> String {
    partitions
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for GroupEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupEvent::Assigned {
                generation,
                partitions,
            } => write!(f, "generation {generation}: assigned {}", list(partitions)),
            GroupEvent::Revoked {
                generation,
                partitions,
            } => write!(f, "generation {generation}: revoked {}", list(partitions)),
            GroupEvent::Lost { partitions } => {
                write!(f, "membership lost: dropped {}", list(partitions))
            }
            GroupEvent::OffsetReset(notice) => write!(f, "{notice}"),
        }
    }
}

/// What one [`GroupConsumer::poll`] returned.
#[derive(Clone, Debug, Default)]
pub struct GroupPolled {
    /// Membership changes and notices, oldest first.
    pub events: Vec<GroupEvent>,
    /// Records of owned partitions, in offset order within each partition.
    /// Each is outstanding until completed.
    pub records: Vec<ConsumerRecord>,
}

/// Marks records complete from any task. Cheap to clone.
#[derive(Clone)]
pub struct Completer {
    shared: Arc<Shared>,
}

impl fmt::Debug for Completer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completer").finish_non_exhaustive()
    }
}

impl Completer {
    /// Marks a record's work done; see [`GroupConsumer::complete`].
    pub fn complete(&self, record: &ConsumerRecord) -> bool {
        self.complete_offset(
            &TopicPartition::new(Arc::clone(&record.topic), record.partition),
            record.offset,
        )
    }

    /// Marks the record at `offset` of `partition` done.
    pub fn complete_offset(&self, partition: &TopicPartition, offset: Offset) -> bool {
        self.shared.lock().tracker.complete(partition, offset)
    }
}

/// Where a partition stopped under the Stop policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoppedPartition {
    /// The partition.
    pub partition: TopicPartition,
    /// The record it stopped at.
    pub offset: Offset,
    /// Why.
    pub error: String,
}

/// A member of a consumer group. One task owns it; hand a [`Completer`] to
/// others. Needs a tokio runtime.
pub struct GroupConsumer {
    config: GroupConfig,
    consumer: Consumer,
    coordinator: Arc<Coordinator>,
    shared: Arc<Shared>,
    changes: watch::Receiver<u64>,
    /// What the fetcher is assigned, as of the last poll.
    applied: BTreeSet<TopicPartition>,
    applied_lost_count: u64,
    /// Events not yet returned: kept here so that a cancelled poll loses
    /// none.
    pending_events: Vec<GroupEvent>,
    stopped: BTreeMap<TopicPartition, StoppedPartition>,
    dead_letters: Option<Producer>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupConsumer")
            .field("group", &self.config.group)
            .field("assignment", &self.applied)
            .finish_non_exhaustive()
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        // Without close: no final commit and no LeaveGroup; the coordinator
        // removes the member after its session timeout.
        self.shutdown.send_replace(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl GroupConsumer {
    /// Connects, checks that the topics exist, and starts the membership
    /// task, which joins the group in the background; the first
    /// [`GroupConsumer::poll`] returns the assignment.
    ///
    /// # Errors
    /// [`ClientError::InvalidConfig`], `UNKNOWN_TOPIC_OR_PARTITION` for a
    /// missing topic, connection errors; for the Quarantine policy, the
    /// dead-letter producer's errors.
    pub async fn connect(config: GroupConfig) -> Result<GroupConsumer, ClientError> {
        config.validate()?;
        let consumer = Consumer::connect(config.consumer_config()).await?;
        let cluster = Arc::clone(consumer.cluster());
        for topic in &config.topics {
            cluster.topic_metadata(topic).await?;
        }
        let dead_letters = match &config.poison.then {
            PoisonAction::Quarantine { dead_letter_topic } => {
                let defaults = ProducerConfig::default();
                let request_timeout = config.client.request_timeout;
                let producer = Producer::connect(ProducerConfig {
                    client: config.client.clone(),
                    // One record at a time, waited for: nothing to batch.
                    linger: Duration::ZERO,
                    // The broker must answer before the client gives up on
                    // the connection, whatever request_timeout is.
                    ack_timeout: defaults.ack_timeout.min(request_timeout * 2 / 3),
                    delivery_timeout: defaults.delivery_timeout.max(request_timeout * 2),
                    ..defaults
                })
                .await?;
                producer.prepare_topic(dead_letter_topic).await?;
                Some(producer)
            }
            PoisonAction::Stop | PoisonAction::Skip => None,
        };
        let coordinator = Arc::new(Coordinator::new(cluster, &config.group));
        let shared = Arc::new(Shared::new(OffsetTracker::new(config.window_records)));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let settings = membership::Settings {
            topics: config.topics.clone(),
            instance_id: config.instance_id.clone(),
            client_id: config.client.client_name.clone(),
            session_timeout: config.session_timeout,
            rebalance_timeout: config.rebalance_timeout,
            auto_commit: config.auto_commit.then_some(config.commit_interval),
            retry_backoff: config.retry_backoff,
        };
        let task = tokio::spawn(membership::run(
            Arc::clone(&shared),
            Arc::clone(&coordinator),
            settings,
            shutdown_rx,
        ));
        let changes = shared.changed.subscribe();
        Ok(GroupConsumer {
            config,
            consumer,
            coordinator,
            shared,
            changes,
            applied: BTreeSet::new(),
            applied_lost_count: 0,
            pending_events: Vec::new(),
            stopped: BTreeMap::new(),
            dead_letters,
            shutdown,
            task: Some(task),
        })
    }

    /// The group id.
    #[must_use]
    pub fn group(&self) -> &str {
        &self.config.group
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// This member's id and generation; `None` until it has joined (and
    /// after it lost its membership, until it joins again).
    #[must_use]
    pub fn generation(&self) -> Option<MemberGeneration> {
        let state = self.shared.lock();
        state.member_id.as_ref().map(|member_id| MemberGeneration {
            member_id: member_id.clone(),
            generation: state.generation,
        })
    }

    /// Waits until the member has joined (or `timeout` passed) and returns
    /// its id and generation.
    ///
    /// # Errors
    /// The error that ended the membership for good;
    /// `REQUEST_TIMED_OUT` if `timeout` passed first.
    pub async fn wait_joined(
        &mut self,
        timeout: Duration,
    ) -> Result<MemberGeneration, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.shared.changed.subscribe();
        loop {
            if let Some(error) = self.shared.lock().fatal.clone() {
                return Err(error);
            }
            if let Some(generation) = self.generation() {
                return Ok(generation);
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return Err(ClientError::Broker {
                    code: ErrorCode::RequestTimedOut,
                    context: format!("join group {}", self.config.group),
                    detail: Some(format!("not joined within {timeout:?}")),
                });
            }
        }
    }

    /// The partitions the fetcher reads, as of the last poll.
    #[must_use]
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.applied.iter().cloned().collect()
    }

    /// The position of a partition: the offset of its next record to
    /// fetch.
    #[must_use]
    pub fn position(&self, partition: &TopicPartition) -> Option<Offset> {
        self.consumer
            .position(&partition.topic, partition.partition)
    }

    /// Whether every partition this member fetches has been read up to its
    /// high watermark as of its last fetch: nothing more to read for now.
    /// `true` for a member without partitions.
    #[must_use]
    pub fn caught_up(&self) -> bool {
        self.consumer.caught_up()
    }

    /// The offset [`GroupConsumer::commit`] would commit for a partition.
    #[must_use]
    pub fn committable(&self, partition: &TopicPartition) -> Option<Offset> {
        self.shared.lock().tracker.committable(partition)
    }

    /// Partitions stopped by the poison policy.
    #[must_use]
    pub fn stopped(&self) -> Vec<StoppedPartition> {
        self.stopped.values().cloned().collect()
    }

    /// Marks a record's work done, so that the completed prefix can move
    /// past it. Returns whether it was outstanding (a record of a revoked
    /// partition, or one completed before, changes nothing).
    pub fn complete(&self, record: &ConsumerRecord) -> bool {
        self.completer().complete(record)
    }

    /// A handle for marking records complete from other tasks.
    #[must_use]
    pub fn completer(&self) -> Completer {
        Completer {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Commits the completed prefix of every owned partition whose prefix
    /// moved, with the current generation, and returns what was committed.
    /// The offsets are durable when this returns.
    ///
    /// # Errors
    /// `ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID` or `NOT_OWNER` when a
    /// rebalance got there first (harmless: the new owner replays the
    /// records); connection errors (retriable: commit again).
    pub async fn commit(&self) -> Result<Vec<(TopicPartition, Offset)>, ClientError> {
        membership::commit_completed(&self.shared, &self.coordinator).await
    }

    /// Waits for records of owned partitions (up to `fetch_max_wait`) and
    /// returns them with the membership changes since the last poll.
    ///
    /// # Errors
    /// The error that ended the membership for good (for example
    /// `INVALID_GROUP_ID`); the fetch errors of [`Consumer::poll`]
    /// (`OFFSET_OUT_OF_RANGE` under the Error policy, corrupt batches);
    /// retriable errors reading committed offsets. Nothing is lost on error:
    /// poll again.
    ///
    /// Cancel-safe: dropping the future loses at most the records of that
    /// fetch, which are fetched again.
    pub async fn poll(&mut self) -> Result<GroupPolled, ClientError> {
        if let Some(error) = self.shared.lock().fatal.clone() {
            return Err(error);
        }
        self.apply_membership().await?;
        if self.applied.is_empty() {
            // Nothing to fetch: wait for an assignment instead of spinning.
            let _ = tokio::time::timeout(self.config.fetch_max_wait, self.changes.changed()).await;
            return Ok(GroupPolled {
                events: std::mem::take(&mut self.pending_events),
                records: Vec::new(),
            });
        }
        self.update_pauses();
        let polled = self.consumer.poll().await?;
        let records = self.hand_out(polled.records);
        let mut events = std::mem::take(&mut self.pending_events);
        events.extend(polled.notices.into_iter().map(GroupEvent::OffsetReset));
        Ok(GroupPolled { events, records })
    }

    /// Brings the fetcher's assignment in line with the membership and
    /// queues the difference as events.
    async fn apply_membership(&mut self) -> Result<(), ClientError> {
        let (assignment, generation, lost_count) = {
            let state = self.shared.lock();
            self.changes.borrow_and_update();
            (state.assignment.clone(), state.generation, state.lost_count)
        };
        if lost_count != self.applied_lost_count {
            let dropped: Vec<TopicPartition> =
                std::mem::take(&mut self.applied).into_iter().collect();
            for partition in &dropped {
                self.drop_partition(partition);
            }
            self.applied_lost_count = lost_count;
            if !dropped.is_empty() {
                self.pending_events.push(GroupEvent::Lost {
                    partitions: dropped,
                });
            }
        }
        let revoked: Vec<TopicPartition> = self.applied.difference(&assignment).cloned().collect();
        for partition in &revoked {
            self.drop_partition(partition);
            self.applied.remove(partition);
        }
        if !revoked.is_empty() {
            self.pending_events.push(GroupEvent::Revoked {
                generation,
                partitions: revoked,
            });
        }
        let added: Vec<TopicPartition> = assignment.difference(&self.applied).cloned().collect();
        if !added.is_empty() {
            let started = self.start_partitions(&added, lost_count).await?;
            if !started.is_empty() {
                self.pending_events.push(GroupEvent::Assigned {
                    generation,
                    partitions: started,
                });
            }
        }
        Ok(())
    }

    fn drop_partition(&mut self, partition: &TopicPartition) {
        self.consumer
            .unassign(&partition.topic, partition.partition);
        self.stopped.remove(partition);
        self.shared.lock().tracker.revoke(partition);
    }

    /// Starts newly assigned partitions at the group's committed offsets;
    /// returns those started (not revoked again meanwhile).
    async fn start_partitions(
        &mut self,
        added: &[TopicPartition],
        lost_count: u64,
    ) -> Result<Vec<TopicPartition>, ClientError> {
        let coordinator = &self.coordinator;
        let committed = coordinator
            .retrying(|| coordinator.fetch_offsets(Some(added)))
            .await?;
        let mut state = self.shared.lock();
        let mut started = Vec::with_capacity(added.len());
        for partition in added {
            // Revoked again while the offsets were read: the next poll
            // catches up.
            if !state.assignment.contains(partition) || state.lost_count != lost_count {
                continue;
            }
            started.push(partition.clone());
            let next_offset = committed
                .iter()
                .find(|offset| offset.partition == *partition)
                .and_then(|offset| offset.next_offset);
            let start = next_offset.map_or(self.config.start_from, StartFrom::Offset);
            self.consumer
                .assign(&partition.topic, partition.partition, start);
            state.tracker.assign(partition.clone(), next_offset);
            self.applied.insert(partition.clone());
        }
        Ok(started)
    }

    /// Pauses partitions whose window is full or that the poison policy
    /// stopped; resumes the others.
    fn update_pauses(&mut self) {
        let state = self.shared.lock();
        for partition in &self.applied {
            let pause =
                self.stopped.contains_key(partition) || state.tracker.capacity(partition) == 0;
            if pause {
                self.consumer.pause(&partition.topic, partition.partition);
            } else {
                self.consumer.resume(&partition.topic, partition.partition);
            }
        }
    }

    /// Tracks fetched records and returns those handed out: records of
    /// partitions revoked meanwhile are dropped, and records beyond a
    /// partition's window are fetched again later.
    fn hand_out(&mut self, records: Vec<ConsumerRecord>) -> Vec<ConsumerRecord> {
        let mut handed = Vec::with_capacity(records.len());
        let mut refetch: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
        {
            let mut state = self.shared.lock();
            for record in records {
                let partition = TopicPartition::new(Arc::clone(&record.topic), record.partition);
                if refetch.contains_key(&partition) || !state.assignment.contains(&partition) {
                    continue;
                }
                match state.tracker.track(&partition, record.offset) {
                    Ok(()) => handed.push(record),
                    Err(TrackError::WindowFull { .. }) => {
                        refetch.insert(partition, record.offset);
                    }
                    Err(error) => {
                        tracing::debug!(%error, "fetched record not handed out");
                    }
                }
            }
        }
        for (partition, offset) in &refetch {
            self.consumer.seek(
                &partition.topic,
                partition.partition,
                StartFrom::Offset(*offset),
            );
        }
        // Offsets below the fetch position that held no record (control
        // batches, a gap jumped by policy) need no completion.
        let mut state = self.shared.lock();
        for partition in &self.applied {
            if let Some(position) = self
                .consumer
                .position(&partition.topic, partition.partition)
            {
                state.tracker.skip_to(partition, position);
            }
        }
        handed
    }

    /// Stops fetching a partition at a poison record.
    fn stop_partition(&mut self, stopped: StoppedPartition) {
        self.consumer
            .pause(&stopped.partition.topic, stopped.partition.partition);
        let entry = self
            .stopped
            .entry(stopped.partition.clone())
            .or_insert_with(|| stopped.clone());
        if stopped.offset < entry.offset {
            *entry = stopped;
        }
    }

    /// Reads a stopped partition again from its completed prefix (the
    /// poison record first), for example after the handler was fixed.
    /// Does nothing for a partition that is not stopped.
    pub fn restart_partition(&mut self, partition: &TopicPartition) {
        if self.stopped.remove(partition).is_none() {
            return;
        }
        let mut state = self.shared.lock();
        let from = state.tracker.committable(partition);
        let committed = state.tracker.last_committed(partition);
        state.tracker.assign(partition.clone(), from);
        if let Some(committed) = committed {
            state.tracker.committed(partition, committed);
        }
        if let Some(from) = from {
            self.consumer.seek(
                &partition.topic,
                partition.partition,
                StartFrom::Offset(from),
            );
        }
        self.consumer.resume(&partition.topic, partition.partition);
    }

    /// Stops the membership task, commits the completed prefix, and — for a
    /// dynamic member — leaves the group so its partitions move at once. A
    /// static member does not leave (see the module docs).
    ///
    /// # Errors
    /// The final commit's or LeaveGroup's error (the member is stopped
    /// either way). A final commit refused because a rebalance got there
    /// first is not an error: the next owner replays those records.
    pub async fn close(mut self) -> Result<(), ClientError> {
        self.shutdown.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let committed = self.commit().await;
        let member_id = self.shared.lock().member_id.clone();
        let left = match member_id {
            Some(member_id) if self.config.instance_id.is_none() => {
                self.coordinator.leave(&member_id).await
            }
            _ => Ok(()),
        };
        if let Some(producer) = self.dead_letters.take() {
            producer.close().await?;
        }
        match committed {
            // A rebalance got there first: the next owner replays.
            Err(error) if runner::superseded(&error) => {
                tracing::debug!(group = %self.config.group, %error, "final commit superseded");
            }
            other => {
                other?;
            }
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_settings_are_checked_before_connecting() {
        let config = GroupConfig::new("127.0.0.1:7100", "search", ["orders"]);
        config.validate().unwrap();
        assert_eq!(config.start_from, StartFrom::Earliest);
        assert!(!config.auto_commit, "the application commits by default");
        let bad = |change: fn(&mut GroupConfig)| {
            let mut config = config.clone();
            change(&mut config);
            config.validate().unwrap_err().to_string()
        };
        assert!(bad(|c| c.group.clear()).contains("group id"));
        assert!(bad(|c| c.topics.clear()).contains("at least one topic"));
        assert!(bad(|c| c.topics = vec!["no spaces".to_owned()]).contains("letters, digits"));
        assert!(bad(|c| c.session_timeout = Duration::from_millis(500)).contains("at least 1 s"));
        assert!(bad(|c| c.window_records = 0).contains("window_records"));
        assert!(bad(|c| c.instance_id = Some(String::new())).contains("instance_id"));
        assert!(
            bad(|c| c.poison = PoisonPolicy::quarantine("bad topic")).contains("dead_letter_topic")
        );
    }

    /// A group may read an internal topic (the audit log), but its dead
    /// letters go to a topic the client writes, which no `__` topic is:
    /// the broker refuses such a produce, so the policy is refused up front.
    #[test]
    fn a_group_may_read_an_internal_topic_but_not_quarantine_into_one() {
        let mut config = GroupConfig::new("127.0.0.1:7100", "audit-shipper", ["__audit"]);
        config.validate().unwrap();
        config.poison = PoisonPolicy::quarantine("__audit.dlq");
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("dead_letter_topic"), "{error}");
        assert!(error.contains("reserved for internal topics"), "{error}");
    }

    #[test]
    fn events_read_as_sentences() {
        let event = GroupEvent::Revoked {
            generation: 7,
            partitions: vec![
                TopicPartition::new("orders", 1),
                TopicPartition::new("orders", 3),
            ],
        };
        assert_eq!(
            event.to_string(),
            "generation 7: revoked orders/1, orders/3"
        );
    }
}
