//! One segment: a `<base>.log` file of consecutive batches plus its two
//! sparse indexes, owned by one shard.
//!
//! Durability: a segment's bytes below [`Segment::size`] have been written
//! and fdatasync'ed (the appender only grows the size after the sync that
//! covers it), so readers never see bytes that a crash could take back.
//! Closed segments never change until retention deletes them; readers hold an
//! `Rc<Segment>` and finish on it even after its files are unlinked (the
//! segment pins its file open before the unlink, [`Segment::pin_open`]).
//!
//! Descriptors: a segment opens its file through the shard's bounded cache
//! ([`Disk::open_files`]) when it is used, and does not hold it open: an
//! idle partition costs no descriptor.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use corelog_wire::batch::{self, BatchAt, BatchError, BatchHeader, BatchLimits};
use corelog_wire::types::{Offset, TimestampMs};

use super::StorageError;
use super::disk::{Disk, DiskFile, read_whole_file};
use super::index::{OffsetIndex, SegmentSummary};
use super::open_files::FileKey;
use super::time_index::TimeIndex;

/// Digits in a segment file name: enough for any u64 offset, so that names
/// sort in offset order.
const NAME_DIGITS: usize = 20;
/// Bytes read per step while scanning a segment at recovery.
const SCAN_CHUNK_BYTES: usize = 1 << 20;
/// Extra bytes a read asks for beyond its budget, to cover the scan from an
/// index entry to the requested offset without a second read.
const READ_SLACK_BYTES: usize = 16 << 10;
/// Largest index file accepted: 2 GiB segments with 4 KiB intervals need 4 MiB.
const INDEX_FILE_BYTES_MAX: u64 = 16 << 20;

/// Paths of a segment's files.
#[derive(Clone, Debug)]
pub struct SegmentPaths {
    /// The batches.
    pub log: PathBuf,
    /// The offset index.
    pub index: PathBuf,
    /// The time index.
    pub time_index: PathBuf,
}

impl SegmentPaths {
    /// Paths of the segment starting at `base` in `dir`.
    #[must_use]
    pub fn new(dir: &Path, base: Offset) -> Self {
        let stem = format!("{:0width$}", base.0, width = NAME_DIGITS);
        SegmentPaths {
            log: dir.join(format!("{stem}.log")),
            index: dir.join(format!("{stem}.index")),
            time_index: dir.join(format!("{stem}.timeindex")),
        }
    }

    /// The base offset named by a `<base>.log` file name.
    #[must_use]
    pub fn parse_log_name(name: &str) -> Option<Offset> {
        let stem = name.strip_suffix(".log")?;
        if stem.len() != NAME_DIGITS || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        stem.parse().ok().map(Offset)
    }
}

/// What the segment knows about its contents; grows as batches are appended.
#[derive(Clone, Debug)]
pub(super) struct SegmentContents {
    pub size: u64,
    pub next_offset: Offset,
    pub max_timestamp: TimestampMs,
    pub record_count: u64,
    pub index: OffsetIndex,
    pub time_index: TimeIndex,
    bytes_since_index_entry: u64,
    bytes_since_time_entry: u64,
}

impl SegmentContents {
    pub(super) fn empty(base: Offset) -> Self {
        SegmentContents {
            size: 0,
            next_offset: base,
            max_timestamp: TimestampMs(i64::MIN),
            record_count: 0,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            bytes_since_index_entry: 0,
            bytes_since_time_entry: 0,
        }
    }
}

/// A segment of one partition's log.
#[derive(Debug)]
pub struct Segment<D: Disk> {
    base: Offset,
    paths: SegmentPaths,
    disk: D,
    /// The segment's file in the shard's cache of open files.
    file_key: FileKey,
    /// The file, held open for good once it is about to be unlinked: the
    /// cache could close it, and its name is then gone.
    pinned: RefCell<Option<Rc<D::File>>>,
    /// O_DIRECT alignment of the file, learnt when it was first opened.
    alignment: u64,
    index_interval_bytes: u64,
    contents: RefCell<SegmentContents>,
    /// Byte position of the first batch that failed its checksum, if any:
    /// nothing at or after it is served.
    corrupt_at: Cell<Option<u64>>,
    created_at: TimestampMs,
}

/// Batches read from a segment.
#[derive(Debug, Default)]
pub(super) struct SegmentRead {
    /// Whole batches, concatenated.
    pub bytes: Vec<u8>,
    /// Offset after the last batch returned, if any was.
    pub next_offset: Option<Offset>,
    /// Whether the read stopped at the end of the segment (the caller may
    /// continue in the next one).
    pub reached_end: bool,
}

/// How a scan of a segment ended.
#[derive(Debug)]
pub(super) struct ScanEnd {
    /// Bytes of valid batches from the start of the file.
    pub valid_bytes: u64,
    /// Length of the file.
    pub file_bytes: u64,
    /// Why the scan stopped before the end of the file, if it did.
    pub problem: Option<BatchError>,
}

impl<D: Disk> Segment<D> {
    /// Creates an empty segment file (its name is durable once the caller
    /// syncs the directory).
    pub(super) async fn create(
        disk: &D,
        dir: &Path,
        base: Offset,
        index_interval_bytes: u64,
        now: TimestampMs,
    ) -> Result<Self, StorageError> {
        let paths = SegmentPaths::new(dir, base);
        let file = disk
            .open(&paths.log, true)
            .await
            .map_err(|error| StorageError::io(&paths.log, error))?;
        file.truncate(0)
            .await
            .map_err(|error| StorageError::io(&paths.log, error))?;
        Ok(Self::with_file(
            disk,
            base,
            paths,
            file,
            index_interval_bytes,
            now,
        ))
    }

    /// Opens an existing segment file; its contents are set by recovery.
    pub(super) async fn open(
        disk: &D,
        dir: &Path,
        base: Offset,
        index_interval_bytes: u64,
        now: TimestampMs,
    ) -> Result<Self, StorageError> {
        let paths = SegmentPaths::new(dir, base);
        let file = disk
            .open(&paths.log, false)
            .await
            .map_err(|error| StorageError::io(&paths.log, error))?;
        Ok(Self::with_file(
            disk,
            base,
            paths,
            file,
            index_interval_bytes,
            now,
        ))
    }

    /// A segment whose file was just opened; the file goes to the cache.
    fn with_file(
        disk: &D,
        base: Offset,
        paths: SegmentPaths,
        file: D::File,
        index_interval_bytes: u64,
        now: TimestampMs,
    ) -> Self {
        let file_key = disk.open_files().new_key();
        let alignment = file.alignment();
        disk.open_files().insert(file_key, Rc::new(file));
        Segment {
            base,
            paths,
            disk: disk.clone(),
            file_key,
            pinned: RefCell::new(None),
            alignment,
            index_interval_bytes,
            contents: RefCell::new(SegmentContents::empty(base)),
            corrupt_at: Cell::new(None),
            created_at: now,
        }
    }

    /// Offset of the first batch.
    #[must_use]
    pub fn base(&self) -> Offset {
        self.base
    }

    /// Paths of the segment's files.
    #[must_use]
    pub fn paths(&self) -> &SegmentPaths {
        &self.paths
    }

    /// Durable bytes in the segment.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.contents.borrow().size
    }

    /// Offset after the last durable batch.
    #[must_use]
    pub fn next_offset(&self) -> Offset {
        self.contents.borrow().next_offset
    }

    /// When this segment was created or opened, for roll-by-age.
    #[must_use]
    pub fn created_at(&self) -> TimestampMs {
        self.created_at
    }

    /// The segment's summary, as its sealed index files record it.
    #[must_use]
    pub fn summary(&self) -> SegmentSummary {
        let contents = self.contents.borrow();
        SegmentSummary {
            base_offset: self.base,
            size_bytes: contents.size,
            next_offset: contents.next_offset,
            max_timestamp: contents.max_timestamp,
            record_count: contents.record_count,
        }
    }

    /// The segment's open file, for the length of one operation: from the
    /// shard's cache, opened again if the cache closed it.
    ///
    /// # Errors
    /// [`StorageError::OutOfDescriptors`] or [`StorageError::Io`] opening it.
    pub(super) async fn file(&self) -> Result<Rc<D::File>, StorageError> {
        if let Some(pinned) = self.pinned.borrow().as_ref() {
            return Ok(Rc::clone(pinned));
        }
        let files = self.disk.open_files();
        if let Some(file) = files.get(self.file_key) {
            return Ok(file);
        }
        let file = Rc::new(
            self.disk
                .open(&self.paths.log, false)
                .await
                .map_err(|error| StorageError::io(&self.paths.log, error))?,
        );
        files.insert(self.file_key, Rc::clone(&file));
        Ok(file)
    }

    /// Holds the file open for as long as this segment lives, before its
    /// name is unlinked: readers holding the segment finish on it.
    ///
    /// # Errors
    /// As [`Segment::file`]; the caller then must not unlink the file yet.
    pub(super) async fn pin_open(&self) -> Result<(), StorageError> {
        let file = self.file().await?;
        *self.pinned.borrow_mut() = Some(file);
        self.disk.open_files().forget(self.file_key);
        Ok(())
    }

    /// O_DIRECT alignment of the file's writes.
    pub(super) fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The error for reads reaching this segment's damage, if it has any.
    #[must_use]
    pub fn damage(&self) -> Option<StorageError> {
        self.corrupt_at
            .get()
            .map(|position| self.corrupt(position, "batch failed its checksum"))
    }

    pub(super) fn mark_corrupt(&self, position: u64) {
        let earliest = self
            .corrupt_at
            .get()
            .map_or(position, |known| known.min(position));
        self.corrupt_at.set(Some(earliest));
    }

    pub(super) fn set_contents(&self, contents: SegmentContents) {
        *self.contents.borrow_mut() = contents;
    }

    /// Records a batch made durable at `position`: grows the size and adds
    /// index entries every `index_interval_bytes`.
    ///
    /// # Panics
    /// If the batch does not continue the segment: position and offset must
    /// follow the previous batch exactly.
    pub(super) fn record_durable_batch(&self, position: u64, header: &BatchHeader) {
        let mut contents = self.contents.borrow_mut();
        assert_eq!(
            position, contents.size,
            "batch does not continue the segment"
        );
        assert_eq!(
            header.base_offset, contents.next_offset,
            "offset gap in segment"
        );
        Self::index_batch(
            &mut contents,
            self.base,
            self.index_interval_bytes,
            position,
            header,
        );
    }

    fn index_batch(
        contents: &mut SegmentContents,
        base: Offset,
        interval: u64,
        position: u64,
        header: &BatchHeader,
    ) {
        let relative =
            u32::try_from(header.base_offset.since(base)).expect("segment spans over 2^32 offsets");
        let position_u32 = u32::try_from(position).expect("segment over 4 GiB");
        if contents.bytes_since_index_entry >= interval && position > 0 {
            contents.index.push(relative, position_u32);
            contents.bytes_since_index_entry = 0;
        }
        let grows_max = header.max_timestamp > contents.max_timestamp;
        if grows_max
            && contents.bytes_since_time_entry >= interval
            && relative > 0
            && contents
                .time_index
                .last_timestamp()
                .is_none_or(|last| contents.max_timestamp > last)
        {
            // Every batch before this one has a timestamp of at most the running maximum.
            contents.time_index.push(contents.max_timestamp, relative);
            contents.bytes_since_time_entry = 0;
        }
        let bytes = header.total_bytes() as u64;
        contents.bytes_since_index_entry += bytes;
        contents.bytes_since_time_entry += bytes;
        contents.size = position + bytes;
        contents.next_offset = header.next_offset();
        contents.max_timestamp = contents.max_timestamp.max(header.max_timestamp);
        contents.record_count += u64::from(header.record_count);
    }

    /// Scans the file from the start, validating every batch (bounds and
    /// CRC), and rebuilds the in-memory contents and indexes from the valid
    /// prefix.
    pub(super) async fn scan(&self, limits: &BatchLimits) -> Result<ScanEnd, StorageError> {
        let file_bytes = self.file_size().await?;
        let mut contents = SegmentContents::empty(self.base);
        let mut position = 0u64;
        let mut problem = None;
        // Bytes the next read must cover: a batch that did not fit the last chunk.
        let mut wanted = 0usize;
        while position < file_bytes && problem.is_none() {
            let rest = file_bytes - position;
            let chunk_len = rest.min(SCAN_CHUNK_BYTES.max(wanted) as u64) as usize;
            let chunk = self.read(position, chunk_len).await?;
            let mut consumed = 0usize;
            wanted = 0;
            for found in batch::batches(&chunk, limits) {
                match found {
                    // Appends continue the segment exactly
                    // (`record_durable_batch`), and `base_offset` is outside
                    // the CRC: a batch elsewhere is damage, and indexing it
                    // would put offsets the segment cannot hold in its index.
                    Ok(found) if found.header.base_offset != contents.next_offset => {
                        problem = Some(BatchError::MalformedRecord(
                            "batch offset does not continue the segment",
                        ));
                        break;
                    }
                    Ok(found) => {
                        let at = position + found.position as u64;
                        Self::index_batch(
                            &mut contents,
                            self.base,
                            self.index_interval_bytes,
                            at,
                            &found.header,
                        );
                        consumed = found.position + found.bytes.len();
                    }
                    Err(BatchError::Truncated { needed, .. })
                        if needed as u64 <= rest - consumed as u64 =>
                    {
                        // The batch continues past this chunk: read again from it.
                        wanted = needed;
                        break;
                    }
                    Err(error) => {
                        problem = Some(error);
                        break;
                    }
                }
            }
            position += consumed as u64;
            if consumed == 0 && wanted == 0 && problem.is_none() {
                problem = Some(BatchError::MalformedRecord("scan made no progress"));
            }
        }
        debug_assert_eq!(contents.size, position);
        self.set_contents(contents);
        Ok(ScanEnd {
            valid_bytes: position,
            file_bytes,
            problem,
        })
    }

    /// Whether any valid batch starts at or after `from` (scanning byte by
    /// byte for a batch header whose CRC holds). Distinguishes a torn tail,
    /// after which nothing valid follows, from damage in the middle of data.
    pub(super) async fn has_valid_batch_at_or_after(
        &self,
        from: u64,
        limits: &BatchLimits,
    ) -> Result<Option<u64>, StorageError> {
        let file_bytes = self.file_size().await?;
        let mut start = from;
        while start < file_bytes {
            let chunk_len = (file_bytes - start).min(SCAN_CHUNK_BYTES as u64) as usize;
            let chunk = self.read(start, chunk_len).await?;
            for at in 0..chunk.len() {
                let candidate = &chunk[at..];
                let Ok(header) = BatchHeader::parse(candidate, limits) else {
                    continue;
                };
                let position = start + at as u64;
                let whole = if candidate.len() >= header.total_bytes() {
                    candidate[..header.total_bytes()].to_vec()
                } else if position + header.total_bytes() as u64 <= file_bytes {
                    self.read(position, header.total_bytes()).await?.to_vec()
                } else {
                    continue;
                };
                if batch::validate(&whole, limits).is_ok() {
                    return Ok(Some(position));
                }
            }
            start += chunk_len as u64;
        }
        Ok(None)
    }

    /// Loads the sealed index files, if present and consistent with the
    /// segment's current length. Returns whether they were used.
    pub(super) async fn load_indexes(&self, disk: &D) -> Result<bool, StorageError> {
        let file_bytes = self.file_size().await?;
        let index_file = read_whole_file(disk, &self.paths.index, INDEX_FILE_BYTES_MAX).await;
        let time_file = read_whole_file(disk, &self.paths.time_index, INDEX_FILE_BYTES_MAX).await;
        let (Ok(Some(index_file)), Ok(Some(time_file))) = (index_file, time_file) else {
            return Ok(false);
        };
        let Ok((index, summary)) = OffsetIndex::decode(&index_file, self.base, file_bytes) else {
            return Ok(false);
        };
        let Ok((time_index, time_summary)) = TimeIndex::decode(&time_file, self.base, file_bytes)
        else {
            return Ok(false);
        };
        if summary != time_summary {
            return Ok(false);
        }
        let mut contents = SegmentContents::empty(self.base);
        contents.size = summary.size_bytes;
        contents.next_offset = summary.next_offset;
        contents.max_timestamp = summary.max_timestamp;
        contents.record_count = summary.record_count;
        contents.index = index;
        contents.time_index = time_index;
        self.set_contents(contents);
        Ok(true)
    }

    /// Writes both sealed index files. Index files are derived data, so a
    /// plain write and sync is enough: a torn one fails its CRC and is rebuilt.
    pub(super) async fn persist_indexes(&self, disk: &D) -> Result<(), StorageError> {
        let (index_file, time_file) = {
            let contents = self.contents.borrow();
            let summary = self.summary_of(&contents);
            (
                contents.index.encode(&summary),
                contents.time_index.encode(&summary),
            )
        };
        for (path, bytes) in [
            (&self.paths.index, index_file),
            (&self.paths.time_index, time_file),
        ] {
            super::disk::write_file_atomically(disk, path, &bytes)
                .await
                .map_err(|error| StorageError::io(path, error))?;
        }
        Ok(())
    }

    fn summary_of(&self, contents: &SegmentContents) -> SegmentSummary {
        SegmentSummary {
            base_offset: self.base,
            size_bytes: contents.size,
            next_offset: contents.next_offset,
            max_timestamp: contents.max_timestamp,
            record_count: contents.record_count,
        }
    }

    /// Reads whole batches containing or following `from`, stopping before
    /// `upper`, up to `max_bytes` (the first batch is returned whole even if
    /// larger, so a reader always progresses).
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] naming the file and position of a batch that
    /// fails its checksum; [`StorageError::Io`] on a read failure.
    pub(super) async fn read_batches(
        &self,
        from: Offset,
        upper: Offset,
        max_bytes: usize,
        limits: &BatchLimits,
    ) -> Result<SegmentRead, StorageError> {
        let (mut position, size) = {
            let contents = self.contents.borrow();
            let relative = u32::try_from(from.0.saturating_sub(self.base.0)).unwrap_or(u32::MAX);
            (u64::from(contents.index.lookup(relative)), contents.size)
        };
        let mut out = SegmentRead::default();
        let mut wanted = 0usize;
        // Where the next batch must start: `base_offset` is outside the CRC,
        // so continuity is what shows a damaged one in a trusted segment.
        // The index points at a batch starting at or before `from`.
        let mut expected: Option<Offset> = None;
        let out_of_place = |header: &BatchHeader, expected: Option<Offset>| match expected {
            Some(expected) => header.base_offset != expected,
            None => header.base_offset > from,
        };
        while position < size {
            if let Some(corrupt_at) = self.corrupt_at.get()
                && position >= corrupt_at
            {
                return Err(self.corrupt(corrupt_at, "batch failed its checksum"));
            }
            let budget = max_bytes.saturating_sub(out.bytes.len()) + READ_SLACK_BYTES;
            let chunk_len = (size - position).min(budget.max(wanted) as u64) as usize;
            let chunk = self.read(position, chunk_len).await?;
            let mut consumed = 0usize;
            let mut done = false;
            wanted = 0;
            for found in batch::batches(&chunk, limits) {
                match found {
                    Ok(BatchAt { header, .. }) if out_of_place(&header, expected) => {
                        let at = position + consumed as u64;
                        self.mark_corrupt(at);
                        return Err(self.corrupt(at, "batch offset does not continue the segment"));
                    }
                    Ok(BatchAt { header, bytes, .. }) => {
                        expected = Some(header.next_offset());
                        if header.next_offset() <= from {
                            consumed += bytes.len();
                            continue;
                        }
                        if header.last_offset() >= upper
                            || (!out.bytes.is_empty() && out.bytes.len() + bytes.len() > max_bytes)
                        {
                            done = true;
                            break;
                        }
                        out.bytes.extend_from_slice(bytes);
                        out.next_offset = Some(header.next_offset());
                        consumed += bytes.len();
                    }
                    Err(BatchError::Truncated { needed, .. })
                        if needed as u64 <= size - position - consumed as u64 =>
                    {
                        done = !out.bytes.is_empty() && out.bytes.len() + needed > max_bytes;
                        wanted = needed;
                        break;
                    }
                    Err(error) => {
                        let at = position + consumed as u64;
                        self.mark_corrupt(at);
                        return Err(self.corrupt(at, &error.to_string()));
                    }
                }
            }
            position += consumed as u64;
            if done || out.bytes.len() >= max_bytes {
                return Ok(out);
            }
            if consumed == 0 && wanted == 0 {
                // The file is shorter than the durable size recorded for it.
                return Err(self.corrupt(position, "segment file shorter than its durable length"));
            }
        }
        out.reached_end = true;
        Ok(out)
    }

    /// Byte position of the batch that contains `offset` (or of the first
    /// batch after it), where a truncation to `offset` cuts; the segment's
    /// size if no batch reaches it.
    ///
    /// # Errors
    /// [`StorageError::Corrupt`] or [`StorageError::Io`] from the reads.
    pub(super) async fn cut_position(
        &self,
        offset: Offset,
        limits: &BatchLimits,
    ) -> Result<u64, StorageError> {
        let (mut position, size) = {
            let contents = self.contents.borrow();
            let relative = u32::try_from(offset.0.saturating_sub(self.base.0)).unwrap_or(u32::MAX);
            (u64::from(contents.index.lookup(relative)), contents.size)
        };
        let mut wanted = 0usize;
        while position < size {
            let chunk_len = (size - position).min((1usize << 20).max(wanted) as u64) as usize;
            let chunk = self.read(position, chunk_len).await?;
            let mut consumed = 0usize;
            wanted = 0;
            for found in batch::batches(&chunk, limits) {
                match found {
                    Ok(BatchAt { header, bytes, .. }) => {
                        if header.next_offset() > offset {
                            return Ok(position + consumed as u64);
                        }
                        consumed += bytes.len();
                    }
                    Err(BatchError::Truncated { needed, .. })
                        if needed as u64 <= size - position - consumed as u64 =>
                    {
                        wanted = needed;
                        break;
                    }
                    Err(error) => {
                        return Err(self.corrupt(position + consumed as u64, &error.to_string()));
                    }
                }
            }
            if consumed == 0 && wanted == 0 {
                return Err(self.corrupt(position, "segment file shorter than its durable length"));
            }
            position += consumed as u64;
        }
        Ok(size)
    }

    /// Reads up to `len` bytes at `position`.
    pub(super) async fn read(
        &self,
        position: u64,
        len: usize,
    ) -> Result<<D::File as DiskFile>::Read, StorageError> {
        self.file()
            .await?
            .read_at(position, len)
            .await
            .map_err(|error| StorageError::io(&self.paths.log, error))
    }

    async fn file_size(&self) -> Result<u64, StorageError> {
        self.file()
            .await?
            .size()
            .await
            .map_err(|error| StorageError::io(&self.paths.log, error))
    }

    fn corrupt(&self, position: u64, reason: &str) -> StorageError {
        StorageError::Corrupt {
            path: self.paths.log.clone(),
            position,
            reason: reason.to_owned(),
        }
    }

    /// The first batch, at or after the index entry below `target`, whose
    /// `max_timestamp` reaches `target`.
    pub(super) async fn find_batch_by_timestamp(
        &self,
        target: TimestampMs,
        upper: Offset,
        limits: &BatchLimits,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let start_offset = {
            let contents = self.contents.borrow();
            if contents.max_timestamp < target {
                return Ok(None);
            }
            self.base
                .plus(u64::from(contents.time_index.lookup(target)))
        };
        let mut from = start_offset;
        loop {
            let read = self.read_batches(from, upper, 1, limits).await?;
            let Some(next_offset) = read.next_offset else {
                return Ok(None);
            };
            let header = BatchHeader::parse(&read.bytes, limits)
                .map_err(|error| self.corrupt(0, &error.to_string()))?;
            if header.max_timestamp >= target {
                return Ok(Some(read.bytes));
            }
            assert!(
                next_offset > from,
                "timestamp scan made no progress at {from}"
            );
            from = next_offset;
        }
    }
}

impl<D: Disk> Drop for Segment<D> {
    fn drop(&mut self) {
        self.disk.open_files().forget(self.file_key);
    }
}
