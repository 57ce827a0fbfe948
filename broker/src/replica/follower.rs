//! The follower side: following a leader, answering its pushes (after the
//! appended batches are durable), answering election queries (after the
//! promise is durable), and the log surgery pushes ask for.

use std::rc::Rc;

use bytes::Bytes;
use corelog_replication::wire::{push_refusal, query_refusal};
use corelog_replication::{Batch, PushAck, QueryAnswer, ReplicaId, ReplicationError};
use corelog_wire::message::replica_push::{ReplicaPushRequest, ReplicaPushResponse};
use corelog_wire::message::replica_query::{ReplicaQueryRequest, ReplicaQueryResponse};
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

    /// Answers a leader's push as it arrived (`ReplicaPush`, or one push of
    /// a `ReplicaStream` frame, with its batches' bytes): the whole
    /// follower side of a push, so that the shard hands it over once. The
    /// push is checked and converted by `corelog_replication::wire`
    /// ([`Push::from_wire`]); see [`Self::handle_push`] for when the answer
    /// comes. Every failure is an error answer (`INVALID_REQUEST` for a
    /// malformed push, which changes nothing).
    pub async fn serve_push(
        self: &Rc<Self>,
        request: &ReplicaPushRequest,
        raw: Bytes,
    ) -> ReplicaPushResponse {
        push_answer(self.answer_push(request, raw).await)
    }

    /// [`Self::serve_push`] before its answer is put in wire form: for a
    /// caller that looks at the failure (the simulator counts a malformed
    /// push from its production leaders as a bug).
    ///
    /// # Errors
    /// [`ReplicaError::Refused`] with [`ReplicationError::Protocol`] for a
    /// malformed push; [`Self::handle_push`]'s.
    pub async fn answer_push(
        self: &Rc<Self>,
        request: &ReplicaPushRequest,
        raw: Bytes,
    ) -> Result<PushAck, ReplicaError> {
        match Push::from_wire(request, raw, &self.limits) {
            Ok(push) => self.handle_push(push).await,
            Err(error) => Err(ReplicaError::Refused(ReplicationError::Protocol(error))),
        }
    }

    /// Answers a controller's election query as it arrived; see
    /// [`Self::handle_query`].
    pub async fn serve_query(
        self: &Rc<Self>,
        request: &ReplicaQueryRequest,
    ) -> ReplicaQueryResponse {
        match self.handle_query(Query::from_wire(request)).await {
            Ok(answer) => answer.to_wire(),
            Err(error) => query_refusal(error.code(), error.to_string()),
        }
    }

    /// Handles a push from a leader and returns the acknowledgement to send
    /// back: at once for a push that appended nothing (a heartbeat, a
    /// mismatch, a refusal), else after the appended batches are durable.
    /// Truncation, reset and metadata changes the push causes are durable
    /// before the answer.
    ///
    /// The push's batches must be what their bytes' headers say (as
    /// [`Push::from_wire`] and a leader's own reads make them): the log
    /// stores the bytes where the state machine places the batches.
    ///
    /// # Errors
    /// - [`ReplicaError::Refused`] (wrong partition, conflicting leader, a
    ///   push no correct leader sends: nothing changed then);
    /// - [`ReplicaError::NotFollower`] when the replica stopped following
    ///   before the batches were durable;
    /// - storage and metadata failures, which fence the replica.
    pub async fn handle_push(self: &Rc<Self>, push: Push) -> Result<PushAck, ReplicaError> {
        self.check_usable()?;
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

    /// Appends a push's batches (each checked whole when the push was
    /// received, [`Push::from_wire`]) at the log end, exactly as the leader
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

/// A push's answer as the leader receives it: the acknowledgement, or the
/// failure's code and message.
#[must_use]
pub fn push_answer(answered: Result<PushAck, ReplicaError>) -> ReplicaPushResponse {
    match answered {
        Ok(ack) => ack.to_wire(),
        Err(error) => push_refusal(error.code(), error.to_string()),
    }
}
