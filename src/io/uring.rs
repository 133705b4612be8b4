//! The io_uring backend.
//!
//! Owns one ring per backend instance (so per shard thread), the table of in-flight
//! operations, and a reactor task on the shard's `LocalSet`.
//!
//! How an operation runs:
//! 1. The op future (first poll) takes a slot in the op table, pushes an SQE whose
//!    `user_data` is the slot index, and calls `io_uring_enter` to submit it.
//! 2. The kernel posts a CQE and signals the eventfd registered with the ring.
//! 3. The reactor task, woken by tokio's `AsyncFd` on that eventfd, drains the completion
//!    queue, stores each result in its slot and wakes the waiting future. A future that is
//!    polled also drains the CQ itself first, which is cheap (no syscall) and means a
//!    completion is never missed even if the reactor runs late.
//!
//! Invariants:
//! - A slot keeps the write buffer (`Bytes`) and the file (`Arc<File>`, so the fd number
//!   cannot be closed and reused) alive until its CQE has been reaped, even if the op
//!   future was dropped; the slot index is only reused after that, so a `user_data` never
//!   refers to two live operations.
//! - Dropping the last reference to the ring waits for every in-flight operation first,
//!   because the kernel may still be reading a buffer we would otherwise free.
//! - `write_at` resubmits the remainder after a short write, so callers never see one.
//! - Reads, truncation, directory operations and the lock are plain synchronous syscalls shared
//!   with the portable backend (`portable::FileTable` and friends): they are rare, or
//!   served from the page cache, and gain nothing from the ring.
//!
//! Data writes take one of three paths, chosen per backend instance ([`WritePath`]);
//! `fdatasync` and `fallocate` go through the ring on all of them:
//! - [`WritePath::Mapped`] (the default): copied on the shard thread into a shared
//!   mapping of the file where the bytes are reserved (a preallocated segment), `pwrite`
//!   elsewhere ([`super::mapped`]). The same page cache pages as `pwrite`, without the
//!   syscall: node CPU per one-producer send fell from 40.6 to 35.3 µs with it (medians
//!   of three alternating runs, release build, 1 KiB ASYNC_FLUSH sends).
//! - [`WritePath::Inline`]: `pwrite` on the shard thread, as the portable backend does
//!   without mappings. A buffered write to ext4 cannot complete in the submitting
//!   context, so through the ring it is punted to an io-wq kernel worker: a thread
//!   wake-up, a context switch and a CQE + eventfd round trip per write, which on the
//!   send path cost more than the copy into the page cache itself (perf: io-wq ~18% of
//!   node CPU at ~1 write per message).
//! - [`WritePath::Ring`]: `IORING_OP_WRITE` SQEs, for filesystems or devices where the
//!   write really is asynchronous (O_DIRECT, or kernels that complete buffered writes
//!   without a worker).
//!
//! Either way a write has completed when its future resolves, so a later `sync_data`
//! covers it.
// Allowed here only (Cargo.toml denies it crate-wide): io_uring submissions hand the kernel raw buffers and descriptors.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use io_uring::{opcode, squeue, types, IoUring, Probe};
use tokio::io::unix::AsyncFd;

use super::portable::{self, FileTable, StatsCell};
use super::{DataWrites, Disk, FileId, IoFuture, IoStats};

/// Submission queue size; the completion queue is twice this. Ops beyond it wait for room.
const RING_ENTRIES: u32 = 256;

/// Largest single write SQE. The kernel caps one write at about 2 GiB anyway; keeping
/// below that makes the `u32` length conversion obviously safe.
const MAX_WRITE_CHUNK: usize = 1 << 30;

/// `user_data` of the setup probe's NOP, outside the range of slot indices.
const PROBE_USER_DATA: u64 = u64::MAX;

/// Where one in-flight operation stands.
enum OpState {
    /// Submitted; the future waits (with its waker once it has been polled).
    Waiting(Option<Waker>),
    /// The CQE arrived with this result; the future has not collected it yet.
    Done(i32),
    /// The future was dropped before completion; free the slot when the CQE arrives.
    Abandoned,
}

struct Op {
    state: OpState,
    /// Kept alive until the CQE: the kernel reads from it.
    _buffer: Option<Bytes>,
    /// Kept alive until the CQE: the SQE names the raw fd.
    _file: Arc<File>,
}

/// Slab of in-flight ops; the index is the SQE's `user_data`.
#[derive(Default)]
struct OpTable {
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    /// Ops whose CQE has not arrived yet (waiting or abandoned).
    in_flight: usize,
}

impl OpTable {
    fn insert(&mut self, op: Op) -> usize {
        self.in_flight += 1;
        match self.free.pop() {
            Some(index) => {
                self.slots[index] = Some(op);
                index
            }
            None => {
                self.slots.push(Some(op));
                self.slots.len() - 1
            }
        }
    }

    fn release(&mut self, index: usize) {
        self.slots[index] = None;
        self.free.push(index);
    }

    /// Records a CQE. Returns the waker to wake, if any.
    fn complete(&mut self, user_data: u64, result: i32) -> Option<Waker> {
        let index = usize::try_from(user_data).ok()?;
        let op = self.slots.get_mut(index)?.as_mut()?;
        match std::mem::replace(&mut op.state, OpState::Done(result)) {
            OpState::Waiting(waker) => {
                self.in_flight -= 1;
                // Nothing reads the buffer any more; let it go now rather than at collection.
                op._buffer = None;
                waker
            }
            OpState::Abandoned => {
                self.in_flight -= 1;
                self.release(index);
                None
            }
            // A second CQE for one op would be a kernel or bookkeeping bug; keep the first.
            OpState::Done(first) => {
                op.state = OpState::Done(first);
                None
            }
        }
    }

    /// Takes the result if the op finished, freeing its slot.
    fn take_result(&mut self, index: usize) -> Option<i32> {
        match self.slots[index].as_ref().map(|op| &op.state) {
            Some(OpState::Done(result)) => {
                let result = *result;
                self.release(index);
                Some(result)
            }
            _ => None,
        }
    }

    fn set_waker(&mut self, index: usize, waker: &Waker) {
        if let Some(Op {
            state: OpState::Waiting(slot),
            ..
        }) = self.slots[index].as_mut()
        {
            match slot {
                Some(existing) if existing.will_wake(waker) => {}
                _ => *slot = Some(waker.clone()),
            }
        }
    }

    /// The op's future went away: free now if finished, else when the CQE arrives.
    fn abandon(&mut self, index: usize) {
        let finished = match self.slots[index].as_mut() {
            Some(op) => match op.state {
                OpState::Done(_) => true,
                _ => {
                    op.state = OpState::Abandoned;
                    false
                }
            },
            None => false,
        };
        if finished {
            self.release(index);
        }
    }
}

/// The ring and everything that must outlive the in-flight operations.
struct Ring {
    ring: RefCell<IoUring>,
    ops: RefCell<OpTable>,
    /// Shared with the reactor's `AsyncFd`; we write to it on drop to stop the reactor.
    eventfd: Rc<OwnedFd>,
}

impl Ring {
    /// Moves every available CQE into its slot, then wakes the futures that were waiting.
    fn reap(&self) {
        let mut wakers = Vec::new();
        {
            let mut ring = self.ring.borrow_mut();
            let mut ops = self.ops.borrow_mut();
            loop {
                for cqe in ring.completion() {
                    if let Some(waker) = ops.complete(cqe.user_data(), cqe.result()) {
                        wakers.push(waker);
                    }
                }
                // More completions than the CQ holds were parked in the kernel's overflow
                // list. They reach the CQ only through io_uring_enter (which `submit` does
                // when it sees the overflow flag), and no new eventfd signal announces
                // them, so flush them here or their futures would wait forever.
                if !ring.submission().cq_overflow() || submit_tolerant(&ring).is_err() {
                    break;
                }
            }
        }
        // Wake with no borrows held, in case a waker polls inline.
        for waker in wakers {
            waker.wake();
        }
    }

    /// Submits SQEs left in the queue by an earlier `EBUSY`/`EINTR` from `io_uring_enter`.
    fn flush(&self) {
        let mut ring = self.ring.borrow_mut();
        if !ring.submission().is_empty() {
            let _ = submit_tolerant(&ring);
        }
    }

    /// Pushes `entry` for a new op and submits it.
    fn start(
        self: &Rc<Self>,
        entry: squeue::Entry,
        file: Arc<File>,
        buffer: Option<Bytes>,
    ) -> OpFuture {
        let index = self.ops.borrow_mut().insert(Op {
            state: OpState::Waiting(None),
            _buffer: buffer,
            _file: file,
        });
        let entry = entry.user_data(index as u64);
        // (whether the entry reached the SQ, the submission result)
        let submitted = loop {
            let mut ring = self.ring.borrow_mut();
            // SAFETY: the buffer and fd the entry points at are owned by slot `index`,
            // which is not freed before the entry's CQE has been reaped.
            if unsafe { ring.submission().push(&entry) }.is_ok() {
                break (true, submit_tolerant(&ring));
            }
            // Queue full: hand the queued entries to the kernel, and reap completions in
            // case the kernel is refusing more work until the CQ drains (EBUSY).
            let result = submit_tolerant(&ring);
            drop(ring);
            if let Err(error) = result {
                break (false, Err(error));
            }
            self.reap();
        };
        match submitted {
            (_, Ok(())) => OpFuture {
                ring: Rc::clone(self),
                index: Some(index),
                error: None,
            },
            (pushed, Err(error)) => {
                let mut ops = self.ops.borrow_mut();
                if pushed {
                    // The entry sits in the SQ and may still run: keep the slot until its CQE.
                    ops.abandon(index);
                } else {
                    ops.in_flight -= 1;
                    ops.release(index);
                }
                OpFuture {
                    ring: Rc::clone(self),
                    index: None,
                    error: Some(error),
                }
            }
        }
    }
}

/// `submit()`, treating the transient errors as success: the entries stay in the SQ and
/// go with the next submission (the reactor flushes after every reap).
fn submit_tolerant(ring: &IoUring) -> io::Result<()> {
    match ring.submit() {
        Ok(_) => Ok(()),
        Err(error)
            if matches!(
                error.raw_os_error(),
                Some(libc::EBUSY) | Some(libc::EAGAIN) | Some(libc::EINTR)
            ) =>
        {
            Ok(())
        }
        Err(error) => Err(error),
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The kernel may still read buffers of abandoned ops; wait for all of them.
        let ring = self.ring.get_mut();
        let ops = self.ops.get_mut();
        while ops.in_flight > 0 {
            if let Err(error) = ring.submit_and_wait(1) {
                if error.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                tracing::error!(
                    "io_uring: cannot wait for {} in-flight ops at shutdown: {error}",
                    ops.in_flight
                );
                // Leak the buffers rather than free memory the kernel may still read.
                for op in ops.slots.drain(..).flatten() {
                    std::mem::forget(op);
                }
                break;
            }
            for cqe in ring.completion() {
                ops.complete(cqe.user_data(), cqe.result());
            }
        }
        // Wake the reactor so it sees the ring is gone and exits.
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to an fd we own (shared with the reactor).
        unsafe {
            libc::write(
                self.eventfd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

/// Resolves to the raw CQE result of one operation.
struct OpFuture {
    ring: Rc<Ring>,
    /// The slot, until the result is collected.
    index: Option<usize>,
    /// A submission failure to report on first poll.
    error: Option<io::Error>,
}

impl Future for OpFuture {
    type Output = io::Result<i32>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(error) = self.error.take() {
            return Poll::Ready(Err(error));
        }
        let index = self.index.expect("OpFuture polled after completion");
        let mut result = self.ring.ops.borrow_mut().take_result(index);
        if result.is_none() {
            self.ring.reap();
            result = self.ring.ops.borrow_mut().take_result(index);
        }
        match result {
            Some(result) => {
                self.index = None;
                Poll::Ready(Ok(result))
            }
            None => {
                self.ring.ops.borrow_mut().set_waker(index, cx.waker());
                Poll::Pending
            }
        }
    }
}

impl Drop for OpFuture {
    fn drop(&mut self) {
        if let Some(index) = self.index {
            self.ring.ops.borrow_mut().abandon(index);
        }
    }
}

/// Converts a CQE result to `io::Result`: negative values are `-errno`.
fn cqe_result(result: i32) -> io::Result<u32> {
    if result < 0 {
        Err(io::Error::from_raw_os_error(-result))
    } else {
        Ok(result as u32)
    }
}

/// Lets `AsyncFd` watch a ring's eventfd while the ring's drop can still write to it (the
/// disk ring's and the network ring's).
pub(crate) struct EventFd(pub(crate) Rc<OwnedFd>);

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Waits for the eventfd, then reaps completions. Holds the ring weakly so it never keeps
/// it alive; exits once the ring is gone (the ring's drop signals the eventfd).
async fn reactor(ring: Weak<Ring>, eventfd: AsyncFd<EventFd>) {
    loop {
        let mut guard = match eventfd.readable().await {
            Ok(guard) => guard,
            Err(error) => {
                tracing::error!("io_uring reactor: eventfd wait failed: {error}");
                return;
            }
        };
        // A successful read returns the whole counter and resets it to zero, so one is
        // enough: a signal after it raises a new edge, and `clear_ready` keeps readiness
        // that arrived after the guard was taken. EAGAIN (a spurious wake) clears too.
        loop {
            let mut counter = 0u64;
            // SAFETY: reading 8 bytes into a live u64 from an fd we own.
            let read = unsafe {
                libc::read(
                    eventfd.as_raw_fd(),
                    (&mut counter as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if read >= 0 {
                guard.clear_ready();
                break;
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {
                    guard.clear_ready();
                    break;
                }
                _ => {
                    tracing::error!("io_uring reactor: eventfd read failed: {error}");
                    return;
                }
            }
        }
        let Some(ring) = ring.upgrade() else { return };
        ring.reap();
        ring.flush();
    }
}

/// Checks a ring can really be used: the opcodes `needed` (code, name) exist, and
/// `io_uring_enter` works (a seccomp filter may allow setup but block enter). Shared by the
/// disk ring and the network ring ([`crate::net::uring`]); run before anything else is
/// submitted, so its NOP's `user_data` cannot be confused with another op's.
pub(crate) fn check_ring(ring: &mut IoUring, needed: &[(u8, &str)]) -> io::Result<()> {
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|error| io::Error::new(error.kind(), format!("io_uring probe failed: {error}")))?;
    for &(code, name) in needed {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("io_uring opcode {name} is not supported by this kernel"),
            ));
        }
    }
    let nop = opcode::Nop::new().build().user_data(PROBE_USER_DATA);
    // SAFETY: a NOP references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| io::Error::other("io_uring probe: SQ full"))?;
    ring.submit_and_wait(1)
        .map_err(|error| io::Error::new(error.kind(), format!("io_uring_enter failed: {error}")))?;
    let completed = ring
        .completion()
        .any(|cqe| cqe.user_data() == PROBE_USER_DATA);
    if !completed {
        return Err(io::Error::other("io_uring probe: NOP did not complete"));
    }
    Ok(())
}

/// A fresh non-blocking eventfd, registered with `ring` so the kernel signals it on
/// completions. Shared by the disk ring and the network ring.
pub(crate) fn ring_eventfd(ring: &IoUring) -> io::Result<Rc<OwnedFd>> {
    // SAFETY: plain syscall; the result is checked before use.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if raw < 0 {
        let error = io::Error::last_os_error();
        return Err(io::Error::new(
            error.kind(),
            format!("eventfd failed: {error}"),
        ));
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let eventfd = Rc::new(unsafe { OwnedFd::from_raw_fd(raw) });
    ring.submitter().register_eventfd(raw).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("io_uring eventfd registration failed: {error}"),
        )
    })?;
    Ok(eventfd)
}

/// How [`UringDisk::write_at`](Disk::write_at) writes (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WritePath {
    /// A copy into the file's mapping on the calling thread where the file's bytes are
    /// reserved, `pwrite` elsewhere; syncs and fallocate still use the ring.
    #[default]
    Mapped,
    /// `pwrite` on the calling thread; syncs and fallocate still use the ring.
    Inline,
    /// `IORING_OP_WRITE` through the ring.
    Ring,
}

impl From<DataWrites> for WritePath {
    fn from(writes: DataWrites) -> WritePath {
        match writes {
            DataWrites::Mapped => WritePath::Mapped,
            DataWrites::Pwrite => WritePath::Inline,
        }
    }
}

/// The default backend: syncs and fallocate through io_uring, data writes on the calling
/// thread (into the file's mapping, or `pwrite`) or through the ring ([`WritePath`]).
pub struct UringDisk {
    ring: Rc<Ring>,
    files: FileTable,
    stats: Rc<StatsCell>,
    write_path: WritePath,
}

impl UringDisk {
    /// Sets up the ring and spawns its reactor task on the current `LocalSet`; data writes
    /// take the default [`WritePath::Mapped`].
    ///
    /// Must be called inside a tokio runtime with I/O enabled and inside a `LocalSet`;
    /// otherwise it returns an error (tokio reports a missing `LocalSet` by panicking, which
    /// is caught here, so its message may still be printed by the panic hook).
    pub fn new() -> io::Result<UringDisk> {
        UringDisk::with_write_path(WritePath::default())
    }

    /// [`UringDisk::new`] with data writes taking `write_path`.
    pub fn with_write_path(write_path: WritePath) -> io::Result<UringDisk> {
        let mut ring = IoUring::new(RING_ENTRIES).map_err(|error| {
            io::Error::new(error.kind(), format!("io_uring_setup failed: {error}"))
        })?;
        check_ring(
            &mut ring,
            &[
                (opcode::Write::CODE, "WRITE"),
                (opcode::Fsync::CODE, "FSYNC"),
                (opcode::Fallocate::CODE, "FALLOCATE"),
            ],
        )?;
        let eventfd = ring_eventfd(&ring)?;

        tokio::runtime::Handle::try_current().map_err(|error| {
            io::Error::other(format!(
                "the io_uring backend needs a tokio runtime: {error}"
            ))
        })?;

        let ring = Rc::new(Ring {
            ring: RefCell::new(ring),
            ops: RefCell::new(OpTable::default()),
            eventfd: Rc::clone(&eventfd),
        });
        let weak = Rc::downgrade(&ring);
        let spawned = catch_unwind(AssertUnwindSafe(move || -> io::Result<()> {
            // SAFETY: `EventFd` owns an `Rc` to the descriptor, so it stays open and the
            // same for the whole life of the `AsyncFd`.
            let watched = unsafe {
                AsyncFd::register_with_interest(EventFd(eventfd), tokio::io::Interest::READABLE)
            }?;
            tokio::task::spawn_local(reactor(weak, watched));
            Ok(())
        }));
        match spawned {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                return Err(io::Error::new(error.kind(), format!("cannot watch the io_uring eventfd: {error}")))
            }
            Err(_) => {
                return Err(io::Error::other(
                    "the io_uring backend must be created inside a tokio LocalSet on a runtime with I/O enabled",
                ))
            }
        }
        Ok(UringDisk {
            ring,
            files: FileTable::new(),
            stats: Rc::new(StatsCell::default()),
            write_path,
        })
    }

    /// The path data writes take.
    pub fn write_path(&self) -> WritePath {
        self.write_path
    }
}

impl Disk for UringDisk {
    fn backend_name(&self) -> &'static str {
        "uring"
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<FileId> {
        self.files.open(path, create)
    }
    fn close(&self, file: FileId) {
        // In-flight ops hold their own `Arc<File>`, so they finish on a still-open fd.
        self.files.close(file)
    }
    fn file_len(&self, file: FileId) -> io::Result<u64> {
        self.files.file_len(file)
    }
    fn write_at(&self, file: FileId, offset: u64, data: Bytes) -> IoFuture<()> {
        if self.write_path != WritePath::Ring {
            let mapped = self.write_path == WritePath::Mapped;
            let result = self
                .files
                .write_all_at(file, offset, &data, mapped, &self.stats);
            return Box::pin(std::future::ready(result));
        }
        let file = self.files.get(file);
        let ring = Rc::clone(&self.ring);
        let stats = Rc::clone(&self.stats);
        Box::pin(async move {
            let file = file?;
            let fd = types::Fd(file.as_raw_fd());
            let mut done = 0usize;
            while done < data.len() {
                let chunk = data.slice(done..data.len().min(done + MAX_WRITE_CHUNK));
                let entry = opcode::Write::new(fd, chunk.as_ptr(), chunk.len() as u32)
                    .offset(offset + done as u64)
                    .build();
                let result = ring.start(entry, Arc::clone(&file), Some(chunk)).await?;
                match cqe_result(result) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    // A short write: loop and resubmit the remainder.
                    Ok(written) => done += written as usize,
                    Err(error)
                        if matches!(
                            error.raw_os_error(),
                            Some(libc::EINTR) | Some(libc::EAGAIN)
                        ) => {}
                    Err(error) => return Err(error),
                }
            }
            stats.record_write(data.len());
            Ok(())
        })
    }
    fn sync_data(&self, file: FileId) -> IoFuture<()> {
        let file = self.files.get(file);
        let ring = Rc::clone(&self.ring);
        let stats = Rc::clone(&self.stats);
        Box::pin(async move {
            let file = file?;
            let entry = opcode::Fsync::new(types::Fd(file.as_raw_fd()))
                .flags(types::FsyncFlags::DATASYNC)
                .build();
            cqe_result(ring.start(entry, file, None).await?)?;
            stats.record_sync();
            Ok(())
        })
    }
    fn allocate(&self, file: FileId, len: u64) -> IoFuture<()> {
        let file = self.files.get(file);
        let ring = Rc::clone(&self.ring);
        Box::pin(async move {
            let file = file?;
            let entry = opcode::Fallocate::new(types::Fd(file.as_raw_fd()), len)
                .offset(0)
                .mode(0)
                .build();
            match cqe_result(ring.start(entry, Arc::clone(&file), None).await?) {
                Ok(_) => Ok(()),
                Err(error) if error.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    portable::extend_fallback(&file, len)
                }
                Err(error) => Err(error),
            }
        })
    }
    fn read_at(&self, file: FileId, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.files.read_at(file, offset, buf)
    }
    fn truncate(&self, file: FileId, len: u64) -> io::Result<()> {
        self.files.truncate(file, len)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        portable::remove_file(path)
    }
    fn remove_file_off_thread(&self, path: &Path) -> IoFuture<()> {
        portable::remove_file_off_thread(path)
    }
    fn space(&self, path: &Path) -> io::Result<super::DiskSpace> {
        portable::space(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        portable::create_dir_all(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        portable::list_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        portable::exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        portable::sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<super::FileLock> {
        portable::lock_file(path)
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
