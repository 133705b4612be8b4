//! The shard's network ring: one io_uring per shard thread carrying its connections'
//! receives and sends, the receive buffers it lends the kernel, and the driver task that
//! submits and reaps.
//!
//! ```text
//!   poll_read ── Recv SQE (buffer chosen by the kernel from the pool) ──┐
//!   try_write ── Send SQE (the connection's queued bytes) ──────────────┤ pushed, not entered
//!                                                                        ▼
//!   driver task: woken by a push (Notify) or a completion (eventfd) ─▶ reap CQEs, then one
//!   io_uring_enter for everything pushed since the last one
//! ```
//!
//! Entries are pushed during a turn of the shard and submitted together when the driver
//! runs, which the runtime schedules behind the tasks already woken: so a turn's replies
//! and re-armed receives leave in one system call, not one each (issue 28).
//!
//! Invariants:
//! - An entry names a descriptor only while its [`Socket`] is alive, and a socket submits
//!   the entries pushed for it before its descriptor closes ([`NetRing::submit_now`] in
//!   its drop), so the kernel never sees a closed or reused descriptor number.
//! - A send's bytes (`Bytes`) and its socket are owned by its op slot until its CQE is
//!   reaped; a receive's op holds its socket weakly (an idle connection's receive must
//!   not keep it open) and is cancelled when the socket goes.
//! - A pool buffer is lent to the kernel at most once at a time: it is returned (a
//!   `PROVIDE_BUFFERS` entry) only after its receive's CQE has been copied out.
//! - The ring outlives its ops: dropping it cancels what is still in flight and waits
//!   for those completions before the pool's memory is freed.
// Allowed here only (Cargo.toml denies it crate-wide): io_uring submissions hand the kernel raw buffers and descriptors.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::{Rc, Weak};

use bytes::Bytes;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use super::Socket;
use crate::io::uring::{check_ring, ring_eventfd, EventFd};

/// `user_data` of the entries that lend buffers to the kernel; their CQEs carry nothing.
const PROVIDE: u64 = u64::MAX;
/// `user_data` of cancellations; their CQEs carry nothing we need.
const CANCEL: u64 = u64::MAX - 1;
/// The provided-buffer group the receives choose from.
const GROUP: u16 = 7;
/// `IORING_ENTER_GETEVENTS`: the enter runs deferred completion work.
const ENTER_GETEVENTS: u32 = 1;
/// How many times dropping the ring waits for the completions of cancelled ops.
const DROP_WAITS: usize = 64;

/// The ring's limits, from the node's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetRingSettings {
    /// Submission queue entries (`network_ring_entries`); the completion queue has twice.
    pub entries: u32,
    /// Receive buffers lent to the kernel (`network_recv_buffers`).
    pub recv_buffers: u16,
    /// Bytes of each (`network_recv_buffer_bytes`): the most one receive takes.
    pub recv_buffer_bytes: u32,
    /// Bytes a connection may have queued for sending (`network_send_queue_bytes`).
    pub send_queue_bytes: usize,
}

/// What one in-flight operation holds.
enum Op {
    /// A receive of `socket`; its buffer comes from the pool when data arrives.
    Recv(Weak<Socket>),
    /// A send of `bytes` on `socket`, both kept alive until the CQE.
    Send(Rc<Socket>, Bytes),
}

/// Slots of in-flight operations; a slot's index is its entry's `user_data`.
#[derive(Default)]
struct Ops {
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
}

impl Ops {
    fn insert(&mut self, op: Op) -> usize {
        match self.free.pop() {
            Some(index) => {
                assert!(
                    self.slots[index].is_none(),
                    "network ring slot {index} reused while in flight"
                );
                self.slots[index] = Some(op);
                index
            }
            None => {
                self.slots.push(Some(op));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, index: usize) -> Option<Op> {
        let op = self.slots.get_mut(index)?.take();
        if op.is_some() {
            self.free.push(index);
        }
        op
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// The receive buffers: one region, lent to the kernel a buffer at a time.
struct Pool {
    base: *mut u8,
    count: u16,
    size: u32,
}

impl Pool {
    fn new(count: u16, size: u32) -> Pool {
        let bytes = usize::from(count) * size as usize;
        let region = vec![0u8; bytes].into_boxed_slice();
        Pool {
            base: Box::into_raw(region).cast::<u8>(),
            count,
            size,
        }
    }

    /// The first `len` bytes of buffer `id`, which the kernel has handed back.
    fn filled(&self, id: u16, len: usize) -> &[u8] {
        assert!(
            id < self.count && len <= self.size as usize,
            "buffer {id} of {} with {len} bytes of {}",
            self.count,
            self.size
        );
        // SAFETY: in bounds (asserted); the kernel is done with this buffer (its CQE was
        // reaped) and it is lent again only after this slice is gone.
        unsafe {
            std::slice::from_raw_parts(self.base.add(usize::from(id) * self.size as usize), len)
        }
    }

    /// The entry lending buffers `first..first + count` to the kernel.
    fn provide(&self, first: u16, count: u16) -> squeue::Entry {
        assert!(first < self.count, "buffer {first} of {}", self.count);
        // SAFETY: `first` is below the pool's count (asserted), so the offset is inside
        // the region.
        let at = unsafe { self.base.add(usize::from(first) * self.size as usize) };
        opcode::ProvideBuffers::new(at, self.size as i32, count, GROUP, first)
            .build()
            .user_data(PROVIDE)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let bytes = usize::from(self.count) * self.size as usize;
        // SAFETY: `base` came from `Box::into_raw` of a slice of `bytes` bytes; the ring
        // that lent it out is gone or has no op left that could write into it.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.base, bytes)) });
    }
}

/// One shard's network ring. Field order is drop order where it matters: `Drop` drains
/// the ring's ops before `pool` goes.
pub struct NetRing {
    ring: RefCell<IoUring>,
    ops: RefCell<Ops>,
    /// Buffers whose data has been copied out, to lend again with the next submit.
    returned: RefCell<Vec<u16>>,
    /// Something was pushed and not yet submitted.
    unsubmitted: Cell<bool>,
    /// Wakes the driver to submit.
    wake: Rc<Notify>,
    /// Signalled by the kernel on completions (and by our drop, to end the driver).
    eventfd: Rc<OwnedFd>,
    pub(super) settings: NetRingSettings,
    pool: Pool,
}

impl NetRing {
    /// Sets up the ring, lends it the receive buffers and spawns its driver on the current
    /// `LocalSet`. Fails with the kernel's refusal (no io_uring, a missing opcode, a
    /// seccomp filter) or outside a runtime with I/O and a `LocalSet`.
    pub fn new(settings: NetRingSettings) -> io::Result<Rc<NetRing>> {
        let context = |what: &str| {
            let what = what.to_string();
            move |error: io::Error| io::Error::new(error.kind(), format!("{what}: {error}"))
        };
        let mut ring = setup(settings.entries).map_err(context("io_uring_setup"))?;
        check_ring(
            &mut ring,
            &[
                (opcode::Recv::CODE, "RECV"),
                (opcode::Send::CODE, "SEND"),
                (opcode::ProvideBuffers::CODE, "PROVIDE_BUFFERS"),
                (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
            ],
        )?;
        let eventfd = ring_eventfd(&ring)?;
        let pool = Pool::new(settings.recv_buffers, settings.recv_buffer_bytes);
        lend_all(&mut ring, &pool)?;
        let net = Rc::new(NetRing {
            ring: RefCell::new(ring),
            ops: RefCell::new(Ops::default()),
            returned: RefCell::new(Vec::new()),
            unsubmitted: Cell::new(false),
            wake: Rc::new(Notify::new()),
            eventfd: eventfd.clone(),
            settings,
            pool,
        });
        let (weak, wake) = (Rc::downgrade(&net), net.wake.clone());
        let spawned = catch_unwind(AssertUnwindSafe(move || -> io::Result<()> {
            // SAFETY: `EventFd` holds an `Rc` of the descriptor, so it stays open and the
            // same for the whole life of the `AsyncFd`.
            let watched = unsafe {
                AsyncFd::register_with_interest(EventFd(eventfd), tokio::io::Interest::READABLE)
            }?;
            tokio::task::spawn_local(drive(weak, watched, wake));
            Ok(())
        }));
        match spawned {
            Ok(Ok(())) => Ok(net),
            Ok(Err(error)) => Err(context("watching the network ring's eventfd")(error)),
            Err(_) => Err(io::Error::other(
                "the network ring must be created inside a tokio LocalSet with I/O enabled",
            )),
        }
    }

    /// Arms a multishot receive on `socket` (one at a time per socket): it stays armed,
    /// each arrival a completion with a pool buffer, until cancelled or out of buffers.
    /// Returns its slot.
    pub(super) fn receive(&self, socket: &Rc<Socket>, fd: RawFd) -> usize {
        let slot = self
            .ops
            .borrow_mut()
            .insert(Op::Recv(Rc::downgrade(socket)));
        let entry = opcode::RecvMulti::new(types::Fd(fd), GROUP)
            .build()
            .user_data(slot as u64);
        self.push(&entry);
        slot
    }

    /// Sends `bytes` on `socket`; returns the send's slot.
    pub(super) fn send(&self, socket: Rc<Socket>, fd: RawFd, bytes: Bytes) -> usize {
        let (at, len) = (bytes.as_ptr(), bytes.len() as u32);
        assert!(
            bytes.len() <= u32::MAX as usize,
            "a send of {} bytes",
            bytes.len()
        );
        let slot = self.ops.borrow_mut().insert(Op::Send(socket, bytes));
        let entry = opcode::Send::new(types::Fd(fd), at, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(slot as u64);
        self.push(&entry);
        slot
    }

    /// Asks the kernel to cancel the op in `slot` (its CQE still comes, and frees it).
    pub(super) fn cancel(&self, slot: usize) {
        let entry = opcode::AsyncCancel::new(slot as u64)
            .build()
            .user_data(CANCEL);
        self.push(&entry);
    }

    /// Submits every entry pushed so far, now (a socket about to close its descriptor).
    pub(super) fn submit_now(&self) {
        self.lend_returned();
        if self.unsubmitted.replace(false) {
            submit(&self.ring.borrow());
        }
    }

    fn push(&self, entry: &squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        loop {
            // SAFETY: what the entry names outlives it (module invariants): a send's bytes
            // and socket are in its slot, a receive's buffer is the pool's, a descriptor
            // stays open until its socket has submitted.
            if unsafe { ring.submission().push(entry) }.is_ok() {
                break;
            }
            // The queue is full: submit what it holds to make room.
            submit(&ring);
        }
        if !self.unsubmitted.replace(true) {
            self.wake.notify_one();
        }
    }

    /// Queues the entries lending back the buffers copied out since the last submit, a
    /// run of consecutive ids per entry.
    fn lend_returned(&self) {
        let mut returned = std::mem::take(&mut *self.returned.borrow_mut());
        if returned.is_empty() {
            return;
        }
        returned.sort_unstable();
        let mut at = 0;
        while at < returned.len() {
            let first = returned[at];
            let run = returned[at..]
                .iter()
                .zip(first..)
                .take_while(|(id, want)| **id == *want)
                .count();
            self.push(&self.pool.provide(first, run as u16));
            at += run;
        }
        returned.clear();
        *self.returned.borrow_mut() = returned;
    }

    /// Submits what is queued and runs the kernel's deferred completion work, which posts
    /// the completions that work ready (`DEFER_TASKRUN` posts none until this).
    fn run_completions(&self) {
        self.unsubmitted.set(false);
        let mut ring = self.ring.borrow_mut();
        let pending = ring.submission().len() as u32;
        // SAFETY: no signal mask or argument is passed; the entries submitted are valid
        // (see `push`).
        let entered = unsafe {
            ring.submitter()
                .enter::<libc::sigset_t>(pending, 0, ENTER_GETEVENTS, None)
        };
        if let Err(error) = entered {
            if !matches!(
                error.raw_os_error(),
                Some(libc::EBUSY) | Some(libc::EINTR) | Some(libc::EAGAIN)
            ) {
                panic!("io_uring_enter on the network ring failed: {error}");
            }
        }
    }

    /// Takes every completion out of the queue and hands each to its op's socket.
    fn reap(&self) {
        let mut completions = Vec::new();
        loop {
            {
                let mut ring = self.ring.borrow_mut();
                completions.extend(
                    ring.completion()
                        .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())),
                );
                // Completions past the CQ's size wait in the kernel's overflow list and
                // reach the CQ only through io_uring_enter, with no eventfd signal.
                if !ring.submission().cq_overflow() {
                    break;
                }
                submit(&ring);
            }
        }
        for (user_data, result, flags) in completions {
            self.complete(user_data, result, flags);
        }
    }

    fn complete(&self, user_data: u64, result: i32, flags: u32) {
        match user_data {
            PROVIDE => assert!(result >= 0, "lending receive buffers failed: {result}"),
            CANCEL => {}
            slot => {
                // A multishot receive stays armed (its slot taken) while its CQEs say more.
                let more = cqueue::more(flags);
                let op = match self.ops.borrow_mut().slots.get(slot as usize) {
                    Some(Some(Op::Recv(socket))) if more => Some(Op::Recv(socket.clone())),
                    _ => None,
                };
                let op = op.or_else(|| self.ops.borrow_mut().remove(slot as usize));
                match op {
                    Some(Op::Recv(socket)) => {
                        let buffer = cqueue::buffer_select(flags);
                        let data = match (buffer, result) {
                            (Some(id), len) if len > 0 => self.pool.filled(id, len as usize),
                            (None, len) if len > 0 => {
                                panic!("a receive of {len} bytes (slot {slot}) without its buffer")
                            }
                            _ => &[],
                        };
                        if let Some(socket) = socket.upgrade() {
                            socket.received(result, data, more);
                        }
                        if let Some(id) = buffer {
                            self.returned.borrow_mut().push(id);
                        }
                    }
                    Some(Op::Send(socket, bytes)) => socket.sent(result, bytes),
                    None => panic!("a completion for network ring slot {slot}, which is free"),
                }
            }
        }
    }

    /// Lends back returned buffers and submits what is pushed.
    fn flush(&self) {
        self.lend_returned();
        if self.unsubmitted.replace(false) {
            submit(&self.ring.borrow());
        }
    }
}

impl Drop for NetRing {
    fn drop(&mut self) {
        // Wake the driver so it sees the ring gone and ends.
        let one = 1u64;
        // SAFETY: writing 8 bytes from a live u64 to our eventfd.
        let _ = unsafe {
            libc::write(
                self.eventfd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        self.wake.notify_one();
        // Every socket is gone (each holds the ring), so what is left in flight is
        // receives of closed sockets: cancel them and wait, since the kernel could still
        // write into the pool.
        let ring = self.ring.get_mut();
        let slots: Vec<usize> = self
            .ops
            .get_mut()
            .slots
            .iter()
            .enumerate()
            .filter_map(|(at, op)| op.as_ref().map(|_| at))
            .collect();
        for slot in slots {
            let entry = opcode::AsyncCancel::new(slot as u64)
                .build()
                .user_data(CANCEL);
            // SAFETY: a cancellation names no memory.
            while unsafe { ring.submission().push(&entry) }.is_err() {
                submit(ring);
            }
        }
        for _ in 0..DROP_WAITS {
            if self.ops.get_mut().in_flight() == 0 {
                return;
            }
            if ring.submit_and_wait(1).is_err() {
                break;
            }
            let done: Vec<(u64, u32)> = ring
                .completion()
                .map(|cqe| (cqe.user_data(), cqe.flags()))
                .collect();
            for (user_data, flags) in done {
                // A multishot receive is over only with its last completion.
                if user_data < CANCEL && !cqueue::more(flags) {
                    self.ops.get_mut().remove(user_data as usize);
                }
            }
        }
        let left = self.ops.get_mut().in_flight();
        if left > 0 {
            // Better a leak than the kernel writing into freed memory.
            tracing::error!(
                left,
                "network ring dropped with ops in flight; its buffers are leaked"
            );
            std::mem::forget(std::mem::replace(&mut self.pool, Pool::new(0, 0)));
        }
    }
}

/// The driver: submits what was pushed and reaps what completed, whenever either
/// happens; ends once the ring is gone.
async fn drive(ring: Weak<NetRing>, eventfd: AsyncFd<EventFd>, wake: Rc<Notify>) {
    loop {
        tokio::select! {
            ready = eventfd.readable() => match ready {
                Ok(mut guard) => {
                    // Reading resets the counter; a later signal raises a new edge.
                    let mut counter = 0u64;
                    // SAFETY: reading 8 bytes into a live u64 from an fd we own.
                    let _ = unsafe {
                        libc::read(
                            eventfd.as_raw_fd(),
                            (&mut counter as *mut u64).cast(),
                            std::mem::size_of::<u64>(),
                        )
                    };
                    guard.clear_ready();
                }
                Err(error) => {
                    tracing::error!("network ring: eventfd wait failed: {error}");
                    return;
                }
            },
            _ = wake.notified() => {}
        }
        let Some(ring) = ring.upgrade() else { return };
        ring.run_completions();
        ring.reap();
        ring.flush();
    }
}

/// A ring that does not interrupt the shard with an IPI per completion
/// (`COOP_TASKRUN`: the kernel's completion work runs at the shard's next entry into the
/// kernel, or wakes it from its wait), else a plain one.
///
/// Not `DEFER_TASKRUN`, which would batch that work into the driver's enter: the kernel
/// signals the eventfd only for completions already posted, and deferred work posts none
/// until an enter runs it, so a shard waiting in epoll would not learn of it (measured:
/// one client's round trips stalled 16 ms each, until some other wakeup).
fn setup(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries))
}

/// `io_uring_enter` for what the queue holds; a busy or interrupted enter leaves the
/// entries queued for the next one (the driver runs again on the next completion).
fn submit(ring: &IoUring) {
    match ring.submit() {
        Ok(_) => {}
        Err(error)
            if matches!(
                error.raw_os_error(),
                Some(libc::EBUSY) | Some(libc::EINTR) | Some(libc::EAGAIN)
            ) => {}
        Err(error) => panic!("io_uring_enter on the network ring failed: {error}"),
    }
}

/// Lends every buffer of `pool` to the kernel and waits for its answer.
fn lend_all(ring: &mut IoUring, pool: &Pool) -> io::Result<()> {
    let entry = pool.provide(0, pool.count);
    // SAFETY: the pool's memory lives as long as the ring that lends it (NetRing's drop).
    unsafe { ring.submission().push(&entry) }
        .map_err(|_| io::Error::other("io_uring: submission queue full"))?;
    ring.submit_and_wait(1)
        .map_err(|error| io::Error::new(error.kind(), format!("io_uring_enter: {error}")))?;
    match ring.completion().find(|cqe| cqe.user_data() == PROVIDE) {
        Some(cqe) if cqe.result() >= 0 => Ok(()),
        Some(cqe) => Err(io::Error::new(
            io::Error::from_raw_os_error(-cqe.result()).kind(),
            format!(
                "io_uring refused {} receive buffers of {} bytes: {}",
                pool.count,
                pool.size,
                io::Error::from_raw_os_error(-cqe.result())
            ),
        )),
        None => Err(io::Error::other(
            "io_uring: lending the receive buffers did not complete",
        )),
    }
}
