//! The simulated disk: in memory, seeded, fault-injecting. (Fault model: to be written.)

use std::io;
use std::path::Path;

use bytes::Bytes;

use super::{Disk, FileId, IoFuture, IoStats};

/// Tunables of the crash model.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    /// Granularity of torn writes.
    pub sector_size: usize,
}

/// A handle to one simulated disk. Clones share the same disk, so a test keeps a clone
/// across a crash and hands another to the reopened store.
#[derive(Clone)]
pub struct SimDisk {}

impl SimDisk {
    pub fn new(config: SimConfig) -> SimDisk {
        todo!("{config:?}")
    }
    /// The disk "loses power" after `ops` more data operations (write, sync, allocate):
    /// that operation and every later one fail with an error and change nothing.
    pub fn crash_after_ops(&self, ops: u64) {
        todo!("{ops}")
    }
    /// Loses power now.
    pub fn crash_now(&self) {
        todo!()
    }
    pub fn is_crashed(&self) -> bool {
        todo!()
    }
    /// Powers back on: every write not made durable by a sync is kept, dropped or torn
    /// (seeded, per sector), handles are invalidated, and the disk works again.
    pub fn restart(&self) {
        todo!()
    }
    /// The next `sync_data` fails with `errno` (and syncs nothing).
    pub fn fail_next_sync(&self, errno: i32) {
        todo!("{errno}")
    }
    /// The next `write_at` fails with `errno` (and writes nothing).
    pub fn fail_next_write(&self, errno: i32) {
        todo!("{errno}")
    }
    /// Total bytes the disk can hold (sum of file lengths); `None` is unlimited.
    /// Growing a file past it fails with `ENOSPC`.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        todo!("{bytes:?}")
    }
    /// Data operations attempted so far (write, sync, allocate).
    pub fn data_ops(&self) -> u64 {
        todo!()
    }
}

impl Disk for SimDisk {
    fn backend_name(&self) -> &'static str {
        "sim"
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<FileId> {
        todo!("{path:?}{create}")
    }
    fn close(&self, file: FileId) {
        todo!("{file:?}")
    }
    fn file_len(&self, file: FileId) -> io::Result<u64> {
        todo!("{file:?}")
    }
    fn write_at(&self, file: FileId, offset: u64, data: Bytes) -> IoFuture<()> {
        todo!("{file:?}{offset}{data:?}")
    }
    fn sync_data(&self, file: FileId) -> IoFuture<()> {
        todo!("{file:?}")
    }
    fn allocate(&self, file: FileId, len: u64) -> IoFuture<()> {
        todo!("{file:?}{len}")
    }
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        todo!("{file:?}{offset}{buf:?}")
    }
    fn truncate(&self, file: FileId, len: u64) -> io::Result<()> {
        todo!("{file:?}{len}")
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        todo!("{path:?}")
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        todo!("{path:?}")
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        todo!("{dir:?}")
    }
    fn exists(&self, path: &Path) -> bool {
        todo!("{path:?}")
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        todo!("{dir:?}")
    }
    fn stats(&self) -> IoStats {
        todo!()
    }
}
