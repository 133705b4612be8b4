//! The portable backend: `pwrite` inline, `fdatasync` on tokio's blocking pool.

use std::io;
use std::path::Path;

use bytes::Bytes;

use super::{Disk, FileId, IoFuture, IoStats};

pub struct PortableDisk {}

impl PortableDisk {
    pub fn new() -> PortableDisk {
        todo!()
    }
}

impl Disk for PortableDisk {
    fn backend_name(&self) -> &'static str {
        "portable"
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
