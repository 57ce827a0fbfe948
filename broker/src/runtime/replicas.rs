//! A shard's replicas: opening the ones the controller placed on this
//! shard, following the leadership it publishes, answering leaders' pushes
//! and the controller's election queries, the timer that drives leaders'
//! pushes, and closing replicas of deleted topics.
//!
//! Leadership comes only from published metadata: a replica leads an epoch
//! when a snapshot names this broker leader in that epoch, and follows the
//! named leader otherwise ([`crate::replica::role_change`] decides which
//! change a snapshot asks for). Each snapshot's role changes run on their
//! own task per partition; an older snapshot's change arriving late is
//! refused by the state machine (its epoch is below the fence), so order
//! between snapshots needs no coordination here.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corelog_replication::wire as replication_wire;
use corelog_replication::{ReplicaConfig, ReplicaId};
use corelog_wire::error::ErrorCode;
use corelog_wire::message::partition_report::LedPartitionV1;
use corelog_wire::message::replica_push::{ReplicaPushRequest, ReplicaPushResponse};
use corelog_wire::message::replica_query::{ReplicaQueryRequest, ReplicaQueryResponse};
use corelog_wire::message::replica_stream::{ReplicaStreamRequest, ReplicaStreamResponse};
use event_listener::Event;
use futures::StreamExt;

use super::deletion::Doomed;
use super::fatal;
use super::shard::{Replica, Shard};
use crate::group::service::GROUPS_TOPIC;
use crate::log_limit::LogLimit;
use crate::metadata::snapshot::{PartitionView, ReplicationView, TopicView};
use crate::metadata::{MetadataSnapshot, ShardId, topic_dir};
use crate::metrics::FollowerLagSample;
use crate::partition::{PartitionError, PartitionSpec};
use crate::replica::peer_transport::PeerFrameCarrier;
use crate::replica::stream::{ReplicationStreams, StreamLimits};
use crate::replica::{ReplicaSpec, ReplicatedPartition, RoleChange, resignation, role_change};
use corelog_wire::types::PartitionId;

/// How often leaders are given the time (pushes due, resends, heartbeats)
/// and replication gauges are sampled.
const REPLICATION_TICK: Duration = Duration::from_millis(20);

/// The most batch bytes one replication stream frame carries (4 MiB: four
/// of the largest pushes).
const FRAME_BYTES_MAX: usize = 4 << 20;

/// The role changes one snapshot started, for a caller that waits for them.
#[derive(Debug, Default)]
pub(super) struct RoleChanges {
    pending: Rc<Cell<usize>>,
    /// Notified as each one ends.
    pub(super) done: Rc<Event>,
}

impl RoleChanges {
    /// Role changes still running.
    pub(super) fn pending(&self) -> usize {
        self.pending.get()
    }

    /// Whether every one ended.
    pub(super) fn all_done(&self) -> bool {
        self.pending.get() == 0
    }
}

thread_local! {
    /// Replicas that cannot open for want of descriptors, logged at most
    /// once a minute: every maintenance round retries them.
    static OPEN_SHORTAGE_LOG: std::cell::RefCell<LogLimit> =
        const { std::cell::RefCell::new(LogLimit::new(std::time::Duration::from_secs(60))) };
}

impl Shard {
    /// Opens the replicas `snapshot` places on this shard and starts
    /// following the published leadership of each. Returns the partitions
    /// this shard should host and the role changes started.
    pub(super) async fn apply_replicas(
        &self,
        snapshot: &MetadataSnapshot,
    ) -> (BTreeSet<PartitionId>, RoleChanges) {
        let placed: Vec<(&str, &TopicView, &PartitionView, PartitionId)> = snapshot
            .topics
            .iter()
            .flat_map(|(name, view)| {
                view.partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, partition)| {
                        partition.replication.local && partition.owner == self.id
                    })
                    .map(move |(index, partition)| {
                        let id = PartitionId {
                            topic_id: view.record.id,
                            partition: index as u32,
                        };
                        (name.as_str(), &**view, partition, id)
                    })
            })
            .collect();
        let missing: Vec<_> = placed
            .iter()
            .filter(|(.., id)| !self.replicas.borrow().contains_key(id))
            .collect();
        let progress = RefCell::new(Progress::new(self.id, "opening partitions", missing.len()));
        // Opening reads and syncs a few files: several at once keep the
        // disk busy instead of waiting on it one partition at a time.
        futures::stream::iter(missing)
            .for_each_concurrent(OPENS_AT_ONCE, |(name, view, partition, id)| {
                let progress = &progress;
                async move {
                    // One that fails is logged and kept in `failed`.
                    let _opened = self.open_replica(name, view, partition, *id).await;
                    progress.borrow_mut().one_done();
                }
            })
            .await;
        progress.into_inner().finish();
        let changes = RoleChanges::default();
        for (name, _, partition, id) in &placed {
            let opened = self.replicas.borrow().get(id).cloned();
            if let Some(replica) = opened {
                self.follow_leadership(name, *id, &replica, &partition.replication, &changes);
            }
        }
        let wanted = placed.iter().map(|(.., id)| *id).collect();
        (wanted, changes)
    }

    /// Opens (recovering) this shard's replica of partition `id` of topic
    /// `name`; `None` (logged, and the reason kept for requests) when it
    /// cannot be opened.
    async fn open_replica(
        &self,
        name: &str,
        view: &TopicView,
        partition: &PartitionView,
        id: PartitionId,
    ) -> Option<Replica> {
        let index = id.partition;
        let dir = topic_dir(&self.config.data_dir, name, view.record.id).join(index.to_string());
        let spec = ReplicaSpec {
            id: ReplicaId(self.config.node_id),
            config: ReplicaConfig {
                in_sync_lag_ms: self.config.replica_lag_max_ms,
                ..ReplicaConfig::default()
            },
            partition: PartitionSpec {
                topic: name,
                id,
                dir: &dir,
                config: view.record.config,
                broker_log: self.config.log,
                producer_state_retention_ms: self.config.producer_state_retention_ms,
            },
            high_watermark_signal: partition.data_signal.clone(),
        };
        let transport = Rc::new(self.replication_streams().transport(id));
        let opened = ReplicatedPartition::open(
            self.disk.clone(),
            spec,
            self.storage.clone(),
            transport,
            self.executor.clone(),
        )
        .await;
        match opened {
            Ok(opened) => {
                self.failed.borrow_mut().remove(&id);
                self.replicas.borrow_mut().insert(id, opened.clone());
                Some(opened)
            }
            Err(error) => {
                // Damaged stored data stops the broker (exit code 4).
                fatal::on_replica_open_failed(name, index, &dir, &error);
                // Out of descriptors, every maintenance round tries again.
                if error.code() != ErrorCode::OutOfFileDescriptors {
                    tracing::error!(topic = %name, partition = index, %error, "cannot open replica");
                } else if let Some(left_out) = OPEN_SHORTAGE_LOG
                    .with(|limit| limit.borrow_mut().admit(std::time::Instant::now()))
                {
                    tracing::warn!(topic = %name, partition = index, %error, similar_lines_left_out = left_out, "cannot open replica for want of file descriptors; retrying");
                }
                let answer = PartitionError::new(
                    error.code(),
                    format!("the replica failed to open: {}", error.client_message()),
                );
                self.failed.borrow_mut().insert(id, answer);
                None
            }
        }
    }

    /// Starts the role change `replication` asks of `replica`, if any, on
    /// its own task, counted in `changes`.
    fn follow_leadership(
        &self,
        topic: &str,
        id: PartitionId,
        replica: &Replica,
        replication: &ReplicationView,
        changes: &RoleChanges,
    ) {
        let index = id.partition;
        let me = self.config.node_id;
        let learners: Vec<ReplicaId> = replication
            .learners
            .iter()
            .copied()
            .map(ReplicaId)
            .collect();
        // Named now, leading or not: a leadership that starts takes up the
        // newest, not those of the snapshot that started it.
        replica.set_learners(&learners, replication.learner_throttle_bytes_per_s);
        let Some(change) = role_change(replica.role(), replication, me) else {
            return;
        };
        let groups = topic == GROUPS_TOPIC;
        if groups && !matches!(change, RoleChange::Lead { .. }) {
            // The coordinator lives on the leader only.
            self.retire_coordinator(index);
        }
        let replica = replica.clone();
        let topic = topic.to_owned();
        let shard = self.me.clone();
        let pending = changes.pending.clone();
        let done = changes.done.clone();
        pending.set(pending.get() + 1);
        glommio::spawn_local(async move {
            let mut resign = None;
            let result = match &change {
                RoleChange::Lead { epoch, replicas } => replica.become_leader(*epoch, replicas).await,
                RoleChange::Follow { epoch, leader } => {
                    replica.become_follower(*epoch, *leader).await
                }
            };
            match result {
                Ok(()) => {
                    tracing::info!(%topic, partition = index, ?change, "replica role follows metadata");
                    // A new leadership starts without learners: name the
                    // newest.
                    replica.refresh_learners();
                    // A `__groups` leader's change is done once its
                    // coordinator serves.
                    if groups
                        && let RoleChange::Lead { epoch, .. } = change
                        && let Some(shard) = shard.upgrade()
                    {
                        shard.load_coordinator(index, replica, epoch).await;
                    }
                }
                Err(error) => {
                    tracing::debug!(%topic, partition = index, ?change, %error, "role change refused");
                    // A later snapshot (or query) already moved past this
                    // epoch, or this replica can never lead it: then the
                    // controller must elect again, and may not know it.
                    resign = resignation(&change, &error);
                }
            }
            pending.set(pending.get() - 1);
            done.notify(usize::MAX);
            // After the change counts as done: the resignation waits on the
            // controller, which may be waiting on this shard's snapshot.
            if let (Some(epoch), Some(shard)) = (resign, shard.upgrade()) {
                match shard.resign_leadership(id, epoch).await {
                    Ok(()) => tracing::info!(%topic, partition = index, epoch = epoch.0, "resigned a leadership this replica cannot take; the controller elects again"),
                    Err(error) => tracing::debug!(%topic, partition = index, %error, "cannot resign a leadership; a session change moves it"),
                }
            }
        })
        .detach();
    }

    /// Stops serving the replicas this shard should no longer host (their
    /// topic was deleted) and hands them to the deleter, which removes
    /// their files in the background (see [`super::deletion`]).
    pub(super) fn close_replicas_not_in(&self, wanted: &BTreeSet<PartitionId>) {
        let mut replicas = self.replicas.borrow_mut();
        let gone: Vec<PartitionId> = replicas
            .keys()
            .filter(|id| !wanted.contains(id))
            .copied()
            .collect();
        let doomed = gone
            .into_iter()
            .filter_map(|id| replicas.remove(&id).map(|replica| (id, replica)))
            .map(|(id, replica)| Doomed::Replica {
                id,
                topic: replica.partition().topic().to_owned(),
                replica,
            })
            .collect();
        drop(replicas);
        self.schedule_removal(doomed);
    }

    /// The streams this shard's leaders push to their followers over.
    pub(super) fn replication_streams(&self) -> &Rc<ReplicationStreams> {
        self.streams.get_or_init(|| {
            let carrier = PeerFrameCarrier::new(self.brokers.clone(), self.broker_resolver());
            // Half the largest frame a follower accepts leaves room for the
            // frame's own fields.
            let frame_bytes_max = (self.config.max_frame_bytes as usize / 2).min(FRAME_BYTES_MAX);
            ReplicationStreams::new(
                ReplicaId(self.config.node_id),
                Rc::new(carrier),
                self.executor.clone(),
                StreamLimits::for_frame_bytes(frame_bytes_max),
                Rc::new(self.metrics.clone()),
            )
        })
    }

    /// Serves a frame of a leader's replication stream: each push goes to
    /// its replica's owning shard, all at once (so that their appends share
    /// one group commit there), answered in frame order.
    pub async fn replica_stream(
        &self,
        request: ReplicaStreamRequest,
        raw: Bytes,
    ) -> ReplicaStreamResponse {
        serve_stream_frame(request, &raw, |push, records| {
            self.replica_push(push, records)
        })
        .await
    }

    /// Routes a leader's push to the shard owning the replica.
    pub async fn replica_push(
        &self,
        request: ReplicaPushRequest,
        raw: Bytes,
    ) -> ReplicaPushResponse {
        let (partition, owner) = match self.replica_owner(request.topic_id, request.partition) {
            Ok(found) => found,
            Err(message) => return replication_wire::push_refusal(ErrorCode::NotLeader, message),
        };
        let pushed = self.invoke_on(owner, move |shard| async move {
            shard.local_replica_push(partition, &request, raw).await
        });
        pushed
            .await
            .unwrap_or_else(|error| replication_wire::push_refusal(error.code, error.message))
    }

    /// Routes an election query to the shard owning the replica.
    pub async fn replica_query(&self, request: ReplicaQueryRequest) -> ReplicaQueryResponse {
        let (partition, owner) = match self.replica_owner(request.topic_id, request.partition) {
            Ok(found) => found,
            Err(message) => return replication_wire::query_refusal(ErrorCode::NotLeader, message),
        };
        let queried = self.invoke_on(owner, move |shard| async move {
            shard.local_replica_query(partition, &request).await
        });
        queried
            .await
            .unwrap_or_else(|error| replication_wire::query_refusal(error.code, error.message))
    }

    /// Where this broker's replica of `(topic_id, partition)` lives, or why
    /// there is none.
    fn replica_owner(
        &self,
        topic_id: u64,
        partition: u32,
    ) -> Result<(PartitionId, ShardId), String> {
        let snapshot = self.snapshot();
        let (_, view) = snapshot
            .partition_by_id(topic_id, partition)
            .ok_or_else(|| {
                format!(
                    "no partition {partition} of topic id {topic_id} in metadata version {}",
                    snapshot.version
                )
            })?;
        if !view.replication.local {
            return Err(format!(
                "this broker holds no replica of partition {partition} of topic id {topic_id}"
            ));
        }
        Ok((
            PartitionId {
                topic_id,
                partition,
            },
            view.owner,
        ))
    }

    /// Answers a push on the replica's own shard: the replica takes it as
    /// received and answers it whole.
    pub(super) async fn local_replica_push(
        &self,
        partition: PartitionId,
        request: &ReplicaPushRequest,
        raw: Bytes,
    ) -> ReplicaPushResponse {
        let Some(replica) = self.replicas.borrow().get(&partition).cloned() else {
            return replication_wire::push_refusal(
                ErrorCode::LeaderNotAvailable,
                "the replica is not open yet; retry".to_owned(),
            );
        };
        replica.serve_push(request, raw).await
    }

    /// Answers an election query on the replica's own shard.
    pub(super) async fn local_replica_query(
        &self,
        partition: PartitionId,
        request: &ReplicaQueryRequest,
    ) -> ReplicaQueryResponse {
        let Some(replica) = self.replicas.borrow().get(&partition).cloned() else {
            return replication_wire::query_refusal(
                ErrorCode::LeaderNotAvailable,
                "the replica is not open yet; retry".to_owned(),
            );
        };
        replica.serve_query(request).await
    }

    /// The partitions this shard leads, each with its in-sync replicas
    /// (this broker first) and whether its epoch committed: what the
    /// controller's view of them comes from.
    pub(crate) fn local_led_partitions(&self) -> Vec<LedPartitionV1> {
        self.replicas
            .borrow()
            .values()
            .filter_map(|replica| replica.led_report(self.config.node_id))
            .collect()
    }

    /// Publishes the lag of each follower of the partitions this shard
    /// leads, and drops the series of those it no longer leads.
    pub(super) fn sample_follower_lags(&self) {
        let snapshot = self.snapshot();
        let names: ahash::AHashMap<u64, &str> = snapshot
            .topics
            .values()
            .map(|topic| (topic.record.id, topic.record.name.as_str()))
            .collect();
        let mut samples = Vec::new();
        for (id, replica) in self.replicas.borrow().iter() {
            let (Some(followers), Some(topic)) =
                (replica.follower_status(), names.get(&id.topic_id))
            else {
                continue;
            };
            let summary = replica.summary();
            let held = summary.log_end.0.saturating_sub(summary.log_start.0);
            // Average record size times a number of records.
            let bytes_of = |records: u64| {
                if held == 0 {
                    0
                } else {
                    u64::try_from(
                        u128::from(summary.size_bytes) * u128::from(records.min(held))
                            / u128::from(held),
                    )
                    .unwrap_or(u64::MAX)
                }
            };
            for follower in followers {
                samples.push(FollowerLagSample {
                    topic: (*topic).to_owned(),
                    partition: id.partition,
                    follower: follower.replica.0,
                    records: follower.lag_records,
                    bytes: bytes_of(follower.lag_records),
                    milliseconds: follower.lag_ms,
                    learner_copied_bytes: (!follower.voter)
                        .then(|| bytes_of(held.saturating_sub(follower.lag_records))),
                });
            }
        }
        let previous = self.follower_lag_series.replace(samples);
        self.metrics
            .follower_lags(&self.follower_lag_series.borrow(), &previous);
    }

    /// Gives every replica the time (leaders push what is due) and samples
    /// the replication gauges, until shutdown.
    pub async fn run_replication_timers(self: Rc<Self>) {
        while !self.is_stopping() {
            glommio::timer::sleep(REPLICATION_TICK).await;
            let replicas: Vec<Replica> = self.replicas.borrow().values().cloned().collect();
            let mut lag = 0u64;
            let mut leading = 0i64;
            for replica in &replicas {
                replica.tick();
                if let Some(behind) = replica.follower_lag() {
                    lag = lag.saturating_add(behind);
                    leading += 1;
                }
            }
            self.metrics
                .replica_lag_records
                .set(i64::try_from(lag).unwrap_or(i64::MAX));
            self.metrics.replica_leader_partitions.set(leading);
        }
    }

    /// Housekeeping of every replica (retention below the high watermark).
    pub(super) async fn maintain_replicas(&self) {
        let replicas: Vec<Replica> = self.replicas.borrow().values().cloned().collect();
        for replica in replicas {
            if self.is_stopping() {
                break;
            }
            if let Err(error) = replica.maintain().await {
                let partition = replica.partition();
                tracing::error!(topic = partition.topic(), partition = partition.index(), %error, "replica housekeeping failed");
            }
        }
    }

    /// Closes every replica (shutdown).
    pub(super) async fn close_replicas(&self) {
        let replicas: Vec<Replica> = self
            .replicas
            .borrow_mut()
            .drain()
            .map(|(_, replica)| replica)
            .collect();
        let progress = RefCell::new(Progress::new(self.id, "closing partitions", replicas.len()));
        // Each close waits on a few fdatasyncs: several at once keep the
        // disk busy instead of waiting on it one partition at a time.
        futures::stream::iter(replicas)
            .for_each_concurrent(CLOSES_AT_ONCE, |replica| {
                let progress = &progress;
                async move {
                    if let Err(error) = replica.close().await {
                        let partition = replica.partition();
                        tracing::error!(topic = partition.topic(), partition = partition.index(), %error, "closing replica failed");
                    }
                    progress.borrow_mut().one_done();
                }
            })
            .await;
        progress.into_inner().finish();
    }
}

/// Partitions a shard closes at once when it stops.
const CLOSES_AT_ONCE: usize = 32;
/// Partitions a shard opens at once.
const OPENS_AT_ONCE: usize = 32;

/// How often a long opening or closing of partitions reports progress.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Progress of a long run over a shard's partitions (opening at start,
/// closing at shutdown): logged every [`PROGRESS_EVERY`], and at the end
/// if it was logged at all, so that a start or stop of thousands of
/// partitions is never silent for long.
struct Progress {
    shard: ShardId,
    what: &'static str,
    total: usize,
    done: usize,
    started: std::time::Instant,
    last_report: std::time::Instant,
    reported: bool,
}

impl Progress {
    fn new(shard: ShardId, what: &'static str, total: usize) -> Progress {
        let now = std::time::Instant::now();
        Progress {
            shard,
            what,
            total,
            done: 0,
            started: now,
            last_report: now,
            reported: false,
        }
    }

    fn one_done(&mut self) {
        self.done += 1;
        if self.last_report.elapsed() >= PROGRESS_EVERY {
            self.last_report = std::time::Instant::now();
            self.reported = true;
            tracing::info!(shard = %self.shard, done = self.done, total = self.total, "{}", self.what);
        }
    }

    fn finish(self) {
        if self.reported {
            tracing::info!(
                shard = %self.shard,
                done = self.done,
                total = self.total,
                seconds = self.started.elapsed().as_secs(),
                "{}: done",
                self.what
            );
        }
    }
}

/// Serves a stream frame with `serve_push`: cuts it into its pushes
/// ([`replication_wire::split_stream_frame`]: whole or not at all), starts
/// every push at once (each partition's replica orders its own pushes) and
/// answers them in frame order.
pub async fn serve_stream_frame<F, Fut>(
    request: ReplicaStreamRequest,
    raw: &Bytes,
    serve_push: F,
) -> ReplicaStreamResponse
where
    F: Fn(ReplicaPushRequest, Bytes) -> Fut,
    Fut: std::future::Future<Output = ReplicaPushResponse>,
{
    match replication_wire::split_stream_frame(request, raw) {
        Ok(pushes) => {
            let served = pushes
                .into_iter()
                .map(|(push, records)| serve_push(push, records));
            replication_wire::stream_answer(futures::future::join_all(served).await)
        }
        Err(refused) => refused,
    }
}
