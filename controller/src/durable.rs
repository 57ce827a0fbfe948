//! The controller's durable format: one append-only log file holding Raft
//! entries, hard states and snapshots, each record with its own CRC32C. The
//! broker writes the bytes; this module only encodes and decodes them.
//!
//! ```text
//! file   = header · record*
//! header = magic "CLRL" · version u8 (2) · 3 zero bytes · slot · slot
//! slot   = sequence u64 LE · synced length u64 LE
//!        · crc32c(sequence · synced length) u32 LE · 4 zero bytes
//! record = marker u32 LE (0x5243_4C43) · body length u32 LE
//!        · crc32c(body length bytes · body) u32 LE · body
//! body   = kind u8 · fields, little-endian:
//!   1 entry:      index u64 · term u64 · entry type u8 (0 normal, 1 conf
//!                 change, 2 conf change v2) · data (u32 length · bytes)
//!                 · context (u32 length · bytes)
//!   2 hard state: term u64 · vote u64 (0 = none) · commit u64
//!   3 snapshot:   index u64 · term u64 · flags u8 (bit 0: resets the log)
//!                 · voters (u32 count · u64*) · metadata state (u32 length
//!                 · a sealed `MetadataState::encode`)
//! ```
//!
//! Why one file: every Ready becomes one contiguous append and one fsync,
//! so the entries, the hard state and a snapshot installed from the leader
//! become durable together, in order. A snapshot installed from the leader
//! replaces the whole log (`resets the log`), which a separate snapshot file
//! could not do atomically with the log. Snapshots taken locally to bound
//! the log drop only the entries they cover; the broker then rewrites the
//! file with [`encode_log`] (write a new file, fsync, rename, fsync the
//! directory) whenever it wants the space back.
//!
//! The two slots say how much of the file is known durable: after each
//! fdatasync of an append the broker overwrites the older slot (the next
//! sequence number, the file's length) and fdatasyncs again. A torn slot write leaves
//! the other slot, a lower bound, intact. This is what tells a torn last
//! append (beyond the synced length: never acknowledged, safe to cut) from
//! a file that lost synced bytes (entries and votes this node may have
//! acknowledged to its peers: cutting them silently could elect two leaders
//! or forget a committed entry, so recovery refuses). A new file is
//! written whole and renamed into place, so a file shorter than its header
//! is damage, never a crash during creation. Files of version 1 (no slots)
//! are read; the broker rewrites them in the current format.
//!
//! Recovery ([`recover`]) replays records in order: an entry record at an
//! index at or below the log's last index replaces the suffix from there
//! (Raft truncation), the last hard state wins, a snapshot drops what it
//! covers. A damaged record is a torn tail, truncated, when no valid record
//! can be found anywhere after it (the broker's last append was cut by a
//! crash); a damaged record followed by a valid one is corruption, reported
//! with its byte position, never skipped (C10). The marker lets the scan
//! for a later valid record test only plausible starts.

use bytes::Bytes;

use crate::codec::{DecodeError, Reader, Writer};
use crate::types::NodeId;

/// Magic, version and padding of the current format.
const PREAMBLE: [u8; 8] = *b"CLRL\x02\x00\x00\x00";
/// The whole header of the first format (no synced-length slots): read,
/// never written.
const PREAMBLE_V1: [u8; 8] = *b"CLRL\x01\x00\x00\x00";
/// Bytes of one synced-length slot.
pub const SLOT_BYTES: usize = 24;
/// Bytes of the header: the preamble and two slots. Records follow.
pub const LOG_HEADER_BYTES: usize = PREAMBLE.len() + 2 * SLOT_BYTES;
/// Marker in front of every record.
const RECORD_MARKER: u32 = 0x5243_4C43;
const RECORD_HEADER_BYTES: usize = 12;
/// Largest record body: a snapshot of the largest state we accept, which
/// is the single-node metadata file's bound.
pub const RECORD_BYTES_MAX: usize = 64 << 20;
/// Most voters a snapshot may name; controller groups have 1, 3 or 5.
const VOTERS_MAX: usize = 64;

const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
const KIND_SNAPSHOT: u8 = 3;
const FLAG_RESETS_LOG: u8 = 1;

/// What Raft must find again after a restart: its term, vote and commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    /// Current term.
    pub term: u64,
    /// Who this node voted for in `term`; 0 for nobody.
    pub vote: u64,
    /// Highest index known committed.
    pub commit: u64,
}

/// Raft's entry types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A command (or a new leader's empty entry).
    Normal,
    /// A membership change (not proposed by this crate yet).
    ConfChange,
    /// A joint membership change (not proposed by this crate yet).
    ConfChangeV2,
}

/// One Raft log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Position in the log, from 1.
    pub index: u64,
    /// Term of the leader that appended it.
    pub term: u64,
    /// Its type.
    pub kind: EntryKind,
    /// An encoded [`crate::command::Command`], or empty.
    pub data: Bytes,
    /// Raft's context bytes (unused by this crate, kept verbatim).
    pub context: Bytes,
}

/// A snapshot of the metadata state at `index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// Last log index it covers (the state's version).
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
    /// The Raft voters.
    pub voters: Vec<NodeId>,
    /// True when installed from the leader: it replaces the whole log.
    /// False when taken locally: entries after `index` stay.
    pub resets_log: bool,
    /// [`crate::state::MetadataState::encode`] bytes.
    pub state: Bytes,
}

/// One record of the log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRecord {
    /// An entry.
    Entry(LogEntry),
    /// A hard state.
    HardState(HardState),
    /// A snapshot.
    Snapshot(SnapshotRecord),
}

/// Why a log file cannot be recovered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurableError {
    /// A damaged record that is not the tail: data after it is intact, so
    /// truncating would lose it. Restore from a healthy controller node.
    #[error("controller log corrupt at byte {position}: {reason}")]
    Corrupt {
        /// Byte offset of the damaged record.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// The file's intact records end before the length its header says was
    /// made durable: synced records were cut off or damaged at the end. They
    /// may hold entries or a vote this node acknowledged, so cutting them
    /// would break Raft's promises; restore the file or rebuild the node.
    #[error(
        "controller log truncated: its intact records end at byte {intact_len}, but \
         {synced_len} bytes were made durable (synced-length slot {sequence}); the lost \
         records may hold entries or a vote this node acknowledged"
    )]
    Truncated {
        /// Where the intact records end.
        intact_len: u64,
        /// The length the latest valid slot recorded.
        synced_len: u64,
        /// That slot's sequence number.
        sequence: u64,
    },
    /// Valid records that contradict each other (an entry gap, a term going
    /// back): the file was not written by a correct broker.
    #[error("controller log inconsistent at byte {position}: {reason}")]
    Inconsistent {
        /// Byte offset of the offending record.
        position: u64,
        /// What is wrong.
        reason: String,
    },
}

/// A cut-off last append found by [`scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where it starts: the file's valid length.
    pub position: u64,
    /// Bytes from there to the end.
    pub bytes: u64,
}

/// A header slot's promise: the first `len` bytes of the file are durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncedLength {
    /// Grows by one with every slot write; the higher valid slot wins.
    pub sequence: u64,
    /// Bytes of the file known durable when the slot was written.
    pub len: u64,
}

/// What the header of a log file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// Version 1: no synced length is known; rewrite the file.
    V1,
    /// The current version.
    Current {
        /// The latest valid slot.
        synced: SyncedLength,
        /// Whether the other slot failed its checksum (not merely unused):
        /// harmless, as the next slot write replaces it, but worth a warning.
        damaged_slot: bool,
    },
}

/// Where and what to write so that the header records a synced length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotWrite {
    /// Byte offset in the file.
    pub position: u64,
    /// The slot's bytes.
    pub bytes: [u8; SLOT_BYTES],
}

/// The records of a log file, in order, with their byte positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// The header; `None` for an empty file (a new node).
    pub header: Option<Header>,
    /// Records and where each starts.
    pub records: Vec<(u64, LogRecord)>,
    /// Length of the valid prefix; the broker truncates the file to it.
    pub valid_len: u64,
    /// The torn tail, if the file had one.
    pub torn_tail: Option<TornTail>,
}

/// What a node needs to restart: the Raft storage as it was made durable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredLog {
    /// The latest snapshot.
    pub snapshot: Option<SnapshotRecord>,
    /// Entries after the snapshot, consecutive.
    pub entries: Vec<LogEntry>,
    /// The latest hard state.
    pub hard_state: HardState,
}

/// A recovered log and what to do to the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Hand this to [`crate::node::ControllerNode::new`].
    pub log: RecoveredLog,
    /// The header; `None` for an empty file (write [`new_log_file`]). For
    /// [`Header::V1`] replace the file with [`encode_log`] of `log`.
    pub header: Option<Header>,
    /// Truncate the file to this length before appending again.
    pub valid_len: u64,
    /// The torn tail that was cut off, for the broker's log. It lies beyond
    /// the synced length, so nothing in it was acknowledged.
    pub torn_tail: Option<TornTail>,
}

/// Appends one record to `out`.
pub fn encode_record(record: &LogRecord, out: &mut Vec<u8>) {
    let mut body = Writer::default();
    match record {
        LogRecord::Entry(entry) => {
            body.u8(KIND_ENTRY);
            body.u64(entry.index);
            body.u64(entry.term);
            body.u8(match entry.kind {
                EntryKind::Normal => 0,
                EntryKind::ConfChange => 1,
                EntryKind::ConfChangeV2 => 2,
            });
            body.bytes(&entry.data);
            body.bytes(&entry.context);
        }
        LogRecord::HardState(hard_state) => {
            body.u8(KIND_HARD_STATE);
            body.u64(hard_state.term);
            body.u64(hard_state.vote);
            body.u64(hard_state.commit);
        }
        LogRecord::Snapshot(snapshot) => {
            body.u8(KIND_SNAPSHOT);
            body.u64(snapshot.index);
            body.u64(snapshot.term);
            body.u8(if snapshot.resets_log {
                FLAG_RESETS_LOG
            } else {
                0
            });
            body.len(snapshot.voters.len());
            for voter in &snapshot.voters {
                body.u64(voter.0);
            }
            body.bytes(&snapshot.state);
        }
    }
    let mut header = Writer::default();
    header.u32(RECORD_MARKER);
    header.len(body.bytes.len());
    let mut crc = crc32c::crc32c(&header.bytes[4..8]);
    crc = crc32c::crc32c_append(crc, &body.bytes);
    header.u32(crc);
    out.extend_from_slice(&header.bytes);
    out.extend_from_slice(&body.bytes);
}

/// The slot write recording that the first `len` bytes are durable, as
/// the `sequence`-th such write (they alternate between the two slots).
#[must_use]
pub fn synced_length_slot(sequence: u64, len: u64) -> SlotWrite {
    let mut bytes = [0u8; SLOT_BYTES];
    bytes[..8].copy_from_slice(&sequence.to_le_bytes());
    bytes[8..16].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..16]);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    SlotWrite {
        position: (PREAMBLE.len() + (sequence % 2) as usize * SLOT_BYTES) as u64,
        bytes,
    }
}

/// A new log file: a header whose first slot says the header is durable.
/// Create it whole (write a temporary file, fsync, rename): then a file
/// shorter than its header is never a crash, always damage.
#[must_use]
pub fn new_log_file() -> Vec<u8> {
    let mut out = vec![0u8; LOG_HEADER_BYTES];
    finish_header(&mut out);
    out
}

/// Writes the preamble and a first slot covering all of `file`.
fn finish_header(file: &mut [u8]) {
    file[..PREAMBLE.len()].copy_from_slice(&PREAMBLE);
    let slot = synced_length_slot(0, file.len() as u64);
    let at = slot.position as usize;
    file[at..at + SLOT_BYTES].copy_from_slice(&slot.bytes);
}

/// The latest valid slot of a current-format header, `None` if `file`
/// does not start with one (version 1, damaged or too short).
#[must_use]
pub fn synced_length(file: &[u8]) -> Option<SyncedLength> {
    match decode_header(file) {
        Ok(Header::Current { synced, .. }) => Some(synced),
        _ => None,
    }
}

/// One header slot as found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// All zeros: never written.
    Unused,
    /// Fails its checksum: a torn write, or damage.
    Damaged,
    Valid(SyncedLength),
}

fn decode_slot(bytes: &[u8]) -> Slot {
    if bytes.iter().all(|byte| *byte == 0) {
        return Slot::Unused;
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
    let stored = u32::from_le_bytes(bytes[16..20].try_into().unwrap_or_default());
    if stored != crc32c::crc32c(&bytes[..16]) || bytes[20..SLOT_BYTES] != [0; 4] {
        return Slot::Damaged;
    }
    Slot::Valid(SyncedLength {
        sequence: word(0),
        len: word(8),
    })
}

fn decode_header(bytes: &[u8]) -> Result<Header, DurableError> {
    let corrupt = |reason: &str| DurableError::Corrupt {
        position: 0,
        reason: reason.to_owned(),
    };
    if bytes.starts_with(&PREAMBLE_V1) {
        return Ok(Header::V1);
    }
    if bytes.len() < PREAMBLE.len() || bytes[..PREAMBLE.len()] != PREAMBLE {
        return Err(corrupt(
            "not a controller log of a supported version: bad header",
        ));
    }
    if bytes.len() < LOG_HEADER_BYTES {
        return Err(corrupt("header cut short"));
    }
    let slots = [PREAMBLE.len(), PREAMBLE.len() + SLOT_BYTES]
        .map(|at| decode_slot(&bytes[at..at + SLOT_BYTES]));
    let damaged_slot = slots.contains(&Slot::Damaged);
    let synced = slots
        .iter()
        .filter_map(|slot| match slot {
            Slot::Valid(synced) => Some(*synced),
            Slot::Unused | Slot::Damaged => None,
        })
        .max_by_key(|synced| synced.sequence)
        .ok_or_else(|| corrupt("both synced-length slots are damaged"))?;
    Ok(Header::Current {
        synced,
        damaged_slot,
    })
}

/// A whole log file holding `log`: the compacted rewrite of a file.
#[must_use]
pub fn encode_log(log: &RecoveredLog) -> Vec<u8> {
    let mut out = vec![0u8; LOG_HEADER_BYTES];
    if let Some(snapshot) = &log.snapshot {
        let snapshot = SnapshotRecord {
            resets_log: true,
            ..snapshot.clone()
        };
        encode_record(&LogRecord::Snapshot(snapshot), &mut out);
    }
    for entry in &log.entries {
        encode_record(&LogRecord::Entry(entry.clone()), &mut out);
    }
    encode_record(&LogRecord::HardState(log.hard_state), &mut out);
    finish_header(&mut out);
    out
}

/// Decodes the record starting at `position`; returns it and its length.
fn decode_record_at(bytes: &[u8], position: usize) -> Result<(LogRecord, usize), DecodeError> {
    let what = "log record";
    let mut reader = Reader::new(&bytes[position..], position);
    let marker = reader.u32(what)?;
    if marker != RECORD_MARKER {
        return Err(DecodeError::BadMagic { what });
    }
    let len_at = reader.position();
    let len = reader.u32(what)? as usize;
    if len > RECORD_BYTES_MAX + 64 {
        return Err(reader.invalid_at(what, len_at, format!("length {len} over the limit")));
    }
    let stored = reader.u32(what)?;
    let body = reader.take(len, what)?;
    let computed = crc32c::crc32c_append(crc32c::crc32c(&(len as u32).to_le_bytes()), body);
    if stored != computed {
        return Err(DecodeError::Checksum {
            what,
            stored,
            computed,
        });
    }
    let mut body = Reader::new(body, position + RECORD_HEADER_BYTES);
    let record = decode_body(&mut body)?;
    body.finish()?;
    Ok((record, RECORD_HEADER_BYTES + len))
}

fn decode_body(reader: &mut Reader<'_>) -> Result<LogRecord, DecodeError> {
    let at = reader.position();
    Ok(match reader.u8("record kind")? {
        KIND_ENTRY => {
            let index = reader.u64("entry index")?;
            let term = reader.u64("entry term")?;
            let type_at = reader.position();
            let kind = match reader.u8("entry type")? {
                0 => EntryKind::Normal,
                1 => EntryKind::ConfChange,
                2 => EntryKind::ConfChangeV2,
                other => {
                    return Err(reader.invalid_at("entry type", type_at, format!("{other}")));
                }
            };
            LogRecord::Entry(LogEntry {
                index,
                term,
                kind,
                data: Bytes::copy_from_slice(reader.bytes("entry data", RECORD_BYTES_MAX)?),
                context: Bytes::copy_from_slice(reader.bytes("entry context", RECORD_BYTES_MAX)?),
            })
        }
        KIND_HARD_STATE => LogRecord::HardState(HardState {
            term: reader.u64("term")?,
            vote: reader.u64("vote")?,
            commit: reader.u64("commit")?,
        }),
        KIND_SNAPSHOT => {
            let index = reader.u64("snapshot index")?;
            let term = reader.u64("snapshot term")?;
            let flags_at = reader.position();
            let flags = reader.u8("snapshot flags")?;
            if flags & !FLAG_RESETS_LOG != 0 {
                return Err(reader.invalid_at("snapshot flags", flags_at, format!("{flags:#x}")));
            }
            let count = reader.len("voters", VOTERS_MAX, 8)?;
            let mut voters = Vec::with_capacity(count);
            for _ in 0..count {
                voters.push(NodeId(reader.u64("voter")?));
            }
            LogRecord::Snapshot(SnapshotRecord {
                index,
                term,
                voters,
                resets_log: flags & FLAG_RESETS_LOG != 0,
                state: Bytes::copy_from_slice(reader.bytes("snapshot state", RECORD_BYTES_MAX)?),
            })
        }
        kind => return Err(reader.invalid_at("record kind", at, format!("unknown kind {kind}"))),
    })
}

/// Whether a valid record starts anywhere after `position`.
fn valid_record_after(bytes: &[u8], position: usize) -> bool {
    let marker = RECORD_MARKER.to_le_bytes();
    (position + 1..bytes.len().saturating_sub(RECORD_HEADER_BYTES - 1))
        .filter(|start| bytes[*start..].starts_with(&marker))
        .any(|start| decode_record_at(bytes, start).is_ok())
}

/// Splits a log file into records, finding a torn tail.
///
/// # Errors
/// [`DurableError::Corrupt`] naming the position of a damaged record that
/// is followed by a valid one, or of a damaged header. Never panics.
pub fn scan(bytes: &[u8]) -> Result<Scan, DurableError> {
    let file_len = bytes.len() as u64;
    if bytes.is_empty() {
        return Ok(Scan {
            header: None,
            records: Vec::new(),
            valid_len: 0,
            torn_tail: None,
        });
    }
    let header = decode_header(bytes)?;
    let mut records = Vec::new();
    let mut position = match header {
        Header::V1 => PREAMBLE_V1.len(),
        Header::Current { .. } => LOG_HEADER_BYTES,
    };
    while position < bytes.len() {
        match decode_record_at(bytes, position) {
            Ok((record, len)) => {
                records.push((position as u64, record));
                position += len;
            }
            Err(error) => {
                if valid_record_after(bytes, position) {
                    return Err(DurableError::Corrupt {
                        position: position as u64,
                        reason: error.to_string(),
                    });
                }
                return Ok(Scan {
                    header: Some(header),
                    records,
                    valid_len: position as u64,
                    torn_tail: Some(TornTail {
                        position: position as u64,
                        bytes: file_len - position as u64,
                    }),
                });
            }
        }
    }
    Ok(Scan {
        header: Some(header),
        records,
        valid_len: file_len,
        torn_tail: None,
    })
}

/// Recovers the Raft storage from a log file (see the module docs).
///
/// # Errors
/// [`DurableError`] when the file is corrupt or its records contradict
/// each other. Never panics.
pub fn recover(bytes: &[u8]) -> Result<Recovery, DurableError> {
    let scan = scan(bytes)?;
    if let Some(Header::Current { synced, .. }) = scan.header
        && scan.valid_len < synced.len
    {
        return Err(DurableError::Truncated {
            intact_len: scan.valid_len,
            synced_len: synced.len,
            sequence: synced.sequence,
        });
    }
    let mut log = RecoveredLog::default();
    for (position, record) in scan.records {
        let inconsistent = |reason: String| DurableError::Inconsistent { position, reason };
        match record {
            LogRecord::Entry(entry) => append_entry(&mut log, entry).map_err(inconsistent)?,
            LogRecord::HardState(hard_state) => log.hard_state = hard_state,
            LogRecord::Snapshot(snapshot) => {
                install_snapshot(&mut log, snapshot).map_err(inconsistent)?;
            }
        }
    }
    let base = log.snapshot.as_ref().map_or(0, |snapshot| snapshot.index);
    let last = log.entries.last().map_or(base, |entry| entry.index);
    // Everything a snapshot covers is committed, whatever the last hard
    // state said before it was written.
    log.hard_state.commit = log.hard_state.commit.max(base);
    if log.hard_state.commit > last {
        return Err(DurableError::Inconsistent {
            position: scan.valid_len,
            reason: format!(
                "hard state commits index {} but the log ends at {last}",
                log.hard_state.commit
            ),
        });
    }
    Ok(Recovery {
        log,
        header: scan.header,
        valid_len: scan.valid_len,
        torn_tail: scan.torn_tail,
    })
}

fn append_entry(log: &mut RecoveredLog, entry: LogEntry) -> Result<(), String> {
    let (base, base_term) = log
        .snapshot
        .as_ref()
        .map_or((0, 0), |snapshot| (snapshot.index, snapshot.term));
    let last = log.entries.last().map_or(base, |entry| entry.index);
    if entry.index <= base || entry.index > last + 1 {
        return Err(format!(
            "entry {} does not follow the log (snapshot {base}, last {last})",
            entry.index
        ));
    }
    log.entries.truncate((entry.index - base - 1) as usize);
    let previous_term = log.entries.last().map_or(base_term, |entry| entry.term);
    if entry.term < previous_term {
        return Err(format!(
            "entry {} has term {} below the term {previous_term} before it",
            entry.index, entry.term
        ));
    }
    log.entries.push(entry);
    Ok(())
}

fn install_snapshot(log: &mut RecoveredLog, snapshot: SnapshotRecord) -> Result<(), String> {
    let base = log.snapshot.as_ref().map_or(0, |snapshot| snapshot.index);
    if snapshot.resets_log {
        log.entries.clear();
    } else {
        if snapshot.index < base {
            return Err(format!(
                "snapshot at {} is older than the one before it at {base}",
                snapshot.index
            ));
        }
        let covered = log
            .entries
            .iter()
            .take_while(|entry| entry.index <= snapshot.index)
            .count();
        let ends_at = log
            .entries
            .get(covered.wrapping_sub(1))
            .map(|entry| entry.index);
        if snapshot.index > base && ends_at != Some(snapshot.index) {
            return Err(format!(
                "snapshot at {} covers entries the log does not have",
                snapshot.index
            ));
        }
        log.entries.drain(..covered);
    }
    log.snapshot = Some(snapshot);
    Ok(())
}

#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
