//! The leader side: taking an epoch (the epoch-start marker), produce and
//! its acknowledgement conditions, the push pump, and acknowledgements.

use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use corelog_replication::{Action, BatchMeta, Push, PushAck, ReplicaId, RoleView};
use corelog_wire::types::{LeaderEpoch, Offset};
use futures::future::{Either, select};

use super::batches;
use super::throttle::ByteRate;
use super::{Acks, EndedTerm, Pump, ReplicaError, ReplicatedPartition, TransportError};
use crate::partition::{ProduceStart, Produced};
use corelog_storage::disk::Disk;

impl<D: Disk> ReplicatedPartition<D> {
    /// Leads `epoch` over `replicas` (this replica included), as published
    /// by the controller: persists the new epoch, appends the epoch-start
    /// marker, and resolves once the marker is durable locally (pushes to
    /// the followers have started). Repeating it for the epoch led is a
    /// no-op.
    ///
    /// # Errors
    /// [`ReplicaError::Refused`] when the state machine refuses the epoch
    /// (fenced, led before, not in the replica set); storage and metadata
    /// failures (which fence the replica).
    pub async fn become_leader(
        self: &Rc<Self>,
        epoch: LeaderEpoch,
        replicas: &[ReplicaId],
    ) -> Result<(), ReplicaError> {
        self.check_usable()?;
        let now_ms = self.now_ms();
        let marker_end = {
            let _apply = self.apply.lock().await;
            let before = self.high_watermark();
            let actions = self
                .replica
                .borrow_mut()
                .become_leader(epoch, replicas, now_ms)?;
            self.carry_out(actions, before).await?.appended_end
        };
        if let Some(end) = marker_end {
            self.wait_durable_for(end).await?;
            self.report_durable().await?;
            self.wake_pump();
        }
        Ok(())
    }

    /// Appends one producer batch as leader and resolves when `acks` is
    /// met: [`Acks::Leader`] once it is durable here, [`Acks::Quorum`] once
    /// the high watermark passed it (durable on a majority). A retry of an
    /// idempotent batch already in the log answers with the original
    /// offsets, under the same condition. Offsets are assigned in call
    /// order (everything up to the append is synchronous).
    ///
    /// # Errors
    /// - `NOT_LEADER` ([`ReplicaError::NotLeader`],
    ///   [`ReplicaError::SteppedDown`]); `LEADER_NOT_AVAILABLE` while the
    ///   marker is being appended;
    /// - `REQUEST_TIMED_OUT` when `timeout` passed first with a majority
    ///   reachable (slow, not gone: answers late or pushes still on their
    ///   way), `NOT_ENOUGH_REPLICAS` when pushes to too many followers
    ///   failed in transport meanwhile and they did not answer since (the
    ///   batch may still commit later: an idempotent retry is safe);
    /// - the partition's batch, sequence and storage errors.
    pub async fn produce(
        self: &Rc<Self>,
        batch: BytesMut,
        acks: Acks,
        timeout: Duration,
    ) -> Result<Produced, ReplicaError> {
        let started_ms = self.now_ms();
        let work = pin!(self.produce_until_acked(batch, acks));
        let deadline = pin!(self.executor.timeout(timeout));
        match select(work, deadline).await {
            Either::Left((result, _)) => result,
            Either::Right(_) => Err(self.timed_out(timeout, started_ms)),
        }
    }

    async fn produce_until_acked(
        self: &Rc<Self>,
        batch: BytesMut,
        acks: Acks,
    ) -> Result<Produced, ReplicaError> {
        self.check_usable()?;
        let epoch = self.writable_epoch()?;
        let (produced, end) = match self.partition.start_produce(batch, epoch)? {
            ProduceStart::Appended {
                outcome,
                record_count,
            } => {
                // Synchronously after the offsets were assigned, in order.
                self.replica.borrow_mut().on_local_append(BatchMeta {
                    base: outcome.base_offset,
                    last: outcome.last_offset,
                    epoch,
                });
                // Followers get the batch now, from the tail cache, and sync
                // it while this replica does: a quorum append costs one
                // group commit, not the leader's followed by a follower's.
                self.wake_pump();
                let produced = Produced {
                    base_offset: outcome.base_offset,
                    log_append_time: outcome.log_append_time,
                    log_start: self.log_start(),
                    record_count,
                    duplicate: false,
                };
                (produced, outcome.last_offset.plus(1))
            }
            ProduceStart::Duplicate {
                original,
                record_count,
            } => {
                let produced = Produced {
                    base_offset: original.base_offset,
                    log_append_time: self.clock.now(),
                    log_start: self.log_start(),
                    record_count,
                    duplicate: true,
                };
                (produced, original.last_offset.plus(1))
            }
        };
        self.wait_durable_for(end).await?;
        self.report_durable().await?;
        // The high watermark may have moved with this replica's durable end.
        self.wake_pump();
        if acks == Acks::Quorum {
            self.wait_committed(end, epoch).await?;
        }
        Ok(produced)
    }

    /// The epoch a produce may append in now: not before the state machine
    /// accepts writes (the leadership's metadata written and its marker
    /// appended; an empty log needs no marker).
    fn writable_epoch(&self) -> Result<LeaderEpoch, ReplicaError> {
        match self.role() {
            RoleView::Leader {
                epoch,
                accepting_writes: true,
            } => Ok(epoch),
            RoleView::Leader { epoch, .. } => Err(ReplicaError::LeaderNotReady { epoch }),
            role => Err(ReplicaError::NotLeader { role }),
        }
    }

    /// Resolves once the high watermark of `epoch`'s leadership passed
    /// `end`; fails if that leadership ended before it did.
    async fn wait_committed(&self, end: Offset, epoch: LeaderEpoch) -> Result<(), ReplicaError> {
        loop {
            // On this future's stack: every quorum append waits here.
            event_listener::listener!(self.high_watermark_changed => listener);
            self.check_usable()?;
            match self.role() {
                // A replica never leads an epoch twice: still this
                // leadership, so its high watermark counts.
                RoleView::Leader { epoch: led, .. } if led == epoch => {
                    if self.high_watermark() >= end {
                        return Ok(());
                    }
                }
                _ => {
                    return match self.ended_term.get() {
                        Some(EndedTerm {
                            epoch: ended,
                            high_watermark,
                        }) if ended == epoch && end <= high_watermark => Ok(()),
                        _ => Err(ReplicaError::SteppedDown { epoch }),
                    };
                }
            }
            listener.await;
        }
    }

    /// The error for a produce that timed out after waiting since
    /// `started_ms`: `NOT_ENOUGH_REPLICAS` if fewer than a majority (this
    /// replica included) were reachable meanwhile
    /// ([`corelog_replication::Replica::reachable_since`]), else
    /// `REQUEST_TIMED_OUT`: under overload acknowledgements arrive late,
    /// and the replicas are there.
    fn timed_out(&self, timeout: Duration, started_ms: u64) -> ReplicaError {
        match self.replica.borrow().reachable_since(started_ms) {
            Some((reachable, replicas)) if reachable <= replicas / 2 => {
                ReplicaError::NotEnoughReplicas { timeout }
            }
            _ => ReplicaError::TimedOut { timeout },
        }
    }

    /// Names the learners this replica pushes to while it leads (brokers a
    /// reassignment adds, catching up outside the set; see
    /// `corelog_replication::Replica::set_learners`), each copied at
    /// `throttle_bytes_per_s` at most (0: no limit). Kept while it does
    /// not lead: a leadership that starts later takes them up with
    /// [`ReplicatedPartition::refresh_learners`].
    pub fn set_learners(self: &Rc<Self>, learners: &[ReplicaId], throttle_bytes_per_s: u64) {
        *self.wanted_learners.borrow_mut() = (learners.to_vec(), throttle_bytes_per_s);
        self.refresh_learners();
    }

    /// Pushes to the learners last named by [`ReplicatedPartition::set_learners`]
    /// if leading; a no-op otherwise. A role change that ends in a
    /// leadership calls this rather than naming the learners it saw when
    /// it started: metadata may have named others meanwhile (sim seed 4 of
    /// the decommission sweep: a learner named while `become_leader` ran
    /// was dropped when it returned, and never copied).
    pub fn refresh_learners(self: &Rc<Self>) {
        let (learners, throttle_bytes_per_s) = self.wanted_learners.borrow().clone();
        // Every snapshot names every replica's learners: almost always
        // none, as before, which needs no work (and no pump woken).
        if learners.is_empty()
            && self.replica.borrow().learners().is_empty()
            && self.learner_rates.borrow().is_empty()
        {
            return;
        }
        let now_ms = self.now_ms();
        self.replica.borrow_mut().set_learners(&learners, now_ms);
        {
            let mut rates = self.learner_rates.borrow_mut();
            rates.retain(|learner, rate| {
                learners.contains(learner) && rate.bytes_per_s() == throttle_bytes_per_s
            });
            if throttle_bytes_per_s > 0 {
                for learner in &learners {
                    rates
                        .entry(*learner)
                        .or_insert_with(|| ByteRate::new(throttle_bytes_per_s, now_ms));
                }
            }
        }
        self.wake_pump();
    }

    /// Timers: a leader sends what is due by now (new batches, resends,
    /// heartbeats); other roles do nothing. The shard calls it every few
    /// milliseconds.
    pub fn tick(self: &Rc<Self>) {
        if matches!(self.role(), RoleView::Leader { .. }) {
            self.wake_pump();
        }
    }

    /// Makes the pump poll the state machine for pushes: starts it, or
    /// tells the running one to poll again when done.
    fn wake_pump(self: &Rc<Self>) {
        // A sole voter's leader pushes to nobody: no task per append.
        if !self.replica.borrow().has_followers() {
            return;
        }
        match self.pump.get() {
            Pump::Idle => {
                self.pump.set(Pump::Running);
                let this = Rc::clone(self);
                crate::executor::spawn(&*self.executor, async move { this.run_pump().await });
            }
            Pump::Running | Pump::Again => self.pump.set(Pump::Again),
        }
    }

    async fn run_pump(self: Rc<Self>) {
        let _idle = PumpIdle { pump: &self.pump };
        loop {
            self.pump.set(Pump::Running);
            if self.check_usable().is_err() {
                return;
            }
            let actions = self.replica.borrow_mut().poll_sends(self.now_ms());
            for action in actions {
                match action {
                    Action::SendPush {
                        to,
                        push,
                        max_bytes,
                    } => self.send(to, push, max_bytes).await,
                    other => tracing::error!(?other, "poll_sends asked for more than pushes"),
                }
            }
            if self.pump.get() != Pump::Again {
                return;
            }
        }
    }

    /// Fills a push with batches from its start (up to `max_bytes`),
    /// reports it sent, and sends it on its own task (pushes to one follower
    /// are pipelined).
    async fn send(self: &Rc<Self>, to: ReplicaId, mut push: Push, max_bytes: u64) {
        // A throttled learner's push carries nothing while its rate is
        // spent: it goes as a heartbeat, and the next tick tries again.
        let max_bytes = match self.learner_rates.borrow_mut().get_mut(&to) {
            Some(rate) => max_bytes.min(rate.allowance(self.now_ms())),
            None => max_bytes,
        };
        if max_bytes > 0 {
            match self.read_for_push(&push, max_bytes).await {
                Ok(batches) => {
                    if let Some(rate) = self.learner_rates.borrow_mut().get_mut(&to) {
                        rate.charge(batches.iter().map(|batch| batch.bytes.len() as u64).sum());
                    }
                    push.batches = batches;
                }
                Err(error) => {
                    tracing::warn!(to = to.0, start = push.start.0, %error, "no batches for a push; the resend timeout retries");
                    return;
                }
            }
        }
        // Leadership may have ended while reading.
        if !self.leads(push.epoch) {
            return;
        }
        self.replica.borrow_mut().on_push_sent(to, push.end());
        let epoch = push.epoch;
        let this = Rc::clone(self);
        crate::executor::spawn(&*self.executor, async move {
            let result = this.transport.send_push(to, push).await;
            this.on_push_answer(to, epoch, result);
        });
    }

    fn leads(&self, epoch: LeaderEpoch) -> bool {
        matches!(self.role(), RoleView::Leader { epoch: led, .. } if led == epoch)
    }

    /// Whole batches from the push's start, at most `max_bytes` (at least
    /// one). The pump runs as soon as a batch is appended, so a push
    /// carries batches this replica has not synced yet, from the tail
    /// cache, and followers sync them in parallel with it. That is safe:
    /// the high watermark counts
    /// this replica only up to its durable end, and a replica never leads
    /// an epoch twice, so a tail it loses in a crash cannot be overwritten
    /// under the same epoch. Records no longer cached are read from the
    /// log, which serves durable ones.
    async fn read_for_push(
        &self,
        push: &Push,
        max_bytes: u64,
    ) -> Result<Vec<corelog_replication::Batch>, ReplicaError> {
        let start = push.start;
        if !self.leads(push.epoch) || start >= self.replica.borrow().log_end() {
            return Ok(Vec::new());
        }
        let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        if let Some(chunks) = self.partition.log().read_unsynced(start, max_bytes) {
            // This replica's own batches, checked when they were appended.
            let batches = batches::split_trusted(&chunks, &self.limits)?;
            return Ok(batches::from_start(batches, start));
        }
        self.wait_durable_for(start.plus(1)).await?;
        let read = self.partition.log().read(start, max_bytes, None).await?;
        let batches = batches::split(&read.chunks, &self.limits)?;
        Ok(batches::from_start(batches, start))
    }

    /// A follower's answer to a push of `epoch`, or the transport's
    /// failure. Either settles the push in the state machine: a failure
    /// (or an answer refused here) lets it resend once nothing else is on
    /// its way to that follower.
    fn on_push_answer(
        self: &Rc<Self>,
        to: ReplicaId,
        epoch: LeaderEpoch,
        result: Result<PushAck, TransportError>,
    ) {
        let now_ms = self.now_ms();
        let ack = match result {
            Ok(ack) => ack,
            Err(error) => {
                tracing::debug!(to = to.0, %error, "push not acknowledged");
                self.replica.borrow_mut().on_push_failed(to, epoch, now_ms);
                return;
            }
        };
        // What a correct follower never sends is refused here and by the
        // state machine: a broken peer must not stop this broker.
        if let Err(error) = ack.check_against(to) {
            tracing::warn!(to = to.0, %error, "implausible acknowledgement ignored");
            self.replica.borrow_mut().on_push_failed(to, epoch, now_ms);
            return;
        }
        let before = self.high_watermark();
        let answered = self.replica.borrow_mut().on_push_ack(&ack, now_ms);
        let actions = match answered {
            Ok(actions) => actions,
            Err(error) => {
                tracing::warn!(to = to.0, %error, "acknowledgement refused");
                self.replica.borrow_mut().on_push_failed(to, epoch, now_ms);
                return;
            }
        };
        // Acknowledgements change no durable state: no `apply` needed.
        for action in &actions {
            self.note(action, before);
        }
        self.wake_pump();
    }
}

/// Marks the pump idle when its task ends (or is dropped).
struct PumpIdle<'a> {
    pump: &'a std::cell::Cell<Pump>,
}

impl Drop for PumpIdle<'_> {
    fn drop(&mut self) {
        self.pump.set(Pump::Idle);
    }
}

impl<D: Disk> ReplicatedPartition<D> {
    /// Appends the epoch-start marker and tells the state machine.
    pub(super) fn append_marker(&self, epoch: LeaderEpoch) -> Result<Offset, ReplicaError> {
        let marker = batches::marker(epoch, self.clock.now(), &self.limits)?;
        let outcome = self.partition.log().start_append_valid(marker)?;
        self.replica.borrow_mut().on_local_append(BatchMeta {
            base: outcome.base_offset,
            last: outcome.last_offset,
            epoch,
        });
        Ok(outcome.last_offset.plus(1))
    }
}
