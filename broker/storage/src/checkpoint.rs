//! The partition's checkpoint: where the log starts and how much of it
//! recovery may trust without scanning.
//!
//! Written atomically (temporary file, sync, rename, directory sync). The
//! log start offset is persisted here before retention unlinks anything, so
//! a crash mid-deletion never resurrects deleted records.
//!
//! ```text
//! magic              [u8; 4]  "CLCP"
//! version            u16      2 (1 lacks the generation, read as 0)
//! clean_shutdown     u8       1 when the log was closed cleanly
//! reserved           u8
//! log_start_offset   u64
//! recovery_point     u64      segments below this base were closed, synced and indexed
//! journal_generation u64      bumped by every truncation (see `journal`)
//! crc                u32      CRC32C of the bytes above
//! ```

use std::path::{Path, PathBuf};

use corelog_wire::types::Offset;

use super::StorageError;
use super::disk::{Disk, read_whole_file, write_file_atomically};
use super::sealed::{SealedReader, SealedWriter};

const FILE_NAME: &str = "checkpoint";
const MAGIC: [u8; 4] = *b"CLCP";
const VERSION: u16 = 2;
const VERSION_1: u16 = 1;
const BYTES: usize = 36;

/// The recovery checkpoint of one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// First offset the log still holds.
    pub log_start_offset: Offset,
    /// Base offset of the segment that was active when this was written:
    /// every segment below it is closed, synced and has sealed indexes.
    pub recovery_point: Offset,
    /// Whether the log was closed cleanly, so the active segment's sealed
    /// indexes can be trusted too.
    pub clean_shutdown: bool,
    /// The log's journal generation: journal entries of an older one were
    /// written before a truncation and are never replayed.
    pub journal_generation: u64,
}

impl Checkpoint {
    /// Path of the checkpoint in a partition directory.
    #[must_use]
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE_NAME)
    }

    /// Encodes the checkpoint.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = SealedWriter::new(MAGIC, VERSION, BYTES);
        writer.u8(u8::from(self.clean_shutdown));
        writer.zeros(1);
        writer.u64(self.log_start_offset.0);
        writer.u64(self.recovery_point.0);
        writer.u64(self.journal_generation);
        let bytes = writer.seal();
        debug_assert_eq!(bytes.len(), BYTES);
        bytes
    }

    /// Decodes a checkpoint, `None` if it is malformed or fails its CRC.
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<Checkpoint> {
        let (mut reader, version) = match SealedReader::open(bytes, MAGIC, VERSION) {
            Some(reader) => (reader, VERSION),
            None => (SealedReader::open(bytes, MAGIC, VERSION_1)?, VERSION_1),
        };
        let clean_shutdown = reader.u8()? == 1;
        reader.skip(1)?;
        let checkpoint = Checkpoint {
            clean_shutdown,
            log_start_offset: Offset(reader.u64()?),
            recovery_point: Offset(reader.u64()?),
            journal_generation: if version == VERSION { reader.u64()? } else { 0 },
        };
        reader.finish()?;
        Some(checkpoint)
    }

    /// Reads the checkpoint of `dir`: `Ok(None)` when absent or unreadable
    /// (recovery then scans everything, which is always safe).
    ///
    /// # Errors
    /// [`StorageError::Io`] when the file exists but cannot be read.
    pub async fn load<D: Disk>(disk: &D, dir: &Path) -> Result<Option<Checkpoint>, StorageError> {
        let path = Self::path(dir);
        let bytes = read_whole_file(disk, &path, BYTES as u64 * 2)
            .await
            .map_err(|error| StorageError::io(&path, error))?;
        let checkpoint = bytes.as_deref().and_then(Checkpoint::decode);
        if bytes.is_some() && checkpoint.is_none() {
            tracing::warn!(path = %path.display(), "checkpoint is corrupt; recovery will scan every segment");
        }
        Ok(checkpoint)
    }

    /// Persists the checkpoint atomically.
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

    #[test]
    fn round_trips_and_rejects_every_byte_flip() {
        let checkpoint = Checkpoint {
            log_start_offset: Offset(1_000),
            recovery_point: Offset(5_000),
            clean_shutdown: true,
            journal_generation: 7,
        };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes), Some(checkpoint));
        for position in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x08;
            assert_eq!(Checkpoint::decode(&damaged), None, "flip at {position}");
        }
    }

    #[test]
    fn a_version_1_checkpoint_reads_as_generation_zero() {
        let mut writer = SealedWriter::new(MAGIC, VERSION_1, 28);
        writer.u8(1);
        writer.zeros(1);
        writer.u64(10);
        writer.u64(20);
        let decoded = Checkpoint::decode(&writer.seal()).expect("version 1 decodes");
        assert_eq!(
            decoded,
            Checkpoint {
                log_start_offset: Offset(10),
                recovery_point: Offset(20),
                clean_shutdown: true,
                journal_generation: 0,
            }
        );
    }
}
