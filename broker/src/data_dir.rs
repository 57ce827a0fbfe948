//! The data directory as a whole: private to the broker's user.
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
use std::path::Path;

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
