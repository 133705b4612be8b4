//! The floor under a one-producer sync-send benchmark on this machine: a bare TCP
//! ping-pong over loopback with the same runtime the node uses (tokio current-thread, one
//! thread each side), frames the size of a 1 KiB send and its response, and no work at all
//! between read and write.
//!
//! Whatever the node and the load generator do per message comes on top of this round
//! trip, so it bounds what one producer can reach: `1 / rtt` messages per second.
//!
//! With more connections, and with the server on a bare io_uring loop instead of tokio's
//! epoll reactor, it also bounds what a network path on io_uring could save the node
//! (issue 28): the server's CPU per round trip is all network work, read, readiness and
//! write, and nothing else.
//!
//! ```text
//! cargo run --release --example loopback_pingpong -- [SECONDS] [SERVER_CPUS] [CLIENT_CPUS] \
//!     [REQUEST_BYTES] [RESPONSE_BYTES] [CONNECTIONS] [SERVER_IO]
//! ```
//! Each side is pinned with `sched_setaffinity` to a CPU list like taskset's (`1`, `1,3`,
//! `2-5`), or left unpinned with `-`. `CONNECTIONS` (default 1) each keep one request in
//! flight, all from the client's one thread. `SERVER_IO` is `epoll` (default: tokio, as the
//! node) or `uring`: one thread submitting a `recv` per connection and a `send` per
//! request, all of a turn's in one `io_uring_enter`, which also waits for the next
//! completion (`DEFER_TASKRUN`, `SINGLE_ISSUER`, as the kernel advises for one thread);
//! or `uring-multishot`: the same with one multishot `recv` per connection, armed once,
//! into buffers provided to the kernel (and handed back to it once read).
//! Prints one JSON line: round trips per second and each side's CPU (user and system, from
//! `getrusage(RUSAGE_THREAD)`) per round trip in microseconds.
// Allowed here only (Cargo.toml denies it crate-wide): getrusage and sched_setaffinity are libc calls.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A thread's (user, system) CPU time so far.
fn thread_cpu() -> (Duration, Duration) {
    // SAFETY: rusage is plain integers, for which all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call to fill.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    (time(usage.ru_utime), time(usage.ru_stime))
}

/// The CPUs of a taskset-style list (`1`, `1,3`, `2-5`); `-` is none (unpinned).
fn cpu_list(spec: &str) -> Vec<usize> {
    if spec == "-" {
        return Vec::new();
    }
    let number = |text: &str| {
        text.parse::<usize>()
            .unwrap_or_else(|_| panic!("{spec}: expected a CPU list like 1,3 or 2-5, or -"))
    };
    spec.split(',')
        .flat_map(|item| match item.split_once('-') {
            Some((first, last)) => (number(first)..=number(last)).collect::<Vec<_>>(),
            None => vec![number(item)],
        })
        .collect()
}

fn pin(cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "pinning to CPUs {cpus:?} failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let seconds: f64 = arg(0, "5").parse().expect("SECONDS is a number");
    let (server_cpus, client_cpus) = (cpu_list(&arg(1, "0")), cpu_list(&arg(2, "1")));
    let request_bytes: usize = arg(3, "1328").parse().expect("REQUEST_BYTES");
    let response_bytes: usize = arg(4, "292").parse().expect("RESPONSE_BYTES");
    let connections: usize = arg(5, "1").parse().expect("CONNECTIONS");
    let server_io = arg(6, "epoll");
    assert!(connections > 0, "CONNECTIONS must be at least 1");
    let frames = Frames {
        request_bytes,
        response_bytes,
        connections,
    };

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local address");

    let server = std::thread::spawn(move || {
        pin(&server_cpus);
        match server_io.as_str() {
            "epoll" => epoll_server(listener, frames),
            "uring" => uring::serve(listener, frames, false),
            "uring-multishot" => uring::serve(listener, frames, true),
            other => panic!("SERVER_IO is epoll, uring or uring-multishot, not {other}"),
        }
    });

    pin(&client_cpus);
    let (round_trips, elapsed, client_user, client_system) =
        runtime().block_on(client(addr, frames, seconds));
    let (served, server_user, server_system) = server.join().expect("the server thread");
    let per = |d: Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
    println!(
        "{{\"round_trips_per_sec\":{:.0},\"rtt_us\":{:.1},\"server_user_us\":{:.1},\"server_sys_us\":{:.1},\"client_user_us\":{:.1},\"client_sys_us\":{:.1},\"request_bytes\":{request_bytes},\"response_bytes\":{response_bytes},\"connections\":{connections},\"server_io\":\"{}\"}}",
        round_trips as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 * connections as f64 / round_trips.max(1) as f64,
        per(server_user, served),
        per(server_system, served),
        per(client_user, round_trips),
        per(client_system, round_trips),
        arg(6, "epoll"),
    );
}

/// The shape of the exchange: fixed-size requests and responses on each connection.
#[derive(Clone, Copy)]
struct Frames {
    request_bytes: usize,
    response_bytes: usize,
    connections: usize,
}

/// What a server side reports: requests served, and its thread's user and system CPU from
/// the first request to the last connection's end (connection setup left out).
type Served = (u64, Duration, Duration);

/// The client: every connection sends a request and reads its response, over and over,
/// until `seconds` have passed. Returns round trips, elapsed time and the thread's CPU.
async fn client(
    addr: std::net::SocketAddr,
    frames: Frames,
    seconds: f64,
) -> (u64, Duration, Duration, Duration) {
    let mut streams = Vec::with_capacity(frames.connections);
    for _ in 0..frames.connections {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        streams.push(stream);
    }
    let (user0, system0) = thread_cpu();
    let started = Instant::now();
    let loops = streams.into_iter().map(|mut stream| async move {
        let request = vec![2u8; frames.request_bytes];
        let mut response = vec![0u8; frames.response_bytes];
        let mut round_trips = 0u64;
        while started.elapsed().as_secs_f64() < seconds {
            stream.write_all(&request).await.expect("write");
            stream.read_exact(&mut response).await.expect("read");
            round_trips += 1;
        }
        round_trips
    });
    let round_trips = futures_util::future::join_all(loops)
        .await
        .into_iter()
        .sum();
    let elapsed = started.elapsed();
    let (user, system) = thread_cpu();
    (round_trips, elapsed, user - user0, system - system0)
}

/// The server on tokio's reactor, as the node's connections are: a task per connection.
fn epoll_server(listener: std::net::TcpListener, frames: Frames) -> Served {
    listener.set_nonblocking(true).expect("nonblocking");
    let local = tokio::task::LocalSet::new();
    runtime().block_on(local.run_until(async move {
        let listener = TcpListener::from_std(listener).expect("listener");
        let start: std::rc::Rc<std::cell::Cell<Option<(Duration, Duration)>>> = Default::default();
        let served = std::rc::Rc::new(std::cell::Cell::new(0u64));
        let mut tasks = Vec::new();
        for _ in 0..frames.connections {
            let (mut stream, _) = listener.accept().await.expect("accept");
            stream.set_nodelay(true).expect("nodelay");
            let (start, served) = (start.clone(), served.clone());
            tasks.push(tokio::task::spawn_local(async move {
                let mut request = vec![0u8; frames.request_bytes];
                let response = vec![1u8; frames.response_bytes];
                while stream.read_exact(&mut request).await.is_ok() {
                    // The first request starts the count, so connection setup is left out.
                    if start.get().is_none() {
                        start.set(Some(thread_cpu()));
                    }
                    served.set(served.get() + 1);
                    if stream.write_all(&response).await.is_err() {
                        break;
                    }
                }
            }));
        }
        for task in tasks {
            task.await.expect("a connection task");
        }
        let (user, system) = thread_cpu();
        let (user0, system0) = start.get().unwrap_or_default();
        (served.get(), user - user0, system - system0)
    }))
}

/// The server on a bare io_uring loop: no readiness, no reactor, one `io_uring_enter` per
/// turn. Deliberately the least a server can do per request on io_uring; what the node
/// would add (a runtime around it, its buffers) comes on top.
mod uring {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use io_uring::{cqueue, opcode, squeue, types, IoUring};

    use super::{thread_cpu, Frames, Served};

    /// `user_data`: the connection's index, and whether the completion is its send.
    const SEND_BIT: u64 = 1 << 32;
    /// `user_data` of buffers handed (back) to the kernel: their completions carry nothing.
    const PROVIDE: u64 = 1 << 33;
    /// The provided buffers' group, count and size (multishot).
    const GROUP: u16 = 1;
    const BUFFERS: u16 = 512;
    const BUFFER_BYTES: usize = 16 * 1024;

    struct Conn {
        stream: std::net::TcpStream,
        /// Received bytes not yet a whole request.
        pending: usize,
        /// The single-shot receive's buffer.
        buffer: Vec<u8>,
        /// Responses owed and not yet handed to a send.
        owed: usize,
        /// The bytes the send in flight carries (kept alive until its completion).
        out: Vec<u8>,
        sending: bool,
        open: bool,
    }

    /// Field order is drop order: the ring goes before the buffers it may name.
    struct Server {
        ring: IoUring,
        conns: Vec<Conn>,
        /// The provided buffers (multishot): one region, lent a buffer at a time.
        pool: Vec<u8>,
        multishot: bool,
        frames: Frames,
        response: Vec<u8>,
        start: Option<(Duration, Duration)>,
        served: u64,
        open: usize,
    }

    pub(super) fn serve(
        listener: std::net::TcpListener,
        frames: Frames,
        multishot: bool,
    ) -> Served {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(1024)
            .or_else(|_| IoUring::new(1024))
            .expect("an io_uring (the kernel refused one)");
        let conns: Vec<Conn> = (0..frames.connections)
            .map(|_| {
                let (stream, _) = listener.accept().expect("accept");
                stream.set_nodelay(true).expect("nodelay");
                Conn {
                    stream,
                    pending: 0,
                    buffer: vec![0; 64 * 1024],
                    owed: 0,
                    out: Vec::new(),
                    sending: false,
                    open: true,
                }
            })
            .collect();
        let mut server = Server {
            ring,
            open: conns.len(),
            conns,
            pool: vec![0u8; usize::from(BUFFERS) * BUFFER_BYTES],
            multishot,
            frames,
            response: vec![1u8; frames.response_bytes],
            start: None,
            served: 0,
        };
        server.run()
    }

    impl Server {
        fn run(&mut self) -> Served {
            if self.multishot {
                self.provide(0, BUFFERS);
            }
            for index in 0..self.conns.len() {
                self.arm_receive(index);
            }
            // Until every connection has ended and no send is in flight (its buffer is ours).
            while self.open > 0 || self.conns.iter().any(|conn| conn.sending) {
                self.ring.submit_and_wait(1).expect("io_uring_enter");
                let completions: Vec<(u64, i32, u32)> = self
                    .ring
                    .completion()
                    .map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags()))
                    .collect();
                for (user_data, result, flags) in completions {
                    self.complete(user_data, result, flags);
                }
            }
            let (user, system) = thread_cpu();
            let (user0, system0) = self.start.unwrap_or_default();
            (self.served, user - user0, system - system0)
        }

        fn complete(&mut self, user_data: u64, result: i32, flags: u32) {
            if user_data == PROVIDE {
                assert!(result >= 0, "providing buffers failed: {result}");
                return;
            }
            let index = (user_data & (SEND_BIT - 1)) as usize;
            if user_data & SEND_BIT != 0 {
                let conn = &mut self.conns[index];
                // A loopback send into an emptied socket takes all of it, or fails because
                // the client has gone.
                assert!(
                    result as usize == conn.out.len() || result < 0,
                    "a loopback send of {} bytes took {result}",
                    conn.out.len()
                );
                conn.sending = false;
            } else if result <= 0 {
                if std::mem::replace(&mut self.conns[index].open, false) {
                    self.open -= 1;
                }
                return;
            } else {
                self.received(index, result as usize, flags);
            }
            self.send_owed(index);
        }

        fn received(&mut self, index: usize, bytes: usize, flags: u32) {
            // The first request starts the count, so connection setup is left out.
            self.start.get_or_insert_with(thread_cpu);
            let conn = &mut self.conns[index];
            conn.pending += bytes;
            let whole = conn.pending / self.frames.request_bytes;
            conn.pending %= self.frames.request_bytes;
            conn.owed += whole;
            self.served += whole as u64;
            if !self.multishot {
                self.arm_receive(index);
                return;
            }
            // Read (counted, as the node would have copied the bytes out): the buffer goes
            // back to the kernel, and the receive stays armed.
            let bid = cqueue::buffer_select(flags).expect("a multishot receive names its buffer");
            self.provide(bid, 1);
            assert!(
                cqueue::more(flags),
                "the multishot receive of connection {index} ended (out of buffers?)"
            );
        }

        fn send_owed(&mut self, index: usize) {
            let conn = &mut self.conns[index];
            if !conn.open || conn.sending || conn.owed == 0 {
                return;
            }
            conn.out.clear();
            for _ in 0..conn.owed {
                conn.out.extend_from_slice(&self.response);
            }
            conn.owed = 0;
            conn.sending = true;
            let send = opcode::Send::new(
                types::Fd(conn.stream.as_raw_fd()),
                conn.out.as_ptr(),
                conn.out.len() as u32,
            )
            .build()
            .user_data(index as u64 | SEND_BIT);
            self.push(&send);
        }

        fn arm_receive(&mut self, index: usize) {
            let conn = &mut self.conns[index];
            let fd = types::Fd(conn.stream.as_raw_fd());
            let recv = if self.multishot {
                opcode::RecvMulti::new(fd, GROUP).build()
            } else {
                opcode::Recv::new(fd, conn.buffer.as_mut_ptr(), conn.buffer.len() as u32).build()
            };
            self.push(&recv.user_data(index as u64));
        }

        /// Lends `count` buffers from `first` on to the kernel.
        fn provide(&mut self, first: u16, count: u16) {
            let at = usize::from(first) * BUFFER_BYTES;
            let provide = opcode::ProvideBuffers::new(
                self.pool[at..].as_mut_ptr(),
                BUFFER_BYTES as i32,
                count,
                GROUP,
                first,
            )
            .build()
            .user_data(PROVIDE);
            self.push(&provide);
        }

        fn push(&mut self, entry: &squeue::Entry) {
            // SAFETY: the buffers an entry names live in `self`, and the ring is dropped
            // before them (field order). A receive buffer is reused only after its
            // completion, a send buffer only after its send's, a provided buffer only
            // after the kernel handed it back; and `run` returns only when every
            // connection has ended (its last receive completed) and no send is in flight.
            while unsafe { self.ring.submission().push(entry) }.is_err() {
                self.ring.submit().expect("io_uring_enter");
            }
        }
    }
}
