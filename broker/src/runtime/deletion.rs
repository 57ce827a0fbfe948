//! Removing what deleted topics leave on a shard, in the background.
//!
//! A topic's deletion is answered once the controller committed it and
//! every shard stopped serving its replicas (applying a snapshot takes them
//! out of the shard's map at once); their files are removed afterwards, by
//! [`Shard::run_deleter`], so that deleting thousands of partitions answers
//! within its request timeout. Until a broker's shards are done, `Metadata`
//! lists the topic with `TOPIC_DELETION_IN_PROGRESS` (`corelog topic list`
//! shows `deleting`), and the log reports progress every few seconds.
//!
//! A replica's directory is removed only once nothing else holds the
//! replica (a push in flight, a long-polling fetch, a housekeeping pass):
//! glommio panics when a file it has just opened disappears under it
//! (`DmaFile`'s open unwraps a `statfs` of the path), so no task may be
//! opening files in a directory while it is removed. A replica still held
//! after [`HOLD_WAIT_MAX`] keeps its directory, and the next start removes
//! it.
//!
//! At start, and whenever the metadata says more topics were deleted,
//! shard 0 sweeps `topics/` for directories of deleted topics that no
//! replica of this process ever opened (what a crash or stop interrupted):
//! a directory `NAME.ID` whose id is below the next topic id (ids are never
//! reused) and belongs to no topic.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::rc::Rc;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use corelog_controller::TopicId;
use event_listener::Event;
use futures::FutureExt;

use super::replicas::PROGRESS_EVERY;
use super::shard::{Replica, Shard};
use crate::metadata::{MetadataSnapshot, topic_dir};
use corelog_storage::disk::Disk;
use corelog_wire::types::PartitionId;

/// How long a discarded replica may stay held by other tasks before its
/// directory is left for the next start.
pub const HOLD_WAIT_MAX: Duration = Duration::from_secs(30);
/// How often a held replica is looked at again.
const HOLD_POLL: Duration = Duration::from_millis(20);

/// The deletions in progress on every shard of this broker, for `Metadata`
/// and the log. Shared by the shards; touched by admin paths only, never
/// by produce or fetch.
#[derive(Debug, Default)]
pub struct TopicDeletions {
    state: Mutex<DeletionState>,
}

#[derive(Debug, Default)]
struct DeletionState {
    /// Per deleted topic (name, id): units (partitions, or a leftover
    /// topic directory) scheduled and removed.
    progress: BTreeMap<(String, u64), Progress>,
    /// Topic ids whose replicas a shard of this process discarded: their
    /// directories are the deleters' business, never the sweep's.
    discarded: BTreeSet<u64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    scheduled: usize,
    finished: usize,
}

/// A deleted topic whose files this broker is still removing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletingTopic {
    /// The topic's name.
    pub name: String,
    /// Its id.
    pub topic_id: u64,
    /// Partitions (or leftover directories) not yet removed.
    pub left: usize,
}

impl TopicDeletions {
    fn state(&self) -> MutexGuard<'_, DeletionState> {
        // A panic while holding it left only counters behind.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn schedule(&self, topic: &str, topic_id: u64, units: usize, discarded: bool) {
        let mut state = self.state();
        state
            .progress
            .entry((topic.to_owned(), topic_id))
            .or_default()
            .scheduled += units;
        if discarded {
            state.discarded.insert(topic_id);
        }
    }

    fn finish_one(&self, topic: &str, topic_id: u64) {
        let mut state = self.state();
        let key = (topic.to_owned(), topic_id);
        if let Some(progress) = state.progress.get_mut(&key) {
            progress.finished += 1;
            if progress.finished >= progress.scheduled {
                state.progress.remove(&key);
            }
        }
    }

    fn was_discarded(&self, topic_id: u64) -> bool {
        self.state().discarded.contains(&topic_id)
    }

    /// The deleted topics whose files are still being removed, by name.
    #[must_use]
    pub fn deleting(&self) -> Vec<DeletingTopic> {
        self.state()
            .progress
            .iter()
            .map(|((name, topic_id), progress)| DeletingTopic {
                name: name.clone(),
                topic_id: *topic_id,
                left: progress.scheduled.saturating_sub(progress.finished),
            })
            .collect()
    }
}

/// What a shard's deleter removes.
pub(super) enum Doomed {
    /// A replica of a deleted topic, out of the shard's map.
    Replica {
        id: PartitionId,
        topic: String,
        replica: Replica,
    },
    /// A deleted topic's directory that no replica of this process opened.
    TopicDir { topic: String, topic_id: u64 },
}

impl Doomed {
    fn topic(&self) -> (&str, u64) {
        match self {
            Doomed::Replica { id, topic, .. } => (topic, id.topic_id),
            Doomed::TopicDir { topic, topic_id } => (topic, *topic_id),
        }
    }
}

/// A shard's removal queue.
#[derive(Default)]
pub(super) struct DeletionQueue {
    queue: RefCell<VecDeque<Doomed>>,
    work: Event,
    /// The (next topic id, topic count) of the last sweep.
    swept: Cell<Option<(u64, usize)>>,
}

impl std::fmt::Debug for DeletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeletionQueue")
            .field("queued", &self.queue.borrow().len())
            .finish_non_exhaustive()
    }
}

impl Shard {
    /// Hands replicas of deleted topics (already out of the shard's map) to
    /// the deleter.
    pub(super) fn schedule_removal(&self, doomed: Vec<Doomed>) {
        if doomed.is_empty() {
            return;
        }
        let mut per_topic: BTreeMap<(String, u64, bool), usize> = BTreeMap::new();
        for item in &doomed {
            let (topic, topic_id) = item.topic();
            let discarded = matches!(item, Doomed::Replica { .. });
            *per_topic
                .entry((topic.to_owned(), topic_id, discarded))
                .or_default() += 1;
        }
        for ((topic, topic_id, discarded), units) in per_topic {
            tracing::info!(shard = %self.id, %topic, topic_id, units, "removing a deleted topic's files in the background");
            self.topic_deletions
                .schedule(&topic, topic_id, units, discarded);
        }
        self.deletion_queue.queue.borrow_mut().extend(doomed);
        self.deletion_queue.work.notify(usize::MAX);
    }

    /// Removes what [`Shard::schedule_removal`] queued, one item at a time,
    /// until shutdown; logs progress every [`PROGRESS_EVERY`].
    pub async fn run_deleter(self: Rc<Self>) {
        let mut removed = 0usize;
        let mut last_report = Instant::now();
        while !self.is_stopping() {
            let next = self.deletion_queue.queue.borrow_mut().pop_front();
            let Some(item) = next else {
                if removed > 0 {
                    tracing::info!(shard = %self.id, removed, "deleted topics' files removed");
                    removed = 0;
                }
                let work = self.deletion_queue.work.listen();
                let stopping = self.stopping.listen();
                if self.deletion_queue.queue.borrow().is_empty() && !self.is_stopping() {
                    futures::select! {
                        () = work.fuse() => {}
                        () = stopping.fuse() => {}
                    }
                }
                continue;
            };
            let (topic, topic_id) = {
                let (topic, topic_id) = item.topic();
                (topic.to_owned(), topic_id)
            };
            self.remove_doomed(item).await;
            self.topic_deletions.finish_one(&topic, topic_id);
            removed += 1;
            if last_report.elapsed() >= PROGRESS_EVERY {
                last_report = Instant::now();
                let left = self.deletion_queue.queue.borrow().len();
                tracing::info!(shard = %self.id, removed, left, "removing deleted topics' files");
            }
        }
    }

    async fn remove_doomed(&self, item: Doomed) {
        match item {
            Doomed::Replica { id, replica, .. } => {
                let dir = replica.partition().dir();
                if self.discard_replica(id, replica).await {
                    self.remove_dir(&dir).await;
                    if let Some(topic_dir) = dir.parent() {
                        self.remove_dir_if_empty(topic_dir).await;
                    }
                }
            }
            Doomed::TopicDir { topic, topic_id } => {
                self.remove_dir(&topic_dir(&self.config.data_dir, &topic, topic_id))
                    .await;
            }
        }
    }

    /// Discards `replica` and waits until nothing else holds it; whether
    /// its directory may be removed now.
    async fn discard_replica(&self, id: PartitionId, replica: Replica) -> bool {
        replica.discard().await;
        self.storage.cache.forget(id);
        if let Some(journal) = &self.storage.journal {
            journal.forget(id);
        }
        let deadline = Instant::now() + HOLD_WAIT_MAX;
        while Rc::strong_count(&replica) > 1 {
            if Instant::now() >= deadline || self.is_stopping() {
                tracing::warn!(
                    shard = %self.id,
                    dir = %replica.partition().dir().display(),
                    holders = Rc::strong_count(&replica) - 1,
                    "a deleted replica is still in use; its directory is left for the next start to remove"
                );
                return false;
            }
            glommio::timer::sleep(HOLD_POLL).await;
        }
        true
    }

    /// Removes `dir` and everything under it; one already gone is fine.
    async fn remove_dir(&self, dir: &Path) {
        match self.disk.remove_dir_all(dir).await {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "cannot remove a deleted topic's directory; the next start tries again");
            }
        }
    }

    /// Removes a deleted topic's directory once its last partition is gone
    /// (the other shards' deleters remove theirs in parallel: whichever
    /// finds it empty removes it).
    async fn remove_dir_if_empty(&self, dir: &Path) {
        if let Ok(names) = self.disk.list_dir(dir).await
            && names.is_empty()
        {
            self.remove_dir(dir).await;
        }
    }

    /// Shard 0, once every shard applied `snapshot`: queues the
    /// directories of deleted topics that no replica of this process
    /// opened. Cheap when nothing changed: it looks at `topics/` only when
    /// the next topic id or the topic count moved since the last sweep.
    pub(super) async fn sweep_deleted_topic_dirs(&self, snapshot: &MetadataSnapshot) {
        let state = &snapshot.cluster.state;
        let next_topic_id = state.next_topic_id().0;
        let mark = (next_topic_id, state.topics().len());
        if self.deletion_queue.swept.replace(Some(mark)) == Some(mark) {
            return;
        }
        let topics_dir = self.config.data_dir.join("topics");
        let names = match self.disk.list_dir(&topics_dir).await {
            Ok(names) => names,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(error) => {
                tracing::warn!(dir = %topics_dir.display(), %error, "cannot look for deleted topics' directories");
                return;
            }
        };
        let doomed: Vec<Doomed> = names
            .iter()
            .filter_map(|name| deleted_topic_dir(name, snapshot))
            .filter(|(_, topic_id)| !self.topic_deletions.was_discarded(*topic_id))
            .map(|(topic, topic_id)| Doomed::TopicDir { topic, topic_id })
            .collect();
        self.schedule_removal(doomed);
    }
}

/// `Some((name, id))` when `dir_name` is `NAME.ID` of a topic `snapshot`
/// says was deleted: an id below the next topic id that no topic has.
fn deleted_topic_dir(dir_name: &str, snapshot: &MetadataSnapshot) -> Option<(String, u64)> {
    let (topic, id) = dir_name.rsplit_once('.')?;
    let topic_id: u64 = id.parse().ok()?;
    let state = &snapshot.cluster.state;
    let deleted =
        topic_id < state.next_topic_id().0 && !state.topics().contains_key(&TopicId(topic_id));
    deleted.then(|| (topic.to_owned(), topic_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_is_listed_as_deleting_until_every_shard_removed_its_share() {
        let deletions = TopicDeletions::default();
        // Two shards schedule their partitions of topic 7; a leftover
        // directory of topic 3 is swept.
        deletions.schedule("orders", 7, 3, true);
        deletions.schedule("orders", 7, 2, true);
        deletions.schedule("old", 3, 1, false);
        for _ in 0..4 {
            deletions.finish_one("orders", 7);
        }
        let deleting = deletions.deleting();
        assert_eq!(
            deleting,
            vec![
                DeletingTopic {
                    name: "old".to_owned(),
                    topic_id: 3,
                    left: 1
                },
                DeletingTopic {
                    name: "orders".to_owned(),
                    topic_id: 7,
                    left: 1
                },
            ]
        );
        deletions.finish_one("orders", 7);
        deletions.finish_one("old", 3);
        assert!(deletions.deleting().is_empty());
        // The sweep leaves alone what a shard discarded, even when done.
        assert!(deletions.was_discarded(7));
        assert!(!deletions.was_discarded(3));
    }
}
