//! Persistence of the node's metadata: the topic catalog and the end of the
//! producer-id block handed out so far, in one file written atomically.
//!
//! ```text
//! magic "CLMD" · crc u32 (CRC32C of the JSON) · JSON document
//! ```
//!
//! JSON so that an operator can read it; the CRC so that damage is
//! detected rather than half-read. A damaged file stops the broker with an
//! error naming it: topics cannot be guessed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::catalog::Catalog;
use crate::storage::StorageError;
use crate::storage::disk::{Disk, read_whole_file, write_file_atomically};

const FILE_NAME: &str = "metadata";
const MAGIC: [u8; 4] = *b"CLMD";
const METADATA_BYTES_MAX: u64 = 64 << 20;

/// What the node persists about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetadata {
    /// Topics.
    pub catalog: Catalog,
    /// Producer ids below this were (or may have been) handed out.
    pub producer_id_block_end: i64,
}

/// Path of the metadata file in the data directory.
#[must_use]
pub fn metadata_path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Encodes the metadata file.
///
/// # Panics
/// Never: the types serialise to JSON infallibly.
#[must_use]
pub fn encode(metadata: &NodeMetadata) -> Vec<u8> {
    let json = serde_json::to_vec_pretty(metadata).expect("metadata serialises");
    let mut bytes = Vec::with_capacity(json.len() + 8);
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&crc32c::crc32c(&json).to_be_bytes());
    bytes.extend_from_slice(&json);
    bytes
}

/// Decodes the metadata file.
///
/// # Errors
/// A message saying what is wrong.
pub fn decode(bytes: &[u8]) -> Result<NodeMetadata, String> {
    if bytes.len() < 8 || bytes[..4] != MAGIC {
        return Err("not a corelog metadata file".to_owned());
    }
    let stored = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let json = &bytes[8..];
    if crc32c::crc32c(json) != stored {
        return Err("checksum mismatch".to_owned());
    }
    serde_json::from_slice(json).map_err(|error| format!("unreadable: {error}"))
}

/// Loads the node's metadata; empty for a new data directory.
///
/// # Errors
/// [`StorageError::Corrupt`] naming the file when it is damaged;
/// [`StorageError::Io`] when it cannot be read.
pub async fn load<D: Disk>(disk: &D, data_dir: &Path) -> Result<NodeMetadata, StorageError> {
    let path = metadata_path(data_dir);
    let bytes = read_whole_file(disk, &path, METADATA_BYTES_MAX)
        .await
        .map_err(|error| StorageError::io(&path, error))?;
    match bytes {
        None => Ok(NodeMetadata::default()),
        Some(bytes) => decode(&bytes).map_err(|reason| StorageError::Corrupt {
            path,
            position: 0,
            reason: format!("{reason}; restore it from a backup or a replica"),
        }),
    }
}

/// Persists the node's metadata atomically.
///
/// # Errors
/// [`StorageError::Io`] on a write or sync failure.
pub async fn store<D: Disk>(
    disk: &D,
    data_dir: &Path,
    metadata: &NodeMetadata,
) -> Result<(), StorageError> {
    let path = metadata_path(data_dir);
    write_file_atomically(disk, &path, &encode(metadata))
        .await
        .map_err(|error| StorageError::io(&path, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let mut metadata = NodeMetadata {
            producer_id_block_end: 2048,
            ..NodeMetadata::default()
        };
        metadata.catalog.version = 7;
        let bytes = encode(&metadata);
        assert_eq!(decode(&bytes), Ok(metadata));
        let mut damaged = bytes;
        let last = damaged.len() - 2;
        damaged[last] ^= 1;
        assert!(decode(&damaged).is_err());
    }
}
