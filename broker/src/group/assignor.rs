//! Sticky, cooperative, balanced assignment of partitions to group members,
//! as a pure function.
//!
//! - Sticky: a partition stays with its current owner while that member is
//!   still in the group, still subscribed, and not over its fair share.
//! - Balanced: every member ends within one partition of the others (among
//!   members subscribed to the same topics).
//! - Cooperative: a partition whose owner changes is *withheld* for one
//!   generation — its old owner drops it, nobody gets it — and is handed to
//!   its new owner in a follow-up rebalance, once the old owner has stopped
//!   consuming it. Partitions that do not move are never interrupted.

use std::collections::{BTreeMap, BTreeSet};

/// A topic partition.
pub type TopicPartition = (String, u32);

/// What the assignor knows about one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInput {
    /// Topics the member subscribes to.
    pub topics: BTreeSet<String>,
    /// Partitions the member owns now (the previous generation's assignment).
    pub owned: BTreeSet<TopicPartition>,
}

/// The outcome of one assignment round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Partitions per member for the new generation.
    pub members: BTreeMap<String, BTreeSet<TopicPartition>>,
    /// Partitions that move to another member and are assigned to nobody
    /// this generation; a follow-up rebalance assigns them.
    pub withheld: BTreeSet<TopicPartition>,
}

/// Assigns every partition of the subscribed topics (`partition_counts`
/// gives each topic's count) to the members.
#[must_use]
pub fn assign(
    members: &BTreeMap<String, MemberInput>,
    partition_counts: &BTreeMap<String, u32>,
) -> Assignment {
    let mut result = Assignment {
        members: members
            .keys()
            .map(|id| (id.clone(), BTreeSet::new()))
            .collect(),
        withheld: BTreeSet::new(),
    };
    if members.is_empty() {
        return result;
    }
    let all: Vec<TopicPartition> = partition_counts
        .iter()
        .filter(|(topic, _)| {
            members
                .values()
                .any(|member| member.topics.contains(*topic))
        })
        .flat_map(|(topic, count)| (0..*count).map(move |partition| (topic.clone(), partition)))
        .collect();
    // Members subscribed to each topic, and each member's fair share: the
    // partitions of all topics with the same subscriber set, spread evenly
    // over those subscribers.
    let subscribers: BTreeMap<&String, Vec<&String>> = partition_counts
        .keys()
        .map(|topic| {
            let ids = members
                .iter()
                .filter(|(_, member)| member.topics.contains(topic))
                .map(|(id, _)| id)
                .collect();
            (topic, ids)
        })
        .collect();
    let mut partitions_per_set: BTreeMap<&Vec<&String>, usize> = BTreeMap::new();
    for (topic, ids) in &subscribers {
        *partitions_per_set.entry(ids).or_default() += partition_counts[*topic] as usize;
    }
    let eligible = |partition: &TopicPartition| -> Vec<&String> {
        subscribers.get(&partition.0).cloned().unwrap_or_default()
    };
    let share = |partition: &TopicPartition| -> usize {
        let ids = &subscribers[&partition.0];
        partitions_per_set[ids].div_ceil(ids.len().max(1))
    };
    // 1. Keep current owners within their share.
    let mut unassigned = Vec::new();
    let mut previous_owner: BTreeMap<&TopicPartition, &String> = BTreeMap::new();
    for partition in &all {
        let owner = members
            .iter()
            .find(|(_, member)| member.owned.contains(partition))
            .map(|(id, _)| id);
        if let Some(owner) = owner {
            previous_owner.insert(partition, owner);
            let member = &members[owner];
            let current = result.members[owner].len();
            if member.topics.contains(&partition.0) && current < share(partition) {
                result
                    .members
                    .get_mut(owner)
                    .expect("member present")
                    .insert(partition.clone());
                continue;
            }
        }
        unassigned.push(partition.clone());
    }
    // 2. Give the rest to the least loaded eligible member; a partition
    // leaving an owner that is still present is withheld for one round.
    for partition in unassigned {
        let target = eligible(&partition)
            .into_iter()
            .min_by_key(|id| (result.members[*id].len(), (*id).clone()));
        let Some(target) = target.cloned() else {
            continue;
        };
        let moving_from_present_member = previous_owner
            .get(&partition)
            .is_some_and(|owner| **owner != target && members.contains_key(*owner));
        if moving_from_present_member {
            result.withheld.insert(partition);
        } else {
            result
                .members
                .get_mut(&target)
                .expect("member present")
                .insert(partition);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(topics: &[&str], owned: &[(&str, u32)]) -> MemberInput {
        MemberInput {
            topics: topics.iter().map(|topic| (*topic).to_owned()).collect(),
            owned: owned
                .iter()
                .map(|(topic, partition)| ((*topic).to_owned(), *partition))
                .collect(),
        }
    }

    fn counts(topics: &[(&str, u32)]) -> BTreeMap<String, u32> {
        topics
            .iter()
            .map(|(topic, count)| ((*topic).to_owned(), *count))
            .collect()
    }

    #[test]
    fn a_new_group_is_balanced() {
        let members = BTreeMap::from([
            ("a".to_owned(), member(&["t"], &[])),
            ("b".to_owned(), member(&["t"], &[])),
        ]);
        let result = assign(&members, &counts(&[("t", 5)]));
        let sizes: Vec<usize> = result.members.values().map(BTreeSet::len).collect();
        assert_eq!(sizes, vec![3, 2]);
        assert!(result.withheld.is_empty());
    }

    #[test]
    fn a_joining_member_takes_partitions_only_after_a_withheld_round() {
        let owned_by_a: Vec<(&str, u32)> = (0..4).map(|partition| ("t", partition)).collect();
        let members = BTreeMap::from([
            ("a".to_owned(), member(&["t"], &owned_by_a)),
            ("b".to_owned(), member(&["t"], &[])),
        ]);
        let first = assign(&members, &counts(&[("t", 4)]));
        assert_eq!(
            first.members["a"].len(),
            2,
            "a keeps its share and never pauses it"
        );
        assert!(
            first.members["b"].is_empty(),
            "b gets nothing a still consumes"
        );
        assert_eq!(first.withheld.len(), 2);
        // Follow-up round: a now owns only its two.
        let members = BTreeMap::from([
            (
                "a".to_owned(),
                MemberInput {
                    topics: members["a"].topics.clone(),
                    owned: first.members["a"].clone(),
                },
            ),
            ("b".to_owned(), member(&["t"], &[])),
        ]);
        let second = assign(&members, &counts(&[("t", 4)]));
        assert_eq!(second.members["a"], first.members["a"], "sticky");
        assert_eq!(second.members["b"], first.withheld);
        assert!(second.withheld.is_empty());
    }

    #[test]
    fn a_departed_members_partitions_move_at_once() {
        let members = BTreeMap::from([("b".to_owned(), member(&["t"], &[("t", 1)]))]);
        let result = assign(&members, &counts(&[("t", 2)]));
        assert_eq!(result.members["b"].len(), 2);
        assert!(result.withheld.is_empty());
    }

    proptest! {
        #[test]
        fn every_partition_is_owned_once_or_withheld_and_sticky(
            member_count in 1usize..6,
            partitions in 1u32..40,
            ownership in proptest::collection::vec(0usize..8, 0..40),
        ) {
            let ids: Vec<String> = (0..member_count).map(|index| format!("m{index}")).collect();
            let mut members: BTreeMap<String, MemberInput> = ids
                .iter()
                .map(|id| (id.clone(), member(&["t"], &[])))
                .collect();
            for (partition, owner) in ownership.iter().enumerate().take(partitions as usize) {
                if let Some(id) = ids.get(*owner) {
                    members.get_mut(id).unwrap().owned.insert(("t".to_owned(), partition as u32));
                }
            }
            let result = assign(&members, &counts(&[("t", partitions)]));
            let mut seen = BTreeSet::new();
            for owned in result.members.values() {
                for partition in owned {
                    prop_assert!(seen.insert(partition.clone()), "assigned twice");
                }
            }
            for partition in &result.withheld {
                prop_assert!(seen.insert(partition.clone()), "withheld and assigned");
            }
            prop_assert_eq!(seen.len(), partitions as usize);
            // Sticky: a member keeps what it owned, up to its share.
            let share = (partitions as usize).div_ceil(member_count);
            for (id, input) in &members {
                let kept = input.owned.intersection(&result.members[id]).count();
                prop_assert!(kept >= input.owned.len().min(share));
            }
            // Balanced once withheld partitions land.
            let sizes: Vec<usize> = result.members.values().map(BTreeSet::len).collect();
            prop_assert!(sizes.iter().max().unwrap_or(&0) <= &share);
        }
    }
}
