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

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::io::file_body::FileRange;

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
    fn peer_addr(&self) -> io::Result<SocketAddr>;

    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Writes the bytes of `range` (a CommitLog file range) to the connection, all of them
    /// or an error.
    fn send_file_range(&mut self, range: &FileRange) -> impl Future<Output = io::Result<()>>;
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
