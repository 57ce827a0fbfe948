//! Topics and metadata on a shard: topic changes and producer ids go to the
//! controller through shard 0's membership, and each new metadata version
//! comes back as a snapshot that every shard applies (opening, leading,
//! following and closing its replicas).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_wire::error::ErrorCode;
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::partition_report::LedPartitionV1;
use futures::future::LocalBoxFuture;

use corelog_controller::NodeId;
use corelog_controller::decommission::Decommission;
use corelog_wire::types::LeaderEpoch;

use corelog_wire::types::PartitionId;

use super::shard::Shard;
use super::wait_until;
use crate::cluster::ClusterRole;
use crate::cluster::membership::MemberHost;
use crate::cluster::membership::{TopicOutcome, TopicToCreate};
use crate::metadata::{MetadataSnapshot, ShardId};
use crate::partition::PartitionError;

/// How long applying a snapshot waits for the role changes it started
/// (a new topic's replicas taking their leadership, say) before it lets
/// the next one go: requests that meet a replica still changing its role
/// get a retriable `NOT_LEADER` or `LEADER_NOT_AVAILABLE`.
const ROLE_CHANGES_TIMEOUT: Duration = Duration::from_secs(5);

impl Shard {
    /// Runs `work` with the cluster role, on shard 0 where it lives.
    ///
    /// # Errors
    /// As [`Shard::invoke_on`]; `LEADER_NOT_AVAILABLE` before the role
    /// started; the work's own error.
    async fn with_cluster_role<T, F, Fut>(&self, work: F) -> Result<T, PartitionError>
    where
        F: FnOnce(ClusterRole) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, PartitionError>> + 'static,
        T: Send + 'static,
    {
        self.try_invoke_on(ShardId(0), move |shard| async move {
            let role = shard.cluster().ok_or_else(|| {
                PartitionError::new(
                    ErrorCode::LeaderNotAvailable,
                    "the broker is still starting its cluster role; retry",
                )
            })?;
            work(role).await
        })
        .await
    }

    /// Creates topics through the controller and waits until this broker
    /// sees them (and, on this broker, their replicas lead).
    pub async fn create_topics(
        &self,
        topics: Vec<TopicToCreate>,
        validate_only: bool,
    ) -> Vec<TopicOutcome> {
        let names: Vec<String> = topics.iter().map(|topic| topic.name.clone()).collect();
        let created = self
            .with_cluster_role(move |role| async move {
                Ok(role.member.create_topics(topics, validate_only).await)
            })
            .await;
        created.unwrap_or_else(|error| failed(&names, &error))
    }

    /// Deletes topics through the controller and waits until this broker
    /// sees them gone.
    pub async fn delete_topics(&self, names: Vec<String>) -> Vec<TopicOutcome> {
        let deleting = names.clone();
        let deleted = self
            .with_cluster_role(
                move |role| async move { Ok(role.member.delete_topics(deleting).await) },
            )
            .await;
        deleted.unwrap_or_else(|error| failed(&names, &error))
    }

    /// Creates, re-keys or deletes a user, or adds or removes an ACL or a
    /// quota, through the controller (see [`crate::cluster::membership`]'s
    /// `alter_security`); whether a put created the user or rule.
    ///
    /// # Errors
    /// The controller's refusal, or a timeout.
    pub async fn alter_security(&self, op: ControllerOp) -> Result<bool, PartitionError> {
        self.with_cluster_role(move |role| async move { role.member.alter_security(op).await })
            .await
    }

    /// Moves a partition's leadership through shard 0's membership (see
    /// `ClusterMember::elect_leader`).
    ///
    /// # Errors
    /// The controller's refusal, or a timeout.
    pub async fn elect_leader(
        &self,
        topic: String,
        partition: u32,
        to: Option<u32>,
        timeout: Duration,
    ) -> Result<(NodeId, LeaderEpoch), PartitionError> {
        self.with_cluster_role(move |role| async move {
            role.member
                .elect_leader(&topic, partition, to, timeout)
                .await
        })
        .await
    }

    /// Starts or cancels a partition's move through shard 0's membership
    /// (see `ClusterMember::reassign`).
    ///
    /// # Errors
    /// The controller's refusal, or a timeout.
    pub async fn reassign(
        &self,
        topic: String,
        partition: u32,
        replicas: Option<Vec<u32>>,
        throttle_bytes_per_s: u64,
        timeout: Duration,
    ) -> Result<(), PartitionError> {
        self.with_cluster_role(move |role| async move {
            role.member
                .reassign(&topic, partition, replicas, throttle_bytes_per_s, timeout)
                .await
        })
        .await
    }

    /// Puts a broker in maintenance or takes it out through shard 0's
    /// membership (see `ClusterMember::set_maintenance`).
    ///
    /// # Errors
    /// The controller's refusal, or a timeout.
    pub async fn set_maintenance(
        &self,
        node: u32,
        enabled: bool,
        timeout: Duration,
    ) -> Result<usize, PartitionError> {
        self.with_cluster_role(move |role| async move {
            role.member.set_maintenance(node, enabled, timeout).await
        })
        .await
    }

    /// Decommissions or recommissions a broker through shard 0's
    /// membership (see `ClusterMember::set_decommission`).
    ///
    /// # Errors
    /// The controller's refusal, or a timeout.
    pub async fn set_decommission(
        &self,
        node: u32,
        plan: Option<Decommission>,
        timeout: Duration,
    ) -> Result<u32, PartitionError> {
        self.with_cluster_role(move |role| async move {
            role.member.set_decommission(node, plan, timeout).await
        })
        .await
    }

    /// A producer id from the controller's blocks, or the next epoch of an
    /// existing one.
    ///
    /// # Errors
    /// `NOT_CONTROLLER` when no controller leader answers in time;
    /// `INVALID_PRODUCER_EPOCH` when the epoch is exhausted.
    pub async fn init_producer_id(
        &self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(i64, i16), PartitionError> {
        self.with_cluster_role(move |role| async move {
            role.member
                .init_producer_id(producer_id, producer_epoch)
                .await
        })
        .await
    }

    /// Resigns this broker's leadership of `partition` in `epoch` through
    /// shard 0's membership.
    ///
    /// # Errors
    /// When the controller cannot be reached or refuses.
    pub async fn resign_leadership(
        &self,
        partition: PartitionId,
        epoch: LeaderEpoch,
    ) -> Result<(), PartitionError> {
        self.with_cluster_role(move |role| async move {
            role.member
                .resign_leadership(partition.topic_id, partition.partition, epoch)
                .await
        })
        .await
    }

    /// Sends `snapshot` to every shard (this one included) and waits until
    /// all have applied it. Once every shard applied one the node serves
    /// from, all start serving: a connection accepted on one shard may ask
    /// for a partition another shard leads, so no shard serves before the
    /// slowest is done.
    pub async fn broadcast(&self, snapshot: Arc<MetadataSnapshot>) {
        let serving = snapshot.serving;
        let others = self.other_shard_ids().map(|shard| {
            let snapshot = snapshot.clone();
            self.invoke_on_waiting(shard, move |shard| async move {
                shard.apply_snapshot(snapshot).await;
            })
        });
        // A shard gone means the broker is stopping: nothing to wait for.
        let _applied = futures::join!(
            futures::future::join_all(others),
            self.apply_snapshot(snapshot.clone())
        );
        // Every shard let go of the replicas this snapshot deleted.
        self.sweep_deleted_topic_dirs(&snapshot).await;
        if serving && !self.is_ready.get() {
            for shard in self.other_shard_ids() {
                let _serving = self
                    .invoke_on_waiting(shard, |shard| async move { shard.mark_ready() })
                    .await;
            }
            self.mark_ready();
        }
    }

    /// Opens the replicas `snapshot` places on this shard, follows their
    /// published leadership, and closes (and deletes) those it no longer
    /// places here. Snapshots apply one at a time, in version order (an
    /// older one arriving late is ignored), each once its role changes are
    /// done (bounded by [`ROLE_CHANGES_TIMEOUT`]): so that a topic created
    /// through this broker takes writes when its creation is answered, and
    /// a single node accepts connections once its partitions lead.
    pub async fn apply_snapshot(&self, snapshot: Arc<MetadataSnapshot>) {
        let _applying = self.applying.lock().await;
        if snapshot.version < self.snapshot.borrow().version {
            return;
        }
        let (wanted, role_changes) = self.apply_replicas(&snapshot).await;
        self.close_replicas_not_in(&wanted);
        self.failed.borrow_mut().retain(|id, _| wanted.contains(id));
        self.metrics
            .partitions
            .set(self.replicas.borrow().len() as i64);
        *self.snapshot.borrow_mut() = snapshot;
        self.metadata_applied.notify(usize::MAX);
        let deadline = Instant::now() + ROLE_CHANGES_TIMEOUT;
        if !wait_until(&role_changes.done, deadline, || role_changes.all_done()).await {
            tracing::warn!(
                shard = %self.id,
                pending = role_changes.pending(),
                "replicas still changing their roles after {ROLE_CHANGES_TIMEOUT:?}"
            );
        }
    }
}

impl MemberHost for Shard {
    fn is_stopping(&self) -> bool {
        Shard::is_stopping(self)
    }

    fn snapshot(&self) -> Arc<MetadataSnapshot> {
        Shard::snapshot(self)
    }

    fn publish(&self, snapshot: Arc<MetadataSnapshot>) -> LocalBoxFuture<'_, ()> {
        Box::pin(self.broadcast(snapshot))
    }

    fn set_fenced(&self, fenced: bool) {
        self.metrics.broker_fenced.set(i64::from(fenced));
    }

    fn led_partitions(&self) -> LocalBoxFuture<'_, Vec<LedPartitionV1>> {
        Box::pin(async move {
            let others = self.other_shard_ids().map(|shard| {
                self.invoke_on_waiting(shard, |shard| async move { shard.local_led_partitions() })
            });
            let mut led = self.local_led_partitions();
            // A shard gone means the broker is stopping: it leads nothing.
            for answer in futures::future::join_all(others).await {
                led.extend(answer.unwrap_or_default());
            }
            led
        })
    }
}

/// Every topic of `names` failed with `error`.
fn failed(names: &[String], error: &PartitionError) -> Vec<TopicOutcome> {
    names
        .iter()
        .map(|name| TopicOutcome {
            name: name.clone(),
            result: Err(error.clone()),
        })
        .collect()
}
