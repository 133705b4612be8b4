//! The real network: tokio's TCP sockets, each connection with `TCP_NODELAY` (the remoting
//! protocol is request/response; Nagle would hold small answers back).
//!
//! `send_file_range` copies the range through user space here; the node's pulls do not use
//! it: the connection writer reaches the kernel socket through
//! [`WriteHalf::kernel_socket`] and sends file bodies with `sendfile`/`writev`
//! ([`crate::server::body_send`], D8).

use std::io;
use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::{read_range, Connection, KernelSocket, Listener, Transport, WriteHalf};
use crate::io::file_body::FileRange;

/// The operating system's TCP.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tcp;

impl Transport for Tcp {
    type Connection = TcpStream;
    type Listener = TcpListener;

    async fn bind(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        TcpListener::bind(addr).await
    }

    async fn connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

impl Listener for TcpListener {
    type Connection = TcpStream;

    async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (stream, peer) = TcpListener::accept(self).await?;
        stream.set_nodelay(true)?;
        Ok((stream, peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

impl Connection for TcpStream {
    type ReadHalf = OwnedReadHalf;
    type WriteHalf = OwnedWriteHalf;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::peer_addr(self)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::local_addr(self)
    }

    async fn send_file_range(&mut self, range: &FileRange) -> io::Result<()> {
        let bytes = read_range(range)?;
        self.write_all(&bytes).await
    }

    fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
        socket2::SockRef::from(self).set_send_buffer_size(bytes)
    }

    fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        TcpStream::into_split(self)
    }

    fn into_std(self) -> Result<io::Result<std::net::TcpStream>, Self> {
        Ok(TcpStream::into_std(self))
    }
}

impl WriteHalf for OwnedWriteHalf {
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        OwnedWriteHalf::try_write(self, bytes)
    }

    fn poll_write_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        self.as_ref().poll_write_ready(cx)
    }

    fn kernel_socket(&self) -> Option<&dyn KernelSocket> {
        Some(self.as_ref())
    }

    fn release(self: Box<Self>) {
        // Closes the socket now only if the read half is already gone.
        (*self).forget();
    }
}

impl KernelSocket for TcpStream {
    fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(self)
    }

    fn poll_write_with(
        &self,
        cx: &mut std::task::Context<'_>,
        write: &mut dyn FnMut() -> io::Result<usize>,
    ) -> std::task::Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.poll_write_ready(cx))?;
            // `try_io` clears the readiness when `write` says `WouldBlock`, so the next
            // `poll_write_ready` waits for the kernel's next writability.
            match self.try_io(tokio::io::Interest::WRITABLE, &mut *write) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                answer => return std::task::Poll::Ready(answer),
            }
        }
    }
}
