//! A bounded per-shard cache of the newest batches of every partition the
//! shard owns. With O_DIRECT there is no page cache, and consumers reading
//! at the tail — the common case — must not touch the disk.
//!
//! Per partition the cache holds a contiguous run of batches ending at the
//! log end; across partitions the oldest insertion is evicted first once the
//! shard's byte budget is exceeded. Single-threaded: one instance per shard
//! behind an `Rc`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use ahash::AHashMap;
use bytes::Bytes;
use corelog_wire::types::{Offset, PartitionId};

#[derive(Debug)]
struct CachedBatch {
    base_offset: Offset,
    next_offset: Offset,
    bytes: Bytes,
}

#[derive(Debug, Default)]
struct CacheState {
    budget_bytes: usize,
    used_bytes: usize,
    partitions: AHashMap<PartitionId, VecDeque<CachedBatch>>,
    /// Insertion order across partitions, for eviction. Entries whose batch
    /// was already dropped (invalidated) are skipped when popped.
    order: VecDeque<(PartitionId, Offset)>,
    hits: u64,
    misses: u64,
}

/// The shard's tail cache; clones share it.
#[derive(Clone, Debug)]
pub struct TailCache {
    state: Rc<RefCell<CacheState>>,
}

/// Batches served from the cache.
#[derive(Debug)]
pub struct CachedRead {
    /// The batches, in offset order.
    pub batches: Vec<Bytes>,
    /// Offset after the last batch.
    pub next_offset: Offset,
}

impl TailCache {
    /// A cache holding at most `budget_bytes` of batches.
    #[must_use]
    pub fn new(budget_bytes: usize) -> Self {
        TailCache {
            state: Rc::new(RefCell::new(CacheState {
                budget_bytes,
                ..CacheState::default()
            })),
        }
    }

    /// Adds the newest batch of a partition. A batch that does not continue
    /// the cached run (after a truncation, say) replaces the run.
    pub fn insert(&self, key: PartitionId, base_offset: Offset, next_offset: Offset, bytes: Bytes) {
        assert!(base_offset < next_offset);
        let mut state = self.state.borrow_mut();
        if bytes.len() > state.budget_bytes {
            return;
        }
        let run = state.partitions.entry(key).or_default();
        let continues = run
            .back()
            .is_none_or(|last| last.next_offset == base_offset);
        let dropped: usize = if continues {
            0
        } else {
            run.drain(..).map(|batch| batch.bytes.len()).sum()
        };
        let len = bytes.len();
        run.push_back(CachedBatch {
            base_offset,
            next_offset,
            bytes,
        });
        state.used_bytes = state.used_bytes - dropped + len;
        state.order.push_back((key, base_offset));
        Self::evict(&mut state);
    }

    fn evict(state: &mut CacheState) {
        while state.used_bytes > state.budget_bytes {
            let Some((key, base_offset)) = state.order.pop_front() else {
                break;
            };
            let Some(run) = state.partitions.get_mut(&key) else {
                continue;
            };
            if run
                .front()
                .is_some_and(|oldest| oldest.base_offset == base_offset)
            {
                let evicted = run.pop_front().map_or(0, |batch| batch.bytes.len());
                state.used_bytes -= evicted;
            }
        }
    }

    /// Batches of `key` starting with the one that contains `from`, ending
    /// before `upper`, at most `max_bytes` (at least one batch). `None` when
    /// `from` is not in the cached run.
    #[must_use]
    pub fn read(
        &self,
        key: PartitionId,
        from: Offset,
        upper: Offset,
        max_bytes: usize,
    ) -> Option<CachedRead> {
        let mut state = self.state.borrow_mut();
        let found = state.partitions.get(&key).and_then(|run| {
            let first = run.front()?;
            if from < first.base_offset || from >= run.back()?.next_offset {
                return None;
            }
            let start = run.partition_point(|batch| batch.next_offset <= from);
            let mut batches = Vec::new();
            let mut bytes = 0usize;
            let mut next_offset = from;
            for batch in run.iter().skip(start) {
                let over_budget = !batches.is_empty() && bytes + batch.bytes.len() > max_bytes;
                if batch.next_offset > upper || over_budget {
                    break;
                }
                bytes += batch.bytes.len();
                next_offset = batch.next_offset;
                batches.push(batch.bytes.clone());
            }
            (!batches.is_empty()).then_some(CachedRead {
                batches,
                next_offset,
            })
        });
        if found.is_some() {
            state.hits += 1;
        } else {
            state.misses += 1;
        }
        found
    }

    /// Drops every cached batch of `key` at or after `offset` (truncation).
    pub fn truncate_from(&self, key: PartitionId, offset: Offset) {
        let mut state = self.state.borrow_mut();
        let Some(run) = state.partitions.get_mut(&key) else {
            return;
        };
        let mut dropped = 0;
        while run.back().is_some_and(|last| last.next_offset > offset) {
            dropped += run.pop_back().map_or(0, |batch| batch.bytes.len());
        }
        state.used_bytes -= dropped;
    }

    /// Drops every cached batch of `key` (partition removed).
    pub fn forget(&self, key: PartitionId) {
        let mut state = self.state.borrow_mut();
        if let Some(run) = state.partitions.remove(&key) {
            state.used_bytes -= run.iter().map(|batch| batch.bytes.len()).sum::<usize>();
        }
    }

    /// Bytes cached now.
    #[must_use]
    pub fn used_bytes(&self) -> usize {
        self.state.borrow().used_bytes
    }

    /// Reads served from the cache and reads that missed it.
    #[must_use]
    pub fn hits_and_misses(&self) -> (u64, u64) {
        let state = self.state.borrow();
        (state.hits, state.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(topic_id: u64) -> PartitionId {
        PartitionId {
            topic_id,
            partition: 0,
        }
    }

    fn batch(len: usize) -> Bytes {
        Bytes::from(vec![0u8; len])
    }

    #[test]
    fn serves_the_tail_and_misses_below_it() {
        let cache = TailCache::new(1 << 20);
        let key = partition(1);
        cache.insert(key, Offset(10), Offset(20), batch(100));
        cache.insert(key, Offset(20), Offset(30), batch(100));
        assert!(cache.read(key, Offset(9), Offset(30), 1000).is_none());
        let read = cache.read(key, Offset(15), Offset(30), 1000).unwrap();
        assert_eq!((read.batches.len(), read.next_offset), (2, Offset(30)));
        let read = cache.read(key, Offset(15), Offset(20), 1000).unwrap();
        assert_eq!((read.batches.len(), read.next_offset), (1, Offset(20)));
        let read = cache.read(key, Offset(10), Offset(30), 1).unwrap();
        assert_eq!(read.batches.len(), 1, "the first batch is served whole");
        assert!(cache.read(key, Offset(30), Offset(40), 1000).is_none());
    }

    #[test]
    fn stays_within_budget_evicting_oldest_first_across_partitions() {
        let cache = TailCache::new(250);
        cache.insert(partition(1), Offset(0), Offset(1), batch(100));
        cache.insert(partition(2), Offset(0), Offset(1), batch(100));
        cache.insert(partition(1), Offset(1), Offset(2), batch(100));
        assert!(cache.used_bytes() <= 250);
        assert!(
            cache
                .read(partition(1), Offset(0), Offset(9), 1000)
                .is_none()
        );
        assert!(
            cache
                .read(partition(2), Offset(0), Offset(9), 1000)
                .is_some()
        );
        assert!(
            cache
                .read(partition(1), Offset(1), Offset(9), 1000)
                .is_some()
        );
    }

    #[test]
    fn a_discontinuous_batch_replaces_the_run() {
        let cache = TailCache::new(1000);
        let key = partition(1);
        cache.insert(key, Offset(0), Offset(5), batch(100));
        cache.insert(key, Offset(3), Offset(6), batch(100));
        assert!(cache.read(key, Offset(0), Offset(9), 1000).is_none());
        assert_eq!(cache.used_bytes(), 100);
        cache.truncate_from(key, Offset(3));
        assert_eq!(cache.used_bytes(), 0);
    }
}
