//! A node's disk, and what the checker reads from it.
//!
//! [`SimDisk`] is the broker's own [`MemoryDisk`] (O_DIRECT alignment
//! enforced; a crash keeps only synced bytes and synced names) with one
//! change: every `fdatasync` and directory sync takes a random, simulated
//! time, so that group commits overlap with pushes, queries, truncations
//! and crashes as they do on a real disk.
//!
//! The checker never asks the replica what its log holds: it parses the
//! partition directory's files itself ([`LogView`]), either as they are
//! now (written, synced or not) or as a crash now would leave them (the
//! durable view), and reads the promised epoch from the replica metadata
//! file as a crash would leave it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corelog_broker::replica::meta_file::meta_path;
use corelog_replication::ReplicaMeta;
use corelog_storage::disk::{Disk, DiskFile};
use corelog_storage::memory_disk::{MemoryDisk, MemoryFile};
use corelog_storage::open_files::OpenFiles;
use corelog_storage::segment::SegmentPaths;
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::rng::SplitMix64;
use corelog_wire::types::{LeaderEpoch, Offset};

use crate::executor::SimExecutor;

/// How long syncs take: a random number of milliseconds in a range.
#[derive(Debug)]
pub struct SyncDelay {
    executor: SimExecutor,
    rng: RefCell<SplitMix64>,
    range_ms: (u64, u64),
}

impl SyncDelay {
    /// Syncs of `range_ms` milliseconds, drawn from `rng`.
    #[must_use]
    pub fn new(executor: SimExecutor, rng: SplitMix64, range_ms: (u64, u64)) -> Rc<SyncDelay> {
        Rc::new(SyncDelay {
            executor,
            rng: RefCell::new(rng),
            range_ms,
        })
    }

    async fn wait(&self) {
        let (low, high) = self.range_ms;
        let millis = self.rng.borrow_mut().between(low, high);
        self.executor.sleep(Duration::from_millis(millis)).await;
    }
}

/// A [`MemoryDisk`] whose syncs take simulated time.
#[derive(Clone, Debug)]
pub struct SimDisk {
    disk: MemoryDisk,
    delay: Rc<SyncDelay>,
    /// Few: the simulated replicas close and reopen segment files as a
    /// broker with many partitions does.
    open_files: OpenFiles<SimFile>,
}

/// Segment files a simulated node keeps open.
const OPEN_FILES_MAX: usize = 4;

impl SimDisk {
    /// `disk` with syncs delayed by `delay`.
    #[must_use]
    pub fn new(disk: MemoryDisk, delay: Rc<SyncDelay>) -> SimDisk {
        SimDisk {
            disk,
            delay,
            open_files: OpenFiles::new(OPEN_FILES_MAX),
        }
    }
}

impl Disk for SimDisk {
    type File = SimFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<SimFile> {
        Ok(SimFile {
            file: self.disk.open(path, create).await?,
            delay: self.delay.clone(),
        })
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        self.disk.remove(path).await
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.disk.rename(from, to).await
    }

    async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.delay.wait().await;
        self.disk.sync_dir(dir).await
    }

    async fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.disk.create_dir_all(dir).await
    }

    async fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.disk.remove_dir_all(dir).await
    }

    async fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.disk.list_dir(dir).await
    }

    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        self.disk.free_bytes(dir)
    }

    fn open_files(&self) -> &OpenFiles<SimFile> {
        &self.open_files
    }
}

/// A file of a [`SimDisk`].
#[derive(Debug)]
pub struct SimFile {
    file: MemoryFile,
    delay: Rc<SyncDelay>,
}

impl DiskFile for SimFile {
    type Buffer = Vec<u8>;
    type Read = Vec<u8>;

    fn alignment(&self) -> u64 {
        self.file.alignment()
    }

    fn alloc_buffer(&self, len: usize) -> Vec<u8> {
        self.file.alloc_buffer(len)
    }

    async fn write_at(&self, buffer: Vec<u8>, position: u64) -> io::Result<()> {
        self.file.write_at(buffer, position).await
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        self.file.read_at(position, len).await
    }

    async fn sync_data(&self) -> io::Result<()> {
        // The sync covers what was written when it completes: a crash
        // meanwhile loses all of it, as power loss during an fdatasync does.
        self.delay.wait().await;
        self.file.sync_data().await
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.truncate(len).await
    }

    async fn preallocate(&self, len: u64) -> io::Result<()> {
        self.file.preallocate(len).await
    }

    async fn size(&self) -> io::Result<u64> {
        self.file.size().await
    }
}

/// A batch as a segment file holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBatch {
    /// First offset.
    pub base: Offset,
    /// Last offset.
    pub last: Offset,
    /// The leader epoch stamped on it.
    pub epoch: Option<LeaderEpoch>,
    /// The whole batch, header included.
    pub bytes: Bytes,
}

impl StoredBatch {
    /// The offset after it.
    #[must_use]
    pub fn end(&self) -> Offset {
        self.last.plus(1)
    }
}

/// A partition directory's log as parsed from its segment files: each
/// segment's base and every whole, CRC-valid batch of it up to its first
/// damaged or missing byte (what recovery would keep).
#[derive(Clone, Debug, Default)]
pub struct LogView {
    /// Segments in offset order: base offset, batches.
    segments: Vec<(Offset, Rc<Vec<StoredBatch>>)>,
}

impl LogView {
    /// The first offset held: the first segment's base.
    #[must_use]
    pub fn log_start(&self) -> Offset {
        self.segments.first().map_or(Offset(0), |(base, _)| *base)
    }

    /// The offset after the last batch.
    #[must_use]
    pub fn end(&self) -> Offset {
        self.segments.last().map_or(Offset(0), |(base, batches)| {
            batches.last().map_or(*base, StoredBatch::end)
        })
    }

    /// The batch starting at `base`, if any.
    #[must_use]
    pub fn batch_at(&self, base: Offset) -> Option<&StoredBatch> {
        let segment = self
            .segments
            .partition_point(|(first, _)| *first <= base)
            .checked_sub(1)?;
        let batches = &self.segments[segment].1;
        batches
            .binary_search_by(|batch| batch.base.cmp(&base))
            .ok()
            .map(|index| &batches[index])
    }

    /// The batches that end after `offset`, in offset order.
    pub fn from(&self, offset: Offset) -> impl Iterator<Item = &StoredBatch> {
        let first = self
            .segments
            .partition_point(|(base, _)| *base <= offset)
            .saturating_sub(1);
        self.segments[first.min(self.segments.len())..]
            .iter()
            .flat_map(|(_, batches)| batches.iter())
            .skip_while(move |batch| batch.end() <= offset)
    }

    /// Whether `batch` is held here, byte for byte.
    #[must_use]
    pub fn holds(&self, batch: &StoredBatch) -> bool {
        self.batch_at(batch.base) == Some(batch)
    }
}

/// Parsed segment files by path, with the contents version they were
/// parsed at: closed segments never change, so only the active one is
/// parsed again as it grows.
#[derive(Debug, Default)]
pub struct ViewCache {
    segments: BTreeMap<PathBuf, (FileVersion, Rc<Vec<StoredBatch>>)>,
}

/// [`MemoryDisk::file_version`]: (inode, contents version).
type FileVersion = (u64, u64);

/// Segment file paths (with their base offsets) among `paths` in `dir`.
fn segment_files(paths: Vec<PathBuf>, dir: &Path) -> Vec<(Offset, PathBuf)> {
    let mut segments: Vec<(Offset, PathBuf)> = paths
        .into_iter()
        .filter(|path| path.parent() == Some(dir))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            Some((SegmentPaths::parse_log_name(name)?, path))
        })
        .collect();
    segments.sort();
    segments
}

fn parse(bytes: &[u8], limits: &BatchLimits) -> Vec<StoredBatch> {
    batch::batches(bytes, limits)
        .map_while(Result::ok)
        .map(|found| StoredBatch {
            base: found.header.base_offset,
            last: found.header.last_offset(),
            epoch: found.header.leader_epoch(),
            bytes: Bytes::copy_from_slice(found.bytes),
        })
        .collect()
}

fn assemble(segments: impl Iterator<Item = (Offset, Rc<Vec<StoredBatch>>)>) -> LogView {
    LogView {
        segments: segments.collect(),
    }
}

/// The log in `dir` as its files hold it now, synced or not.
#[must_use]
pub fn current_view(
    disk: &MemoryDisk,
    dir: &Path,
    limits: &BatchLimits,
    cache: &mut ViewCache,
) -> LogView {
    let segments = segment_files(disk.files(), dir);
    cache
        .segments
        .retain(|path, _| segments.iter().any(|(_, known)| known == path));
    let parsed: Vec<(Offset, Rc<Vec<StoredBatch>>)> = segments
        .into_iter()
        .filter_map(|(base, path)| {
            let version = disk.file_version(&path)?;
            if let Some((known, batches)) = cache.segments.get(&path)
                && *known == version
            {
                return Some((base, batches.clone()));
            }
            let batches = Rc::new(parse(&disk.contents(&path)?, limits));
            cache.segments.insert(path, (version, batches.clone()));
            Some((base, batches))
        })
        .collect();
    assemble(parsed.into_iter())
}

/// The log in `dir` as a crash now would leave it.
#[must_use]
pub fn durable_view(disk: &MemoryDisk, dir: &Path, limits: &BatchLimits) -> LogView {
    let parsed = segment_files(disk.durable_files(), dir)
        .into_iter()
        .filter_map(|(base, path)| {
            let bytes = disk.durable_contents(&path)?;
            Some((base, Rc::new(parse(&bytes, limits))))
        });
    assemble(parsed)
}

/// What the replica in `dir` has promised, as a crash now would leave its
/// metadata file: the fenced epoch (0 without a file) and the epoch it last
/// led, if any.
///
/// # Errors
/// A metadata file that does not decode.
pub fn durable_promise(
    disk: &MemoryDisk,
    dir: &Path,
) -> Result<(LeaderEpoch, Option<LeaderEpoch>), String> {
    match disk.durable_contents(&meta_path(dir)) {
        None => Ok((LeaderEpoch(0), None)),
        Some(bytes) => ReplicaMeta::decode(&bytes)
            .map(|meta| (meta.fenced_epoch, meta.led_epoch))
            .map_err(|error| format!("replica metadata unreadable: {error}")),
    }
}
