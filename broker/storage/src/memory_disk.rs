//! An in-memory [`Disk`] for tests and simulation, stricter than a real one.
//!
//! - Alignment is enforced as O_DIRECT enforces it (`EINVAL`).
//! - [`MemoryDisk::crash`] models power loss: every file goes back to what
//!   its last `sync_data` covered, and every directory to what its last
//!   `sync_dir` covered. Handles opened before the crash stop working.
//! - [`MemoryDisk::fail_next`] makes the next write, sync or read fail with
//!   `EIO`, and a capacity makes writes past it fail with `ENOSPC`.
//! - Its cache of open segment files ([`Disk::open_files`]) is small by
//!   default, so that storage tests reopen files as a broker with many
//!   partitions does; [`MemoryDisk::set_descriptor_limit`] makes opens past
//!   a number of open handles fail with `EMFILE`.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::disk::{Disk, DiskFile};
use super::open_files::OpenFiles;

/// Files a memory disk's cache keeps open unless told otherwise: few, so
/// that tests exercise closing and reopening segment files.
const OPEN_FILES_DEFAULT: usize = 4;

/// An operation a test can make fail once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next `write_at`.
    Write,
    /// The next `sync_data`.
    Sync,
    /// The next `read_at`.
    Read,
}

/// A filesystem in memory; clones share it.
#[derive(Clone, Debug)]
pub struct MemoryDisk {
    state: Rc<RefCell<State>>,
    /// Not in `state`: files hold `state`, and the cache holds files.
    open_files: OpenFiles<MemoryFile>,
}

#[derive(Debug)]
struct State {
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    inodes: BTreeMap<u64, Inode>,
    next_inode: u64,
    /// Bumped by every crash; handles from an older one fail.
    incarnation: u64,
    alignment: u64,
    capacity_bytes: u64,
    faults: Vec<Fault>,
    syncs: u64,
    /// `sync_data` calls started and not yet finished, and the most there
    /// ever were at once.
    syncs_in_flight: u32,
    syncs_in_flight_max: u32,
    /// Bumped by every change to any name or byte, synced or not.
    generation: u64,
    /// Whether every operation yields to the executor once before acting,
    /// so that tests can interleave concurrent appends, flushes and reads.
    yields: bool,
    /// Open handles past which an open fails with `EMFILE`.
    descriptor_limit: Option<u32>,
}

#[derive(Debug, Default, Clone)]
struct Inode {
    data: Vec<u8>,
    synced: Vec<u8>,
    open_handles: u32,
    /// Bumped whenever `data` changes, so that readers of
    /// [`MemoryDisk::file_version`] can cache what they parsed.
    version: u64,
}

impl State {
    /// Frees an inode that no name and no open handle refers to, as a real
    /// filesystem frees an unlinked file on its last close.
    fn release_if_unreferenced(&mut self, inode: u64) {
        let named = self
            .names
            .values()
            .chain(self.durable_names.values())
            .any(|named| *named == inode);
        let open = self
            .inodes
            .get(&inode)
            .is_some_and(|found| found.open_handles > 0);
        if !named && !open {
            self.inodes.remove(&inode);
        }
    }
}

impl MemoryDisk {
    /// An empty disk with `alignment`-byte O_DIRECT alignment and `capacity_bytes` of space.
    ///
    /// # Panics
    /// If `alignment` is not a power of two.
    #[must_use]
    pub fn new(alignment: u64, capacity_bytes: u64) -> Self {
        assert!(alignment.is_power_of_two());
        MemoryDisk {
            state: Rc::new(RefCell::new(State {
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                dirs: BTreeSet::new(),
                inodes: BTreeMap::new(),
                next_inode: 1,
                incarnation: 0,
                alignment,
                capacity_bytes,
                faults: Vec::new(),
                syncs: 0,
                syncs_in_flight: 0,
                syncs_in_flight_max: 0,
                generation: 0,
                yields: false,
                descriptor_limit: None,
            })),
            open_files: OpenFiles::new(OPEN_FILES_DEFAULT),
        }
    }

    /// This disk with a cache of `capacity` open files.
    #[must_use]
    pub fn with_open_files_max(mut self, capacity: usize) -> Self {
        self.open_files = OpenFiles::new(capacity);
        self
    }

    /// Makes opens fail with `EMFILE` while `limit` handles are open, as a
    /// process at its `RLIMIT_NOFILE` does (`None`: no limit).
    pub fn set_descriptor_limit(&self, limit: Option<u32>) {
        self.state.borrow_mut().descriptor_limit = limit;
    }

    /// Handles open now, on every file.
    #[must_use]
    pub fn open_handle_count(&self) -> u32 {
        open_handles(&self.state.borrow())
    }

    /// Power loss: files keep only synced bytes, directories only synced entries.
    pub fn crash(&self) {
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        state.incarnation += 1;
        state.names = state.durable_names.clone();
        let live: BTreeSet<u64> = state.names.values().copied().collect();
        state.inodes.retain(|inode, _| live.contains(inode));
        for inode in state.inodes.values_mut() {
            inode.data = inode.synced.clone();
            inode.open_handles = 0;
            inode.version += 1;
        }
    }

    /// Makes the next operation of this kind fail with `EIO`.
    pub fn fail_next(&self, fault: Fault) {
        self.state.borrow_mut().faults.push(fault);
    }

    /// Changes the space available.
    pub fn set_capacity(&self, capacity_bytes: u64) {
        self.state.borrow_mut().capacity_bytes = capacity_bytes;
    }

    /// Current contents of a file, synced or not.
    #[must_use]
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.state.borrow();
        let inode = state.names.get(path)?;
        Some(state.inodes[inode].data.clone())
    }

    /// What a crash now would leave of the file at `path`: the synced bytes
    /// of the file durably named so. `None` if a crash would leave no such
    /// file.
    #[must_use]
    pub fn durable_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.state.borrow();
        let inode = state.durable_names.get(path)?;
        Some(state.inodes.get(inode)?.synced.clone())
    }

    /// A number that changes whenever anything on the disk changes (a name,
    /// written or synced bytes, a crash): equal generations mean nothing
    /// changed in between.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.state.borrow().generation
    }

    /// Names of every file a crash now would leave.
    #[must_use]
    pub fn durable_files(&self) -> Vec<PathBuf> {
        self.state.borrow().durable_names.keys().cloned().collect()
    }

    /// Identifies the current contents of the file at `path`: its inode and
    /// a version that changes with every write, truncation and crash. Equal
    /// versions mean equal contents.
    #[must_use]
    pub fn file_version(&self, path: &Path) -> Option<(u64, u64)> {
        let state = self.state.borrow();
        let inode = *state.names.get(path)?;
        Some((inode, state.inodes.get(&inode)?.version))
    }

    /// Replaces a file's contents, durably, as an operator editing a stopped
    /// node's disk would (corruption and truncation tests).
    ///
    /// # Panics
    /// If the file does not exist.
    pub fn overwrite(&self, path: &Path, contents: Vec<u8>) {
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        let inode = *state.names.get(path).expect("no such file");
        let inode = state.inodes.get_mut(&inode).expect("dangling name");
        inode.synced.clone_from(&contents);
        inode.data = contents;
        inode.version += 1;
    }

    /// Makes every operation yield once before acting (see `yields`).
    pub fn set_yielding(&self, yields: bool) {
        self.state.borrow_mut().yields = yields;
    }

    /// An independent copy of the disk's current state (synced or not), with
    /// no open handles: for trying many edits of one stopped node's disk.
    #[must_use]
    pub fn fork(&self) -> MemoryDisk {
        let state = self.state.borrow();
        let mut inodes = state.inodes.clone();
        for inode in inodes.values_mut() {
            inode.open_handles = 0;
        }
        MemoryDisk {
            state: Rc::new(RefCell::new(State {
                names: state.names.clone(),
                durable_names: state.durable_names.clone(),
                dirs: state.dirs.clone(),
                inodes,
                next_inode: state.next_inode,
                incarnation: 0,
                alignment: state.alignment,
                capacity_bytes: state.capacity_bytes,
                faults: Vec::new(),
                syncs: 0,
                syncs_in_flight: 0,
                syncs_in_flight_max: 0,
                generation: 0,
                yields: state.yields,
                descriptor_limit: state.descriptor_limit,
            })),
            open_files: OpenFiles::new(self.open_files.capacity()),
        }
    }

    async fn maybe_yield(&self) {
        maybe_yield(&self.state).await;
    }

    /// `sync_data` calls that succeeded, on every file.
    #[must_use]
    pub fn sync_count(&self) -> u64 {
        self.state.borrow().syncs
    }

    /// The most `sync_data` calls that were ever under way at once (with
    /// [`MemoryDisk::set_yielding`], a sync is under way across a yield).
    #[must_use]
    pub fn syncs_in_flight_max(&self) -> u32 {
        self.state.borrow().syncs_in_flight_max
    }

    /// Names of every file, for assertions.
    #[must_use]
    pub fn files(&self) -> Vec<PathBuf> {
        self.state.borrow().names.keys().cloned().collect()
    }

    fn used_bytes(state: &State) -> u64 {
        state
            .inodes
            .values()
            .map(|inode| inode.data.len() as u64)
            .sum()
    }
}

fn touch(state: &RefCell<State>) {
    state.borrow_mut().generation += 1;
}

async fn maybe_yield(state: &RefCell<State>) {
    if state.borrow().yields {
        YieldOnce(false).await;
    }
}

fn take_fault(state: &RefCell<State>, fault: Fault) -> io::Result<()> {
    let mut state = state.borrow_mut();
    if let Some(index) = state.faults.iter().position(|pending| *pending == fault) {
        state.faults.remove(index);
        return Err(io::Error::from_raw_os_error(
            rustix::io::Errno::IO.raw_os_error(),
        ));
    }
    Ok(())
}

fn open_handles(state: &State) -> u32 {
    state.inodes.values().map(|inode| inode.open_handles).sum()
}

/// A future that is pending once, then ready.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        context.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl Disk for MemoryDisk {
    type File = MemoryFile;

    async fn open(&self, path: &Path, create: bool) -> io::Result<MemoryFile> {
        self.maybe_yield().await;
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        if !state.dirs.contains(&parent(path)) {
            return Err(not_found(&parent(path)));
        }
        if state
            .descriptor_limit
            .is_some_and(|limit| open_handles(&state) >= limit)
        {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::MFILE.raw_os_error(),
            ));
        }
        let inode = match state.names.get(path) {
            Some(inode) => *inode,
            None if create => {
                let inode = state.next_inode;
                state.next_inode += 1;
                state.inodes.insert(inode, Inode::default());
                state.names.insert(path.to_path_buf(), inode);
                inode
            }
            None => return Err(not_found(path)),
        };
        if let Some(found) = state.inodes.get_mut(&inode) {
            found.open_handles += 1;
        }
        Ok(MemoryFile {
            state: Rc::clone(&self.state),
            inode,
            incarnation: state.incarnation,
        })
    }

    async fn remove(&self, path: &Path) -> io::Result<()> {
        self.maybe_yield().await;
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        let inode = state.names.remove(path).ok_or_else(|| not_found(path))?;
        state.release_if_unreferenced(inode);
        Ok(())
    }

    async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.maybe_yield().await;
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        let inode = state.names.remove(from).ok_or_else(|| not_found(from))?;
        state.names.insert(to.to_path_buf(), inode);
        Ok(())
    }

    async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.maybe_yield().await;
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        let forgotten: Vec<u64> = state
            .durable_names
            .iter()
            .filter(|(path, _)| parent(path) == dir)
            .map(|(_, inode)| *inode)
            .collect();
        state.durable_names.retain(|path, _| parent(path) != dir);
        let entries: Vec<(PathBuf, u64)> = state
            .names
            .iter()
            .filter(|(path, _)| parent(path) == dir)
            .map(|(path, inode)| (path.clone(), *inode))
            .collect();
        state.durable_names.extend(entries);
        for inode in forgotten {
            state.release_if_unreferenced(inode);
        }
        Ok(())
    }

    async fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        for ancestor in dir.ancestors() {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    async fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.maybe_yield().await;
        let mut state = self.state.borrow_mut();
        state.generation += 1;
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let removed: Vec<(PathBuf, u64)> = state
            .names
            .iter()
            .filter(|(path, _)| path.starts_with(dir))
            .map(|(path, inode)| (path.clone(), *inode))
            .collect();
        for (path, inode) in removed {
            state.names.remove(&path);
            state.release_if_unreferenced(inode);
        }
        state.dirs.retain(|known| !known.starts_with(dir));
        Ok(())
    }

    async fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state.borrow();
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(state
            .names
            .keys()
            .filter(|path| parent(path) == dir)
            .filter_map(|path| path.file_name()?.to_str().map(str::to_owned))
            .collect())
    }

    fn free_bytes(&self, _dir: &Path) -> io::Result<u64> {
        let state = self.state.borrow();
        Ok(state
            .capacity_bytes
            .saturating_sub(Self::used_bytes(&state)))
    }

    fn open_files(&self) -> &OpenFiles<MemoryFile> {
        &self.open_files
    }
}

/// An open in-memory file.
#[derive(Debug)]
pub struct MemoryFile {
    state: Rc<RefCell<State>>,
    inode: u64,
    incarnation: u64,
}

impl MemoryFile {
    fn with_inode<T>(
        &self,
        action: impl FnOnce(&mut Inode, &State) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut state = self.state.borrow_mut();
        if state.incarnation != self.incarnation {
            return Err(io::Error::other("file handle from before a crash"));
        }
        let mut inode = state
            .inodes
            .remove(&self.inode)
            .ok_or_else(|| io::Error::other("file removed and closed"))?;
        let result = action(&mut inode, &state);
        state.inodes.insert(self.inode, inode);
        result
    }
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.to_owned())
}

impl Drop for MemoryFile {
    fn drop(&mut self) {
        let mut state = self.state.borrow_mut();
        if state.incarnation != self.incarnation {
            return;
        }
        if let Some(inode) = state.inodes.get_mut(&self.inode) {
            inode.open_handles -= 1;
        }
        state.release_if_unreferenced(self.inode);
    }
}

impl DiskFile for MemoryFile {
    type Buffer = Vec<u8>;
    type Read = Vec<u8>;

    fn alignment(&self) -> u64 {
        self.state.borrow().alignment
    }

    fn alloc_buffer(&self, len: usize) -> Vec<u8> {
        // Garbage, not zeros, so that a caller relying on zeroed buffers
        // writes garbage and fails its tests.
        vec![0xA5; len]
    }

    async fn write_at(&self, buffer: Vec<u8>, position: u64) -> io::Result<()> {
        maybe_yield(&self.state).await;
        take_fault(&self.state, Fault::Write)?;
        self.with_inode(|inode, state| {
            let alignment = state.alignment;
            if !position.is_multiple_of(alignment)
                || !(buffer.len() as u64).is_multiple_of(alignment)
            {
                return Err(invalid("O_DIRECT write not aligned"));
            }
            let end = position as usize + buffer.len();
            let growth = end.saturating_sub(inode.data.len()) as u64;
            let used = MemoryDisk::used_bytes(state) + inode.data.len() as u64;
            // Overwriting allocated (or preallocated) bytes needs no space.
            if growth > 0 && used + growth > state.capacity_bytes {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                ));
            }
            if inode.data.len() < end {
                inode.data.resize(end, 0);
            }
            inode.data[position as usize..end].copy_from_slice(&buffer);
            inode.version += 1;
            Ok(())
        })?;
        touch(&self.state);
        Ok(())
    }

    async fn read_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        maybe_yield(&self.state).await;
        take_fault(&self.state, Fault::Read)?;
        self.with_inode(|inode, _| {
            let start = (position as usize).min(inode.data.len());
            let end = start.saturating_add(len).min(inode.data.len());
            Ok(inode.data[start..end].to_vec())
        })
    }

    async fn sync_data(&self) -> io::Result<()> {
        {
            let mut state = self.state.borrow_mut();
            state.syncs_in_flight += 1;
            state.syncs_in_flight_max = state.syncs_in_flight_max.max(state.syncs_in_flight);
        }
        maybe_yield(&self.state).await;
        self.state.borrow_mut().syncs_in_flight -= 1;
        take_fault(&self.state, Fault::Sync)?;
        self.with_inode(|inode, _| {
            inode.synced.clone_from(&inode.data);
            Ok(())
        })?;
        self.state.borrow_mut().syncs += 1;
        touch(&self.state);
        Ok(())
    }

    async fn truncate(&self, len: u64) -> io::Result<()> {
        self.with_inode(|inode, _| {
            inode.data.resize(len as usize, 0);
            inode.version += 1;
            Ok(())
        })?;
        touch(&self.state);
        Ok(())
    }

    async fn preallocate(&self, len: u64) -> io::Result<()> {
        maybe_yield(&self.state).await;
        self.with_inode(|inode, state| {
            let growth = (len as usize).saturating_sub(inode.data.len()) as u64;
            let used = MemoryDisk::used_bytes(state) + inode.data.len() as u64;
            if used + growth > state.capacity_bytes {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                ));
            }
            if inode.data.len() < len as usize {
                inode.data.resize(len as usize, 0);
                inode.version += 1;
            }
            Ok(())
        })?;
        touch(&self.state);
        Ok(())
    }

    async fn size(&self) -> io::Result<u64> {
        self.with_inode(|inode, _| Ok(inode.data.len() as u64))
    }
}
