//! What a broken or hostile peer can send, one case each: every one was an
//! assertion (a panic of the receiving broker's shard) before issue 36, or
//! was caught only by checks in the broker's shell, and is now a typed
//! [`ProtocolError`] that leaves the replica exactly as it was.

use corelog_wire::types::Offset;

use super::tests::{A, B, acks, batch, e, leader, o, ok, push, replica};
use super::{Replica, RoleView};
use crate::error::{ProtocolError, ReplicationError};
use crate::message::{PushAck, PushResult};
use crate::meta::ReplicaMeta;

/// What a refused message must not change.
fn state(replica: &Replica) -> (RoleView, ReplicaMeta, Offset, Offset, Offset, Offset) {
    (
        replica.role(),
        replica.meta().clone(),
        replica.log_start(),
        replica.log_end(),
        replica.durable_end(),
        replica.high_watermark(),
    )
}

fn refused(error: ProtocolError) -> Result<Vec<crate::Action>, ReplicationError> {
    Err(ReplicationError::Protocol(error))
}

#[test]
fn a_reset_push_that_does_not_start_at_its_reset_point_is_refused() {
    let mut b = replica(B, &[(1, 0)], 4, 1);
    let before = state(&b);
    let mut bad = push(2, 8, Some(1), 0, vec![]);
    bad.reset_to = Some(o(6));
    assert_eq!(
        b.on_push(bad, 0),
        refused(ProtocolError::ResetNotAtStart {
            reset_to: o(6),
            start: o(8)
        })
    );
    assert_eq!(state(&b), before);
}

#[test]
fn batches_that_do_not_follow_each_other_from_the_start_are_refused() {
    let mut b = replica(B, &[(1, 0)], 4, 1);
    let before = state(&b);
    let gap = push(1, 4, Some(1), 0, vec![batch(4, 5, 1), batch(7, 7, 1)]);
    assert_eq!(
        b.on_push(gap, 0),
        refused(ProtocolError::NotContiguous {
            base: o(7),
            last: o(7),
            expected: o(6)
        })
    );
    let inverted = push(1, 4, Some(1), 0, vec![batch(4, 3, 1)]);
    assert!(matches!(
        b.on_push(inverted, 0),
        Err(ReplicationError::Protocol(
            ProtocolError::NotContiguous { .. }
        ))
    ));
    assert_eq!(state(&b), before);
}

#[test]
fn a_batch_ending_at_the_last_offset_is_refused() {
    let mut b = replica(B, &[(1, 0)], 4, 1);
    let before = state(&b);
    let bad = push(1, 4, Some(1), 0, vec![batch(4, u64::MAX, 1)]);
    assert_eq!(
        b.on_push(bad, 0),
        refused(ProtocolError::OffsetOverflow {
            base: o(4),
            last: o(u64::MAX)
        })
    );
    assert_eq!(state(&b), before);
}

#[test]
fn a_batch_of_an_epoch_above_the_push_is_refused() {
    let mut b = replica(B, &[(1, 0)], 4, 2);
    let before = state(&b);
    let bad = push(2, 4, Some(1), 0, vec![batch(4, 4, 3)]);
    assert_eq!(
        b.on_push(bad, 0),
        refused(ProtocolError::BatchEpochAbovePush {
            base: o(4),
            batch_epoch: e(3),
            push_epoch: e(2)
        })
    );
    assert_eq!(state(&b), before);
}

#[test]
fn epochs_going_back_in_a_push_are_refused() {
    let mut b = replica(B, &[(1, 0)], 4, 3);
    let before = state(&b);
    let bad = push(3, 4, Some(1), 0, vec![batch(4, 4, 2), batch(5, 5, 1)]);
    assert_eq!(
        b.on_push(bad, 0),
        refused(ProtocolError::EpochGoesBack {
            base: o(5),
            epoch: e(1),
            previous: e(2)
        })
    );
    assert_eq!(state(&b), before);
}

/// The push's own fields agree, but its first batch is of an older epoch
/// than the record before it here (a start at or below the high watermark
/// passes the consistency check whatever `prev_epoch` says). The push's
/// newer epoch is adopted first, then undone with the refusal.
#[test]
fn a_batch_older_than_the_record_before_it_is_refused_and_the_epoch_not_adopted() {
    let mut b = replica(B, &[(3, 0)], 5, 3);
    b.on_push(push(3, 5, Some(3), 5, vec![]), 0).unwrap();
    let before = state(&b);
    let bad = push(4, 5, Some(1), 5, vec![batch(5, 5, 2)]);
    assert_eq!(
        b.on_push(bad, 1),
        refused(ProtocolError::EpochGoesBack {
            base: o(5),
            epoch: e(2),
            previous: e(3)
        })
    );
    assert_eq!(state(&b), before, "the fence of epoch 4 is not kept");
    // The leader it follows is still heard.
    let next = b.on_push(push(3, 5, Some(3), 5, vec![batch(5, 6, 3)]), 2);
    assert!(next.is_ok(), "{next:?}");
    assert_eq!(b.log_end(), o(7));
}

#[test]
fn a_batch_straddling_the_log_start_is_refused() {
    // B restarts its log at 10 (a reset), then is offered 8..=11.
    let mut b = replica(B, &[], 0, 2);
    let mut reset = push(2, 10, Some(1), 10, vec![]);
    reset.reset_to = Some(o(10));
    b.on_push(reset, 0).unwrap();
    assert_eq!(b.log_start(), o(10));
    let before = state(&b);
    let bad = push(2, 8, Some(1), 10, vec![batch(8, 11, 2)]);
    assert_eq!(
        b.on_push(bad, 1),
        refused(ProtocolError::StraddlesLogStart {
            base: o(8),
            last: o(11),
            log_start: o(10)
        })
    );
    assert_eq!(state(&b), before);
}

#[test]
fn a_batch_held_here_only_in_part_is_refused() {
    // B: 0..4 epoch 1, 4..8 epoch 2; offered 3..=5 of epoch 2.
    let mut b = replica(B, &[(1, 0), (2, 4)], 8, 2);
    let before = state(&b);
    let bad = push(2, 3, Some(1), 0, vec![batch(3, 5, 2)]);
    assert_eq!(
        b.on_push(bad, 0),
        refused(ProtocolError::HeldInPart {
            base: o(3),
            last: o(5),
            epoch: e(2)
        })
    );
    assert_eq!(state(&b), before);
}

#[test]
fn a_push_that_would_truncate_the_checked_prefix_is_refused() {
    // B checked 0..6 against the leader of epoch 2 (high watermark 0).
    let mut b = replica(B, &[(1, 0)], 6, 2);
    b.on_push(push(2, 6, Some(1), 0, vec![]), 0).unwrap();
    assert_eq!(b.high_watermark(), o(0));
    let before = state(&b);
    let bad = push(2, 4, Some(1), 0, vec![batch(4, 4, 2)]);
    assert_eq!(
        b.on_push(bad, 1),
        refused(ProtocolError::TruncatesProtected {
            base: o(4),
            protected: o(6)
        })
    );
    assert_eq!(state(&b), before);
}

#[test]
fn an_acknowledgement_past_the_leaders_log_end_is_refused() {
    let mut a = leader(&[(1, 0)], 5, 2);
    let before = state(&a);
    assert_eq!(
        a.on_push_ack(&ok(B, 2, 9), 1),
        refused(ProtocolError::AckPastLeaderLogEnd {
            from: B,
            durable_end: o(9),
            log_end: o(6)
        })
    );
    assert_eq!(state(&a), before);
    // A correct acknowledgement still counts.
    assert!(a.on_push_ack(&ok(B, 2, 6), 2).is_ok());
    let status = a.follower_status(2).expect("leading");
    assert!(
        status.iter().any(|f| f.replica == B && f.acked_end == o(6)),
        "{status:?}"
    );
}

#[test]
fn an_acknowledgement_durable_past_its_own_log_end_is_refused() {
    let mut a = leader(&[(1, 0)], 5, 2);
    let before = state(&a);
    let bad = PushAck {
        result: PushResult::Ok {
            durable_end: o(6),
            log_end: o(3),
        },
        ..ok(B, 2, 6)
    };
    assert_eq!(
        a.on_push_ack(&bad, 1),
        refused(ProtocolError::AckDurablePastLogEnd {
            durable_end: o(6),
            log_end: o(3)
        })
    );
    assert_eq!(state(&a), before);
    assert_eq!(
        ok(B, 2, 6).check_against(A),
        Err(ProtocolError::AckFromElsewhere { to: A, from: B })
    );
}

/// A refused push gets no acknowledgement from the state machine: the
/// shell answers it with an error (`INVALID_REQUEST`).
#[test]
fn a_refused_push_sends_nothing() {
    let mut b = replica(B, &[(1, 0)], 4, 1);
    let bad = push(1, 4, Some(1), 0, vec![batch(5, 5, 1)]);
    assert!(b.on_push(bad, 0).is_err());
    let good = b.on_push(push(1, 4, Some(1), 0, vec![]), 1).unwrap();
    assert_eq!(
        acks(&good),
        vec![PushResult::Ok {
            durable_end: o(4),
            log_end: o(4)
        }]
    );
}
