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
//! **Metadata is durable immediately.** This is a simplification: creating a file
//! (`open` with `create`), `remove_file`, `create_dir_all`, `truncate` and `allocate`
//! change the durable image at once, as if each were followed by an fsync of the file and
//! its directory. `truncate` additionally makes all earlier writes to the file durable,
//! like the `ftruncate` + `fsync` the real backends do. `sync_dir` is therefore a no-op
//! (it still fails with `NotFound` for a missing directory). Rename and directory removal
//! are not part of the [`Disk`] seam, so the sim does not model them.
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
//! **Power loss.** [`SimDisk::crash_after_ops`]`(n)` makes the n-th next data operation
//! (`write_at`, `sync_data`, `allocate`) the first to fail; [`SimDisk::crash_now`] makes
//! the very next one fail. A failing operation returns "simulated power loss" and changes
//! nothing. From then on, until [`SimDisk::restart`], every mutation (data operations and
//! metadata changes) fails the same way, while reads (`read_at`, `file_len`, `list_dir`,
//! `exists`, opening an existing file) still work and see the current image — the process
//! is notionally still running on its page cache, it just cannot reach the disk.
//! [`SimDisk::restart`] powers back on (if the disk had not crashed, it first loses power
//! at that instant): unsynced writes are resolved as above, every [`FileId`] issued
//! before is invalidated (using one fails with `ESTALE`, "stale file handle"), and
//! injected one-shot faults and a pending crash countdown are cleared.
//!
//! **Injectable faults.** [`SimDisk::fail_next_sync`] and [`SimDisk::fail_next_write`]
//! make the next sync or write fail once with the given errno, changing nothing.
//! [`SimDisk::set_capacity`] limits the sum of all file lengths; a write past the end of a
//! file or an `allocate` that would exceed it fails with `ENOSPC` and changes nothing.
//! Writes inside the current length never hit the limit (like space reserved by
//! fallocate). Power loss takes precedence over injected faults, which take precedence
//! over `ENOSPC`.
//!
//! **Determinism.** All randomness comes from one splitmix64 generator seeded by
//! [`SimConfig::seed`], drawn only during `restart`, in a fixed order (files by path, then
//! each file's writes in order, then sectors by offset). Every future the sim returns is
//! already complete: an operation takes effect when it is called, not when its future is
//! polled. The same seed and the same sequence of calls therefore give the same disk image.
//!
//! **Latency.** [`SimDisk::set_sync_latency`] makes every `sync_data` future wait that
//! long (on tokio's clock, so paused-time tests stay deterministic) *before* it takes
//! effect, to exercise flush timeouts. With no latency set, the above holds.
//!
//! Counters: [`SimDisk::data_ops`] counts every data operation attempted (including ones
//! that fail); [`Disk::stats`] counts successful writes, bytes written and `sync_data`s.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use crate::rng::SplitMix64;

use super::{Disk, FileId, IoFuture, IoStats};

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

#[derive(Default)]
struct SimFile {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Writes since the last sync, in order; `Bytes` clones so no data is copied.
    unsynced: Vec<(u64, Bytes)>,
}

/// Copies `data` into `image` at `offset`, growing it with zeros as needed.
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

struct SimState {
    config: SimConfig,
    rng: SplitMix64,
    dirs: BTreeSet<PathBuf>,
    files: BTreeMap<PathBuf, SimFile>,
    /// Open handles. Ids are never reused (the counter survives restarts), which is how
    /// ids from before a restart are recognised as stale.
    handles: HashMap<u32, PathBuf>,
    next_handle: u32,
    /// Handles below this were issued before the last restart.
    first_live_handle: u32,
    crashed: bool,
    /// Data ops left until power loss; the op that brings it to zero fails.
    crash_countdown: Option<u64>,
    fail_sync: Option<i32>,
    fail_write: Option<i32>,
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

    fn path_of(&self, file: FileId) -> io::Result<PathBuf> {
        match self.handles.get(&file.0) {
            Some(path) => Ok(path.clone()),
            None if file.0 < self.first_live_handle => Err(stale()),
            None => Err(io::Error::from_raw_os_error(libc::EBADF)),
        }
    }

    fn file(&self, file: FileId) -> io::Result<&SimFile> {
        let path = self.path_of(file)?;
        // The file was removed while open: its handle is as good as stale.
        self.files.get(&path).ok_or_else(stale)
    }

    fn file_mut(&mut self, file: FileId) -> io::Result<&mut SimFile> {
        let path = self.path_of(file)?;
        self.files.get_mut(&path).ok_or_else(stale)
    }

    /// Counts a data op and applies a pending crash countdown.
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
                .files
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

    fn restart(&mut self) {
        let sector = self.config.sector_size.max(1) as u64;
        let keep = self.config.keep_probability;
        let drop = self.config.drop_probability;
        let mut report = Vec::new();
        for (path, file) in self.files.iter_mut() {
            for (offset, data) in std::mem::take(&mut file.unsynced) {
                let roll = self.rng.next_f64();
                let fate = if roll < keep {
                    apply(&mut file.durable, offset, &data);
                    WriteFate::Kept
                } else if roll < keep + drop {
                    WriteFate::Dropped
                } else {
                    let end = offset + data.len() as u64;
                    let mut pieces = Vec::new();
                    let mut start = offset;
                    while start < end {
                        let stop = ((start / sector + 1) * sector).min(end);
                        let survives = self.rng.next_u64() & 1 == 1;
                        if survives {
                            let from = (start - offset) as usize;
                            let to = (stop - offset) as usize;
                            apply(&mut file.durable, start, &data[from..to]);
                        }
                        pieces.push(survives);
                        start = stop;
                    }
                    WriteFate::Torn(pieces)
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
        self.last_restart = report;
        self.handles.clear();
        self.first_live_handle = self.next_handle;
        self.crashed = false;
        self.crash_countdown = None;
        self.fail_sync = None;
        self.fail_write = None;
    }
}

/// Makes the file's current image durable by replaying its unsynced writes onto the
/// durable one (cheaper than copying the whole file when little changed). Metadata
/// changes were applied to both images already, so the result equals `current`.
fn make_durable(file: &mut SimFile) {
    for (offset, data) in file.unsynced.drain(..) {
        apply(&mut file.durable, offset, &data);
    }
    debug_assert_eq!(file.durable.len(), file.current.len());
}

/// A handle to one simulated disk. Clones share the same disk, so a test keeps a clone
/// across a crash and hands another to the reopened store.
#[derive(Clone)]
pub struct SimDisk {
    state: Rc<RefCell<SimState>>,
}

impl SimDisk {
    pub fn new(config: SimConfig) -> SimDisk {
        let rng = SplitMix64::new(config.seed);
        SimDisk {
            state: Rc::new(RefCell::new(SimState {
                config,
                rng,
                dirs: BTreeSet::new(),
                files: BTreeMap::new(),
                handles: HashMap::new(),
                next_handle: 0,
                first_live_handle: 0,
                crashed: false,
                crash_countdown: None,
                fail_sync: None,
                fail_write: None,
                capacity: None,
                sync_latency: None,
                data_ops: 0,
                stats: IoStats::default(),
                last_restart: Vec::new(),
            })),
        }
    }
    /// Every later `sync_data` waits `latency` (tokio time) before taking effect; `None`
    /// makes syncs immediate again.
    pub fn set_sync_latency(&self, latency: Option<std::time::Duration>) {
        self.state.borrow_mut().sync_latency = latency;
    }

    /// The disk "loses power" after `ops` more data operations (write, sync, allocate):
    /// that operation and every later one fail with an error and change nothing.
    /// `ops` of 0 or 1 both mean the very next data operation.
    pub fn crash_after_ops(&self, ops: u64) {
        let mut state = self.state.borrow_mut();
        if ops == 0 {
            state.crashed = true;
        } else {
            state.crash_countdown = Some(ops);
        }
    }
    /// Loses power now.
    pub fn crash_now(&self) {
        let mut state = self.state.borrow_mut();
        state.crashed = true;
        state.crash_countdown = None;
    }
    pub fn is_crashed(&self) -> bool {
        self.state.borrow().crashed
    }
    /// Powers back on: every write not made durable by a sync is kept, dropped or torn
    /// (seeded, per sector), handles are invalidated, and the disk works again.
    pub fn restart(&self) {
        self.state.borrow_mut().restart()
    }
    /// The next `sync_data` fails with `errno` (and syncs nothing).
    pub fn fail_next_sync(&self, errno: i32) {
        self.state.borrow_mut().fail_sync = Some(errno);
    }
    /// The next `write_at` fails with `errno` (and writes nothing).
    pub fn fail_next_write(&self, errno: i32) {
        self.state.borrow_mut().fail_write = Some(errno);
    }
    /// Total bytes the disk can hold (sum of file lengths); `None` is unlimited.
    /// Growing a file past it fails with `ENOSPC`.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.borrow_mut().capacity = bytes;
    }
    /// Data operations attempted so far (write, sync, allocate).
    pub fn data_ops(&self) -> u64 {
        self.state.borrow().data_ops
    }
    /// What the last [`SimDisk::restart`] did with each unsynced write, in the order it
    /// resolved them (files by path, then writes in order).
    pub fn last_restart(&self) -> Vec<RestartedWrite> {
        self.state.borrow().last_restart.clone()
    }
    /// The durable (crash-surviving) image of the file at `path`, if it exists.
    pub fn durable_image(&self, path: &Path) -> Option<Vec<u8>> {
        self.state
            .borrow()
            .files
            .get(path)
            .map(|file| file.durable.clone())
    }
    /// Bytes written to the file at `path` since its last sync that a crash could lose.
    pub fn unsynced_bytes(&self, path: &Path) -> u64 {
        self.state.borrow().files.get(path).map_or(0, |file| {
            file.unsynced
                .iter()
                .map(|(_, data)| data.len() as u64)
                .sum()
        })
    }
}

impl Disk for SimDisk {
    fn backend_name(&self) -> &'static str {
        "sim"
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<FileId> {
        let mut state = self.state.borrow_mut();
        if state.is_dir(path) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{}: is a directory", path.display()),
            ));
        }
        if !state.files.contains_key(path) {
            if !create {
                return Err(not_found(path));
            }
            let parent = path.parent().unwrap_or(Path::new(""));
            if !state.is_dir(parent) {
                return Err(not_found(parent));
            }
            state.check_power()?;
            state.files.insert(path.to_path_buf(), SimFile::default());
        }
        let id = state.next_handle;
        state.next_handle = id
            .checked_add(1)
            .ok_or_else(|| io::Error::other("file id space exhausted"))?;
        state.handles.insert(id, path.to_path_buf());
        Ok(FileId(id))
    }
    fn close(&self, file: FileId) {
        self.state.borrow_mut().handles.remove(&file.0);
    }
    fn file_len(&self, file: FileId) -> io::Result<u64> {
        Ok(self.state.borrow().file(file)?.current.len() as u64)
    }
    fn write_at(&self, file: FileId, offset: u64, data: Bytes) -> IoFuture<()> {
        Box::pin(std::future::ready(
            self.state.borrow_mut().write_at(file, offset, data),
        ))
    }
    fn sync_data(&self, file: FileId) -> IoFuture<()> {
        let latency = self.state.borrow().sync_latency;
        match latency {
            None => Box::pin(std::future::ready(self.state.borrow_mut().sync_data(file))),
            Some(latency) => {
                let state = self.state.clone();
                Box::pin(async move {
                    tokio::time::sleep(latency).await;
                    let result = state.borrow_mut().sync_data(file);
                    result
                })
            }
        }
    }
    fn allocate(&self, file: FileId, len: u64) -> IoFuture<()> {
        Box::pin(std::future::ready(
            self.state.borrow_mut().allocate(file, len),
        ))
    }
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let state = self.state.borrow();
        let current = &state.file(file)?.current;
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
    fn truncate(&self, file: FileId, len: u64) -> io::Result<()> {
        let mut state = self.state.borrow_mut();
        state.check_power()?;
        let current = state.file(file)?.current.len() as u64;
        state.check_space(len.saturating_sub(current))?;
        let target = state.file_mut(file)?;
        // ftruncate + fsync: everything written so far becomes durable, at the new length.
        make_durable(target);
        target.current.resize(len as usize, 0);
        target.durable.resize(len as usize, 0);
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.borrow_mut();
        if !state.files.contains_key(path) {
            return Err(not_found(path));
        }
        state.check_power()?;
        state.files.remove(path);
        Ok(())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.borrow_mut();
        let missing: Vec<PathBuf> = path
            .ancestors()
            .filter(|dir| !state.is_dir(dir))
            .map(Path::to_path_buf)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if let Some(file) = missing.iter().find(|dir| state.files.contains_key(*dir)) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: a file is in the way", file.display()),
            ));
        }
        state.check_power()?;
        state.dirs.extend(missing);
        Ok(())
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state.borrow();
        if !state.is_dir(dir) {
            return Err(not_found(dir));
        }
        let names = state
            .dirs
            .iter()
            .chain(state.files.keys())
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name())
            .map(|name| name.to_string_lossy().into_owned());
        // Already unique (one path per entry); collect into a set to sort dirs and files together.
        Ok(names.collect::<BTreeSet<String>>().into_iter().collect())
    }
    fn exists(&self, path: &Path) -> bool {
        let state = self.state.borrow();
        state.is_dir(path) || state.files.contains_key(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        // Directory entries are durable immediately (see the fault model).
        if self.state.borrow().is_dir(dir) {
            Ok(())
        } else {
            Err(not_found(dir))
        }
    }
    fn stats(&self) -> IoStats {
        self.state.borrow().stats
    }
}
