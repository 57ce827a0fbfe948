//! The storage engine's only view of the filesystem.
//!
//! Everything the engine does to files goes through [`Disk`] and
//! [`DiskFile`], so the same code runs on glommio's DMA files in production
//! ([`super::glommio_disk`]) and on an in-memory disk in tests
//! ([`super::memory_disk`]) that keeps only what was synced when it
//! "crashes", enforces O_DIRECT alignment, and fails the operations a test
//! asks it to fail.
//!
//! Contract, as O_DIRECT imposes it: `write_at` takes a buffer from
//! [`DiskFile::alloc_buffer`] whose length and position are multiples of
//! [`DiskFile::alignment`]; nothing written is durable until
//! [`DiskFile::sync_data`] returns; a created, renamed or removed name is not
//! durable until [`Disk::sync_dir`] returns.

use std::io;
use std::ops::Deref;
use std::path::Path;

use super::open_files::OpenFiles;

/// A filesystem holding partition directories.
#[allow(
    async_fn_in_trait,
    reason = "single-threaded executors: futures need not be Send"
)]
pub trait Disk: Clone + 'static {
    /// An open file.
    type File: DiskFile;

    /// Opens `path` for reading and writing, creating it if `create` is set.
    ///
    /// # Errors
    /// The filesystem's error, `NotFound` when absent and `create` is unset.
    async fn open(&self, path: &Path, create: bool) -> io::Result<Self::File>;

    /// Removes a file.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn remove(&self, path: &Path) -> io::Result<()>;

    /// Atomically replaces `to` with `from`.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Makes creations, renames and removals in `dir` durable.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Creates `dir` and its parents.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Removes `dir` and everything under it (a deleted topic's
    /// partitions). Like a removal, not durable until [`Disk::sync_dir`] of
    /// its parent returns.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Names of the files in `dir`.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Bytes free for unprivileged writers on the filesystem holding `dir`.
    ///
    /// # Errors
    /// The filesystem's error.
    fn free_bytes(&self, dir: &Path) -> io::Result<u64>;

    /// The shard's bounded cache of open segment files: segments open
    /// their file through it instead of holding it open for life, so that
    /// a shard's partition count is not bounded by its descriptors.
    fn open_files(&self) -> &OpenFiles<Self::File>;
}

/// An open file with positional, aligned, explicitly synced I/O.
#[allow(
    async_fn_in_trait,
    reason = "single-threaded executors: futures need not be Send"
)]
pub trait DiskFile: 'static {
    /// A buffer suitable for [`DiskFile::write_at`].
    type Buffer: AsRef<[u8]> + AsMut<[u8]>;
    /// Bytes returned by [`DiskFile::read_at`].
    type Read: Deref<Target = [u8]>;

    /// Alignment of positions and lengths for writes, in bytes.
    fn alignment(&self) -> u64;

    /// A buffer of `len` bytes, `len` a multiple of the alignment. Its
    /// contents are unspecified: callers write every byte they will write
    /// to the file, padding included.
    fn alloc_buffer(&self, len: usize) -> Self::Buffer;

    /// Writes the whole buffer at `position`.
    ///
    /// # Errors
    /// The filesystem's error; a short write is reported as `WriteZero`.
    async fn write_at(&self, buffer: Self::Buffer, position: u64) -> io::Result<()>;

    /// Reads up to `len` bytes at `position`; fewer at the end of the file.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn read_at(&self, position: u64, len: usize) -> io::Result<Self::Read>;

    /// Makes every completed write durable (fdatasync).
    ///
    /// # Errors
    /// The filesystem's error. After a failure the written data must be
    /// presumed lost: callers fence, they do not retry.
    async fn sync_data(&self) -> io::Result<()>;

    /// Sets the file's length.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn truncate(&self, len: u64) -> io::Result<()>;

    /// Reserves `len` bytes for the file (fallocate), so that later writes
    /// within them need no block allocation and cannot meet `ENOSPC`. The
    /// file's length becomes at least `len`; the new bytes read as zeros.
    ///
    /// # Errors
    /// The filesystem's error (`ENOSPC` when the space is not there).
    async fn preallocate(&self, len: u64) -> io::Result<()>;

    /// The file's current length.
    ///
    /// # Errors
    /// The filesystem's error.
    async fn size(&self) -> io::Result<u64>;
}

/// Rounds `value` up to a multiple of `alignment` (a power of two).
#[must_use]
pub fn align_up(value: u64, alignment: u64) -> u64 {
    debug_assert!(alignment.is_power_of_two());
    (value + alignment - 1) & !(alignment - 1)
}

/// Rounds `value` down to a multiple of `alignment` (a power of two).
#[must_use]
pub fn align_down(value: u64, alignment: u64) -> u64 {
    debug_assert!(alignment.is_power_of_two());
    value & !(alignment - 1)
}

/// Writes `contents` to `path` so that after a crash the file holds either
/// its old contents or exactly `contents`: write a temporary file, sync it,
/// rename it over `path`, sync the directory.
///
/// # Errors
/// The filesystem's error.
pub async fn write_file_atomically<D: Disk>(
    disk: &D,
    path: &Path,
    contents: &[u8],
) -> io::Result<()> {
    let temporary = path.with_extension("tmp");
    let file = disk.open(&temporary, true).await?;
    file.truncate(0).await?;
    let alignment = file.alignment();
    let padded = align_up(contents.len() as u64, alignment) as usize;
    if padded > 0 {
        let mut buffer = file.alloc_buffer(padded);
        buffer.as_mut()[..contents.len()].copy_from_slice(contents);
        buffer.as_mut()[contents.len()..].fill(0);
        file.write_at(buffer, 0).await?;
    }
    file.truncate(contents.len() as u64).await?;
    file.sync_data().await?;
    drop(file);
    disk.rename(&temporary, path).await?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    disk.sync_dir(dir).await
}

/// Reads the whole file at `path`; `Ok(None)` if it does not exist. For
/// small metadata files: a file over `max_bytes` is an `InvalidData` error,
/// not an allocation.
///
/// # Errors
/// The filesystem's error other than `NotFound`, or `InvalidData`.
pub async fn read_whole_file<D: Disk>(
    disk: &D,
    path: &Path,
    max_bytes: u64,
) -> io::Result<Option<Vec<u8>>> {
    let file = match disk.open(path, false).await {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let size = file.size().await?;
    if size > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is {size} bytes, over its {max_bytes}-byte bound",
                path.display()
            ),
        ));
    }
    let size = usize::try_from(size).map_err(|_| io::Error::other("file larger than memory"))?;
    let bytes = file.read_at(0, size).await?;
    Ok(Some(bytes.to_vec()))
}
