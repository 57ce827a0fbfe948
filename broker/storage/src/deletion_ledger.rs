//! The deletion ledger: a small persisted record of every range of offsets
//! the partition deleted, how much it held and why, so that a reader that
//! asks for a deleted offset learns what it missed and why, not just that it
//! is gone.
//!
//! Bounded: the newest [`LEDGER_ENTRIES_MAX`] deletions are kept. Written
//! atomically before the deletion it records takes effect. The ledger is
//! informational: a damaged ledger file is reported and replaced by an empty
//! one rather than keeping the partition offline.
//!
//! ```text
//! magic [u8; 4] "CLDL" · version u16 · reserved u16 · entry_count u32
//! entries: start_offset u64 · end_offset u64 · bytes u64 · record_count u64
//!          · cause u8 · reserved [u8; 7] · deleted_at_ms i64
//! crc u32: CRC32C of everything before it
//! ```

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use corelog_wire::types::{Offset, TimestampMs};

use super::StorageError;
use super::disk::{Disk, read_whole_file, write_file_atomically};
use super::sealed::{SealedReader, SealedWriter};

/// Deletions remembered per partition.
pub const LEDGER_ENTRIES_MAX: usize = 1024;
/// Ranges returned to a reader at most: contiguous ranges with one cause are
/// merged first, so this is rarely reached.
pub const GAP_RANGES_MAX: usize = 32;

const FILE_NAME: &str = "deletions";
const MAGIC: [u8; 4] = *b"CLDL";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 12;
const ENTRY_BYTES: usize = 48;

/// Why records were deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeletionCause {
    /// Older than the topic's retention time.
    RetentionTime,
    /// The partition exceeded its retention size.
    RetentionSize,
    /// Replaced by a compacted segment (only superseded records).
    Compaction,
    /// Uncommitted records removed when a replica reconciled with its leader.
    Truncation,
    /// Deleted by an operator.
    Admin,
}

impl DeletionCause {
    fn code(self) -> u8 {
        match self {
            DeletionCause::RetentionTime => 1,
            DeletionCause::RetentionSize => 2,
            DeletionCause::Compaction => 3,
            DeletionCause::Truncation => 4,
            DeletionCause::Admin => 5,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => DeletionCause::RetentionTime,
            2 => DeletionCause::RetentionSize,
            3 => DeletionCause::Compaction,
            4 => DeletionCause::Truncation,
            5 => DeletionCause::Admin,
            _ => return None,
        })
    }

    /// Stable name, as shown to users.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            DeletionCause::RetentionTime => "retention-time",
            DeletionCause::RetentionSize => "retention-size",
            DeletionCause::Compaction => "compaction",
            DeletionCause::Truncation => "truncation",
            DeletionCause::Admin => "admin",
        }
    }
}

/// One deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeletedRange {
    /// First deleted offset.
    pub start_offset: Offset,
    /// Offset after the last deleted one.
    pub end_offset: Offset,
    /// Bytes of log deleted.
    pub bytes: u64,
    /// Records deleted.
    pub record_count: u64,
    /// Why.
    pub cause: DeletionCause,
    /// When.
    pub deleted_at: TimestampMs,
}

/// The ledger of one partition, in memory and on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeletionLedger {
    entries: VecDeque<DeletedRange>,
}

impl DeletionLedger {
    /// Path of the ledger in a partition directory.
    #[must_use]
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    /// Adds a deletion, forgetting the oldest beyond the bound. A repeat of
    /// the newest entry (a deletion retried after a crash) is not added twice.
    pub fn record(&mut self, deletion: DeletedRange) {
        assert!(deletion.start_offset <= deletion.end_offset);
        let repeat = self.entries.back().is_some_and(|last| {
            last.start_offset == deletion.start_offset && last.end_offset == deletion.end_offset
        });
        if repeat {
            return;
        }
        self.entries.push_back(deletion);
        while self.entries.len() > LEDGER_ENTRIES_MAX {
            self.entries.pop_front();
        }
    }

    /// Deletions overlapping `[from, to)`, contiguous ones with the same
    /// cause merged, at most [`GAP_RANGES_MAX`] (the newest kept).
    #[must_use]
    pub fn overlapping(&self, from: Offset, to: Offset) -> Vec<DeletedRange> {
        let mut merged: Vec<DeletedRange> = Vec::new();
        for entry in self
            .entries
            .iter()
            .filter(|entry| entry.start_offset < to && entry.end_offset > from)
        {
            match merged.last_mut() {
                Some(last)
                    if last.cause == entry.cause && last.end_offset == entry.start_offset =>
                {
                    last.end_offset = entry.end_offset;
                    last.bytes += entry.bytes;
                    last.record_count += entry.record_count;
                    last.deleted_at = last.deleted_at.max(entry.deleted_at);
                }
                _ => merged.push(*entry),
            }
        }
        let excess = merged.len().saturating_sub(GAP_RANGES_MAX);
        merged.drain(..excess);
        merged
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &DeletedRange> {
        self.entries.iter()
    }

    /// Encodes the ledger file.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = SealedWriter::new(MAGIC, VERSION, 6 + self.entries.len() * ENTRY_BYTES);
        writer.zeros(2);
        writer.u32(u32::try_from(self.entries.len()).unwrap_or(u32::MAX));
        for entry in &self.entries {
            writer.u64(entry.start_offset.0);
            writer.u64(entry.end_offset.0);
            writer.u64(entry.bytes);
            writer.u64(entry.record_count);
            writer.u8(entry.cause.code());
            writer.zeros(7);
            writer.i64(entry.deleted_at.0);
        }
        writer.seal()
    }

    /// Decodes a ledger file; `None` if malformed or failing its CRC.
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<DeletionLedger> {
        let mut reader = SealedReader::open(bytes, MAGIC, VERSION)?;
        reader.skip(2)?;
        let count = usize::try_from(reader.u32()?).ok()?;
        if count > LEDGER_ENTRIES_MAX || reader.remaining() != count * ENTRY_BYTES {
            return None;
        }
        let mut ledger = DeletionLedger::default();
        for _ in 0..count {
            let start_offset = Offset(reader.u64()?);
            let end_offset = Offset(reader.u64()?);
            let bytes = reader.u64()?;
            let record_count = reader.u64()?;
            let cause = DeletionCause::from_code(reader.u8()?)?;
            reader.skip(7)?;
            let deleted_at = TimestampMs(reader.i64()?);
            if start_offset > end_offset {
                return None;
            }
            ledger.entries.push_back(DeletedRange {
                start_offset,
                end_offset,
                bytes,
                record_count,
                cause,
                deleted_at,
            });
        }
        reader.finish()?;
        Some(ledger)
    }

    /// Loads the ledger of `dir`; empty when absent or damaged (reported).
    ///
    /// # Errors
    /// [`StorageError::Io`] when the file exists but cannot be read.
    pub async fn load<D: Disk>(disk: &D, dir: &Path) -> Result<DeletionLedger, StorageError> {
        let path = Self::path(dir);
        let bound = (HEADER_BYTES + LEDGER_ENTRIES_MAX * ENTRY_BYTES + 4) as u64;
        let bytes = read_whole_file(disk, &path, bound)
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        let Some(bytes) = bytes else {
            return Ok(DeletionLedger::default());
        };
        Ok(DeletionLedger::decode(&bytes).unwrap_or_else(|| {
            tracing::warn!(path = %path.display(), "deletion ledger is damaged; starting an empty one");
            DeletionLedger::default()
        }))
    }

    /// Persists the ledger atomically.
    ///
    /// # Errors
    /// [`StorageError::Io`] on a write or sync failure.
    pub async fn store<D: Disk>(&self, disk: &D, dir: &Path) -> Result<(), StorageError> {
        let path = Self::path(dir);
        write_file_atomically(disk, &path, &self.encode())
            .await
            .map_err(|error| StorageError::io(&path, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deletion(start: u64, end: u64, cause: DeletionCause) -> DeletedRange {
        DeletedRange {
            start_offset: Offset(start),
            end_offset: Offset(end),
            bytes: (end - start) * 100,
            record_count: end - start,
            cause,
            deleted_at: TimestampMs(start as i64),
        }
    }

    #[test]
    fn overlapping_merges_contiguous_ranges_with_one_cause() {
        let mut ledger = DeletionLedger::default();
        ledger.record(deletion(0, 10, DeletionCause::RetentionTime));
        ledger.record(deletion(10, 20, DeletionCause::RetentionTime));
        ledger.record(deletion(20, 30, DeletionCause::RetentionSize));
        let gap = ledger.overlapping(Offset(5), Offset(30));
        assert_eq!(gap.len(), 2);
        assert_eq!(
            (gap[0].start_offset, gap[0].end_offset),
            (Offset(0), Offset(20))
        );
        assert_eq!(gap[0].record_count, 20);
        assert_eq!(gap[1].cause, DeletionCause::RetentionSize);
        assert!(ledger.overlapping(Offset(30), Offset(40)).is_empty());
    }

    #[test]
    fn ledger_is_bounded_and_round_trips() {
        let mut ledger = DeletionLedger::default();
        for index in 0..(LEDGER_ENTRIES_MAX as u64 + 5) {
            ledger.record(deletion(index * 10, index * 10 + 10, DeletionCause::Admin));
        }
        assert_eq!(ledger.entries().count(), LEDGER_ENTRIES_MAX);
        assert_eq!(
            ledger.entries().next().map(|first| first.start_offset),
            Some(Offset(50))
        );
        let bytes = ledger.encode();
        assert_eq!(DeletionLedger::decode(&bytes), Some(ledger));
        let mut damaged = bytes;
        damaged[100] ^= 1;
        assert_eq!(DeletionLedger::decode(&damaged), None);
    }
}
