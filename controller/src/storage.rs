//! The Raft log as raft-rs reads it, kept in memory. The broker makes the
//! same content durable through [`crate::durable`] records that the node
//! hands out in each Ready; after a restart [`crate::durable::recover`]
//! rebuilds exactly this.
//!
//! Unlike raft-rs's `MemStorage`, nothing here panics on a request outside
//! the log: it answers with raft's storage errors.

use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use crate::durable::{self, EntryKind, LogEntry, RecoveredLog, SnapshotRecord};
use crate::types::NodeId;

/// In-memory Raft storage: the latest snapshot, the entries after it and
/// the hard state.
#[derive(Debug, Default)]
pub(crate) struct MemoryLog {
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot, with its data, so that a lagging follower can
    /// be sent it; index 0 when there is none.
    snapshot: Snapshot,
    /// Entries after the snapshot: `entries[i].index == snapshot index + 1 + i`.
    entries: Vec<Entry>,
}

impl MemoryLog {
    /// The storage of a node with `voters`, from what was recovered.
    pub(crate) fn new(voters: &[NodeId], recovered: &RecoveredLog) -> MemoryLog {
        let mut log = MemoryLog::default();
        log.conf_state.voters = voters.iter().map(|voter| voter.0).collect();
        if let Some(snapshot) = &recovered.snapshot {
            log.snapshot = to_raft_snapshot(snapshot);
            log.conf_state = log.snapshot.get_metadata().get_conf_state().clone();
        }
        log.entries = recovered.entries.iter().map(to_raft_entry).collect();
        log.hard_state = to_raft_hard_state(recovered.hard_state);
        log
    }

    pub(crate) fn hard_state(&self) -> durable::HardState {
        durable::HardState {
            term: self.hard_state.term,
            vote: self.hard_state.vote,
            commit: self.hard_state.commit,
        }
    }

    pub(crate) fn set_hard_state(&mut self, hard_state: &HardState) {
        self.hard_state = hard_state.clone();
    }

    pub(crate) fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    pub(crate) fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    pub(crate) fn latest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snapshot_index(), |entry| entry.index)
    }

    /// Appends entries Raft handed out, replacing any suffix they overlap.
    ///
    /// # Errors
    /// A description when they would overwrite the snapshot or leave a gap:
    /// raft-rs never asks for that, so it is a bug.
    pub(crate) fn append(&mut self, entries: &[Entry]) -> Result<(), String> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if first.index < self.first() || first.index > self.last() + 1 {
            return Err(format!(
                "entries from {} do not fit a log of {}..={}",
                first.index,
                self.first(),
                self.last()
            ));
        }
        self.entries.truncate((first.index - self.first()) as usize);
        self.entries.extend_from_slice(entries);
        Ok(())
    }

    /// Replaces everything with a snapshot from the leader.
    pub(crate) fn install_snapshot(&mut self, snapshot: &Snapshot) {
        let metadata = snapshot.get_metadata();
        self.hard_state.term = self.hard_state.term.max(metadata.term);
        self.hard_state.commit = self.hard_state.commit.max(metadata.index);
        self.conf_state = metadata.get_conf_state().clone();
        self.entries.clear();
        self.snapshot = snapshot.clone();
    }

    /// Keeps a locally taken snapshot at `index` (applied, so in the log)
    /// and drops the entries it covers.
    pub(crate) fn compact(
        &mut self,
        index: u64,
        state: bytes::Bytes,
    ) -> Result<SnapshotRecord, String> {
        if index <= self.snapshot_index() || index > self.last() {
            return Err(format!(
                "cannot snapshot at {index}: the log holds {}..={}",
                self.first(),
                self.last()
            ));
        }
        let term = self.entries[(index - self.first()) as usize].term;
        let metadata = SnapshotMetadata {
            index,
            term,
            conf_state: Some(self.conf_state.clone()).into(),
            ..SnapshotMetadata::default()
        };
        let snapshot = Snapshot {
            data: state,
            metadata: Some(metadata).into(),
            ..Snapshot::default()
        };
        self.entries.drain(..(index + 1 - self.first()) as usize);
        self.snapshot = snapshot;
        Ok(from_raft_snapshot(&self.snapshot, false))
    }

    /// The durable form of this storage, for a compacted rewrite.
    pub(crate) fn recovered(&self) -> RecoveredLog {
        RecoveredLog {
            snapshot: (self.snapshot_index() > 0).then(|| from_raft_snapshot(&self.snapshot, true)),
            entries: self.entries.iter().map(from_raft_entry).collect(),
            hard_state: self.hard_state(),
        }
    }
}

impl Storage for MemoryLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let start = (low - self.first()) as usize;
        let end = (high - self.first()) as usize;
        let mut entries = self.entries[start..end].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        if index == self.snapshot_index() {
            return Ok(self.snapshot.get_metadata().term);
        }
        if index < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(index - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() < request_index || self.snapshot_index() == 0 {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

pub(crate) fn to_raft_entry(entry: &LogEntry) -> Entry {
    Entry {
        index: entry.index,
        term: entry.term,
        entry_type: match entry.kind {
            EntryKind::Normal => EntryType::EntryNormal,
            EntryKind::ConfChange => EntryType::EntryConfChange,
            EntryKind::ConfChangeV2 => EntryType::EntryConfChangeV2,
        },
        data: entry.data.clone(),
        context: entry.context.clone(),
        ..Entry::default()
    }
}

pub(crate) fn from_raft_entry(entry: &Entry) -> LogEntry {
    LogEntry {
        index: entry.index,
        term: entry.term,
        kind: match entry.get_entry_type() {
            EntryType::EntryNormal => EntryKind::Normal,
            EntryType::EntryConfChange => EntryKind::ConfChange,
            EntryType::EntryConfChangeV2 => EntryKind::ConfChangeV2,
        },
        data: entry.data.clone(),
        context: entry.context.clone(),
    }
}

fn to_raft_hard_state(hard_state: durable::HardState) -> HardState {
    HardState {
        term: hard_state.term,
        vote: hard_state.vote,
        commit: hard_state.commit,
        ..HardState::default()
    }
}

pub(crate) fn to_raft_snapshot(snapshot: &SnapshotRecord) -> Snapshot {
    let conf_state = ConfState {
        voters: snapshot.voters.iter().map(|voter| voter.0).collect(),
        ..ConfState::default()
    };
    let metadata = SnapshotMetadata {
        index: snapshot.index,
        term: snapshot.term,
        conf_state: Some(conf_state).into(),
        ..SnapshotMetadata::default()
    };
    Snapshot {
        data: snapshot.state.clone(),
        metadata: Some(metadata).into(),
        ..Snapshot::default()
    }
}

pub(crate) fn from_raft_snapshot(snapshot: &Snapshot, resets_log: bool) -> SnapshotRecord {
    let metadata = snapshot.get_metadata();
    SnapshotRecord {
        index: metadata.index,
        term: metadata.term,
        voters: metadata
            .get_conf_state()
            .voters
            .iter()
            .copied()
            .map(NodeId)
            .collect(),
        resets_log,
        state: snapshot.data.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn entry(index: u64, term: u64) -> Entry {
        to_raft_entry(&LogEntry {
            index,
            term,
            kind: EntryKind::Normal,
            data: Bytes::new(),
            context: Bytes::new(),
        })
    }

    #[test]
    fn out_of_range_requests_are_errors_not_panics() {
        let mut log = MemoryLog::new(&[NodeId(1)], &RecoveredLog::default());
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 2)])
            .unwrap();
        let context = || GetEntriesContext::empty(false);
        assert!(log.entries(1, 9, None, context()).is_err());
        assert!(log.entries(3, 2, None, context()).is_err());
        assert!(log.term(9).is_err());
        assert!(log.append(&[entry(9, 2)]).is_err());
        log.compact(2, Bytes::from_static(b"s")).unwrap();
        assert_eq!(
            log.entries(1, 3, None, context()),
            Err(raft::Error::Store(StorageError::Compacted))
        );
        assert_eq!(log.term(2), Ok(1));
        assert_eq!(log.entries(3, 4, None, context()).unwrap().len(), 1);
        assert!(
            log.append(&[entry(2, 3)]).is_err(),
            "covered by the snapshot"
        );
        assert!(log.compact(2, Bytes::new()).is_err());
    }

    #[test]
    fn appends_replace_the_overlapping_suffix() {
        let mut log = MemoryLog::new(&[NodeId(1)], &RecoveredLog::default());
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)])
            .unwrap();
        log.append(&[entry(2, 2)]).unwrap();
        assert_eq!(log.last_index(), Ok(2));
        assert_eq!(log.term(2), Ok(2));
    }
}
