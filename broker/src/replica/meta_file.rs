//! The replica metadata file: [`ReplicaMeta`] (fence, led epoch, epoch
//! history) in the partition directory, written atomically (temporary file,
//! fsync, rename, directory fsync) with the CRC its encoding carries.

use std::path::{Path, PathBuf};

use corelog_replication::ReplicaMeta;

use super::ReplicaError;
use corelog_storage::StorageError;
use corelog_storage::disk::{Disk, read_whole_file, write_file_atomically};

const FILE_NAME: &str = "replica-meta";
/// Bound on the file: 20 bytes of fixed fields and 12 bytes per epoch-history
/// entry; a MiB holds about 87,000 leader changes, far more than retention
/// lets a history keep.
const META_BYTES_MAX: u64 = 1 << 20;

/// Path of the metadata file in a partition directory.
#[must_use]
pub fn meta_path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads the metadata of the replica in `dir`: `None` when the file does
/// not exist (a new replica).
///
/// # Errors
/// [`ReplicaError::Meta`] when it cannot be read or fails its checks: the
/// replica's promises are unknown, so it must not take part until repaired.
pub async fn load<D: Disk>(disk: &D, dir: &Path) -> Result<Option<ReplicaMeta>, ReplicaError> {
    let path = meta_path(dir);
    let failed = |reason: String| ReplicaError::Meta {
        path: path.clone(),
        reason,
    };
    let Some(bytes) = read_whole_file(disk, &path, META_BYTES_MAX)
        .await
        .map_err(|error| failed(error.to_string()))?
    else {
        return Ok(None);
    };
    ReplicaMeta::decode(&bytes)
        .map(Some)
        .map_err(|error| failed(error.to_string()))
}

/// Writes `meta` durably and atomically.
///
/// # Errors
/// The [`StorageError`] of a failed write or sync (not damage: a full disk,
/// or an I/O error after which the write is presumed lost); the caller
/// fences the replica and reports it like a fenced log.
pub async fn store<D: Disk>(disk: &D, dir: &Path, meta: &ReplicaMeta) -> Result<(), StorageError> {
    let path = meta_path(dir);
    write_file_atomically(disk, &path, &meta.encode())
        .await
        .map_err(|error| StorageError::io(&path, error))
}
