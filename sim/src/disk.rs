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
//! file as a crash would leave it. A log's batches are durable in the shard
//! journal before its segments get them, so a view is the segments
//! continued by what the journal files hold for the partition past their
//! end, read by the journal's own recovery scan
//! ([`ShardJournal::open`] on a copy of the journal files) and kept as
//! replay keeps it (the newest journal generation, the one in the
//! checkpoint included; batches that continue the segments).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use corelog_broker::replica::meta_file::meta_path;
use corelog_replication::ReplicaMeta;
use corelog_storage::NoObserver;
use corelog_storage::checkpoint::Checkpoint;
use corelog_storage::clock::Clock;
use corelog_storage::disk::{Disk, DiskFile};
use corelog_storage::journal::{JournalConfig, ShardJournal};
use corelog_storage::memory_disk::{MemoryDisk, MemoryFile};
use corelog_storage::open_files::OpenFiles;
use corelog_storage::segment::SegmentPaths;
use corelog_wire::batch::{self, BatchLimits};
use corelog_wire::rng::SplitMix64;
use corelog_wire::types::{LeaderEpoch, Offset, TimestampMs};
use futures::FutureExt;

use crate::executor::SimExecutor;
use crate::node::JOURNAL_DIR;

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
    /// The journal's batches for the partition, with the journal files'
    /// and the checkpoint's versions they were read at.
    journal: Option<(JournalVersion, Rc<Vec<StoredBatch>>)>,
}

/// Versions of the journal files and of the checkpoint.
type JournalVersion = (Vec<(PathBuf, FileVersion)>, Option<FileVersion>);

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

fn assemble(
    segments: impl Iterator<Item = (Offset, Rc<Vec<StoredBatch>>)>,
    journal: &[StoredBatch],
) -> LogView {
    let mut view = LogView {
        segments: segments.collect(),
    };
    // Replay's rule: the journal's batches that continue the log, from
    // its end, while they do (a gap would fail recovery, which the
    // simulation reports when the restarted replica does not open).
    let end = view.end();
    let continuing: Vec<StoredBatch> = journal
        .iter()
        .skip_while(|batch| batch.end() <= end)
        .scan(end, |next, batch| {
            (batch.base == *next).then(|| {
                *next = batch.end();
                batch.clone()
            })
        })
        .collect();
    if continuing.is_empty() {
        return view;
    }
    match view.segments.last_mut() {
        Some((_, batches)) => Rc::make_mut(batches).extend(continuing),
        None => view
            .segments
            .push((continuing[0].base, Rc::new(continuing))),
    }
    view
}

/// A clock for the journal scan, which stamps nothing it keeps.
#[derive(Debug)]
struct Stopped;

impl Clock for Stopped {
    fn now(&self) -> TimestampMs {
        TimestampMs(0)
    }
}

/// The batches the journal files `files` (path, contents) hold for the
/// partition in `dir`, in journal order, of the generation replay keeps:
/// the newest of the entries' and `stored_generation` (the checkpoint's).
/// The files are copied onto a disk of their own and read by the journal's
/// recovery scan, which then never touches the node's disk.
fn journal_batches(
    files: Vec<(PathBuf, Vec<u8>)>,
    dir: &Path,
    stored_generation: u64,
) -> Result<Vec<StoredBatch>, String> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let journal_dir = Path::new(JOURNAL_DIR);
    let copy = MemoryDisk::new(512, 1 << 40);
    let scan = async {
        copy.create_dir_all(journal_dir).await?;
        for (path, mut contents) in files {
            let file = copy.open(&path, true).await?;
            contents.resize(contents.len().next_multiple_of(512), 0);
            file.write_at(contents, 0).await?;
        }
        Ok::<_, io::Error>(())
    };
    match scan.now_or_never() {
        Some(Ok(())) => {}
        Some(Err(error)) => return Err(format!("journal copy failed: {error}")),
        None => return Err("journal copy did not complete at once".to_owned()),
    }
    let opened = ShardJournal::open(
        copy,
        journal_dir,
        JournalConfig::default(),
        Rc::new(NoObserver),
        Rc::new(Stopped),
    )
    .now_or_never();
    let mut recovered = match opened {
        Some(Ok((_, recovered))) => recovered,
        Some(Err(error)) => return Err(format!("journal scan failed: {error}")),
        None => return Err("journal scan did not complete at once".to_owned()),
    };
    let Some(partition) = recovered.remove(dir) else {
        return Ok(Vec::new());
    };
    let generation = partition
        .entries
        .iter()
        .map(|(generation, _)| *generation)
        .max()
        .unwrap_or(0)
        .max(stored_generation);
    let limits = BatchLimits {
        batch_bytes_max: usize::MAX,
        decompressed_bytes_max: usize::MAX,
    };
    Ok(partition
        .entries
        .iter()
        .filter(|(entry_generation, _)| *entry_generation == generation)
        .flat_map(|(_, data)| parse(data, &limits))
        .collect())
}

/// The journal generation in `dir`'s checkpoint `bytes` (0 without one, as
/// recovery reads it).
fn stored_generation(bytes: Option<Vec<u8>>) -> u64 {
    bytes
        .and_then(|bytes| Checkpoint::decode(&bytes))
        .map_or(0, |checkpoint| checkpoint.journal_generation)
}

/// Journal files among `paths`.
fn journal_files(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let journal_dir = Path::new(JOURNAL_DIR);
    paths
        .into_iter()
        .filter(|path| path.parent() == Some(journal_dir))
        .collect()
}

/// The log in `dir` as its files (segments and journal) hold it now,
/// synced or not.
///
/// # Errors
/// The journal files could not be read.
pub fn current_view(
    disk: &MemoryDisk,
    dir: &Path,
    limits: &BatchLimits,
    cache: &mut ViewCache,
) -> Result<LogView, String> {
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
    let checkpoint = Checkpoint::path(dir);
    let version: JournalVersion = (
        journal_files(disk.files())
            .into_iter()
            .filter_map(|path| Some((path.clone(), disk.file_version(&path)?)))
            .collect(),
        disk.file_version(&checkpoint),
    );
    let journal = match &cache.journal {
        Some((known, batches)) if *known == version => batches.clone(),
        _ => {
            let files = version
                .0
                .iter()
                .filter_map(|(path, _)| Some((path.clone(), disk.contents(path)?)))
                .collect();
            let generation = stored_generation(disk.contents(&checkpoint));
            let batches = Rc::new(journal_batches(files, dir, generation)?);
            cache.journal = Some((version, batches.clone()));
            batches
        }
    };
    Ok(assemble(parsed.into_iter(), &journal))
}

/// The log in `dir` as a crash now would leave it: its synced segment
/// bytes continued by what the synced journal frames hold for it, as
/// recovery and journal replay would rebuild it.
///
/// # Errors
/// The journal files could not be read.
pub fn durable_view(
    disk: &MemoryDisk,
    dir: &Path,
    limits: &BatchLimits,
) -> Result<LogView, String> {
    let parsed = segment_files(disk.durable_files(), dir)
        .into_iter()
        .filter_map(|(base, path)| {
            let bytes = disk.durable_contents(&path)?;
            Some((base, Rc::new(parse(&bytes, limits))))
        });
    let files = journal_files(disk.durable_files())
        .into_iter()
        .filter_map(|path| Some((path.clone(), disk.durable_contents(&path)?)))
        .collect();
    let generation = stored_generation(disk.durable_contents(&Checkpoint::path(dir)));
    let journal = journal_batches(files, dir, generation)?;
    Ok(assemble(parsed, &journal))
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
