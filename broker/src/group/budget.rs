//! The per-principal group limit (issue 35, item 2), enforced where a
//! group is created: by its coordinator.
//!
//! A principal's limit ([`corelog_controller::limits::ObjectLimits`]) is
//! cluster-wide; each `__groups` partition's coordinator admits an equal
//! share of it (the limit divided by the partition count, rounded up), so
//! the groups a principal holds in the cluster stay within the limit
//! rounded up to a multiple of the partition count, without coordinators
//! asking each other. A principal whose group names crowd one coordinator
//! meets its share there a little before its total reaches the limit.
//! Which principal created a group is known from this coordinator's start:
//! groups replayed from `__groups` after a restart or a move count for
//! nobody.

use corelog_controller::limits::ObjectLimits;
use corelog_wire::error::ErrorCode;

use crate::metadata::MetadataSnapshot;
use crate::partition::PartitionError;

pub use corelog_wire::message::group_records::GROUPS_TOPIC;

/// What one principal may create on one coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBudget {
    /// The principal.
    pub principal: String,
    /// Its cluster-wide limit.
    pub limit: u32,
    /// The share of it one coordinator admits.
    pub share: u32,
}

impl GroupBudget {
    /// The budget of `principal` under `snapshot`'s quotas.
    #[must_use]
    pub fn of(snapshot: &MetadataSnapshot, principal: &str) -> GroupBudget {
        let limit = ObjectLimits::of(snapshot.cluster.state.quotas(), principal).groups;
        let coordinators = snapshot
            .topics
            .get(GROUPS_TOPIC)
            .map_or(1, |view| view.record.partitions.max(1));
        GroupBudget {
            principal: principal.to_owned(),
            limit,
            share: limit.div_ceil(coordinators),
        }
    }

    /// The refusal of a new group `group` when the principal created
    /// `used` groups on its coordinator already.
    #[must_use]
    pub fn refusal(&self, group: &str, used: u32) -> Option<PartitionError> {
        (used >= self.share).then(|| {
            PartitionError::new(
                ErrorCode::GroupLimitReached,
                format!(
                    "principal {:?} may own {} groups, {} on the coordinator of group {group:?}, and owns {used} there; delete groups it no longer uses (`corelog group delete`), or ask an administrator to raise the limit (`corelog quota set user:{} --groups N`)",
                    self.principal, self.limit, self.share, self.principal
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_admits_its_share() {
        let budget = GroupBudget {
            principal: "alice".to_owned(),
            limit: 10,
            share: 10_u32.div_ceil(8),
        };
        assert_eq!(budget.share, 2);
        assert!(budget.refusal("g", 1).is_none());
        let refusal = budget.refusal("g", 2).unwrap();
        assert_eq!(refusal.code, ErrorCode::GroupLimitReached);
        assert!(
            refusal.message.contains("may own 10 groups, 2 on"),
            "{}",
            refusal.message
        );
    }
}
