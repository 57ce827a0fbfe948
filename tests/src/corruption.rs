//! Byte surgery on a stopped broker's data directory: find its files by
//! kind, damage one (seeded bit flips or a truncation), and keep a
//! pristine copy to put back.
//!
//! The layout this knows (see `broker/storage` (crate `corelog-storage`) and DESIGN §5):
//!
//! ```text
//! <data>/controller/raft.log                   controller Raft log (+ its snapshots)
//! <data>/topics/<name>.<id>/<p>/<base>.log     segments (the highest base is active)
//! <data>/topics/<name>.<id>/<p>/<base>.index   sealed offset index
//! <data>/topics/<name>.<id>/<p>/<base>.timeindex  sealed time index
//! <data>/topics/<name>.<id>/<p>/checkpoint     log start and recovery point
//! <data>/topics/<name>.<id>/<p>/replica-meta   fence, led epoch, epoch history
//! <data>/topics/<name>.<id>/<p>/producer-state producer-state snapshot
//! <data>/topics/<name>.<id>/<p>/deletions      deletion ledger
//! ```
//!
//! Consumer-group offsets live in the segments of the internal `__groups`
//! topic, which are their own kind here. Only a stopped broker may be
//! touched: a running one holds these files open.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use corelog_wire::rng::SplitMix64;

/// What a file of a broker's data directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    /// A segment of a user topic below the active one (immutable).
    ClosedSegment,
    /// The highest segment of a user topic partition (being appended to).
    ActiveSegment,
    /// `<base>.index` of any topic.
    OffsetIndex,
    /// `<base>.timeindex` of any topic.
    TimeIndex,
    /// `producer-state`.
    ProducerSnapshot,
    /// `replica-meta`: the epoch checkpoint (fence, led epoch, history).
    ReplicaMeta,
    /// `checkpoint`: log start and recovery point.
    PartitionCheckpoint,
    /// `deletions`: the deletion ledger.
    DeletionLedger,
    /// `controller/raft.log`: entries, hard states and metadata snapshots.
    ControllerLog,
    /// Any segment of the internal `__groups` topic (group offsets).
    GroupsSegment,
    /// Anything else (probe files, temporaries).
    Other,
}

impl FileKind {
    /// Every kind a test may ask to damage.
    pub const DAMAGEABLE: [FileKind; 10] = [
        FileKind::ClosedSegment,
        FileKind::ActiveSegment,
        FileKind::OffsetIndex,
        FileKind::TimeIndex,
        FileKind::ProducerSnapshot,
        FileKind::ReplicaMeta,
        FileKind::PartitionCheckpoint,
        FileKind::DeletionLedger,
        FileKind::ControllerLog,
        FileKind::GroupsSegment,
    ];
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// How a file is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Damage {
    /// One to three bits flipped within eight bytes at a random position.
    BitFlip,
    /// The file cut at a random length below its size.
    Truncate,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What [`corrupt`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// The damaged file.
    pub path: PathBuf,
    /// Its kind.
    pub kind: FileKind,
    /// How it was damaged.
    pub damage: Damage,
    /// The file's length before.
    pub file_len: u64,
    /// First byte changed, or the new length after a truncation.
    pub offset: u64,
    /// Bytes the flips spanned, or bytes cut off.
    pub len: u64,
    /// Bits flipped, as `(byte offset, mask)`; empty for a truncation.
    pub flips: Vec<(u64, u8)>,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.damage {
            Damage::BitFlip => write!(
                f,
                "{} ({}, {} bytes): flipped bits {:?} (byte, mask)",
                self.path.display(),
                self.kind,
                self.file_len,
                self.flips
            ),
            Damage::Truncate => write!(
                f,
                "{} ({}): truncated from {} to {} bytes",
                self.path.display(),
                self.kind,
                self.file_len,
                self.offset
            ),
        }
    }
}

/// The kind of `path`, a file under `data_dir`. Segments are told closed
/// from active by their siblings, so the directory is listed.
#[must_use]
pub fn classify(data_dir: &Path, path: &Path) -> FileKind {
    let Ok(relative) = path.strip_prefix(data_dir) else {
        return FileKind::Other;
    };
    let parts: Vec<&str> = relative
        .components()
        .filter_map(|part| part.as_os_str().to_str())
        .collect();
    match parts.as_slice() {
        ["controller", "raft.log"] => FileKind::ControllerLog,
        ["topics", topic_dir, _partition, name] => classify_partition_file(path, topic_dir, name),
        _ => FileKind::Other,
    }
}

fn classify_partition_file(path: &Path, topic_dir: &str, name: &str) -> FileKind {
    let topic = topic_dir
        .rsplit_once('.')
        .map_or(topic_dir, |(topic, _id)| topic);
    match name {
        "producer-state" => return FileKind::ProducerSnapshot,
        "replica-meta" => return FileKind::ReplicaMeta,
        "checkpoint" => return FileKind::PartitionCheckpoint,
        "deletions" => return FileKind::DeletionLedger,
        _ => {}
    }
    if name.ends_with(".index") && segment_base(name, ".index").is_some() {
        return FileKind::OffsetIndex;
    }
    if name.ends_with(".timeindex") && segment_base(name, ".timeindex").is_some() {
        return FileKind::TimeIndex;
    }
    let Some(base) = segment_base(name, ".log") else {
        return FileKind::Other;
    };
    if topic == "__groups" {
        return FileKind::GroupsSegment;
    }
    let highest = path.parent().and_then(|dir| {
        fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter_map(|entry| segment_base(entry.file_name().to_str()?, ".log"))
            .max()
    });
    if highest.is_some_and(|highest| highest > base) {
        FileKind::ClosedSegment
    } else {
        FileKind::ActiveSegment
    }
}

/// The base offset of a `<20 digits><suffix>` segment file name.
fn segment_base(name: &str, suffix: &str) -> Option<u64> {
    let stem = name.strip_suffix(suffix)?;
    (stem.len() == 20 && stem.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// Every regular file under `dir`, sorted.
///
/// # Errors
/// From listing the directories.
pub fn files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in fs::read_dir(&next)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The non-empty files of `kind` under `data_dir`, sorted.
///
/// # Errors
/// From listing the directory.
pub fn files_of(data_dir: &Path, kind: FileKind) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in files(data_dir)? {
        if classify(data_dir, &path) == kind && fs::metadata(&path)?.len() > 0 {
            out.push(path);
        }
    }
    Ok(out)
}

/// Damages one file of `kind` under `data_dir` (chosen by `seed`) the way
/// `how` says: `None` when there is no non-empty file of that kind.
///
/// # Errors
/// From reading, writing or truncating the file.
pub fn corrupt(
    data_dir: &Path,
    kind: FileKind,
    how: Damage,
    seed: u64,
) -> io::Result<Option<Corruption>> {
    let candidates = files_of(data_dir, kind)?;
    if candidates.is_empty() {
        return Ok(None);
    }
    let mut random = SplitMix64::new(seed);
    let path = candidates[random.below(candidates.len() as u64) as usize].clone();
    damage_file(&path, kind, how, &mut random).map(Some)
}

/// Damages `path` as [`corrupt`] would (for callers that pick the file).
///
/// # Errors
/// From reading, writing or truncating the file.
pub fn corrupt_file(path: &Path, kind: FileKind, how: Damage, seed: u64) -> io::Result<Corruption> {
    damage_file(path, kind, how, &mut SplitMix64::new(seed))
}

fn damage_file(
    path: &Path,
    kind: FileKind,
    how: Damage,
    random: &mut SplitMix64,
) -> io::Result<Corruption> {
    let mut bytes = fs::read(path)?;
    let file_len = bytes.len() as u64;
    if file_len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is empty: nothing to damage", path.display()),
        ));
    }
    let corruption = match how {
        Damage::BitFlip => {
            let start = random.below(file_len);
            let span = (file_len - start).min(8);
            let count = 1 + random.below(3);
            let mut flips: Vec<(u64, u8)> = Vec::new();
            for _ in 0..count {
                let at = start + random.below(span);
                let mask = 1u8 << random.below(8);
                bytes[at as usize] ^= mask;
                match flips.iter_mut().find(|(found, _)| *found == at) {
                    Some((_, existing)) => *existing ^= mask,
                    None => flips.push((at, mask)),
                }
            }
            // Two flips of one bit cancel: make sure something changed.
            flips.retain(|(_, mask)| *mask != 0);
            if flips.is_empty() {
                bytes[start as usize] ^= 1;
                flips.push((start, 1));
            }
            flips.sort_unstable();
            let end = flips.last().map_or(start, |(at, _)| *at);
            let first = flips[0].0;
            fs::write(path, &bytes)?;
            Corruption {
                path: path.to_path_buf(),
                kind,
                damage: how,
                file_len,
                offset: first,
                len: end - first + 1,
                flips,
            }
        }
        Damage::Truncate => {
            let new_len = random.below(file_len);
            let file = fs::OpenOptions::new().write(true).open(path)?;
            file.set_len(new_len)?;
            file.sync_all()?;
            Corruption {
                path: path.to_path_buf(),
                kind,
                damage: how,
                file_len,
                offset: new_len,
                len: file_len - new_len,
                flips: Vec::new(),
            }
        }
    };
    Ok(corruption)
}

/// Copies the whole data directory of a stopped broker to `backup` (which
/// must not exist), so that [`restore`] can put it back.
///
/// # Errors
/// From copying.
pub fn backup(data_dir: &Path, backup: &Path) -> io::Result<()> {
    copy_tree(data_dir, backup)
}

/// Replaces the data directory of a stopped broker with the copy taken by
/// [`backup`] (the copy is kept, for another restore).
///
/// # Errors
/// From removing or copying.
pub fn restore(backup: &Path, data_dir: &Path) -> io::Result<()> {
    if data_dir.exists() {
        fs::remove_dir_all(data_dir)?;
    }
    copy_tree(backup, data_dir)
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> tempfile::TempDir {
        let temp = tempfile::tempdir().unwrap();
        let data = temp.path();
        let partition = data.join("topics/events.2/0");
        let groups = data.join("topics/__groups.0/3");
        fs::create_dir_all(&partition).unwrap();
        fs::create_dir_all(&groups).unwrap();
        fs::create_dir_all(data.join("controller")).unwrap();
        fs::write(data.join("controller/raft.log"), vec![7u8; 100]).unwrap();
        for name in [
            "00000000000000000000.log",
            "00000000000000000000.index",
            "00000000000000000000.timeindex",
            "00000000000000000997.log",
            "checkpoint",
            "replica-meta",
            "producer-state",
        ] {
            fs::write(partition.join(name), vec![1u8; 64]).unwrap();
        }
        fs::write(groups.join("00000000000000000000.log"), vec![2u8; 64]).unwrap();
        fs::write(data.join(".dma-probe"), vec![0u8; 16]).unwrap();
        temp
    }

    #[test]
    fn classifies_every_file_kind() {
        let temp = layout();
        let data = temp.path();
        let kind = |relative: &str| classify(data, &data.join(relative));
        assert_eq!(kind("controller/raft.log"), FileKind::ControllerLog);
        let partition = "topics/events.2/0";
        assert_eq!(
            kind(&format!("{partition}/00000000000000000000.log")),
            FileKind::ClosedSegment
        );
        assert_eq!(
            kind(&format!("{partition}/00000000000000000997.log")),
            FileKind::ActiveSegment
        );
        assert_eq!(
            kind(&format!("{partition}/00000000000000000000.index")),
            FileKind::OffsetIndex
        );
        assert_eq!(
            kind(&format!("{partition}/00000000000000000000.timeindex")),
            FileKind::TimeIndex
        );
        assert_eq!(
            kind(&format!("{partition}/checkpoint")),
            FileKind::PartitionCheckpoint
        );
        assert_eq!(
            kind(&format!("{partition}/replica-meta")),
            FileKind::ReplicaMeta
        );
        assert_eq!(
            kind(&format!("{partition}/producer-state")),
            FileKind::ProducerSnapshot
        );
        assert_eq!(
            kind("topics/__groups.0/3/00000000000000000000.log"),
            FileKind::GroupsSegment
        );
        assert_eq!(kind(".dma-probe"), FileKind::Other);
    }

    #[test]
    fn damage_is_seeded_and_restore_undoes_it() {
        let temp = layout();
        let data = temp.path().to_path_buf();
        let elsewhere = tempfile::tempdir().unwrap();
        let saved = elsewhere.path().join("saved");
        backup(&data, &saved).unwrap();
        let before = fs::read(data.join("controller/raft.log")).unwrap();
        let flipped = corrupt(&data, FileKind::ControllerLog, Damage::BitFlip, 7)
            .unwrap()
            .unwrap();
        let after = fs::read(&flipped.path).unwrap();
        let changed: Vec<usize> = (0..before.len())
            .filter(|at| before[*at] != after[*at])
            .collect();
        assert!(!changed.is_empty() && changed.len() <= 3, "{changed:?}");
        assert_eq!(changed.len(), flipped.flips.len());

        restore(&saved, &data).unwrap();
        assert_eq!(fs::read(data.join("controller/raft.log")).unwrap(), before);
        let again = corrupt(&data, FileKind::ControllerLog, Damage::BitFlip, 7)
            .unwrap()
            .unwrap();
        assert_eq!(again.flips, flipped.flips, "the same seed, the same damage");

        let cut = corrupt(&data, FileKind::ClosedSegment, Damage::Truncate, 3)
            .unwrap()
            .unwrap();
        assert!(cut.offset < 64);
        assert_eq!(fs::metadata(&cut.path).unwrap().len(), cut.offset);
        assert_eq!(
            corrupt(&data, FileKind::DeletionLedger, Damage::Truncate, 3).unwrap(),
            None,
            "no file of the kind: nothing damaged"
        );
    }
}
