//! Which role change published metadata asks of a replica: the one rule
//! the broker's shards and the simulator both follow.

use corelog_replication::{ReplicaId, RoleView};
use corelog_wire::types::LeaderEpoch;

use crate::metadata::ReplicationView;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn published(leader: Option<u32>, epoch: u32) -> ReplicationView {
        ReplicationView {
            replicas: vec![1, 2, 3],
            leader,
            epoch: LeaderEpoch(epoch),
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
}
