//! The follower side: following a leader, answering its pushes (after the
//! appended batches are durable), answering election queries (after the
//! promise is durable), and the log surgery pushes ask for.

use std::rc::Rc;

use corelog_replication::{Batch, PushAck, QueryAnswer, ReplicaId};
use corelog_wire::types::{LeaderEpoch, Offset};

use super::batches;
use super::{Push, Query, ReplicaError, ReplicatedPartition};
use corelog_storage::disk::Disk;

impl<D: Disk> ReplicatedPartition<D> {
    /// Follows `leader` in `epoch`, as published by the controller (raising
    /// the fence durably if it rises; a leader steps down, failing its
    /// pending produces). Repeating it is a no-op.
    ///
    /// # Errors
    /// [`ReplicaError::Refused`] when fenced or the claim conflicts;
    /// metadata failures (which fence the replica).
    pub async fn become_follower(
        self: &Rc<Self>,
        epoch: LeaderEpoch,
        leader: ReplicaId,
    ) -> Result<(), ReplicaError> {
        self.check_usable()?;
        let now_ms = self.now_ms();
        let _apply = self.apply.lock().await;
        let before = self.high_watermark();
        let actions = self
            .replica
            .borrow_mut()
            .become_follower(epoch, leader, now_ms)?;
        self.carry_out(actions, before).await?;
        Ok(())
    }

    /// Handles a push from a leader and returns the acknowledgement to send
    /// back: at once for a push that appended nothing (a heartbeat, a
    /// mismatch, a refusal), else after the appended batches are durable.
    /// Truncation, reset and metadata changes the push causes are durable
    /// before the answer.
    ///
    /// # Errors
    /// - [`ReplicaError::BadPush`] for a push that breaks the protocol's
    ///   shape (nothing changed);
    /// - [`ReplicaError::Refused`] (wrong partition, conflicting leader);
    /// - [`ReplicaError::NotFollower`] when the replica stopped following
    ///   before the batches were durable;
    /// - storage and metadata failures, which fence the replica.
    pub async fn handle_push(self: &Rc<Self>, push: Push) -> Result<PushAck, ReplicaError> {
        self.check_usable()?;
        batches::check_push(&push, &self.limits)?;
        let apply = self.apply.lock().await;
        self.check_usable()?;
        let before = self.high_watermark();
        let now_ms = self.now_ms();
        let actions = self.replica.borrow_mut().on_push(push, now_ms)?;
        let carried = self.carry_out(actions, before).await?;
        if let Some(ack) = carried.ack {
            return Ok(ack);
        }
        let Some(end) = carried.appended_end else {
            return Err(ReplicaError::NotFollower);
        };
        // Other pushes may append while this one's batches are synced: they
        // share the group commit.
        drop(apply);
        self.wait_durable_for(end).await?;
        self.report_durable()
            .await?
            .ok_or(ReplicaError::NotFollower)
    }

    /// Answers an election query: the promise of the new epoch is durable
    /// before the answer is returned. A leader stops leading (its pending
    /// produces fail).
    ///
    /// # Errors
    /// [`ReplicaError::Refused`] for another partition; metadata failures
    /// (which fence the replica).
    pub async fn handle_query(self: &Rc<Self>, query: Query) -> Result<QueryAnswer, ReplicaError> {
        self.check_usable()?;
        let _apply = self.apply.lock().await;
        self.check_usable()?;
        let before = self.high_watermark();
        let actions = self.replica.borrow_mut().on_query(&query)?;
        let carried = self.carry_out(actions, before).await?;
        carried.answer.ok_or_else(|| ReplicaError::Broken {
            reason: "the state machine did not answer a query".to_owned(),
        })
    }

    /// Appends a push's batches (already checked by
    /// [`batches::check_push`]) at the log end, exactly as the leader
    /// stored them. Returns the new (not yet durable) end.
    pub(super) fn append_pushed(&self, pushed: &[Batch]) -> Result<Offset, ReplicaError> {
        let mut end = self.partition.log().next_offset();
        for batch in pushed {
            let placed = batches::placed(batch, &self.limits)?;
            let outcome = self.partition.append_replicated(placed)?;
            end = outcome.last_offset.plus(1);
        }
        Ok(end)
    }

    /// Cuts the log to end at `to`, durably (the state machine never asks
    /// below its high watermark).
    pub(super) async fn truncate(&self, to: Offset) -> Result<(), ReplicaError> {
        self.quiesce_durability_waits().await;
        let end = self.partition.truncate_to(to).await?;
        if end != to {
            return Err(ReplicaError::Broken {
                reason: format!("truncation to {to} cut the log at {end}, not a batch boundary"),
            });
        }
        Ok(())
    }

    /// Discards the log and restarts it at `log_start`, durably.
    pub(super) async fn reset(&self, log_start: Offset) -> Result<(), ReplicaError> {
        self.quiesce_durability_waits().await;
        self.partition.reset_to(log_start).await?;
        Ok(())
    }
}
