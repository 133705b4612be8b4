//! The simulated disk: in memory, seeded, fault-injecting.
//!
//! It owns an in-memory filesystem (a set of directories and a map from path to file)
//! and a crash model precise enough to test the store's recovery code deterministically.
//!
//! # Fault model
//!
//! **Two images per file.** Every file has a *durable* image (what survives power loss)
//! and a *current* image (what reads see, like the page cache), plus the list of writes
//! made since its last sync, in order. `read_at` always sees the current image, as the
//! [`Disk`] contract requires.
//!
//! **What survives a crash.** `sync_data` copies the current image to the durable one
//! and clears the unsynced list: everything written before a successful sync survives
//! byte for byte. Writes after the last sync are at the mercy of [`SimDisk::restart`].
//!
//! **Names are durable when their directory is synced.** A file's data lives in an
//! *inode*; a path names an inode. There are two namespaces: the *current* one (what
//! `open`, `list_dir`, `exists` and reads see) and the *durable* one (what a crash
//! leaves). Creating a file (`open` with `create`, [`MetaFiles::write_file_synced`]) and
//! [`MetaFiles::rename`] change the current namespace only; [`Disk::sync_dir`] copies the
//! current entries of that one directory into the durable namespace. The changes made
//! since a directory's last sync are kept in order, and at a crash each of them, in
//! order, reaches the disk whole or not at all on a seeded coin flip (a journal commits a
//! rename whole; one whose source name was lost is lost too). So a file created or
//! renamed since its directory was last synced may be lost: a new file vanishes (even if
//! its data was synced), a renamed file is back under its old name, and the file a
//! rename replaced is back with its old content. Renames across directories are refused
//! (`Unsupported`). A handle names the inode, so it keeps working across a rename, as a
//! real descriptor does.
//!
//! **Other metadata is durable immediately.** A simplification: `remove_file` (from both
//! namespaces: a removed file never comes back), `create_dir_all` (directories are never
//! lost), `truncate` and `allocate` change the durable image at once, as if each were
//! followed by an fsync of the file and its directory. `truncate` additionally makes all
//! earlier writes to the file durable, like the `ftruncate` + `fsync` the real backends
//! do. Directory rename and removal are not part of the seam, so the sim does not model
//! them.
//!
//! **Sector tearing.** On restart each unsynced write, in the order it was made, is
//! independently either *kept* whole, *dropped* whole, or *torn* (probabilities in
//! [`SimConfig`]). A torn write is split along sector boundaries (`sector_size`, aligned
//! to file offsets, not to the start of the write) and each piece is kept or dropped on a
//! coin flip. So after a restart every sector of an unsynced write holds either what that
//! write put there or what was there before it (including earlier unsynced writes that
//! were kept) — never a mix within one sector. A kept piece past the durable end of the
//! file extends it, with zeros in any gap. After the writes are resolved the current image
//! is reset to the durable one.
//!
//! **Power loss.** [`SimDisk::crash_after_ops`]`(n)` makes the n-th next *disk
//! operation* (`write_at`, `sync_data`, `allocate`, `rename`, `sync_dir`, and the write
//! and the sync inside `write_file_synced`) the first to fail; [`SimDisk::crash_now`] makes
//! the very next one fail. A failing operation returns "simulated power loss" and changes
//! nothing. From then on, until [`SimDisk::restart`], every mutation (data operations and
//! metadata changes) fails the same way, while reads (`read_at`, `file_len`, `list_dir`,
//! `exists`, opening an existing file) still work and see the current image — the process
//! is notionally still running on its page cache, it just cannot reach the disk.
//! [`SimDisk::restart`] powers back on (if the disk had not crashed, it first loses power
//! at that instant): unsynced writes are resolved as above, every [`FileId`] issued
//! before is invalidated (using one fails with `ESTALE`, "stale file handle"), every
//! lock is released (the process that held it is gone), the current namespace is reset
//! to the durable one, and injected one-shot faults and a pending crash countdown are
//! cleared.
//!
//! **Injectable faults.** [`SimDisk::fail_next_sync`], [`SimDisk::fail_next_write`] and
//! [`SimDisk::fail_next_read`] make the next sync, write or read (`read_at` or
//! [`MetaFiles::read_file`]) fail once with the given errno, changing nothing.
//! [`SimDisk::set_capacity`] limits the sum of all file lengths; a write past the end of a
//! file or an `allocate` that would exceed it fails with `ENOSPC` and changes nothing.
//! Writes inside the current length never hit the limit (like space reserved by
//! fallocate). Power loss takes precedence over injected faults, which take precedence
//! over `ENOSPC`.
//!
//! **Determinism.** All randomness comes from one splitmix64 generator seeded by
//! [`SimConfig::seed`], drawn only during `restart`, in a fixed order: first the unsynced
//! writes (files by current path, then files only the durable namespace or an unsynced
//! creation still names; each file's writes in order, then sectors by offset), then the
//! unsynced namespace changes in the order they were made. Every future the sim returns is
//! already complete: an operation takes effect when it is called, not when its future is
//! polled. The same seed and the same sequence of calls therefore give the same disk image.
//!
//! **Latency.** [`SimDisk::set_sync_latency`] makes every `sync_data` future wait that
//! long (on tokio's clock, so paused-time tests stay deterministic) *before* it takes
//! effect, to exercise flush timeouts. With no latency set, the above holds.
//!
//! **Locks.** [`Disk::lock`] creates the file like `open` and holds the path until the
//! returned [`FileLock`] drops or the disk restarts; a second lock fails with
//! `WouldBlock`. A lock dropped after a restart does not release a newer holder's lock.
//!
//! **Threads.** The state sits behind one mutex, so a [`SimDisk`] is `Send + Sync` and the
//! node-wide tables can share it; a test still drives it from one thread, so the order of
//! calls (and thus the image) stays deterministic.
//!
//! Counters: [`SimDisk::data_ops`] counts every disk operation attempted (including ones
//! that fail); [`Disk::stats`] counts successful writes, bytes written and `sync_data`s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use bytes::Bytes;

use crate::rng::SplitMix64;
use crate::sync::Locked;

use super::meta::MetaFiles;
use super::{Disk, FileId, FileLock, IoFuture, IoStats};

/// Tunables of the crash model.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    /// Granularity of torn writes.
    pub sector_size: usize,
    /// Chance that an unsynced write survives a crash whole.
    pub keep_probability: f64,
    /// Chance that an unsynced write is lost whole. The rest (`1 - keep - drop`) is the
    /// chance that it is torn at sector granularity.
    pub drop_probability: f64,
}

impl SimConfig {
    /// The defaults with the given seed: 512-byte sectors; unsynced writes kept 40%,
    /// dropped 30%, torn 30% of the time.
    pub fn with_seed(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            sector_size: 512,
            keep_probability: 0.4,
            drop_probability: 0.3,
        }
    }
}

/// How [`SimDisk::restart`] resolved one unsynced write; see [`SimDisk::last_restart`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteFate {
    Kept,
    Dropped,
    /// Torn: which of the write's sectors (in offset order) survived.
    Torn(Vec<bool>),
}

/// One unsynced write as resolved by a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartedWrite {
    pub path: PathBuf,
    pub offset: u64,
    pub len: usize,
    pub fate: WriteFate,
}

/// One file's content (an inode): what paths in either namespace name.
#[derive(Default)]
struct SimFile {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Writes since the last sync, in order; `Bytes` clones so no data is copied.
    unsynced: Vec<(u64, Bytes)>,
}

type Inode = u64;

/// A namespace change not yet made durable by a sync of its directory.
#[derive(Clone, Debug)]
enum NameChange {
    Create {
        path: PathBuf,
        inode: Inode,
    },
    /// Within one directory (the sim refuses others).
    Rename {
        from: PathBuf,
        to: PathBuf,
        inode: Inode,
    },
}

impl NameChange {
    fn dir(&self) -> Option<&Path> {
        match self {
            NameChange::Create { path, .. } => path.parent(),
            NameChange::Rename { to, .. } => to.parent(),
        }
    }
    fn inode(&self) -> Inode {
        match self {
            NameChange::Create { inode, .. } | NameChange::Rename { inode, .. } => *inode,
        }
    }
    /// Whether the change puts a name at `path`.
    fn names(&self, path: &Path) -> bool {
        match self {
            NameChange::Create { path: named, .. } | NameChange::Rename { to: named, .. } => {
                named == path
            }
        }
    }
}

/// Copies `data` into `image` at `offset`, growing it with zeros as needed.
/// A torn write: each `sector`-aligned piece of `data` at `offset` survives into
/// `durable` or not, by a coin each. Returns which did, in order.
fn tear(
    rng: &mut SplitMix64,
    durable: &mut Vec<u8>,
    offset: u64,
    data: &[u8],
    sector: u64,
) -> Vec<bool> {
    let end = offset + u64::try_from(data.len()).expect("a write's length fits u64");
    let mut pieces = Vec::new();
    let mut start = offset;
    while start < end {
        let stop = ((start / sector + 1) * sector).min(end);
        let survives = rng.next_u64() & 1 == 1;
        if survives {
            let from = usize::try_from(start - offset).expect("within the write");
            let to = usize::try_from(stop - offset).expect("within the write");
            apply(durable, start, &data[from..to]);
        }
        pieces.push(survives);
        start = stop;
    }
    pieces
}

fn apply(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

fn power_loss() -> io::Error {
    io::Error::other("simulated power loss")
}

fn stale() -> io::Error {
    io::Error::from_raw_os_error(libc::ESTALE)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

fn is_a_directory(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::IsADirectory,
        format!("{}: is a directory", path.display()),
    )
}

struct SimState {
    config: SimConfig,
    rng: SplitMix64,
    dirs: BTreeSet<PathBuf>,
    /// The current namespace: what opens, listings and reads see.
    names: BTreeMap<PathBuf, Inode>,
    /// The namespace a crash leaves: each directory's entries as of its last sync (and
    /// every removal, which is durable at once).
    durable_names: BTreeMap<PathBuf, Inode>,
    /// The changes from `durable_names` to `names` not yet synced, in order; a crash keeps
    /// each on a coin flip, in order.
    unsynced_names: Vec<NameChange>,
    /// Every inode either namespace names; no other.
    inodes: BTreeMap<Inode, SimFile>,
    next_inode: Inode,
    /// Open handles, to the inode they opened. Ids are never reused (the counter survives
    /// restarts), which is how ids from before a restart are recognised as stale.
    handles: HashMap<u32, Inode>,
    next_handle: u32,
    /// Handles below this were issued before the last restart.
    first_live_handle: u32,
    /// Held locks: path → the token of the [`FileLock`] that holds it.
    locks: BTreeMap<PathBuf, u64>,
    next_lock: u64,
    crashed: bool,
    /// Disk ops left until power loss; the op that brings it to zero fails.
    crash_countdown: Option<u64>,
    fail_sync: Option<i32>,
    fail_write: Option<i32>,
    fail_read: Option<i32>,
    capacity: Option<u64>,
    sync_latency: Option<std::time::Duration>,
    data_ops: u64,
    stats: IoStats,
    last_restart: Vec<RestartedWrite>,
}

impl SimState {
    fn is_dir(&self, path: &Path) -> bool {
        // The root and the empty relative path (the working directory) always exist.
        path.parent().is_none() || path.as_os_str().is_empty() || self.dirs.contains(path)
    }

    fn inode_of(&self, file: FileId) -> io::Result<Inode> {
        match self.handles.get(&file.0) {
            Some(inode) => Ok(*inode),
            None if file.0 < self.first_live_handle => Err(stale()),
            None => Err(io::Error::from_raw_os_error(libc::EBADF)),
        }
    }

    fn file(&self, file: FileId) -> io::Result<&SimFile> {
        let inode = self.inode_of(file)?;
        // The file was removed while open: its handle is as good as stale.
        self.inodes.get(&inode).ok_or_else(stale)
    }

    fn file_mut(&mut self, file: FileId) -> io::Result<&mut SimFile> {
        let inode = self.inode_of(file)?;
        self.inodes.get_mut(&inode).ok_or_else(stale)
    }

    /// The inode `path` names now, creating an empty file there when `create` is set
    /// (in the current namespace only: see the fault model).
    fn lookup_or_create(&mut self, path: &Path, create: bool) -> io::Result<Inode> {
        if self.is_dir(path) {
            return Err(is_a_directory(path));
        }
        if let Some(inode) = self.names.get(path) {
            return Ok(*inode);
        }
        if !create {
            return Err(not_found(path));
        }
        let parent = path.parent().unwrap_or(Path::new(""));
        if !self.is_dir(parent) {
            return Err(not_found(parent));
        }
        self.check_power()?;
        let inode = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(inode, SimFile::default());
        self.names.insert(path.to_path_buf(), inode);
        self.unsynced_names.push(NameChange::Create {
            path: path.to_path_buf(),
            inode,
        });
        Ok(inode)
    }

    fn issue_handle(&mut self, inode: Inode) -> io::Result<FileId> {
        let id = self.next_handle;
        self.next_handle = id
            .checked_add(1)
            .ok_or_else(|| io::Error::other("file id space exhausted"))?;
        self.handles.insert(id, inode);
        Ok(FileId(id))
    }

    /// Drops the inodes neither namespace names any more.
    fn forget_unnamed(&mut self) {
        let named: BTreeSet<Inode> = self
            .names
            .values()
            .chain(self.durable_names.values())
            .copied()
            .chain(self.unsynced_names.iter().map(NameChange::inode))
            .collect();
        self.inodes.retain(|inode, _| named.contains(inode));
    }

    /// Counts a disk op and applies a pending crash countdown.
    fn begin_data_op(&mut self) -> io::Result<()> {
        self.data_ops += 1;
        if let Some(left) = self.crash_countdown {
            let left = left.saturating_sub(1);
            self.crash_countdown = Some(left);
            if left == 0 {
                self.crash_countdown = None;
                self.crashed = true;
            }
        }
        self.check_power()
    }

    fn check_power(&self) -> io::Result<()> {
        if self.crashed {
            Err(power_loss())
        } else {
            Ok(())
        }
    }

    /// `ENOSPC` if growing one file by `growth` bytes would exceed the capacity.
    fn check_space(&self, growth: u64) -> io::Result<()> {
        if let Some(capacity) = self.capacity {
            let used: u64 = self
                .inodes
                .values()
                .map(|file| file.current.len() as u64)
                .sum();
            if growth > 0 && used + growth > capacity {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        Ok(())
    }

    fn write_at(&mut self, file: FileId, offset: u64, data: Bytes) -> io::Result<()> {
        self.begin_data_op()?;
        let len = self.file(file)?.current.len() as u64;
        if let Some(errno) = self.fail_write.take() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        self.check_space(end.saturating_sub(len))?;
        let target = self.file_mut(file)?;
        apply(&mut target.current, offset, &data);
        let written = data.len() as u64;
        target.unsynced.push((offset, data));
        self.stats.writes += 1;
        self.stats.bytes_written += written;
        Ok(())
    }

    fn sync_data(&mut self, file: FileId) -> io::Result<()> {
        self.begin_data_op()?;
        self.file(file)?;
        if let Some(errno) = self.fail_sync.take() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let target = self.file_mut(file)?;
        make_durable(target);
        self.stats.syncs += 1;
        Ok(())
    }

    fn allocate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        self.begin_data_op()?;
        let current = self.file(file)?.current.len() as u64;
        self.check_space(len.saturating_sub(current))?;
        let target = self.file_mut(file)?;
        // Size changes are durable at once; the zeros in the durable image under unsynced
        // writes are what a crash leaves if those writes are dropped.
        let len = len as usize;
        if target.current.len() < len {
            target.current.resize(len, 0);
        }
        if target.durable.len() < len {
            target.durable.resize(len, 0);
        }
        Ok(())
    }

    fn truncate(&mut self, file: FileId, len: u64) -> io::Result<()> {
        self.check_power()?;
        let current = self.file(file)?.current.len() as u64;
        self.check_space(len.saturating_sub(current))?;
        let target = self.file_mut(file)?;
        // ftruncate + fsync: everything written so far becomes durable, at the new length.
        make_durable(target);
        target.current.resize(len as usize, 0);
        target.durable.resize(len as usize, 0);
        Ok(())
    }

    fn read_at(&mut self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.file(file)?;
        if let Some(errno) = self.fail_read.take() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let current = &self.file(file)?.current;
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= current.len() {
            return Ok(0);
        }
        let count = buf.len().min(current.len() - start);
        buf[..count].copy_from_slice(&current[start..start + count]);
        Ok(count)
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        if self.is_dir(from) || self.is_dir(to) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the sim does not rename directories",
            ));
        }
        if !self.names.contains_key(from) {
            return Err(not_found(from));
        }
        let parent = to.parent().unwrap_or(Path::new(""));
        if !self.is_dir(parent) {
            return Err(not_found(parent));
        }
        if from.parent() != to.parent() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the sim renames within one directory only",
            ));
        }
        self.begin_data_op()?;
        let inode = self.names.remove(from).expect("checked above");
        // The replaced file stays in the durable namespace until `to`'s directory is synced.
        self.names.insert(to.to_path_buf(), inode);
        self.unsynced_names.push(NameChange::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            inode,
        });
        self.forget_unnamed();
        Ok(())
    }

    /// The files a restart settles, each inode once: current names first, then what only
    /// the durable namespace names (a file a lost rename replaced), then unsynced creates.
    fn restart_order(&self) -> Vec<(PathBuf, Inode)> {
        let mut order: Vec<(PathBuf, Inode)> = Vec::new();
        let mut seen = BTreeSet::new();
        for (path, inode) in self.names.iter().chain(self.durable_names.iter()) {
            if seen.insert(*inode) {
                order.push((path.clone(), *inode));
            }
        }
        for change in &self.unsynced_names {
            if let NameChange::Create { path, inode } = change {
                if seen.insert(*inode) {
                    order.push((path.clone(), *inode));
                }
            }
        }
        order
    }

    /// The namespace at a restart: each unsynced change, in order, reached the disk or did
    /// not (a journal commits a rename whole). One that depends on a lost one is lost too.
    fn settle_names(&mut self) {
        for change in std::mem::take(&mut self.unsynced_names) {
            if self.rng.next_u64() & 1 == 0 {
                continue;
            }
            match change {
                NameChange::Create { path, inode } => {
                    self.durable_names.insert(path, inode);
                }
                NameChange::Rename { from, to, inode } => {
                    if self.durable_names.get(&from) == Some(&inode) {
                        self.durable_names.remove(&from);
                        self.durable_names.insert(to, inode);
                    }
                }
            }
        }
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        if !self.is_dir(dir) {
            return Err(not_found(dir));
        }
        self.begin_data_op()?;
        let in_dir = |path: &PathBuf| path.parent() == Some(dir);
        self.durable_names.retain(|path, _| !in_dir(path));
        let entries: Vec<(PathBuf, Inode)> = self
            .names
            .iter()
            .filter(|(path, _)| in_dir(path))
            .map(|(path, inode)| (path.clone(), *inode))
            .collect();
        self.durable_names.extend(entries);
        self.unsynced_names
            .retain(|change| change.dir() != Some(dir));
        self.forget_unnamed();
        Ok(())
    }

    fn restart(&mut self) {
        let sector = u64::try_from(self.config.sector_size.max(1)).expect("a sector size fits u64");
        let (keep, drop) = (self.config.keep_probability, self.config.drop_probability);
        let mut report = Vec::new();
        for (path, inode) in self.restart_order() {
            let file = self
                .inodes
                .get_mut(&inode)
                .expect("every named inode exists");
            for (offset, data) in std::mem::take(&mut file.unsynced) {
                let roll = self.rng.next_f64();
                let fate = if roll < keep {
                    apply(&mut file.durable, offset, &data);
                    WriteFate::Kept
                } else if roll < keep + drop {
                    WriteFate::Dropped
                } else {
                    WriteFate::Torn(tear(
                        &mut self.rng,
                        &mut file.durable,
                        offset,
                        &data,
                        sector,
                    ))
                };
                report.push(RestartedWrite {
                    path: path.clone(),
                    offset,
                    len: data.len(),
                    fate,
                });
            }
            file.current = file.durable.clone();
        }
        self.settle_names();
        self.names = self.durable_names.clone();
        self.forget_unnamed();
        self.last_restart = report;
        self.handles.clear();
        self.first_live_handle = self.next_handle;
        self.locks.clear();
        self.crashed = false;
        self.crash_countdown = None;
        self.fail_sync = None;
        self.fail_write = None;
        self.fail_read = None;
    }
}

/// Makes the file's current image durable by replaying its unsynced writes onto the
/// durable one (cheaper than copying the whole file when little changed). Metadata
/// changes were applied to both images already, so the result equals `current`.
fn make_durable(file: &mut SimFile) {
    for (offset, data) in file.unsynced.drain(..) {
        apply(&mut file.durable, offset, &data);
    }
    assert_eq!(
        file.durable.len(),
        file.current.len(),
        "a synced file's durable image ({} bytes) must be as long as its current one ({})",
        file.durable.len(),
        file.current.len()
    );
}

/// A handle to one simulated disk. Clones share the same disk, so a test keeps a clone
/// across a crash and hands another to the reopened store.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Locked<SimState>>,
}

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimDisk")
    }
}

/// What a sim [`FileLock`] holds: releases its path on drop unless a restart (or a newer
/// holder) took it over.
struct SimLock {
    state: Arc<Locked<SimState>>,
    path: PathBuf,
    token: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        if state.locks.get(&self.path) == Some(&self.token) {
            state.locks.remove(&self.path);
        }
    }
}

impl SimDisk {
    pub fn new(config: SimConfig) -> SimDisk {
        let rng = SplitMix64::new(config.seed);
        SimDisk {
            state: Arc::new(Locked::new(SimState {
                config,
                rng,
                dirs: BTreeSet::new(),
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                unsynced_names: Vec::new(),
                inodes: BTreeMap::new(),
                next_inode: 0,
                handles: HashMap::new(),
                next_handle: 0,
                first_live_handle: 0,
                locks: BTreeMap::new(),
                next_lock: 0,
                crashed: false,
                crash_countdown: None,
                fail_sync: None,
                fail_write: None,
                fail_read: None,
                capacity: None,
                sync_latency: None,
                data_ops: 0,
                stats: IoStats::default(),
                last_restart: Vec::new(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        self.state.lock()
    }

    /// Every later `sync_data` waits `latency` (tokio time) before taking effect; `None`
    /// makes syncs immediate again.
    pub fn set_sync_latency(&self, latency: Option<std::time::Duration>) {
        self.state().sync_latency = latency;
    }

    /// The disk "loses power" after `ops` more disk operations (write, sync, allocate,
    /// rename, directory sync): that operation and every later one fail with an error and
    /// change nothing. `ops` of 0 or 1 both mean the very next disk operation.
    pub fn crash_after_ops(&self, ops: u64) {
        let mut state = self.state();
        if ops == 0 {
            state.crashed = true;
        } else {
            state.crash_countdown = Some(ops);
        }
    }
    /// Loses power now.
    pub fn crash_now(&self) {
        let mut state = self.state();
        state.crashed = true;
        state.crash_countdown = None;
    }
    pub fn is_crashed(&self) -> bool {
        self.state().crashed
    }
    /// Powers back on: every write not made durable by a sync is kept, dropped or torn
    /// (seeded, per sector), names not made durable by a directory sync are lost,
    /// handles and locks are invalidated, and the disk works again.
    pub fn restart(&self) {
        self.state().restart()
    }
    /// The next `sync_data` fails with `errno` (and syncs nothing).
    pub fn fail_next_sync(&self, errno: i32) {
        self.state().fail_sync = Some(errno);
    }
    /// The next `write_at` fails with `errno` (and writes nothing).
    pub fn fail_next_write(&self, errno: i32) {
        self.state().fail_write = Some(errno);
    }
    /// The next read (`read_at`, or `read_file` of the tables) fails with `errno`.
    pub fn fail_next_read(&self, errno: i32) {
        self.state().fail_read = Some(errno);
    }
    /// Total bytes the disk can hold (sum of file lengths); `None` is unlimited.
    /// Growing a file past it fails with `ENOSPC`.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state().capacity = bytes;
    }
    /// Disk operations attempted so far (write, sync, allocate, rename, directory sync).
    pub fn data_ops(&self) -> u64 {
        self.state().data_ops
    }
    /// What the last [`SimDisk::restart`] did with each unsynced write, in the order it
    /// resolved them (files by path, then writes in order).
    pub fn last_restart(&self) -> Vec<RestartedWrite> {
        self.state().last_restart.clone()
    }
    /// The durable (crash-surviving) data of the file now at `path`, if there is one;
    /// whether its *name* survives a crash is [`SimDisk::durably_named`].
    pub fn durable_image(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.state();
        let inode = state.names.get(path)?;
        state.inodes.get(inode).map(|file| file.durable.clone())
    }
    /// Whether a crash now would leave a file at `path` naming the same file as now.
    pub fn durably_named(&self, path: &Path) -> bool {
        let state = self.state();
        state.names.contains_key(path) && state.names.get(path) == state.durable_names.get(path)
    }
    /// Bytes written to the file at `path` since its last sync that a crash could lose.
    pub fn unsynced_bytes(&self, path: &Path) -> u64 {
        let state = self.state();
        let Some(file) = state
            .names
            .get(path)
            .and_then(|inode| state.inodes.get(inode))
        else {
            return 0;
        };
        file.unsynced
            .iter()
            .map(|(_, data)| data.len() as u64)
            .sum()
    }
}

impl Disk for SimDisk {
    fn backend_name(&self) -> &'static str {
        "sim"
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<FileId> {
        let mut state = self.state();
        let inode = state.lookup_or_create(path, create)?;
        state.issue_handle(inode)
    }
    fn close(&self, file: FileId) {
        self.state().handles.remove(&file.0);
    }
    fn file_len(&self, file: FileId) -> io::Result<u64> {
        Ok(self.state().file(file)?.current.len() as u64)
    }
    fn write_at(&self, file: FileId, offset: u64, data: Bytes) -> IoFuture<()> {
        Box::pin(std::future::ready(
            self.state().write_at(file, offset, data),
        ))
    }
    fn sync_data(&self, file: FileId) -> IoFuture<()> {
        let latency = self.state().sync_latency;
        match latency {
            None => Box::pin(std::future::ready(self.state().sync_data(file))),
            Some(latency) => {
                let state = self.state.clone();
                Box::pin(async move {
                    tokio::time::sleep(latency).await;
                    let result = state.lock().sync_data(file);
                    result
                })
            }
        }
    }
    fn allocate(&self, file: FileId, len: u64) -> IoFuture<()> {
        Box::pin(std::future::ready(self.state().allocate(file, len)))
    }
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.state().read_at(file, offset, buf)
    }
    fn truncate(&self, file: FileId, len: u64) -> io::Result<()> {
        self.state().truncate(file, len)
    }
    fn space(&self, _path: &Path) -> io::Result<super::DiskSpace> {
        let state = self.state();
        let used: u64 = state
            .inodes
            .values()
            .map(|file| file.current.len() as u64)
            .sum();
        // Without a capacity the disk is as big as the address space.
        let total = state.capacity.unwrap_or(u64::MAX);
        Ok(super::DiskSpace {
            total,
            available: total.saturating_sub(used),
        })
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        if !state.names.contains_key(path) {
            return Err(not_found(path));
        }
        state.check_power()?;
        // Durable at once (see the fault model): the name goes from both namespaces.
        state.names.remove(path);
        state.durable_names.remove(path);
        state.unsynced_names.retain(|change| !change.names(path));
        state.forget_unnamed();
        Ok(())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        <SimDisk as MetaFiles>::create_dir_all(self, path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state();
        if !state.is_dir(dir) {
            return Err(not_found(dir));
        }
        let names = state
            .dirs
            .iter()
            .chain(state.names.keys())
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name())
            .map(|name| name.to_string_lossy().into_owned());
        // Already unique (one path per entry); collect into a set to sort dirs and files together.
        Ok(names.collect::<BTreeSet<String>>().into_iter().collect())
    }
    fn exists(&self, path: &Path) -> bool {
        let state = self.state();
        state.is_dir(path) || state.names.contains_key(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        <SimDisk as MetaFiles>::sync_dir(self, dir)
    }
    fn lock(&self, path: &Path) -> io::Result<FileLock> {
        let mut state = self.state();
        state.lookup_or_create(path, true)?;
        if state.locks.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is locked by another holder", path.display()),
            ));
        }
        let token = state.next_lock;
        state.next_lock += 1;
        state.locks.insert(path.to_path_buf(), token);
        Ok(FileLock::new(SimLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
            token,
        }))
    }
    fn stats(&self) -> IoStats {
        self.state().stats
    }
}

impl MetaFiles for SimDisk {
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut state = self.state();
        let inode = state.lookup_or_create(path, false)?;
        if let Some(errno) = state.fail_read.take() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(state.inodes[&inode].current.clone())
    }
    fn write_file_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        // Three steps a crash can fall between, as on a real disk: create-or-truncate
        // (metadata, durable at once like `truncate`), the write, the sync.
        let file = {
            let mut state = self.state();
            let inode = state.lookup_or_create(path, true)?;
            let file = state.issue_handle(inode)?;
            state.truncate(file, 0)?;
            file
        };
        let result = (|| {
            let mut state = self.state();
            state.write_at(file, 0, Bytes::copy_from_slice(bytes))?;
            state.sync_data(file)
        })();
        self.close(file);
        result
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.state().rename(from, to)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        let missing: Vec<PathBuf> = path
            .ancestors()
            .filter(|dir| !state.is_dir(dir))
            .map(Path::to_path_buf)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if let Some(file) = missing.iter().find(|dir| state.names.contains_key(*dir)) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: a file is in the way", file.display()),
            ));
        }
        state.check_power()?;
        state.dirs.extend(missing);
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.state().sync_dir(dir)
    }
    fn read_range(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut state = self.state();
        let inode = state.lookup_or_create(path, false)?;
        if let Some(errno) = state.fail_read.take() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let content = &state.inodes[&inode].current;
        let start = (offset.min(content.len() as u64)) as usize;
        let end = start.saturating_add(len).min(content.len());
        Ok(content[start..end].to_vec())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        <SimDisk as super::Disk>::remove_file(self, path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        <SimDisk as super::Disk>::list_dir(self, dir)
    }
}
