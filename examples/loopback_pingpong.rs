//! The floor under a one-producer sync-send benchmark on this machine: a bare TCP
//! ping-pong over loopback with the same runtime the node uses (tokio current-thread, one
//! thread each side), frames the size of a 1 KiB send and its response, and no work at all
//! between read and write.
//!
//! Whatever the node and the load generator do per message comes on top of this round
//! trip, so it bounds what one producer can reach: `1 / rtt` messages per second.
//!
//! ```text
//! cargo run --release --example loopback_pingpong -- [SECONDS] [SERVER_CPUS] [CLIENT_CPUS] [REQUEST_BYTES] [RESPONSE_BYTES]
//! ```
//! Each side is pinned with `sched_setaffinity` to a CPU list like taskset's (`1`, `1,3`,
//! `2-5`), or left unpinned with `-`. Prints one JSON
//! line: round trips per second and each side's CPU (user and system, from
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

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local address");
    listener.set_nonblocking(true).expect("nonblocking");

    let server = std::thread::spawn(move || {
        pin(&server_cpus);
        runtime().block_on(async move {
            let listener = TcpListener::from_std(listener).expect("listener");
            let (mut stream, _) = listener.accept().await.expect("accept");
            stream.set_nodelay(true).expect("nodelay");
            let mut request = vec![0u8; request_bytes];
            let response = vec![1u8; response_bytes];
            let mut start: Option<(Duration, Duration)> = None;
            let mut served = 0u64;
            while stream.read_exact(&mut request).await.is_ok() {
                // The first request starts the count, so connection setup is left out.
                start.get_or_insert_with(thread_cpu);
                served += 1;
                if stream.write_all(&response).await.is_err() {
                    break;
                }
            }
            let (user, system) = thread_cpu();
            let (user0, system0) = start.unwrap_or_default();
            (served, user - user0, system - system0)
        })
    });

    pin(&client_cpus);
    let (round_trips, elapsed, client_user, client_system) = runtime().block_on(async move {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let request = vec![2u8; request_bytes];
        let mut response = vec![0u8; response_bytes];
        let (user0, system0) = thread_cpu();
        let started = Instant::now();
        let mut round_trips = 0u64;
        while started.elapsed().as_secs_f64() < seconds {
            stream.write_all(&request).await.expect("write");
            stream.read_exact(&mut response).await.expect("read");
            round_trips += 1;
        }
        let elapsed = started.elapsed();
        let (user, system) = thread_cpu();
        (round_trips, elapsed, user - user0, system - system0)
    });
    let (served, server_user, server_system) = server.join().expect("the server thread");
    let per = |d: Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
    println!(
        "{{\"round_trips_per_sec\":{:.0},\"rtt_us\":{:.1},\"server_user_us\":{:.1},\"server_sys_us\":{:.1},\"client_user_us\":{:.1},\"client_sys_us\":{:.1},\"request_bytes\":{request_bytes},\"response_bytes\":{response_bytes}}}",
        round_trips as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / round_trips.max(1) as f64,
        per(server_user, served),
        per(server_system, served),
        per(client_user, round_trips),
        per(client_system, round_trips),
    );
}
