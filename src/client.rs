//! The in-project remoting client: used by the integration tests and by the network load
//! generator. Shard-local like everything else: it runs inside a `LocalSet`, and its state is
//! plain `Cell`/`RefCell` behind an `Rc`.
//!
//! The per-request path is kept lean because the load generator shares the cores with the
//! node it measures: a request encodes into a per-connection buffer, usually goes out with one
//! non-blocking `try_write`, parks in a slot of a small table keyed by its opaque, and is
//! completed in place by the reader task. No per-request allocation besides the command
//! itself, no async lock, no channel, no timer.
//!
//! Invariants:
//! - Requests are multiplexed on one connection and matched to responses by `opaque`, which
//!   the client assigns (a per-client counter). A waiting request owns the slot at
//!   `opaque & mask` of the table; a response whose opaque matches no waiting slot (it timed
//!   out, was cancelled, or was never asked for) is dropped.
//! - Every `request` ends: with its response, with `TimedOut` once its deadline (set when it
//!   is registered) has passed, or with an error as soon as the connection breaks (the reader
//!   task fails every waiting request when it stops; a failed write does the same).
//!   Deadlines are enforced by one watchdog task per connection that sleeps until the
//!   earliest deadline it knows of; it is re-armed only when a request brings an earlier
//!   deadline, so steady traffic with one timeout costs no timer work per request.
//! - Frames never interleave: a frame is encoded whole into the connection's output buffer
//!   and bytes leave only from the buffer's front. A request writes directly (`try_write`)
//!   only when the buffer is empty; whatever the socket does not take at once is left for the
//!   flusher task, which owns the buffer's front until it is empty. A frame, once buffered, is
//!   written out whole even if its request is cancelled.
//! - When responses for several waiters arrived together, their next requests are left in
//!   the buffer for the flusher instead of written one by one: the flusher runs after those
//!   waiters in the same scheduler pass and sends them with one write.
//! - Dropping the last handle aborts the connection's tasks and closes the socket at once:
//!   the tasks hold only weak references, and the write half lives in the handle's state.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::net::tcp::Tcp;
use crate::net::{Connection, Transport, WriteHalf};
use crate::remoting::{
    encode_frame, take_frame, RemotingCommand, DEFAULT_MAX_FRAME_LEN, ONEWAY_FLAG,
};

/// The request builders the client's users send with; they live beside the codec.
pub use crate::remoting::requests::{
    pull_request, queue_request, send_request_v1, send_request_v2,
};

/// How long a request waits for its response unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Slots the table starts with; it doubles whenever it gets half full.
const INITIAL_SLOTS: usize = 16;
/// An output buffer grown past this (a large body went out) is given back once drained.
const KEEP_OUT_CAPACITY: usize = 256 * 1024;

enum SlotState {
    Free,
    Waiting {
        deadline: Instant,
        waker: Option<Waker>,
    },
    /// The response came; counted in `Inner::ready` until its request takes it.
    Ready(RemotingCommand),
    TimedOut,
    Failed,
}

struct Slot {
    opaque: i32,
    state: SlotState,
}

/// Waiting requests by opaque: slot `opaque & mask`. Opaques whose slot is taken are skipped
/// when assigning, so a lookup is one index and one compare.
struct Slots {
    entries: Vec<Slot>,
    in_use: usize,
}

impl Slots {
    fn new() -> Slots {
        Slots {
            entries: Self::empty(INITIAL_SLOTS),
            in_use: 0,
        }
    }

    fn empty(len: usize) -> Vec<Slot> {
        (0..len)
            .map(|_| Slot {
                opaque: 0,
                state: SlotState::Free,
            })
            .collect()
    }

    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    fn index(&self, opaque: i32) -> usize {
        opaque as u32 as usize & self.mask()
    }

    /// Doubles the table. Taken slots keep distinct indexes under the wider mask, since
    /// their opaques already differed in the narrower one.
    fn grow(&mut self) {
        let wider = Self::empty(self.entries.len() * 2);
        let old = std::mem::replace(&mut self.entries, wider);
        for slot in old {
            if !matches!(slot.state, SlotState::Free) {
                let index = self.index(slot.opaque);
                self.entries[index] = slot;
            }
        }
    }

    /// Takes a slot for a new request, advancing `next_opaque` past opaques whose slot is
    /// busy; returns the request's opaque. The slot is found again by the opaque, never kept
    /// by index: growing the table moves it.
    fn take(&mut self, next_opaque: &Cell<i32>, deadline: Instant) -> i32 {
        if (self.in_use + 1) * 2 > self.entries.len() {
            self.grow();
        }
        loop {
            let opaque = next_opaque.get();
            next_opaque.set(opaque.wrapping_add(1));
            let index = self.index(opaque);
            let slot = &mut self.entries[index];
            if matches!(slot.state, SlotState::Free) {
                slot.opaque = opaque;
                slot.state = SlotState::Waiting {
                    deadline,
                    waker: None,
                };
                self.in_use += 1;
                return opaque;
            }
        }
    }
}

struct Inner {
    /// The connection's write half, from whichever transport it was opened over.
    writer: Box<dyn WriteHalf>,
    /// Encoded frames not yet taken by the socket; bytes leave only from the front.
    out: RefCell<Vec<u8>>,
    /// The flusher task, parked until `out` has bytes for it.
    flusher: Cell<Option<Waker>>,
    /// Stream position of `out`'s first byte: bytes handed to the socket so far.
    written: Cell<u64>,
    /// Wakes `oneway` calls waiting for their frame to leave the buffer.
    drained: Notify,
    slots: RefCell<Slots>,
    /// Slots in `Ready`: responses handed over whose waiters have not run yet.
    ready: Cell<usize>,
    next_opaque: Cell<i32>,
    timeout: Cell<Duration>,
    /// The deadline the watchdog sleeps until; `None` while it has nothing to watch.
    armed: Cell<Option<Instant>>,
    watchdog: Cell<Option<Waker>>,
    closed: Cell<bool>,
    tasks: RefCell<Vec<JoinHandle<()>>>,
    peer: SocketAddr,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().drain(..) {
            task.abort();
        }
    }
}

impl Inner {
    fn wake(waker: &Cell<Option<Waker>>) {
        if let Some(waker) = waker.take() {
            waker.wake();
        }
    }

    /// Drops `count` bytes the socket took from the front of `out`.
    fn consumed(&self, out: &mut Vec<u8>, count: usize) {
        if count == out.len() {
            out.clear();
        } else {
            out.drain(..count);
        }
        self.written.set(self.written.get() + count as u64);
    }

    /// Marks the connection broken and fails every waiting request.
    fn fail_all(&self) {
        self.closed.set(true);
        self.drained.notify_waiters();
        let mut slots = self.slots.borrow_mut();
        for slot in &mut slots.entries {
            if let SlotState::Waiting { waker, .. } = &mut slot.state {
                let waker = waker.take();
                slot.state = SlotState::Failed;
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
        }
    }

    /// Hands a response to its waiting request; anything else is dropped.
    fn deliver(&self, cmd: RemotingCommand) {
        let mut slots = self.slots.borrow_mut();
        let index = slots.index(cmd.opaque);
        let slot = &mut slots.entries[index];
        if slot.opaque != cmd.opaque {
            return;
        }
        if let SlotState::Waiting { waker, .. } = &mut slot.state {
            let waker = waker.take();
            slot.state = SlotState::Ready(cmd);
            self.ready.set(self.ready.get() + 1);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    fn poll_slot(
        &self,
        opaque: i32,
        code: i32,
        timeout: Duration,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<RemotingCommand>> {
        let mut slots = self.slots.borrow_mut();
        let index = slots.index(opaque);
        let slot = &mut slots.entries[index];
        match &mut slot.state {
            SlotState::Waiting { waker, .. } => {
                match waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            SlotState::Ready(_) => {
                let SlotState::Ready(cmd) = std::mem::replace(&mut slot.state, SlotState::Free)
                else {
                    unreachable!()
                };
                self.ready.set(self.ready.get() - 1);
                Poll::Ready(Ok(cmd))
            }
            SlotState::TimedOut => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no response to request code {code} within {timeout:?}"),
            ))),
            SlotState::Failed => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the connection closed before the response came",
            ))),
            SlotState::Free => unreachable!("a request's slot is freed only by the request"),
        }
    }

    fn release(&self, opaque: i32) {
        let mut slots = self.slots.borrow_mut();
        let index = slots.index(opaque);
        let state = std::mem::replace(&mut slots.entries[index].state, SlotState::Free);
        if matches!(state, SlotState::Ready(_)) {
            self.ready.set(self.ready.get() - 1);
        }
        slots.in_use -= 1;
    }

    /// Encodes `cmd` behind whatever is buffered and sends what the socket takes now,
    /// unless the flusher should (see the module docs). Returns the stream position just
    /// past the frame: it has left the buffer once `written` reaches it.
    fn send_frame(&self, cmd: &RemotingCommand) -> io::Result<u64> {
        if self.closed.get() {
            return Err(not_connected());
        }
        let mut out = self.out.borrow_mut();
        let start = out.len();
        if let Err(error) = encode_frame(cmd, &mut out) {
            out.truncate(start);
            return Err(io::Error::new(io::ErrorKind::InvalidInput, error));
        }
        if start == 0 && self.ready.get() == 0 {
            match self.writer.try_write(&out) {
                Ok(written) => self.consumed(&mut out, written),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => {
                    out.clear();
                    drop(out);
                    self.fail_all();
                    return Err(error);
                }
            }
        }
        let end = self.written.get() + out.len() as u64;
        if !out.is_empty() {
            drop(out);
            Inner::wake(&self.flusher);
        }
        Ok(end)
    }

    /// Records a new deadline with the watchdog, waking it only if it is earlier than the
    /// one it sleeps until.
    fn watch(&self, deadline: Instant) {
        if self.armed.get().is_none_or(|armed| deadline < armed) {
            self.armed.set(Some(deadline));
            Inner::wake(&self.watchdog);
        }
    }

    /// Times out the requests whose deadline has passed; returns the earliest deadline left.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let mut earliest: Option<Instant> = None;
        let mut slots = self.slots.borrow_mut();
        for slot in &mut slots.entries {
            if let SlotState::Waiting { deadline, waker } = &mut slot.state {
                if *deadline <= now {
                    let waker = waker.take();
                    slot.state = SlotState::TimedOut;
                    if let Some(waker) = waker {
                        waker.wake();
                    }
                } else if earliest.is_none_or(|earliest| *deadline < earliest) {
                    earliest = Some(*deadline);
                }
            }
        }
        earliest
    }
}

fn not_connected() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the connection is closed")
}

/// One connection to a node. Clones share it.
#[derive(Clone)]
pub struct Client {
    inner: Rc<Inner>,
}

impl Client {
    /// Connects over TCP; must be called inside a `LocalSet`.
    pub async fn connect(addr: SocketAddr) -> io::Result<Client> {
        Client::connect_over(&Tcp, addr).await
    }

    /// Connects through `transport` (TCP, or a host of the simulated network); must be
    /// called inside a `LocalSet`.
    pub async fn connect_over<T: Transport>(transport: &T, addr: SocketAddr) -> io::Result<Client> {
        let stream = transport.connect(addr).await?;
        let (reader, writer) = stream.into_split();
        let inner = Rc::new(Inner {
            writer: Box::new(writer),
            out: RefCell::new(Vec::with_capacity(4096)),
            flusher: Cell::new(None),
            written: Cell::new(0),
            drained: Notify::new(),
            slots: RefCell::new(Slots::new()),
            ready: Cell::new(0),
            next_opaque: Cell::new(1),
            timeout: Cell::new(DEFAULT_TIMEOUT),
            armed: Cell::new(None),
            watchdog: Cell::new(None),
            closed: Cell::new(false),
            tasks: RefCell::new(Vec::new()),
            peer: addr,
        });
        let weak = Rc::downgrade(&inner);
        *inner.tasks.borrow_mut() = vec![
            tokio::task::spawn_local(read_responses(reader, weak.clone())),
            tokio::task::spawn_local(flush_frames(weak.clone())),
            tokio::task::spawn_local(watch_deadlines(weak)),
        ];
        Ok(Client { inner })
    }

    pub fn peer(&self) -> SocketAddr {
        self.inner.peer
    }

    /// Sets the per-request timeout of every handle of this client.
    pub fn set_timeout(&self, timeout: Duration) {
        self.inner.timeout.set(timeout);
    }

    /// Whether the connection is gone (the reader saw EOF or an error, or a write failed).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.get()
    }

    /// Sends `cmd` (its opaque is replaced) and waits for its response.
    pub async fn request(&self, cmd: RemotingCommand) -> io::Result<RemotingCommand> {
        self.request_with_timeout(cmd, self.inner.timeout.get())
            .await
    }

    pub async fn request_with_timeout(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> io::Result<RemotingCommand> {
        let inner = &*self.inner;
        if inner.closed.get() {
            return Err(not_connected());
        }
        let deadline = Instant::now() + timeout;
        let opaque = inner.slots.borrow_mut().take(&inner.next_opaque, deadline);
        // Whatever happens below, this request's slot must not stay taken.
        let _slot = SlotGuard(inner, opaque);
        cmd.opaque = opaque;
        cmd.flag &= !ONEWAY_FLAG;
        inner.send_frame(&cmd)?;
        inner.watch(deadline);
        let code = cmd.code;
        drop(cmd);
        poll_fn(|cx| inner.poll_slot(opaque, code, timeout, cx)).await
    }

    /// Sends `cmd` as a oneway request: no response is expected. Returns once the frame
    /// is handed to the socket, which is also what keeps a oneway sender from outrunning it.
    pub async fn oneway(&self, mut cmd: RemotingCommand) -> io::Result<()> {
        let inner = &*self.inner;
        let opaque = inner.next_opaque.get();
        inner.next_opaque.set(opaque.wrapping_add(1));
        cmd.opaque = opaque;
        cmd.flag |= ONEWAY_FLAG;
        let end = inner.send_frame(&cmd)?;
        drop(cmd);
        loop {
            let drained = inner.drained.notified();
            if inner.written.get() >= end {
                return Ok(());
            }
            if inner.closed.get() {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the connection closed before the frame was sent",
                ));
            }
            drained.await;
        }
    }

    /// SEND_MESSAGE_V2 of one message; see [`send_request_v2`].
    pub async fn send_message(
        &self,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        tags: Option<&str>,
        keys: Option<&str>,
    ) -> io::Result<RemotingCommand> {
        self.request(send_request_v2(topic, queue_id, body, tags, keys))
            .await
    }

    /// PULL_MESSAGE; see [`pull_request`]. The request timeout is stretched past the
    /// suspension so a parked pull is not given up on by the client first.
    pub async fn pull(
        &self,
        topic: &str,
        queue_id: i32,
        offset: u64,
        max: i32,
        suspend_timeout: Option<Duration>,
    ) -> io::Result<RemotingCommand> {
        let cmd = pull_request(topic, queue_id, offset, max, suspend_timeout, None);
        let timeout = self.inner.timeout.get() + suspend_timeout.unwrap_or_default();
        self.request_with_timeout(cmd, timeout).await
    }
}

struct SlotGuard<'a>(&'a Inner, i32);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.0.release(self.1);
    }
}

/// Writes out what `send_frame` left in the buffer, waiting for writability as needed.
async fn flush_frames(client: Weak<Inner>) {
    // Upgraded only inside each poll, so this task never keeps a dropped client alive.
    let dropped = poll_fn(|cx| {
        let Some(inner) = client.upgrade() else {
            return Poll::Ready(true);
        };
        loop {
            let mut out = inner.out.borrow_mut();
            if out.is_empty() {
                if out.capacity() > KEEP_OUT_CAPACITY {
                    out.shrink_to(KEEP_OUT_CAPACITY);
                }
                inner.flusher.set(Some(cx.waker().clone()));
                return Poll::Pending;
            }
            match inner.writer.try_write(&out) {
                Ok(written) => {
                    inner.consumed(&mut out, written);
                    inner.drained.notify_waiters();
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    drop(out);
                    match inner.writer.poll_write_ready(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(_)) => return Poll::Ready(false),
                    }
                }
                Err(_) => return Poll::Ready(false),
            }
        }
    })
    .await;
    if dropped {
        return;
    }
    // The write failed: the connection is broken.
    if let Some(inner) = client.upgrade() {
        inner.out.borrow_mut().clear();
        inner.fail_all();
    }
}

/// Sleeps until the earliest deadline it was told of and times out what has expired.
async fn watch_deadlines(client: Weak<Inner>) {
    let mut sleep: Option<(Instant, std::pin::Pin<Box<tokio::time::Sleep>>)> = None;
    poll_fn(|cx| {
        let Some(inner) = client.upgrade() else {
            return Poll::Ready(());
        };
        loop {
            let Some(armed) = inner.armed.get() else {
                sleep = None;
                inner.watchdog.set(Some(cx.waker().clone()));
                return Poll::Pending;
            };
            // One timer per arming, not per request.
            let timer = match &mut sleep {
                Some((at, timer)) if *at == armed => timer,
                _ => {
                    let timer = sleep.insert((armed, Box::pin(tokio::time::sleep_until(armed))));
                    &mut timer.1
                }
            };
            if timer.as_mut().poll(cx).is_pending() {
                inner.watchdog.set(Some(cx.waker().clone()));
                return Poll::Pending;
            }
            inner.armed.set(inner.expire(Instant::now()));
        }
    })
    .await
}

async fn read_responses(mut reader: impl AsyncRead + Unpin, client: Weak<Inner>) {
    let mut buffer = BytesMut::with_capacity(64 * 1024);
    'read: loop {
        {
            let Some(inner) = client.upgrade() else {
                return;
            };
            loop {
                match take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN) {
                    Ok(Some(cmd)) if cmd.is_response() => inner.deliver(cmd),
                    // Requests from the server (e.g. NOTIFY_CONSUMER_IDS_CHANGED) are not
                    // handled yet.
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(error) => {
                        let error =
                            crate::remoting::log_safe::log_safe_max(&error.to_string(), 256)
                                .to_string();
                        tracing::warn!(%error, "bad frame from the server; closing");
                        break 'read;
                    }
                }
            }
        }
        match reader.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    if let Some(inner) = client.upgrade() {
        inner.fail_all();
    }
}
