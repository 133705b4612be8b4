//! The simulated network: in memory, seeded, fault-injecting; the network's counterpart of
//! the simulated disk ([`crate::io::sim`]).
//!
//! # Fault model
//!
//! **Hosts and paths.** A host is an IP address; a [`SimTransport`] is one host's view
//! (`SimNet::host`), binding and connecting from that address. Between two hosts run two
//! one-way paths. Everything that goes wrong goes wrong on a path.
//!
//! **Connections are TCP-like byte streams.** Every write becomes a segment with an arrival
//! instant drawn when it is written ([`NetConfig`]): a uniform one-way delay, plus
//! `retransmit_delay` with `loss_percent` chance (TCP turns a lost packet into a late one),
//! never earlier than the previous segment of the same connection. So within a connection
//! bytes arrive in order, once; between connections, even between the same two hosts, they
//! may arrive in any order. A direction holds at most `connection_buffer_bytes` unread,
//! then its writer waits (a peer that never reads). A listener holds `accept_backlog`
//! unaccepted connections, then refuses.
//!
//! **Partitions** ([`SimNet::partition`], one way or both) hold every segment on the cut
//! paths, including those already in flight, until [`SimNet::heal`]: nothing crosses while
//! it lasts and nothing is lost, as with TCP over a link that comes back before the
//! connection times out. A connect across a partition waits for the heal (callers bound it
//! with their own timeout, as real connects are). [`SimNet::reset`] is the other outcome:
//! the connections between two hosts fail with `ConnectionReset` at both ends and lose what
//! was undelivered, as when a timeout or an RST ends them.
//!
//! **Clogs** hold a path's segments until an instant, then let them through: by hand
//! ([`SimNet::clog`]) or at random, each segment written clogging its path with
//! `clog_percent` chance for up to twice `clog_mean`.
//!
//! **Determinism.** Every draw comes from one splitmix64 generator seeded by
//! [`NetConfig::seed`], drawn in call order: one handshake delay per connect, then per write
//! a delay, a loss and a clog draw. Time is tokio's clock, so under a paused single-thread
//! runtime the same seed and the same program give the same history. The network is
//! single-threaded (`Rc`): a simulation runs every node it connects on one thread.

mod paths;
mod pipe;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

pub use paths::{BadNetConfig, Direction, NetConfig, PathState};
pub use pipe::{SimConnection, SimReadHalf, SimWriteHalf};

use super::{read_range, Connection, Listener, Transport, WriteHalf};
use crate::io::file_body::FileRange;
use paths::Paths;
use pipe::Pipe;

/// Ports handed to connecting ends, as the kernel's ephemeral range.
const FIRST_EPHEMERAL_PORT: u16 = 32768;

struct AcceptQueue {
    waiting: VecDeque<(SimConnection, SocketAddr)>,
    acceptor: Option<Waker>,
}

pub(crate) struct NetState {
    paths: Paths,
    listeners: HashMap<SocketAddr, Rc<RefCell<AcceptQueue>>>,
    /// Every pipe not yet dropped, to wake on a heal and to reset.
    pipes: Vec<Weak<RefCell<Pipe>>>,
    next_port: HashMap<IpAddr, u16>,
    /// Connects waiting out a partition.
    heal_waiters: Vec<Waker>,
}

impl NetState {
    fn free_port(&mut self, ip: IpAddr) -> io::Result<u16> {
        let next = self.next_port.entry(ip).or_insert(FIRST_EPHEMERAL_PORT);
        for _ in 0..=u16::MAX {
            let port = *next;
            *next = next.checked_add(1).unwrap_or(FIRST_EPHEMERAL_PORT);
            if !self.listeners.contains_key(&SocketAddr::new(ip, port)) {
                return Ok(port);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("no free port on {ip}"),
        ))
    }

    fn live_pipes(&mut self) -> Vec<Rc<RefCell<Pipe>>> {
        self.pipes.retain(|pipe| pipe.strong_count() > 0);
        self.pipes.iter().filter_map(Weak::upgrade).collect()
    }
}

/// The simulated network every [`SimTransport`] of a test shares. Clones share it.
#[derive(Clone)]
pub struct SimNet {
    state: Rc<RefCell<NetState>>,
}

impl SimNet {
    pub fn new(config: NetConfig) -> Result<SimNet, BadNetConfig> {
        config.validate()?;
        Ok(SimNet {
            state: Rc::new(RefCell::new(NetState {
                paths: Paths::new(config),
                listeners: HashMap::new(),
                pipes: Vec::new(),
                next_port: HashMap::new(),
                heal_waiters: Vec::new(),
            })),
        })
    }

    /// Host `ip`'s view of the network.
    pub fn host(&self, ip: IpAddr) -> SimTransport {
        assert!(
            !ip.is_unspecified(),
            "a simulated host needs an address, not {ip}"
        );
        SimTransport {
            net: self.clone(),
            ip,
        }
    }

    /// Holds what `a` sends `b` (and, for [`Direction::Both`], what `b` sends `a`).
    pub fn partition(&self, a: IpAddr, b: IpAddr, direction: Direction) {
        self.state.borrow_mut().paths.partition(a, b, direction);
    }

    /// Ends the partitions between `a` and `b`; what they held flows on.
    pub fn heal(&self, a: IpAddr, b: IpAddr) {
        self.state.borrow_mut().paths.heal(a, b);
        self.wake_all();
    }

    pub fn heal_all(&self) {
        self.state.borrow_mut().paths.heal_all();
        self.wake_all();
    }

    /// Holds what `from` sends `to` for `duration` from now.
    pub fn clog(&self, from: IpAddr, to: IpAddr, duration: Duration) {
        let until = Instant::now() + duration;
        self.state.borrow_mut().paths.clog(from, to, until);
        self.wake_all();
    }

    /// Resets every connection between `a` and `b`; how many connections it ended.
    pub fn reset(&self, a: IpAddr, b: IpAddr) -> usize {
        let pipes = self.state.borrow_mut().live_pipes();
        let mut ended = 0;
        for pipe in pipes {
            let mut pipe = pipe.borrow_mut();
            let (from, to) = (pipe.from.ip(), pipe.to.ip());
            if ((from, to) == (a, b) || (from, to) == (b, a)) && !pipe.reset {
                pipe.reset();
                ended += 1;
            }
        }
        // Two pipes per connection.
        ended / 2
    }

    /// What the path from `from` to `to` does now.
    pub fn path_state(&self, from: IpAddr, to: IpAddr) -> PathState {
        self.state.borrow().paths.state(from, to, Instant::now())
    }

    fn wake_all(&self) {
        let (pipes, waiters) = {
            let mut state = self.state.borrow_mut();
            let waiters = std::mem::take(&mut state.heal_waiters);
            (state.live_pipes(), waiters)
        };
        for pipe in pipes {
            pipe.borrow_mut().wake();
        }
        for waker in waiters {
            waker.wake();
        }
    }

    /// Waits until neither path between `a` and `b` is partitioned.
    async fn wait_out_partition(&self, a: IpAddr, b: IpAddr) {
        std::future::poll_fn(|cx| {
            let mut state = self.state.borrow_mut();
            let now = Instant::now();
            let cut = state.paths.state(a, b, now) == PathState::Partitioned
                || state.paths.state(b, a, now) == PathState::Partitioned;
            if cut {
                state.heal_waiters.push(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    }

    async fn connect(&self, from: IpAddr, to: SocketAddr) -> io::Result<SimConnection> {
        let delay = self.state.borrow_mut().paths.handshake_delay();
        tokio::time::sleep(delay).await;
        self.wait_out_partition(from, to.ip()).await;
        let mut state = self.state.borrow_mut();
        let refused = || {
            io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("connection to {to} refused (simulated)"),
            )
        };
        let queue = state.listeners.get(&to).cloned().ok_or_else(refused)?;
        if queue.borrow().waiting.len() >= state.paths.config().accept_backlog {
            return Err(refused());
        }
        let local = SocketAddr::new(from, state.free_port(from)?);
        let now = Instant::now();
        let up = Rc::new(RefCell::new(Pipe::new(local, to, now)));
        let down = Rc::new(RefCell::new(Pipe::new(to, local, now)));
        state.pipes.push(Rc::downgrade(&up));
        state.pipes.push(Rc::downgrade(&down));
        drop(state);
        let client = SimConnection::new(self.state.clone(), down.clone(), up.clone());
        let server = SimConnection::new(self.state.clone(), up, down);
        let mut queue = queue.borrow_mut();
        queue.waiting.push_back((server, local));
        if let Some(waker) = queue.acceptor.take() {
            waker.wake();
        }
        Ok(client)
    }

    fn bind(&self, host: IpAddr, addr: SocketAddr) -> io::Result<SimListener> {
        let ip = if addr.ip().is_unspecified() {
            host
        } else {
            addr.ip()
        };
        if ip != host {
            return Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("host {host} cannot bind {addr} (simulated)"),
            ));
        }
        let mut state = self.state.borrow_mut();
        let port = match addr.port() {
            0 => state.free_port(ip)?,
            port => port,
        };
        let local = SocketAddr::new(ip, port);
        if state.listeners.contains_key(&local) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{local}: Address already in use (simulated)"),
            ));
        }
        let queue = Rc::new(RefCell::new(AcceptQueue {
            waiting: VecDeque::new(),
            acceptor: None,
        }));
        state.listeners.insert(local, queue.clone());
        Ok(SimListener {
            net: self.clone(),
            local,
            queue,
        })
    }
}

/// One host's view of a [`SimNet`].
#[derive(Clone)]
pub struct SimTransport {
    net: SimNet,
    ip: IpAddr,
}

impl SimTransport {
    pub fn ip(&self) -> IpAddr {
        self.ip
    }
}

impl Transport for SimTransport {
    type Connection = SimConnection;
    type Listener = SimListener;

    async fn bind(&self, addr: SocketAddr) -> io::Result<SimListener> {
        self.net.bind(self.ip, addr)
    }

    async fn connect(&self, addr: SocketAddr) -> io::Result<SimConnection> {
        self.net.connect(self.ip, addr).await
    }
}

/// A simulated listening socket; dropping it frees the port.
pub struct SimListener {
    net: SimNet,
    local: SocketAddr,
    queue: Rc<RefCell<AcceptQueue>>,
}

impl Listener for SimListener {
    type Connection = SimConnection;

    async fn accept(&self) -> io::Result<(SimConnection, SocketAddr)> {
        std::future::poll_fn(|cx| {
            let mut queue = self.queue.borrow_mut();
            match queue.waiting.pop_front() {
                Some(accepted) => Poll::Ready(Ok(accepted)),
                None => {
                    queue.acceptor = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimListener({})", self.local)
    }
}

impl Drop for SimListener {
    fn drop(&mut self) {
        self.net.state.borrow_mut().listeners.remove(&self.local);
    }
}

impl Connection for SimConnection {
    type ReadHalf = SimReadHalf;
    type WriteHalf = SimWriteHalf;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addrs().1)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addrs().0)
    }

    async fn send_file_range(&mut self, range: &FileRange) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let bytes = read_range(range)?;
        self.write_all(&bytes).await
    }

    fn into_split(self) -> (SimReadHalf, SimWriteHalf) {
        self.into_halves()
    }
}

impl WriteHalf for SimWriteHalf {
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        self.write_now(bytes, None)
    }

    fn poll_write_ready(&self, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        self.write_ready(cx.waker())
    }
}
