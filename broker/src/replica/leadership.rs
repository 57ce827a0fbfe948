//! Which role change published metadata asks of a replica: the one rule
//! the broker's shards and the simulator both follow.

use corelog_replication::{ReplicaId, ReplicationError, RoleView};
use corelog_wire::types::LeaderEpoch;

use crate::metadata::ReplicationView;
use crate::replica::ReplicaError;

/// A role the metadata gives a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoleChange {
    /// Lead `epoch` over `replicas` (this replica included).
    Lead {
        /// The epoch.
        epoch: LeaderEpoch,
        /// The replica set.
        replicas: Vec<ReplicaId>,
    },
    /// Follow `leader` in `epoch`.
    Follow {
        /// The epoch.
        epoch: LeaderEpoch,
        /// The leader.
        leader: ReplicaId,
    },
}

/// The change that `published` asks of the replica of broker `me` whose
/// role is `current`: `None` when it already holds that role, or when the
/// partition is leaderless (a replica keeps what it had until an election
/// publishes someone; a query already made it stop leading or following).
#[must_use]
pub fn role_change(current: RoleView, published: &ReplicationView, me: u32) -> Option<RoleChange> {
    let leader = published.leader?;
    let epoch = published.epoch;
    let already = match current {
        RoleView::Leader { epoch: led, .. } => led == epoch && leader == me,
        RoleView::Follower {
            epoch: followed,
            leader: known,
        } => followed == epoch && known.0 == leader,
        RoleView::Offline => false,
    };
    if already {
        return None;
    }
    Some(if leader == me {
        RoleChange::Lead {
            epoch,
            replicas: published.replicas.iter().copied().map(ReplicaId).collect(),
        }
    } else {
        RoleChange::Follow {
            epoch,
            leader: ReplicaId(leader),
        }
    })
}

/// The epoch to resign when the replica refused `change` with `error`: a
/// published leadership it can never take, because it led that epoch
/// before (it restarted or stepped down since) or promised a newer one to
/// an election round. Until the controller elects again the partition has
/// no working leader, and a controller that lost the round (its leadership
/// moved while the round was in flight) would never elect again on its
/// own: its leader looks alive (sim seed 1433). Resigning makes the
/// partition leaderless, so that an election publishes a new epoch.
#[must_use]
pub fn resignation(change: &RoleChange, error: &ReplicaError) -> Option<LeaderEpoch> {
    let RoleChange::Lead { epoch, .. } = change else {
        return None;
    };
    match error {
        ReplicaError::Refused(
            ReplicationError::AlreadyLed { .. } | ReplicationError::Fenced { .. },
        ) => Some(*epoch),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(leader: Option<u32>, epoch: u32) -> ReplicationView {
        ReplicationView {
            replicas: vec![1, 2, 3],
            leader,
            epoch: LeaderEpoch(epoch),
            learners: Vec::new(),
            learner_throttle_bytes_per_s: 0,
            local: true,
        }
    }

    #[test]
    fn a_replica_takes_the_published_role_once() {
        let lead = role_change(RoleView::Offline, &published(Some(1), 4), 1);
        assert_eq!(
            lead,
            Some(RoleChange::Lead {
                epoch: LeaderEpoch(4),
                replicas: vec![ReplicaId(1), ReplicaId(2), ReplicaId(3)],
            })
        );
        let leading = RoleView::Leader {
            epoch: LeaderEpoch(4),
            accepting_writes: true,
        };
        assert_eq!(role_change(leading, &published(Some(1), 4), 1), None);
        assert_eq!(
            role_change(leading, &published(Some(2), 5), 1),
            Some(RoleChange::Follow {
                epoch: LeaderEpoch(5),
                leader: ReplicaId(2)
            })
        );
        let following = RoleView::Follower {
            epoch: LeaderEpoch(5),
            leader: ReplicaId(2),
        };
        assert_eq!(role_change(following, &published(Some(2), 5), 1), None);
        assert_eq!(role_change(following, &published(None, 6), 1), None);
    }

    #[test]
    fn a_leadership_that_can_never_be_taken_is_resigned() {
        let lead = RoleChange::Lead {
            epoch: LeaderEpoch(3),
            replicas: vec![ReplicaId(1), ReplicaId(2), ReplicaId(3)],
        };
        let follow = RoleChange::Follow {
            epoch: LeaderEpoch(3),
            leader: ReplicaId(2),
        };
        let already_led = ReplicaError::Refused(ReplicationError::AlreadyLed {
            epoch: LeaderEpoch(3),
        });
        let fenced = ReplicaError::Refused(ReplicationError::Fenced {
            epoch: LeaderEpoch(3),
            fenced_epoch: LeaderEpoch(4),
        });
        assert_eq!(resignation(&lead, &already_led), Some(LeaderEpoch(3)));
        assert_eq!(resignation(&lead, &fenced), Some(LeaderEpoch(3)));
        // A follower has nothing to resign; other refusals are not about
        // the epoch.
        assert_eq!(resignation(&follow, &fenced), None);
        let not_in_set = ReplicaError::Refused(ReplicationError::NotInReplicaSet {
            replica: ReplicaId(1),
        });
        assert_eq!(resignation(&lead, &not_in_set), None);
    }
}
