//! Group coordinators on a shard: routing group requests to the shard
//! whose `__groups` replica leads the group's partition, loading a
//! coordinator once a new leader's log is committed, their periodic work,
//! and the shard as the [`GroupHost`] they run on.

use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use corelog_replication::RoleView;
use corelog_wire::error::ErrorCode;
use corelog_wire::message::describe_groups::PartitionLag;
use corelog_wire::types::{LeaderEpoch, Offset, TimestampMs};
use futures::future::LocalBoxFuture;

use corelog_wire::types::PartitionId;

use super::shard::{Replica, Shard};
use super::wait_until;
use crate::group::host::{FoundOffset, GroupHost, Host};
use crate::group::log::GroupLog;
use crate::group::service::{self, AUDIT_TOPIC, Coordinator, GROUPS_TOPIC};
use crate::metadata::{MetadataSnapshot, ShardId};
use crate::partition::{OffsetQuery, PartitionError, PartitionSummary, Produced, ReplicaSummary};
use crate::replica::{Acks, ReplicatedPartition};
use corelog_storage::disk::Disk;
use corelog_storage::{DeletedRange, ReadOutcome};

/// How often group coordinators expire silent members and complete due
/// rebalances: a fraction of the shortest session timeout (1 s).
const GROUP_TICK: Duration = Duration::from_millis(250);

/// How often a new `__groups` leader waiting for its quorum rechecks that
/// it still leads.
const COORDINATOR_LOAD_CHECK: Duration = Duration::from_secs(1);

/// How long an internal append (audit records) may wait for its quorum.
const INTERNAL_PRODUCE_TIMEOUT: Duration = Duration::from_secs(10);

impl Shard {
    /// This shard as the host of its coordinators.
    fn host(&self) -> Host {
        self.rc()
    }

    /// Runs `work` with the coordinator of `group`, on the shard whose
    /// `__groups` replica leads the group's partition, and returns its
    /// answer: each group operation is one typed call.
    ///
    /// # Errors
    /// `COORDINATOR_NOT_AVAILABLE` while the coordinators start or load, or
    /// when the coordinator's shard stopped; `NOT_COORDINATOR` when another
    /// broker leads the group's partition, or this one stopped leading it;
    /// `QUEUE_FULL` (retriable) when the coordinator's shard is busy.
    pub async fn on_coordinator<T, F, Fut>(&self, group: &str, work: F) -> Result<T, PartitionError>
    where
        F: FnOnce(Host, Rc<Coordinator>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let (index, owner) = self.coordinator_of(group)?;
        let served = self.invoke_on(owner, move |shard| async move {
            let coordinator = shard.local_coordinator(index)?;
            Ok(work(shard.host(), coordinator).await)
        });
        served.await.map_err(|error| {
            if error.code == ErrorCode::LeaderNotAvailable {
                PartitionError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    "the coordinator's shard stopped",
                )
            } else {
                error
            }
        })?
    }

    /// The `__groups` partition that coordinates `group`, and the shard
    /// here that leads it.
    fn coordinator_of(&self, group: &str) -> Result<(u32, ShardId), PartitionError> {
        let partitions = self
            .snapshot()
            .topics
            .get(GROUPS_TOPIC)
            .map_or(0, |view| view.record.partitions);
        if partitions == 0 {
            return Err(PartitionError::new(
                ErrorCode::CoordinatorNotAvailable,
                "the broker is still starting its group coordinators; retry",
            ));
        }
        let index = service::groups_partition_for(group, partitions);
        match self.locate(GROUPS_TOPIC, index) {
            Ok((_, owner)) => Ok((index, owner)),
            // Another broker leads the group's `__groups` partition: the
            // client finds the coordinator again.
            Err(error) if error.code == ErrorCode::NotLeader => Err(PartitionError::new(
                ErrorCode::NotCoordinator,
                error.message,
            )),
            Err(error) if error.code == ErrorCode::NotEnoughReplicas => Err(PartitionError::new(
                ErrorCode::CoordinatorNotAvailable,
                error.message,
            )),
            Err(error) => Err(error),
        }
    }

    /// This shard's coordinator of `__groups` partition `index`, while its
    /// replica leads.
    fn local_coordinator(&self, index: u32) -> Result<Rc<Coordinator>, PartitionError> {
        self.check_coordinator_leads(index)?;
        self.coordinators
            .borrow()
            .get(&index)
            .cloned()
            .ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    "the group coordinator is loading; retry",
                )
            })
    }

    /// Drops the coordinator of `__groups` partition `index` (its replica
    /// no longer leads): its groups' series go with it, or this broker
    /// would export them frozen beside the new coordinator's.
    pub(super) fn retire_coordinator(&self, index: u32) {
        let retired = self.coordinators.borrow_mut().remove(&index);
        if let Some(coordinator) = retired {
            for (group, partitions) in coordinator.retire() {
                let partitions: Vec<(String, u32)> = partitions.into_iter().collect();
                self.metrics.forget_group(&group, &partitions, true);
            }
        }
    }

    pub(super) fn local_groups(&self) -> Vec<(String, &'static str, u32, i32)> {
        self.coordinators
            .borrow()
            .values()
            .flat_map(|coordinator| coordinator.list())
            .collect()
    }

    /// Every group on every shard: (group, state, members, generation). A
    /// busy or stopping shard's groups are left out.
    pub async fn list_groups(&self) -> Vec<(String, &'static str, u32, i32)> {
        let others = self
            .other_shard_ids()
            .map(|shard| self.invoke_on(shard, |shard| async move { shard.local_groups() }));
        let mut groups = self.local_groups();
        for listed in futures::future::join_all(others).await {
            groups.extend(listed.unwrap_or_default());
        }
        groups.sort();
        groups
    }

    /// A new leader of a `__groups` partition: once everything the log
    /// holds is committed (the high watermark passed this epoch's start
    /// marker, so every earlier epoch's records are committed too), replays
    /// it into a coordinator. Gives up when the leadership ends first.
    pub(super) async fn load_coordinator(&self, index: u32, replica: Replica, epoch: LeaderEpoch) {
        let leads = |replica: &Replica| matches!(replica.role(), RoleView::Leader { epoch: led, .. } if led == epoch);
        let end = replica.durable_end();
        let signal = replica.high_watermark_signal();
        loop {
            if !leads(&replica) || self.is_stopping() {
                return;
            }
            let deadline = Instant::now() + COORDINATOR_LOAD_CHECK;
            if wait_until(&signal, deadline, || replica.high_watermark() >= end).await {
                break;
            }
            tracing::info!(
                partition = index,
                epoch = epoch.0,
                "__groups leader waits for its quorum before loading groups"
            );
        }
        if leads(&replica) {
            self.start_coordinator(index, Rc::new(ReplicatedGroupLog(replica)))
                .await;
        }
    }

    async fn start_coordinator(&self, index: u32, log: Rc<dyn GroupLog>) {
        match Coordinator::load(index, log, self.clock().now()).await {
            Ok(coordinator) => {
                self.coordinators
                    .borrow_mut()
                    .insert(index, Rc::new(coordinator));
            }
            Err(error) => {
                tracing::error!(partition = index, %error, "cannot load the group coordinator");
            }
        }
    }

    /// Refuses group requests on a `__groups` replica that is not leading
    /// (it stepped down before the metadata said so): its coordinator's
    /// view may be stale.
    fn check_coordinator_leads(&self, index: u32) -> Result<(), PartitionError> {
        let snapshot = self.snapshot();
        let Some((view, _)) = snapshot.partition(GROUPS_TOPIC, index) else {
            return Ok(());
        };
        let id = PartitionId {
            topic_id: view.record.id,
            partition: index,
        };
        match self.replicas.borrow().get(&id) {
            Some(replica)
                if !matches!(
                    replica.role(),
                    RoleView::Leader {
                        accepting_writes: true,
                        ..
                    }
                ) =>
            {
                Err(PartitionError::new(
                    ErrorCode::NotCoordinator,
                    "this broker no longer leads the group's __groups partition; find the coordinator again",
                ))
            }
            _ => Ok(()),
        }
    }

    /// Runs every group coordinator's tick (session expiry, rebalance
    /// deadlines, compaction, lag metrics) every [`GROUP_TICK`] until shutdown.
    pub async fn run_group_maintenance(self: Rc<Self>) {
        let host = self.host();
        while !self.is_stopping() {
            glommio::timer::sleep(GROUP_TICK).await;
            let coordinators: Vec<_> = self.coordinators.borrow().values().cloned().collect();
            for coordinator in coordinators {
                service::tick(&host, &coordinator).await;
            }
        }
    }
}

impl GroupHost for Shard {
    fn now(&self) -> TimestampMs {
        self.clock().now()
    }

    fn snapshot(&self) -> Arc<MetadataSnapshot> {
        Shard::snapshot(self)
    }

    fn group_timeout_max_ms(&self) -> u32 {
        self.config.group_timeout_max_ms
    }

    fn offset<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        query: OffsetQuery,
    ) -> LocalBoxFuture<'a, Result<FoundOffset, PartitionError>> {
        Box::pin(self.offset_anywhere(topic, partition, query))
    }

    fn summary<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
    ) -> LocalBoxFuture<'a, Result<ReplicaSummary, PartitionError>> {
        Box::pin(self.summary_anywhere(topic, partition))
    }

    fn read<'a>(
        &'a self,
        topic: &'a str,
        partition: u32,
        offset: Offset,
        max_bytes: usize,
    ) -> LocalBoxFuture<'a, Result<Vec<Bytes>, PartitionError>> {
        Box::pin(self.read_anywhere(topic, partition, offset, max_bytes))
    }

    fn append_audit(&self, batch: BytesMut) -> LocalBoxFuture<'_, Result<Offset, PartitionError>> {
        Box::pin(async move {
            let shard = self.me.upgrade().ok_or_else(|| {
                PartitionError::new(ErrorCode::LeaderNotAvailable, "the broker is stopping")
            })?;
            // `__audit/0` is led by one broker; coordinators of the
            // other brokers append through it.
            shard
                .produce_anywhere(AUDIT_TOPIC, 0, batch, INTERNAL_PRODUCE_TIMEOUT)
                .await
        })
    }

    fn observe_lag(&self, group: &str, lag: &PartitionLag, known: bool) {
        self.metrics.group_lag(group, lag, known);
    }

    fn observe_generation(&self, group: &str, generation: i32) {
        self.metrics.group_generation(group, generation);
    }

    fn forget_group(&self, group: &str, partitions: &[(String, u32)], whole_group: bool) {
        self.metrics.forget_group(group, partitions, whole_group);
    }
}

/// How long a replicated `__groups` append may wait for its quorum.
const REPLICATED_APPEND_TIMEOUT: Duration = Duration::from_secs(10);

/// A replicated `__groups` partition, as its leader's coordinator uses it.
#[derive(Debug)]
pub struct ReplicatedGroupLog<D: Disk>(pub Rc<ReplicatedPartition<D>>);

impl<D: Disk> GroupLog for ReplicatedGroupLog<D> {
    fn summary(&self) -> PartitionSummary {
        self.0.summary()
    }

    fn read(
        &self,
        from: Offset,
        max_bytes: usize,
    ) -> LocalBoxFuture<'_, Result<ReadOutcome, PartitionError>> {
        Box::pin(async move { Ok(self.0.read(from, max_bytes).await?) })
    }

    fn append(&self, batch: BytesMut) -> LocalBoxFuture<'_, Result<Produced, PartitionError>> {
        Box::pin(async move {
            Ok(self
                .0
                .produce(batch, Acks::Quorum, REPLICATED_APPEND_TIMEOUT)
                .await?)
        })
    }

    fn delete_segment_below(
        &self,
        offset: Offset,
    ) -> LocalBoxFuture<'_, Result<Option<DeletedRange>, PartitionError>> {
        Box::pin(async move { Ok(self.0.compact_below(offset).await?) })
    }
}
