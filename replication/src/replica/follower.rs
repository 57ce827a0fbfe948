//! The follower role: taking pushes after the consistency check, truncating
//! only records that conflict with the leader's, and acknowledging only the
//! prefix it checked.

use corelog_wire::types::{LeaderEpoch, Offset};

use super::{FollowerState, Replica, Role};
use crate::action::Action;
use crate::error::{ProtocolError, ReplicationError};
use crate::ids::ReplicaId;
use crate::message::{Batch, Push, PushResult};

impl Replica {
    /// Follows `leader` in `epoch`, as published by the controller.
    /// Raises the fence to `epoch` (`Persist` if it rose). Repeating the
    /// call is a no-op.
    ///
    /// # Errors
    /// - [`ReplicationError::Fenced`] if `epoch` is below the fence;
    /// - [`ReplicationError::ConflictingLeader`] if `leader` is this replica,
    ///   or another leader of `epoch` is known (including this replica,
    ///   having led it).
    pub fn become_follower(
        &mut self,
        epoch: LeaderEpoch,
        leader: ReplicaId,
        _now_ms: u64,
    ) -> Result<Vec<Action>, ReplicationError> {
        self.check_not_fenced(epoch)?;
        self.check_leader_claim(epoch, leader)?;
        let mut actions = Vec::new();
        if !matches!(&self.role, Role::Follower(follower) if follower.epoch == epoch) {
            self.follow(epoch, leader, &mut actions);
        }
        self.check_invariants();
        Ok(actions)
    }

    /// A push from a leader.
    ///
    /// Below the fence: answered `Fenced`. A higher epoch is adopted
    /// (`Persist`) and its sender followed. A reset is applied if the log
    /// cannot match at the reset point. Then the consistency check: the
    /// follower's log must reach `start` and its record at `start - 1` must
    /// have `prev_epoch` (or it holds nothing below `start`); if not, it
    /// answers `Mismatch` and appends nothing. Batches it already holds
    /// with the same epoch are skipped (the same epoch at the same offset
    /// means the same records); at the first batch that conflicts the log is
    /// truncated (`Truncate`, never below the high watermark or the prefix
    /// already checked against this leader: such a push is refused);
    /// the rest is appended (`Append`). The high watermark becomes
    /// `min(push.hw, checked end)`. A push that appended nothing is
    /// acknowledged at once; otherwise the acknowledgement follows the
    /// fsync ([`on_local_durable`](Self::on_local_durable)).
    ///
    /// # Errors
    /// [`ReplicationError::WrongPartition`];
    /// [`ReplicationError::ConflictingLeader`] when the push claims an epoch
    /// another leader holds (a controller bug); [`ReplicationError::Protocol`]
    /// for a push no correct leader sends: malformed
    /// ([`Push::check_shape`]), or one that would truncate committed or
    /// checked records, or whose batch boundaries or epochs contradict this
    /// log. In every case the push is refused whole and nothing changes.
    pub fn on_push(&mut self, push: Push, now_ms: u64) -> Result<Vec<Action>, ReplicationError> {
        self.check_partition(push.partition)?;
        push.check_shape()?;
        if push.batches.is_empty() {
            // Only the batches can contradict the log (`take_batches`).
            return self.take_push(push, now_ms);
        }
        // The checks against this log run as the batches are taken, after
        // the push's header has been acted on (following, a reset): a push
        // they refuse puts the replica back as it was, so that the state
        // never runs ahead of actions the shell does not carry out.
        let before = self.clone();
        let taken = self.take_push(push, now_ms);
        if taken.is_err() {
            *self = before;
        }
        taken
    }

    fn take_push(&mut self, push: Push, _now_ms: u64) -> Result<Vec<Action>, ReplicationError> {
        let mut actions = Vec::new();
        if push.epoch < self.meta.fenced_epoch {
            let fenced = PushResult::Fenced {
                epoch: self.meta.fenced_epoch,
            };
            actions.push(self.ack(push.leader, push.epoch, fenced));
            return Ok(actions);
        }
        self.check_leader_claim(push.epoch, push.leader)?;
        if !matches!(&self.role, Role::Follower(follower) if follower.epoch == push.epoch) {
            self.follow(push.epoch, push.leader, &mut actions);
        }
        let mut history_changed = false;
        if let Some(reset_to) = push.reset_to {
            // `check_shape`: `reset_to == push.start`.
            history_changed |= self.reset_if_needed(reset_to, push.prev_epoch, &mut actions);
        }
        if !self.consistent_at(push.start, push.prev_epoch) {
            let result = self.mismatch(push.start, push.prev_epoch);
            if history_changed {
                actions.push(self.persist());
            }
            actions.push(self.ack(push.leader, push.epoch, result));
            self.check_invariants();
            return Ok(actions);
        }
        let push_end = push.end();
        let push_hw = push.hw;
        let appended = self.take_batches(push.start, push.batches, &mut actions)?;
        history_changed |= appended.history_changed;
        if history_changed {
            actions.push(self.persist());
        }
        let appended_any = !appended.batches.is_empty();
        if appended_any {
            actions.push(Action::Append {
                batches: appended.batches,
            });
        }
        let follower = self.follower_mut();
        follower.verified_end = follower.verified_end.max(push_end);
        let candidate = push_hw.min(follower.verified_end);
        let follower = *follower;
        if candidate > self.high_watermark {
            self.set_high_watermark(candidate, &mut actions);
        }
        if !appended_any {
            actions.push(self.ok_ack(follower));
        }
        self.check_invariants();
        Ok(actions)
    }

    /// Refuses a claim to lead `epoch` by `leader` when another leader of
    /// that epoch is known.
    fn check_leader_claim(
        &self,
        epoch: LeaderEpoch,
        leader: ReplicaId,
    ) -> Result<(), ReplicationError> {
        let known = match &self.role {
            Role::Leader(own) if own.epoch == epoch => Some(self.id),
            Role::Follower(follower) if follower.epoch == epoch => Some(follower.leader),
            _ if self.meta.led_epoch == Some(epoch) => Some(self.id),
            _ => None,
        };
        match known {
            Some(known) if known != leader || leader == self.id => {
                Err(ReplicationError::ConflictingLeader {
                    epoch,
                    known,
                    claimed: leader,
                })
            }
            None if leader == self.id => Err(ReplicationError::ConflictingLeader {
                epoch,
                known: leader,
                claimed: leader,
            }),
            _ => Ok(()),
        }
    }

    /// Becomes a follower of `leader` in `epoch` (stepping down if leading).
    /// The prefix below the high watermark is committed, hence in every
    /// later leader's log: it counts as checked from the start.
    fn follow(&mut self, epoch: LeaderEpoch, leader: ReplicaId, actions: &mut Vec<Action>) {
        self.step_down(actions);
        let raised = epoch > self.meta.fenced_epoch;
        self.raise_fence(epoch);
        // A run at the log end holds no records: a leadership that appended
        // nothing (an empty log's, or one that lost its marker). Following,
        // it would refuse the new leader's batches of an older epoch at that
        // offset as going back in epoch (sim seed 1102); recovery drops such
        // runs the same way.
        let emptied = self.meta.history.truncate_from(self.log_end);
        self.role = Role::Follower(FollowerState {
            epoch,
            leader,
            verified_end: self.high_watermark,
        });
        if raised || emptied {
            actions.push(self.persist());
        }
    }

    fn follower_mut(&mut self) -> &mut FollowerState {
        match &mut self.role {
            Role::Follower(follower) => follower,
            role => panic!("expected the follower role, found {role:?}"),
        }
    }

    /// Applies a reset to `reset_to` unless the log already matches there
    /// (a duplicate or late reset push must not discard a log that has
    /// caught up since). Returns whether the history changed.
    fn reset_if_needed(
        &mut self,
        reset_to: Offset,
        prev_epoch: Option<LeaderEpoch>,
        actions: &mut Vec<Action>,
    ) -> bool {
        if self.consistent_at(reset_to, prev_epoch) {
            return false;
        }
        // The log cannot match at reset_to, so nothing committed lies at or
        // after its first difference; the high watermark is below it.
        assert!(
            reset_to >= self.high_watermark,
            "reset to {reset_to} below the high watermark {}",
            self.high_watermark
        );
        actions.push(Action::Reset {
            log_start: reset_to,
        });
        self.meta.history.clear();
        if let (Some(epoch), Some(before)) = (prev_epoch, reset_to.0.checked_sub(1)) {
            // Remember the epoch of the record before the new log start, so
            // that the next push's consistency check and a later election
            // answer can name it.
            let appended = self.meta.history.append(epoch, Offset(before));
            assert!(appended.is_ok(), "empty history refused an entry");
        }
        self.log_start = reset_to;
        self.log_end = reset_to;
        self.durable_end = reset_to;
        if reset_to > self.high_watermark {
            self.high_watermark = reset_to;
            actions.push(Action::HighWatermark(reset_to));
        }
        let follower = self.follower_mut();
        follower.verified_end = reset_to;
        true
    }

    /// Whether the log can take records at `start`: it reaches `start`, and
    /// either holds nothing below `start` or only committed records (below
    /// its high watermark: every leader shares them), or its record at
    /// `start - 1` has `prev_epoch`.
    fn consistent_at(&self, start: Offset, prev_epoch: Option<LeaderEpoch>) -> bool {
        if start > self.log_end {
            return false;
        }
        // Below the high watermark every record is committed, hence the
        // same in every later leader's log, whatever `prev_epoch` says: a
        // leader whose history starts at its log start (recovered from an
        // empty log) names no epoch there (sim seed 101309).
        if start <= self.log_start || start <= self.high_watermark {
            return true;
        }
        self.meta.history.epoch_before(start) == prev_epoch
    }

    /// The mismatch answer for a push at `start` that failed the check: a
    /// prefix of this log the leader should try next, strictly below
    /// `start` so that the exchange ends.
    ///
    /// If the log is shorter than `start`: its end. If the record at
    /// `start - 1` has an epoch `q` older than the leader's there, the
    /// leader's run of `q` (if any) ended earlier: `(q, start)` makes it
    /// answer below `start`. If `q` is newer than the leader's (or the
    /// leader named none), the whole run of `q` here is suspect: retreat to
    /// its start.
    fn mismatch(&self, start: Offset, prev_epoch: Option<LeaderEpoch>) -> PushResult {
        let history = &self.meta.history;
        if start > self.log_end {
            return PushResult::Mismatch {
                last_epoch: history.epoch_before(self.log_end),
                log_end: self.log_end,
            };
        }
        let here = history.epoch_before(start);
        if let (Some(here), Some(theirs)) = (here, prev_epoch)
            && here < theirs
        {
            return PushResult::Mismatch {
                last_epoch: Some(here),
                log_end: start,
            };
        }
        let retreat = here
            .and_then(|epoch| history.start_of(epoch))
            .unwrap_or(self.log_start)
            .max(self.log_start);
        PushResult::Mismatch {
            last_epoch: history.epoch_before(retreat),
            log_end: retreat,
        }
    }

    /// Takes the batches of a push that passed the consistency check at
    /// `start`: skips those already held, truncates at the first conflict,
    /// appends the rest to the in-memory view. Emits `Truncate` when it cut.
    fn take_batches(
        &mut self,
        start: Offset,
        batches: Vec<Batch>,
        actions: &mut Vec<Action>,
    ) -> Result<Appended, ProtocolError> {
        let mut out = Appended {
            batches: Vec::new(),
            history_changed: false,
        };
        let mut expected_base = start;
        for batch in batches {
            if batch.base != expected_base || batch.last < batch.base {
                return Err(ProtocolError::NotContiguous {
                    base: batch.base,
                    last: batch.last,
                    expected: expected_base,
                });
            }
            expected_base = batch.end();
            if batch.last < self.log_start {
                // Committed and deleted here by retention.
                continue;
            }
            if batch.base < self.log_start {
                return Err(ProtocolError::StraddlesLogStart {
                    base: batch.base,
                    last: batch.last,
                    log_start: self.log_start,
                });
            }
            if out.batches.is_empty() && batch.base < self.log_end {
                if self.holds(&batch)? {
                    continue;
                }
                let protected = self.high_watermark.max(self.follower_mut().verified_end);
                if batch.base < protected {
                    return Err(ProtocolError::TruncatesProtected {
                        base: batch.base,
                        protected,
                    });
                }
                self.truncate_to(batch.base, actions);
                out.history_changed = true;
            }
            if self.meta.history.last_epoch() != Some(batch.epoch) {
                if let Some(previous) = self.meta.history.last_epoch()
                    && batch.epoch < previous
                {
                    return Err(ProtocolError::EpochGoesBack {
                        base: batch.base,
                        epoch: batch.epoch,
                        previous,
                    });
                }
                let appended = self.meta.history.append(batch.epoch, batch.base);
                assert!(
                    appended.is_ok(),
                    "batch {:?} refused by the history: {appended:?}",
                    batch.meta()
                );
                out.history_changed = true;
            }
            // `check_shape`: no batch above the push's epoch, which is the
            // fence once followed.
            assert!(
                batch.epoch <= self.meta.fenced_epoch,
                "batch epoch above the fence"
            );
            self.log_end = batch.end();
            out.batches.push(batch);
        }
        Ok(out)
    }

    /// Whether the log already holds `batch`: same epoch at its last
    /// offset. By the log matching property the records are then the same.
    fn holds(&self, batch: &Batch) -> Result<bool, ProtocolError> {
        if batch.last >= self.log_end {
            return Ok(false);
        }
        let held = self.meta.history.epoch_of(batch.last) == Some(batch.epoch);
        if held && self.meta.history.epoch_of(batch.base) != Some(batch.epoch) {
            return Err(ProtocolError::HeldInPart {
                base: batch.base,
                last: batch.last,
                epoch: batch.epoch,
            });
        }
        Ok(held)
    }

    /// Cuts the log to end at `to`: only records that conflict with the
    /// leader's, which are never committed.
    fn truncate_to(&mut self, to: Offset, actions: &mut Vec<Action>) {
        assert!(
            to >= self.high_watermark,
            "truncation to {to} below the high watermark {}",
            self.high_watermark
        );
        let verified_end = self.follower_mut().verified_end;
        assert!(
            to >= verified_end,
            "truncation to {to} below the checked prefix {verified_end}"
        );
        actions.push(Action::Truncate { to });
        self.meta.history.truncate_from(to);
        self.log_end = to;
        self.durable_end = self.durable_end.min(to);
    }
}

/// What a push added to the log.
struct Appended {
    batches: Vec<Batch>,
    history_changed: bool,
}
