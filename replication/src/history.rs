//! The epoch history of a replica's log: which leader epoch wrote which
//! offsets.
//!
//! Every record carries the epoch of the leader that wrote it, and epochs
//! never decrease along a log, so the log is a sequence of runs, one per
//! epoch. The history stores the start of each run. It is what lets a
//! leader find where a follower's log diverges from its own, and what an
//! election compares (the epoch of the last record).

use corelog_wire::types::{LeaderEpoch, Offset};

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, HistoryError};

/// One run of the log: records from `start_offset` on were written in
/// `epoch`, until the next entry's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEntry {
    /// The leader epoch of the run.
    pub epoch: LeaderEpoch,
    /// The first offset of the run.
    pub start_offset: Offset,
}

/// Where an epoch's run ends in a log, as answered by
/// [`EpochHistory::end_of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEnd {
    /// The largest epoch in the history that is at or below the epoch asked
    /// about. It differs from the question when this log never had that
    /// epoch.
    pub epoch: LeaderEpoch,
    /// The first offset after that epoch's run: the start of the next run,
    /// or the log end when the run is the last one.
    pub end_offset: Offset,
}

/// The epoch runs of one replica's log, persisted with the replica's
/// metadata.
///
/// Invariants (checked on every change): epochs strictly increase; start
/// offsets never decrease. Two entries may share a start offset: an epoch
/// whose leader wrote nothing that survived; the later one is the epoch of
/// the offsets from there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochHistory {
    entries: Vec<EpochEntry>,
}

/// Magic of a standalone encoded history ("CLEH", little-endian).
const HISTORY_MAGIC: u32 = u32::from_le_bytes(*b"CLEH");
/// Format version of the standalone encoding.
const HISTORY_VERSION: u8 = 1;
/// Bytes of one encoded entry: epoch (u32) and start offset (u64).
pub(crate) const ENTRY_BYTES: usize = 12;

impl EpochHistory {
    /// An empty history: a log with no records.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A history from entries, checking the ordering rules.
    ///
    /// # Errors
    /// [`HistoryError`] if epochs do not strictly increase or start offsets
    /// decrease.
    pub fn from_entries(entries: Vec<EpochEntry>) -> Result<Self, HistoryError> {
        let mut history = Self::new();
        for entry in entries {
            history.append(entry.epoch, entry.start_offset)?;
        }
        Ok(history)
    }

    /// The runs, oldest first.
    #[must_use]
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest run.
    #[must_use]
    pub fn last(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// The newest epoch in the history.
    #[must_use]
    pub fn last_epoch(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|entry| entry.epoch)
    }

    /// Starts a new run: records from `start` on are written in `epoch`.
    ///
    /// # Errors
    /// [`HistoryError`] if `epoch` is not above the last epoch or `start` is
    /// before the last start. The history is unchanged then.
    pub fn append(&mut self, epoch: LeaderEpoch, start: Offset) -> Result<(), HistoryError> {
        if let Some(last) = self.last() {
            if epoch <= last.epoch {
                return Err(HistoryError::EpochNotIncreasing {
                    last: last.epoch,
                    epoch,
                });
            }
            if start < last.start_offset {
                return Err(HistoryError::StartDecreasing {
                    last_start: last.start_offset,
                    start,
                });
            }
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset: start,
        });
        Ok(())
    }

    /// The epoch of the record at `offset`: the epoch of the last entry that
    /// starts at or before it. `None` if the history starts after `offset`.
    /// The answer is only meaningful for offsets below the log end.
    #[must_use]
    pub fn epoch_of(&self, offset: Offset) -> Option<LeaderEpoch> {
        let covering = self
            .entries
            .partition_point(|entry| entry.start_offset <= offset);
        covering
            .checked_sub(1)
            .map(|index| self.entries[index].epoch)
    }

    /// The epoch of the record just before `end` (the last record of a log
    /// ending at `end`); `None` for `end == 0` or when the history does not
    /// reach that far back.
    #[must_use]
    pub fn epoch_before(&self, end: Offset) -> Option<LeaderEpoch> {
        end.0
            .checked_sub(1)
            .and_then(|last| self.epoch_of(Offset(last)))
    }

    /// The first offset of `epoch`'s run, if the history has that epoch.
    #[must_use]
    pub fn start_of(&self, epoch: LeaderEpoch) -> Option<Offset> {
        self.entries
            .binary_search_by(|entry| entry.epoch.cmp(&epoch))
            .ok()
            .map(|index| self.entries[index].start_offset)
    }

    /// Where the run of `epoch` ends in a log ending at `log_end`: the
    /// largest epoch `E' <= epoch` in the history and the first offset
    /// after its run (the next entry's start, or `log_end` for the last
    /// run). `None` if every epoch in the history is above `epoch`.
    ///
    /// This is the leader's half of divergence detection: records of
    /// `E'` below that end are the same in every log that holds them (the
    /// log matching property), records of epochs between `E'` and `epoch`
    /// exist only in logs that diverged.
    #[must_use]
    pub fn end_of(&self, epoch: LeaderEpoch, log_end: Offset) -> Option<EpochEnd> {
        let at_or_below = self.entries.partition_point(|entry| entry.epoch <= epoch);
        let index = at_or_below.checked_sub(1)?;
        let end_offset = self
            .entries
            .get(index + 1)
            .map_or(log_end, |next| next.start_offset);
        Some(EpochEnd {
            epoch: self.entries[index].epoch,
            end_offset,
        })
    }

    /// Forgets every run that starts at or after `offset`, for a log
    /// truncated to end at `offset`. Returns whether anything changed.
    pub fn truncate_from(&mut self, offset: Offset) -> bool {
        let keep = self
            .entries
            .partition_point(|entry| entry.start_offset < offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// Forgets runs that lie wholly below `log_start - 1`, for a log whose
    /// prefix was deleted by retention. The run covering `log_start - 1` is
    /// kept: a push starting at the log start still names the epoch of the
    /// record before it. Returns whether anything changed.
    pub fn retain_from(&mut self, log_start: Offset) -> bool {
        // Entry i covers [start_i, start_{i+1}); it is needed while that
        // range reaches log_start - 1, i.e. while start_{i+1} >= log_start.
        let drop = self
            .entries
            .windows(2)
            .take_while(|pair| pair[1].start_offset < log_start)
            .count();
        self.entries.drain(..drop);
        drop > 0
    }

    /// Forgets everything: for a log that was emptied.
    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// The standalone persisted form: magic, version, entry count, entries,
    /// CRC32C of everything before it. Little-endian.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(4 + 1 + 4 + self.entries.len() * ENTRY_BYTES + 4);
        writer.u32(HISTORY_MAGIC);
        writer.u8(HISTORY_VERSION);
        self.encode_entries(&mut writer);
        writer.finish_with_crc()
    }

    /// Decodes [`encode`](Self::encode)'s output.
    ///
    /// # Errors
    /// [`DecodeError`] for damaged or foreign bytes. Never panics and never
    /// allocates more than the input's length implies.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::with_crc(bytes, 4 + 1 + 4)?;
        reader.magic(HISTORY_MAGIC)?;
        reader.version(HISTORY_VERSION)?;
        let history = Self::decode_entries(&mut reader)?;
        reader.finish()?;
        Ok(history)
    }

    pub(crate) fn encode_entries(&self, writer: &mut Writer) {
        let count = u32::try_from(self.entries.len()).expect("history of over 2^32 epochs");
        writer.u32(count);
        for entry in &self.entries {
            writer.u32(entry.epoch.0);
            writer.u64(entry.start_offset.0);
        }
    }

    pub(crate) fn decode_entries(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let count = reader.u32()?;
        reader.expect_remaining(count, ENTRY_BYTES)?;
        let mut history = Self::new();
        for _ in 0..count {
            let epoch = LeaderEpoch(reader.u32()?);
            let start = Offset(reader.u64()?);
            history.append(epoch, start)?;
        }
        Ok(history)
    }
}

#[cfg(test)]
mod tests;
