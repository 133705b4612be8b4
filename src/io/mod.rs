//! The disk I/O seam (D5).
//!
//! Every byte the store puts on disk, and every byte it reads back, goes through a
//! [`Disk`]. There are three backends:
//!
//! | backend    | writes / syncs                                   | used when                         |
//! |------------|--------------------------------------------------|-----------------------------------|
//! | `uring`    | inline: copied into the file's mapping where preallocated, else `pwrite` (or SQEs, [`uring::WritePath`]); fdatasync and fallocate as io_uring SQEs, completions via the ring eventfd | default, when io_uring can be set up |
//! | `portable` | inline as `uring`'s, `fdatasync` on a blocking thread | io_uring is disabled or forced off |
//! | `sim`      | in memory, seeded faults and crashes             | deterministic crash and fault tests |
//!
//! Invariants every backend keeps:
//! - `write_at` writes the whole buffer or fails; there are no short writes visible to callers.
//! - `sync_data` makes durable every write to that file that *completed* before it was called.
//! - `read_at` sees every completed write (durable or not), like the page cache does.
//! - A backend instance belongs to one shard thread (`Rc`, not `Send`); its futures must be
//!   polled on that thread inside a tokio `LocalSet`.
//!
//! Metadata operations (create, remove, list, truncate, allocate, lock) are synchronous
//! or cheap and rare; data writes and syncs are futures because those are what the write
//! path overlaps.
//!
//! The node-wide tables (`topics.json`, `consumerOffset.json`) go through the second,
//! thread-shared half of the seam, [`meta::MetaFiles`]; the store's `lock` file through
//! [`Disk::lock`]. Nothing the node persists bypasses the seam, so the simulator's crash
//! model covers all of it.

pub mod file_body;
pub mod mapped;
pub mod meta;
pub mod portable;
pub mod sim;
pub mod uring;

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::rc::Rc;

use bytes::Bytes;

/// A future returned by a disk operation. Not `Send`: it runs on its shard's thread.
pub type IoFuture<T> = Pin<Box<dyn Future<Output = io::Result<T>>>>;

/// A file opened through a [`Disk`]. The number is only meaningful to the backend that
/// issued it; it stays valid until [`Disk::close`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// An exclusive lock on a file, held until this value is dropped ([`Disk::lock`]). What
/// it holds is the backend's business: an open, `flock`ed file on the real backends, a
/// token in the simulator.
pub struct FileLock {
    _held: Box<dyn std::any::Any>,
}

impl FileLock {
    /// Wraps whatever keeps the lock held; dropping it releases the lock.
    pub fn new(held: impl std::any::Any) -> FileLock {
        FileLock {
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for FileLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileLock")
    }
}

/// Which backend to use; `Auto` tries io_uring and falls back to portable with a logged reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoChoice {
    Auto,
    Uring,
    Portable,
}

/// A backend name [`IoChoice`] does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownIoChoice(pub String);

impl std::fmt::Display for UnknownIoChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown I/O backend '{}': expected auto, uring or portable",
            self.0
        )
    }
}

impl std::error::Error for UnknownIoChoice {}

/// For the config loader, which reports a bad value as text naming its key.
impl From<UnknownIoChoice> for String {
    fn from(error: UnknownIoChoice) -> String {
        error.to_string()
    }
}

impl std::str::FromStr for IoChoice {
    type Err = UnknownIoChoice;
    fn from_str(text: &str) -> Result<Self, UnknownIoChoice> {
        match text {
            "auto" => Ok(IoChoice::Auto),
            "uring" => Ok(IoChoice::Uring),
            "portable" => Ok(IoChoice::Portable),
            other => Err(UnknownIoChoice(other.to_string())),
        }
    }
}

/// How the real backends put data writes in the page cache (the simulator has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataWrites {
    /// Copied into a shared mapping of the file where its bytes are reserved, `pwrite`
    /// elsewhere ([`mapped`]): no syscall per write. For stores that sync rarely.
    Mapped,
    /// Always `pwrite`. For stores that `fdatasync` after every batch: a sync
    /// write-protects the mapped tail page again, and the next store into it faults and
    /// can wait in ext4 for the sync's journal commit on the shard thread, where a
    /// `pwrite` does not (SYNC_FLUSH with 16 producers fell from 15,419 to 8,704 msgs/s
    /// with mapped writes).
    Pwrite,
}

/// A filesystem's size and free space, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskSpace {
    pub total: u64,
    /// What an unprivileged writer can still use.
    pub available: u64,
}

impl DiskSpace {
    /// Used space as a whole percentage of the total (0 for a filesystem of no size).
    pub fn used_percent(&self) -> u8 {
        if self.total == 0 {
            return 0;
        }
        let used = self.total.saturating_sub(self.available);
        (used as u128 * 100 / self.total as u128).min(100) as u8
    }
}

/// Counters every backend keeps, for benchmarks and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Data writes, however they were made.
    pub writes: u64,
    /// Of those, the ones copied into a mapping of the file instead of `pwrite`.
    pub mapped_writes: u64,
    pub bytes_written: u64,
    pub syncs: u64,
}

/// The one seam between the store and the disk.
pub trait Disk {
    /// `"uring"`, `"portable"` or `"sim"`.
    fn backend_name(&self) -> &'static str;

    /// Opens a file for reading and writing, creating it (empty) when `create` is set.
    /// Fails with `NotFound` when it does not exist and `create` is false.
    fn open(&self, path: &Path, create: bool) -> io::Result<FileId>;

    /// Forgets a file handle. In-flight operations on it complete first or are abandoned.
    fn close(&self, file: FileId);

    /// Current length of the file in bytes.
    fn file_len(&self, file: FileId) -> io::Result<u64>;

    /// Writes all of `data` at `offset`, extending the file if needed.
    fn write_at(&self, file: FileId, offset: u64, data: Bytes) -> IoFuture<()>;

    /// `fdatasync`: makes every previously completed write to `file` durable.
    fn sync_data(&self, file: FileId) -> IoFuture<()>;

    /// Reserves space so that the file is at least `len` bytes long and writes below `len`
    /// cannot fail for lack of space (`fallocate`). A full disk fails with `ENOSPC`.
    fn allocate(&self, file: FileId, len: u64) -> IoFuture<()>;

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize>;

    /// Sets the file length, durably (metadata change followed by a sync).
    fn truncate(&self, file: FileId, len: u64) -> io::Result<()>;

    /// Removes a file by path (it must not be open).
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Removes a file by path off the calling thread: unlinking a large file frees its
    /// extents, which can take milliseconds, so retention never does it on a shard
    /// thread. Durable like [`Disk::remove_file`] once the directory is synced.
    fn remove_file_off_thread(&self, path: &Path) -> IoFuture<()> {
        Box::pin(std::future::ready(self.remove_file(path)))
    }

    /// The space of the filesystem holding `path` (`statvfs`; the simulator's capacity).
    fn space(&self, path: &Path) -> io::Result<DiskSpace>;

    /// Creates a directory and its parents; succeeds if it exists.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;

    /// The names (not paths) of the entries directly inside `dir`, sorted ascending.
    /// A missing directory is `NotFound`.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;

    /// Makes the directory's entries (created or removed files) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Takes an exclusive lock on the file at `path`, creating the file if needed, for as
    /// long as the returned value lives (`flock(LOCK_EX | LOCK_NB)` on the real backends).
    /// A lock another holder has fails at once with `WouldBlock`. A crash releases it.
    fn lock(&self, path: &Path) -> io::Result<FileLock>;

    /// Counters since this backend was created.
    fn stats(&self) -> IoStats;

    /// The real open file behind `file`, shared, for readers that send its bytes without
    /// going through this trait (a pull's `sendfile`, D8). `None` when the backend has no
    /// real files (the simulator): callers then read through [`Disk::read_at`] instead.
    /// The handle may be open for writing too; holders must only read from it.
    fn shared_file(&self, _file: FileId) -> Option<std::sync::Arc<std::fs::File>> {
        None
    }

    /// A hint that nothing more will be appended to `file` (a full CommitLog segment): the
    /// backend may let go of what it keeps for writing it (its mapping, [`mapped`]).
    /// Writes to it still work.
    fn finished_writing(&self, _file: FileId) {}
}

/// Reads exactly `buf.len()` bytes at `offset` or fails with `UnexpectedEof`.
pub fn read_exact_at(disk: &dyn Disk, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let read = disk.read_at(file, offset + done as u64, &mut buf[done..])?;
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "short read at offset {}: wanted {} bytes",
                    offset,
                    buf.len()
                ),
            ));
        }
        done += read;
    }
    Ok(())
}

/// Opens the backend asked for, its data writes made as `writes` says. `Auto` tries
/// io_uring and, if the ring cannot be set up (seccomp, `kernel.io_uring_disabled`, an
/// old kernel), logs why and uses `portable`.
/// Must be called inside a tokio `LocalSet` (the uring backend spawns its reactor task).
pub fn open_backend(choice: IoChoice, writes: DataWrites) -> io::Result<Rc<dyn Disk>> {
    let portable = || Rc::new(portable::PortableDisk::with_data_writes(writes));
    let write_path = uring::WritePath::from(writes);
    match choice {
        IoChoice::Portable => Ok(portable()),
        IoChoice::Uring => Ok(Rc::new(uring::UringDisk::with_write_path(write_path)?)),
        IoChoice::Auto => match uring::UringDisk::with_write_path(write_path) {
            Ok(disk) => Ok(Rc::new(disk)),
            Err(error) => {
                tracing::warn!(
                    "io_uring is unavailable ({error}); using the portable pwrite/fdatasync backend. \
                     Likely causes: a seccomp profile that blocks io_uring_setup, or \
                     sysctl kernel.io_uring_disabled=1 or 2"
                );
                Ok(portable())
            }
        },
    }
}
