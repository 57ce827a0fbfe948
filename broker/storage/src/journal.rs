//! The shard journal: one group commit for every partition of a shard.
//!
//! A partition log in journal mode does not fdatasync its own segment
//! before acknowledging: it hands its new batches to the shard's journal,
//! which packs the batches of every partition that joined into one frame,
//! writes it with one O_DIRECT write and makes it durable with one
//! fdatasync. So the number of fdatasyncs per second follows the shard's
//! commit rate, not the number of partitions it owns (issue 14). The
//! partition then copies its batches into its segment lazily, in large
//! runs ([`super::PartitionLog::flush_segment`], when
//! [`Journal::flush_candidates`] names it), and releases them here; a
//! journal file is removed once nothing in it is unreleased.
//!
//! ```text
//! file   <dir>/<start position, 20 digits>.journal, preallocated
//! frame  magic "CLJF" | crc32c u32 (of everything after it) | sequence u64
//!        | payload_len u32 | entry_count u32 | entries | zeros to alignment
//! entry  key u64 | generation u64 | dir_len u16 | dir | data_len u32 | batches
//! ```
//!
//! An entry's `key` is its partition's [`PartitionId`] packed into a u64
//! ([`key_on_disk`]: the topic id above the low 20 bits, the partition
//! index in them), the packing the journal has always written.
//!
//! Frames are written one at a time, each synced before the next starts,
//! so only the last frame can be torn: recovery reads frames in position
//! order while the magic, the sequence (one more than the last) and the
//! CRC hold, and the first that fails ends the journal. A frame that does
//! not fit the rest of a file goes to the start of a new one.
//!
//! Recovery ([`ShardJournal::open`]) hands back every frame's entries by
//! partition directory; the caller replays them into the partitions
//! ([`super::log::replay_shard_journal`]), then
//! [`ShardJournal::start_fresh`] removes the old files. An entry carries
//! the partition's journal generation, bumped by every truncation, so that
//! replay never brings back batches a truncation removed.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use corelog_wire::types::{Offset, PartitionId, TimestampMs};
use event_listener::Event;
use futures::future::LocalBoxFuture;

use super::disk::{Disk, DiskFile, align_up};
use super::{StorageError, StorageObserver};
use crate::clock::Clock;

const MAGIC: [u8; 4] = *b"CLJF";
const FRAME_HEADER_BYTES: usize = 24;
const FILE_SUFFIX: &str = ".journal";

/// Settings of a shard journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalConfig {
    /// Size of each journal file (a larger frame gets a file of its own
    /// size): the next frame that does not fit goes to a new file.
    pub file_bytes: u64,
    /// A file is preallocated this much at a time, as frames reach the end
    /// of what is allocated, so a small disk is not taken at once.
    pub allocate_bytes: u64,
    /// Most payload bytes one frame carries; entries beyond wait for the
    /// next commit (one entry always goes, however large).
    pub commit_bytes_max: usize,
    /// A log with at least this many bytes of batches to make durable
    /// writes them straight to its segment with its own fdatasync instead:
    /// a run this large amortises its own sync, and going around the
    /// journal writes it once instead of twice.
    pub bypass_bytes: usize,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            file_bytes: 64 << 20,
            allocate_bytes: 4 << 20,
            commit_bytes_max: 4 << 20,
            bypass_bytes: 1 << 20,
        }
    }
}

impl JournalConfig {
    /// Checks the settings are usable together.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] naming the setting to change.
    pub fn validate(&self) -> Result<(), StorageError> {
        if self.commit_bytes_max == 0 || self.file_bytes < 2 * self.commit_bytes_max as u64 {
            return Err(StorageError::InvalidConfig(format!(
                "journal file_bytes {} must be at least twice commit_bytes_max {}",
                self.file_bytes, self.commit_bytes_max
            )));
        }
        if self.bypass_bytes < 4096 {
            return Err(StorageError::InvalidConfig(format!(
                "journal bypass_bytes {} must be at least 4096",
                self.bypass_bytes
            )));
        }
        if self.allocate_bytes == 0 || self.allocate_bytes > self.file_bytes {
            return Err(StorageError::InvalidConfig(format!(
                "journal allocate_bytes {} must be in 1..=file_bytes {}",
                self.allocate_bytes, self.file_bytes
            )));
        }
        Ok(())
    }
}

/// What a partition hands to the journal: batches that continue its log.
#[derive(Clone, Debug)]
pub struct JournalEntry {
    /// The partition.
    pub key: PartitionId,
    /// The partition directory, so recovery can find it.
    pub dir: Rc<Path>,
    /// The partition's journal generation (see the module docs).
    pub generation: u64,
    /// Offset after the last record of `batches`.
    pub next_offset: Offset,
    /// Whole batches, in offset order.
    pub batches: Vec<Bytes>,
}

impl JournalEntry {
    fn data_len(&self) -> usize {
        self.batches.iter().map(Bytes::len).sum()
    }

    fn encoded_len(&self) -> usize {
        8 + 8 + 2 + self.dir.as_os_str().len() + 4 + self.data_len()
    }
}

/// A submission's place in the commit order: durable once
/// [`Journal::is_committed`] says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Counters of the journal's work since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Frames written and synced (one fdatasync each).
    pub commits: u64,
    /// Entries those frames carried.
    pub entries: u64,
    /// Bytes written, headers and padding included.
    pub bytes_written: u64,
    /// Journal files removed because everything in them was released.
    pub files_reclaimed: u64,
}

/// Batches recovered for one partition directory, in journal order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredPartition {
    /// The partition.
    pub key: PartitionId,
    /// `(generation, batches)` per entry, oldest first.
    pub entries: Vec<(u64, Bytes)>,
}

/// The shard journal as a partition log sees it. Object-safe, so that the
/// per-shard [`super::ShardStorage`] need not name the disk type.
pub trait Journal {
    /// Queues `entry` for the next commit.
    ///
    /// # Errors
    /// [`StorageError::Fenced`] once a commit failed.
    fn submit(&self, entry: JournalEntry) -> Result<Ticket, StorageError>;

    /// Resolves once `ticket` is durable, performing commits while no one
    /// else is.
    ///
    /// # Errors
    /// [`StorageError::Fenced`] if a commit failed first.
    fn commit(&self, ticket: Ticket) -> LocalBoxFuture<'_, Result<(), StorageError>>;

    /// Whether `ticket` is durable.
    fn is_committed(&self, ticket: Ticket) -> bool;

    /// A log with at least this many bytes to make durable writes them
    /// to its own segment instead ([`JournalConfig::bypass_bytes`]).
    fn bypass_bytes(&self) -> usize;

    /// The partition `key` has synced its segment up to `segment_end`:
    /// its committed entries below are no longer needed.
    fn release(&self, key: PartitionId, segment_end: Offset);

    /// Committed entries of `key` not yet released, as `(generation,
    /// batches)`: what a reopened log must replay.
    fn unreleased(&self, key: PartitionId) -> Vec<(u64, Bytes)>;

    /// Bytes of committed entries not yet released, for all partitions.
    fn unreleased_bytes(&self) -> u64;

    /// Drops what `key` has not released: its log is gone (deleted).
    fn forget(&self, key: PartitionId);

    /// Partitions whose segments should be filled now: those holding at
    /// least `bytes` unreleased, or an entry committed `age` or longer ago
    /// (by the journal's clock), and, while more than `unreleased_max`
    /// bytes are held in all, those holding the oldest file (so that it
    /// can be reclaimed).
    fn flush_candidates(&self, bytes: u64, age: Duration, unreleased_max: u64) -> Vec<PartitionId>;

    /// Removes files whose every entry is released, but never the file
    /// being written. Returns how many were removed.
    ///
    /// # Errors
    /// [`StorageError::Io`].
    fn reclaim(&self) -> LocalBoxFuture<'_, Result<usize, StorageError>>;

    /// Clears a failure caused by a full disk, so that logs reopened once
    /// space is back can commit again. Nothing was made durable by the
    /// failed commit and the next one rewrites its position. A failure of
    /// any other kind stays: its data must be presumed lost.
    fn clear_no_space_failure(&self);

    /// Counters.
    fn stats(&self) -> JournalStats;
}

struct Queued {
    ticket: u64,
    entry: JournalEntry,
}

/// A committed entry its partition has not yet released.
struct Held {
    /// Start of the file holding it.
    file_start: u64,
    next_offset: Offset,
    generation: u64,
    batches: Vec<Bytes>,
    bytes: u64,
    committed_at: TimestampMs,
}

struct Unreleased {
    entries: VecDeque<Held>,
    bytes: u64,
}

struct JournalFile<F> {
    file: Rc<F>,
    /// Bytes preallocated so far.
    allocated: u64,
    /// Bytes the file may grow to before the journal moves to a new one.
    capacity: u64,
}

struct State<F> {
    /// Live files by start position; the last is being written.
    files: BTreeMap<u64, JournalFile<F>>,
    /// Absolute position of the next frame (aligned).
    write_position: u64,
    next_sequence: u64,
    next_ticket: u64,
    /// Tickets below this are durable.
    committed: u64,
    queue: VecDeque<Queued>,
    in_flight: Option<Vec<Queued>>,
    committing: bool,
    failed: Option<(String, bool)>,
    unreleased: HashMap<PartitionId, Unreleased>,
    unreleased_bytes: u64,
    stats: JournalStats,
}

/// The journal of one shard, on `D`.
pub struct ShardJournal<D: Disk> {
    disk: D,
    dir: PathBuf,
    config: JournalConfig,
    observer: Rc<dyn StorageObserver>,
    /// Stamps commits, for the age rule of [`Journal::flush_candidates`].
    clock: Rc<dyn Clock>,
    state: RefCell<State<D::File>>,
    /// Signalled after every commit, success or failure.
    committed: Event,
}

impl<D: Disk> std::fmt::Debug for ShardJournal<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("ShardJournal")
            .field("dir", &self.dir)
            .field("write_position", &state.write_position)
            .field("files", &state.files.len())
            .finish_non_exhaustive()
    }
}

/// Puts a cancelled commit's entries back at the front of the queue, so
/// that the next commit writes them at the same position.
struct CommitGuard<'a, D: Disk> {
    journal: &'a ShardJournal<D>,
}

impl<D: Disk> Drop for CommitGuard<'_, D> {
    fn drop(&mut self) {
        let mut state = self.journal.state.borrow_mut();
        if let Some(entries) = state.in_flight.take() {
            for queued in entries.into_iter().rev() {
                state.queue.push_front(queued);
            }
        }
        state.committing = false;
        drop(state);
        self.journal.committed.notify(usize::MAX);
    }
}

fn file_name(start: u64) -> String {
    format!("{start:020}{FILE_SUFFIX}")
}

fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_suffix(FILE_SUFFIX)?.parse().ok()
}

impl<D: Disk> ShardJournal<D> {
    /// Opens the journal in `dir` (creating it) and recovers every entry of
    /// its valid frames, by partition directory. Nothing is written until
    /// [`ShardJournal::start_fresh`]: replay the recovered entries first.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] or [`StorageError::Io`].
    pub async fn open(
        disk: D,
        dir: &Path,
        config: JournalConfig,
        observer: Rc<dyn StorageObserver>,
        clock: Rc<dyn Clock>,
    ) -> Result<(Self, BTreeMap<PathBuf, RecoveredPartition>), StorageError> {
        config.validate()?;
        disk.create_dir_all(dir)
            .await
            .map_err(|error| StorageError::io(dir, error))?;
        let mut starts: Vec<u64> = disk
            .list_dir(dir)
            .await
            .map_err(|error| StorageError::io(dir, error))?
            .iter()
            .filter_map(|name| parse_file_name(name))
            .collect();
        starts.sort_unstable();
        let mut recovered = BTreeMap::new();
        let mut expected_sequence = None;
        let mut last_sequence = 0;
        let mut next_file = 0;
        for start in &starts {
            let path = dir.join(file_name(*start));
            let file = disk
                .open(&path, false)
                .await
                .map_err(|error| StorageError::io(&path, error))?;
            let size = file
                .size()
                .await
                .map_err(|error| StorageError::io(&path, error))?;
            next_file = next_file.max(start + size.max(1));
            let ended = scan_file(
                &file,
                &path,
                &mut expected_sequence,
                &mut last_sequence,
                &mut recovered,
            )
            .await?;
            if ended {
                break;
            }
        }
        // Positions continue past every file found, read or not.
        for start in &starts {
            next_file = next_file.max(start + 1);
        }
        let next_file = align_up(next_file, 1 << 12);
        let journal = ShardJournal {
            disk,
            dir: dir.to_path_buf(),
            config,
            observer,
            clock,
            state: RefCell::new(State {
                files: BTreeMap::new(),
                // No file is open for writing: the first commit creates one.
                write_position: next_file,
                next_sequence: last_sequence + 1,
                next_ticket: 0,
                committed: 0,
                queue: VecDeque::new(),
                in_flight: None,
                committing: false,
                failed: None,
                unreleased: HashMap::new(),
                unreleased_bytes: 0,
                stats: JournalStats::default(),
            }),
            committed: Event::new(),
        };
        Ok((journal, recovered))
    }

    /// Removes every file recovery read (their entries are replayed into
    /// the partitions), durably, so that they are never replayed again.
    ///
    /// # Errors
    /// [`StorageError::Io`].
    pub async fn start_fresh(&self) -> Result<(), StorageError> {
        let names = self
            .disk
            .list_dir(&self.dir)
            .await
            .map_err(|error| StorageError::io(&self.dir, error))?;
        let first_new = self.state.borrow().write_position;
        let mut removed = false;
        for name in names {
            if parse_file_name(&name).is_some_and(|start| start < first_new) {
                let path = self.dir.join(&name);
                self.disk
                    .remove(&path)
                    .await
                    .map_err(|error| StorageError::io(&path, error))?;
                removed = true;
            }
        }
        if removed {
            self.disk
                .sync_dir(&self.dir)
                .await
                .map_err(|error| StorageError::io(&self.dir, error))?;
        }
        Ok(())
    }

    async fn reclaim_files(&self) -> Result<usize, StorageError> {
        let victims: Vec<u64> = {
            let state = self.state.borrow();
            let oldest_needed = state
                .unreleased
                .values()
                .filter_map(|partition| partition.entries.front().map(|held| held.file_start))
                .min()
                .unwrap_or(u64::MAX);
            let writing = state.files.keys().next_back().copied();
            state
                .files
                .keys()
                .copied()
                .filter(|start| *start < oldest_needed && Some(*start) != writing)
                .collect()
        };
        for start in &victims {
            let path = self.dir.join(file_name(*start));
            self.state.borrow_mut().files.remove(start);
            self.disk
                .remove(&path)
                .await
                .map_err(|error| StorageError::io(&path, error))?;
        }
        if !victims.is_empty() {
            self.disk
                .sync_dir(&self.dir)
                .await
                .map_err(|error| StorageError::io(&self.dir, error))?;
            self.state.borrow_mut().stats.files_reclaimed += victims.len() as u64;
        }
        Ok(victims.len())
    }

    /// Live journal files.
    #[must_use]
    pub fn file_count(&self) -> usize {
        self.state.borrow().files.len()
    }

    /// Writes and syncs one frame of queued entries. Called with
    /// `committing` set and the entries in `in_flight`.
    async fn write_frame(&self) -> Result<(), StorageError> {
        let (frame_len, sequence) = {
            let state = self.state.borrow();
            let entries = state.in_flight.as_ref().expect("a commit owns its entries");
            let payload: usize = entries
                .iter()
                .map(|queued| queued.entry.encoded_len())
                .sum();
            (FRAME_HEADER_BYTES + payload, state.next_sequence)
        };
        // Alignment is at most a page: a frame padded to it fits.
        let (file, file_start, position) =
            self.room_for(align_up(frame_len as u64, 1 << 12)).await?;
        let alignment = file.alignment();
        let padded = align_up(frame_len as u64, alignment) as usize;
        let mut buffer = file.alloc_buffer(padded);
        {
            let state = self.state.borrow();
            let entries = state.in_flight.as_ref().expect("a commit owns its entries");
            encode_frame(sequence, entries, frame_len, buffer.as_mut());
        }
        let started = Instant::now();
        let path = self.dir.join(file_name(file_start));
        file.write_at(buffer, position - file_start)
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        file.sync_data()
            .await
            .map_err(|error| StorageError::io(&path, error))?;

        let mut state = self.state.borrow_mut();
        let entries = state.in_flight.take().expect("a commit owns its entries");
        state.write_position = position + padded as u64;
        state.next_sequence += 1;
        state.stats.commits += 1;
        state.stats.entries += entries.len() as u64;
        state.stats.bytes_written += padded as u64;
        let mut data_bytes = 0u64;
        let committed_at = self.clock.now();
        for queued in entries {
            assert!(queued.ticket >= state.committed, "tickets commit in order");
            state.committed = queued.ticket + 1;
            let entry = queued.entry;
            let bytes = entry.data_len() as u64;
            data_bytes += bytes;
            state.unreleased_bytes += bytes;
            let partition = state
                .unreleased
                .entry(entry.key)
                .or_insert_with(|| Unreleased {
                    entries: VecDeque::new(),
                    bytes: 0,
                });
            partition.bytes += bytes;
            partition.entries.push_back(Held {
                file_start,
                next_offset: entry.next_offset,
                generation: entry.generation,
                batches: entry.batches,
                bytes,
                committed_at,
            });
        }
        drop(state);
        self.observer
            .on_journal_commit(data_bytes, padded as u64, started.elapsed());
        Ok(())
    }

    /// The file and position the next frame of `room` bytes goes to:
    /// allocating more of the current file, or creating the next one.
    async fn room_for(&self, room: u64) -> Result<(Rc<D::File>, u64, u64), StorageError> {
        let (current, position) = {
            let state = self.state.borrow();
            let current =
                state.files.iter().next_back().map(|(start, file)| {
                    (*start, file.allocated, file.capacity, file.file.clone())
                });
            (current, state.write_position)
        };
        match current {
            Some((start, allocated, capacity, file)) if position + room <= start + capacity => {
                let needed = position + room - start;
                if needed > allocated {
                    let target = needed
                        .max(allocated + self.config.allocate_bytes)
                        .min(capacity);
                    file.preallocate(target).await.map_err(|error| {
                        StorageError::io(&self.dir.join(file_name(start)), error)
                    })?;
                    if let Some(entry) = self.state.borrow_mut().files.get_mut(&start) {
                        entry.allocated = target;
                    }
                }
                Ok((file, start, position))
            }
            current => {
                let start = current.map_or(position, |(start, _, capacity, _)| start + capacity);
                let capacity = room.max(self.config.file_bytes);
                let file = self
                    .create_file(start, room.max(self.config.allocate_bytes), capacity)
                    .await?;
                Ok((file, start, start))
            }
        }
    }

    async fn create_file(
        &self,
        start: u64,
        size: u64,
        capacity: u64,
    ) -> Result<Rc<D::File>, StorageError> {
        let path = self.dir.join(file_name(start));
        let file = self
            .disk
            .open(&path, true)
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        file.preallocate(size)
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        file.sync_data()
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        self.disk
            .sync_dir(&self.dir)
            .await
            .map_err(|error| StorageError::io(&self.dir, error))?;
        let file = Rc::new(file);
        let mut state = self.state.borrow_mut();
        state.files.insert(
            start,
            JournalFile {
                file: file.clone(),
                allocated: size,
                capacity,
            },
        );
        state.write_position = start;
        Ok(file)
    }

    async fn commit_ticket(&self, ticket: Ticket) -> Result<(), StorageError> {
        loop {
            let wait = {
                let mut state = self.state.borrow_mut();
                if ticket.0 < state.committed {
                    return Ok(());
                }
                if let Some((reason, no_space)) = &state.failed {
                    return Err(StorageError::Fenced {
                        reason: reason.clone(),
                        no_space: *no_space,
                    });
                }
                if state.committing {
                    true
                } else {
                    state.committing = true;
                    let mut taken = Vec::new();
                    let mut bytes = 0;
                    while let Some(next) = state.queue.front() {
                        let len = next.entry.encoded_len();
                        if !taken.is_empty() && bytes + len > self.config.commit_bytes_max {
                            break;
                        }
                        bytes += len;
                        taken.extend(state.queue.pop_front());
                    }
                    assert!(!taken.is_empty(), "an uncommitted ticket is queued");
                    state.in_flight = Some(taken);
                    false
                }
            };
            if wait {
                // In this future, not on the heap: one per waiting append.
                // Listening after the borrow is released misses nothing:
                // no other task runs before the await.
                event_listener::listener!(self.committed => listener);
                listener.await;
            } else {
                let guard = CommitGuard { journal: self };
                // Boxed: one writer per frame, while every waiting
                // append holds this future (see `Journal::commit`).
                let result = Box::pin(self.write_frame()).await;
                if let Err(error) = result.as_ref()
                    && error.is_out_of_descriptors()
                {
                    // The next file could not be opened: nothing was
                    // written. The guard puts the entries back at the
                    // head of the queue, in order, for the next commit;
                    // this waiter is told, and its log is not fenced.
                    drop(guard);
                    return result;
                }
                if let Err(error) = result {
                    let mut state = self.state.borrow_mut();
                    tracing::error!(dir = %self.dir.display(), %error, "shard journal commit failed");
                    state.failed = Some((error.to_string(), error.is_no_space()));
                    // Nobody will write these: their logs fence.
                    state.in_flight = None;
                    state.queue.clear();
                }
                drop(guard);
            }
        }
    }
}

impl<D: Disk> Journal for ShardJournal<D> {
    fn submit(&self, entry: JournalEntry) -> Result<Ticket, StorageError> {
        let mut state = self.state.borrow_mut();
        if let Some((reason, no_space)) = &state.failed {
            return Err(StorageError::Fenced {
                reason: reason.clone(),
                no_space: *no_space,
            });
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.queue.push_back(Queued { ticket, entry });
        Ok(Ticket(ticket))
    }

    fn commit(&self, ticket: Ticket) -> LocalBoxFuture<'_, Result<(), StorageError>> {
        Box::pin(self.commit_ticket(ticket))
    }

    fn is_committed(&self, ticket: Ticket) -> bool {
        ticket.0 < self.state.borrow().committed
    }

    fn bypass_bytes(&self) -> usize {
        self.config.bypass_bytes
    }

    fn release(&self, key: PartitionId, segment_end: Offset) {
        let mut state = self.state.borrow_mut();
        let Some(partition) = state.unreleased.get_mut(&key) else {
            return;
        };
        let mut freed = 0u64;
        while let Some(front) = partition.entries.front() {
            if front.next_offset > segment_end {
                break;
            }
            freed += front.bytes;
            partition.entries.pop_front();
        }
        partition.bytes -= freed;
        if partition.entries.is_empty() {
            state.unreleased.remove(&key);
        }
        state.unreleased_bytes -= freed;
    }

    fn unreleased(&self, key: PartitionId) -> Vec<(u64, Bytes)> {
        let state = self.state.borrow();
        state
            .unreleased
            .get(&key)
            .map(|partition| {
                partition
                    .entries
                    .iter()
                    .flat_map(|held| {
                        held.batches
                            .iter()
                            .map(|bytes| (held.generation, bytes.clone()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn unreleased_bytes(&self) -> u64 {
        self.state.borrow().unreleased_bytes
    }

    fn forget(&self, key: PartitionId) {
        let mut state = self.state.borrow_mut();
        if let Some(partition) = state.unreleased.remove(&key) {
            state.unreleased_bytes -= partition.bytes;
        }
    }

    fn flush_candidates(&self, bytes: u64, age: Duration, unreleased_max: u64) -> Vec<PartitionId> {
        let now = self.clock.now();
        let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        let state = self.state.borrow();
        let oldest_file = (state.unreleased_bytes > unreleased_max)
            .then(|| state.files.keys().next().copied())
            .flatten();
        state
            .unreleased
            .iter()
            .filter(|(_, partition)| {
                let Some(front) = partition.entries.front() else {
                    return false;
                };
                partition.bytes >= bytes
                    || now.0.saturating_sub(front.committed_at.0) >= age_ms
                    || oldest_file.is_some_and(|oldest| front.file_start <= oldest)
            })
            .map(|(key, _)| *key)
            .collect()
    }

    fn reclaim(&self) -> LocalBoxFuture<'_, Result<usize, StorageError>> {
        Box::pin(self.reclaim_files())
    }

    fn clear_no_space_failure(&self) {
        let mut state = self.state.borrow_mut();
        if state.failed.as_ref().is_some_and(|(_, no_space)| *no_space) {
            state.failed = None;
        }
    }

    fn stats(&self) -> JournalStats {
        self.state.borrow().stats
    }
}

fn encode_frame(sequence: u64, entries: &[Queued], frame_len: usize, buffer: &mut [u8]) {
    let mut at = 8;
    let mut put = |bytes: &[u8], at: &mut usize| {
        buffer[*at..*at + bytes.len()].copy_from_slice(bytes);
        *at += bytes.len();
    };
    put(&sequence.to_le_bytes(), &mut at);
    let payload_len = u32::try_from(frame_len - FRAME_HEADER_BYTES).expect("a frame fits u32");
    put(&payload_len.to_le_bytes(), &mut at);
    let count = u32::try_from(entries.len()).expect("entry count fits u32");
    put(&count.to_le_bytes(), &mut at);
    for queued in entries {
        let entry = &queued.entry;
        let dir = entry.dir.as_os_str().as_bytes();
        put(&key_on_disk(entry.key).to_le_bytes(), &mut at);
        put(&entry.generation.to_le_bytes(), &mut at);
        let dir_len = u16::try_from(dir.len()).expect("a partition path fits u16");
        put(&dir_len.to_le_bytes(), &mut at);
        put(dir, &mut at);
        let data_len = u32::try_from(entry.data_len()).expect("an entry fits u32");
        put(&data_len.to_le_bytes(), &mut at);
        for batch in &entry.batches {
            put(batch, &mut at);
        }
    }
    assert_eq!(at, frame_len, "frame length computed before encoding");
    buffer[at..].fill(0);
    buffer[..4].copy_from_slice(&MAGIC);
    let crc = crc32c::crc32c(&buffer[8..frame_len]);
    buffer[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Reads the frames of one file into `recovered`. Returns whether the
/// journal ended in this file (a frame that is not the expected next one).
async fn scan_file<F: DiskFile>(
    file: &F,
    path: &Path,
    expected_sequence: &mut Option<u64>,
    last_sequence: &mut u64,
    recovered: &mut BTreeMap<PathBuf, RecoveredPartition>,
) -> Result<bool, StorageError> {
    let size = file
        .size()
        .await
        .map_err(|error| StorageError::io(path, error))?;
    let alignment = file.alignment();
    let mut position = 0u64;
    let mut frames_here = 0usize;
    while position + FRAME_HEADER_BYTES as u64 <= size {
        let header = file
            .read_at(position, FRAME_HEADER_BYTES)
            .await
            .map_err(|error| StorageError::io(path, error))?;
        let Some((sequence, payload_len)) = parse_header(&header) else {
            break;
        };
        if expected_sequence.is_some_and(|expected| expected != sequence) {
            break;
        }
        let frame_len = FRAME_HEADER_BYTES + payload_len as usize;
        if position + frame_len as u64 > size {
            break;
        }
        let frame = file
            .read_at(position, frame_len)
            .await
            .map_err(|error| StorageError::io(path, error))?;
        if frame.len() != frame_len || !frame_crc_holds(&frame) {
            break;
        }
        let Some(entries) = parse_entries(&frame) else {
            break;
        };
        for (key, generation, dir, data) in entries {
            let partition = recovered.entry(dir).or_insert_with(|| RecoveredPartition {
                key,
                entries: Vec::new(),
            });
            partition.key = key;
            partition.entries.push((generation, data));
        }
        *expected_sequence = Some(sequence + 1);
        *last_sequence = sequence;
        frames_here += 1;
        position += align_up(frame_len as u64, alignment);
    }
    // A file the journal rolled away from ends in zeros; the journal goes
    // on in the next file. A file without a single valid frame ends it
    // (a frame torn at the start of a fresh file).
    Ok(frames_here == 0 && expected_sequence.is_some())
}

fn parse_header(header: &[u8]) -> Option<(u64, u32)> {
    if header.len() < FRAME_HEADER_BYTES || header[..4] != MAGIC {
        return None;
    }
    let sequence = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let payload_len = u32::from_le_bytes(header[16..20].try_into().ok()?);
    // No frame is larger than a file; a larger length is damage.
    (payload_len <= 1 << 30).then_some((sequence, payload_len))
}

fn frame_crc_holds(frame: &[u8]) -> bool {
    let stored = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
    crc32c::crc32c(&frame[8..]) == stored
}

type ParsedEntry = (PartitionId, u64, PathBuf, Bytes);

/// Bits of a packed key that hold the partition index.
const KEY_PARTITION_BITS: u32 = 20;

/// A partition as an entry names it on disk: the topic id shifted above
/// the index's 20 bits. Distinct for every topic id below 2^44 and index
/// below 2^20 (a million partitions per topic); unchanged since the
/// journal's first version, so older journals replay.
#[must_use]
pub(crate) fn key_on_disk(id: PartitionId) -> u64 {
    (id.topic_id << KEY_PARTITION_BITS) | u64::from(id.partition)
}

/// The partition a packed key names ([`key_on_disk`] undone).
#[must_use]
pub(crate) fn key_from_disk(key: u64) -> PartitionId {
    PartitionId {
        topic_id: key >> KEY_PARTITION_BITS,
        partition: (key & ((1 << KEY_PARTITION_BITS) - 1)) as u32,
    }
}

fn parse_entries(frame: &[u8]) -> Option<Vec<ParsedEntry>> {
    let count = u32::from_le_bytes(frame[20..24].try_into().ok()?);
    let mut at = FRAME_HEADER_BYTES;
    let mut take = |len: usize| -> Option<&[u8]> {
        let bytes = frame.get(at..at.checked_add(len)?)?;
        at += len;
        Some(bytes)
    };
    let mut entries = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let key = key_from_disk(u64::from_le_bytes(take(8)?.try_into().ok()?));
        let generation = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let dir_len = u16::from_le_bytes(take(2)?.try_into().ok()?);
        let dir = take(usize::from(dir_len))?;
        let dir = PathBuf::from(OsStr::from_bytes(dir));
        let data_len = u32::from_le_bytes(take(4)?.try_into().ok()?);
        let data = Bytes::copy_from_slice(take(data_len as usize)?);
        entries.push((key, generation, dir, data));
    }
    (at == frame.len()).then_some(entries)
}
