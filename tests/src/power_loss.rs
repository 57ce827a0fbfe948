//! Power loss for a killed broker: cut every file to the length its last
//! successful fdatasync made durable, as the broker's test build recorded
//! in its durable ledger (`corelog_storage::fault_hooks`, feature
//! `fault-injection`, which documents the ledger's format).
//!
//! What is modelled: data written but not synced is lost, from the end of
//! the file (a file is cut to its durable length, never corrupted in the
//! middle); a file created and never synced is empty. What is not: names
//! (creates, renames, removals) count as durable at once, as the ledger
//! does not record directory syncs.
//!
//! After applying, the ledger is emptied: every file it named is now at its
//! durable length, so a new run starts from them as its baseline (each file
//! is recorded with its length the first time the new process touches it).
//! Keeping the old lines instead would make the next power loss cut files
//! back to lengths the new process may since have overwritten and synced.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};

/// What a power loss cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerLossSummary {
    /// Files under the data directory the ledger knew and that still exist.
    pub files_known: u64,
    /// Files that were longer than their durable length and were cut.
    pub files_truncated: u64,
    /// Bytes cut, over all files.
    pub bytes_cut: u64,
}

/// Cuts every file under `data_dir` that `ledger` knows to its durable
/// length, then empties `ledger`. Files the ledger never names, and files
/// it names that no longer exist, are left alone. The broker must not be
/// running.
///
/// # Errors
/// The filesystem's error; `InvalidData` for a malformed ledger line (a
/// torn last line, without its newline, is ignored: kill -9 can leave one).
pub fn apply(data_dir: &Path, ledger: &Path) -> io::Result<PowerLossSummary> {
    let text = match std::fs::read_to_string(ledger) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(error),
    };
    let durable = durable_lengths(&text)?;
    let mut summary = PowerLossSummary::default();
    let mut paths: Vec<_> = durable
        .iter()
        .filter(|(path, _)| path.starts_with(data_dir))
        .collect();
    paths.sort();
    for (path, &len) in paths {
        let file = match OpenOptions::new().write(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        summary.files_known += 1;
        let size = file.metadata()?.len();
        if size > len {
            file.set_len(len)?;
            file.sync_all()?;
            summary.files_truncated += 1;
            summary.bytes_cut += size - len;
        }
    }
    if ledger.exists() {
        OpenOptions::new().write(true).truncate(true).open(ledger)?;
    }
    Ok(summary)
}

/// Replays the ledger: each path's durable length at its end.
fn durable_lengths(text: &str) -> io::Result<HashMap<PathBuf, u64>> {
    let mut durable: HashMap<PathBuf, u64> = HashMap::new();
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    for (number, line) in complete.lines().enumerate() {
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("durable ledger line {}: {line:?}", number + 1),
            )
        };
        let fields: Vec<&str> = line.split('\t').collect();
        let len = |field: &str| field.parse::<u64>().map_err(|_| bad());
        match fields.as_slice() {
            ["create", path] => {
                durable.insert(PathBuf::from(path), 0);
            }
            // A baseline only for a file not seen before: opening makes
            // nothing durable.
            ["open", length, path] => {
                let length = len(length)?;
                durable.entry(PathBuf::from(path)).or_insert(length);
            }
            ["sync", length, path] => {
                durable.insert(PathBuf::from(path), len(length)?);
            }
            ["rename", from, to] => match durable.remove(Path::new(from)) {
                Some(length) => {
                    durable.insert(PathBuf::from(to), length);
                }
                // A file the ledger never knew: its content is a baseline.
                None => {
                    durable.remove(Path::new(to));
                }
            },
            ["remove", path] => {
                durable.remove(Path::new(path));
            }
            _ => return Err(bad()),
        }
    }
    Ok(durable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_ignored_and_garbage_is_an_error() {
        let lengths = durable_lengths("create\t/d/a\nsync\t10\t/d/a\nsync\t99").unwrap();
        assert_eq!(lengths.get(Path::new("/d/a")), Some(&10));
        let error = durable_lengths("sync\tten\t/d/a\n").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }
}
