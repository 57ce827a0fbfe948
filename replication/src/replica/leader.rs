//! The leader role: taking an epoch, pushing to followers, counting their
//! acknowledgements into the high watermark, and finding where a diverged
//! follower's log matches again.

use std::collections::BTreeMap;

use corelog_wire::types::{LeaderEpoch, Offset};

use super::{LeaderState, Progress, Replica, Role};
use crate::action::Action;
use crate::error::{ProtocolError, ReplicationError};
use crate::ids::ReplicaId;
use crate::message::{BatchMeta, Push, PushAck, PushResult};

impl Replica {
    /// Takes leadership of `epoch` over `replicas` (this replica included),
    /// as published by the controller after an election.
    ///
    /// Raises the fence to `epoch`, records `epoch` as led, starts a history
    /// run at the log end (`Persist`), and asks for the epoch-start marker
    /// (`AppendMarker`). Writes are accepted once the marker is appended, or
    /// at once on an empty log, which needs none.
    /// Repeating the call for the epoch already led is a no-op (metadata is
    /// redelivered).
    ///
    /// # Errors
    /// - [`ReplicationError::NotInReplicaSet`] if `replicas` lacks this
    ///   replica;
    /// - [`ReplicationError::Fenced`] if `epoch` is below the fence;
    /// - [`ReplicationError::AlreadyLed`] if this replica led `epoch` (or a
    ///   later one) before, e.g. before a restart;
    /// - [`ReplicationError::ConflictingLeader`] if it follows another
    ///   leader in `epoch` or holds records of `epoch`.
    pub fn become_leader(
        &mut self,
        epoch: LeaderEpoch,
        replicas: &[ReplicaId],
        now_ms: u64,
    ) -> Result<Vec<Action>, ReplicationError> {
        if !replicas.contains(&self.id) {
            return Err(ReplicationError::NotInReplicaSet { replica: self.id });
        }
        match &self.role {
            Role::Leader(leader) if leader.epoch == epoch => return Ok(Vec::new()),
            Role::Follower(follower) if follower.epoch == epoch => {
                return Err(ReplicationError::ConflictingLeader {
                    epoch,
                    known: follower.leader,
                    claimed: self.id,
                });
            }
            _ => {}
        }
        self.check_not_fenced(epoch)?;
        if let Some(led) = self.meta.led_epoch
            && led >= epoch
        {
            return Err(ReplicationError::AlreadyLed { epoch });
        }
        if let Some(last) = self.meta.history.last_epoch()
            && last >= epoch
        {
            // Records of this epoch here came from another leader.
            return Err(ReplicationError::EpochInLog { epoch });
        }
        let mut actions = Vec::new();
        self.step_down(&mut actions);
        self.raise_fence(epoch);
        self.meta.led_epoch = Some(epoch);
        let appended = self.meta.history.append(epoch, self.log_end);
        assert!(
            appended.is_ok(),
            "history refused the new epoch: {appended:?}"
        );
        let mut replicas = replicas.to_vec();
        replicas.sort_unstable();
        replicas.dedup();
        let followers: BTreeMap<ReplicaId, Progress> = replicas
            .iter()
            .filter(|replica| **replica != self.id)
            .map(|replica| (*replica, Progress::fresh(self.log_end, now_ms)))
            .collect();
        // An empty log needs no marker: no older epoch's record exists that
        // counting could commit (Raft fig. 8), so writes start as soon as
        // the leadership is durable, and a new partition's first record is
        // at offset 0.
        let empty = self.log_start == self.log_end;
        self.role = Role::Leader(LeaderState {
            epoch,
            replicas,
            learners: Vec::new(),
            epoch_start: self.log_end,
            marker_appended: empty,
            leadership_durable: false,
            followers,
        });
        actions.push(self.persist());
        if !empty {
            actions.push(Action::AppendMarker { epoch });
        }
        self.check_invariants();
        Ok(actions)
    }

    /// Sets the learners of a leader: replicas outside its replica set that
    /// it replicates to like followers (a replica being added by a move
    /// catches up this way) but never counts toward the high watermark or
    /// reachability. A learner named again keeps its progress; one left
    /// out is dropped. Replicas of the set and this replica are not
    /// learners and are ignored. A no-op when not leading: a new leadership
    /// starts without learners, and the shell names them again.
    pub fn set_learners(&mut self, learners: &[ReplicaId], now_ms: u64) {
        let log_end = self.log_end;
        let id = self.id;
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        let mut wanted: Vec<ReplicaId> = learners
            .iter()
            .copied()
            .filter(|learner| *learner != id && !leader.replicas.contains(learner))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        for dropped in leader.learners.iter().filter(|old| !wanted.contains(old)) {
            leader.followers.remove(dropped);
        }
        for learner in &wanted {
            leader
                .followers
                .entry(*learner)
                .or_insert_with(|| Progress::fresh(log_end, now_ms));
        }
        leader.learners = wanted;
        self.check_invariants();
    }

    /// The shell appended `batch` to the local log (the marker first, then
    /// client batches), right after assigning its offsets, in order.
    ///
    /// # Panics
    /// If this replica is not leading, its leadership is not durable yet
    /// ([`Replica::on_persisted`]), the batch is not at the log end in the
    /// leader's epoch, or the first batch is not the one-record marker
    /// (shell bugs).
    pub fn on_local_append(&mut self, batch: BatchMeta) {
        let log_end = self.log_end;
        let Role::Leader(leader) = &mut self.role else {
            panic!("local append of {batch:?} on a replica that is not leading");
        };
        assert!(
            batch.epoch == leader.epoch,
            "batch {batch:?} not in epoch {}",
            leader.epoch
        );
        assert!(
            batch.base == log_end,
            "batch {batch:?} not at the log end {log_end}"
        );
        assert!(batch.last >= batch.base, "empty batch {batch:?}");
        assert!(
            leader.leadership_durable,
            "batch {batch:?} appended before the leadership of {} is durable",
            leader.epoch
        );
        if !leader.marker_appended {
            assert!(
                batch.base == leader.epoch_start && batch.last == batch.base,
                "first batch {batch:?} of the epoch is not the marker"
            );
            leader.marker_appended = true;
        }
        self.log_end = batch.end();
        self.check_invariants();
    }

    /// Pushes that are due: new batches to followers whose in-flight window
    /// has room, a probe after a mismatch, a reset for a follower below the
    /// log start, a resend from the acknowledged end after
    /// `resend_timeout_ms` without progress, and heartbeats (new high
    /// watermark, or `heartbeat_interval_ms` of silence). Nothing before the
    /// marker is appended, and nothing unless leading.
    pub fn poll_sends(&mut self, now_ms: u64) -> Vec<Action> {
        let Role::Leader(leader) = &mut self.role else {
            return Vec::new();
        };
        if !leader.marker_appended {
            return Vec::new();
        }
        let mut actions = Vec::new();
        for (&to, progress) in &mut leader.followers {
            if progress.acked_end >= self.log_end {
                progress.caught_up_ms = progress.caught_up_ms.max(now_ms);
            }
            // Only once nothing is on its way: a follower that answers late
            // because it (or the whole cluster) is overloaded would get
            // every resent byte twice, and fall further behind.
            if progress.sent_end > progress.acked_end
                && progress.outstanding == 0
                && now_ms >= progress.last_progress_ms + self.config.resend_timeout_ms
            {
                progress.sent_end = progress.acked_end;
                progress.last_progress_ms = now_ms;
                self.resends += 1;
            }
            let reset = progress.sent_end < self.log_start;
            let start = if reset {
                self.log_start
            } else {
                progress.sent_end
            };
            let has_batches = start < self.log_end;
            let window_open = progress.sent_end.0.saturating_sub(progress.acked_end.0)
                < self.config.max_inflight_records;
            let data = (has_batches && window_open) || reset || progress.probe_pending;
            let heartbeat = self.high_watermark > progress.sent_hw
                || now_ms >= progress.last_send_ms + self.config.heartbeat_interval_ms;
            if !data && !heartbeat {
                continue;
            }
            // A heartbeat vouches only for what the follower acknowledged,
            // so that pipelined pushes still in flight never make it look
            // inconsistent.
            let start = if data || progress.acked_end < self.log_start {
                start
            } else {
                progress.acked_end
            };
            let max_bytes = if data && has_batches && window_open {
                self.config.max_push_bytes
            } else {
                0
            };
            progress.probe_pending = false;
            progress.sent_hw = self.high_watermark;
            progress.last_send_ms = now_ms;
            actions.push(Action::SendPush {
                to,
                push: Push {
                    partition: self.partition,
                    epoch: leader.epoch,
                    leader: self.id,
                    start,
                    prev_epoch: self.meta.history.epoch_before(start),
                    reset_to: reset.then_some(self.log_start),
                    hw: self.high_watermark,
                    log_start: self.log_start,
                    batches: Vec::new(),
                },
                max_bytes,
            });
        }
        actions
    }

    /// The shell sent a push to `to` whose batches end at `end` (its start
    /// if it carried none). The next push with new batches starts there.
    /// Every push reported here must later be settled by exactly one of
    /// [`Replica::on_push_ack`] or [`Replica::on_push_failed`].
    ///
    /// # Panics
    /// If `end` is past the log end.
    pub fn on_push_sent(&mut self, to: ReplicaId, end: Offset) {
        assert!(
            end <= self.log_end,
            "push to {to} sent past the log end: {end}"
        );
        if let Role::Leader(leader) = &mut self.role
            && let Some(progress) = leader.followers.get_mut(&to)
        {
            progress.outstanding += 1;
            progress.sent_end = progress.sent_end.max(end);
            if end >= self.log_end && progress.full_send.is_none() {
                progress.full_send = Some((end, progress.last_send_ms));
            }
        }
    }

    /// A push of `epoch` to `to` got no usable answer: the transport gave
    /// it up (a failed or timed-out frame, a full queue, a broken
    /// connection), or the answer was refused. Once no other push to `to`
    /// is on its way, the resend timeout applies again. Stale reports
    /// (another epoch, not leading) are ignored.
    pub fn on_push_failed(&mut self, to: ReplicaId, epoch: LeaderEpoch, now_ms: u64) {
        if let Role::Leader(leader) = &mut self.role
            && leader.epoch == epoch
            && let Some(progress) = leader.followers.get_mut(&to)
        {
            progress.outstanding = progress.outstanding.saturating_sub(1);
            progress.last_failure_ms = Some(now_ms);
        }
    }

    /// How many of the replica set a leader counts as reachable since
    /// `since_ms` (itself included), and the set's size; `None` when not
    /// leading. A follower is unreachable when a push to it failed in
    /// transport since then and it has not answered after: one whose
    /// answers are merely late is slow, not gone. (An answer in the very
    /// millisecond of `since_ms` may have come before it: not counted.)
    #[must_use]
    pub fn reachable_since(&self, since_ms: u64) -> Option<(usize, usize)> {
        let Role::Leader(leader) = &self.role else {
            return None;
        };
        let unreachable = leader
            .followers
            .iter()
            .filter(|(replica, _)| leader.replicas.contains(replica))
            .filter(|(_, progress)| {
                progress
                    .last_failure_ms
                    .is_some_and(|failed| failed >= since_ms)
                    && progress
                        .last_answer_ms
                        .is_none_or(|answered| answered <= since_ms)
            })
            .count();
        let replicas = leader.replicas.len();
        Some((replicas - unreachable, replicas))
    }

    /// A follower's answer to a push, or its news of durability.
    ///
    /// `Ok` raises the follower's acknowledged end and may raise the high
    /// watermark. `Mismatch` moves the follower's next push back to where the
    /// logs can match (see [`PushResult::Mismatch`]). `Fenced` with a higher
    /// epoch makes the leader step down. Anything for another epoch, or
    /// arriving when not leading, is stale and ignored.
    ///
    /// # Errors
    /// [`ReplicationError::WrongPartition`]; [`ReplicationError::Protocol`]
    /// for an acknowledgement no correct follower sends
    /// ([`PushAck::check_consistent`] fails, or an `Ok` of this epoch claims
    /// more than this leader's log holds). Nothing changes then, and the
    /// push stays unsettled: the shell reports it with
    /// [`Replica::on_push_failed`].
    pub fn on_push_ack(
        &mut self,
        ack: &PushAck,
        now_ms: u64,
    ) -> Result<Vec<Action>, ReplicationError> {
        self.check_partition(ack.partition)?;
        ack.check_consistent()?;
        let mut actions = Vec::new();
        let log_end = self.log_end;
        let Role::Leader(leader) = &mut self.role else {
            return Ok(actions);
        };
        if ack.epoch != leader.epoch {
            return Ok(actions);
        }
        let Some(progress) = leader.followers.get_mut(&ack.from) else {
            return Ok(actions);
        };
        if let PushResult::Ok { durable_end, .. } = ack.result
            && durable_end > log_end
        {
            return Err(ProtocolError::AckPastLeaderLogEnd {
                from: ack.from,
                durable_end,
                log_end,
            }
            .into());
        }
        progress.outstanding = progress.outstanding.saturating_sub(1);
        progress.last_answer_ms = Some(now_ms);
        match ack.result {
            PushResult::Ok { durable_end, .. } => {
                if durable_end > progress.acked_end {
                    progress.acked_end = durable_end;
                    progress.last_progress_ms = now_ms;
                }
                if durable_end >= log_end {
                    progress.caught_up_ms = now_ms;
                    progress.full_send = None;
                } else if let Some((end, sent_ms)) = progress.full_send
                    && durable_end >= end
                {
                    progress.caught_up_ms = progress.caught_up_ms.max(sent_ms);
                    progress.full_send = None;
                }
                progress.sent_end = progress.sent_end.max(progress.acked_end);
                self.advance_leader_high_watermark(&mut actions);
            }
            PushResult::Mismatch {
                last_epoch,
                log_end: follower_end,
            } => {
                let acked_end = progress.acked_end;
                // The acknowledged prefix is known to match: a stale
                // mismatch never moves the follower below it.
                let probe = self.probe_point(last_epoch, follower_end).max(acked_end);
                if let Role::Leader(leader) = &mut self.role
                    && let Some(progress) = leader.followers.get_mut(&ack.from)
                {
                    progress.sent_end = probe;
                    progress.probe_pending = true;
                    progress.last_progress_ms = now_ms;
                }
            }
            PushResult::Fenced { epoch } => {
                if epoch > leader.epoch {
                    self.step_down(&mut actions);
                }
            }
        }
        self.check_invariants();
        Ok(actions)
    }

    /// Where to try a follower whose log is `(last_epoch, follower_end)`:
    /// the end of this leader's largest epoch `E' <= last_epoch`, capped by
    /// the follower's end. Below it both logs hold records of `E'` or older,
    /// and if the follower holds `E'` at that point the logs match there.
    /// Otherwise the follower answers with another mismatch, further back.
    /// When `E' < last_epoch` and the cap applies, the start of this
    /// leader's run holding `follower_end - 1` instead: the point must be a
    /// batch boundary of this log.
    fn probe_point(&self, last_epoch: Option<LeaderEpoch>, follower_end: Offset) -> Offset {
        let history = &self.meta.history;
        let point = match last_epoch {
            // The follower vouches for nothing: try where its log ends.
            None => follower_end,
            Some(epoch) => match history.end_of(epoch, self.log_end) {
                Some(end) if end.epoch == epoch || end.end_offset <= follower_end => {
                    end.end_offset.min(follower_end)
                }
                // The follower's last record is of an epoch this leader
                // never had, so the logs differ at `follower_end - 1`, and
                // `follower_end` need not even be a batch boundary here (a
                // push covers whole batches). Retreat to the start of this
                // leader's run holding `follower_end - 1`: a boundary, since
                // a batch never spans two epochs, and below `follower_end`,
                // so the exchange still moves back.
                Some(_) => history
                    .epoch_before(follower_end)
                    .and_then(|run| history.start_of(run))
                    .unwrap_or(follower_end)
                    .min(follower_end),
                // Every epoch here is newer than anything the follower
                // holds: nothing matches after this log's first run starts.
                None => history
                    .entries()
                    .first()
                    .map_or(follower_end, |first| first.start_offset.min(follower_end)),
            },
        };
        point.min(self.log_end)
    }

    /// Recounts the high watermark: the largest `N` durable on a majority
    /// of the replica set (this replica's durable end and each follower's
    /// acknowledged end), if `N` is past this epoch's marker. An older
    /// epoch's records are never committed by counting alone (Raft fig. 8):
    /// they commit with the marker.
    pub(super) fn advance_leader_high_watermark(&mut self, actions: &mut Vec<Action>) {
        let Role::Leader(leader) = &self.role else {
            return;
        };
        let end_of = |replica: &ReplicaId| {
            if *replica == self.id {
                self.durable_end
            } else {
                leader
                    .followers
                    .get(replica)
                    .map_or(Offset(0), |progress| progress.acked_end)
            }
        };
        // The highest end a majority reached: the majority-th largest. This
        // runs on every durable append, so it counts over the handful of
        // replicas instead of collecting and sorting them.
        let majority = leader.replicas.len() / 2 + 1;
        let reached_by_majority = |end: &Offset| {
            leader
                .replicas
                .iter()
                .filter(|replica| end_of(replica) >= *end)
                .count()
                >= majority
        };
        let Some(candidate) = leader
            .replicas
            .iter()
            .map(end_of)
            .filter(reached_by_majority)
            .max()
        else {
            return;
        };
        if candidate > leader.epoch_start && candidate > self.high_watermark {
            self.set_high_watermark(candidate, actions);
        }
    }

    pub(super) fn check_not_fenced(&self, epoch: LeaderEpoch) -> Result<(), ReplicationError> {
        if epoch < self.meta.fenced_epoch {
            Err(ReplicationError::Fenced {
                epoch,
                fenced_epoch: self.meta.fenced_epoch,
            })
        } else {
            Ok(())
        }
    }
}
