//! Unit tests, one rule each, plus property tests of the high watermark and
//! of divergence repair against models.

use bytes::Bytes;
use corelog_wire::types::{LeaderEpoch, Offset, PartitionId};
use proptest::prelude::*;

use super::*;
use crate::history::{EpochEntry, EpochHistory};
use crate::message::{Batch, BatchMeta, Push, PushAck, PushResult, Query, QueryResult};

pub(super) const P: PartitionId = PartitionId {
    topic_id: 7,
    partition: 0,
};
pub(super) const A: ReplicaId = ReplicaId(1);
pub(super) const B: ReplicaId = ReplicaId(2);
pub(super) const C: ReplicaId = ReplicaId(3);

pub(super) fn e(epoch: u32) -> LeaderEpoch {
    LeaderEpoch(epoch)
}

pub(super) fn o(offset: u64) -> Offset {
    Offset(offset)
}

pub(super) fn config() -> ReplicaConfig {
    ReplicaConfig {
        resend_timeout_ms: 100,
        heartbeat_interval_ms: 50,
        max_inflight_records: 10,
        max_push_bytes: 1000,
        in_sync_lag_ms: 1000,
    }
}

/// A replica recovered with a log whose runs are `(epoch, start)` and which
/// ends at `end`, fenced at `fenced`.
pub(super) fn replica(id: ReplicaId, runs: &[(u32, u64)], end: u64, fenced: u32) -> Replica {
    let history = EpochHistory::from_entries(
        runs.iter()
            .map(|&(epoch, start)| EpochEntry {
                epoch: e(epoch),
                start_offset: o(start),
            })
            .collect(),
    )
    .unwrap();
    let last_epoch = history.epoch_before(o(end));
    let meta = ReplicaMeta {
        fenced_epoch: e(fenced),
        led_epoch: None,
        history,
    };
    let log = RecoveredLog {
        log_start: o(0),
        log_end: o(end),
        last_epoch,
    };
    Replica::recover(id, P, config(), meta, log).unwrap().0
}

pub(super) fn batch(base: u64, last: u64, epoch: u32) -> Batch {
    Batch {
        base: o(base),
        last: o(last),
        epoch: e(epoch),
        bytes: Bytes::from(format!("{base}-{last}@{epoch}")),
    }
}

pub(super) fn push(
    epoch: u32,
    start: u64,
    prev: Option<u32>,
    hw: u64,
    batches: Vec<Batch>,
) -> Push {
    Push {
        partition: P,
        epoch: e(epoch),
        leader: A,
        start: o(start),
        prev_epoch: prev.map(e),
        reset_to: None,
        hw: o(hw),
        log_start: o(0),
        batches,
    }
}

/// `a` becomes the leader of `epoch` over `replicas`, and its shell carries
/// out the `Persist`es; the other actions are returned.
pub(super) fn lead(a: &mut Replica, epoch: u32, replicas: &[ReplicaId]) -> Vec<Action> {
    let actions = a.become_leader(e(epoch), replicas, 0).unwrap();
    for action in &actions {
        if let Action::Persist(meta) = action {
            a.on_persisted(meta);
        }
    }
    actions
        .into_iter()
        .filter(|action| !matches!(action, Action::Persist(_)))
        .collect()
}

/// A leads `epoch` over A, B, C with its marker appended.
pub(super) fn leader(runs: &[(u32, u64)], end: u64, epoch: u32) -> Replica {
    let mut a = replica(A, runs, end, epoch - 1);
    lead(&mut a, epoch, &[A, B, C]);
    a.on_local_append(BatchMeta {
        base: o(end),
        last: o(end),
        epoch: e(epoch),
    });
    a
}

pub(super) fn ok(from: ReplicaId, epoch: u32, durable: u64) -> PushAck {
    PushAck {
        partition: P,
        epoch: e(epoch),
        from,
        result: PushResult::Ok {
            durable_end: o(durable),
            log_end: o(durable),
        },
    }
}

pub(super) fn high_watermarks(actions: &[Action]) -> Vec<Offset> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::HighWatermark(hw) => Some(*hw),
            _ => None,
        })
        .collect()
}

pub(super) fn acks(actions: &[Action]) -> Vec<PushResult> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::SendAck { ack, .. } => Some(ack.result),
            _ => None,
        })
        .collect()
}

fn pushes(actions: &[Action]) -> Vec<(ReplicaId, Push, u64)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::SendPush {
                to,
                push,
                max_bytes,
            } => Some((*to, push.clone(), *max_bytes)),
            _ => None,
        })
        .collect()
}

// ---- leader --------------------------------------------------------------

fn status_of(a: &Replica, follower: ReplicaId, now_ms: u64) -> FollowerStatus {
    a.follower_status(now_ms)
        .expect("leading")
        .into_iter()
        .find(|status| status.replica == follower)
        .expect("a follower")
}

#[test]
fn a_follower_that_stops_acknowledging_leaves_the_in_sync_set_after_the_lag() {
    let mut a = leader(&[(1, 0)], 5, 2);
    a.on_push_ack(&ok(B, 2, 6), 10).unwrap();
    a.on_local_append(BatchMeta {
        base: o(6),
        last: o(9),
        epoch: e(2),
    });
    a.on_push_ack(&ok(B, 2, 10), 20).unwrap();
    let b = status_of(&a, B, 900);
    assert_eq!((b.lag_records, b.lag_ms, b.in_sync), (0, 0, true));
    let c = status_of(&a, C, 900);
    assert_eq!((c.lag_records, c.lag_ms, c.in_sync), (10, 900, true));
    let c = status_of(&a, C, 1001);
    assert!(!c.in_sync, "{c:?}");
    // Catching up puts it back.
    a.on_push_ack(&ok(C, 2, 10), 1500).unwrap();
    let c = status_of(&a, C, 1600);
    assert_eq!((c.lag_records, c.lag_ms, c.in_sync), (0, 0, true));
    assert_eq!(replica(B, &[(1, 0)], 5, 1).follower_status(0), None);
}

#[test]
fn a_follower_that_acknowledges_every_push_under_steady_load_stays_in_sync() {
    // The log grows between every push and its acknowledgement, so the
    // follower never holds the log as of its ack: only the full pushes it
    // acknowledges show it keeping up.
    let mut a = leader(&[(1, 0)], 5, 2);
    let mut end = 6;
    for round in 0..100_u64 {
        let now = round * 50;
        a.on_local_append(BatchMeta {
            base: o(end),
            last: o(end),
            epoch: e(2),
        });
        end += 1;
        a.poll_sends(now);
        a.on_push_sent(B, o(end));
        let sent = end;
        a.on_local_append(BatchMeta {
            base: o(end),
            last: o(end),
            epoch: e(2),
        });
        end += 1;
        a.on_push_ack(&ok(B, 2, sent), now + 20).unwrap();
    }
    let b = status_of(&a, B, 100 * 50);
    assert!(b.in_sync && b.lag_ms <= 100 && b.lag_records == 1, "{b:?}");
    let c = status_of(&a, C, 100 * 50);
    assert!(!c.in_sync, "{c:?}");
}

/// A fourth replica, outside the set of three: the learner of a move.
const LEARNER: ReplicaId = ReplicaId(4);

#[test]
fn a_learner_gets_pushes_but_never_counts_toward_the_high_watermark() {
    let mut a = leader(&[(1, 0)], 5, 2);
    // A voter and the leader itself are never learners.
    a.set_learners(&[LEARNER, B, A], 0);
    a.on_local_append(BatchMeta {
        base: o(6),
        last: o(6),
        epoch: e(2),
    });
    a.on_local_durable(o(7));
    let sent: Vec<ReplicaId> = pushes(&a.poll_sends(0))
        .into_iter()
        .map(|(to, ..)| to)
        .collect();
    assert_eq!(sent, vec![B, C, LEARNER]);
    let counted = a.on_push_ack(&ok(LEARNER, 2, 7), 10).unwrap();
    assert!(high_watermarks(&counted).is_empty(), "{counted:?}");
    assert!(a.high_watermark() < o(6));
    let learner = status_of(&a, LEARNER, 10);
    assert!(!learner.voter && learner.lag_records == 0, "{learner:?}");
    assert!(status_of(&a, B, 10).voter);
    assert_eq!(a.follower_lag(), Some(14), "only B's and C's");
    // A voter's acknowledgement commits: A and B are a majority of three.
    let counted = a.on_push_ack(&ok(B, 2, 7), 20).unwrap();
    assert_eq!(high_watermarks(&counted), vec![o(7)]);
}

#[test]
fn a_learner_named_again_keeps_its_progress_and_one_left_out_is_dropped() {
    let mut a = leader(&[(1, 0)], 5, 2);
    a.set_learners(&[LEARNER], 0);
    a.on_push_ack(&ok(LEARNER, 2, 6), 10).unwrap();
    a.set_learners(&[LEARNER], 20);
    assert_eq!(status_of(&a, LEARNER, 20).acked_end, o(6));
    // A learner that cannot be reached is not a voter gone missing.
    a.on_push_failed(LEARNER, e(2), 30);
    assert_eq!(a.reachable_since(25), Some((3, 3)));
    a.set_learners(&[], 40);
    let followers: Vec<ReplicaId> = a
        .follower_status(40)
        .unwrap()
        .into_iter()
        .map(|status| status.replica)
        .collect();
    assert_eq!(followers, vec![B, C]);
    // A follower has no learners to set.
    let mut b = replica(B, &[(1, 0)], 5, 2);
    b.set_learners(&[LEARNER], 0);
    assert_eq!(b.follower_status(0), None);
}

#[test]
fn become_leader_persists_the_promise_before_asking_for_the_marker() {
    let mut a = replica(A, &[(1, 0)], 5, 3);
    let actions = a.become_leader(e(3), &[A, B, C], 0).unwrap();
    let Action::Persist(meta) = &actions[0] else {
        panic!("{actions:?}")
    };
    assert_eq!(meta.fenced_epoch, e(3));
    assert_eq!(meta.led_epoch, Some(e(3)));
    assert_eq!(
        meta.history.last(),
        Some(EpochEntry {
            epoch: e(3),
            start_offset: o(5)
        })
    );
    assert_eq!(actions[1], Action::AppendMarker { epoch: e(3) });
    assert!(!a.accepting_writes());
    assert!(
        a.poll_sends(0).is_empty(),
        "nothing is pushed before the marker"
    );
    a.on_persisted(meta);
    assert!(!a.accepting_writes(), "the marker is not appended yet");
    a.on_local_append(BatchMeta {
        base: o(5),
        last: o(5),
        epoch: e(3),
    });
    assert!(a.accepting_writes());
    assert_eq!(
        a.become_leader(e(3), &[A, B, C], 0),
        Ok(Vec::new()),
        "repeat is a no-op"
    );
}

#[test]
fn a_leader_of_an_empty_log_takes_writes_at_once_and_commits_them_by_majority() {
    let mut a = replica(A, &[], 0, 0);
    let actions = a.become_leader(e(1), &[A, B, C], 0).unwrap();
    assert!(
        matches!(actions[..], [Action::Persist(_)]),
        "no marker: no older record exists that counting could commit: {actions:?}"
    );
    assert!(
        !a.accepting_writes(),
        "no write before the leadership is durable"
    );
    let Action::Persist(meta) = &actions[0] else {
        unreachable!()
    };
    a.on_persisted(meta);
    assert!(a.accepting_writes());
    assert!(matches!(
        a.role(),
        RoleView::Leader {
            accepting_writes: true,
            ..
        }
    ));
    a.on_local_append(BatchMeta {
        base: o(0),
        last: o(2),
        epoch: e(1),
    });
    assert!(high_watermarks(&a.on_local_durable(o(3))).is_empty());
    assert_eq!(
        high_watermarks(&a.on_push_ack(&ok(B, 1, 3), 1).unwrap()),
        vec![o(3)],
        "the first record sits at offset 0 and commits on a majority"
    );
    // A replica set of one commits what its own log made durable.
    let mut alone = replica(A, &[], 0, 0);
    lead(&mut alone, 1, &[A]);
    alone.on_local_append(BatchMeta {
        base: o(0),
        last: o(0),
        epoch: e(1),
    });
    assert_eq!(high_watermarks(&alone.on_local_durable(o(1))), vec![o(1)]);
}

#[test]
fn become_leader_refuses_a_fenced_epoch_and_an_epoch_led_before_a_restart() {
    let mut a = replica(A, &[(1, 0)], 5, 4);
    assert_eq!(
        a.become_leader(e(3), &[A, B, C], 0),
        Err(ReplicationError::Fenced {
            epoch: e(3),
            fenced_epoch: e(4)
        })
    );
    assert_eq!(
        a.become_leader(e(4), &[B, C], 0),
        Err(ReplicationError::NotInReplicaSet { replica: A })
    );
    a.become_leader(e(4), &[A, B, C], 0).unwrap();
    // Crash: the marker never became durable; restart from the persisted meta.
    let meta = a.meta().clone();
    let log = RecoveredLog {
        log_start: o(0),
        log_end: o(5),
        last_epoch: Some(e(1)),
    };
    let (mut restarted, actions) = Replica::recover(A, P, config(), meta, log).unwrap();
    assert!(
        matches!(actions[..], [Action::Persist(_)]),
        "the dangling run is forgotten"
    );
    assert_eq!(restarted.meta().history.last_epoch(), Some(e(1)));
    assert_eq!(
        restarted.become_leader(e(4), &[A, B, C], 0),
        Err(ReplicationError::AlreadyLed { epoch: e(4) })
    );
    assert!(restarted.become_leader(e(5), &[A, B, C], 0).is_ok());
}

#[test]
#[should_panic(expected = "before the leadership of 1 is durable")]
fn a_local_append_before_the_leadership_is_durable_is_a_bug() {
    let mut a = replica(A, &[], 0, 0);
    a.become_leader(e(1), &[A, B, C], 0).unwrap();
    a.on_local_append(BatchMeta {
        base: o(0),
        last: o(0),
        epoch: e(1),
    });
}

#[test]
#[should_panic(expected = "not leading")]
fn a_local_append_on_a_follower_is_a_bug() {
    let mut b = replica(B, &[], 0, 0);
    b.on_local_append(BatchMeta {
        base: o(0),
        last: o(0),
        epoch: e(1),
    });
}

#[test]
fn pushes_start_at_the_marker_and_respect_the_window() {
    let mut a = leader(&[(1, 0)], 5, 2);
    let sent = pushes(&a.poll_sends(1));
    assert_eq!(sent.len(), 2);
    let (to, first, max_bytes) = &sent[0];
    assert_eq!(
        (*to, first.start, first.prev_epoch, *max_bytes),
        (B, o(5), Some(e(1)), 1000)
    );
    assert_eq!(first.epoch, e(2));
    // The shell sent up to the log end; append 20 more records.
    a.on_push_sent(B, o(6));
    a.on_push_sent(C, o(6));
    for base in 6..26 {
        a.on_local_append(BatchMeta {
            base: o(base),
            last: o(base),
            epoch: e(2),
        });
    }
    let sent = pushes(&a.poll_sends(2));
    assert!(
        sent.iter()
            .all(|(_, push, bytes)| push.start == o(6) && *bytes == 1000)
    );
    a.on_push_sent(B, o(16));
    // 11 records in flight to B (5..16 beyond its acknowledged 0... window
    // counts from the acknowledged end): no new batches, at most heartbeats.
    let sent = pushes(&a.poll_sends(3));
    assert!(sent.iter().all(|(to, _, bytes)| *to != B || *bytes == 0));
    a.on_push_ack(&ok(B, 2, 16), 4).unwrap();
    let sent = pushes(&a.poll_sends(5));
    assert!(
        sent.iter()
            .any(|(to, push, bytes)| *to == B && push.start == o(16) && *bytes == 1000)
    );
}

/// The leader's pushes to B after the first: B acknowledged up to 5 at
/// 10 ms, and the push of 6..9 went out at 20 ms and is still unanswered.
fn leader_with_a_push_on_its_way() -> Replica {
    let mut a = leader(&[(1, 0)], 5, 2);
    a.poll_sends(0);
    a.on_push_sent(B, o(6));
    a.on_push_ack(&ok(B, 2, 5), 10).unwrap();
    a.on_local_append(BatchMeta {
        base: o(6),
        last: o(8),
        epoch: e(2),
    });
    a.poll_sends(20);
    a.on_push_sent(B, o(9));
    a
}

/// Whether `sent` resends B's batches from its acknowledged end (a
/// heartbeat starts there too, but carries none).
fn resent_to_b(sent: &[Action], from: u64) -> bool {
    pushes(sent)
        .iter()
        .any(|(to, push, bytes)| *to == B && push.start == o(from) && *bytes > 0)
}

#[test]
fn without_progress_the_leader_resends_a_lost_push_from_the_acknowledged_end() {
    let mut a = leader_with_a_push_on_its_way();
    a.on_push_failed(B, e(2), 30);
    assert!(
        pushes(&a.poll_sends(60))
            .iter()
            .all(|(to, _, bytes)| *to != B || *bytes == 0)
    );
    let resent = a.poll_sends(111);
    assert!(resent_to_b(&resent, 5), "{resent:?}");
}

/// Slow is not gone: a follower whose answers are late (the cluster is
/// overloaded) gets no resend while a push to it is on its way, however
/// long that takes; resending would give it every byte twice.
#[test]
fn a_push_still_on_its_way_is_waited_for_however_late() {
    let mut a = leader_with_a_push_on_its_way();
    for now in [111, 1_000, 60_000] {
        let sent = a.poll_sends(now);
        assert!(!resent_to_b(&sent, 5), "resent at {now}: {sent:?}");
        assert_eq!(a.reachable_since(0), Some((3, 3)), "slow is reachable");
    }
    // Its late answer counts.
    a.on_push_ack(&ok(B, 2, 9), 60_001).unwrap();
    // A failure of another epoch's push settles nothing of this one's.
    a.on_local_append(BatchMeta {
        base: o(9),
        last: o(9),
        epoch: e(2),
    });
    a.poll_sends(60_002);
    a.on_push_sent(B, o(10));
    a.on_push_failed(B, e(1), 60_003);
    assert!(!resent_to_b(&a.poll_sends(120_000), 9));
    a.on_push_failed(B, e(2), 120_001);
    assert!(resent_to_b(&a.poll_sends(120_002), 9));
}

#[test]
fn a_follower_is_unreachable_only_after_a_failed_push_it_did_not_answer_since() {
    let mut a = leader_with_a_push_on_its_way();
    assert_eq!(a.reachable_since(0), Some((3, 3)));
    a.on_push_failed(B, e(2), 30);
    assert_eq!(
        a.reachable_since(25),
        Some((2, 3)),
        "failed, no answer since"
    );
    assert_eq!(
        a.reachable_since(31),
        Some((3, 3)),
        "the failure was before the wait"
    );
    a.poll_sends(200);
    a.on_push_sent(B, o(9));
    a.on_push_ack(&ok(B, 2, 9), 210).unwrap();
    assert_eq!(a.reachable_since(25), Some((3, 3)), "answered since");
    assert_eq!(replica(B, &[(1, 0)], 5, 2).reachable_since(0), None);
}

#[test]
fn the_high_watermark_needs_a_majority_and_the_marker() {
    // Records 5..8 of epoch 1 are on A, B and C; A leads epoch 2 from 8.
    let mut a = leader(&[(1, 0)], 8, 2);
    assert!(high_watermarks(&a.on_local_durable(o(8))).is_empty());
    // A majority holds 8, but the marker (offset 8) is not committed: the
    // old epoch's records are not committed by counting (Raft fig. 8).
    assert!(high_watermarks(&a.on_push_ack(&ok(B, 2, 8), 1).unwrap()).is_empty());
    assert_eq!(a.high_watermark(), o(0));
    // The marker is durable on A only: still nothing.
    assert!(high_watermarks(&a.on_local_durable(o(9))).is_empty());
    assert_eq!(a.leader_catching_up(), Some(e(2)), "serves no reads yet");
    assert!(!a.epoch_committed(), "a move's next step waits");
    // And on B: the marker and everything before it commit.
    assert_eq!(
        high_watermarks(&a.on_push_ack(&ok(B, 2, 9), 2).unwrap()),
        vec![o(9)]
    );
    assert_eq!(a.leader_catching_up(), None);
    assert!(a.epoch_committed());
    // A late, smaller acknowledgement never moves it back.
    assert!(high_watermarks(&a.on_push_ack(&ok(C, 2, 3), 3).unwrap()).is_empty());
    assert_eq!(a.high_watermark(), o(9));
}

#[test]
fn only_a_leader_commits_its_epoch_and_an_empty_log_has_nothing_to_commit() {
    let mut a = replica(A, &[], 0, 0);
    assert!(!a.epoch_committed(), "not leading");
    lead(&mut a, 1, &[A, B, C]);
    assert!(a.epoch_committed(), "an empty log writes no marker");
    assert!(!replica(B, &[(1, 0)], 5, 2).epoch_committed());
}

#[test]
fn the_high_watermark_is_the_end_a_majority_of_five_reached() {
    const D: ReplicaId = ReplicaId(4);
    const E: ReplicaId = ReplicaId(5);
    let mut a = replica(A, &[(1, 0)], 5, 1);
    lead(&mut a, 2, &[A, B, C, D, E]);
    // The marker at 5, then records 6..=19.
    for base in 5..20 {
        a.on_local_append(BatchMeta {
            base: o(base),
            last: o(base),
            epoch: e(2),
        });
    }
    assert!(high_watermarks(&a.on_local_durable(o(20))).is_empty());
    assert!(high_watermarks(&a.on_push_ack(&ok(B, 2, 12), 1).unwrap()).is_empty());
    // A at 20, B and C at 12: three of five reached 12.
    assert_eq!(
        high_watermarks(&a.on_push_ack(&ok(C, 2, 12), 2).unwrap()),
        vec![o(12)]
    );
    // 20, 15, 12, 12: the third largest is still 12.
    assert!(high_watermarks(&a.on_push_ack(&ok(D, 2, 15), 3).unwrap()).is_empty());
    // 20, 17, 15, 12, 12: now 15.
    assert_eq!(
        high_watermarks(&a.on_push_ack(&ok(E, 2, 17), 4).unwrap()),
        vec![o(15)]
    );
}

#[test]
fn acknowledgements_of_other_epochs_are_ignored() {
    let mut a = leader(&[(1, 0)], 5, 3);
    a.on_local_durable(o(6));
    assert!(a.on_push_ack(&ok(B, 2, 6), 1).unwrap().is_empty());
    assert_eq!(a.high_watermark(), o(0));
}

#[test]
fn a_fenced_answer_from_a_newer_epoch_makes_the_leader_step_down() {
    let mut a = leader(&[(1, 0)], 5, 3);
    let fenced = PushAck {
        partition: P,
        epoch: e(3),
        from: B,
        result: PushResult::Fenced { epoch: e(4) },
    };
    let actions = a.on_push_ack(&fenced, 1).unwrap();
    assert_eq!(actions, vec![Action::StepDown { epoch: e(3) }]);
    assert_eq!(a.role(), RoleView::Offline);
    assert!(!a.accepting_writes());
    assert_eq!(
        a.become_leader(e(3), &[A, B, C], 2),
        Err(ReplicationError::AlreadyLed { epoch: e(3) })
    );
}

#[test]
fn a_stale_mismatch_never_moves_a_follower_below_its_acknowledged_end() {
    let mut a = leader(&[(1, 0)], 5, 2);
    a.poll_sends(0);
    a.on_push_sent(B, o(6));
    a.on_push_ack(&ok(B, 2, 6), 1).unwrap();
    let stale = PushAck {
        partition: P,
        epoch: e(2),
        from: B,
        result: PushResult::Mismatch {
            last_epoch: Some(e(1)),
            log_end: o(2),
        },
    };
    a.on_push_ack(&stale, 2).unwrap();
    let sent = pushes(&a.poll_sends(3));
    assert!(
        sent.iter()
            .any(|(to, push, _)| *to == B && push.start == o(6)),
        "{sent:?}"
    );
}

/// Sim seed 10711: the follower ends inside a run of an epoch this leader
/// never had; its end need not be a batch boundary of the leader's log.
#[test]
fn a_mismatch_in_an_epoch_the_leader_lacks_retreats_to_a_run_start() {
    // A: 0..4 epoch 1, 4..20 epoch 3, leading epoch 5 from 20.
    // B: ends at 11 in epoch 4 (A never had epoch 4); A has epoch 3 there.
    let mut a = leader(&[(1, 0), (3, 4)], 20, 5);
    let mismatch = PushAck {
        partition: P,
        epoch: e(5),
        from: B,
        result: PushResult::Mismatch {
            last_epoch: Some(e(4)),
            log_end: o(11),
        },
    };
    a.on_push_ack(&mismatch, 1).unwrap();
    let sent = pushes(&a.poll_sends(2));
    let probe = sent
        .iter()
        .find(|(to, _, _)| *to == B)
        .expect("a probe to B");
    assert_eq!((probe.1.start, probe.1.prev_epoch), (o(4), Some(e(1))));
    // When the follower holds the leader's epoch, its end is the probe.
    let mut a = leader(&[(1, 0), (3, 4)], 20, 5);
    let mismatch = PushAck {
        result: PushResult::Mismatch {
            last_epoch: Some(e(3)),
            log_end: o(11),
        },
        ..mismatch
    };
    a.on_push_ack(&mismatch, 1).unwrap();
    let sent = pushes(&a.poll_sends(2));
    let probe = sent
        .iter()
        .find(|(to, _, _)| *to == B)
        .expect("a probe to B");
    assert_eq!((probe.1.start, probe.1.prev_epoch), (o(11), Some(e(3))));
}

// ---- follower ------------------------------------------------------------

#[test]
fn a_push_below_the_fence_is_answered_fenced() {
    let mut b = replica(B, &[(1, 0)], 5, 4);
    let actions = b.on_push(push(3, 5, Some(1), 0, vec![]), 0).unwrap();
    assert_eq!(acks(&actions), vec![PushResult::Fenced { epoch: e(4) }]);
    assert_eq!(b.log_end(), o(5));
}

#[test]
fn a_newer_epoch_is_persisted_before_anything_else() {
    let mut b = replica(B, &[(1, 0)], 5, 1);
    let actions = b
        .on_push(push(3, 5, Some(1), 0, vec![batch(5, 5, 3)]), 0)
        .unwrap();
    let Action::Persist(meta) = &actions[0] else {
        panic!("{actions:?}")
    };
    assert_eq!(meta.fenced_epoch, e(3));
    assert_eq!(
        b.role(),
        RoleView::Follower {
            epoch: e(3),
            leader: A
        }
    );
    assert!(matches!(actions.last(), Some(Action::Append { .. })));
    // The history run of epoch 3 is persisted before the append.
    let persisted: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Persist(meta) => Some(meta.history.last_epoch()),
            _ => None,
        })
        .collect();
    assert_eq!(persisted.last(), Some(&Some(e(3))));
}

#[test]
fn a_push_past_the_log_end_or_with_another_previous_epoch_is_a_mismatch() {
    let mut b = replica(B, &[(1, 0), (2, 4)], 8, 3);
    let actions = b
        .on_push(push(3, 9, Some(2), 0, vec![batch(9, 9, 3)]), 0)
        .unwrap();
    assert_eq!(
        acks(&actions),
        vec![PushResult::Mismatch {
            last_epoch: Some(e(2)),
            log_end: o(8)
        }]
    );
    // The leader's record at 5 is epoch 1, ours epoch 2 (newer): retreat to
    // the start of our epoch 2 run.
    let actions = b.on_push(push(3, 6, Some(1), 0, vec![]), 0).unwrap();
    assert_eq!(
        acks(&actions),
        vec![PushResult::Mismatch {
            last_epoch: Some(e(1)),
            log_end: o(4)
        }]
    );
    // The leader's record at 5 is epoch 3... no: epoch 2 ours vs leader's
    // newer epoch: answer with ours at that point.
    let actions = b.on_push(push(3, 6, Some(3), 0, vec![]), 0).unwrap();
    assert_eq!(
        acks(&actions),
        vec![PushResult::Mismatch {
            last_epoch: Some(e(2)),
            log_end: o(6)
        }]
    );
    assert_eq!(
        b.log_end(),
        o(8),
        "a mismatch appends and truncates nothing"
    );
}

#[test]
fn held_batches_are_skipped_and_the_first_conflict_truncates() {
    // B: 0..4 epoch 1, 4..8 epoch 2. Leader: 0..6 epoch 1, then epoch 3.
    let mut b = replica(B, &[(1, 0), (2, 4)], 8, 2);
    let batches = vec![batch(2, 3, 1), batch(4, 5, 1), batch(6, 6, 3)];
    let actions = b.on_push(push(3, 2, Some(1), 0, batches), 0).unwrap();
    assert!(matches!(actions[0], Action::Persist(_)), "fence first");
    assert_eq!(actions[1], Action::Truncate { to: o(4) });
    let Action::Persist(meta) = &actions[2] else {
        panic!("{actions:?}")
    };
    assert_eq!(
        meta.history.entries(),
        &[
            EpochEntry {
                epoch: e(1),
                start_offset: o(0)
            },
            EpochEntry {
                epoch: e(3),
                start_offset: o(6)
            },
        ]
    );
    let Action::Append { batches } = &actions[3] else {
        panic!("{actions:?}")
    };
    assert_eq!(
        batches.iter().map(|b| b.base).collect::<Vec<_>>(),
        vec![o(4), o(6)]
    );
    assert_eq!(b.log_end(), o(7));
}

/// Was a panic ("truncation below the high watermark") before issue 36:
/// a push is peer input, so it is now refused with a typed error.
#[test]
fn a_push_that_would_truncate_below_the_high_watermark_is_refused() {
    let mut b = replica(B, &[(1, 0)], 6, 2);
    b.on_push(push(2, 6, Some(1), 6, vec![]), 0).unwrap();
    assert_eq!(b.high_watermark(), o(6));
    // A (buggy) leader claims offset 4 holds an epoch-2 batch.
    let refused = b.on_push(push(2, 4, Some(1), 6, vec![batch(4, 4, 2)]), 0);
    assert_eq!(
        refused,
        Err(ReplicationError::Protocol(
            crate::ProtocolError::TruncatesProtected {
                base: o(4),
                protected: o(6)
            }
        ))
    );
    assert_eq!((b.log_end(), b.high_watermark()), (o(6), o(6)));
}

#[test]
fn only_the_checked_prefix_is_acknowledged_and_carries_the_high_watermark() {
    // B holds 0..10 durably: 0..5 epoch 1, 5..10 epoch 2 from an old leader.
    let mut b = replica(B, &[(1, 0), (2, 5)], 10, 2);
    b.become_follower(e(3), A, 0).unwrap();
    // Durability news before any push of epoch 3: nothing is checked yet.
    b.on_local_durable(o(10));
    let heartbeat = b.on_push(push(3, 3, Some(1), 9, vec![]), 0).unwrap();
    assert_eq!(
        acks(&heartbeat),
        vec![PushResult::Ok {
            durable_end: o(3),
            log_end: o(3)
        }]
    );
    assert_eq!(b.high_watermark(), o(3), "min(leader hw, checked end)");
    let actions = b.on_push(push(3, 5, Some(1), 9, vec![]), 1).unwrap();
    assert_eq!(
        acks(&actions),
        vec![PushResult::Ok {
            durable_end: o(5),
            log_end: o(5)
        }]
    );
    assert_eq!(b.high_watermark(), o(5));
}

#[test]
fn a_late_duplicate_reset_does_not_discard_a_caught_up_log() {
    let mut b = replica(B, &[], 0, 2);
    let mut reset = push(2, 10, Some(1), 10, vec![batch(10, 11, 2)]);
    reset.reset_to = Some(o(10));
    let actions = b.on_push(reset.clone(), 0).unwrap();
    assert!(actions.contains(&Action::Reset { log_start: o(10) }));
    assert_eq!(
        (b.log_start(), b.log_end(), b.high_watermark()),
        (o(10), o(12), o(10))
    );
    b.on_local_durable(o(12));
    b.on_push(push(2, 12, Some(2), 12, vec![]), 1).unwrap();
    assert_eq!(b.high_watermark(), o(12));
    let actions = b.on_push(reset, 2).unwrap();
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Reset { .. } | Action::Truncate { .. }))
    );
    assert_eq!(b.log_end(), o(12));
}

/// Sim seed 101309: a leader recovered from an empty log names no epoch
/// before its log start; a follower committed past it must not reset.
#[test]
fn a_reset_below_the_high_watermark_keeps_the_committed_log() {
    let mut b = replica(B, &[(1, 0)], 20, 2);
    b.on_push(push(2, 20, Some(1), 15, vec![]), 0).unwrap();
    assert_eq!(b.high_watermark(), o(15));
    let mut reset = push(2, 10, None, 15, vec![]);
    reset.reset_to = Some(o(10));
    let actions = b.on_push(reset, 1).unwrap();
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Reset { .. } | Action::Truncate { .. }))
    );
    assert!(
        matches!(acks(&actions)[..], [PushResult::Ok { .. }]),
        "{actions:?}"
    );
    assert_eq!((b.log_start(), b.log_end()), (o(0), o(20)));
}

#[test]
fn a_conflicting_leader_for_the_same_epoch_is_refused() {
    let mut b = replica(B, &[], 0, 0);
    b.become_follower(e(2), A, 0).unwrap();
    let mut other = push(2, 0, None, 0, vec![]);
    other.leader = C;
    assert!(matches!(
        b.on_push(other, 0),
        Err(ReplicationError::ConflictingLeader { .. })
    ));
}

/// A leadership that appended nothing (an empty log needs no marker) left
/// a run at the log end holding no records. A later leader with an older
/// epoch's batches at that offset must be followable (sim seed 1102 panicked
/// with "goes back in epoch").
#[test]
fn a_run_without_records_does_not_block_an_older_epochs_batches() {
    let mut b = replica(B, &[], 0, 0);
    b.become_leader(e(1), &[A, B, C], 0).unwrap();
    let actions = b.become_follower(e(3), A, 0).unwrap();
    assert!(
        actions.iter().any(
            |action| matches!(action, Action::Persist(meta) if meta.history.entries().is_empty())
        ),
        "{actions:?}"
    );
    let actions = b
        .on_push(push(3, 0, None, 0, vec![batch(0, 1, 0)]), 0)
        .unwrap();
    assert!(
        actions
            .iter()
            .any(|action| matches!(action, Action::Append { batches } if batches.len() == 1)),
        "{actions:?}"
    );
    assert_eq!(b.meta().history.epoch_of(o(1)), Some(e(0)));
}

/// The same with records below: a leader that stepped down before its
/// marker was appended holds an empty run at its log end.
#[test]
fn a_leader_without_its_marker_drops_its_empty_run_when_it_follows() {
    let mut b = replica(B, &[(0, 0)], 5, 1);
    b.become_leader(e(2), &[A, B, C], 0).unwrap();
    b.become_follower(e(3), A, 0).unwrap();
    b.on_push(push(3, 5, Some(0), 0, vec![batch(5, 6, 1)]), 0)
        .unwrap();
    assert_eq!(b.meta().history.epoch_of(o(6)), Some(e(1)));
}

// ---- queries and recovery ------------------------------------------------

#[test]
fn a_query_fences_stops_following_and_answers_the_durable_end() {
    let mut b = replica(B, &[(1, 0)], 5, 1);
    b.become_follower(e(2), A, 0).unwrap();
    b.on_push(push(2, 5, Some(1), 0, vec![batch(5, 7, 2)]), 0)
        .unwrap();
    b.on_local_durable(o(6)); // only part of it
    let actions = b
        .on_query(&Query {
            partition: P,
            new_epoch: e(3),
        })
        .unwrap();
    assert!(matches!(&actions[0], Action::Persist(meta) if meta.fenced_epoch == e(3)));
    let Action::SendAnswer { answer } = &actions[1] else {
        panic!("{actions:?}")
    };
    assert_eq!(answer.epoch, e(3));
    assert_eq!(
        answer.result,
        QueryResult::State {
            last_epoch: Some(e(2)),
            log_end: o(6)
        }
    );
    assert_eq!(b.role(), RoleView::Offline);
    // The rest becomes durable: no acknowledgement to the fenced leader.
    assert!(b.on_local_durable(o(8)).is_empty());
    // A repeated query gets the same kind of answer; an old one is fenced.
    let again = b
        .on_query(&Query {
            partition: P,
            new_epoch: e(3),
        })
        .unwrap();
    assert!(
        matches!(again[..], [Action::SendAnswer { answer }] if matches!(answer.result, QueryResult::State { .. }))
    );
    let old = b
        .on_query(&Query {
            partition: P,
            new_epoch: e(2),
        })
        .unwrap();
    assert!(
        matches!(old[..], [Action::SendAnswer { answer }] if answer.result == QueryResult::Fenced { fenced_epoch: e(3) })
    );
}

#[test]
fn a_query_makes_the_leader_step_down() {
    let mut a = leader(&[(1, 0)], 5, 2);
    let actions = a
        .on_query(&Query {
            partition: P,
            new_epoch: e(3),
        })
        .unwrap();
    assert_eq!(actions[0], Action::StepDown { epoch: e(2) });
    assert!(!a.accepting_writes());
}

#[test]
fn recovery_refuses_a_history_that_disagrees_with_the_log() {
    let meta = ReplicaMeta {
        fenced_epoch: e(3),
        led_epoch: None,
        history: EpochHistory::from_entries(vec![EpochEntry {
            epoch: e(2),
            start_offset: o(0),
        }])
        .unwrap(),
    };
    let log = RecoveredLog {
        log_start: o(0),
        log_end: o(4),
        last_epoch: Some(e(3)),
    };
    assert!(matches!(
        Replica::recover(B, P, config(), meta.clone(), log),
        Err(ReplicationError::HistoryMismatch { .. })
    ));
    // An empty log forgets the history: no stale epoch can win an election.
    let empty = RecoveredLog {
        log_start: o(9),
        log_end: o(9),
        last_epoch: None,
    };
    let (b, actions) = Replica::recover(B, P, config(), meta, empty).unwrap();
    assert!(b.meta().history.entries().is_empty());
    assert!(matches!(actions[..], [Action::Persist(_)]));
    assert_eq!(b.high_watermark(), o(9));
}

// ---- the spec's truncation counterexample -------------------------------

/// A leader and one follower exchanging pushes and answers until quiet,
/// with every follower append durable at once. Returns the truncation
/// points the follower used.
fn converge(
    leader: &mut Replica,
    follower: &mut Replica,
    leader_log: &[Batch],
    follower_log: &mut Vec<Batch>,
) -> Vec<Offset> {
    let mut truncations = Vec::new();
    let to = follower.id();
    for round in 0..200u64 {
        let now = round * 1000;
        let mut progressed = false;
        for action in leader.poll_sends(now) {
            let Action::SendPush {
                to: target,
                mut push,
                max_bytes,
            } = action
            else {
                continue;
            };
            if target != to {
                continue;
            }
            if max_bytes > 0 {
                push.batches = leader_log
                    .iter()
                    .filter(|b| b.base >= push.start)
                    .take(3)
                    .cloned()
                    .collect();
            }
            let end = push.end();
            leader.on_push_sent(to, end);
            let mut replies = follower.on_push(push, now).unwrap();
            let mut index = 0;
            while index < replies.len() {
                match replies[index].clone() {
                    Action::Truncate { to } => {
                        truncations.push(to);
                        follower_log.retain(|b| b.base < to);
                    }
                    Action::Append { batches } => {
                        follower_log.extend(batches);
                        progressed = true;
                        let end = follower.log_end();
                        replies.extend(follower.on_local_durable(end));
                    }
                    Action::SendAck { ack, .. } => {
                        leader.on_push_ack(&ack, now).unwrap();
                    }
                    _ => {}
                }
                index += 1;
            }
        }
        if !progressed
            && follower_log.as_slice() == leader_log
            && follower.high_watermark() == leader.high_watermark()
            && round > 3
        {
            break;
        }
    }
    truncations
}

fn log_of(runs: &[(u32, u64, u64)], tag: &str) -> Vec<Batch> {
    // (epoch, base, last) per batch; bytes tagged by branch so that
    // divergent records differ.
    runs.iter()
        .map(|&(epoch, base, last)| Batch {
            base: o(base),
            last: o(last),
            epoch: e(epoch),
            bytes: Bytes::from(format!("{tag}:{base}@{epoch}")),
        })
        .collect()
}

#[test]
fn a_follower_with_an_epoch_the_leader_lacks_is_repaired_exactly() {
    // Leader: 0..10 epoch 1, then it leads epoch 3 from 10. Follower: 0..5
    // epoch 1, then 5..15 epoch 2 (a leader of epoch 2 that never reached
    // the new leader). The spec's rule would truncate to min(end of epoch 1
    // = 10, 15) = 10 and keep the follower's epoch-2 records 5..10.
    let mut leader_log = log_of(&[(1, 0, 4), (1, 5, 9)], "shared");
    leader_log.push(Batch {
        base: o(10),
        last: o(10),
        epoch: e(3),
        bytes: Bytes::from_static(b"marker"),
    });
    let mut follower_log = log_of(&[(1, 0, 4)], "shared");
    follower_log.extend(log_of(&[(2, 5, 9), (2, 10, 14)], "old"));
    let mut a = replica(A, &[(1, 0)], 10, 2);
    lead(&mut a, 3, &[A, B]);
    a.on_local_append(BatchMeta {
        base: o(10),
        last: o(10),
        epoch: e(3),
    });
    a.on_local_durable(o(11));
    let mut b = replica(B, &[(1, 0), (2, 5)], 15, 2);
    let truncations = converge(&mut a, &mut b, &leader_log, &mut follower_log);
    assert_eq!(truncations, vec![o(5)]);
    assert_eq!(follower_log, leader_log);
    assert_eq!(a.high_watermark(), o(11));
}

// ---- properties ----------------------------------------------------------

proptest! {
    /// The leader's high watermark against a model: the majority-th largest
    /// durable end, taken only when past the marker, never lowered.
    #[test]
    fn leader_high_watermark_matches_the_model(
        steps in proptest::collection::vec((0usize..3, 0u64..30), 1..60),
    ) {
        let start = 5;
        let mut a = leader(&[(1, 0)], start, 2);
        for base in (start + 1)..40 {
            a.on_local_append(BatchMeta { base: o(base), last: o(base), epoch: e(2) });
        }
        // The leader recovered its log durable up to `start`.
        let mut durable = [start, 0, 0];
        let mut model_hw = 0u64;
        for (who, value) in steps {
            let value = value + start - 2;
            if who == 0 {
                durable[0] = durable[0].max(value);
                a.on_local_durable(o(durable[0]));
            } else {
                durable[who] = durable[who].max(value);
                let from = if who == 1 { B } else { C };
                a.on_push_ack(&ok(from, 2, value), 0).unwrap();
            }
            let mut sorted = durable;
            sorted.sort_unstable_by(|x, y| y.cmp(x));
            if sorted[1] > start {
                model_hw = model_hw.max(sorted[1]);
            }
            prop_assert_eq!(a.high_watermark(), o(model_hw));
        }
    }

    /// Divergence repair against a model of two logs that share a prefix
    /// and then branch (epochs of the two branches interleave but never
    /// coincide): the follower ends with exactly the leader's log and never
    /// truncates inside the shared prefix.
    #[test]
    fn divergent_logs_converge_to_the_leaders(
        shared in proptest::collection::vec(1u64..4, 0..4),
        extra_same_epoch in 0u64..3,
        leader_runs in proptest::collection::vec(1u64..4, 0..3),
        follower_runs in proptest::collection::vec(1u64..4, 0..3),
        leader_first in any::<bool>(),
    ) {
        let mut epoch = 0u32;
        let mut shared_log = Vec::new();
        let mut end = 0u64;
        for len in shared {
            epoch += 1;
            shared_log.push((epoch, end, end + len - 1));
            end += len;
        }
        // The follower may hold more records of the last shared epoch.
        let mut follower_spec = shared_log.clone();
        let mut follower_end = end;
        if extra_same_epoch > 0 && epoch > 0 {
            follower_spec.push((epoch, end, end + extra_same_epoch - 1));
            follower_end += extra_same_epoch;
        }
        let mut leader_spec = shared_log.clone();
        let mut leader_end = end;
        // Branch epochs alternate between the two logs.
        let (mut li, mut fi) = (0, 0);
        let mut turn_leader = leader_first;
        while li < leader_runs.len() || fi < follower_runs.len() {
            epoch += 1;
            if (turn_leader && li < leader_runs.len()) || fi >= follower_runs.len() {
                let len = leader_runs[li];
                leader_spec.push((epoch, leader_end, leader_end + len - 1));
                leader_end += len;
                li += 1;
            } else {
                let len = follower_runs[fi];
                follower_spec.push((epoch, follower_end, follower_end + len - 1));
                follower_end += len;
                fi += 1;
            }
            turn_leader = !turn_leader;
        }
        let runs = |spec: &[(u32, u64, u64)]| {
            let mut runs: Vec<(u32, u64)> = Vec::new();
            for &(epoch, base, _) in spec {
                if runs.last().map(|r| r.0) != Some(epoch) {
                    runs.push((epoch, base));
                }
            }
            runs
        };
        let new_epoch = epoch + 1;
        let mut leader_log = log_of(&shared_log, "shared");
        leader_log.extend(log_of(&leader_spec[shared_log.len()..], "leader"));
        leader_log.push(Batch { base: o(leader_end), last: o(leader_end), epoch: e(new_epoch), bytes: Bytes::from_static(b"marker") });
        let mut follower_log = log_of(&shared_log, "shared");
        follower_log.extend(log_of(&follower_spec[shared_log.len()..], "follower"));
        let mut a = replica(A, &runs(&leader_spec), leader_end, epoch);
        lead(&mut a, new_epoch, &[A, B]);
        a.on_local_append(BatchMeta { base: o(leader_end), last: o(leader_end), epoch: e(new_epoch) });
        a.on_local_durable(o(leader_end + 1));
        let mut b = replica(B, &runs(&follower_spec), follower_end, epoch);
        // Where the two logs really part.
        let common = leader_log.iter().zip(&follower_log).take_while(|(x, y)| x == y).count();
        let common_end = if common == 0 { 0 } else { leader_log[common - 1].last.0 + 1 };
        let truncations = converge(&mut a, &mut b, &leader_log, &mut follower_log);
        for to in &truncations {
            prop_assert!(to.0 >= common_end, "truncated to {} inside the common prefix {}", to.0, common_end);
        }
        prop_assert_eq!(&follower_log, &leader_log);
        prop_assert_eq!(a.high_watermark(), o(leader_end + 1));
    }
}

#[test]
fn only_a_leader_with_other_replicas_has_followers() {
    let mut sole = replica(A, &[], 0, 0);
    assert!(!sole.has_followers(), "offline");
    sole.become_leader(e(1), &[A], 0).unwrap();
    assert!(!sole.has_followers(), "a sole voter pushes to nobody");
    assert!(sole.poll_sends(10_000).is_empty());
    let mut leader = replica(A, &[], 0, 0);
    leader.become_leader(e(1), &[A, B, C], 0).unwrap();
    assert!(leader.has_followers());
    let mut follower = replica(B, &[], 0, 0);
    follower.become_follower(e(1), A, 0).unwrap();
    assert!(!follower.has_followers());
}
