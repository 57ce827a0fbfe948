//! The group coordinator's persistence: [`GroupRecord`]s (defined in the
//! wire crate, where they are fuzzed) appended to its `__groups` partition,
//! and replayed into [`Group`]s when the coordinator starts.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Bytes, BytesMut};
use corelog_wire::batch::{BatchBuilder, Compression, NewRecord};
use corelog_wire::message::TopicPartitions;
use corelog_wire::message::group_records::{GroupRecord, StoredMember};
use corelog_wire::types::TimestampMs;

use super::assignor::TopicPartition;
use super::state::{Committed, Group, Member};

/// A batch holding `records`, keyed for compaction.
///
/// # Panics
/// If `records` is empty (callers append at least one).
#[must_use]
pub fn batch(records: &[GroupRecord], now: TimestampMs) -> BytesMut {
    assert!(!records.is_empty(), "a group batch needs a record");
    let mut builder = BatchBuilder::new(Compression::None);
    for record in records {
        let pushed = builder.push(&NewRecord {
            key: Some(Bytes::from(record.key())),
            value: Some(Bytes::from(record.encode())),
            timestamp: now,
            ..NewRecord::default()
        });
        assert!(pushed.is_ok(), "group records have no reserved headers");
    }
    match builder.build() {
        Ok(bytes) => BytesMut::from(&bytes[..]),
        Err(error) => unreachable!("a non-empty batch builds: {error}"),
    }
}

/// The membership record of `group`'s current generation.
#[must_use]
pub fn membership(group: &Group) -> GroupRecord {
    GroupRecord::Membership {
        group: group.name.clone(),
        generation: group.generation,
        members: group
            .members
            .values()
            .map(|member| StoredMember {
                member_id: member.id.clone(),
                instance_id: member.instance_id.clone(),
                client_id: member.client_id.clone(),
                client_host: member.client_host.clone(),
                topics: member.topics.iter().cloned().collect(),
                session_timeout_ms: member.session_timeout_ms,
                rebalance_timeout_ms: member.rebalance_timeout_ms,
                assignment: to_wire(group.assignment.get(&member.id)),
            })
            .collect(),
    }
}

/// An assignment as wire `TopicPartitions`, topics in order.
#[must_use]
pub fn to_wire(assignment: Option<&BTreeSet<TopicPartition>>) -> Vec<TopicPartitions> {
    let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (topic, partition) in assignment.into_iter().flatten() {
        by_topic.entry(topic.as_str()).or_default().push(*partition);
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| TopicPartitions {
            topic: topic.to_owned(),
            partitions,
        })
        .collect()
}

/// The offset records of a group's state, deleted topics' first (so that
/// a replay meets them in the order they were committed), for a snapshot.
#[must_use]
pub fn offsets(group: &Group) -> Vec<GroupRecord> {
    let deleted = group
        .deleted_topic_offsets
        .iter()
        .map(|((topic, partition, _), committed)| (topic, *partition, committed));
    let live = group
        .offsets
        .iter()
        .map(|((topic, partition), committed)| (topic, *partition, committed));
    deleted
        .chain(live)
        .map(|(topic, partition, committed)| GroupRecord::Offset {
            group: group.name.clone(),
            topic: topic.clone(),
            topic_id: committed.topic_id,
            partition,
            next_offset: committed.next_offset,
            metadata: committed.metadata.clone(),
            committed_at_ms: committed.committed_at.0,
            generation: group.generation,
        })
        .collect()
}

/// Applies one replayed record to the groups it describes.
pub fn replay(groups: &mut BTreeMap<String, Group>, record: GroupRecord, now: TimestampMs) {
    match record {
        GroupRecord::Offset {
            group,
            topic,
            topic_id,
            partition,
            next_offset,
            metadata,
            committed_at_ms,
            ..
        } => {
            let entry = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group));
            entry.record_offset(
                (topic, partition),
                Committed {
                    next_offset,
                    metadata,
                    committed_at: TimestampMs(committed_at_ms),
                    topic_id,
                },
            );
        }
        GroupRecord::OffsetTombstone {
            group,
            topic,
            topic_id,
            partition,
        } => {
            if let Some(entry) = groups.get_mut(&group) {
                entry.forget_offset(&(topic, partition), topic_id);
            }
        }
        GroupRecord::Membership {
            group,
            generation,
            members,
        } => {
            let (offsets, deleted_topic_offsets) = groups
                .remove(&group)
                .map(|old| (old.offsets, old.deleted_topic_offsets))
                .unwrap_or_default();
            let assignment = members
                .iter()
                .map(|member| {
                    let owned = member
                        .assignment
                        .iter()
                        .flat_map(|entry| {
                            entry
                                .partitions
                                .iter()
                                .map(|partition| (entry.topic.clone(), *partition))
                        })
                        .collect();
                    (member.member_id.clone(), owned)
                })
                .collect();
            let members = members
                .into_iter()
                .map(|stored| Member {
                    id: stored.member_id,
                    instance_id: stored.instance_id,
                    client_id: stored.client_id,
                    client_host: stored.client_host,
                    topics: stored.topics.into_iter().collect(),
                    session_timeout_ms: stored.session_timeout_ms,
                    rebalance_timeout_ms: stored.rebalance_timeout_ms,
                    last_seen: now,
                })
                .collect();
            let mut restored = Group::restored(&group, generation, members, assignment, now);
            restored.offsets = offsets;
            restored.deleted_topic_offsets = deleted_topic_offsets;
            groups.insert(group, restored);
        }
        GroupRecord::GroupDeleted { group } => {
            groups.remove(&group);
        }
    }
}
