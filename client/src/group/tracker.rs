//! The offset tracker: which offset a group may commit when records are
//! processed in parallel and complete out of order.
//!
//! A group's committed offset says "everything below this is done" (seed
//! §12 step 4). With parallel work that is only true of the *completed
//! prefix*: after records 117, 118 and 119 are handed out and 117 and 119
//! complete, the committable next offset is 118 — never 120, because a
//! crash would then skip 118. Once 118 completes it becomes 120.
//!
//! # Bound (C9)
//!
//! Per partition the tracker keeps one 16-byte entry for every record handed
//! out and not yet inside the completed prefix: the *window*. A slow record
//! at the head holds the window open behind it, so the window is bounded by
//! `window_records` per partition ([`OffsetTracker::new`]). At the bound
//! [`OffsetTracker::track`] refuses more ([`TrackError::WindowFull`]) and
//! the group consumer stops fetching that partition until the head
//! completes; records it already fetched beyond the window are not handed
//! out but fetched again later. Memory is therefore at most
//! `16 × window_records` bytes per owned partition, whatever the
//! application does.
//!
//! The tracker is a plain data structure with no I/O and no clock; the group
//! consumer keeps it behind a lock shared with its membership task, which
//! commits the completed prefix before a rebalance.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use corelog_wire::types::Offset;
use serde::Serialize;

/// A partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition index.
    pub partition: u32,
}

impl TopicPartition {
    /// A topic partition.
    #[must_use]
    pub fn new(topic: impl Into<Arc<str>>, partition: u32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl Serialize for TopicPartition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut fields = serializer.serialize_struct("TopicPartition", 2)?;
        fields.serialize_field("topic", &*self.topic)?;
        fields.serialize_field("partition", &self.partition)?;
        fields.end()
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Records per partition the tracker holds by default: 16 bytes each, so
/// 160 KiB per partition at most.
pub const DEFAULT_WINDOW_RECORDS: usize = 10_000;

/// Why a record could not be tracked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrackError {
    /// The partition is not assigned (or was revoked).
    #[error("{0} is not assigned to this member")]
    NotAssigned(TopicPartition),
    /// The window is full: complete the oldest outstanding record first.
    #[error("{partition} has {window} records outstanding: complete the oldest first")]
    WindowFull {
        /// The partition.
        partition: TopicPartition,
        /// The window size.
        window: usize,
    },
    /// Offsets must be handed out in increasing order.
    #[error("{partition}: offset {offset} handed out after offset {end} was reached")]
    OutOfOrder {
        /// The partition.
        partition: TopicPartition,
        /// The offset given.
        offset: u64,
        /// One past the last offset handed out.
        end: u64,
    },
}

/// One partition's progress.
#[derive(Clone, Debug, Default)]
struct Progress {
    /// Records handed out and not yet inside the completed prefix, in
    /// offset order, each with whether it completed. The head is never
    /// complete (completed heads are popped at once).
    outstanding: VecDeque<(u64, bool)>,
    /// One past the last offset handed out or skipped; `None` until the
    /// start is known and nothing was handed out.
    end: Option<u64>,
    /// The last next-offset the coordinator acknowledged for this member.
    committed: Option<u64>,
}

impl Progress {
    fn committable(&self) -> Option<u64> {
        match self.outstanding.front() {
            Some(&(offset, done)) => {
                debug_assert!(!done, "a completed head is always popped");
                Some(offset)
            }
            None => self.end,
        }
    }

    fn pop_completed_head(&mut self) {
        while self.outstanding.front().is_some_and(|&(_, done)| done) {
            self.outstanding.pop_front();
        }
    }
}

/// Commit-safe progress of every owned partition; see the module docs.
#[derive(Clone, Debug)]
pub struct OffsetTracker {
    window_records: usize,
    partitions: BTreeMap<TopicPartition, Progress>,
}

impl Default for OffsetTracker {
    fn default() -> OffsetTracker {
        OffsetTracker::new(DEFAULT_WINDOW_RECORDS)
    }
}

impl OffsetTracker {
    /// A tracker holding at most `window_records` outstanding records per
    /// partition (at least 1).
    #[must_use]
    pub fn new(window_records: usize) -> OffsetTracker {
        OffsetTracker {
            window_records: window_records.max(1),
            partitions: BTreeMap::new(),
        }
    }

    /// The window size per partition.
    #[must_use]
    pub fn window_records(&self) -> usize {
        self.window_records
    }

    /// Starts tracking a partition whose next record is `start` (its
    /// committed offset, when the group has one). Assigning a partition
    /// again starts it afresh.
    pub fn assign(&mut self, partition: TopicPartition, start: Option<Offset>) {
        let start = start.map(|offset| offset.0);
        self.partitions.insert(
            partition,
            Progress {
                outstanding: VecDeque::new(),
                end: start,
                committed: start,
            },
        );
    }

    /// Stops tracking a partition: later completions for it are ignored.
    pub fn revoke(&mut self, partition: &TopicPartition) {
        self.partitions.remove(partition);
    }

    /// Stops tracking every partition.
    pub fn revoke_all(&mut self) {
        self.partitions.clear();
    }

    /// Stops tracking every partition not in `keep`.
    pub fn retain(&mut self, keep: impl Fn(&TopicPartition) -> bool) {
        self.partitions.retain(|partition, _| keep(partition));
    }

    /// Whether the partition is tracked.
    #[must_use]
    pub fn is_assigned(&self, partition: &TopicPartition) -> bool {
        self.partitions.contains_key(partition)
    }

    /// The tracked partitions.
    pub fn partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions.keys()
    }

    /// How many more records of the partition may be handed out now; 0 for
    /// a partition that is not tracked.
    #[must_use]
    pub fn capacity(&self, partition: &TopicPartition) -> usize {
        self.partitions.get(partition).map_or(0, |progress| {
            self.window_records
                .saturating_sub(progress.outstanding.len())
        })
    }

    /// Records handed out and not yet inside the completed prefix.
    #[must_use]
    pub fn outstanding(&self, partition: &TopicPartition) -> usize {
        self.partitions
            .get(partition)
            .map_or(0, |progress| progress.outstanding.len())
    }

    /// Records that a record at `offset` was handed out for processing.
    ///
    /// # Errors
    /// [`TrackError::NotAssigned`], [`TrackError::WindowFull`], or
    /// [`TrackError::OutOfOrder`] for an offset below one already handed
    /// out (offsets of one partition are handed out in increasing order).
    pub fn track(&mut self, partition: &TopicPartition, offset: Offset) -> Result<(), TrackError> {
        let window = self.window_records;
        let progress = self
            .partitions
            .get_mut(partition)
            .ok_or_else(|| TrackError::NotAssigned(partition.clone()))?;
        if let Some(end) = progress.end
            && offset.0 < end
        {
            return Err(TrackError::OutOfOrder {
                partition: partition.clone(),
                offset: offset.0,
                end,
            });
        }
        if progress.outstanding.len() >= window {
            return Err(TrackError::WindowFull {
                partition: partition.clone(),
                window,
            });
        }
        progress.outstanding.push_back((offset.0, false));
        progress.end = Some(offset.0 + 1);
        Ok(())
    }

    /// Records that the record at `offset` is done. Returns whether it was
    /// outstanding: a completion for a revoked partition, an offset never
    /// handed out or one already completed changes nothing.
    pub fn complete(&mut self, partition: &TopicPartition, offset: Offset) -> bool {
        let Some(progress) = self.partitions.get_mut(partition) else {
            return false;
        };
        let Ok(index) = progress
            .outstanding
            .binary_search_by_key(&offset.0, |&(offset, _)| offset)
        else {
            return false;
        };
        let entry = &mut progress.outstanding[index];
        if entry.1 {
            return false;
        }
        entry.1 = true;
        progress.pop_completed_head();
        true
    }

    /// Says that no record below `offset` is left to hand out (the fetch
    /// position moved past offsets that hold no record, or a gap was
    /// skipped by policy), so that with nothing outstanding the committable
    /// offset reaches it. Never moves backwards.
    pub fn skip_to(&mut self, partition: &TopicPartition, offset: Offset) {
        if let Some(progress) = self.partitions.get_mut(partition) {
            progress.end = Some(progress.end.map_or(offset.0, |end| end.max(offset.0)));
        }
    }

    /// The offset the group may commit for the partition: the first
    /// outstanding record, or one past the last record handed out when all
    /// of them completed. `None` before anything is known.
    #[must_use]
    pub fn committable(&self, partition: &TopicPartition) -> Option<Offset> {
        self.partitions
            .get(partition)
            .and_then(Progress::committable)
            .map(Offset)
    }

    /// Partitions whose committable offset is ahead of the last
    /// acknowledged commit, with that offset.
    #[must_use]
    pub fn to_commit(&self) -> Vec<(TopicPartition, Offset)> {
        self.partitions
            .iter()
            .filter_map(|(partition, progress)| {
                let committable = progress.committable()?;
                (progress
                    .committed
                    .is_none_or(|committed| committable > committed))
                .then(|| (partition.clone(), Offset(committable)))
            })
            .collect()
    }

    /// Records the coordinator's acknowledgement of a commit.
    pub fn committed(&mut self, partition: &TopicPartition, offset: Offset) {
        if let Some(progress) = self.partitions.get_mut(partition) {
            progress.committed = Some(progress.committed.map_or(offset.0, |c| c.max(offset.0)));
        }
    }

    /// The last acknowledged commit of the partition.
    #[must_use]
    pub fn last_committed(&self, partition: &TopicPartition) -> Option<Offset> {
        self.partitions
            .get(partition)
            .and_then(|progress| progress.committed)
            .map(Offset)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn p0() -> TopicPartition {
        TopicPartition::new("orders", 0)
    }

    #[test]
    fn the_seed_example_commits_only_the_completed_prefix() {
        let mut tracker = OffsetTracker::default();
        tracker.assign(p0(), Some(Offset(117)));
        for offset in [117, 118, 119] {
            tracker.track(&p0(), Offset(offset)).unwrap();
        }
        assert_eq!(tracker.committable(&p0()), Some(Offset(117)));
        assert!(tracker.complete(&p0(), Offset(117)));
        assert!(tracker.complete(&p0(), Offset(119)));
        assert_eq!(tracker.committable(&p0()), Some(Offset(118)));
        assert_eq!(tracker.to_commit(), vec![(p0(), Offset(118))]);
        assert!(tracker.complete(&p0(), Offset(118)));
        assert_eq!(tracker.committable(&p0()), Some(Offset(120)));
    }

    #[test]
    fn committed_offsets_are_not_committed_again() {
        let mut tracker = OffsetTracker::default();
        tracker.assign(p0(), Some(Offset(5)));
        assert!(tracker.to_commit().is_empty(), "nothing new at the start");
        tracker.track(&p0(), Offset(5)).unwrap();
        tracker.complete(&p0(), Offset(5));
        assert_eq!(tracker.to_commit(), vec![(p0(), Offset(6))]);
        tracker.committed(&p0(), Offset(6));
        assert!(tracker.to_commit().is_empty());
        assert_eq!(tracker.last_committed(&p0()), Some(Offset(6)));
    }

    #[test]
    fn a_full_window_refuses_more_until_the_head_completes() {
        let mut tracker = OffsetTracker::new(3);
        tracker.assign(p0(), None);
        for offset in 0..3 {
            tracker.track(&p0(), Offset(offset)).unwrap();
        }
        tracker.complete(&p0(), Offset(1));
        tracker.complete(&p0(), Offset(2));
        assert_eq!(tracker.capacity(&p0()), 0, "the slow head holds the window");
        assert!(matches!(
            tracker.track(&p0(), Offset(3)),
            Err(TrackError::WindowFull { window: 3, .. })
        ));
        tracker.complete(&p0(), Offset(0));
        assert_eq!(tracker.capacity(&p0()), 3);
        tracker.track(&p0(), Offset(3)).unwrap();
    }

    #[test]
    fn revoked_partitions_ignore_completions_and_offsets_go_forward_only() {
        let mut tracker = OffsetTracker::default();
        tracker.assign(p0(), None);
        tracker.track(&p0(), Offset(10)).unwrap();
        assert!(matches!(
            tracker.track(&p0(), Offset(10)),
            Err(TrackError::OutOfOrder { .. })
        ));
        assert!(!tracker.complete(&p0(), Offset(11)), "never handed out");
        tracker.revoke(&p0());
        assert!(!tracker.complete(&p0(), Offset(10)));
        assert!(matches!(
            tracker.track(&p0(), Offset(11)),
            Err(TrackError::NotAssigned(_))
        ));
        assert!(tracker.to_commit().is_empty());
    }

    #[test]
    fn skipping_moves_the_committable_offset_only_when_nothing_is_outstanding() {
        let mut tracker = OffsetTracker::default();
        tracker.assign(p0(), Some(Offset(0)));
        tracker.track(&p0(), Offset(0)).unwrap();
        tracker.skip_to(&p0(), Offset(4));
        assert_eq!(tracker.committable(&p0()), Some(Offset(0)));
        tracker.complete(&p0(), Offset(0));
        assert_eq!(tracker.committable(&p0()), Some(Offset(4)));
        tracker.skip_to(&p0(), Offset(2));
        assert_eq!(tracker.committable(&p0()), Some(Offset(4)), "never back");
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Hand out the next record, `gap` offsets after the previous one.
        Track { gap: u64 },
        /// Complete the n-th handed-out record (modulo their number).
        Complete { pick: usize },
        /// Skip forward by this much.
        Skip { by: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0_u64..3).prop_map(|gap| Op::Track { gap }),
            4 => any::<usize>().prop_map(|pick| Op::Complete { pick }),
            1 => (0_u64..5).prop_map(|by| Op::Skip { by }),
        ]
    }

    /// The model: every offset handed out and which completed. The
    /// committable offset is the smallest handed-out offset not completed,
    /// or the end when there is none.
    #[derive(Default)]
    struct Model {
        handed: Vec<u64>,
        done: BTreeSet<u64>,
        end: u64,
    }

    impl Model {
        fn committable(&self) -> u64 {
            self.handed
                .iter()
                .copied()
                .find(|offset| !self.done.contains(offset))
                .unwrap_or(self.end)
        }
        fn outstanding(&self) -> usize {
            let committable = self.committable();
            self.handed.iter().filter(|&&o| o >= committable).count()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn tracker_matches_the_model(
            start in 0_u64..1000,
            window in 1_usize..12,
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let mut tracker = OffsetTracker::new(window);
            tracker.assign(p0(), Some(Offset(start)));
            let mut model = Model { end: start, ..Model::default() };
            let mut previous = start;
            for op in ops {
                match op {
                    Op::Track { gap } => {
                        let offset = model.end + gap;
                        let result = tracker.track(&p0(), Offset(offset));
                        if model.outstanding() >= window {
                            let full = matches!(result, Err(TrackError::WindowFull { .. }));
                            prop_assert!(full, "{:?}", result);
                        } else {
                            prop_assert!(result.is_ok(), "{:?}", result);
                            model.handed.push(offset);
                            model.end = offset + 1;
                        }
                    }
                    Op::Complete { pick } => {
                        if !model.handed.is_empty() {
                            let offset = model.handed[pick % model.handed.len()];
                            let was_outstanding =
                                !model.done.contains(&offset) && offset >= model.committable();
                            let changed = tracker.complete(&p0(), Offset(offset));
                            prop_assert_eq!(changed, was_outstanding);
                            model.done.insert(offset);
                        }
                    }
                    Op::Skip { by } => {
                        model.end += by;
                        tracker.skip_to(&p0(), Offset(model.end));
                    }
                }
                let committable = tracker.committable(&p0()).map(|o| o.0);
                prop_assert_eq!(committable, Some(model.committable()));
                prop_assert_eq!(tracker.outstanding(&p0()), model.outstanding());
                prop_assert!(tracker.outstanding(&p0()) <= window);
                // Never past an unfinished record, never backwards.
                for offset in &model.handed {
                    if !model.done.contains(offset) {
                        prop_assert!(model.committable() <= *offset);
                    }
                }
                prop_assert!(model.committable() >= previous);
                previous = model.committable();
            }
        }
    }
}
