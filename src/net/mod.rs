//! The network seam: what the node, the client and (next) replication need from a network,
//! with two backends.
//!
//! - [`tcp`]: the real one, tokio's sockets on the shard's reactor.
//! - [`sim`]: a seeded, in-memory network with one-way delay, retransmission delay standing
//!   for loss, reordering between connections, partitions in one or both directions and
//!   clogged paths, for tests whose bugs are ordering bugs (D1's name-server registration,
//!   D14's HA stream). Its fault model is written in its module doc.
//!
//! The seam is byte streams, as TCP is: the remoting codec ([`crate::remoting`]) runs over
//! either backend unchanged. [`Connection::send_file_range`] is the zero-copy pull path's
//! operation (D8): the real backend hands the range to the kernel, the simulator copies it.
//!
//! Invariants every backend keeps (the simulator's tests check them):
//! - bytes written on a connection arrive in order, whole or not at all (a reset loses the
//!   undelivered tail, never a byte in the middle);
//! - a connection's end of stream is seen only after every byte written before it;
//! - nothing is delivered across a partition while it lasts.

pub mod sim;
pub mod tcp;
pub mod uring;

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::io::file_body::FileRange;

/// What carries a shard's accepted connections (`network_io`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetworkIo {
    /// Readiness from epoll (tokio's reactor), a system call per read and per write.
    #[default]
    Epoll,
    /// The shard's network ring ([`uring`]); the node does not start if the kernel
    /// refuses it.
    Uring,
    /// The ring where the kernel gives one, epoll (with a warning) where it refuses.
    Auto,
}

impl NetworkIo {
    /// The value as the `network_io` key spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkIo::Epoll => "epoll",
            NetworkIo::Uring => "uring",
            NetworkIo::Auto => "auto",
        }
    }
}

impl std::str::FromStr for NetworkIo {
    type Err = UnknownNetworkIo;
    fn from_str(text: &str) -> Result<NetworkIo, UnknownNetworkIo> {
        match text {
            "epoll" => Ok(NetworkIo::Epoll),
            "uring" => Ok(NetworkIo::Uring),
            "auto" => Ok(NetworkIo::Auto),
            other => Err(UnknownNetworkIo(other.to_string())),
        }
    }
}

/// A `networkIo` value that names no backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown network I/O '{0}': expected epoll, uring or auto")]
pub struct UnknownNetworkIo(pub String);

/// A network the node can listen on and connect through. Cheap to clone: clones share it.
pub trait Transport: Clone + 'static {
    type Connection: Connection;
    type Listener: Listener<Connection = Self::Connection>;

    /// Listens on `addr` (port 0 picks a free one).
    fn bind(&self, addr: SocketAddr) -> impl Future<Output = io::Result<Self::Listener>>;

    /// Opens a connection to `addr`.
    fn connect(&self, addr: SocketAddr) -> impl Future<Output = io::Result<Self::Connection>>;
}

/// A bound listening socket.
pub trait Listener: 'static {
    type Connection: Connection;

    /// The next connection and its peer's address.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Connection, SocketAddr)>>;

    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// One established connection: a byte stream both ways.
pub trait Connection: AsyncRead + AsyncWrite + Unpin + 'static {
    /// The reading end once split.
    type ReadHalf: AsyncRead + Unpin + 'static;
    /// The writing end once split.
    type WriteHalf: WriteHalf;

    fn peer_addr(&self) -> io::Result<SocketAddr>;

    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Writes the bytes of `range` (a CommitLog file range) to the connection, all of them
    /// or an error.
    fn send_file_range(&mut self, range: &FileRange) -> impl Future<Output = io::Result<()>>;

    /// Asks for a send buffer of `bytes` (`SO_SNDBUF`); a backend without one ignores it.
    fn set_send_buffer(&self, _bytes: usize) -> io::Result<()> {
        Ok(())
    }

    /// Splits the connection into halves that can be used from different tasks.
    fn into_split(self) -> (Self::ReadHalf, Self::WriteHalf);

    /// The kernel socket as a std stream, to hand the connection to another shard's
    /// thread: `Err(self)` from a backend without one (the simulated network runs every
    /// node on one thread, so nothing is handed there); `Ok(Err(_))` when the kernel
    /// refused the conversion.
    fn into_std(self) -> Result<io::Result<std::net::TcpStream>, Self>
    where
        Self: Sized,
    {
        Err(self)
    }
}

/// The writing end of a split connection, as the node's connection writer drives it: from
/// its writer task (the `AsyncWrite` side), straight from a reply batch (`try_write`), and
/// through the kernel's zero-copy calls when the backend has a kernel socket. Object safe:
/// a connection's writer holds it as `Box<dyn WriteHalf>`, whatever the backend.
pub trait WriteHalf: AsyncWrite + Unpin + 'static {
    /// Writes what the connection takes now without waiting; `WouldBlock` when it takes
    /// nothing.
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize>;

    /// Ready when a write could take bytes (or would fail); otherwise `cx` is woken when
    /// one could. For a writer that mostly uses [`WriteHalf::try_write`].
    fn poll_write_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>>;

    /// The kernel socket under this half, for the zero-copy paths (`sendfile`, `writev`
    /// from a mapping, `MSG_MORE`, `TCP_CORK`; D8). `None` for a backend without one:
    /// file bodies are then copied.
    fn kernel_socket(&self) -> Option<&dyn KernelSocket> {
        None
    }

    /// Lets go of this half without ending the connection's writing where the backend
    /// allows it: the connection ends when its read half goes too. (A kernel socket's
    /// write half would otherwise send its FIN in the dropping call; see
    /// `server::reply_batch::WriteHalf`.)
    fn release(self: Box<Self>) {}
}

/// A connection's kernel socket, written with system calls of the caller's choosing (the
/// zero-copy paths of [`crate::server::body_send`]).
pub trait KernelSocket {
    /// The socket's descriptor, for calls on it made inside [`KernelSocket::poll_write_with`]
    /// (and for socket options).
    fn raw_fd(&self) -> std::os::fd::RawFd;

    /// Calls `write`, a non-blocking write to the socket, once the socket can take bytes
    /// and every byte this connection queued before is out; again whenever it reports
    /// `WouldBlock`, after the next writability. Returns what the first other answer is.
    fn poll_write_with(
        &self,
        cx: &mut std::task::Context<'_>,
        write: &mut dyn FnMut() -> io::Result<usize>,
    ) -> std::task::Poll<io::Result<usize>>;
}

/// [`KernelSocket::poll_write_with`] as a future.
pub async fn write_with(
    socket: &dyn KernelSocket,
    mut write: impl FnMut() -> io::Result<usize>,
) -> io::Result<usize> {
    std::future::poll_fn(|cx| socket.poll_write_with(cx, &mut write)).await
}

/// Reads `range` into memory: the copy a backend without a zero-copy path makes.
fn read_range(range: &FileRange) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let len = usize::try_from(range.len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file range of {} bytes", range.len),
        )
    })?;
    let mut bytes = vec![0; len];
    range.file.read_exact_at(&mut bytes, range.offset)?;
    Ok(bytes)
}
