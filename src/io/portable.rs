//! The portable backend: data written inline (copied into the file's mapping, or
//! `pwrite`), `fdatasync` on tokio's blocking pool.
//!
//! This module also owns the pieces of real-filesystem logic that the io_uring backend
//! shares with it, so the two cannot drift apart:
//! - `FileTable`: the map from [`FileId`] to open `std::fs::File`s. Ids come from a
//!   counter and are never reused, so a closed id can never silently alias a newer file;
//!   using it fails with `EBADF`. It also owns the files' write mappings
//!   ([`super::mapped`]), so closing and truncating drop them in one place.
//! - `StatsCell`: the `IoStats` counters, shared with futures that finish later.
//! - the synchronous operations both backends perform with plain syscalls (`read_at`,
//!   `truncate`, the directory operations, the `flock` of [`Disk::lock`]) and the
//!   `fallocate` fallback.
//!
//! Invariants:
//! - `write_at` writes the whole buffer or fails (`write_all_at` loops on short writes).
//! - A file stays open while any operation on it is in flight: the table hands out
//!   `Arc<File>` clones, so `close` only drops the table's reference.
//! - Counters only count operations that succeeded.
// Allowed here only (Cargo.toml denies it crate-wide): fallocate and flock are libc calls on raw descriptors.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::mapped::MappedWrites;
use super::{DataWrites, Disk, FileId, FileLock, IoFuture, IoStats};

/// Open files of one backend instance, keyed by a never-reused [`FileId`].
#[derive(Default)]
pub(crate) struct FileTable {
    files: RefCell<HashMap<u32, Arc<File>>>,
    next_id: Cell<u32>,
    mapped: MappedWrites,
}

impl FileTable {
    pub(crate) fn new() -> FileTable {
        FileTable::default()
    }

    pub(crate) fn open(&self, path: &Path, create: bool) -> io::Result<FileId> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .open(path)?;
        let id = self.next_id.get();
        // Wrapping would let an id alias a file opened 4 billion opens ago; refuse instead.
        let next = id
            .checked_add(1)
            .ok_or_else(|| io::Error::other("file id space exhausted"))?;
        self.next_id.set(next);
        self.files.borrow_mut().insert(id, Arc::new(file));
        Ok(FileId(id))
    }

    pub(crate) fn close(&self, file: FileId) {
        self.mapped.forget(file);
        self.files.borrow_mut().remove(&file.0);
    }

    /// Nothing more will be appended to `file`: its mapping, if any, goes.
    pub(crate) fn finished_writing(&self, file: FileId) {
        self.mapped.forget(file);
    }

    /// Writes all of `data` at `offset`: through the file's mapping when `mapped` is set
    /// and the range lies in its reserved bytes ([`super::mapped`]), with `pwrite`
    /// otherwise (which loops on short writes and retries EINTR). Counts it in `stats`.
    pub(crate) fn write_all_at(
        &self,
        id: FileId,
        offset: u64,
        data: &[u8],
        mapped: bool,
        stats: &StatsCell,
    ) -> io::Result<()> {
        let file = self.get(id)?;
        if mapped && self.mapped.write(id, &file, offset, data) {
            stats.record_mapped_write(data.len());
            return Ok(());
        }
        file.write_all_at(data, offset)?;
        stats.record_write(data.len());
        Ok(())
    }

    /// The open file behind `file`, or `EBADF` if it was never opened or is closed.
    pub(crate) fn get(&self, file: FileId) -> io::Result<Arc<File>> {
        self.files
            .borrow()
            .get(&file.0)
            .cloned()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }

    pub(crate) fn file_len(&self, file: FileId) -> io::Result<u64> {
        Ok(self.get(file)?.metadata()?.len())
    }

    pub(crate) fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let file = self.get(file)?;
        loop {
            match file.read_at(buf, offset) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// `ftruncate` + `fsync`: the new length must survive a crash, and fsync (not
    /// fdatasync) is what guarantees the size change in metadata is flushed.
    pub(crate) fn truncate(&self, file: FileId, len: u64) -> io::Result<()> {
        let file = self.get(file)?;
        self.mapped.forget_file(&file);
        file.set_len(len)?;
        file.sync_all()
    }
}

/// `IoStats` behind `Cell`s so completion code can bump them through a shared `Rc`.
#[derive(Default)]
pub(crate) struct StatsCell {
    writes: Cell<u64>,
    mapped_writes: Cell<u64>,
    bytes_written: Cell<u64>,
    syncs: Cell<u64>,
}

impl StatsCell {
    pub(crate) fn record_write(&self, bytes: usize) {
        self.writes.set(self.writes.get() + 1);
        self.bytes_written
            .set(self.bytes_written.get() + bytes as u64);
    }
    /// A write that went through the file's mapping: counted as a write too.
    pub(crate) fn record_mapped_write(&self, bytes: usize) {
        self.record_write(bytes);
        self.mapped_writes.set(self.mapped_writes.get() + 1);
    }
    pub(crate) fn record_sync(&self) {
        self.syncs.set(self.syncs.get() + 1);
    }
    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            writes: self.writes.get(),
            mapped_writes: self.mapped_writes.get(),
            bytes_written: self.bytes_written.get(),
            syncs: self.syncs.get(),
        }
    }
}

/// Set once we've warned that the filesystem lacks `fallocate`, so the log isn't flooded.
static FALLOCATE_FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

/// `fallocate(fd, 0, 0, len)`, falling back to growing the file with `ftruncate` on
/// filesystems without fallocate (tmpfs on old kernels, some FUSE/NFS). The fallback
/// grows the size but does not reserve blocks, so a later write can still hit ENOSPC.
pub(crate) fn allocate_blocking(file: &File, len: u64) -> io::Result<()> {
    let len_arg =
        libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    loop {
        // SAFETY: plain syscall on a descriptor that `file` keeps open.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len_arg) };
        if rc == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return extend_fallback(file, len),
            _ => return Err(error),
        }
    }
}

/// The `fallocate` fallback: grow (never shrink) the file to `len` with `ftruncate`.
pub(crate) fn extend_fallback(file: &File, len: u64) -> io::Result<()> {
    if !FALLOCATE_FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "fallocate is not supported by this filesystem; extending files with ftruncate \
             instead (space is not reserved in advance)"
        );
    }
    if file.metadata()?.len() < len {
        file.set_len(len)?;
    }
    Ok(())
}

pub(crate) fn remove_file(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path)
}

/// Unlinks on a blocking thread of the runtime.
pub(crate) fn remove_file_off_thread(path: &Path) -> super::IoFuture<()> {
    let path = path.to_path_buf();
    Box::pin(async move {
        tokio::task::spawn_blocking(move || std::fs::remove_file(&path))
            .await
            .map_err(join_error)?
    })
}

/// `statvfs` of the filesystem holding `path`.
pub(crate) fn space(path: &Path) -> io::Result<super::DiskSpace> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: statvfs is plain old data; all zeros is a valid value of it.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct statvfs may write into.
    if unsafe { libc::statvfs(name.as_ptr(), &mut stats) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let block = stats.f_frsize as u64;
    Ok(super::DiskSpace {
        total: stats.f_blocks as u64 * block,
        available: stats.f_bavail as u64 * block,
    })
}

pub(crate) fn create_dir_all(path: &Path) -> io::Result<()> {
    std::fs::create_dir_all(path)
}

pub(crate) fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

pub(crate) fn exists(path: &Path) -> bool {
    path.exists()
}

/// Opening a directory read-only and fsyncing it is how Linux persists its entries.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `flock(LOCK_EX | LOCK_NB)` on `path` (created if missing, never truncated), held while
/// the returned lock keeps the file open. Held elsewhere: `WouldBlock`.
pub(crate) fn lock_file(path: &Path) -> io::Result<FileLock> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    loop {
        // SAFETY: flock on a descriptor `file` keeps open; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(FileLock::new(file));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Turns a failed `spawn_blocking` join (the closure panicked or the runtime is shutting
/// down) into an I/O error, since callers only handle `io::Error`.
fn join_error(error: tokio::task::JoinError) -> io::Error {
    io::Error::other(format!("blocking disk task failed: {error}"))
}

/// The fallback backend: no kernel features beyond POSIX plus `fallocate`.
pub struct PortableDisk {
    files: FileTable,
    stats: Rc<StatsCell>,
    mapped_writes: bool,
}

impl PortableDisk {
    /// Data writes go through the files' mappings where they can ([`super::mapped`]).
    pub fn new() -> PortableDisk {
        PortableDisk::with_data_writes(DataWrites::Mapped)
    }

    /// [`PortableDisk::new`], its data writes made as `writes` says.
    pub fn with_data_writes(writes: DataWrites) -> PortableDisk {
        PortableDisk {
            files: FileTable::new(),
            stats: Rc::new(StatsCell::default()),
            mapped_writes: writes == DataWrites::Mapped,
        }
    }
}

impl Default for PortableDisk {
    fn default() -> Self {
        PortableDisk::new()
    }
}

impl Disk for PortableDisk {
    fn backend_name(&self) -> &'static str {
        "portable"
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<FileId> {
        self.files.open(path, create)
    }
    fn close(&self, file: FileId) {
        self.files.close(file)
    }
    fn file_len(&self, file: FileId) -> io::Result<u64> {
        self.files.file_len(file)
    }
    fn write_at(&self, file: FileId, offset: u64, data: Bytes) -> IoFuture<()> {
        // A copy into the page cache is fast enough to do inline; only the sync blocks.
        let result = self
            .files
            .write_all_at(file, offset, &data, self.mapped_writes, &self.stats);
        Box::pin(std::future::ready(result))
    }
    fn sync_data(&self, file: FileId) -> IoFuture<()> {
        let file = self.files.get(file);
        let stats = Rc::clone(&self.stats);
        // The blocking task is spawned on first poll, so building the future needs no
        // runtime; writes completed before this call are still covered by the fdatasync.
        Box::pin(async move {
            let file = file?;
            tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .map_err(join_error)??;
            stats.record_sync();
            Ok(())
        })
    }
    fn allocate(&self, file: FileId, len: u64) -> IoFuture<()> {
        let result = self
            .files
            .get(file)
            .and_then(|file| allocate_blocking(&file, len));
        Box::pin(std::future::ready(result))
    }
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.files.read_at(file, offset, buf)
    }
    fn truncate(&self, file: FileId, len: u64) -> io::Result<()> {
        self.files.truncate(file, len)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        remove_file(path)
    }
    fn remove_file_off_thread(&self, path: &Path) -> IoFuture<()> {
        remove_file_off_thread(path)
    }
    fn space(&self, path: &Path) -> io::Result<super::DiskSpace> {
        space(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        create_dir_all(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        list_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<FileLock> {
        lock_file(path)
    }
    fn stats(&self) -> IoStats {
        self.stats.snapshot()
    }
    fn shared_file(&self, file: FileId) -> Option<Arc<File>> {
        self.files.get(file).ok()
    }
    fn finished_writing(&self, file: FileId) {
        self.files.finished_writing(file)
    }
}
