//! The real network: tokio's TCP sockets, each connection with `TCP_NODELAY` (the remoting
//! protocol is request/response; Nagle would hold small answers back).
//!
//! `send_file_range` copies the range through user space here; the connection writer's
//! `sendfile`/`writev` path ([`crate::remoting::body_send`]) stays the production route for
//! pull bodies until the connection code goes through this seam.

use std::io;
use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::{read_range, Connection, Listener, Transport};
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
}
