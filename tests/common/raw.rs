//! A blocking remoting connection for tests that must see what the node sends on its own:
//! the requests it pushes to clients (NOTIFY_CONSUMER_IDS_CHANGED,
//! RESET_CONSUMER_CLIENT_OFFSET) arrive between the responses.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq::remoting::frame::{encode_frame, take_frame, DEFAULT_MAX_FRAME_LEN};
use ringmq::remoting::RemotingCommand;

/// One connection, its unread bytes and its last opaque.
pub struct Raw {
    socket: TcpStream,
    buffer: BytesMut,
    opaque: i32,
}

impl Raw {
    pub fn connect(addr: std::net::SocketAddr) -> Raw {
        let socket = TcpStream::connect(addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Raw {
            socket,
            buffer: BytesMut::new(),
            opaque: 0,
        }
    }

    pub fn send(&mut self, mut command: RemotingCommand) -> i32 {
        self.opaque += 1;
        command.opaque = self.opaque;
        let mut out = Vec::new();
        encode_frame(&command, &mut out).unwrap();
        self.socket.write_all(&out).unwrap();
        self.opaque
    }

    /// Writes `command` as it is, opaque included: a client's answer to a request the node
    /// sent it.
    pub fn reply(&mut self, command: RemotingCommand) {
        let mut out = Vec::new();
        encode_frame(&command, &mut out).unwrap();
        self.socket.write_all(&out).unwrap();
    }

    /// The next frame matching `wanted`, waiting at most `limit`.
    pub fn next(
        &mut self,
        limit: Duration,
        wanted: impl Fn(&RemotingCommand) -> bool,
    ) -> RemotingCommand {
        let deadline = Instant::now() + limit;
        loop {
            while let Some(frame) = take_frame(&mut self.buffer, DEFAULT_MAX_FRAME_LEN).unwrap() {
                if wanted(&frame) {
                    return frame;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no wanted frame within {limit:?}"
            );
            let mut chunk = [0u8; 4096];
            match self.socket.read(&mut chunk) {
                Ok(0) => panic!("the node closed the connection"),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(error) => panic!("read failed: {error}"),
            }
        }
    }

    /// The next frame, or `None` when none came within `limit` or the connection closed.
    pub fn poll(&mut self, limit: Duration) -> Option<RemotingCommand> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(frame) = take_frame(&mut self.buffer, DEFAULT_MAX_FRAME_LEN).ok()? {
                return Some(frame);
            }
            if Instant::now() >= deadline {
                return None;
            }
            let mut chunk = [0u8; 4096];
            match self.socket.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return None,
            }
        }
    }

    /// The response to `command`, or `None` when the connection fails or closes first (the
    /// node was killed) or nothing came within 10 s.
    pub fn try_call(&mut self, mut command: RemotingCommand) -> Option<RemotingCommand> {
        self.opaque += 1;
        command.opaque = self.opaque;
        let mut out = Vec::new();
        encode_frame(&command, &mut out).ok()?;
        self.socket.write_all(&out).ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let frame = self.poll(deadline.saturating_duration_since(Instant::now()))?;
            if frame.is_response() && frame.opaque == self.opaque {
                return Some(frame);
            }
        }
    }

    pub fn call(&mut self, command: RemotingCommand) -> RemotingCommand {
        let opaque = self.send(command);
        self.next(Duration::from_secs(10), |f| {
            f.is_response() && f.opaque == opaque
        })
    }
}
