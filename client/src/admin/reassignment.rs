//! Moving a partition's replicas to other brokers
//! ([`Admin::reassign_partition`]) and turning a move back
//! ([`Admin::cancel_reassignment`]). Spoken with `AlterCluster`.

use corelog_wire::message::alter_cluster::ClusterChange;

use super::Admin;
use crate::error::ClientError;

impl Admin {
    /// Starts moving `partition` of `topic` to the brokers `replicas`
    /// (preferred leader first) and returns once the move started; it goes
    /// on in the cluster (watch the partition's replicas in
    /// [`Admin::describe_cluster`]). Each new replica copies the log as a
    /// learner, at most `throttle_bytes_per_s` (0: no limit), outside the
    /// commit quorum; then the set changes one replica at a time, each
    /// change an election, so no acknowledged record is lost.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION`; `REASSIGNMENT_IN_PROGRESS`;
    /// `INVALID_REQUEST` (an unknown or repeated broker, or the set it has
    /// already); `BROKER_FENCED`; `CLUSTER_ADMIN_REQUIRED`; connection
    /// errors.
    pub async fn reassign_partition(
        &self,
        topic: &str,
        partition: u32,
        replicas: &[u32],
        throttle_bytes_per_s: u64,
    ) -> Result<(), ClientError> {
        let change = ClusterChange::Reassign {
            topic: topic.to_owned(),
            partition,
            replicas: replicas.to_vec(),
            throttle_bytes_per_s,
        };
        self.alter_cluster(change, || format!("{topic}/{partition}"))
            .await
            .map(drop)
    }

    /// Turns the move of `partition` of `topic` back to the replicas it
    /// started from (at once if no replica changed yet).
    ///
    /// # Errors
    /// `NO_REASSIGNMENT_IN_PROGRESS`; `UNKNOWN_TOPIC_OR_PARTITION`;
    /// `CLUSTER_ADMIN_REQUIRED`; connection errors.
    pub async fn cancel_reassignment(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<(), ClientError> {
        let change = ClusterChange::CancelReassignment {
            topic: topic.to_owned(),
            partition,
        };
        self.alter_cluster(change, || format!("{topic}/{partition}"))
            .await
            .map(drop)
    }
}
