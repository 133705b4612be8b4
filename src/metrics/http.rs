//! The Prometheus endpoint: a small HTTP/1.1 server on its own thread, off the shards, that
//! answers `GET /metrics` with [`super::NodeMetrics::render`] and anything else with 404
//! (405 for another method). One request per connection (`Connection: close`); a request
//! head over 8 KiB or slower than 5 s is dropped. Scrapes are rare (seconds apart), so a
//! blocking accept loop is all it needs, and it can never hold up a shard.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::NodeMetrics;

/// A running metrics endpoint; dropping it stops it.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `metrics` on `listener` (already bound) from a new thread.
    pub fn start(listener: TcpListener, metrics: NodeMetrics) -> std::io::Result<MetricsServer> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(false)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ringmq-metrics".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::Acquire) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        if let Err(error) = answer(stream, &metrics) {
                            tracing::debug!(%error, "metrics request failed");
                        }
                    }
                }
            })?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn answer(stream: TcpStream, metrics: &NodeMetrics) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(std::io::Read::take(&stream, 8192));
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Drain the head so the client is not reset before it reads the answer.
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "try /metrics\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n".to_string(),
        ),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn serves_metrics_and_refuses_other_paths() {
        let metrics = NodeMetrics::new(1);
        metrics.shard(0).traffic.add_in(7);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = MetricsServer::start(listener, metrics).unwrap();
        let ok = get(server.addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("ringmq_bytes_in_total{shard=\"0\"} 7"), "{ok}");
        let missing = get(server.addr(), "GET /other HTTP/1.1\r\n\r\n");
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = get(server.addr(), "POST /metrics HTTP/1.1\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        drop(server);
    }
}
