//! The topic catalog a standalone broker kept before single nodes became
//! one-voter clusters: the `metadata` file of its data directory. Read-only
//! and frozen: these types describe bytes already on disks, so they never
//! change with the rest of the broker.
//!
//! ```text
//! magic "CLMD" · crc u32 (big-endian CRC32C of the JSON) · JSON document
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use corelog_storage::StorageError;
use corelog_storage::disk::{Disk, read_whole_file};

/// The file's name in the data directory.
pub const FILE_NAME: &str = "metadata";
/// What the file is renamed to once its topics are in the controller's
/// metadata: kept, not deleted, as the operator's record of the upgrade.
pub const MIGRATED_FILE_NAME: &str = "metadata.migrated";

const MAGIC: [u8; 4] = *b"CLMD";
/// The standalone broker's own bound on the file.
const FILE_BYTES_MAX: u64 = 64 << 20;

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct LegacyMetadata {
    /// The topics.
    pub catalog: LegacyCatalog,
    /// Producer ids below this were (or may have been) handed out.
    pub producer_id_block_end: i64,
}

/// The topics, with the next id the catalog would have given.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct LegacyCatalog {
    /// Bumped by every change.
    pub version: u64,
    /// Topics by name.
    pub topics: BTreeMap<String, LegacyTopic>,
    /// Ids below this may have been used.
    pub next_topic_id: u64,
}

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct LegacyTopic {
    /// Its id, part of its directory name.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Partition count.
    pub partitions: u32,
    /// Settings.
    pub config: LegacyTopicConfig,
    /// Creation time.
    pub created_at_ms: i64,
}

/// A topic's settings as the catalog stored them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct LegacyTopicConfig {
    /// `retention.ms`; `None` forever.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`; `None` unbounded.
    pub retention_bytes: Option<u64>,
    /// `segment.bytes`.
    pub segment_bytes: u64,
    /// `segment.ms`.
    pub segment_ms: i64,
    /// `max.message.bytes`.
    pub max_message_bytes: u32,
    /// `cleanup.policy`: only `delete` existed.
    pub cleanup_policy: LegacyCleanupPolicy,
}

/// The cleanup policies the catalog knew.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LegacyCleanupPolicy {
    /// Delete whole segments.
    Delete,
}

impl LegacyTopicConfig {
    /// The settings as the `key=value` entries the controller stores.
    #[must_use]
    pub fn entries(&self) -> BTreeMap<String, String> {
        let unlimited = |value: Option<i64>| value.map_or(-1, |value| value).to_string();
        BTreeMap::from([
            ("retention.ms".to_owned(), unlimited(self.retention_ms)),
            (
                "retention.bytes".to_owned(),
                unlimited(
                    self.retention_bytes
                        .map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
                ),
            ),
            ("segment.bytes".to_owned(), self.segment_bytes.to_string()),
            ("segment.ms".to_owned(), self.segment_ms.to_string()),
            (
                "max.message.bytes".to_owned(),
                self.max_message_bytes.to_string(),
            ),
            ("cleanup.policy".to_owned(), "delete".to_owned()),
        ])
    }
}

/// The catalog file's path in `data_dir`.
#[must_use]
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE_NAME)
}

/// Decodes the file.
///
/// # Errors
/// A message saying what is wrong.
pub fn decode(bytes: &[u8]) -> Result<LegacyMetadata, String> {
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

/// Reads the catalog of a standalone broker's data directory; `None` when
/// there is none (a new directory, or one migrated already).
///
/// # Errors
/// [`StorageError::Corrupt`] naming the file when it is damaged (its topics
/// cannot be guessed), [`StorageError::Io`] when it cannot be read.
pub async fn load<D: Disk>(
    disk: &D,
    data_dir: &Path,
) -> Result<Option<LegacyMetadata>, StorageError> {
    let path = path(data_dir);
    let bytes = read_whole_file(disk, &path, FILE_BYTES_MAX)
        .await
        .map_err(|error| StorageError::io(&path, error))?;
    match bytes {
        None => Ok(None),
        Some(bytes) => decode(&bytes).map(Some).map_err(|reason| StorageError::Corrupt {
            path,
            position: 0,
            reason: format!(
                "{reason}: this standalone broker's topic catalog cannot be migrated; restore it from a backup"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&crc32c::crc32c(json.as_bytes()).to_be_bytes());
        bytes.extend_from_slice(json.as_bytes());
        bytes
    }

    const SAMPLE: &str = r#"{
      "catalog": {
        "version": 3,
        "topics": {
          "ledger": {
            "id": 4, "name": "ledger", "partitions": 1,
            "config": {"retention_ms": null, "retention_bytes": null,
                       "segment_bytes": 1048576, "segment_ms": 604800000,
                       "max_message_bytes": 524288, "cleanup_policy": "delete"},
            "created_at_ms": 1796159008892
          }
        },
        "next_topic_id": 5
      },
      "producer_id_block_end": 2048
    }"#;

    #[test]
    fn the_standalone_catalog_reads_back_as_controller_entries() {
        let metadata = decode(&file(SAMPLE)).unwrap();
        assert_eq!(metadata.producer_id_block_end, 2048);
        assert_eq!(metadata.catalog.next_topic_id, 5);
        let ledger = &metadata.catalog.topics["ledger"];
        assert_eq!((ledger.id, ledger.partitions), (4, 1));
        let entries = ledger.config.entries();
        assert_eq!(entries["retention.ms"], "-1");
        assert_eq!(entries["segment.bytes"], "1048576");
        assert_eq!(entries["max.message.bytes"], "524288");
        assert!(corelog_controller::TopicConfig::from_stored(&entries).is_ok());
    }

    #[test]
    fn damage_is_refused() {
        let mut bytes = file(SAMPLE);
        let last = bytes.len() - 3;
        bytes[last] ^= 1;
        assert_eq!(decode(&bytes), Err("checksum mismatch".to_owned()));
        assert!(decode(b"CLMD").is_err());
        assert!(decode(&file("{}")).is_err());
    }
}
