//! Which topic a committed offset belongs to (issue 35, item 17).
//!
//! An offset is committed on a topic, not on a name: a topic deleted and
//! created again under its name must start every group afresh, or a group
//! silently skips the new topic's first records. So an offset carries the
//! id of the topic it was committed on (ids are never reused), and a
//! group's offsets of a topic that no longer exists are set apart as
//! *deleted-topic offsets*: never served to a consumer, shown by
//! `group describe` as a deleted topic's, removed by `group delete-offsets`
//! or with the group.
//!
//! Offsets written before ids existed (`__groups` version 1 records) carry
//! none. Such an offset belongs to the live topic of its name if it was
//! committed at or after that topic's creation, and otherwise to a deleted
//! predecessor: commits follow the creation of the topic they are made on,
//! so the rule is right except within the clock skew between the
//! controller that stamped the creation and the coordinator that stamped
//! the commit. The rule needs no rewrite of old records and gives the same
//! answer on every replay (a topic's creation time never changes), which a
//! rule such as "the topic that exists by that name at replay" would not:
//! it would hand the old offsets to a topic created after an upgrade.
//!
//! Setting apart is pure and derived: replaying `__groups` and applying the
//! metadata gives the same split on every coordinator, so it writes no
//! record of its own.

use std::collections::BTreeMap;

use super::assignor::TopicPartition;
use super::state::{Committed, Group};

/// What identifies a live topic beyond its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicIdentity {
    /// Never reused.
    pub id: u64,
    /// When the controller created it (ms since the Unix epoch).
    pub created_at_ms: i64,
}

/// A deleted topic's offset: topic name, partition, and the deleted
/// topic's id (`None` for an offset written before offsets carried ids).
/// Ordered so that a name's offsets list oldest topic first.
pub type DeletedTopicPartition = (String, u32, Option<u64>);

impl Committed {
    /// Whether this offset of `topic` belongs to the live topic `live`
    /// (see the [module docs](self) for offsets without a topic id).
    #[must_use]
    pub fn belongs_to(&self, live: Option<TopicIdentity>) -> bool {
        match (self.topic_id, live) {
            (_, None) => false,
            (Some(id), Some(live)) => id == live.id,
            (None, Some(live)) => self.committed_at.0 >= live.created_at_ms,
        }
    }
}

impl Group {
    /// Applies a committed (or replayed) offset. An offset of another
    /// topic of the same name already held for the partition is set apart
    /// as a deleted topic's: the higher topic id is the newer topic (ids
    /// grow), and one with an id is newer than one without (version 2
    /// records follow version 1 records). An offset without an id set
    /// apart this way may still be the live topic's older position:
    /// [`Group::set_apart_deleted_topic_offsets`] decides.
    pub fn record_offset(&mut self, key: TopicPartition, committed: Committed) {
        let held = self.offsets.get(&key).map(|held| held.topic_id);
        let displaced = match (held, committed.topic_id) {
            (Some(Some(held_id)), new_id) if new_id.is_none_or(|new_id| new_id < held_id) => {
                Some(committed)
            }
            (Some(held_id), Some(new_id)) if held_id != Some(new_id) => {
                self.offsets.insert(key.clone(), committed)
            }
            _ => {
                self.offsets.insert(key.clone(), committed);
                None
            }
        };
        if let Some(displaced) = displaced {
            let (topic, partition) = key;
            let deleted_key = (topic, partition, displaced.topic_id);
            self.deleted_topic_offsets.insert(deleted_key, displaced);
        }
    }

    /// Applies a tombstone: the offset of `(topic, partition)` of the topic
    /// `topic_id` is gone (a tombstone without an id removes the offsets
    /// without one, and the live one it may stand for).
    pub fn forget_offset(&mut self, key: &TopicPartition, topic_id: Option<u64>) {
        let held = self.offsets.get(key).map(|committed| committed.topic_id);
        if held.is_some_and(|held| held == topic_id || topic_id.is_none()) {
            self.offsets.remove(key);
        }
        self.deleted_topic_offsets
            .remove(&(key.0.clone(), key.1, topic_id));
    }

    /// Sets apart the offsets that no longer belong to the live topic of
    /// their name (`topic` looks it up), and gives the offsets without an
    /// id that do belong the live topic's id, so that they are written
    /// with it the next time the coordinator writes its state.
    pub fn set_apart_deleted_topic_offsets(
        &mut self,
        topic: &dyn Fn(&str) -> Option<TopicIdentity>,
    ) {
        // An offset without an id set apart by `record_offset` that was
        // committed on the live topic is that topic's older position: gone
        // if a newer one is held, else the live position.
        let stale: Vec<DeletedTopicPartition> = self
            .deleted_topic_offsets
            .iter()
            .filter(|((name, _, topic_id), committed)| {
                topic_id.is_none() && committed.belongs_to(topic(name))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some(committed) = self.deleted_topic_offsets.remove(&key) {
                let (name, partition, _) = key;
                self.offsets.entry((name, partition)).or_insert(committed);
            }
        }
        let mut set_apart = Vec::new();
        for ((name, partition), committed) in &mut self.offsets {
            let live = topic(name);
            if committed.belongs_to(live) {
                if let Some(live) = live {
                    committed.topic_id = Some(live.id);
                }
            } else {
                set_apart.push((name.clone(), *partition));
            }
        }
        for key in set_apart {
            if let Some(committed) = self.offsets.remove(&key) {
                let (topic, partition) = key;
                let deleted_key = (topic, partition, committed.topic_id);
                self.deleted_topic_offsets.insert(deleted_key, committed);
            }
        }
    }

    /// The deleted topics' offsets of `topic`, restricted to `partitions`
    /// when given.
    #[must_use]
    pub fn deleted_topic_offsets_of(
        &self,
        topic: &str,
        partitions: Option<&[u32]>,
    ) -> BTreeMap<DeletedTopicPartition, Committed> {
        self.deleted_topic_offsets
            .iter()
            .filter(|((name, partition, _), _)| {
                name == topic && partitions.is_none_or(|wanted| wanted.contains(partition))
            })
            .map(|(key, committed)| (key.clone(), committed.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use corelog_wire::types::TimestampMs;

    use super::*;

    fn committed(next_offset: u64, topic_id: Option<u64>, at: i64) -> Committed {
        Committed {
            next_offset,
            metadata: None,
            committed_at: TimestampMs(at),
            topic_id,
        }
    }

    fn key() -> TopicPartition {
        ("t".to_owned(), 0)
    }

    fn live(id: u64, created_at_ms: i64) -> impl Fn(&str) -> Option<TopicIdentity> {
        move |name| (name == "t").then_some(TopicIdentity { id, created_at_ms })
    }

    #[test]
    fn a_recreated_topics_offset_sets_the_old_topics_apart_in_either_order() {
        let mut group = Group::new("g");
        group.record_offset(key(), committed(2, Some(1), 10));
        group.record_offset(key(), committed(3, Some(4), 20));
        assert_eq!(group.offsets[&key()].next_offset, 3);
        assert_eq!(
            group.deleted_topic_offsets[&("t".to_owned(), 0, Some(1))].next_offset,
            2
        );
        // A compaction may write them the other way round: same result.
        let mut replayed = Group::new("g");
        replayed.record_offset(key(), committed(3, Some(4), 20));
        replayed.record_offset(key(), committed(2, Some(1), 10));
        assert_eq!(replayed.offsets, group.offsets);
        assert_eq!(replayed.deleted_topic_offsets, group.deleted_topic_offsets);
    }

    #[test]
    fn an_offset_of_a_deleted_topic_is_set_apart_and_never_served() {
        let mut group = Group::new("g");
        group.record_offset(key(), committed(2, Some(1), 10));
        // t was deleted and created again as topic 4: nobody committed yet.
        group.set_apart_deleted_topic_offsets(&live(4, 15));
        assert!(group.offsets.is_empty());
        assert_eq!(group.deleted_topic_offsets_of("t", None).len(), 1);
        assert!(group.deleted_topic_offsets_of("t", Some(&[1])).is_empty());
        // And with no topic of the name at all.
        let mut gone = Group::new("g");
        gone.record_offset(key(), committed(2, Some(1), 10));
        gone.set_apart_deleted_topic_offsets(&|_| None);
        assert!(gone.offsets.is_empty());
    }

    /// A version 1 offset of a predecessor, then a version 2 one of the
    /// topic of the name now: both kept, whichever way a snapshot wrote
    /// them.
    #[test]
    fn an_offset_without_a_topic_id_is_not_lost_to_a_newer_topics() {
        for order in [[0, 1], [1, 0]] {
            let offsets = [committed(2, None, 10), committed(3, Some(4), 20)];
            let mut group = Group::new("g");
            for index in order {
                group.record_offset(key(), offsets[index].clone());
            }
            group.set_apart_deleted_topic_offsets(&live(4, 15));
            assert_eq!(group.offsets[&key()].next_offset, 3);
            assert_eq!(
                group.deleted_topic_offsets[&("t".to_owned(), 0, None)].next_offset,
                2
            );
        }
        // The same topic's version 1 position, then its version 2 one:
        // only the newer stays.
        let mut group = Group::new("g");
        group.record_offset(key(), committed(2, None, 16));
        group.record_offset(key(), committed(3, Some(4), 20));
        group.set_apart_deleted_topic_offsets(&live(4, 15));
        assert_eq!(group.offsets[&key()].next_offset, 3);
        assert!(group.deleted_topic_offsets.is_empty());
    }

    /// Offsets of `__groups` version 1 have no topic id: committed after
    /// the live topic's creation they are its, before it a predecessor's.
    #[test]
    fn an_offset_without_a_topic_id_belongs_to_the_topic_it_was_committed_after() {
        let mut current = Group::new("g");
        current.record_offset(key(), committed(5, None, 20));
        current.set_apart_deleted_topic_offsets(&live(4, 15));
        assert_eq!(current.offsets[&key()].topic_id, Some(4), "pinned to t");
        let mut stale = Group::new("g");
        stale.record_offset(key(), committed(5, None, 10));
        stale.set_apart_deleted_topic_offsets(&live(4, 15));
        assert!(stale.offsets.is_empty());
        assert!(
            stale
                .deleted_topic_offsets
                .contains_key(&("t".to_owned(), 0, None))
        );
    }

    #[test]
    fn a_tombstone_removes_the_offset_of_its_topic_only() {
        let mut group = Group::new("g");
        group.record_offset(key(), committed(2, Some(1), 10));
        group.record_offset(key(), committed(3, Some(4), 20));
        group.forget_offset(&key(), Some(1));
        assert!(group.deleted_topic_offsets.is_empty());
        assert_eq!(group.offsets[&key()].next_offset, 3);
        group.forget_offset(&key(), Some(1));
        assert_eq!(group.offsets[&key()].next_offset, 3);
        group.forget_offset(&key(), Some(4));
        assert!(group.offsets.is_empty());
    }
}
