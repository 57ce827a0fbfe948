//! The hooks themselves; see the parent module for what they do.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::{BUILD_MARKER, FILTER_FILE_ENV, LEDGER_ENV};

struct Hooks {
    fail_next_sync: Arc<AtomicBool>,
    fail_next_write: Arc<AtomicBool>,
    filter_file: Option<PathBuf>,
    ledger: Option<Mutex<Ledger>>,
    /// Faults injected so far, for the log line.
    injected: AtomicU64,
}

struct Ledger {
    file: std::fs::File,
    /// Per path: the end of completed writes and truncations.
    lengths: HashMap<PathBuf, u64>,
}

impl Ledger {
    fn record(&mut self, line: &str) {
        // One write per line: a kill -9 loses at most the event in flight.
        if let Err(error) = self.file.write_all(line.as_bytes()) {
            tracing::error!(%error, "fault injection: writing the durable ledger failed");
        }
    }
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// Arms the signal handlers and opens the ledger; idempotent. Called when a
/// shard prepares its disk, before any file is opened.
pub fn install() {
    hooks();
}

fn hooks() -> &'static Hooks {
    HOOKS.get_or_init(|| {
        let hooks = Hooks {
            fail_next_sync: Arc::new(AtomicBool::new(false)),
            fail_next_write: Arc::new(AtomicBool::new(false)),
            filter_file: std::env::var_os(FILTER_FILE_ENV).map(PathBuf::from),
            ledger: open_ledger(),
            injected: AtomicU64::new(0),
        };
        for (signal, flag) in [
            (signal_hook::consts::SIGUSR1, &hooks.fail_next_sync),
            (signal_hook::consts::SIGUSR2, &hooks.fail_next_write),
        ] {
            if let Err(error) = signal_hook::flag::register(signal, Arc::clone(flag)) {
                tracing::error!(signal, %error, "fault injection: cannot register the signal");
            }
        }
        tracing::warn!(
            marker = BUILD_MARKER,
            ledger = hooks.ledger.is_some(),
            "fault injection build: SIGUSR1 fails the next fdatasync, SIGUSR2 the next write"
        );
        hooks
    })
}

fn open_ledger() -> Option<Mutex<Ledger>> {
    let path = std::env::var_os(LEDGER_ENV)?;
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(file) => Some(Mutex::new(Ledger {
            file,
            lengths: HashMap::new(),
        })),
        Err(error) => {
            tracing::error!(path = ?path, %error, "fault injection: cannot open the durable ledger");
            None
        }
    }
}

fn with_ledger(action: impl FnOnce(&mut Ledger)) {
    if let Some(ledger) = &hooks().ledger {
        // A panic elsewhere while holding the lock leaves the map usable.
        let mut ledger = ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        action(&mut ledger);
    }
}

/// The path as a ledger field, or `None` if it cannot be one.
fn field(path: &Path) -> Option<&str> {
    path.to_str().filter(|text| !text.contains(['\t', '\n']))
}

/// Consumes an armed fault if `path` is eligible.
fn take_fault(flag: &AtomicBool, path: &Path, operation: &str) -> io::Result<()> {
    let hooks = hooks();
    if !flag.load(Ordering::Acquire) || !matches_filter(hooks, path) {
        return Ok(());
    }
    if flag.swap(false, Ordering::AcqRel) {
        let count = hooks.injected.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::error!(path = %path.display(), operation, count, "fault injection: failing with EIO");
        return Err(io::Error::from_raw_os_error(
            rustix::io::Errno::IO.raw_os_error(),
        ));
    }
    Ok(())
}

fn matches_filter(hooks: &Hooks, path: &Path) -> bool {
    let Some(filter_file) = &hooks.filter_file else {
        return true;
    };
    match std::fs::read_to_string(filter_file) {
        Ok(text) if !text.trim().is_empty() => path.to_string_lossy().contains(text.trim()),
        _ => true,
    }
}

/// Before opening `path`: whether it exists (to tell a create from an open).
#[must_use]
pub fn exists(path: &Path) -> bool {
    path.exists()
}

/// After `path` was opened; `existed` as [`exists`] said before.
pub fn opened(path: &Path, existed: bool) {
    with_ledger(|ledger| {
        if existed {
            track_existing(ledger, path);
        } else {
            ledger.lengths.insert(path.to_path_buf(), 0);
            if let Some(text) = field(path) {
                ledger.record(&format!("create\t{text}\n"));
            }
        }
    });
}

/// Records the baseline of an existing file this process has not seen yet
/// (opened outside [`opened`], such as the Raft log's buffered file).
fn track_existing(ledger: &mut Ledger, path: &Path) {
    if ledger.lengths.contains_key(path) {
        return;
    }
    let len = std::fs::metadata(path).map_or(0, |metadata| metadata.len());
    ledger.lengths.insert(path.to_path_buf(), len);
    if let Some(text) = field(path) {
        ledger.record(&format!("open\t{len}\t{text}\n"));
    }
}

/// Before a write to `path`: an armed write fault fails it.
///
/// # Errors
/// EIO when a write fault is armed and `path` is eligible.
pub fn before_write(path: &Path) -> io::Result<()> {
    take_fault(&hooks().fail_next_write, path, "write")?;
    with_ledger(|ledger| track_existing(ledger, path));
    Ok(())
}

/// After a write to `path` that ended at byte `end` completed.
pub fn wrote(path: &Path, end: u64) {
    with_ledger(|ledger| {
        let len = ledger.lengths.entry(path.to_path_buf()).or_insert(0);
        *len = (*len).max(end);
    });
}

/// After `path` was truncated (or extended) to `len` bytes.
pub fn truncated(path: &Path, len: u64) {
    with_ledger(|ledger| {
        ledger.lengths.insert(path.to_path_buf(), len);
    });
}

/// Before an fdatasync of `path`: the length it will make durable.
///
/// # Errors
/// EIO when a sync fault is armed and `path` is eligible.
pub fn before_sync(path: &Path) -> io::Result<Option<u64>> {
    take_fault(&hooks().fail_next_sync, path, "fdatasync")?;
    let mut len = None;
    with_ledger(|ledger| {
        track_existing(ledger, path);
        len = ledger.lengths.get(path).copied();
    });
    Ok(len)
}

/// After an fdatasync of `path` succeeded; `len` from [`before_sync`].
pub fn synced(path: &Path, len: Option<u64>) {
    let Some(len) = len else { return };
    with_ledger(|ledger| {
        if let Some(text) = field(path) {
            ledger.record(&format!("sync\t{len}\t{text}\n"));
        }
    });
}

/// After `from` was renamed over `to`.
pub fn renamed(from: &Path, to: &Path) {
    with_ledger(|ledger| {
        if let Some(len) = ledger.lengths.remove(from) {
            ledger.lengths.insert(to.to_path_buf(), len);
        }
        if let (Some(from), Some(to)) = (field(from), field(to)) {
            ledger.record(&format!("rename\t{from}\t{to}\n"));
        }
    });
}

/// After `path` was removed.
pub fn removed(path: &Path) {
    with_ledger(|ledger| {
        ledger.lengths.remove(path);
        if let Some(text) = field(path) {
            ledger.record(&format!("remove\t{text}\n"));
        }
    });
}
