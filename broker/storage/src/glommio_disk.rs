//! [`Disk`] on glommio's DMA files: O_DIRECT reads and writes through the
//! shard's io_uring, no page cache.

use std::io;
use std::path::{Path, PathBuf};

use glommio::GlommioError;
use glommio::io::{Directory, DmaBuffer, DmaFile, OpenOptions, ReadResult};

use super::disk::{Disk, DiskFile};
#[cfg(feature = "fault-injection")]
use super::fault_hooks;
use super::open_files::OpenFiles;

/// Name of the non-empty file opened first on every shard; see [`GlommioDisk::for_shard`].
const DMA_PROBE_SENTINEL: &str = ".dma-probe";
const DMA_PROBE_SENTINEL_BYTES: usize = 4096;
/// Block size of the filesystems corelog runs on (ext4, xfs): writes are
/// aligned to it even when the device allows less.
const FILESYSTEM_BLOCK_BYTES: u64 = 4096;

/// The production disk: glommio DMA files on the calling shard's executor.
#[derive(Clone, Debug)]
pub struct GlommioDisk {
    open_files: OpenFiles<GlommioFile>,
}

/// glommio's error as an I/O error that keeps the operating system's error
/// number: glommio's own conversion keeps only the kind, and `EMFILE` has
/// no kind of its own (see `StorageError::io`). The path is added by the
/// caller.
fn os_error<T>(error: GlommioError<T>) -> io::Error {
    match error {
        GlommioError::EnhancedIoError { source, .. } | GlommioError::IoError(source) => source,
        other => io::Error::from(other),
    }
}

impl GlommioDisk {
    /// Prepares DMA I/O on this shard's executor; call it on each shard
    /// before any other DMA file is opened there.
    ///
    /// glommio decides once per thread and device whether to use its polled
    /// I/O ring, by reading 4 KiB from the first DMA file opened. On an empty
    /// file that read hits end-of-file and "succeeds", glommio turns polling
    /// on, and on a device without poll queues (this machine's virtio disk)
    /// every later read fails with EOPNOTSUPP. Opening a non-empty sentinel
    /// first makes the probe see the device's real answer.
    ///
    /// Keeps at most `open_files_max` segment files open (see
    /// [`OpenFiles`]).
    ///
    /// # Errors
    /// The filesystem's error creating or opening the sentinel.
    pub async fn for_shard(data_dir: &Path, open_files_max: usize) -> io::Result<GlommioDisk> {
        #[cfg(feature = "fault-injection")]
        fault_hooks::install();
        std::fs::create_dir_all(data_dir)?;
        let sentinel = data_dir.join(DMA_PROBE_SENTINEL);
        let is_ready = std::fs::metadata(&sentinel)
            .map(|metadata| metadata.len() >= DMA_PROBE_SENTINEL_BYTES as u64)
            .unwrap_or(false);
        if !is_ready {
            std::fs::write(&sentinel, vec![0u8; DMA_PROBE_SENTINEL_BYTES])?;
        }
        let probe = DmaFile::open(&sentinel).await.map_err(os_error)?;
        probe.close().await.map_err(os_error)?;
        Ok(GlommioDisk {
            open_files: OpenFiles::new(open_files_max),
        })
    }
}

impl Disk for GlommioDisk {
    type File = GlommioFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<GlommioFile> {
        #[cfg(feature = "fault-injection")]
        let existed = fault_hooks::exists(path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .dma_open(path)
            .await
            .map_err(os_error)?;
        #[cfg(feature = "fault-injection")]
        fault_hooks::opened(path, existed);
        Ok(GlommioFile {
            file,
            path: path.to_path_buf(),
        })
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        glommio::io::remove(path).await.map_err(os_error)?;
        #[cfg(feature = "fault-injection")]
        fault_hooks::removed(path);
        Ok(())
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        glommio::io::rename(from, to).await.map_err(os_error)?;
        #[cfg(feature = "fault-injection")]
        fault_hooks::renamed(from, to);
        Ok(())
    }

    async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let directory = Directory::open(dir).await.map_err(os_error)?;
        directory.sync().await.map_err(os_error)?;
        directory.close().await.map_err(os_error)
    }

    async fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        // Rare and at start-up or topic creation: a blocking call is acceptable.
        std::fs::create_dir_all(dir)
    }

    async fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        // Thousands of unlinks: on glommio's blocking pool, not the reactor.
        let dir = dir.to_path_buf();
        glommio::executor()
            .spawn_blocking(move || std::fs::remove_dir_all(dir))
            .await
    }

    async fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        let stats = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
        Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
    }

    fn open_files(&self) -> &OpenFiles<GlommioFile> {
        &self.open_files
    }
}

/// An open DMA file.
#[derive(Debug)]
pub struct GlommioFile {
    file: DmaFile,
    path: PathBuf,
}

/// An aligned buffer for [`GlommioFile::write_at`].
#[derive(Debug)]
pub struct GlommioBuffer(DmaBuffer);

impl AsRef<[u8]> for GlommioBuffer {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl AsMut<[u8]> for GlommioBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self.0.as_bytes_mut()
    }
}

impl DiskFile for GlommioFile {
    type Buffer = GlommioBuffer;
    type Read = ReadResult;

    fn alignment(&self) -> u64 {
        // The device may accept 512-byte O_DIRECT writes, but a write that is
        // not aligned to the filesystem block makes ext4 serialise it and
        // zero the partial blocks: align to both.
        self.file.alignment().max(FILESYSTEM_BLOCK_BYTES)
    }

    fn alloc_buffer(&self, len: usize) -> GlommioBuffer {
        // Not zeroed: callers fill every byte, and a memset of a flush-sized
        // buffer would sit on the append path.
        GlommioBuffer(self.file.alloc_dma_buffer(len))
    }

    async fn write_at(&self, buffer: GlommioBuffer, position: u64) -> io::Result<()> {
        let expected = buffer.0.len();
        #[cfg(feature = "fault-injection")]
        fault_hooks::before_write(&self.path)?;
        let written = self
            .file
            .write_at(buffer.0, position)
            .await
            .map_err(os_error)?;
        if written != expected {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write to {}: {written} of {expected} bytes at {position}",
                    self.path.display()
                ),
            ));
        }
        #[cfg(feature = "fault-injection")]
        fault_hooks::wrote(&self.path, position + expected as u64);
        Ok(())
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<ReadResult> {
        self.file.read_at(position, len).await.map_err(os_error)
    }

    async fn sync_data(&self) -> io::Result<()> {
        #[cfg(feature = "fault-injection")]
        let durable_len = fault_hooks::before_sync(&self.path)?;
        self.file.fdatasync().await.map_err(os_error)?;
        #[cfg(feature = "fault-injection")]
        fault_hooks::synced(&self.path, durable_len);
        Ok(())
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.truncate(len).await.map_err(os_error)?;
        #[cfg(feature = "fault-injection")]
        fault_hooks::truncated(&self.path, len);
        Ok(())
    }

    async fn preallocate(&self, len: u64) -> io::Result<()> {
        self.file.pre_allocate(len, false).await.map_err(os_error)
    }

    async fn size(&self) -> io::Result<u64> {
        self.file.file_size().await.map_err(os_error)
    }
}
