//! A small filesystem in a temp dir, for disk-full tests: a broker's data
//! directory placed on it runs out of space after a few MiB, and the test
//! can fill it to the last block ([`SmallFs::fill`]) and free it again
//! ([`SmallFs::free`]) while the broker runs.
//!
//! Two kinds: tmpfs ([`SmallFs::mount`]; accepts `O_DIRECT` on this kernel,
//! so glommio's DMA files work) and a loop-mounted ext4 image
//! ([`SmallFs::mount_ext4`]; a real block filesystem with its metadata and
//! journal). Both need root (`CAP_SYS_ADMIN`). Dropping a `SmallFs` unmounts
//! it (lazily, should a killed broker's files still be open) and detaches
//! the loop device, also when a test panics.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The ballast file's name in the filesystem's root.
const BALLAST: &str = "ballast";

/// Why a small filesystem could not be set up.
#[derive(Debug)]
pub enum SmallFsError {
    /// Mounting needs root; the test should be skipped, not failed, by a caller that allows it.
    NotRoot,
    /// No free loop device (or `losetup` is missing).
    NoLoopDevice(String),
    /// A command (`mount`, `mkfs.ext4`) failed.
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A file operation failed.
    Io(io::Error),
}

impl fmt::Display for SmallFsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SmallFsError::NotRoot => write!(f, "mounting a small filesystem needs root"),
            SmallFsError::NoLoopDevice(reason) => write!(f, "no loop device: {reason}"),
            SmallFsError::Command { command, stderr } => {
                write!(f, "`{command}` failed: {}", stderr.trim())
            }
            SmallFsError::Io(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for SmallFsError {}

impl From<SmallFsError> for io::Error {
    fn from(error: SmallFsError) -> Self {
        match error {
            SmallFsError::Io(inner) => inner,
            SmallFsError::NotRoot => io::Error::new(io::ErrorKind::PermissionDenied, error),
            other => io::Error::other(other),
        }
    }
}

/// A mounted small filesystem; unmounted (and its loop device detached) on drop.
#[derive(Debug)]
pub struct SmallFs {
    /// The mount point.
    mount_point: PathBuf,
    /// The loop device of an ext4 image.
    loop_device: Option<String>,
    mounted: bool,
    /// Holds the mount point and the image; removed after unmounting.
    _temp: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts a tmpfs of `bytes` (rounded up to pages by the kernel).
    ///
    /// # Errors
    /// [`SmallFsError::NotRoot`] when not root; `mount` failing.
    pub fn mount(bytes: u64) -> io::Result<SmallFs> {
        let mut fs = SmallFs::new()?;
        let size = format!("size={bytes},mode=0755");
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &size,
                "tmpfs",
                path_str(&fs.mount_point)?,
            ],
        )?;
        fs.mounted = true;
        Ok(fs)
    }

    /// Mounts an ext4 filesystem made on a `bytes`-long image through a
    /// loop device.
    ///
    /// # Errors
    /// [`SmallFsError::NotRoot`], [`SmallFsError::NoLoopDevice`], or
    /// `mkfs.ext4`/`mount` failing.
    pub fn mount_ext4(bytes: u64) -> io::Result<SmallFs> {
        let mut fs = SmallFs::new()?;
        let image = fs._temp.path().join("image");
        std::fs::File::create(&image)?.set_len(bytes)?;
        // No journal-less tricks: the default ext4 a user would have, minus
        // the reserved-for-root blocks (root would use them anyway).
        run("mkfs.ext4", &["-q", "-F", "-m", "0", path_str(&image)?])?;
        let device = run("losetup", &["--find", "--show", path_str(&image)?])
            .map_err(|error| SmallFsError::NoLoopDevice(error.to_string()))?;
        let device = device.trim().to_owned();
        if device.is_empty() {
            return Err(SmallFsError::NoLoopDevice("losetup printed no device".to_owned()).into());
        }
        fs.loop_device = Some(device.clone());
        run("mount", &[&device, path_str(&fs.mount_point)?])?;
        fs.mounted = true;
        Ok(fs)
    }

    fn new() -> io::Result<SmallFs> {
        if !rustix::process::geteuid().is_root() {
            return Err(SmallFsError::NotRoot.into());
        }
        let temp = tempfile::tempdir()?;
        let mount_point = temp.path().join("mnt");
        std::fs::create_dir(&mount_point)?;
        Ok(SmallFs {
            mount_point,
            loop_device: None,
            mounted: false,
            _temp: temp,
        })
    }

    /// The mount point.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.mount_point
    }

    /// Free bytes (statvfs, as an unprivileged writer sees them).
    ///
    /// # Errors
    /// statvfs failing.
    pub fn free_bytes(&self) -> io::Result<u64> {
        let stat = rustix::fs::statvfs(&self.mount_point)?;
        Ok(stat.f_bavail * stat.f_frsize)
    }

    /// Writes a ballast file until the filesystem is full (`ENOSPC`),
    /// leaving about nothing free; returns the ballast's size. Calling it
    /// again tops the ballast up (space freed meanwhile is taken again).
    ///
    /// # Errors
    /// Any write error other than `ENOSPC`.
    pub fn fill(&self) -> io::Result<u64> {
        let path = self.mount_point.join(BALLAST);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let chunk = vec![0xA5u8; 64 << 10];
        // Large chunks first, then single bytes, so the last partial block goes too.
        for size in [chunk.len(), 4096, 1] {
            loop {
                match file.write(&chunk[..size]) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(error) if is_no_space(&error) => break,
                    Err(error) => return Err(error),
                }
            }
        }
        // Pages a tmpfs already counts; an ext4 allocates at write back,
        // so sync to meet ENOSPC now rather than in the broker's fsync.
        match file.sync_all() {
            Ok(()) => {}
            Err(error) if is_no_space(&error) => {}
            Err(error) => return Err(error),
        }
        Ok(file.metadata()?.len())
    }

    /// Removes the ballast: the space [`SmallFs::fill`] took is free again.
    ///
    /// # Errors
    /// Removing the file failing (other than it not existing).
    pub fn free(&self) -> io::Result<()> {
        match std::fs::remove_file(self.mount_point.join(BALLAST)) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        if self.mounted {
            // Lazy: a broker killed a moment ago may still hold files open.
            if let Ok(point) = path_str(&self.mount_point)
                && let Err(error) = run("umount", &["-l", point])
            {
                eprintln!("small_fs: cannot unmount {point}: {error}");
            }
        }
        if let Some(device) = &self.loop_device
            && let Err(error) = run("losetup", &["-d", device])
        {
            eprintln!("small_fs: cannot detach {device}: {error}");
        }
    }
}

fn is_no_space(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::StorageFull || error.raw_os_error() == Some(28)
}

fn path_str(path: &Path) -> io::Result<&str> {
    path.to_str()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path is not UTF-8"))
}

/// Runs `program` with `args`; its stdout on success.
fn run(program: &str, args: &[&str]) -> Result<String, SmallFsError> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(SmallFsError::Io)?;
    if !output.status.success() {
        return Err(SmallFsError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
