//! The controller's Raft log file: `<data dir>/controller/raft.log`, in the
//! format of [`corelog_controller::durable`]. This module only moves bytes:
//! recovery and encoding are the controller crate's.
//!
//! Every Ready becomes one append at the end and, when Raft needs it, one
//! fdatasync, so its records become durable together and in order. After
//! the node takes a snapshot the file is rewritten whole with the storage
//! engine's atomic write, so that it stays bounded.
//!
//! Appends use page-cache I/O (glommio's `BufferedFile`) rather than DMA:
//! the records are small and unaligned, and rewriting a partial block for
//! every append would cost more than the copy.

use std::path::{Path, PathBuf};

use corelog_controller::durable::{self, LOG_HEADER, RecoveredLog};
use glommio::io::{BufferedFile, OpenOptions};

use crate::storage::disk::{Disk, read_whole_file, write_file_atomically};
use crate::storage::glommio_disk::GlommioDisk;

/// Bound on the file read at start-up: snapshots keep the log to about a
/// thousand entries beside one metadata snapshot, far below this.
const LOG_BYTES_MAX: u64 = 1 << 30;

/// Why the controller log cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RaftLogError {
    /// An I/O call failed.
    #[error("controller log {path}: {operation} failed: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is damaged beyond its tail or contradicts itself.
    #[error(
        "controller log {path} cannot be recovered: {source}; restore this node's \
         data directory, or remove {path} so that it copies the metadata from the \
         other controllers (only if a majority of them is healthy)"
    )]
    Unrecoverable {
        /// The file.
        path: PathBuf,
        /// What recovery found.
        source: durable::DurableError,
    },
}

/// The open log file, positioned at its end.
#[derive(Debug)]
pub struct RaftLogFile {
    disk: GlommioDisk,
    path: PathBuf,
    file: BufferedFile,
    len: u64,
}

impl RaftLogFile {
    /// Opens (or creates) the log under `data_dir` and recovers it: a torn
    /// last append is cut off; damage before the tail is an error.
    ///
    /// # Errors
    /// [`RaftLogError`] on I/O failure or an unrecoverable file.
    pub async fn open(
        disk: GlommioDisk,
        data_dir: &Path,
    ) -> Result<(RaftLogFile, RecoveredLog), RaftLogError> {
        let dir = data_dir.join("controller");
        let path = dir.join("raft.log");
        let io = |operation: &'static str| {
            let path = path.clone();
            move |source| RaftLogError::Io {
                path,
                operation,
                source,
            }
        };
        disk.create_dir_all(&dir)
            .await
            .map_err(io("create directory"))?;
        let bytes = read_whole_file(&disk, &path, LOG_BYTES_MAX)
            .await
            .map_err(io("read"))?
            .unwrap_or_default();
        let (log, valid_len) = if bytes.is_empty() {
            (RecoveredLog::default(), 0)
        } else {
            let recovery =
                durable::recover(&bytes).map_err(|source| RaftLogError::Unrecoverable {
                    path: path.clone(),
                    source,
                })?;
            if let Some(torn) = recovery.torn_tail {
                tracing::warn!(
                    path = %path.display(),
                    at = torn.position,
                    bytes = torn.bytes,
                    "controller log: cutting off a torn last append"
                );
            }
            (recovery.log, recovery.valid_len)
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .buffered_open(&path)
            .await
            .map_err(|error| io("open")(error.into()))?;
        let mut log_file = RaftLogFile {
            disk: disk.clone(),
            path: path.clone(),
            file,
            len: valid_len,
        };
        if valid_len < LOG_HEADER.len() as u64 {
            log_file.truncate(0).await?;
            log_file.append(&LOG_HEADER, true).await?;
        } else if valid_len < bytes.len() as u64 {
            log_file.truncate(valid_len).await?;
        }
        disk.sync_dir(&dir).await.map_err(io("sync directory"))?;
        Ok((log_file, log))
    }

    /// Appends `bytes` at the end, then fdatasyncs if `sync`.
    ///
    /// # Errors
    /// [`RaftLogError::Io`]; the caller must stop the controller role, as a
    /// failed write leaves the file's tail unknown.
    pub async fn append(&mut self, bytes: &[u8], sync: bool) -> Result<(), RaftLogError> {
        #[cfg(feature = "fault-injection")]
        crate::storage::fault_hooks::before_write(&self.path)
            .map_err(|error| self.error("write", error))?;
        let mut written = 0usize;
        while written < bytes.len() {
            let count = self
                .file
                .write_at(bytes[written..].to_vec(), self.len + written as u64)
                .await
                .map_err(|error| self.error("write", error.into()))?;
            if count == 0 {
                return Err(self.error("write", std::io::ErrorKind::WriteZero.into()));
            }
            written += count;
        }
        self.len += bytes.len() as u64;
        #[cfg(feature = "fault-injection")]
        crate::storage::fault_hooks::wrote(&self.path, self.len);
        if sync {
            self.sync().await?;
        }
        Ok(())
    }

    /// Replaces the whole file with `contents` (from
    /// `ControllerNode::compacted_log`), atomically, and appends after it.
    ///
    /// # Errors
    /// [`RaftLogError::Io`]; the caller stops the controller role, and a
    /// restart recovers from whichever file the rename left in place.
    pub async fn rewrite(&mut self, contents: &[u8]) -> Result<(), RaftLogError> {
        write_file_atomically(&self.disk, &self.path, contents)
            .await
            .map_err(|error| self.error("rewrite", error))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .buffered_open(&self.path)
            .await
            .map_err(|error| self.error("open", error.into()))?;
        let old = std::mem::replace(&mut self.file, file);
        if let Err(error) = old.close().await {
            // Everything written through it was synced before the rewrite.
            tracing::warn!(path = %self.path.display(), %error, "closing the replaced controller log failed");
        }
        self.len = contents.len() as u64;
        Ok(())
    }

    async fn truncate(&mut self, len: u64) -> Result<(), RaftLogError> {
        #[cfg(feature = "fault-injection")]
        crate::storage::fault_hooks::before_write(&self.path)
            .map_err(|error| self.error("truncate", error))?;
        self.file
            .truncate(len)
            .await
            .map_err(|error| self.error("truncate", error.into()))?;
        #[cfg(feature = "fault-injection")]
        crate::storage::fault_hooks::truncated(&self.path, len);
        self.sync().await?;
        self.len = len;
        Ok(())
    }

    /// fdatasync. A failure is final: the caller stops the controller role
    /// and never retries, as the page cache may have dropped the data.
    async fn sync(&self) -> Result<(), RaftLogError> {
        #[cfg(feature = "fault-injection")]
        let durable_len = crate::storage::fault_hooks::before_sync(&self.path)
            .map_err(|error| self.error("fdatasync", error))?;
        self.file
            .fdatasync()
            .await
            .map_err(|error| self.error("fdatasync", error.into()))?;
        #[cfg(feature = "fault-injection")]
        crate::storage::fault_hooks::synced(&self.path, durable_len);
        Ok(())
    }

    fn error(&self, operation: &'static str, source: std::io::Error) -> RaftLogError {
        RaftLogError::Io {
            path: self.path.clone(),
            operation,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use corelog_controller::durable::{
        EntryKind, HardState, LogEntry, LogRecord, encode_log, encode_record,
    };
    use glommio::{LocalExecutorBuilder, Placement};

    use super::*;

    fn entry(index: u64, term: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let record = LogRecord::Entry(LogEntry {
            index,
            term,
            kind: EntryKind::Normal,
            data: Bytes::from(format!("command {index}")),
            context: Bytes::new(),
        });
        encode_record(&record, &mut bytes);
        bytes
    }

    fn hard_state(term: u64, commit: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let record = LogRecord::HardState(HardState {
            term,
            vote: 1,
            commit,
        });
        encode_record(&record, &mut bytes);
        bytes
    }

    #[test]
    fn appends_and_rewrites_survive_reopening_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data_dir = dir.path().to_path_buf();
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor starts");
        executor.run(async move {
            let disk = GlommioDisk::for_shard(&data_dir).await.expect("disk");
            let (mut log, recovered) = RaftLogFile::open(disk.clone(), &data_dir)
                .await
                .expect("a new log opens");
            assert_eq!(recovered, RecoveredLog::default());
            log.append(&entry(1, 1), false).await.expect("append");
            log.append(&[entry(2, 1), hard_state(1, 2)].concat(), true)
                .await
                .expect("append");

            // A rewrite replaces the file, and appends continue after it.
            let compacted = RecoveredLog {
                entries: Vec::new(),
                hard_state: HardState {
                    term: 1,
                    vote: 1,
                    commit: 0,
                },
                snapshot: None,
            };
            log.rewrite(&encode_log(&compacted)).await.expect("rewrite");
            log.append(&[entry(1, 2), hard_state(2, 1)].concat(), true)
                .await
                .expect("append after the rewrite");
            // A last append cut short by a crash.
            let torn = entry(2, 2);
            log.append(&torn[..torn.len() / 2], true)
                .await
                .expect("torn append");
            drop(log);

            let (mut log, recovered) = RaftLogFile::open(disk.clone(), &data_dir)
                .await
                .expect("reopens");
            assert_eq!(recovered.entries.len(), 1, "{recovered:?}");
            assert_eq!(recovered.entries[0].term, 2);
            assert_eq!(recovered.hard_state.term, 2);
            assert_eq!(recovered.hard_state.commit, 1);
            // Appending after the cut tail gives a clean file.
            log.append(&entry(2, 2), true).await.expect("append");
            drop(log);
            let (_, recovered) = RaftLogFile::open(disk, &data_dir).await.expect("reopens");
            assert_eq!(recovered.entries.len(), 2);
            // Only what followed the rewrite is in the file.
            let expected = encode_log(&compacted).len()
                + entry(1, 2).len()
                + hard_state(2, 1).len()
                + entry(2, 2).len();
            let on_disk = std::fs::metadata(data_dir.join("controller/raft.log"))
                .expect("log file")
                .len();
            assert_eq!(on_disk, expected as u64);
        });
    }
}
