//! Sync producers on blocking sockets, one thread per connection (`ringmq bench produce
//! --io threads`, the default for sync sends with one producer per connection).
//!
//! With one sync producer a send is a round trip, so the producer's own cost per message
//! is in every figure it reports. The task producers share a connection through the
//! multiplexing [`crate::client::Client`]: a reader task, a slot per request and a
//! runtime that parks in `epoll_wait`, about 7 µs of user CPU and three syscalls per send.
//! A thread that owns its socket writes the frame and blocks in `read` for the answer:
//! two syscalls and no task hand-off. Measured against one node, alternating the two for
//! 4 s each, four times (1 KiB, ASYNC_FLUSH, one producer, node on CPU 0 and load
//! generator on CPU 1): 18,596–19,338 msgs/s with tasks against 20,782–21,166 with a
//! blocking socket; the load generator's CPU per send fell from 20.3–21.1 µs to
//! 15.5–15.8 µs, and the node's stayed at 34 µs.
//!
//! Invariants:
//! - A connection carries one request at a time: a frame is written whole, then frames
//!   are read until the response with its opaque arrives. Anything else (a request from
//!   the node, the late response to a request that timed out) is skipped.
//! - A request that gets no response within the timeout fails as `TimedOut` and the
//!   connection stays usable, as on the task client: its response, if it comes, is
//!   skipped by opaque.
//! - A connection whose stream can no longer be trusted (closed, an I/O error, a frame
//!   that does not decode, a write cut short) is broken: every later send on it fails at
//!   once as `NotConnected`, as on the task client.
//! - The clock starts once every connection is up, as for the task producers.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::produce_run::{
    account, check_produce_options, produce_summary, ProduceOptions, ProduceRun, ProduceSummary,
    ProducerIo,
};
use crate::client::DEFAULT_TIMEOUT;
use crate::remoting::frame::{encode_frame, take_frame, DEFAULT_MAX_FRAME_LEN};
use crate::remoting::RemotingCommand;

/// One blocking connection to the node.
struct Connection {
    stream: TcpStream,
    /// Bytes read but not yet taken as frames.
    buffer: BytesMut,
    /// What each `read` fills before it is appended to `buffer`.
    chunk: Vec<u8>,
    /// The frame being sent.
    out: Vec<u8>,
    next_opaque: i32,
    /// How long a request waits for its response.
    timeout: Duration,
    /// The socket's read timeout was shortened to what was left of a request's timeout.
    read_timeout_shortened: bool,
    broken: bool,
}

/// Why a response did not come: the connection is still usable or it is not.
enum Failure {
    Request(io::Error),
    Connection(io::Error),
}

impl Connection {
    fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Connection {
            stream,
            buffer: BytesMut::with_capacity(64 * 1024),
            chunk: vec![0; 64 * 1024],
            out: Vec::with_capacity(4096),
            next_opaque: 1,
            timeout,
            read_timeout_shortened: false,
            broken: false,
        })
    }

    /// Sends `cmd` and waits for its response.
    fn request(&mut self, mut cmd: RemotingCommand) -> io::Result<RemotingCommand> {
        if self.broken {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the connection is closed",
            ));
        }
        cmd.opaque = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1);
        match self.exchange(&cmd) {
            Ok(answer) => Ok(answer),
            Err(Failure::Request(error)) => Err(error),
            Err(Failure::Connection(error)) => {
                self.broken = true;
                Err(error)
            }
        }
    }

    fn exchange(&mut self, cmd: &RemotingCommand) -> Result<RemotingCommand, Failure> {
        self.out.clear();
        encode_frame(cmd, &mut self.out).map_err(|error| {
            Failure::Request(io::Error::new(io::ErrorKind::InvalidInput, error))
        })?;
        let timeout = self.timeout;
        let timed_out = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no response to request code {} within {timeout:?}",
                    cmd.code
                ),
            )
        };
        if self.read_timeout_shortened {
            self.set_read_timeout(self.timeout)?;
        }
        // A frame written in part leaves the stream mid-frame: nothing can follow it.
        self.stream.write_all(&self.out).map_err(|error| {
            Failure::Connection(if is_timeout(&error) {
                timed_out()
            } else {
                error
            })
        })?;
        let deadline = Instant::now() + self.timeout;
        loop {
            match take_frame(&mut self.buffer, DEFAULT_MAX_FRAME_LEN) {
                Ok(Some(frame)) if frame.is_response() && frame.opaque == cmd.opaque => {
                    return Ok(frame)
                }
                Ok(Some(_)) => {
                    // Skipped frames must not stretch the wait past the timeout.
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Failure::Request(timed_out()));
                    }
                    self.set_read_timeout(left)?;
                    continue;
                }
                Ok(None) => {}
                Err(error) => {
                    return Err(Failure::Connection(io::Error::new(
                        io::ErrorKind::InvalidData,
                        error,
                    )))
                }
            }
            let read = match self.stream.read(&mut self.chunk) {
                Ok(0) => {
                    return Err(Failure::Connection(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the connection closed before the response came",
                    )))
                }
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if is_timeout(&error) => return Err(Failure::Request(timed_out())),
                Err(error) => return Err(Failure::Connection(error)),
            };
            self.buffer.extend_from_slice(&self.chunk[..read]);
        }
    }

    fn set_read_timeout(&mut self, timeout: Duration) -> Result<(), Failure> {
        self.stream
            .set_read_timeout(Some(timeout))
            .map_err(Failure::Connection)?;
        self.read_timeout_shortened = timeout != self.timeout;
        Ok(())
    }
}

/// A socket timeout shows as `WouldBlock` on Linux (`EAGAIN`), `TimedOut` elsewhere.
fn is_timeout(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One producer: claims, sends and accounts until the run is over.
fn producer(run: &ProduceRun, mut connection: Connection) {
    let options = &run.options;
    let body = vec![b'x'; options.size];
    while let Some((first, count)) = run.claim_blocking() {
        let sent_at = Instant::now();
        let outcome = connection.request(run.request(&body, first, count));
        run.counters
            .record_latency_us(sent_at.elapsed().as_micros() as u64);
        account(&run.counters, options.size, count, outcome);
    }
}

/// Prints a progress line a second until `done` says stop.
fn report_progress(run: &ProduceRun, started: Instant, done: std::sync::mpsc::Receiver<()>) {
    let mut previous = 0;
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        done.recv_timeout(std::time::Duration::from_secs(1))
    {
        let now = run.counters.done();
        let elapsed = started.elapsed().as_secs_f64();
        eprintln!(
            "{}",
            run.counters.progress_line("sent", elapsed, now - previous)
        );
        previous = now;
    }
}

/// Runs a produce round with one blocking thread per connection.
pub(super) fn produce(options: ProduceOptions) -> anyhow::Result<ProduceSummary> {
    check_produce_options(&options)?;
    ProducerIo::Threads.resolve(&options)?;
    let connections = (0..options.connections)
        .map(|_| {
            Connection::connect(options.addr, DEFAULT_TIMEOUT)
                .map_err(|error| anyhow::anyhow!("connecting to {}: {error}", options.addr))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let started = Instant::now();
    let run = Arc::new(ProduceRun::new(options, started));
    let (stop_progress, stopped) = std::sync::mpsc::channel();
    let progress = run.options.progress.then(|| {
        let run = run.clone();
        std::thread::spawn(move || report_progress(&run, started, stopped))
    });
    let producers = connections
        .into_iter()
        .enumerate()
        .map(|(index, connection)| {
            let run = run.clone();
            std::thread::Builder::new()
                .name(format!("ringmq-bench-producer-{index}"))
                .spawn(move || producer(&run, connection))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut panicked = false;
    for producer in producers {
        panicked |= producer.join().is_err();
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(stop_progress);
    if let Some(progress) = progress {
        let _ = progress.join();
    }
    if panicked {
        anyhow::bail!("a producer thread panicked");
    }
    Ok(produce_summary(&run, ProducerIo::Threads, elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::codes::{request as codes, response};
    use crate::remoting::ext_fields::ExtFields;

    /// Reads one frame off `stream` into `buffer`'s leftovers.
    fn read_frame(stream: &mut TcpStream, buffer: &mut BytesMut) -> RemotingCommand {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(frame) = take_frame(buffer, DEFAULT_MAX_FRAME_LEN).unwrap() {
                return frame;
            }
            let read = stream.read(&mut chunk).unwrap();
            assert!(read > 0, "the client closed");
            buffer.extend_from_slice(&chunk[..read]);
        }
    }

    fn heartbeat() -> RemotingCommand {
        RemotingCommand::request(codes::HEART_BEAT, ExtFields::default())
    }

    /// A peer that reads one request, then sends `before` (built from it) and its response.
    fn peer_answering_after(
        before: fn(&RemotingCommand) -> Vec<RemotingCommand>,
    ) -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let request = read_frame(&mut stream, &mut BytesMut::new());
            let mut out = Vec::new();
            for frame in before(&request) {
                encode_frame(&frame, &mut out).unwrap();
            }
            let mut answer = RemotingCommand::response_to(&request, response::SUCCESS, None);
            answer.put_ext("queueOffset", 7);
            encode_frame(&answer, &mut out).unwrap();
            // One write: the client must split it into frames itself.
            stream.write_all(&out).unwrap();
        });
        (addr, peer)
    }

    fn ask(addr: std::net::SocketAddr) -> io::Result<RemotingCommand> {
        let mut connection = Connection::connect(addr, DEFAULT_TIMEOUT).unwrap();
        connection.request(heartbeat())
    }

    #[test]
    fn the_response_with_the_request_opaque_is_the_answer() {
        let (addr, peer) = peer_answering_after(|request| {
            // A stale response and a request from the node come first.
            let mut stale = RemotingCommand::response_to(request, response::SYSTEM_ERROR, None);
            stale.opaque = request.opaque.wrapping_add(100);
            let notify = RemotingCommand::request(codes::HEART_BEAT, ExtFields::default());
            vec![stale, notify]
        });
        let answer = ask(addr).unwrap();
        peer.join().unwrap();
        assert_eq!(answer.code, response::SUCCESS);
        assert_eq!(answer.ext_fields.get("queueOffset"), Some("7"));
    }

    #[test]
    fn a_timed_out_request_leaves_the_connection_usable_and_its_late_response_skipped() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go_on, told) = std::sync::mpsc::channel::<()>();
        let peer = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buffer = BytesMut::new();
            let first = read_frame(&mut stream, &mut buffer);
            // Answers the first request only once the client has given up on it.
            told.recv().unwrap();
            let mut out = Vec::new();
            let late = RemotingCommand::response_to(&first, response::SYSTEM_ERROR, None);
            encode_frame(&late, &mut out).unwrap();
            stream.write_all(&out).unwrap();
            let second = read_frame(&mut stream, &mut buffer);
            out.clear();
            let answer = RemotingCommand::response_to(&second, response::SUCCESS, None);
            encode_frame(&answer, &mut out).unwrap();
            stream.write_all(&out).unwrap();
        });
        let mut connection = Connection::connect(addr, Duration::from_millis(200)).unwrap();
        let first = connection.request(heartbeat()).unwrap_err();
        assert_eq!(first.kind(), io::ErrorKind::TimedOut, "{first:?}");
        go_on.send(()).unwrap();
        let second = connection.request(heartbeat()).unwrap();
        peer.join().unwrap();
        assert_eq!(second.code, response::SUCCESS);
        assert_eq!(second.opaque, 2);
    }

    #[test]
    fn a_connection_that_failed_refuses_later_requests() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut connection = Connection::connect(addr, DEFAULT_TIMEOUT).unwrap();
        // Accepted and closed at once: the request meets a closed connection.
        drop(listener.accept().unwrap());
        let first = connection.request(heartbeat()).unwrap_err();
        assert!(
            matches!(
                first.kind(),
                io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
            ),
            "{first:?}"
        );
        let later = connection.request(heartbeat()).unwrap_err();
        assert_eq!(later.kind(), io::ErrorKind::NotConnected);
    }
}
