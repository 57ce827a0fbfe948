//! A shard's bounded cache of open segment files.
//!
//! A segment does not keep its file open for its lifetime: with one
//! descriptor per segment, a broker's partition count would be bounded by
//! `RLIMIT_NOFILE`, and a tenant creating partitions could exhaust it (the
//! broker then could not accept a connection or open its journal). Segments
//! open their file on use and leave it here; the least recently used file
//! is closed when the cache is full. A partition that is written or read
//! keeps its file open; an idle one costs no descriptor.
//!
//! Who owns what: the cache holds one `Rc` of each cached file. A user
//! (a flush, a read) clones it for the length of its I/O, so eviction never
//! closes a file under an operation: the descriptor closes when the last
//! user drops it. The bound is therefore on idle descriptors plus those of
//! operations under way, which a shard's own concurrency bounds.
//!
//! Per shard, single-threaded: `Rc` and `RefCell`, no locks.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Identifies one file in an [`OpenFiles`] cache; keys are never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey(u64);

/// A bounded, least-recently-used cache of open files; clones share it.
#[derive(Debug)]
pub struct OpenFiles<F> {
    inner: Rc<RefCell<Cache<F>>>,
}

impl<F> Clone for OpenFiles<F> {
    fn clone(&self) -> Self {
        OpenFiles {
            inner: Rc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Cache<F> {
    capacity: usize,
    next_key: u64,
    /// Bumped by every use; orders `by_use`.
    clock: u64,
    files: HashMap<FileKey, Cached<F>>,
    /// Last use -> key, oldest first: the eviction order.
    by_use: BTreeMap<u64, FileKey>,
    stats: OpenFilesStats,
}

#[derive(Debug)]
struct Cached<F> {
    file: Rc<F>,
    last_use: u64,
}

/// What a cache did, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFilesStats {
    /// Files put in the cache (each an open).
    pub inserted: u64,
    /// Uses answered from the cache.
    pub hits: u64,
    /// Files closed to make room.
    pub evicted: u64,
}

impl<F> OpenFiles<F> {
    /// A cache keeping at most `capacity` files open (at least one).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        OpenFiles {
            inner: Rc::new(RefCell::new(Cache {
                capacity: capacity.max(1),
                next_key: 0,
                clock: 0,
                files: HashMap::new(),
                by_use: BTreeMap::new(),
                stats: OpenFilesStats::default(),
            })),
        }
    }

    /// A key for a new file (one per segment).
    #[must_use]
    pub fn new_key(&self) -> FileKey {
        let mut cache = self.inner.borrow_mut();
        cache.next_key += 1;
        FileKey(cache.next_key)
    }

    /// The open file of `key`, if cached; counts as a use.
    #[must_use]
    pub fn get(&self, key: FileKey) -> Option<Rc<F>> {
        let mut cache = self.inner.borrow_mut();
        let now = cache.tick();
        let cached = cache.files.get_mut(&key)?;
        let previous = std::mem::replace(&mut cached.last_use, now);
        let file = Rc::clone(&cached.file);
        cache.by_use.remove(&previous);
        cache.by_use.insert(now, key);
        cache.stats.hits += 1;
        Some(file)
    }

    /// Caches `file` as `key`'s open file (replacing one cached before),
    /// closing the least recently used files beyond the capacity.
    pub fn insert(&self, key: FileKey, file: Rc<F>) {
        let evicted = {
            let mut cache = self.inner.borrow_mut();
            let now = cache.tick();
            let replaced = cache.files.insert(
                key,
                Cached {
                    file,
                    last_use: now,
                },
            );
            if let Some(replaced) = &replaced {
                cache.by_use.remove(&replaced.last_use);
            }
            cache.by_use.insert(now, key);
            cache.stats.inserted += 1;
            let mut evicted = Vec::new();
            while cache.files.len() > cache.capacity {
                let Some((_, oldest)) = cache.by_use.pop_first() else {
                    break;
                };
                if let Some(cached) = cache.files.remove(&oldest) {
                    evicted.push(cached.file);
                }
                cache.stats.evicted += 1;
            }
            cache.check();
            (replaced, evicted)
        };
        // Dropped outside the borrow: closing a file may run its own code.
        drop(evicted);
    }

    /// Closes `key`'s file if cached (its segment is gone).
    pub fn forget(&self, key: FileKey) {
        let removed = {
            let mut cache = self.inner.borrow_mut();
            let removed = cache.files.remove(&key);
            if let Some(removed) = &removed {
                cache.by_use.remove(&removed.last_use);
            }
            removed
        };
        drop(removed);
    }

    /// Files cached now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.borrow().files.len()
    }

    /// Whether no file is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Most files cached at once.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.inner.borrow().capacity
    }

    /// What the cache did so far.
    #[must_use]
    pub fn stats(&self) -> OpenFilesStats {
        self.inner.borrow().stats
    }
}

impl<F> Cache<F> {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn check(&self) {
        debug_assert_eq!(self.files.len(), self.by_use.len());
        assert!(
            self.files.len() <= self.capacity,
            "open files over capacity"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_file_is_closed_when_the_cache_is_full() {
        let files = OpenFiles::new(2);
        let [a, b, c] = [files.new_key(), files.new_key(), files.new_key()];
        files.insert(a, Rc::new("a"));
        files.insert(b, Rc::new("b"));
        // `a` used last: `b` is the oldest when `c` arrives.
        assert_eq!(files.get(a).as_deref(), Some(&"a"));
        files.insert(c, Rc::new("c"));
        assert_eq!(files.len(), 2);
        assert!(files.get(b).is_none());
        assert!(files.get(a).is_some() && files.get(c).is_some());
        assert_eq!(files.stats().evicted, 1);
    }

    #[test]
    fn an_evicted_file_stays_open_for_the_operation_using_it() {
        let files = OpenFiles::new(1);
        let [a, b] = [files.new_key(), files.new_key()];
        files.insert(a, Rc::new(String::from("a")));
        let in_use = files.get(a).expect("cached");
        files.insert(b, Rc::new(String::from("b")));
        assert!(files.get(a).is_none(), "evicted from the cache");
        assert_eq!(Rc::strong_count(&in_use), 1, "only its user holds it");
        assert_eq!(in_use.as_str(), "a");
    }

    #[test]
    fn a_forgotten_or_replaced_file_leaves_the_cache() {
        let files = OpenFiles::new(4);
        let [a, b] = [files.new_key(), files.new_key()];
        let first = Rc::new(1);
        files.insert(a, Rc::clone(&first));
        files.insert(a, Rc::new(2));
        assert_eq!(Rc::strong_count(&first), 1, "the replaced file is released");
        assert_eq!(files.get(a).as_deref(), Some(&2));
        files.insert(b, Rc::new(3));
        files.forget(a);
        files.forget(a);
        assert_eq!(files.len(), 1);
        assert!(files.get(a).is_none());
    }

    #[test]
    fn keys_are_never_reused() {
        let files = OpenFiles::<()>::new(1);
        let first = files.new_key();
        files.forget(first);
        assert_ne!(files.new_key(), first);
    }
}
