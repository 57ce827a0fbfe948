//! Opening a partition directory: decide what to trust, validate the rest,
//! cut a torn tail, and refuse loudly what cannot be explained by a crash.
//!
//! - Segments below the checkpoint's recovery point were closed, synced and
//!   indexed before the checkpoint was written; their sealed indexes are
//!   loaded, and rebuilt by a scan if missing, stale or damaged. Their
//!   batches are checked again on every read.
//! - The active segment (and any segment at or above the recovery point) is
//!   scanned batch by batch (bounds and CRC). In the active segment,
//!   damage followed by nothing valid within one flush is a torn write and is
//!   truncated; damage followed by valid batches further away cannot be a
//!   torn write, so opening fails with the file and position.
//! - A closed segment that fails its scan is kept but marked: reads reaching
//!   the damage get [`StorageError::Corrupt`], never the bytes.
//! - Segments wholly below the log start (retention persisted the new start
//!   but crashed before unlinking) are removed.

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use corelog_wire::types::{Offset, TimestampMs};

use super::checkpoint::Checkpoint;
use super::deletion_ledger::DeletionLedger;
use super::disk::{Disk, DiskFile, align_down};
use super::segment::{Segment, SegmentPaths};
use super::{FLUSH_BYTES_CAP, LogConfig, StorageError};

/// What recovery found.
pub(super) struct Recovered<D: Disk> {
    pub segments: BTreeMap<Offset, Rc<Segment<D>>>,
    pub log_start: Offset,
    pub ledger: DeletionLedger,
    /// Bytes of the active segment's partial last block.
    pub tail_block: Vec<u8>,
    /// The checkpoint's journal generation (0 without one).
    pub journal_generation: u64,
}

/// Recovers the log in `dir`, creating an empty one if there is none.
pub(super) async fn recover<D: Disk>(
    disk: &D,
    dir: &Path,
    config: &LogConfig,
    now: TimestampMs,
) -> Result<Recovered<D>, StorageError> {
    disk.create_dir_all(dir)
        .await
        .map_err(|error| StorageError::io(dir, error))?;
    let names = disk
        .list_dir(dir)
        .await
        .map_err(|error| StorageError::io(dir, error))?;
    for leftover in names.iter().filter(|name| name.ends_with(".tmp")) {
        let path = dir.join(leftover);
        disk.remove(&path)
            .await
            .map_err(|error| StorageError::io(&path, error))?;
    }
    let mut bases: Vec<Offset> = names
        .iter()
        .filter_map(|name| SegmentPaths::parse_log_name(name))
        .collect();
    bases.sort_unstable();

    let checkpoint = Checkpoint::load(disk, dir).await?;
    let ledger = DeletionLedger::load(disk, dir).await?;
    let log_start = checkpoint
        .map(|checkpoint| checkpoint.log_start_offset)
        .or_else(|| bases.first().copied())
        .unwrap_or(Offset(0));

    // A segment whose successor starts at or below the log start holds only
    // deleted records.
    let mut kept = Vec::with_capacity(bases.len());
    for (index, base) in bases.iter().enumerate() {
        let wholly_deleted = bases.get(index + 1).is_some_and(|next| *next <= log_start);
        if wholly_deleted {
            remove_segment_files(disk, dir, *base).await?;
        } else {
            kept.push(*base);
        }
    }

    let mut segments = BTreeMap::new();
    if kept.is_empty() {
        let segment =
            Segment::create(disk, dir, log_start, config.index_interval_bytes, now).await?;
        disk.sync_dir(dir)
            .await
            .map_err(|error| StorageError::io(dir, error))?;
        segments.insert(log_start, Rc::new(segment));
    }
    let recovery_point = checkpoint.map_or(Offset(0), |checkpoint| checkpoint.recovery_point);
    let clean_shutdown = checkpoint.is_some_and(|checkpoint| checkpoint.clean_shutdown);
    for (index, base) in kept.iter().enumerate() {
        let is_active = index + 1 == kept.len();
        let segment = Segment::open(disk, dir, *base, config.index_interval_bytes, now).await?;
        let trusted = *base < recovery_point || (is_active && clean_shutdown);
        if !(trusted && segment.load_indexes(disk).await?) {
            validate_segment(disk, &segment, is_active, config).await?;
        }
        segments.insert(*base, Rc::new(segment));
    }
    check_continuity(&segments)?;

    let active = segments
        .values()
        .next_back()
        .expect("recovery always leaves a segment");
    let log_start = log_start.max(*segments.keys().next().expect("a segment"));
    let tail_block = read_tail_block(active).await?;
    Ok(Recovered {
        segments,
        log_start,
        ledger,
        tail_block,
        journal_generation: match checkpoint {
            Some(checkpoint) => checkpoint.journal_generation,
            // A new log may be in the directory of one this shard removed
            // (a replica that moved away and came back), whose frames the
            // shard journal may still hold under this path at generations
            // counted from 0: starting at the clock's milliseconds puts
            // this log above them, and replay applies only the newest
            // generation.
            None if bases.is_empty() => u64::try_from(now.0).unwrap_or(0),
            None => 0,
        },
    })
}

/// Scans a segment that recovery cannot trust, and repairs or marks it.
async fn validate_segment<D: Disk>(
    disk: &D,
    segment: &Segment<D>,
    is_active: bool,
    config: &LogConfig,
) -> Result<(), StorageError> {
    let limits = &config.batch_limits;
    let scan = segment.scan(limits).await?;
    let path = &segment.paths().log;
    if scan.valid_bytes < scan.file_bytes {
        let reason = scan
            .problem
            .map_or_else(String::new, |problem| problem.to_string());
        if is_active {
            // One flush writes at most FLUSH_BYTES_CAP plus the partial blocks at
            // both ends; a valid batch beyond that was written by a later, completed
            // flush, so the damage before it is not a torn write.
            let alignment = segment.alignment();
            let torn_window = FLUSH_BYTES_CAP as u64 + 2 * alignment;
            let beyond = scan.valid_bytes + torn_window;
            if let Some(valid_at) = segment.has_valid_batch_at_or_after(beyond, limits).await? {
                return Err(StorageError::Corrupt {
                    path: path.clone(),
                    position: scan.valid_bytes,
                    reason: format!(
                        "{reason}; valid batches follow at byte {valid_at}, so this is not a torn \
                         write: restore the partition from a replica"
                    ),
                });
            }
            tracing::warn!(
                path = %path.display(),
                valid_bytes = scan.valid_bytes,
                dropped_bytes = scan.file_bytes - scan.valid_bytes,
                %reason,
                "truncating the torn tail of the active segment"
            );
            truncate_to(segment, scan.valid_bytes).await?;
        } else if tail_is_zeros(segment, scan.valid_bytes, scan.file_bytes).await? {
            // Padding left by a roll whose truncate did not reach the disk.
            truncate_to(segment, scan.valid_bytes).await?;
        } else {
            tracing::error!(
                path = %path.display(),
                position = scan.valid_bytes,
                %reason,
                "closed segment fails validation; reads past this point are refused"
            );
            segment.mark_corrupt(scan.valid_bytes);
            return Ok(());
        }
    }
    if !is_active {
        segment.persist_indexes(disk).await?;
    }
    Ok(())
}

async fn truncate_to<D: Disk>(segment: &Segment<D>, len: u64) -> Result<(), StorageError> {
    let path = &segment.paths().log;
    let file = segment.file().await?;
    file.truncate(len)
        .await
        .map_err(|error| StorageError::io(path, error))?;
    file.sync_data()
        .await
        .map_err(|error| StorageError::io(path, error))
}

async fn tail_is_zeros<D: Disk>(
    segment: &Segment<D>,
    from: u64,
    to: u64,
) -> Result<bool, StorageError> {
    let mut position = from;
    while position < to {
        let len = (to - position).min(1 << 20) as usize;
        let bytes = segment.read(position, len).await?;
        if bytes.is_empty() || bytes.iter().any(|byte| *byte != 0) {
            return Ok(false);
        }
        position += bytes.len() as u64;
    }
    Ok(true)
}

fn check_continuity<D: Disk>(
    segments: &BTreeMap<Offset, Rc<Segment<D>>>,
) -> Result<(), StorageError> {
    let mut previous: Option<&Rc<Segment<D>>> = None;
    for segment in segments.values() {
        if let Some(previous) = previous
            && previous.next_offset() > segment.base()
        {
            return Err(StorageError::Corrupt {
                path: segment.paths().log.clone(),
                position: 0,
                reason: format!(
                    "segment starts at offset {} but the previous one ends at {}",
                    segment.base(),
                    previous.next_offset()
                ),
            });
        }
        previous = Some(segment);
    }
    Ok(())
}

/// The partial last block of a segment, which the appender rewrites with
/// the next flush.
pub(super) async fn read_tail_block<D: Disk>(
    segment: &Segment<D>,
) -> Result<Vec<u8>, StorageError> {
    let size = segment.size();
    let block_start = align_down(size, segment.alignment());
    if block_start == size {
        return Ok(Vec::new());
    }
    let bytes = segment
        .read(block_start, (size - block_start) as usize)
        .await?;
    if bytes.len() as u64 != size - block_start {
        return Err(StorageError::Corrupt {
            path: segment.paths().log.clone(),
            position: block_start,
            reason: "segment shorter than its recovered length".to_owned(),
        });
    }
    Ok(bytes.to_vec())
}

/// Removes a segment's log and index files.
pub(super) async fn remove_segment_files<D: Disk>(
    disk: &D,
    dir: &Path,
    base: Offset,
) -> Result<(), StorageError> {
    let paths = SegmentPaths::new(dir, base);
    for path in [&paths.log, &paths.index, &paths.time_index] {
        match disk.remove(path).await {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(StorageError::io(path, error)),
        }
    }
    Ok(())
}
