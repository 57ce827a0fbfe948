//! The sparse time index of one segment: answers "first offset whose
//! timestamp is at or after T" without scanning the whole segment.
//!
//! An entry `(timestamp, relative_offset)` says every batch before
//! `relative_offset` has a `max_timestamp` of at most `timestamp`. Entries
//! are added only when the segment's running maximum grows, at most one per
//! `index_interval_bytes`, so timestamps and offsets both increase. A lookup
//! for T starts at the last entry whose timestamp is below T.

use corelog_wire::types::{Offset, TimestampMs};

use super::index::{IndexError, SegmentSummary, seal, unseal};

const TIME_INDEX_MAGIC: [u8; 4] = *b"CLTI";
/// Bytes of one entry: timestamp i64, relative offset u32.
const TIME_ENTRY_BYTES: usize = 12;

/// Sparse timestamp → offset map of one segment, kept in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    /// Records that batches before `relative_offset` have timestamps of at most `timestamp`.
    ///
    /// # Panics
    /// If the entry does not follow the last one.
    pub fn push(&mut self, timestamp: TimestampMs, relative_offset: u32) {
        if let Some(&(last_timestamp, last_offset)) = self.entries.last() {
            assert!(
                timestamp.0 > last_timestamp && relative_offset > last_offset,
                "time index entries must increase"
            );
        }
        self.entries.push((timestamp.0, relative_offset));
    }

    /// The timestamp of the last entry, if any.
    #[must_use]
    pub fn last_timestamp(&self) -> Option<TimestampMs> {
        self.entries
            .last()
            .map(|&(timestamp, _)| TimestampMs(timestamp))
    }

    /// Relative offset to start scanning from for the first batch with
    /// `max_timestamp >= target`: that of the last entry below `target`, or 0.
    #[must_use]
    pub fn lookup(&self, target: TimestampMs) -> u32 {
        let after = self
            .entries
            .partition_point(|&(timestamp, _)| timestamp < target.0);
        after
            .checked_sub(1)
            .map_or(0, |index| self.entries[index].1)
    }

    /// The sealed file for this index.
    #[must_use]
    pub fn encode(&self, summary: &SegmentSummary) -> Vec<u8> {
        let mut entries = Vec::with_capacity(self.entries.len() * TIME_ENTRY_BYTES);
        for (timestamp, offset) in &self.entries {
            entries.extend_from_slice(&timestamp.to_be_bytes());
            entries.extend_from_slice(&offset.to_be_bytes());
        }
        seal(TIME_INDEX_MAGIC, summary, self.entries.len(), &entries)
    }

    /// Reads a sealed file, checking it against the segment it indexes.
    ///
    /// # Errors
    /// An [`IndexError`] when the file cannot be trusted; rebuild instead.
    pub fn decode(
        file: &[u8],
        base_offset: Offset,
        segment_bytes: u64,
    ) -> Result<(TimeIndex, SegmentSummary), IndexError> {
        let (summary, entries) = unseal(
            TIME_INDEX_MAGIC,
            file,
            base_offset,
            TIME_ENTRY_BYTES,
            segment_bytes,
        )?;
        let mut index = TimeIndex::default();
        for entry in entries.chunks_exact(TIME_ENTRY_BYTES) {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&entry[..8]);
            let timestamp = i64::from_be_bytes(raw);
            let offset = u32::from_be_bytes([entry[8], entry[9], entry[10], entry[11]]);
            let follows = index
                .entries
                .last()
                .is_none_or(|&(last_timestamp, last_offset)| {
                    timestamp > last_timestamp && offset > last_offset
                });
            if !follows || base_offset.plus(u64::from(offset)) >= summary.next_offset {
                return Err(IndexError::BadEntry);
            }
            index.entries.push((timestamp, offset));
        }
        Ok((index, summary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_starts_at_the_last_entry_below_the_target() {
        let mut index = TimeIndex::default();
        index.push(TimestampMs(1_000), 10);
        index.push(TimestampMs(2_000), 20);
        assert_eq!(index.lookup(TimestampMs(500)), 0);
        assert_eq!(index.lookup(TimestampMs(1_000)), 0);
        assert_eq!(index.lookup(TimestampMs(1_001)), 10);
        assert_eq!(index.lookup(TimestampMs(9_999)), 20);
    }

    #[test]
    fn sealed_file_round_trips() {
        let mut index = TimeIndex::default();
        index.push(TimestampMs(1_000), 10);
        let summary = SegmentSummary {
            base_offset: Offset(0),
            size_bytes: 4096,
            next_offset: Offset(50),
            max_timestamp: TimestampMs(1_500),
            record_count: 50,
        };
        let file = index.encode(&summary);
        assert_eq!(
            TimeIndex::decode(&file, Offset(0), 4096),
            Ok((index, summary))
        );
        assert!(TimeIndex::decode(&file[..file.len() - 1], Offset(0), 4096).is_err());
    }
}
