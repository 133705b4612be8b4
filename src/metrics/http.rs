//! The Prometheus endpoint: hyper's HTTP/1.1 server on a current-thread tokio runtime of its
//! own thread, off the shards, answering `GET /metrics` with a [`Page`]'s text (the node's
//! [`super::NodeMetrics::render`], or a controller's) in `text/plain; version=0.0.4`,
//! `GET /health` with its readiness (for a node: 200 once every shard's store is open and
//! recovered and the shard serves, 503 before and once a stop began), any other path with
//! 404 and any other method with 405.
//!
//! Connections are served concurrently, so one slow or idle client cannot hold up a scrape.
//! Invariants, each bounded by a limit in [`HttpLimits`]:
//! - at most `max_connections` connections are open at once. At the cap, a new connection
//!   closes the oldest open one that has not sent its request head yet (counted in
//!   [`MetricsServer::evicted`]): idle connections only ever displace each other, so a
//!   scrape gets in however many of them arrive (issue 23, item 21: 1,000 idle
//!   connections used to fill every slot and lock scrapes out until they timed out). Only
//!   when every open connection is answering a request is the new one closed at once
//!   (counted in [`MetricsServer::refused`]) rather than left in the kernel's backlog;
//! - a request head must arrive whole within `header_timeout` of the connection opening
//!   (hyper's `header_read_timeout`, a deadline for the whole head, not per read): the idle
//!   timeout, so a client trickling a request line or sending nothing is cut then;
//! - no connection lives longer than `connection_deadline`, whatever it is doing (hyper has
//!   no write timeout: this also ends a client that asks and never reads the answer);
//! - one request per connection (`keep_alive(false)`, the server closes after answering), so
//!   an idle keep-alive connection cannot hold a slot, and a head is at most `MAX_BUF` bytes.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::oneshot;

use super::NodeMetrics;

/// What an endpoint serves: the metrics text and the readiness.
pub trait Page: Clone + Send + Sync + 'static {
    /// The Prometheus text of every metric now.
    fn render(&self) -> String;
    /// Whether it is ready, and the line that says so or why not.
    fn health(&self) -> (bool, String);
}

impl Page for NodeMetrics {
    fn render(&self) -> String {
        NodeMetrics::render(self)
    }

    fn health(&self) -> (bool, String) {
        let (ready, shards) = self.readiness();
        match ready == shards {
            true => (true, format!("ready: {ready} of {shards} shards serving\n")),
            false => (
                false,
                format!("not ready: {ready} of {shards} shards serving\n"),
            ),
        }
    }
}

/// The content type of the Prometheus text exposition format.
pub const CONTENT_TYPE_METRICS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// hyper's read buffer, which bounds a request head. Its smallest allowed value: a scrape's
/// head is a few hundred bytes.
const MAX_BUF: usize = 8192;

/// The bounds of the metrics endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Time from accepting a connection to having its whole request head: how long an
    /// idle connection is kept (`metrics_idle_timeout`).
    pub header_timeout: Duration,
    /// Time a connection may stay open at all.
    pub connection_deadline: Duration,
    /// Connections held at once (`metrics_max_connections`).
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            // Prometheus sends its head in one write; 5 s is generous for a slow network
            // and short enough that a flood of idle connections drains quickly.
            header_timeout: Duration::from_secs(5),
            // A render is milliseconds and the body a few KiB; Prometheus' default scrape
            // timeout is 10 s, so 30 s never cuts a real scrape.
            connection_deadline: Duration::from_secs(30),
            // Scrapers are a handful of Prometheus servers and an operator's curl. Each
            // connection costs a task and an 8 KiB buffer, so 256 bound memory to a few
            // MiB; idle ones beyond that displace the oldest idle one, never a scrape.
            max_connections: 256,
        }
    }
}

impl HttpLimits {
    /// Refuses limits that could not work, naming the values.
    fn check(&self) {
        assert!(
            !self.header_timeout.is_zero() && self.header_timeout <= self.connection_deadline,
            "metrics header timeout {:?} must be above zero and at most the connection \
             deadline {:?}",
            self.header_timeout,
            self.connection_deadline
        );
        assert!(
            self.max_connections >= 1,
            "metrics max_connections {} must be at least 1",
            self.max_connections
        );
    }
}

/// A running metrics endpoint; dropping it stops it.
pub struct MetricsServer {
    addr: SocketAddr,
    counts: Arc<Counts>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `metrics` on `listener` (already bound) from a new thread, with the default
    /// [`HttpLimits`].
    pub fn start(listener: TcpListener, metrics: impl Page) -> std::io::Result<MetricsServer> {
        MetricsServer::start_with(listener, metrics, HttpLimits::default())
    }

    /// Serves `metrics` on `listener` within `limits`.
    pub fn start_with(
        listener: TcpListener,
        metrics: impl Page,
        limits: HttpLimits,
    ) -> std::io::Result<MetricsServer> {
        limits.check();
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let counts = Arc::new(Counts::default());
        let counted = counts.clone();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("ringmq-metrics".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => {
                            tokio::select! {
                                _ = stopped => {}
                                _ = accept_loop(listener, metrics, limits, counted) => {}
                            }
                        }
                        Err(error) => tracing::error!(%error, "metrics endpoint cannot listen"),
                    }
                });
                // Dropping the runtime here ends every connection still open.
            })?;
        Ok(MetricsServer {
            addr,
            counts,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections closed on arrival because `max_connections` were open, every one of
    /// them answering a request.
    pub fn refused(&self) -> u64 {
        self.counts.refused.load(Ordering::Relaxed)
    }

    /// Connections that had sent no request closed to make room for a new one.
    pub fn evicted(&self) -> u64 {
        self.counts.evicted.load(Ordering::Relaxed)
    }

    /// Connections accepted.
    pub fn accepted(&self) -> u64 {
        self.counts.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the endpoint counts.
#[derive(Debug, Default)]
struct Counts {
    accepted: AtomicU64,
    refused: AtomicU64,
    evicted: AtomicU64,
}

/// One open connection: whether its request head arrived, and how to cut it.
struct Slot {
    busy: bool,
    cut: Option<oneshot::Sender<()>>,
}

/// The open connections by arrival (ids only grow, so the map's order is their age).
#[derive(Default)]
struct Slots {
    open: Mutex<BTreeMap<u64, Slot>>,
}

impl Slots {
    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Slot>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a slot for connection `id`, cutting the oldest idle connection at the cap;
    /// `None` when every open connection is busy. True in the pair: one was cut.
    fn take(&self, id: u64, max: usize) -> Option<(oneshot::Receiver<()>, bool)> {
        let mut open = self.table();
        let mut evicted = false;
        if open.len() >= max {
            let oldest_idle = open
                .iter()
                .find(|(_, slot)| !slot.busy)
                .map(|(id, _)| *id)?;
            if let Some(cut) = open
                .remove(&oldest_idle)
                .and_then(|mut slot| slot.cut.take())
            {
                let _ = cut.send(());
            }
            evicted = true;
        }
        let (cut, cut_rx) = oneshot::channel();
        open.insert(
            id,
            Slot {
                busy: false,
                cut: Some(cut),
            },
        );
        Some((cut_rx, evicted))
    }

    /// Connection `id`'s request head arrived: it is answering, not idle.
    fn busy(&self, id: u64) {
        if let Some(slot) = self.table().get_mut(&id) {
            slot.busy = true;
        }
    }

    fn release(&self, id: u64) {
        self.table().remove(&id);
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    metrics: impl Page,
    limits: HttpLimits,
    counts: Arc<Counts>,
) {
    let slots = Arc::new(Slots::default());
    let mut next_id = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors, most likely: back off rather than spin, the
                // shards' connections need the descriptors more.
                tracing::debug!(%error, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        counts.accepted.fetch_add(1, Ordering::Relaxed);
        let id = next_id;
        next_id += 1;
        let Some((cut, evicted)) = slots.take(id, limits.max_connections) else {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                max_connections = limits.max_connections,
                "metrics connection refused: every connection is answering a request"
            );
            drop(stream);
            continue;
        };
        if evicted {
            counts.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let metrics = metrics.clone();
        let slots = slots.clone();
        tokio::spawn(async move {
            let marks = slots.clone();
            let service = hyper::service::service_fn(move |request| {
                marks.busy(id);
                let response = answer(&request, &metrics);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(false)
                .max_buf_size(MAX_BUF)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                served = tokio::time::timeout(limits.connection_deadline, connection) => {
                    match served {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => tracing::debug!(%error, "metrics connection failed"),
                        Err(_) => tracing::debug!("metrics connection cut at its deadline"),
                    }
                }
                // Displaced by a newer connection while idle: dropping it closes it.
                _ = cut => tracing::debug!("idle metrics connection closed for a new one"),
            }
            slots.release(id);
        });
    }
}

/// The answer to one request; the body of a request is never read (GET has none, and
/// anything else is refused).
fn answer(request: &Request<Incoming>, metrics: &impl Page) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE_METRICS, metrics.render()),
        (&Method::GET, "/health") => match metrics.health() {
            (true, line) => (StatusCode::OK, "text/plain", line),
            (false, line) => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", line),
        },
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics or /health\n".into(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".into(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn serves_metrics_and_refuses_other_paths_and_methods() {
        let metrics = NodeMetrics::new(1);
        metrics.shard(0).traffic.add_in(7);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = MetricsServer::start(listener, metrics).unwrap();
        let ok = get(server.addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{ok}"
        );
        assert!(ok.contains("ringmq_bytes_in_total{shard=\"0\"} 7"), "{ok}");
        let query = get(
            server.addr(),
            "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(query.starts_with("HTTP/1.1 200 OK\r\n"), "{query}");
        let missing = get(server.addr(), "GET /other HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = get(server.addr(), "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(
            post.to_ascii_lowercase().contains("allow: get\r\n"),
            "{post}"
        );
        drop(server);
    }

    #[test]
    fn health_answers_503_until_every_shard_serves() {
        let metrics = NodeMetrics::new(2);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = MetricsServer::start(listener, metrics.clone()).unwrap();
        let starting = get(server.addr(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(starting.starts_with("HTTP/1.1 503"), "{starting}");
        assert!(
            starting.ends_with("not ready: 0 of 2 shards serving\n"),
            "{starting}"
        );
        metrics.shard(0).set_ready(true);
        let half = get(server.addr(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(half.starts_with("HTTP/1.1 503"), "{half}");
        metrics.shard(1).set_ready(true);
        let ready = get(server.addr(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ready.starts_with("HTTP/1.1 200 OK\r\n"), "{ready}");
        assert!(ready.ends_with("ready: 2 of 2 shards serving\n"), "{ready}");
    }

    #[test]
    fn at_the_cap_the_oldest_idle_slot_goes_and_only_a_busy_table_refuses() {
        let slots = Slots::default();
        let (mut first, evicted) = slots.take(0, 2).unwrap();
        assert!(!evicted);
        let (_second, _) = slots.take(1, 2).unwrap();
        slots.busy(1);
        let (_third, evicted) = slots.take(2, 2).unwrap();
        assert!(evicted, "the table was full");
        assert_eq!(
            first.try_recv(),
            Ok(()),
            "the oldest idle connection was cut"
        );
        slots.busy(2);
        assert!(
            slots.take(3, 2).is_none(),
            "every open connection is answering"
        );
        slots.release(1);
        assert!(slots.take(3, 2).is_some());
    }

    #[test]
    #[should_panic(expected = "metrics max_connections 0 must be at least 1")]
    fn limits_without_a_connection_are_refused() {
        let limits = HttpLimits {
            max_connections: 0,
            ..HttpLimits::default()
        };
        limits.check();
    }

    #[test]
    #[should_panic(expected = "must be above zero and at most the connection deadline")]
    fn a_header_timeout_past_the_connection_deadline_is_refused() {
        let limits = HttpLimits {
            header_timeout: Duration::from_secs(31),
            ..HttpLimits::default()
        };
        limits.check();
    }

    #[test]
    fn the_default_limits_pass_their_own_check() {
        HttpLimits::default().check();
    }
}
