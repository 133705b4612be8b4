//! The shard's connections on io_uring (`network_io = uring`): the network seam's
//! [`Listener`] and [`Connection`] with receives and sends carried by the shard's
//! [`NetRing`] instead of a readiness wakeup and a system call each (issue 28).
//!
//! - Accepting stays a readiness wait (tokio's `AsyncFd` on the listener): it is not on
//!   the per-message path, and the accepted socket is never registered with epoll for
//!   reading.
//! - The first read arms one multishot receive, which stays armed: each arrival lands in a
//!   buffer the kernel picks from the ring's pool (so an idle connection holds no buffer),
//!   is copied into the connection's inbox, and the buffer goes back to the pool. The
//!   reader copies from the inbox. When the inbox reaches [`INBOX_RECEIVES`] buffers'
//!   worth (a reader paused by its backlog bounds, or slow), the receive is cancelled and
//!   armed again once the reader has emptied it.
//! - A write (`try_write`, `poll_write`) copies the bytes into the connection's send
//!   queue, at most `network_send_queue_bytes` of them; one send at a time carries the
//!   queue to the kernel. Bytes taken are the kernel's to deliver, as with `write(2)`.
//! - File bodies keep the zero-copy path (D8): [`KernelSocket::poll_write_with`] waits
//!   until the ring has sent everything queued, then lets the caller `sendfile`/`writev`
//!   on the socket itself, with an epoll write-readiness wait registered on first use.
//!
//! Invariants:
//! - Bytes leave in the order they were written: queued bytes go out one send at a time,
//!   a short send is resubmitted from where it stopped, and a direct write waits until
//!   the queue is empty.
//! - Memory per connection is bounded: the inbox holds at most [`INBOX_RECEIVES`]
//!   buffers' worth, plus what had already completed for it when its receive was stopped
//!   (at most the ring's pool, and never more than its socket's receive buffer held: bytes
//!   that on epoll would have waited in the kernel); the queue at most
//!   `network_send_queue_bytes`.
//! - When the last handle (stream or half) goes, the pending receive is cancelled and an
//!   in-flight send is cancelled too; what it had not sent, and what was queued behind
//!   it, is offered once to a non-blocking `send(2)`. So a peer that reads gets its last
//!   answers, as it would after `close(2)` on an epoll socket, and a peer that never
//!   reads cannot keep the connection's memory or descriptor.
//! - A socket's descriptor closes only after the entries naming it are submitted.
// Allowed here only (Cargo.toml denies it crate-wide): direct socket calls on raw descriptors.
#![allow(unsafe_code)]

mod ring;
#[cfg(test)]
mod tests;

use std::cell::{Cell, OnceCell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};

pub use ring::{NetRing, NetRingSettings};

use super::{read_range, Connection, KernelSocket, Listener, WriteHalf};
use crate::io::file_body::FileRange;

/// A listening socket whose connections are served through `ring`.
pub struct UringListener {
    listener: AsyncFd<std::net::TcpListener>,
    ring: Rc<NetRing>,
}

impl UringListener {
    /// Takes over a bound, listening socket (made non-blocking here). Needs the runtime
    /// of the shard that owns `ring`.
    pub fn from_std(
        listener: std::net::TcpListener,
        ring: Rc<NetRing>,
    ) -> io::Result<UringListener> {
        listener.set_nonblocking(true)?;
        // SAFETY: the `AsyncFd` owns the listener, so the descriptor stays open and the
        // same for as long as it is watched.
        let listener = unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }?;
        Ok(UringListener { listener, ring })
    }
}

impl Listener for UringListener {
    type Connection = UringStream;

    async fn accept(&self) -> io::Result<(UringStream, SocketAddr)> {
        let (stream, peer) = loop {
            let mut guard = self.listener.readable().await?;
            match guard.try_io(|listener| listener.get_ref().accept()) {
                Ok(accepted) => break accepted?,
                Err(_would_block) => continue,
            }
        };
        stream.set_nodelay(true)?;
        // Non-blocking for the direct writes; the ring's operations wait by themselves.
        stream.set_nonblocking(true)?;
        Ok((
            UringStream(Handle::new(Socket::new(stream, self.ring.clone()))),
            peer,
        ))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.get_ref().local_addr()
    }
}

/// How many receive buffers' worth of bytes a connection's inbox takes before its
/// receive is stopped (the reader is behind).
const INBOX_RECEIVES: usize = 4;

/// The reason a read or write failed, kept to answer every later call the same way.
type Errno = i32;

/// One connection's shared state: its socket, inbox and send queue.
pub struct Socket {
    ring: Rc<NetRing>,
    fd: RawFd,
    state: RefCell<State>,
    /// Handles (stream, halves) alive; at zero the connection is abandoned.
    handles: Cell<u32>,
    /// Write readiness for the direct writes, registered on first use. Dropped before
    /// `stream` (field order), so it never watches a closed descriptor.
    writable: OnceCell<AsyncFd<Descriptor>>,
    /// The socket itself; taken by `into_std`.
    stream: RefCell<Option<std::net::TcpStream>>,
}

#[derive(Default)]
struct State {
    /// Received and not yet read.
    inbox: BytesMut,
    /// The armed receive's slot.
    receiving: Option<usize>,
    /// Its cancellation is asked for (the inbox is full).
    stopping: bool,
    /// The stream ended (`Ok`) or failed (`Err`): nothing more arrives.
    read_end: Option<Result<(), Errno>>,
    read_waker: Option<Waker>,
    /// Taken by a write and not yet handed to a send.
    queue: BytesMut,
    /// The send in flight: its slot and length.
    sending: Option<(usize, usize)>,
    /// A send failed: every later write fails the same way.
    write_error: Option<Errno>,
    write_waker: Option<Waker>,
}

impl Socket {
    fn new(stream: std::net::TcpStream, ring: Rc<NetRing>) -> Rc<Socket> {
        Rc::new(Socket {
            ring,
            fd: stream.as_raw_fd(),
            state: RefCell::new(State::default()),
            handles: Cell::new(0),
            writable: OnceCell::new(),
            stream: RefCell::new(Some(stream)),
        })
    }

    fn poll_read(
        self: &Rc<Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut state = self.state.borrow_mut();
        if !state.inbox.is_empty() {
            let n = state.inbox.len().min(buf.remaining());
            buf.put_slice(&state.inbox[..n]);
            state.inbox.advance(n);
            return Poll::Ready(Ok(()));
        }
        match state.read_end {
            Some(Ok(())) => return Poll::Ready(Ok(())),
            Some(Err(errno)) => return Poll::Ready(Err(io::Error::from_raw_os_error(errno))),
            None => {}
        }
        state.read_waker = Some(cx.waker().clone());
        if state.receiving.is_none() {
            state.receiving = Some(self.ring.receive(self, self.fd));
        }
        Poll::Pending
    }

    /// A receive completed with `result`; `data` is what it brought; `more`: the receive
    /// stays armed.
    fn received(&self, result: i32, data: &[u8], more: bool) {
        let mut state = self.state.borrow_mut();
        match (more, state.receiving) {
            (false, _) => {
                state.receiving = None;
                state.stopping = false;
            }
            // The reader is behind (or paused): stop receiving until it has caught up, so
            // the inbox stays bounded; the kernel's socket buffer holds the rest.
            (true, Some(slot))
                if !state.stopping && state.inbox.len() + data.len() >= self.inbox_limit() =>
            {
                state.stopping = true;
                self.ring.cancel(slot);
            }
            (true, _) => {}
        }
        match result {
            1.. => state.inbox.extend_from_slice(data),
            0 => state.read_end = Some(Ok(())),
            // Nothing arrived: out of pool buffers for now, interrupted, or cancelled by
            // our own drop. The reader arms again when it is polled.
            _ if matches!(
                -result,
                libc::ENOBUFS | libc::EINTR | libc::EAGAIN | libc::ECANCELED
            ) => {}
            _ => state.read_end = Some(Err(-result)),
        }
        if let Some(waker) = state.read_waker.take() {
            drop(state);
            waker.wake();
        }
    }

    /// Bytes the inbox may hold before the receive is stopped: a few receives' worth.
    fn inbox_limit(&self) -> usize {
        INBOX_RECEIVES * self.ring.settings.recv_buffer_bytes as usize
    }

    fn try_write(self: &Rc<Self>, bytes: &[u8]) -> io::Result<usize> {
        let mut state = self.state.borrow_mut();
        if let Some(errno) = state.write_error {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let queued = state.queue.len() + state.sending.map_or(0, |(_, len)| len);
        let room = self.ring.settings.send_queue_bytes.saturating_sub(queued);
        if room == 0 && !bytes.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let taken = bytes.len().min(room);
        state.queue.extend_from_slice(&bytes[..taken]);
        if state.sending.is_none() && !state.queue.is_empty() {
            self.send_queue(&mut state);
        }
        Ok(taken)
    }

    /// Hands the queue to a send.
    fn send_queue(self: &Rc<Self>, state: &mut State) {
        let bytes = state.queue.split().freeze();
        let len = bytes.len();
        let slot = self.ring.send(self.clone(), self.fd, bytes);
        state.sending = Some((slot, len));
    }

    /// A send of `bytes` completed with `result`.
    fn sent(self: Rc<Self>, result: i32, bytes: Bytes) {
        let mut state = self.state.borrow_mut();
        state.sending = None;
        let abandoned = self.handles.get() == 0;
        let done = usize::try_from(result).unwrap_or(0);
        assert!(
            done <= bytes.len(),
            "a send of {} bytes took {result}",
            bytes.len()
        );
        if abandoned {
            // Cancelled (or done) after the last handle went: offer the rest once.
            let mut rest = BytesMut::from(&bytes[done..]);
            rest.extend_from_slice(&state.queue);
            state.queue.clear();
            if !rest.is_empty() && (result >= 0 || -result == libc::ECANCELED) {
                // SAFETY: a live slice; our open socket.
                let _ = unsafe {
                    libc::send(
                        self.fd,
                        rest.as_ptr().cast(),
                        rest.len(),
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
            }
            return;
        }
        // A cancelled send sent nothing (one already under way cannot be cancelled); a
        // cancel can reach a send it was not meant for when the slot it named was reused
        // before it was submitted, so it is resent like an interrupted one.
        let retry = matches!(-result, libc::EINTR | libc::EAGAIN | libc::ECANCELED);
        if result < 0 && !retry {
            state.write_error = Some(-result);
            state.queue.clear();
        } else if done < bytes.len() {
            let slot = self.ring.send(self.clone(), self.fd, bytes.slice(done..));
            state.sending = Some((slot, bytes.len() - done));
        } else if !state.queue.is_empty() {
            self.send_queue(&mut state);
        }
        if let Some(waker) = state.write_waker.take() {
            drop(state);
            waker.wake();
        }
    }

    /// Ready when a write could take bytes (or fails).
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.state.borrow_mut();
        if let Some(errno) = state.write_error {
            return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
        }
        let queued = state.queue.len() + state.sending.map_or(0, |(_, len)| len);
        if queued < self.ring.settings.send_queue_bytes {
            return Poll::Ready(Ok(()));
        }
        state.write_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_write(self: &Rc<Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        match self.try_write(bytes) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                self.state.borrow_mut().write_waker = Some(cx.waker().clone());
                Poll::Pending
            }
            answer => Poll::Ready(answer),
        }
    }

    /// Ready once every queued byte has been sent (or a send failed).
    fn poll_drained(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.state.borrow_mut();
        if let Some(errno) = state.write_error {
            return Poll::Ready(Err(io::Error::from_raw_os_error(errno)));
        }
        if state.sending.is_none() && state.queue.is_empty() {
            return Poll::Ready(Ok(()));
        }
        state.write_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_shutdown(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drained(cx))?;
        // SAFETY: shutdown of our open socket.
        if unsafe { libc::shutdown(self.fd, libc::SHUT_WR) } < 0 {
            return Poll::Ready(Err(io::Error::last_os_error()));
        }
        Poll::Ready(Ok(()))
    }

    /// The last handle went: nothing will read or write, so cancel what waits.
    fn abandon(&self) {
        let state = self.state.borrow();
        if let Some(slot) = state.receiving {
            self.ring.cancel(slot);
        }
        if let Some((slot, _)) = state.sending {
            self.ring.cancel(slot);
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // The receive's op holds the socket weakly: cancel it, and let the kernel see
        // every entry naming this descriptor before it closes.
        if let Some(slot) = self.state.get_mut().receiving {
            self.ring.cancel(slot);
        }
        self.ring.submit_now();
    }
}

impl KernelSocket for Socket {
    fn raw_fd(&self) -> RawFd {
        self.fd
    }

    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        write: &mut dyn FnMut() -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_drained(cx))?;
        let writable = match self.writable.get() {
            Some(writable) => writable,
            None => {
                // SAFETY: the socket's stream owns the descriptor and is dropped after
                // `writable` (field order), so it stays open while it is watched.
                let watched = unsafe {
                    AsyncFd::register_with_interest(Descriptor(self.fd), Interest::WRITABLE)
                }?;
                self.writable.get_or_init(|| watched)
            }
        };
        loop {
            let mut guard = ready!(writable.poll_write_ready(cx))?;
            match guard.try_io(|_| write()) {
                Ok(answer) => return Poll::Ready(answer),
                Err(_would_block) => continue,
            }
        }
    }
}

/// A descriptor `AsyncFd` watches without owning it (the socket's stream owns it).
struct Descriptor(RawFd);

impl AsRawFd for Descriptor {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// One handle on a socket; the last one to go abandons it.
struct Handle(Rc<Socket>);

impl Handle {
    fn new(socket: Rc<Socket>) -> Handle {
        socket.handles.set(socket.handles.get() + 1);
        Handle(socket)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let left = self.0.handles.get() - 1;
        self.0.handles.set(left);
        if left == 0 {
            self.0.abandon();
        }
    }
}

/// An accepted connection served through the ring.
pub struct UringStream(Handle);

/// Its reading end.
pub struct UringReadHalf(Handle);

/// Its writing end.
pub struct UringWriteHalf(Handle);

impl AsyncRead for UringStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0 .0.poll_read(cx, buf)
    }
}

impl AsyncRead for UringReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0 .0.poll_read(cx, buf)
    }
}

/// `AsyncWrite` for a type whose `.0 .0` is its socket.
macro_rules! write_through_ring {
    ($type:ty) => {
        impl AsyncWrite for $type {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bytes: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.0 .0.poll_write(cx, bytes)
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.0 .0.poll_drained(cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.0 .0.poll_shutdown(cx)
            }
        }
    };
}

write_through_ring!(UringStream);
write_through_ring!(UringWriteHalf);

impl Connection for UringStream {
    type ReadHalf = UringReadHalf;
    type WriteHalf = UringWriteHalf;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.with_stream(std::net::TcpStream::peer_addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.with_stream(std::net::TcpStream::local_addr)
    }

    async fn send_file_range(&mut self, range: &FileRange) -> io::Result<()> {
        let bytes = read_range(range)?;
        self.write_all(&bytes).await
    }

    fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
        self.with_stream(|stream| socket2::SockRef::from(stream).set_send_buffer_size(bytes))
    }

    fn into_split(self) -> (UringReadHalf, UringWriteHalf) {
        let socket = self.0 .0.clone();
        (
            UringReadHalf(Handle::new(socket.clone())),
            UringWriteHalf(Handle::new(socket)),
        )
    }

    fn into_std(self) -> Result<io::Result<std::net::TcpStream>, Self> {
        let socket = &self.0 .0;
        let state = socket.state.borrow();
        let untouched = state.receiving.is_none()
            && state.sending.is_none()
            && state.inbox.is_empty()
            && state.queue.is_empty()
            && socket.writable.get().is_none();
        drop(state);
        if !untouched {
            return Ok(Err(io::Error::other(
                "a connection with I/O on the network ring cannot move to another thread",
            )));
        }
        let stream = socket.stream.borrow_mut().take();
        Ok(stream.ok_or_else(|| io::Error::other("the connection's socket was already taken")))
    }
}

impl UringStream {
    fn with_stream<T>(
        &self,
        call: impl FnOnce(&std::net::TcpStream) -> io::Result<T>,
    ) -> io::Result<T> {
        match &*self.0 .0.stream.borrow() {
            Some(stream) => call(stream),
            None => Err(io::Error::other("the connection's socket was taken")),
        }
    }
}

impl WriteHalf for UringWriteHalf {
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        self.0 .0.try_write(bytes)
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0 .0.poll_write_ready(cx)
    }

    fn kernel_socket(&self) -> Option<&dyn KernelSocket> {
        Some(&*self.0 .0)
    }
}
