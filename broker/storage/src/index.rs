//! The sparse offset index of one segment, and the sealed file format both
//! segment indexes share.
//!
//! An entry maps the base offset of a batch to its byte position in the
//! segment; one entry is added per `index_interval_bytes` of log, so a read
//! seeks to the nearest entry at or below its offset and scans at most that
//! many bytes forward. Indexes are derived data: a missing, stale or corrupt
//! index file is rebuilt from the segment, never trusted.
//!
//! Sealed file layout (big-endian):
//!
//! ```text
//! magic         [u8; 4]  "CLIX" (offset index) or "CLTI" (time index)
//! version       u16      1
//! reserved      u16
//! segment_bytes u64      length of the .log file the index describes
//! next_offset   u64      offset after the segment's last batch
//! max_timestamp i64      largest batch timestamp in the segment
//! record_count  u64      records in the segment
//! entry_count   u32
//! crc           u32      CRC32C of the file with this field zeroed
//! entries       entry_count × entry size
//! ```

use corelog_wire::types::{Offset, TimestampMs};

/// What a sealed index file says about its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    /// Base offset of the segment.
    pub base_offset: Offset,
    /// Length of the segment's log file.
    pub size_bytes: u64,
    /// Offset after the last batch.
    pub next_offset: Offset,
    /// Largest batch `max_timestamp` in the segment; `i64::MIN` when empty.
    pub max_timestamp: TimestampMs,
    /// Records in the segment.
    pub record_count: u64,
}

pub(super) const SEALED_HEADER_BYTES: usize = 48;
const VERSION: u16 = 1;
const CRC_AT: usize = 44;
/// Bytes of one offset-index entry: relative offset u32, position u32.
const OFFSET_ENTRY_BYTES: usize = 8;
pub(super) const OFFSET_INDEX_MAGIC: [u8; 4] = *b"CLIX";

/// Why a sealed index file was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Wrong magic, version or length.
    #[error("index file is malformed")]
    Malformed,
    /// The CRC does not match.
    #[error("index file fails its checksum")]
    Checksum,
    /// The index describes a different length of log than the file has.
    #[error("index describes {indexed} bytes of log, the segment has {actual}")]
    Stale {
        /// Length recorded in the index.
        indexed: u64,
        /// Length of the segment file.
        actual: u64,
    },
    /// Entries are not increasing or point past the segment.
    #[error("index entries are out of order or out of bounds")]
    BadEntry,
}

/// Seals `entries` with a header describing `summary`.
pub(super) fn seal(
    magic: [u8; 4],
    summary: &SegmentSummary,
    entry_count: usize,
    entries: &[u8],
) -> Vec<u8> {
    let mut file = Vec::with_capacity(SEALED_HEADER_BYTES + entries.len());
    file.extend_from_slice(&magic);
    file.extend_from_slice(&VERSION.to_be_bytes());
    file.extend_from_slice(&0u16.to_be_bytes());
    file.extend_from_slice(&summary.size_bytes.to_be_bytes());
    file.extend_from_slice(&summary.next_offset.0.to_be_bytes());
    file.extend_from_slice(&summary.max_timestamp.0.to_be_bytes());
    file.extend_from_slice(&summary.record_count.to_be_bytes());
    file.extend_from_slice(&(entry_count as u32).to_be_bytes());
    file.extend_from_slice(&0u32.to_be_bytes());
    debug_assert_eq!(file.len(), SEALED_HEADER_BYTES);
    file.extend_from_slice(entries);
    let crc = crc32c::crc32c(&file);
    file[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    file
}

/// Checks a sealed file and returns its summary and entry bytes.
pub(super) fn unseal(
    magic: [u8; 4],
    file: &[u8],
    base_offset: Offset,
    entry_bytes: usize,
    segment_bytes: u64,
) -> Result<(SegmentSummary, &[u8]), IndexError> {
    if file.len() < SEALED_HEADER_BYTES || file[..4] != magic {
        return Err(IndexError::Malformed);
    }
    let u64_at = |at: usize| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&file[at..at + 8]);
        u64::from_be_bytes(raw)
    };
    let u32_at =
        |at: usize| u32::from_be_bytes([file[at], file[at + 1], file[at + 2], file[at + 3]]);
    if u16::from_be_bytes([file[4], file[5]]) != VERSION {
        return Err(IndexError::Malformed);
    }
    let entry_count = u32_at(40) as usize;
    if file.len() != SEALED_HEADER_BYTES + entry_count * entry_bytes {
        return Err(IndexError::Malformed);
    }
    let mut zeroed = file.to_vec();
    zeroed[CRC_AT..CRC_AT + 4].fill(0);
    if crc32c::crc32c(&zeroed) != u32_at(CRC_AT) {
        return Err(IndexError::Checksum);
    }
    let summary = SegmentSummary {
        base_offset,
        size_bytes: u64_at(8),
        next_offset: Offset(u64_at(16)),
        max_timestamp: TimestampMs(u64_at(24) as i64),
        record_count: u64_at(32),
    };
    if summary.size_bytes != segment_bytes {
        return Err(IndexError::Stale {
            indexed: summary.size_bytes,
            actual: segment_bytes,
        });
    }
    if summary.next_offset < base_offset {
        return Err(IndexError::BadEntry);
    }
    Ok((summary, &file[SEALED_HEADER_BYTES..]))
}

/// Sparse offset → position map of one segment, kept in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    /// (offset relative to the segment base, byte position), both increasing.
    entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    /// Records that the batch starting at `relative_offset` sits at `position`.
    ///
    /// # Panics
    /// If the entry does not follow the last one: entries are added in log order.
    pub fn push(&mut self, relative_offset: u32, position: u32) {
        if let Some(&(last_offset, last_position)) = self.entries.last() {
            assert!(
                relative_offset > last_offset && position > last_position,
                "offset index entries must increase"
            );
        }
        self.entries.push((relative_offset, position));
    }

    /// Byte position to start scanning from for `relative_offset`: that of
    /// the last entry at or below it, or 0.
    #[must_use]
    pub fn lookup(&self, relative_offset: u32) -> u32 {
        let after = self
            .entries
            .partition_point(|&(offset, _)| offset <= relative_offset);
        after
            .checked_sub(1)
            .map_or(0, |index| self.entries[index].1)
    }

    /// Entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the index has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The sealed file for this index.
    #[must_use]
    pub fn encode(&self, summary: &SegmentSummary) -> Vec<u8> {
        let mut entries = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY_BYTES);
        for (offset, position) in &self.entries {
            entries.extend_from_slice(&offset.to_be_bytes());
            entries.extend_from_slice(&position.to_be_bytes());
        }
        seal(OFFSET_INDEX_MAGIC, summary, self.entries.len(), &entries)
    }

    /// Reads a sealed file, checking it against the segment it indexes.
    ///
    /// # Errors
    /// An [`IndexError`] when the file cannot be trusted; rebuild instead.
    pub fn decode(
        file: &[u8],
        base_offset: Offset,
        segment_bytes: u64,
    ) -> Result<(OffsetIndex, SegmentSummary), IndexError> {
        let (summary, entries) = unseal(
            OFFSET_INDEX_MAGIC,
            file,
            base_offset,
            OFFSET_ENTRY_BYTES,
            segment_bytes,
        )?;
        let mut index = OffsetIndex::default();
        for entry in entries.chunks_exact(OFFSET_ENTRY_BYTES) {
            let offset = u32::from_be_bytes([entry[0], entry[1], entry[2], entry[3]]);
            let position = u32::from_be_bytes([entry[4], entry[5], entry[6], entry[7]]);
            let follows = index
                .entries
                .last()
                .is_none_or(|&(last_offset, last_position)| {
                    offset > last_offset && position > last_position
                });
            if !follows
                || u64::from(position) >= segment_bytes
                || base_offset.plus(u64::from(offset)) >= summary.next_offset
            {
                return Err(IndexError::BadEntry);
            }
            index.entries.push((offset, position));
        }
        Ok((index, summary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(size_bytes: u64) -> SegmentSummary {
        SegmentSummary {
            base_offset: Offset(100),
            size_bytes,
            next_offset: Offset(200),
            max_timestamp: TimestampMs(5),
            record_count: 100,
        }
    }

    #[test]
    fn lookup_finds_the_entry_at_or_below() {
        let mut index = OffsetIndex::default();
        index.push(10, 4096);
        index.push(20, 8192);
        assert_eq!(index.lookup(0), 0);
        assert_eq!(index.lookup(9), 0);
        assert_eq!(index.lookup(10), 4096);
        assert_eq!(index.lookup(19), 4096);
        assert_eq!(index.lookup(25), 8192);
    }

    #[test]
    fn sealed_file_round_trips_and_detects_every_byte_flip() {
        let mut index = OffsetIndex::default();
        index.push(10, 4096);
        index.push(20, 8192);
        let file = index.encode(&summary(10_000));
        let (decoded, decoded_summary) = OffsetIndex::decode(&file, Offset(100), 10_000).unwrap();
        assert_eq!(decoded, index);
        assert_eq!(decoded_summary, summary(10_000));
        for position in 0..file.len() {
            let mut damaged = file.clone();
            damaged[position] ^= 0x40;
            assert!(
                OffsetIndex::decode(&damaged, Offset(100), 10_000).is_err(),
                "flip at {position} went unnoticed"
            );
        }
    }

    #[test]
    fn index_of_a_different_segment_length_is_stale() {
        let file = OffsetIndex::default().encode(&summary(10_000));
        assert_eq!(
            OffsetIndex::decode(&file, Offset(100), 12_000),
            Err(IndexError::Stale {
                indexed: 10_000,
                actual: 12_000
            })
        );
    }
}
