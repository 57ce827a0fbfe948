//! The data directory as a whole: private to the broker's user, and never
//! started without the controller log it had.
//!
//! It holds every record and, in the controller log, the users' SCRAM
//! credentials, so nobody else on the host may read it. The broker creates
//! everything owner-only (umask 077: directories 0700, files 0600), and at
//! start makes a directory that others can enter private again (0700): a
//! directory written by an earlier version (0755) is fixed with a warning,
//! and one the broker cannot fix stops it. A private top directory is
//! enough: without search permission on it nobody else reaches the files
//! below, whatever their own modes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::config::BrokerConfig;

/// Bits of a mode that give anyone but the owner access.
const OTHERS_MASK: u32 = 0o077;
/// The data directory's mode.
const PRIVATE_DIR_MODE: u32 = 0o700;

/// What [`make_private`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privacy {
    /// The directory was private already (or new).
    AlreadyPrivate,
    /// Others could enter it: it had this mode, and is 0700 now.
    Tightened {
        /// The mode it had.
        was: u32,
    },
}

/// Makes every file the process creates from now on owner-only, creates
/// `dir` (and its parents) if missing, and makes it private.
///
/// # Errors
/// What to do, when `dir` cannot be created, read or made private.
pub fn make_private(dir: &Path) -> Result<Privacy, String> {
    // Process-wide and inherited by every shard thread: set before any of
    // them starts.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(OTHERS_MASK));
    std::fs::create_dir_all(dir)
        .map_err(|error| format!("cannot create data directory {}: {error}", dir.display()))?;
    let mode = std::fs::metadata(dir)
        .map_err(|error| format!("cannot read data directory {}: {error}", dir.display()))?
        .permissions()
        .mode();
    if mode & OTHERS_MASK == 0 {
        return Ok(Privacy::AlreadyPrivate);
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE)).map_err(
        |error| {
            format!(
                "data directory {} can be read by other users (mode {:o}) and cannot be made \
                 private: {error}; run `chmod 700 {}` as its owner",
                dir.display(),
                mode & 0o7777,
                dir.display()
            )
        },
    )?;
    Ok(Privacy::Tightened { was: mode & 0o7777 })
}

/// The controller's Raft log in `data_dir`.
#[must_use]
pub fn controller_log_path(data_dir: &Path) -> PathBuf {
    data_dir.join("controller").join("raft.log")
}

/// Refuses to start a controller voter whose data directory has an
/// identity but no controller log.
///
/// A directory gets its identity only after its first start created the
/// controller log (`crate::identity::establish`), so such a log was lost,
/// not yet to be made. The log is the catalog (topics, settings, users,
/// ACLs, quotas) and this voter's Raft term and vote: starting without it
/// would empty a single node's catalog while its topics' data stays on
/// disk (and hand out their ids again), and let a cluster voter vote twice
/// in one term. A single node may rebuild its catalog with
/// `--rebuild-catalog`; a cluster voter may not.
///
/// # Errors
/// What happened and what to do, for the operator.
pub fn check_controller_log(config: &BrokerConfig) -> Result<(), String> {
    let log = controller_log_path(&config.data_dir);
    let voters = config.voters();
    let is_voter = voters.contains_key(&config.node_id);
    let sole_voter = is_voter && voters.len() == 1;
    if config.rebuild_catalog && !sole_voter {
        return Err(
            "--rebuild-catalog is for a single node (its own only controller voter): a voter of a \
             larger cluster gets the catalog from the other voters; see the README, \"Losing \
             brokers\""
                .to_owned(),
        );
    }
    if !is_voter || !crate::identity::is_recorded(&config.data_dir) || log.exists() {
        return Ok(());
    }
    if sole_voter {
        if config.rebuild_catalog {
            return Ok(());
        }
        return Err(format!(
            "the controller log {} is missing, but this data directory ran before: the log \
             is the catalog of topics, their settings, users, ACLs and quotas, and starting \
             without it would hide every topic and reuse their ids. Restore the file from a \
             backup of this node, or rebuild the catalog from the topic directories with \
             `corelogd --rebuild-catalog` (same flags otherwise): topics keep their ids and \
             records, their settings go back to the defaults, and users, ACLs and quotas must \
             be created again",
            log.display()
        ));
    }
    Err(format!(
        "the controller log {} is missing, but this data directory ran before: it held this \
         controller voter's Raft term and vote, and a voter that forgot its vote could vote \
         twice in one term and let two leaders commit. Restore the file from a backup of this \
         node; without one, keep this node stopped (the other voters go on while they are a \
         majority) until the cluster can replace a voter (see the README, \"Losing brokers\")",
        log.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_others_can_enter_is_made_private_and_new_files_are_owner_only() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(make_private(&dir), Ok(Privacy::Tightened { was: 0o755 }));
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(make_private(&dir), Ok(Privacy::AlreadyPrivate));
        std::fs::write(dir.join("file"), b"x").unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        assert_eq!(mode(&dir.join("file")), 0o600);
        assert_eq!(mode(&dir.join("sub")), 0o700);
    }
}
