//! The metrics endpoint serves its connections concurrently and within bounds (issue 10,
//! defect 4; issue 23, item 21): a client trickling a request line and a crowd of idle
//! connections do not hold up another scrape, each of them is cut at the header (idle)
//! timeout, and at the connection cap a new connection displaces the oldest idle one
//! instead of being locked out.
//!
//! Bounds stated and measured here: a scrape answers within `SCRAPE_BOUND` while the slow
//! clients are connected, also while `CROWD` (1,000) idle connections are held against a
//! cap of 256; every slow client is closed by the server no earlier than the header
//! timeout and no later than `CUT_SLACK` after it; with a cap of `CAP`, connection number
//! `CAP + 1` closes the oldest idle one at once.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringmq::metrics::http::{HttpLimits, MetricsServer};
use ringmq::metrics::NodeMetrics;

/// How long a scrape may take while slow clients hold connections: a render of one shard
/// is well under a millisecond, so this only absorbs a loaded CI machine.
const SCRAPE_BOUND: Duration = Duration::from_secs(2);

/// How long after the header timeout a slow client may still be connected.
const CUT_SLACK: Duration = Duration::from_secs(3);

/// Idle connections held open during the scrape: more than the 66 that stalled the
/// one-at-a-time endpoint.
const IDLE: usize = 80;

fn server(limits: HttpLimits) -> MetricsServer {
    let metrics = NodeMetrics::new(1);
    metrics.shard(0).traffic.add_in(42);
    // The node's backlog, so a burst of connections reaches the endpoint at once.
    let listener: TcpListener = ringmq::node::bind_listener(
        "127.0.0.1:0".parse().unwrap(),
        ringmq::node::LISTEN_BACKLOG,
        false,
    )
    .unwrap();
    MetricsServer::start_with(listener, metrics, limits).unwrap()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    // Every read in this file ends within a bound, never hangs the suite.
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    stream
}

/// Scrapes `addr`, returning the answer and how long it took; panics past `SCRAPE_BOUND`.
fn scrape(addr: SocketAddr) -> (String, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&addr, SCRAPE_BOUND).unwrap();
    stream.set_read_timeout(Some(SCRAPE_BOUND)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    if let Err(error) = stream.read_to_string(&mut text) {
        panic!(
            "scrape unanswered after {:?} ({error}); got {text:?}",
            started.elapsed()
        );
    }
    (text, started.elapsed())
}

/// Reads until the server closes `stream`, returning when that happened.
fn closed_at(mut stream: TcpStream) -> Instant {
    let mut buffer = [0u8; 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return Instant::now(),
            Ok(_) => continue,
            Err(error)
                if matches!(
                    error.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
            {
                return Instant::now()
            }
            Err(error) => panic!("the server kept a slow connection open: {error}"),
        }
    }
}

/// A client writing a request line that never ends, one byte every 100 ms, until the
/// server closes the connection. Returns the connection (to watch for the close) and the
/// count of bytes written so far.
fn trickler(addr: SocketAddr) -> (TcpStream, Arc<AtomicUsize>) {
    let stream = connect(addr);
    let mut writer = stream.try_clone().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let counted = written.clone();
    std::thread::spawn(move || {
        let line = b"GET /metrics?".iter().chain(std::iter::repeat(&b'a'));
        for byte in line {
            if writer.write_all(&[*byte]).is_err() {
                return;
            }
            counted.fetch_add(1, Ordering::Relaxed);
            // The trickle itself: a byte per tick is the behaviour under test.
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    (stream, written)
}

#[test]
fn a_trickling_client_and_idle_connections_neither_delay_a_scrape_nor_outlive_the_header_timeout() {
    let limits = HttpLimits::default();
    let server = server(limits);
    let addr = server.addr();
    let opened = Instant::now();
    let (trickling, written) = trickler(addr);
    let idle: Vec<TcpStream> = (0..IDLE).map(|_| connect(addr)).collect();
    // The trickler is mid-line (the old endpoint would now be stuck reading it).
    let deadline = Instant::now() + Duration::from_secs(5);
    while written.load(Ordering::Relaxed) < 3 {
        assert!(Instant::now() < deadline, "the trickler wrote nothing");
        std::thread::yield_now();
    }

    for _ in 0..3 {
        let (text, took) = scrape(addr);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.contains("ringmq_bytes_in_total{shard=\"0\"} 42"),
            "{text}"
        );
        assert!(took < SCRAPE_BOUND, "a scrape took {took:?}");
        eprintln!("scrape beside {IDLE} idle connections and a trickler: {took:?}");
    }
    assert!(
        opened.elapsed() < limits.header_timeout,
        "the scrapes ran after the slow clients were cut ({:?}): the test proves nothing",
        opened.elapsed()
    );

    // Each slow client is cut at the header timeout, not before and not much after.
    let watchers: Vec<_> = std::iter::once(trickling)
        .chain(idle)
        .map(|stream| std::thread::spawn(move || closed_at(stream)))
        .collect();
    let mut latest = Duration::ZERO;
    for (index, watcher) in watchers.into_iter().enumerate() {
        let alive = watcher.join().unwrap() - opened;
        assert!(
            alive >= limits.header_timeout,
            "connection {index} cut after {alive:?}, before the header timeout {:?}",
            limits.header_timeout
        );
        latest = latest.max(alive);
    }
    assert!(
        latest <= limits.header_timeout + CUT_SLACK,
        "the last slow connection lived {latest:?}, header timeout {:?}",
        limits.header_timeout
    );
    eprintln!("last of {} slow connections cut after {latest:?}", IDLE + 1);
    let bytes = written.load(Ordering::Relaxed);
    assert!(
        bytes < 8192,
        "the trickler was cut by the timeout, not a full head ({bytes} bytes)"
    );
    assert_eq!(server.refused(), 0, "no connection was over the cap");
}

/// The cap of the second test: small, so it is reached with a few connections.
const CAP: usize = 4;

#[test]
fn a_connection_beyond_the_cap_displaces_the_oldest_idle_one_at_once() {
    let limits = HttpLimits {
        header_timeout: Duration::from_secs(3),
        max_connections: CAP,
        ..HttpLimits::default()
    };
    let server = server(limits);
    let addr = server.addr();
    let opened = Instant::now();
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..CAP {
        held.push(connect(addr));
        // Accepted in order: wait for each, so "oldest" is the first one opened.
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.accepted() < held.len() as u64 {
            assert!(Instant::now() < deadline, "a connection was not accepted");
            std::thread::yield_now();
        }
    }
    // Every slot is held by an idle connection: a scrape takes the oldest one's.
    let (text, took) = scrape(addr);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(took < SCRAPE_BOUND, "a scrape took {took:?}");
    let oldest = held.remove(0);
    let cut_at = closed_at(oldest) - opened;
    assert!(
        cut_at < limits.header_timeout,
        "the oldest idle connection lived {cut_at:?}, as if nothing displaced it"
    );
    assert_eq!(server.evicted(), 1);
    assert_eq!(
        server.refused(),
        0,
        "idle connections never lock a scrape out"
    );
    // The others are cut at the idle timeout as before.
    for stream in held {
        let alive = closed_at(stream) - opened;
        assert!(
            (limits.header_timeout..limits.header_timeout + CUT_SLACK).contains(&alive),
            "a held connection lived {alive:?}"
        );
    }
}

/// Idle connections opened against the default cap of 256 in the third test.
const CROWD: usize = 1000;

#[test]
fn a_thousand_idle_connections_neither_lock_out_nor_slow_a_scrape() {
    let limits = HttpLimits::default();
    let server = server(limits);
    let addr = server.addr();
    let opened = Instant::now();
    let crowd: Vec<TcpStream> = (0..CROWD)
        .map(|n| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .unwrap_or_else(|error| panic!("idle connection {n} not connected: {error}"))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.accepted() < CROWD as u64 {
        assert!(
            Instant::now() < deadline,
            "only {} of {CROWD} connections accepted",
            server.accepted()
        );
        std::thread::yield_now();
    }
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let (text, took) = scrape(addr);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(
            text.contains("ringmq_bytes_in_total{shard=\"0\"} 42"),
            "{text}"
        );
        slowest = slowest.max(took);
    }
    assert!(slowest < SCRAPE_BOUND, "a scrape took {slowest:?}");
    eprintln!("slowest of 5 scrapes beside {CROWD} idle connections: {slowest:?}");
    assert!(
        opened.elapsed() < limits.header_timeout,
        "the scrapes ran after the idle connections timed out ({:?}): the test proves nothing",
        opened.elapsed()
    );
    assert_eq!(server.refused(), 0);
    // Each idle connection past the cap displaced an older one, so at most the cap were
    // open; a scrape displaced one too unless an earlier scrape's slot was free again.
    let past_cap = (CROWD - limits.max_connections) as u64;
    assert!(
        (past_cap..=past_cap + 5).contains(&server.evicted()),
        "{} idle connections displaced, {past_cap} past the cap",
        server.evicted()
    );
    drop(crowd);
}
