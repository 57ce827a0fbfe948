//! Topics and metadata on a shard: topic changes and producer ids go to the
//! controller through shard 0's membership, and each new metadata version
//! comes back as a snapshot that every shard applies (opening, leading,
//! following and closing its replicas).

use std::sync::Arc;
use std::time::{Duration, Instant};

use corelog_wire::error::ErrorCode;
use corelog_wire::message::controller_operation::ControllerOp;
use corelog_wire::message::partition_report::LedPartition;
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;

use corelog_wire::types::LeaderEpoch;

use super::command::{PartitionId, ShardCommand, TopicOutcome, TopicToCreate};
use super::shard::Shard;
use super::wait_until;
use crate::cluster::membership::MemberHost;
use crate::metadata::{MetadataSnapshot, ShardId};
use crate::partition::PartitionError;

/// How long applying a snapshot waits for the role changes it started
/// (a new topic's replicas taking their leadership, say) before it lets
/// the next one go: requests that meet a replica still changing its role
/// get a retriable `NOT_LEADER` or `LEADER_NOT_AVAILABLE`.
const ROLE_CHANGES_TIMEOUT: Duration = Duration::from_secs(5);

impl Shard {
    /// Creates topics through the controller and waits until this broker
    /// sees them (and, on this broker, their replicas lead).
    pub async fn create_topics(
        &self,
        topics: Vec<TopicToCreate>,
        validate_only: bool,
    ) -> Vec<TopicOutcome> {
        if let Some(role) = self.cluster() {
            return role.member.create_topics(topics, validate_only).await;
        }
        let names: Vec<String> = topics.iter().map(|topic| topic.name.clone()).collect();
        let (reply, answer) = oneshot::channel();
        let command = ShardCommand::CreateTopics {
            topics,
            validate_only,
            reply,
        };
        self.forward_admin(command, answer, names).await
    }

    /// Deletes topics through the controller and waits until this broker
    /// sees them gone.
    pub async fn delete_topics(&self, names: Vec<String>) -> Vec<TopicOutcome> {
        if let Some(role) = self.cluster() {
            return role.member.delete_topics(names).await;
        }
        let (reply, answer) = oneshot::channel();
        let command = ShardCommand::DeleteTopics {
            names: names.clone(),
            reply,
        };
        self.forward_admin(command, answer, names).await
    }

    /// Creates, re-keys or deletes a user, or adds or removes an ACL,
    /// through the controller (see [`crate::cluster::membership`]'s
    /// `alter_security`); whether a put created the user or rule.
    ///
    /// # Errors
    /// The controller's refusal, or a timeout.
    pub async fn alter_security(&self, op: ControllerOp) -> Result<bool, PartitionError> {
        if let Some(role) = self.cluster() {
            return role.member.alter_security(op).await;
        }
        let (reply, answer) = oneshot::channel();
        self.send_now(ShardId(0), ShardCommand::AlterSecurity { op, reply })?;
        answer.await.unwrap_or_else(|_| {
            Err(PartitionError::new(
                ErrorCode::LeaderNotAvailable,
                "shard 0 stopped",
            ))
        })
    }

    async fn forward_admin(
        &self,
        command: ShardCommand,
        answer: oneshot::Receiver<Vec<TopicOutcome>>,
        names: Vec<String>,
    ) -> Vec<TopicOutcome> {
        let failed = |error: PartitionError| {
            names
                .iter()
                .map(|name| TopicOutcome {
                    name: name.clone(),
                    result: Err(error.clone()),
                })
                .collect()
        };
        if let Err(error) = self.send_now(ShardId(0), command) {
            return failed(error);
        }
        answer.await.unwrap_or_else(|_| {
            failed(PartitionError::new(
                ErrorCode::LeaderNotAvailable,
                "shard 0 stopped",
            ))
        })
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
        if let Some(role) = self.cluster() {
            return role
                .member
                .init_producer_id(producer_id, producer_epoch)
                .await;
        }
        let (reply, answer) = oneshot::channel();
        self.send_now(
            ShardId(0),
            ShardCommand::InitProducerId {
                producer_id,
                producer_epoch,
                reply,
            },
        )?;
        answer.await.unwrap_or_else(|_| {
            Err(PartitionError::new(
                ErrorCode::LeaderNotAvailable,
                "shard 0 stopped",
            ))
        })
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
        if let Some(role) = self.cluster() {
            return role
                .member
                .resign_leadership(partition.topic_id, partition.partition, epoch)
                .await;
        }
        self.ask(ShardId(0), |reply| ShardCommand::ResignLeadership {
            partition,
            epoch,
            reply,
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
        let mut answers = Vec::new();
        for shard in self.other_shards() {
            let (reply, answer) = oneshot::channel();
            let command = ShardCommand::ApplySnapshot {
                snapshot: snapshot.clone(),
                reply,
            };
            if shard.send_async(command).await.is_ok() {
                answers.push(answer);
            }
        }
        self.apply_snapshot(snapshot.clone()).await;
        for answer in answers {
            let _applied = answer.await;
        }
        // Every shard let go of the replicas this snapshot deleted.
        self.sweep_deleted_topic_dirs(&snapshot).await;
        if serving && !self.is_ready.get() {
            for shard in self.other_shards() {
                // A shard gone means the broker is stopping.
                let _sent = shard.send_async(ShardCommand::Serve).await;
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

    fn led_partitions(&self) -> LocalBoxFuture<'_, Vec<LedPartition>> {
        Box::pin(async move {
            let mut answers = Vec::new();
            for shard in self.other_shards() {
                let (reply, answer) = oneshot::channel();
                if shard
                    .send_async(ShardCommand::LedPartitions { reply })
                    .await
                    .is_ok()
                {
                    answers.push(answer);
                }
            }
            let mut led = self.local_led_partitions();
            for answer in answers {
                // A shard gone means the broker is stopping.
                led.extend(answer.await.unwrap_or_default());
            }
            led
        })
    }
}
