//! The controller's Raft log file: `<data dir>/controller/raft.log`, in the
//! format of [`corelog_controller::durable`]. This module only moves bytes:
//! recovery and encoding are the controller crate's.
//!
//! Every Ready becomes one append at the end and, when Raft needs it, one
//! fdatasync, so its records become durable together and in order; a
//! second write and fdatasync then records the synced length in the
//! header, which is how recovery tells a torn append from lost records
//! this node acknowledged (it refuses to start on the latter). New files,
//! and the rewrite after the node takes a snapshot (which keeps the file
//! bounded), use the storage engine's atomic write.
//!
//! Appends use page-cache I/O (glommio's `BufferedFile`) rather than DMA:
//! the records are small and unaligned, and rewriting a partial block for
//! every append would cost more than the copy.

use std::path::{Path, PathBuf};

use corelog_controller::durable::{self, Header, RecoveredLog};
use glommio::io::{BufferedFile, OpenOptions};

use corelog_storage::disk::{Disk, read_whole_file, write_file_atomically};
use corelog_storage::glommio_disk::GlommioDisk;

use super::ready_loop::ControllerLog;

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
        "controller log {path} cannot be recovered: {source}; restore it from a backup of \
         this node. A single node can instead move it aside and start once with \
         --rebuild-catalog (topics keep their ids and records; settings, users, ACLs and \
         quotas must be set again). A voter of a larger cluster must not start without it \
         (see the README, \"Losing brokers\")"
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
    /// The header's latest synced-length slot.
    recorded: durable::SyncedLength,
}

impl RaftLogFile {
    /// Opens (or creates) the log under `data_dir` and recovers it: a torn
    /// last append beyond the synced length is cut off; lost synced bytes
    /// and damage before the tail are errors.
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
        let unrecoverable = |source| RaftLogError::Unrecoverable {
            path: path.clone(),
            source,
        };
        disk.create_dir_all(&dir)
            .await
            .map_err(io("create directory"))?;
        let bytes = read_whole_file(&disk, &path, LOG_BYTES_MAX)
            .await
            .map_err(io("read"))?;
        let found_len = bytes.as_ref().map_or(0, |bytes| bytes.len() as u64);
        // What to keep: the log, the header's synced length, the length of
        // the intact file, and the contents to write whole, if any.
        let (log, recorded, valid_len, replacement) = match bytes {
            None => {
                let contents = durable::new_log_file();
                let synced = whole_file_synced(&contents);
                (RecoveredLog::default(), synced, synced.len, Some(contents))
            }
            Some(bytes) => {
                let recovery = durable::recover(&bytes).map_err(unrecoverable)?;
                // Recovery cut nothing the header records as synced.
                if let Some(torn) = recovery.torn_tail {
                    tracing::warn!(
                        path = %path.display(),
                        at = torn.position,
                        bytes = torn.bytes,
                        "controller log: cutting off a torn last append"
                    );
                }
                match recovery.header {
                    // Files are created whole: an empty one was damaged.
                    None => {
                        return Err(unrecoverable(durable::DurableError::Corrupt {
                            position: 0,
                            reason: "the file is empty".to_owned(),
                        }));
                    }
                    Some(Header::V1) => {
                        tracing::info!(path = %path.display(), "controller log: rewriting a first-format file in the current format");
                        let contents = durable::encode_log(&recovery.log);
                        let synced = whole_file_synced(&contents);
                        (recovery.log, synced, synced.len, Some(contents))
                    }
                    Some(Header::Current {
                        synced,
                        damaged_slot,
                    }) => {
                        if damaged_slot {
                            tracing::warn!(path = %path.display(), "controller log: one synced-length slot is damaged; using the other until the next sync replaces it");
                        }
                        (recovery.log, synced, recovery.valid_len, None)
                    }
                }
            }
        };
        if let Some(contents) = &replacement {
            write_file_atomically(&disk, &path, contents)
                .await
                .map_err(io("create"))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .buffered_open(&path)
            .await
            .map_err(|error| io("open")(error.into()))?;
        let mut log_file = RaftLogFile {
            disk: disk.clone(),
            path: path.clone(),
            file,
            len: replacement.map_or(found_len, |contents| contents.len() as u64),
            recorded,
        };
        if valid_len < log_file.len {
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
        corelog_storage::fault_hooks::before_write(&self.path)
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
        corelog_storage::fault_hooks::wrote(&self.path, self.len);
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
        self.recorded = whole_file_synced(contents);
        Ok(())
    }

    async fn truncate(&mut self, len: u64) -> Result<(), RaftLogError> {
        #[cfg(feature = "fault-injection")]
        corelog_storage::fault_hooks::before_write(&self.path)
            .map_err(|error| self.error("truncate", error))?;
        self.file
            .truncate(len)
            .await
            .map_err(|error| self.error("truncate", error.into()))?;
        #[cfg(feature = "fault-injection")]
        corelog_storage::fault_hooks::truncated(&self.path, len);
        self.len = len;
        // Recovery cuts only beyond the recorded length: nothing to record.
        debug_assert!(len >= self.recorded.len, "cut below the synced length");
        self.fdatasync().await
    }

    /// fdatasync, then, if the file grew, records its length in the header
    /// and fdatasyncs again: only bytes already durable are ever claimed.
    /// A failure is final: the caller stops the controller role and never
    /// retries, as the page cache may have dropped the data.
    async fn sync(&mut self) -> Result<(), RaftLogError> {
        self.fdatasync().await?;
        if self.len <= self.recorded.len {
            return Ok(());
        }
        let recorded = durable::SyncedLength {
            sequence: self.recorded.sequence + 1,
            len: self.len,
        };
        let slot = durable::synced_length_slot(recorded.sequence, recorded.len);
        #[cfg(feature = "fault-injection")]
        corelog_storage::fault_hooks::before_write(&self.path)
            .map_err(|error| self.error("write", error))?;
        let count = self
            .file
            .write_at(slot.bytes.to_vec(), slot.position)
            .await
            .map_err(|error| self.error("write", error.into()))?;
        if count != slot.bytes.len() {
            return Err(self.error("write", std::io::ErrorKind::WriteZero.into()));
        }
        self.fdatasync().await?;
        self.recorded = recorded;
        Ok(())
    }

    async fn fdatasync(&self) -> Result<(), RaftLogError> {
        #[cfg(feature = "fault-injection")]
        let durable_len = corelog_storage::fault_hooks::before_sync(&self.path)
            .map_err(|error| self.error("fdatasync", error))?;
        self.file
            .fdatasync()
            .await
            .map_err(|error| self.error("fdatasync", error.into()))?;
        #[cfg(feature = "fault-injection")]
        corelog_storage::fault_hooks::synced(&self.path, durable_len);
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

impl ControllerLog for RaftLogFile {
    async fn persist(&mut self, records: &[u8]) -> Result<(), String> {
        self.append(records, true)
            .await
            .map_err(|error| error.to_string())
    }

    async fn replace(&mut self, contents: &[u8]) -> Result<(), String> {
        self.rewrite(contents)
            .await
            .map_err(|error| error.to_string())
    }
}

/// The synced length a file written whole records: all of it.
fn whole_file_synced(contents: &[u8]) -> durable::SyncedLength {
    let synced = durable::synced_length(contents);
    assert_eq!(
        synced.map(|synced| synced.len),
        Some(contents.len() as u64),
        "a controller log written whole must record its own length"
    );
    synced.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use corelog_controller::durable::{
        DurableError, EntryKind, HardState, LogEntry, LogRecord, encode_log, encode_record,
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
        with_log(|disk, data_dir| async move {
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
            // A last append cut short by a crash before its fdatasync.
            let torn = entry(2, 2);
            log.append(&torn[..torn.len() / 2], false)
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

    fn with_log<F, Fut>(test: F)
    where
        F: FnOnce(GlommioDisk, PathBuf) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let data_dir = dir.path().to_path_buf();
        let executor = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor starts");
        executor.run(async move {
            let disk = GlommioDisk::for_shard(&data_dir, 16).await.expect("disk");
            test(disk, data_dir).await;
        });
    }

    #[test]
    fn a_log_that_lost_synced_bytes_refuses_to_open() {
        with_log(|disk, data_dir| async move {
            let (mut log, _) = RaftLogFile::open(disk.clone(), &data_dir)
                .await
                .expect("a new log opens");
            log.append(&[entry(1, 1), hard_state(1, 1)].concat(), true)
                .await
                .expect("append");
            log.append(&entry(2, 1), true).await.expect("append");
            drop(log);
            let path = data_dir.join("controller/raft.log");
            let whole = std::fs::read(&path).expect("log file");
            // Cut into the last synced append, as the soak's corruption
            // fault did: it must not pass for a torn append.
            std::fs::write(&path, &whole[..whole.len() - 5]).expect("cut");
            let error = RaftLogFile::open(disk.clone(), &data_dir)
                .await
                .expect_err("lost synced bytes");
            assert!(
                matches!(
                    &error,
                    RaftLogError::Unrecoverable {
                        source: DurableError::Truncated { synced_len, .. },
                        ..
                    } if *synced_len == whole.len() as u64
                ),
                "{error}"
            );
            assert!(
                error
                    .to_string()
                    .contains("restore it from a backup of this node"),
                "{error}"
            );
            // The refused file is left as found, for the operator.
            assert_eq!(
                std::fs::read(&path).expect("log file").len(),
                whole.len() - 5
            );
            // An existing but empty file is damage, not a new node.
            std::fs::write(&path, b"").expect("empty");
            let error = RaftLogFile::open(disk, &data_dir)
                .await
                .expect_err("an empty file");
            assert!(error.to_string().contains("the file is empty"), "{error}");
        });
    }

    #[test]
    fn a_first_format_log_is_rewritten_in_the_current_format() {
        with_log(|disk, data_dir| async move {
            let path = data_dir.join("controller/raft.log");
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            let v1 = [
                b"CLRL\x01\x00\x00\x00".to_vec(),
                entry(1, 1),
                hard_state(1, 1),
            ]
            .concat();
            std::fs::write(&path, &v1).expect("v1 file");
            let (mut log, recovered) = RaftLogFile::open(disk.clone(), &data_dir)
                .await
                .expect("a first-format log opens");
            assert_eq!(recovered.entries.len(), 1);
            assert_eq!(recovered.hard_state.commit, 1);
            let rewritten = std::fs::read(&path).expect("log file");
            assert_eq!(
                durable::synced_length(&rewritten).map(|synced| synced.len),
                Some(rewritten.len() as u64)
            );
            log.append(&entry(2, 1), true).await.expect("append");
            drop(log);
            let (_, recovered) = RaftLogFile::open(disk, &data_dir).await.expect("reopens");
            assert_eq!(recovered.entries.len(), 2);
        });
    }
}
