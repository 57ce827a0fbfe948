//! Producer-state snapshots: the idempotent-producer table as of a log
//! offset, so a restart replays only the log after it instead of the whole
//! partition. Written atomically; a damaged snapshot is ignored (the table is
//! then rebuilt from the log start, which is slower but exact).
//!
//! ```text
//! magic "CLPS" · version u16 · reserved u16 · offset u64 (log end covered)
//! · producer_count u32
//! per producer: producer_id i64 · epoch i16 · batch_count u8 · reserved u8
//!               · last_append_ms i64
//!   per batch:  first_sequence i32 · last_sequence i32 · base_offset u64
//!               · last_offset u64 · crc u32
//! crc u32 (CRC32C of everything before it)
//! ```

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use corelog_wire::types::{Offset, TimestampMs};

use super::producer_state::{BATCHES_PER_PRODUCER, BatchRecord, ProducerEntry, ProducerStateTable};
use crate::storage::StorageError;
use crate::storage::disk::{Disk, read_whole_file, write_file_atomically};

const FILE_NAME: &str = "producer-state";
const MAGIC: [u8; 4] = *b"CLPS";
const VERSION: u16 = 1;
/// Bound on a snapshot file: producers are expired, but a partition may
/// still see many; 64 MiB holds about 400,000 producers with five batches each.
const SNAPSHOT_BYTES_MAX: u64 = 64 << 20;

/// Path of the snapshot in a partition directory.
#[must_use]
pub fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Encodes `table` as of log offset `offset`.
#[must_use]
pub fn encode(table: &ProducerStateTable, offset: Offset) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(24 + table.len() * 150);
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&VERSION.to_be_bytes());
    bytes.extend_from_slice(&0u16.to_be_bytes());
    bytes.extend_from_slice(&offset.0.to_be_bytes());
    bytes.extend_from_slice(&(table.len() as u32).to_be_bytes());
    for (producer_id, entry) in table.entries() {
        bytes.extend_from_slice(&producer_id.to_be_bytes());
        bytes.extend_from_slice(&entry.epoch.to_be_bytes());
        bytes.push(entry.batches.len() as u8);
        bytes.push(0);
        bytes.extend_from_slice(&entry.last_append.0.to_be_bytes());
        for batch in &entry.batches {
            bytes.extend_from_slice(&batch.first_sequence.to_be_bytes());
            bytes.extend_from_slice(&batch.last_sequence.to_be_bytes());
            bytes.extend_from_slice(&batch.base_offset.0.to_be_bytes());
            bytes.extend_from_slice(&batch.last_offset.0.to_be_bytes());
            bytes.extend_from_slice(&batch.crc.to_be_bytes());
        }
    }
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_be_bytes());
    bytes
}

/// A reader of big-endian fields that returns `None` past the end.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let field = self.bytes.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(field)
    }
}

/// Decodes a snapshot: the table and the offset it covers, or `None` if damaged.
#[must_use]
pub fn decode(bytes: &[u8]) -> Option<(ProducerStateTable, Offset)> {
    if bytes.len() < 24 {
        return None;
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut fields = Fields { bytes: body, at: 0 };
    if fields.take::<4>()? != MAGIC || u16::from_be_bytes(fields.take()?) != VERSION {
        return None;
    }
    fields.take::<2>()?;
    let offset = Offset(u64::from_be_bytes(fields.take()?));
    let count = u32::from_be_bytes(fields.take()?);
    let mut table = ProducerStateTable::default();
    for _ in 0..count {
        let producer_id = i64::from_be_bytes(fields.take()?);
        let epoch = i16::from_be_bytes(fields.take()?);
        let [batch_count] = fields.take::<1>()?;
        fields.take::<1>()?;
        let last_append = TimestampMs(i64::from_be_bytes(fields.take()?));
        if usize::from(batch_count) > BATCHES_PER_PRODUCER {
            return None;
        }
        let mut batches = VecDeque::with_capacity(usize::from(batch_count));
        for _ in 0..batch_count {
            batches.push_back(BatchRecord {
                first_sequence: i32::from_be_bytes(fields.take()?),
                last_sequence: i32::from_be_bytes(fields.take()?),
                base_offset: Offset(u64::from_be_bytes(fields.take()?)),
                last_offset: Offset(u64::from_be_bytes(fields.take()?)),
                crc: u32::from_be_bytes(fields.take()?),
            });
        }
        table.insert(
            producer_id,
            ProducerEntry {
                epoch,
                batches,
                last_append,
            },
        );
    }
    (fields.at == body.len()).then_some((table, offset))
}

/// Loads the snapshot of `dir`, if present and intact.
///
/// # Errors
/// [`StorageError::Io`] when the file exists but cannot be read.
pub async fn load<D: Disk>(
    disk: &D,
    dir: &Path,
) -> Result<Option<(ProducerStateTable, Offset)>, StorageError> {
    let path = snapshot_path(dir);
    let bytes = read_whole_file(disk, &path, SNAPSHOT_BYTES_MAX)
        .await
        .map_err(|error| StorageError::io(&path, error))?;
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let decoded = decode(&bytes);
    if decoded.is_none() {
        tracing::warn!(path = %path.display(), "producer-state snapshot is damaged; rebuilding from the log");
    }
    Ok(decoded)
}

/// Writes the snapshot of `dir` atomically.
///
/// # Errors
/// [`StorageError::Io`] on a write or sync failure.
pub async fn store<D: Disk>(
    disk: &D,
    dir: &Path,
    table: &ProducerStateTable,
    offset: Offset,
) -> Result<(), StorageError> {
    let path = snapshot_path(dir);
    write_file_atomically(disk, &path, &encode(table, offset))
        .await
        .map_err(|error| StorageError::io(&path, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let mut table = ProducerStateTable::default();
        let batch = BatchRecord {
            first_sequence: 0,
            last_sequence: 4,
            base_offset: Offset(10),
            last_offset: Offset(14),
            crc: 0xdead_beef,
        };
        table.insert(
            42,
            ProducerEntry {
                epoch: 3,
                batches: VecDeque::from([batch]),
                last_append: TimestampMs(99),
            },
        );
        let bytes = encode(&table, Offset(15));
        assert_eq!(decode(&bytes), Some((table, Offset(15))));
        for position in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x20;
            assert_eq!(decode(&damaged), None, "flip at {position}");
        }
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
    }
}
