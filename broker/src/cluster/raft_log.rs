//! The controller's Raft log file: `<data dir>/controller/raft.log`, in the
//! format of [`corelog_controller::durable`]. This module only moves bytes:
//! recovery and encoding are the controller crate's.
//!
//! Every Ready becomes one append at the end and, when Raft needs it, one
//! fdatasync, so its records become durable together and in order. After
//! the node takes a snapshot the file is rewritten whole (new file, fsync,
//! rename, fsync of the directory) so that it stays bounded.
//!
//! Page-cache I/O (glommio's `BufferedFile`) rather than DMA: the records
//! are small and unaligned, and rewriting a partial block for every append
//! would cost more than the copy.

use std::path::{Path, PathBuf};

use corelog_controller::durable::{self, LOG_HEADER, RecoveredLog};
use glommio::io::{BufferedFile, OpenOptions};

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
    pub async fn open(data_dir: &Path) -> Result<(RaftLogFile, RecoveredLog), RaftLogError> {
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
        std::fs::create_dir_all(&dir).map_err(io("create directory"))?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(io("read")(error)),
        };
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
        sync_dir(&dir).map_err(io("sync directory"))?;
        Ok((log_file, log))
    }

    /// Appends `bytes` at the end, then fdatasyncs if `sync`.
    ///
    /// # Errors
    /// [`RaftLogError::Io`]; the caller must stop the controller role, as a
    /// failed write leaves the file's tail unknown.
    pub async fn append(&mut self, bytes: &[u8], sync: bool) -> Result<(), RaftLogError> {
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
        if sync {
            self.file
                .fdatasync()
                .await
                .map_err(|error| self.error("fdatasync", error.into()))?;
        }
        Ok(())
    }

    /// Replaces the whole file with `contents` (from
    /// `ControllerNode::compacted_log`), atomically.
    ///
    /// # Errors
    /// [`RaftLogError::Io`]; the old file is then still in place and valid.
    pub async fn rewrite(&mut self, contents: &[u8]) -> Result<(), RaftLogError> {
        let temp = self.path.with_extension("log.new");
        let io = |operation: &'static str| {
            let path = temp.clone();
            move |source| RaftLogError::Io {
                path,
                operation,
                source,
            }
        };
        let _stale = std::fs::remove_file(&temp);
        let mut file = BufferedFile::create(&temp)
            .await
            .map_err(|error| io("create")(error.into()))?;
        let mut written = 0usize;
        while written < contents.len() {
            let count = file
                .write_at(contents[written..].to_vec(), written as u64)
                .await
                .map_err(|error| io("write")(error.into()))?;
            if count == 0 {
                return Err(io("write")(std::io::ErrorKind::WriteZero.into()));
            }
            written += count;
        }
        file.fdatasync()
            .await
            .map_err(|error| io("fdatasync")(error.into()))?;
        file.rename(&self.path)
            .await
            .map_err(|error| io("rename")(error.into()))?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir).map_err(io("sync directory"))?;
        }
        let old = std::mem::replace(&mut self.file, file);
        let _closed = old.close().await;
        self.len = contents.len() as u64;
        Ok(())
    }

    /// The file's length.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file holds nothing, not even its header.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    async fn truncate(&mut self, len: u64) -> Result<(), RaftLogError> {
        self.file
            .truncate(len)
            .await
            .map_err(|error| self.error("truncate", error.into()))?;
        self.file
            .fdatasync()
            .await
            .map_err(|error| self.error("fdatasync", error.into()))?;
        self.len = len;
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

/// Makes a directory entry change durable. Rare (open, rewrite): a
/// blocking call is fine.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
