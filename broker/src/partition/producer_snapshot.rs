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
use corelog_storage::StorageError;
use corelog_storage::disk::{Disk, read_whole_file, write_file_atomically};
use corelog_storage::sealed::{SealedReader, SealedWriter};

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
    let mut writer = SealedWriter::new(MAGIC, VERSION, 14 + table.len() * 150);
    writer.zeros(2);
    writer.u64(offset.0);
    writer.u32(u32::try_from(table.len()).unwrap_or(u32::MAX));
    for (producer_id, entry) in table.entries() {
        writer.i64(*producer_id);
        writer.i16(entry.epoch);
        writer.u8(u8::try_from(entry.batches.len()).unwrap_or(u8::MAX));
        writer.zeros(1);
        writer.i64(entry.last_append.0);
        for batch in &entry.batches {
            writer.i32(batch.first_sequence);
            writer.i32(batch.last_sequence);
            writer.u64(batch.base_offset.0);
            writer.u64(batch.last_offset.0);
            writer.u32(batch.crc);
        }
    }
    writer.seal()
}

/// Decodes a snapshot: the table and the offset it covers, or `None` if damaged.
#[must_use]
pub fn decode(bytes: &[u8]) -> Option<(ProducerStateTable, Offset)> {
    let mut reader = SealedReader::open(bytes, MAGIC, VERSION)?;
    reader.skip(2)?;
    let offset = Offset(reader.u64()?);
    let count = reader.u32()?;
    let mut table = ProducerStateTable::default();
    for _ in 0..count {
        let producer_id = reader.i64()?;
        let epoch = reader.i16()?;
        let batch_count = reader.u8()?;
        reader.skip(1)?;
        let last_append = TimestampMs(reader.i64()?);
        if usize::from(batch_count) > BATCHES_PER_PRODUCER {
            return None;
        }
        let mut batches = VecDeque::with_capacity(usize::from(batch_count));
        for _ in 0..batch_count {
            batches.push_back(BatchRecord {
                first_sequence: reader.i32()?,
                last_sequence: reader.i32()?,
                base_offset: Offset(reader.u64()?),
                last_offset: Offset(reader.u64()?),
                crc: reader.u32()?,
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
    reader.finish()?;
    Some((table, offset))
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
