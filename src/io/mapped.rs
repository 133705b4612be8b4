//! Data writes as stores into a shared mapping of the file, instead of `pwrite`.
//!
//! A `pwrite` of one record into the page cache costs a syscall and ext4's buffered-write
//! path (write_begin/write_end per call), about a tenth of the node's CPU for a
//! one-producer send. Copying the same bytes into a `MAP_SHARED` mapping of the file puts
//! them in the same page cache pages with no syscall; the kernel takes a fault only the
//! first time each page is written (and again after writeback has cleaned it).
//!
//! ```text
//!   file:    [ 0 ............................ reserved ) [ beyond: pwrite ]
//!   mapping: [ PROT_WRITE, MAP_SHARED, len = reserved   )
//!   write_at(offset, data): offset + len(data) <= reserved  →  memcpy into the mapping
//!                           otherwise                        →  the caller's pwrite
//! ```
//!
//! Invariants:
//! - A mapping only covers bytes the filesystem has reserved: it is made after a
//!   successful `fallocate` of the file's whole current length, so a store into it can
//!   never need a block the disk does not have. (A store into a hole that cannot be
//!   allocated would raise `SIGBUS` rather than return `ENOSPC`.) A filesystem without
//!   `fallocate` gets no mapping and keeps `pwrite`.
//! - A mapping never covers bytes past the end of its file: the file only shrinks by
//!   `MappedWrites::forget_file`'s caller (`FileTable::truncate`), which drops every
//!   mapping of that file first, through any handle.
//! - Durability is unchanged: the pages are the file's page cache pages, so a write is
//!   visible to `pread`, `sendfile` and other mappings at once, survives the process
//!   being killed, and is made durable by the same `fdatasync` as a `pwrite` would be.
//! - Writes either go wholly through the mapping or wholly to `pwrite`; a write that
//!   straddles the reserved end is left to `pwrite`.
//! - A file the store has finished appending to (a full CommitLog segment, told through
//!   `Disk::finished_writing`) loses its mapping, so the written pages of old segments do
//!   not stay mapped in the node for as long as the segments stay open for reads. A later
//!   write maps it again. (ConsumeQueue files, a few MiB each, keep theirs until closed.)
//! - Only filesystems that overwrite in place are trusted with mappings: ext4, XFS and
//!   tmpfs. On copy-on-write ones (btrfs, ZFS) an overwrite needs new space even inside a
//!   fallocated range, so a full disk would surface as `SIGBUS`; they keep `pwrite`.
//! - What mappings cannot turn into an error: an I/O error while faulting a page in (a
//!   failing disk, ext4 remounted read-only after an error) raises `SIGBUS` and stops
//!   the node, where `pwrite` would have returned it. The node dies rather than
//!   acknowledge a write it could not make; what it acknowledged before is unaffected.
// Allowed here only (Cargo.toml denies it crate-wide): the shared segment mappings are raw memory (mmap, copies into it, munmap).
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;

use super::FileId;

/// One file's mapping, or the length at which mapping it was refused.
enum Entry {
    Mapped(Mapping),
    /// `fallocate` or `mmap` failed at this length; retried only once the file has grown.
    Refused {
        len: u64,
    },
}

/// `len` bytes of a file, mapped shared and writable at `addr`.
struct Mapping {
    addr: *mut u8,
    len: usize,
    /// Device and inode, to find every mapping of a file that is being truncated.
    inode: (u64, u64),
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr..addr + len` is a mapping this value made and nothing else unmaps;
        // no reference into it outlives a `write` call.
        unsafe {
            libc::munmap(self.addr.cast(), self.len);
        }
    }
}

/// The mappings of one backend instance's files, keyed like its `FileTable`.
#[derive(Default)]
pub(crate) struct MappedWrites {
    entries: RefCell<HashMap<u32, Entry>>,
}

impl MappedWrites {
    /// Copies `data` to `offset` of `file` through its mapping; false when the range lies
    /// (even partly) outside the reserved, mapped bytes, and the caller must `pwrite`.
    pub(crate) fn write(&self, id: FileId, file: &File, offset: u64, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return false;
        };
        let mut entries = self.entries.borrow_mut();
        let covered = |entry: &Entry| match entry {
            Entry::Mapped(mapping) => end <= mapping.len as u64,
            Entry::Refused { .. } => false,
        };
        if !entries.get(&id.0).is_some_and(covered) {
            // Not mapped, or not far enough: the file may have grown since.
            let Ok(metadata) = file.metadata() else {
                return false;
            };
            let len = metadata.len();
            if end > len {
                return false;
            }
            if let Some(Entry::Refused { len: refused }) = entries.get(&id.0) {
                if *refused >= len {
                    return false;
                }
            }
            // Drop the old, shorter mapping before making the new one.
            entries.remove(&id.0);
            let entry = map(file, len, (metadata.dev(), metadata.ino()));
            let usable = covered(&entry);
            entries.insert(id.0, entry);
            if !usable {
                return false;
            }
        }
        let Some(Entry::Mapped(mapping)) = entries.get(&id.0) else {
            return false;
        };
        // SAFETY: `offset + data.len() <= mapping.len` (checked above), the mapping is
        // writable and lives until this entry is removed, which needs `entries` mutably.
        // Other readers of these pages (sendfile, read mappings) only read committed
        // records, never the bytes being written here.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                mapping.addr.add(offset as usize),
                data.len(),
            );
        }
        true
    }

    /// Drops the mapping of handle `id` (it is being closed, or is full).
    pub(crate) fn forget(&self, id: FileId) {
        self.entries.borrow_mut().remove(&id.0);
    }

    /// Drops every mapping of the file behind `file`, through any handle: it is about to
    /// shrink, and a mapping past its new end would fault on the next store.
    pub(crate) fn forget_file(&self, file: &File) {
        let Ok(metadata) = file.metadata() else {
            // Cannot tell which entries are this file's: drop them all, to be safe.
            self.entries.borrow_mut().clear();
            return;
        };
        let inode = (metadata.dev(), metadata.ino());
        self.entries.borrow_mut().retain(|_, entry| match entry {
            Entry::Mapped(mapping) => mapping.inode != inode,
            Entry::Refused { .. } => true,
        });
    }
}

/// Whether `file` lives on a filesystem that writes a reserved block in place (ext4,
/// XFS, tmpfs), so that a store into a fallocated range cannot need new space.
fn overwrites_in_place(file: &File) -> bool {
    // SAFETY: `statfs` is plain data; fstatfs fills it or fails.
    let mut stats: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall on a descriptor `file` keeps open, into a valid struct.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut stats) } != 0 {
        return false;
    }
    matches!(
        stats.f_type,
        libc::EXT4_SUPER_MAGIC | libc::XFS_SUPER_MAGIC | libc::TMPFS_MAGIC
    )
}

/// Reserves and maps the first `len` bytes of `file`, or says why not (quietly: `pwrite`
/// still works, only slower).
fn map(file: &File, len: u64, inode: (u64, u64)) -> Entry {
    let refused = Entry::Refused { len };
    let (Ok(map_len), Ok(reserve_len)) = (usize::try_from(len), libc::off_t::try_from(len)) else {
        return refused;
    };
    if map_len == 0 {
        return refused;
    }
    if !overwrites_in_place(file) {
        return refused;
    }
    // Already reserved when the store preallocated the file: then this only walks its
    // extents; holes in a sparse file get their blocks now. Without fallocate, no mapping.
    loop {
        // SAFETY: plain syscall on a descriptor `file` keeps open.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, reserve_len) } == 0 {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return refused;
        }
    }
    // SAFETY: a fresh shared mapping of an open descriptor; the result is checked.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return refused;
    }
    Entry::Mapped(Mapping {
        addr: addr.cast(),
        len: map_len,
        inode,
    })
}
