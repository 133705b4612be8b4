//! One simulated connection: two pipes (one per direction) and the stream each end holds.
//!
//! A pipe holds the segments written and not yet read, each with the instant it may
//! arrive (drawn by [`super::paths::Paths::arrival`] when it was written, never before its
//! predecessor's). A reader takes bytes from the first segment once it has arrived and its
//! path is open (not partitioned, not clogged); otherwise it waits on a timer or, across a
//! partition, for a heal to wake it. A writer waits while the pipe holds
//! `connection_buffer_bytes` unread, as a writer to a peer that never reads does.
//!
//! Ends: `shutdown` or dropping a stream ends its outbound pipe (the peer reads the rest,
//! then end of stream); dropping a stream also makes the peer's writes fail with
//! `BrokenPipe`. A reset (see [`super::SimNet::reset`]) fails both ends' reads and writes
//! with `ConnectionReset` and loses what was undelivered, as an RST does.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::paths::PathState;
use super::NetState;

struct Segment {
    arrives: Instant,
    bytes: Vec<u8>,
    read: usize,
}

/// One direction of one connection.
pub(super) struct Pipe {
    pub(super) from: SocketAddr,
    pub(super) to: SocketAddr,
    segments: VecDeque<Segment>,
    /// Bytes written and not yet read.
    queued: usize,
    last_arrival: Instant,
    /// The writer shut down: end of stream after the segments.
    finished: bool,
    /// The reading end is gone: writes fail.
    reader_gone: bool,
    pub(super) reset: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

impl Pipe {
    pub(super) fn new(from: SocketAddr, to: SocketAddr, now: Instant) -> Pipe {
        Pipe {
            from,
            to,
            segments: VecDeque::new(),
            queued: 0,
            last_arrival: now,
            finished: false,
            reader_gone: false,
            reset: false,
            reader: None,
            writer: None,
        }
    }

    /// Wakes both ends so they look at the pipe again (a heal, a reset, a close).
    pub(super) fn wake(&mut self) {
        if let Some(waker) = self.reader.take() {
            waker.wake();
        }
        if let Some(waker) = self.writer.take() {
            waker.wake();
        }
    }

    /// Loses what was not delivered and fails both ends from now on.
    pub(super) fn reset(&mut self) {
        self.reset = true;
        self.segments.clear();
        self.queued = 0;
        self.wake();
    }
}

/// One end of a simulated connection: its two halves, which can also go their own ways
/// ([`crate::net::Connection::into_split`]).
pub struct SimConnection {
    read: SimReadHalf,
    write: SimWriteHalf,
}

/// The reading half of a [`SimConnection`]. Dropping it makes the peer's writes fail with
/// `BrokenPipe`, as writing to a socket nobody reads any more does.
pub struct SimReadHalf {
    net: Rc<RefCell<NetState>>,
    inbound: Rc<RefCell<Pipe>>,
    timer: Option<Pin<Box<Sleep>>>,
}

/// The writing half of a [`SimConnection`]. Dropping it ends its direction: the peer reads
/// what was written, then end of stream.
pub struct SimWriteHalf {
    net: Rc<RefCell<NetState>>,
    outbound: Rc<RefCell<Pipe>>,
}

impl SimConnection {
    pub(super) fn new(
        net: Rc<RefCell<NetState>>,
        inbound: Rc<RefCell<Pipe>>,
        outbound: Rc<RefCell<Pipe>>,
    ) -> SimConnection {
        SimConnection {
            read: SimReadHalf {
                net: net.clone(),
                inbound,
                timer: None,
            },
            write: SimWriteHalf { net, outbound },
        }
    }

    /// (local, peer) addresses.
    pub(super) fn addrs(&self) -> (SocketAddr, SocketAddr) {
        self.write.addrs()
    }

    pub(super) fn into_halves(self) -> (SimReadHalf, SimWriteHalf) {
        (self.read, self.write)
    }
}

impl SimWriteHalf {
    /// (local, peer) addresses.
    pub(super) fn addrs(&self) -> (SocketAddr, SocketAddr) {
        let outbound = self.outbound.borrow();
        (outbound.from, outbound.to)
    }

    /// Ready when a write would take bytes or fail; otherwise `waker` is woken when a read
    /// makes room (or a reset or close ends the pipe).
    pub(super) fn write_ready(&self, waker: &Waker) -> Poll<io::Result<()>> {
        let mut pipe = self.outbound.borrow_mut();
        let capacity = self.net.borrow().paths.config().connection_buffer_bytes;
        if pipe.reset || pipe.reader_gone || pipe.finished || pipe.queued < capacity {
            return Poll::Ready(Ok(()));
        }
        pipe.writer = Some(waker.clone());
        Poll::Pending
    }

    /// Queues what the pipe has room for now; `WouldBlock` when it has none (the writer's
    /// waker is then registered if `waker` is given).
    pub(super) fn write_now(&self, buf: &[u8], waker: Option<&Waker>) -> io::Result<usize> {
        let mut pipe = self.outbound.borrow_mut();
        if pipe.reset {
            return Err(reset_error());
        }
        if pipe.reader_gone || pipe.finished {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the peer closed the connection (simulated)",
            ));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let mut net = self.net.borrow_mut();
        let capacity = net.paths.config().connection_buffer_bytes;
        if pipe.queued >= capacity {
            if let Some(waker) = waker {
                pipe.writer = Some(waker.clone());
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(capacity - pipe.queued);
        let now = Instant::now();
        let arrives = net
            .paths
            .arrival(pipe.from.ip(), pipe.to.ip(), now, pipe.last_arrival);
        pipe.last_arrival = arrives;
        pipe.segments.push_back(Segment {
            arrives,
            bytes: buf[..n].to_vec(),
            read: 0,
        });
        pipe.queued += n;
        if let Some(waker) = pipe.reader.take() {
            waker.wake();
        }
        Ok(n)
    }
}

impl std::fmt::Debug for SimConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (local, peer) = self.addrs();
        write!(f, "SimConnection({local} -> {peer})")
    }
}

fn reset_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "connection reset (simulated)",
    )
}

impl AsyncRead for SimReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let now = Instant::now();
            let mut pipe = this.inbound.borrow_mut();
            if pipe.reset {
                return Poll::Ready(Err(reset_error()));
            }
            let Some(first) = pipe.segments.front() else {
                if pipe.finished {
                    return Poll::Ready(Ok(()));
                }
                pipe.reader = Some(cx.waker().clone());
                return Poll::Pending;
            };
            let state = this
                .net
                .borrow()
                .paths
                .state(pipe.from.ip(), pipe.to.ip(), now);
            let due = match state {
                PathState::Open => first.arrives,
                PathState::CloggedUntil(until) => first.arrives.max(until),
                PathState::Partitioned => {
                    pipe.reader = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            };
            if due > now {
                // Woken by the timer, or earlier by a reset or a close.
                pipe.reader = Some(cx.waker().clone());
                drop(pipe);
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
                timer.as_mut().reset(due);
                match timer.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => continue,
                }
            }
            let Pipe {
                segments, queued, ..
            } = &mut *pipe;
            let first = segments.front_mut().expect("a segment was there");
            let n = (first.bytes.len() - first.read).min(buf.remaining());
            buf.put_slice(&first.bytes[first.read..first.read + n]);
            first.read += n;
            if first.read == first.bytes.len() {
                segments.pop_front();
            }
            assert!(*queued >= n, "pipe queued {} < read {n}", *queued);
            *queued -= n;
            if let Some(waker) = pipe.writer.take() {
                waker.wake();
            }
            return Poll::Ready(Ok(()));
        }
    }
}

impl AsyncWrite for SimWriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.write_now(buf, Some(cx.waker())) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            done => Poll::Ready(done),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut pipe = self.outbound.borrow_mut();
        pipe.finished = true;
        pipe.wake();
        Poll::Ready(Ok(()))
    }
}

impl Drop for SimWriteHalf {
    fn drop(&mut self) {
        let mut outbound = self.outbound.borrow_mut();
        outbound.finished = true;
        outbound.wake();
    }
}

impl Drop for SimReadHalf {
    fn drop(&mut self) {
        let mut inbound = self.inbound.borrow_mut();
        inbound.reader_gone = true;
        inbound.wake();
    }
}

impl AsyncRead for SimConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().read).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().write).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().write).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().write).poll_shutdown(cx)
    }
}
