//! A TCP proxy on one link of a real-process cluster, for the failover campaign: a
//! process told to reach `target` at the proxy's address (a broker's `controllerAddr`)
//! goes through it, and the harness cuts the link, one way or both, without touching
//! either process.
//!
//! A cut stalls bytes, it does not drop them: the proxy stops reading the cut direction,
//! so what was sent waits in the kernel's buffers and arrives after the heal, as TCP's
//! retransmissions deliver it once a partition heals before the connection gives up. A
//! connection opened while the link is cut is accepted but not forwarded until the heal,
//! as a SYN that goes unanswered. Neither end sees a close it did not make: a peer that
//! closes its side is passed on (once the direction flows), so the other end learns of it
//! only as it would across the partition.
//!
//! It listens on loopback only, on a port of its own that only the harness names.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a stalled pump or a held connection looks at the link again.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// What the link passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Both directions flow.
    Open,
    /// Nothing flows; new connections wait.
    Cut,
    /// Only what the target sends flows: the client's bytes wait (its requests and
    /// heartbeats are lost to the target, answers to earlier ones still arrive).
    ClientSilenced,
    /// Only what the client sends flows: the target's answers wait.
    TargetSilenced,
}

impl Link {
    fn code(self) -> u8 {
        match self {
            Link::Open => 0,
            Link::Cut => 1,
            Link::ClientSilenced => 2,
            Link::TargetSilenced => 3,
        }
    }

    fn from_code(code: u8) -> Link {
        match code {
            0 => Link::Open,
            1 => Link::Cut,
            2 => Link::ClientSilenced,
            3 => Link::TargetSilenced,
            other => unreachable!("link code {other}"),
        }
    }

    /// Whether bytes flow from the client to the target (`upstream`) or back.
    fn flows(self, upstream: bool) -> bool {
        match self {
            Link::Open => true,
            Link::Cut => false,
            Link::ClientSilenced => !upstream,
            Link::TargetSilenced => upstream,
        }
    }
}

struct Shared {
    target: SocketAddr,
    link: AtomicU8,
    /// Set when the proxy is dropped: every thread of it ends.
    closed: AtomicBool,
    /// Connections accepted so far.
    accepted: std::sync::atomic::AtomicU32,
}

impl Shared {
    fn link(&self) -> Link {
        Link::from_code(self.link.load(Ordering::Relaxed))
    }
}

/// A proxy to one target; ends its threads and connections when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub fn start(target: SocketAddr) -> FaultProxy {
        FaultProxy::start_at(SocketAddr::from(([127, 0, 0, 1], 0)), target)
    }

    /// Listens on `listen` and forwards every connection to `target`.
    pub fn start_at(listen: SocketAddr, target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind(listen)
            .unwrap_or_else(|error| panic!("bind a proxy at {listen}: {error}"));
        let addr = listener.local_addr().expect("the proxy's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            target,
            link: AtomicU8::new(Link::Open.code()),
            closed: AtomicBool::new(false),
            accepted: std::sync::atomic::AtomicU32::new(0),
        });
        let accepting = shared.clone();
        std::thread::spawn(move || accept(listener, accepting));
        FaultProxy { addr, shared }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> u32 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    pub fn set(&self, link: Link) {
        self.shared.link.store(link.code(), Ordering::Relaxed);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
    }
}

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.closed.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                let shared = shared.clone();
                std::thread::spawn(move || forward(client, &shared));
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(LOOK_EVERY);
            }
            Err(_) => std::thread::sleep(LOOK_EVERY),
        }
    }
}

/// Holds `client` while the link is cut, then joins it to a connection to the target.
fn forward(client: TcpStream, shared: &Arc<Shared>) {
    while shared.link() == Link::Cut {
        if shared.closed.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(LOOK_EVERY);
    }
    let Ok(target) = TcpStream::connect(shared.target) else {
        // The target is down: the client sees its connection close, as a refused one.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = target.set_nodelay(true);
    let (Ok(client_reader), Ok(target_reader)) = (client.try_clone(), target.try_clone()) else {
        return;
    };
    let back = shared.clone();
    std::thread::spawn(move || pump(target_reader, client, &back, false));
    pump(client_reader, target, shared, true);
}

/// Copies `from` to `to` while the link lets the direction flow; passes an end of stream
/// on as a half close, and ends both sockets on an error or when the proxy is dropped.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, upstream: bool) {
    let _ = from.set_read_timeout(Some(LOOK_EVERY * 4));
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if shared.closed.load(Ordering::Relaxed) {
            break;
        }
        if !shared.link().flows(upstream) {
            std::thread::sleep(LOOK_EVERY);
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(read) => {
                // Read while the link was open, maybe just before the cut: bytes that
                // arrived after it wait for the heal like the rest.
                while !shared.link().flows(upstream) && !shared.closed.load(Ordering::Relaxed) {
                    std::thread::sleep(LOOK_EVERY);
                }
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let _ = std::io::copy(&mut reader, &mut stream);
                });
            }
        });
        addr
    }

    fn read_some(stream: &mut TcpStream, timeout: Duration) -> Vec<u8> {
        stream.set_read_timeout(Some(timeout)).unwrap();
        let mut buffer = [0u8; 64];
        match stream.read(&mut buffer) {
            Ok(read) => buffer[..read].to_vec(),
            Err(_) => Vec::new(),
        }
    }

    #[test]
    fn a_cut_link_stalls_bytes_and_the_heal_delivers_them() {
        let proxy = FaultProxy::start(echo_server());
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        client.write_all(b"one").unwrap();
        assert_eq!(read_some(&mut client, Duration::from_secs(5)), b"one");

        proxy.set(Link::Cut);
        client.write_all(b"two").unwrap();
        assert!(read_some(&mut client, Duration::from_millis(200)).is_empty());

        proxy.set(Link::Open);
        assert_eq!(read_some(&mut client, Duration::from_secs(5)), b"two");
    }

    #[test]
    fn a_silenced_target_hears_the_client_but_is_not_heard() {
        let proxy = FaultProxy::start(echo_server());
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        proxy.set(Link::TargetSilenced);
        client.write_all(b"ping").unwrap();
        assert!(read_some(&mut client, Duration::from_millis(200)).is_empty());
        proxy.set(Link::Open);
        assert_eq!(read_some(&mut client, Duration::from_secs(5)), b"ping");
    }

    #[test]
    fn a_connection_made_while_cut_is_held_until_the_heal() {
        let proxy = FaultProxy::start(echo_server());
        proxy.set(Link::Cut);
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        client.write_all(b"late").unwrap();
        assert!(read_some(&mut client, Duration::from_millis(200)).is_empty());
        proxy.set(Link::Open);
        assert_eq!(read_some(&mut client, Duration::from_secs(5)), b"late");
    }
}
