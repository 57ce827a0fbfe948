//! A simulated controller process's Raft log file, on its [`SimDisk`].
//!
//! The bytes and every decision about them are the controller crate's
//! ([`corelog_controller::durable`]: the record format, the header's
//! synced-length slots, recovery with its torn-tail and lost-record rules);
//! this shell only moves them, following the same protocol as the broker's
//! `cluster::raft_log::RaftLogFile`: one append per Ready, fdatasync, then
//! the synced length into the header and fdatasync again; new files and
//! the rewrite after a snapshot written atomically. A crash keeps only
//! synced bytes, so a shell that acknowledged before its fdatasync would
//! leave a log recovery refuses (or a voter that forgot its vote).

use std::path::Path;

use corelog_broker::cluster::ready_loop::ControllerLog;
use corelog_controller::durable::{self, Header, RecoveredLog, SyncedLength};
use corelog_storage::disk::{Disk, DiskFile, read_whole_file, write_file_atomically};

use crate::disk::{SimDisk, SimFile};

/// Where the log lives on the controller process's disk.
const DIR: &str = "/controller";
const PATH: &str = "/controller/raft.log";
/// Far above what a run writes; a bound, not an allocation.
const LOG_BYTES_MAX: u64 = 1 << 30;

/// The open log, positioned at its end.
pub struct RaftLog {
    disk: SimDisk,
    file: SimFile,
    len: u64,
    /// The header's latest synced-length slot.
    recorded: SyncedLength,
}

impl std::fmt::Debug for RaftLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLog")
            .field("len", &self.len)
            .field("recorded", &self.recorded)
            .finish_non_exhaustive()
    }
}

impl RaftLog {
    /// Recovers the log on `disk` (creating it from `initial` when there is
    /// none): a torn last append is cut off; lost synced bytes or damage
    /// are errors, which a correct shell never causes.
    ///
    /// # Errors
    /// What recovery refused, or a disk error.
    pub async fn open(disk: SimDisk, initial: &[u8]) -> Result<(RaftLog, RecoveredLog), String> {
        let path = Path::new(PATH);
        let io = |operation: &str| {
            let operation = operation.to_owned();
            move |error: std::io::Error| format!("controller log: {operation}: {error}")
        };
        disk.create_dir_all(Path::new(DIR))
            .await
            .map_err(io("create directory"))?;
        let found = read_whole_file(&disk, path, LOG_BYTES_MAX)
            .await
            .map_err(io("read"))?;
        let contents = match found {
            Some(bytes) => bytes,
            None => {
                write_file_atomically(&disk, path, initial)
                    .await
                    .map_err(io("create"))?;
                initial.to_vec()
            }
        };
        let recovery = durable::recover(&contents)
            .map_err(|error| format!("controller log cannot be recovered: {error}"))?;
        let Some(Header::Current { synced, .. }) = recovery.header else {
            return Err(format!(
                "controller log has no current-format header: {:?}",
                recovery.header
            ));
        };
        let file = disk.open(path, false).await.map_err(io("open"))?;
        let mut log = RaftLog {
            disk,
            file,
            len: contents.len() as u64,
            recorded: synced,
        };
        if recovery.valid_len < log.len {
            log.file
                .truncate(recovery.valid_len)
                .await
                .map_err(io("truncate"))?;
            log.len = recovery.valid_len;
            log.file.sync_data().await.map_err(io("fdatasync"))?;
        }
        Ok((log, recovery.log))
    }

    /// Appends `bytes` at the end, fdatasyncs, then records the new length
    /// in the header and fdatasyncs again.
    ///
    /// # Errors
    /// A disk error; the caller stops the controller process.
    pub async fn append(&mut self, bytes: &[u8]) -> Result<(), String> {
        let io = |operation: &'static str| {
            move |error: std::io::Error| format!("controller log: {operation}: {error}")
        };
        let mut buffer = self.file.alloc_buffer(bytes.len());
        buffer.as_mut_slice().copy_from_slice(bytes);
        self.file
            .write_at(buffer, self.len)
            .await
            .map_err(io("write"))?;
        self.len += bytes.len() as u64;
        self.file.sync_data().await.map_err(io("fdatasync"))?;
        let recorded = SyncedLength {
            sequence: self.recorded.sequence + 1,
            len: self.len,
        };
        let slot = durable::synced_length_slot(recorded.sequence, recorded.len);
        let mut buffer = self.file.alloc_buffer(slot.bytes.len());
        buffer.as_mut_slice().copy_from_slice(&slot.bytes);
        self.file
            .write_at(buffer, slot.position)
            .await
            .map_err(io("write"))?;
        self.file.sync_data().await.map_err(io("fdatasync"))?;
        self.recorded = recorded;
        Ok(())
    }

    /// Replaces the whole file with `contents` (the node's compacted log),
    /// atomically.
    ///
    /// # Errors
    /// A disk error; the caller stops the controller process.
    pub async fn rewrite(&mut self, contents: &[u8]) -> Result<(), String> {
        let path = Path::new(PATH);
        write_file_atomically(&self.disk, path, contents)
            .await
            .map_err(|error| format!("controller log: rewrite: {error}"))?;
        self.file = self
            .disk
            .open(path, false)
            .await
            .map_err(|error| format!("controller log: open: {error}"))?;
        self.len = contents.len() as u64;
        self.recorded = durable::synced_length(contents)
            .ok_or_else(|| "a compacted controller log records no synced length".to_owned())?;
        Ok(())
    }
}

impl ControllerLog for RaftLog {
    async fn persist(&mut self, records: &[u8]) -> Result<(), String> {
        self.append(records).await
    }

    async fn replace(&mut self, contents: &[u8]) -> Result<(), String> {
        self.rewrite(contents).await
    }
}
