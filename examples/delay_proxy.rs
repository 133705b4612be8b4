//! A TCP proxy that adds a fixed one-way delay, for `perf/replication.sh`'s delayed-link
//! row: the kernel here has no netem, so the HA stream between master and slave goes
//! through this instead.
//!
//! ```text
//! cargo run --release --example delay_proxy -- LISTEN_PORT TARGET_ADDR DELAY_US
//! ```
//! Every accepted connection is forwarded to `TARGET_ADDR`; each direction delivers every
//! byte `DELAY_US` microseconds after it was read (0: forward at once, which is how the
//! benchmark checks that the proxy itself costs nothing). Prints `listening <port>` once it
//! accepts, then runs until killed.
//!
//! Why a Rust program and not Python's asyncio: 64 producers of 10 KiB make the stream a
//! few hundred MB/s, and the delay must hold to well under a millisecond. Each direction is
//! a reader thread and a writer thread over blocking sockets joined by a bounded queue of
//! chunks stamped with their arrival: the reader never waits for the delay (so the
//! sender's TCP sees a fast path, as it would over a long link with a large window), and
//! the writer sleeps with `thread::sleep`'s microsecond precision (tokio's timer has 1 ms
//! granularity, half the delay). A slow writer makes the queue fill, which blocks the
//! reader, which is TCP's own backpressure.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread;
use std::time::{Duration, Instant};

/// The most bytes one read takes, and so the largest chunk in the queue.
const CHUNK_BYTES: usize = 256 * 1024;
/// Chunks a direction holds in its delay line: at most 64 MiB, far above what 2 ms of a
/// loopback stream carries, so the line never limits the bandwidth, only delays it.
const CHUNKS_IN_FLIGHT: usize = 256;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen_port, target, delay_us] = args.as_slice() else {
        eprintln!("usage: delay_proxy LISTEN_PORT TARGET_ADDR DELAY_US");
        std::process::exit(2);
    };
    let delay = Duration::from_micros(delay_us.parse().expect("DELAY_US: microseconds"));
    let listener = TcpListener::bind(format!("127.0.0.1:{listen_port}")).expect("bind");
    println!(
        "listening {}",
        listener.local_addr().expect("local addr").port()
    );
    for inbound in listener.incoming() {
        let Ok(inbound) = inbound else { continue };
        match TcpStream::connect(target) {
            Ok(outbound) => forward(inbound, outbound, delay),
            Err(error) => eprintln!("cannot connect to {target}: {error}"),
        }
    }
}

/// Runs both directions of one connection on their own threads.
fn forward(inbound: TcpStream, outbound: TcpStream, delay: Duration) {
    for stream in [&inbound, &outbound] {
        stream.set_nodelay(true).expect("TCP_NODELAY");
    }
    let pairs = [
        (clone(&inbound), clone(&outbound)),
        (clone(&outbound), clone(&inbound)),
    ];
    for (from, to) in pairs {
        let (sender, receiver) = sync_channel(CHUNKS_IN_FLIGHT);
        thread::spawn(move || read_side(from, sender));
        thread::spawn(move || write_side(receiver, to, delay));
    }
}

fn clone(stream: &TcpStream) -> TcpStream {
    stream.try_clone().expect("clone a socket")
}

/// Reads chunks as they come and stamps each with when it is due.
fn read_side(mut from: TcpStream, line: SyncSender<(Instant, Vec<u8>)>) {
    let mut buffer = vec![0u8; CHUNK_BYTES];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if line.send((Instant::now(), buffer[..n].to_vec())).is_err() {
            break;
        }
    }
    // Dropping the sender ends the writer once the line is empty.
}

/// Writes each chunk once it is due; the chunks are due in order (one delay, FIFO).
fn write_side(line: Receiver<(Instant, Vec<u8>)>, mut to: TcpStream, delay: Duration) {
    while let Ok((read_at, chunk)) = line.recv() {
        let due = read_at + delay;
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
        if to.write_all(&chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
