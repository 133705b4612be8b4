//! Serving one connection on its shard: bytes in, frames out, requests dispatched. The
//! connection comes through the network seam ([`crate::net`]): a kernel TCP socket in
//! production, a simulated one in the simulated-network tests.
//!
//! ```text
//!   socket ──read──▶ BytesMut ──take_frame──▶ request ──spawn_local──▶ handler task
//!                                                                        │ response
//!   socket ◀──write_all── encode_frame ◀── writer task ◀──── mpsc ◀──────┘
//!          ◀──sendfile──── file body ────────┘   (body_send.rs)
//!          ◀──try_write─── reply batch ◀── Reply::send in the appender's turn
//! ```
//!
//! What this file owns and promises:
//!
//! - Every request runs in its own `spawn_local` task, so a slow one (a parked long-poll
//!   pull, a put waiting for its fsync) never holds up the requests behind it. Responses
//!   therefore may leave in a different order than their requests came; clients match
//!   them by `opaque`, which [`RemotingCommand::response_to`] echoes.
//! - The exception: a request the handler can take at once ([`RequestHandler::handle_now`],
//!   a single-message send) gets no task. The handler keeps a [`Reply`] and answers through
//!   it when the work is done (for a send, when the store has the message), so the send
//!   path costs no task spawn and no wake-up beyond the appender's (and the writer's,
//!   for a reply answered outside a reply batch).
//! - A send answered inside a reply batch on this shard (the store's appender turn) skips
//!   the writer queue: [`super::reply_batch`] writes the turn's responses to each
//!   connection with one `try_write` when the batch closes, unless the writer task is
//!   writing, in which case they go out first in its next write.
//! - One writer task writes everything else, so frames never interleave. It encodes every
//!   response already queued into one buffer and writes it with one `write_all`. A
//!   response with a file body (a pull's records, D8) ends the buffer: the buffer goes
//!   out with the frame's header, then the file ranges go straight from the files
//!   ([`super::body_send`]), then batching resumes.
//! - Every byte read and written is counted in the shard's [`Traffic`].
//! - An ended connection's socket is closed by the shard's [`closer`](super::closer), a
//!   batch per turn, not in the turn it ended.
//! - A oneway request (flag bit 1) gets no response, whatever the handler returns.
//! - A framing error (bad or huge length, unknown serialize type, undecodable header)
//!   means the stream is out of step and cannot be resynchronised: it is logged at warn
//!   with the peer address and the connection is closed. Only this connection is touched.
//! - Every whole request read before the connection ends is carried out, even when the
//!   peer closes right after sending it: a producer that sends oneway messages and hangs
//!   up loses none of them (Java's broker behaves the same). Their responses, if any, are
//!   dropped. So when the peer closes or the stream breaks, request tasks still running
//!   are left to finish on their own; parked ones (long-polling pulls and pops) end at
//!   once, their connection closed ([`Backlog::close`]); only a node shutdown aborts them (the store still finishes every put
//!   already queued). The writer task goes with the connection in every case.
//! - Work a peer causes is bounded per connection ([`super::backlog`]): at most
//!   `max_requests_in_flight` requests read and not yet answered, and at most
//!   `max_queued_response_bytes` of responses not yet written. When either is reached the
//!   connection stops taking frames and stops reading its socket until the backlog
//!   drains (a parked long-poll pull does not count against the requests bound), so
//!   a peer that does not read its answers is held back by TCP, not by the node's
//!   memory. Every pause is counted (`read_pauses`).
//! - Time a peer may hold a connection without progress is bounded: a partial frame must
//!   make progress (64 KiB more) within `frame_timeout` of its first byte or its last
//!   progress, not counting time the node was not reading (a pause); a connection with
//!   no request read for `idle_timeout`, none in flight (parked pulls count), no response
//!   bytes queued and not paused is closed. Both are checked on a tick of a quarter
//!   of the shorter timeout, so a close comes at most that much late.
//! - Bytes held in read buffers beyond the initial buffer size are charged to the node's
//!   [`Admission`]; a connection whose buffer would take the node past
//!   `max_partial_frame_bytes` is closed. Every close for a limit is counted in the
//!   shard's [`Traffic`] and logged (rate-limited per shard, see below).
//! - Warnings are bounded: text a peer sent reaches a log line only through
//!   [`log_safe`](crate::remoting::log_safe), and connection-closing warnings pass a per-shard [`WarnLimiter`]
//!   (repeated ones on one connection, its pauses, a per-connection one), so a flood of
//!   hostile connections cannot flood the log.
//!
//! This file knows nothing about what a request means: that is the [`RequestHandler`]'s job
//! (the broker, in production). It is shard-local: it uses `spawn_local` and `Rc`.

use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::admission::{Admission, Admitted};
use super::backlog::{Backlog, BacklogBounds, InFlight};
use super::body_send::{BodySend, BodySender};
use super::outbound::Queued;
use super::reply_batch::{self, ConnectionWriter};
use super::traffic::{LimitEvent, Traffic};
use crate::net::Connection;
use crate::remoting::command::RemotingCommand;
use crate::remoting::frame::{encode_response, take_frame};
use crate::remoting::log_safe::{log_safe_max, Warn, WarnLimiter};

pub use super::outbound::{NotQueued, Outbound};

/// What a connection needs from the code that gives requests their meaning.
pub trait RequestHandler: 'static {
    /// A connection from `peer` opened; `outbound` writes frames to it until it closes.
    fn connection_opened(&self, _peer: SocketAddr, _outbound: Outbound) {}

    /// The connection from `peer` closed, for whatever reason.
    fn connection_closed(&self, _peer: SocketAddr) {}

    /// `peer` sent a response frame: the answer to a request the node sent it (a call
    /// the handler made through the connection's [`Outbound`]). Dropped by default.
    fn response_arrived(&self, peer: SocketAddr, response: RemotingCommand) {
        tracing::debug!(%peer, opaque = response.opaque, "unexpected response dropped");
    }

    /// Takes `request` without a task of its own when it can be done so, answering through
    /// `reply` later (or never, for a oneway request: [`Reply`] drops its response); hands
    /// it back to be run by [`RequestHandler::handle`] in a task otherwise. Must not block.
    fn handle_now(
        self: Rc<Self>,
        request: RemotingCommand,
        _peer: SocketAddr,
        _reply: Reply,
    ) -> Option<RemotingCommand> {
        Some(request)
    }

    /// Handles one request from `peer`; `None` means no response is sent.
    fn handle(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> impl Future<Output = Option<RemotingCommand>> + 'static;
}

/// Where the response to a request taken by [`RequestHandler::handle_now`] goes: the
/// connection's writer. Dropping it unused sends nothing (and ends the request's count
/// in the connection's backlog).
pub struct Reply {
    responses: Outbound,
    oneway: bool,
    /// The connection's number, for [`reply_batch::hold`].
    connection: u64,
    /// The request's place in the connection's backlog.
    in_flight: InFlight,
}

impl Reply {
    /// Queues `response` for the writer; a oneway request's response is dropped, as is any
    /// response after the connection has gone. Never waits: the caller may be the store's
    /// appender.
    pub fn send(self, response: RemotingCommand) {
        let Reply {
            responses,
            oneway,
            connection,
            in_flight,
        } = self;
        if oneway {
            return;
        }
        // Answered inside a batch on the connection's own shard: written when it closes.
        // `hold` charges the held bytes; the request ends when `in_flight` drops after.
        if reply_batch::hold(connection, &response) {
            return;
        }
        // Charged before it is queued: the writer may run on another thread and take it
        // off the moment it is on the queue.
        responses.respond(response, in_flight);
    }
}

/// Limits of one connection, derived from the node's keys by
/// [`crate::node_config::connection_limits`]; the ones that are not keys are the constants
/// below.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Largest frame accepted (`max_frame_size`; by default Java's `frameMaxLength`).
    pub max_frame_len: usize,
    /// Initial read buffer capacity; also the bytes a connection may hold in its read
    /// buffer before they are charged to the node's partial-frame bound.
    pub read_buffer: usize,
    /// How file bodies (pulled records) are sent: sendfile, writev from an mmap, or auto
    /// (sendfile for large ranges, the mapping for small ones).
    pub body_send: BodySend,
    /// Requests read and not yet answered before the connection stops reading
    /// (`max_requests_in_flight_per_connection`).
    pub max_requests_in_flight: usize,
    /// Bytes held for the connection (requests in flight, responses queued and not yet
    /// written) before it stops reading (`max_queued_response_bytes_per_connection`).
    pub max_queued_response_bytes: usize,
    /// Long-polling requests parked at once on one connection.
    pub max_parked_requests: usize,
    /// The same two bounds for all of a shard's connections together (the node's
    /// `max_requests_in_flight` and `max_queued_response_bytes` over its shards); see
    /// [`super::backlog`].
    pub shard_max_requests_in_flight: usize,
    pub shard_max_queued_response_bytes: usize,
    /// How long a frame still arriving may go without 64 KiB more of it (`frame_timeout`).
    pub frame_timeout: Duration,
    /// How long a connection may go without a request while none is in flight
    /// (`server_channel_max_idle_time_seconds`).
    pub idle_timeout: Duration,
    /// Connection warnings a shard logs per `warn_interval` before it only counts them
    /// (`connection_warn_burst`, `connection_warn_interval`).
    pub warn_burst: u32,
    pub warn_interval: Duration,
    /// `SO_SNDBUF` of each accepted socket (`server_socket_snd_buf_size`, RocketMQ's
    /// `serverSocketSndBufSize`); 0 keeps the system's (autotuned) size. Small values
    /// make tests reach the backlog bounds without hundreds of MiB of kernel buffering.
    pub socket_send_buffer: usize,
}

/// [`ConnectionLimits::read_buffer`].
pub const READ_BUFFER: usize = 64 * 1024;
/// The default of `connection_warn_burst` ([`ConnectionLimits::warn_burst`]).
pub const WARN_BURST: u32 = 5;
/// The default of `connection_warn_interval` ([`ConnectionLimits::warn_interval`]).
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

impl ConnectionLimits {
    /// How often a connection checks its timeouts: a quarter of the shorter one (at
    /// least 1 ms), so a timeout closes at most that much late.
    fn tick(&self) -> Duration {
        (self.frame_timeout.min(self.idle_timeout) / 4).max(Duration::from_millis(1))
    }
}

/// Why a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The peer closed its side.
    PeerClosed,
    /// The bytes stopped making frames; the connection was closed on purpose. The text is
    /// the error, escaped and truncated (it can carry what the peer sent).
    BadFrame(String),
    /// A frame did not complete within `frame_timeout`.
    FrameTimeout,
    /// No request for `idle_timeout`, none in flight.
    Idle,
    /// Its read buffer would have taken the node past `max_partial_frame_bytes`.
    PartialFrameLimit,
    /// Reading or writing the socket failed.
    Io(String),
    /// The node is shutting down.
    Shutdown,
}

thread_local! {
    /// The shard's limiter for connection-closing warnings: a flood of hostile
    /// connections logs a burst per interval, then one line saying how many were left out.
    static SHARD_WARNINGS: RefCell<Option<WarnLimiter>> = const { RefCell::new(None) };
}

/// Whether this shard logs a connection warning now (see [`SHARD_WARNINGS`]).
fn shard_warning(limits: &ConnectionLimits) -> Warn {
    SHARD_WARNINGS.with(|limiter| {
        limiter
            .borrow_mut()
            .get_or_insert_with(|| WarnLimiter::new(limits.warn_burst, limits.warn_interval))
            .check(std::time::Instant::now())
    })
}

/// Logs a warning about a connection through `decision`; `$($field)*` as for `warn!`.
macro_rules! limited_warn {
    ($decision:expr, $($field:tt)*) => {
        match $decision {
            Warn::Log => tracing::warn!($($field)*),
            Warn::LogAfterSuppressed(left_out) => {
                tracing::warn!(left_out, "{left_out} similar warnings were left out");
                tracing::warn!($($field)*);
            }
            Warn::Suppress => {}
        }
    };
}

/// Serves `stream` until the peer closes it, it breaks, a limit closes it, or `shutdown`
/// turns true, counting its bytes in `traffic`. Not counted against any node-wide bound:
/// the node admits its connections with [`serve_admitted`].
pub async fn serve_connection<C: Connection, H: RequestHandler>(
    stream: C,
    peer: SocketAddr,
    handler: Rc<H>,
    limits: ConnectionLimits,
    traffic: Arc<Traffic>,
    shutdown: watch::Receiver<bool>,
) -> Ended {
    let unbounded = Admission::new(usize::MAX, usize::MAX, limits.warn_interval);
    let admitted = unbounded.admit().expect("an unbounded admission admits");
    serve_admitted(stream, peer, handler, limits, traffic, admitted, shutdown).await
}

/// [`serve_connection`] for a connection `admitted` by the node: it holds its place until
/// it ends, and charges its read buffer to the node's partial-frame bound.
pub async fn serve_admitted<C: Connection, H: RequestHandler>(
    stream: C,
    peer: SocketAddr,
    handler: Rc<H>,
    limits: ConnectionLimits,
    traffic: Arc<Traffic>,
    admitted: Admitted,
    mut shutdown: watch::Receiver<bool>,
) -> Ended {
    // (The transport's accept turned Nagle off: responses are small and latency-bound.)
    if limits.socket_send_buffer > 0 {
        let _ = stream.set_send_buffer(limits.socket_send_buffer);
    }
    let (mut reader, writer) = stream.into_split();
    let (mut session, mut writer_task) = Session::open(peer, handler, limits, traffic, writer);
    let mut partial = admitted.partial_frame(limits.read_buffer);
    // Made once and kept registered: a fresh wait per read would join and leave the watch's
    // waiter list (a mutex) for every batch of requests.
    let stopping = shutdown.wait_for(|stop| *stop);
    tokio::pin!(stopping);
    // One timer for both timeouts, re-armed only when it fires: a timer per read would
    // touch the timer wheel on every batch of requests.
    let mut ticks = tokio::time::interval_at(Instant::now() + limits.tick(), limits.tick());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ended = loop {
        if let Err(ended) = session.take_frames() {
            break ended;
        }
        if let Err(refused) = partial.hold(session.buffer.len()) {
            break session.refuse_partial_frame(refused);
        }
        session.update_pause();
        tokio::select! {
            // Reads first: they are what this loop is for; the others end it or wake it.
            biased;
            read = reader.read_buf(&mut session.buffer), if !session.paused => match read {
                Ok(0) => break Ended::PeerClosed,
                Ok(read) => session.traffic.add_in(read),
                Err(error) => break Ended::Io(error.to_string()),
            },
            () = session.backlog.wait_for_room(), if session.paused => {}
            written = &mut writer_task => {
                break match written {
                    Ok(Err(error)) => Ended::Io(error.to_string()),
                    _ => Ended::Io("the writer stopped".into()),
                };
            }
            _ = &mut stopping => break Ended::Shutdown,
            now = ticks.tick() => if let Some(ended) = session.check_timeouts(now) {
                break ended;
            },
        }
    };
    session.close(ended, reader, writer_task)
}

/// What one connection keeps between turns of its read loop ([`serve_admitted`]).
struct Session<H> {
    peer: SocketAddr,
    handler: Rc<H>,
    limits: ConnectionLimits,
    traffic: Arc<Traffic>,
    backlog: Arc<Backlog>,
    /// Where responses to this connection's requests go (its writer task).
    responses: Outbound,
    /// The connection's number, for [`reply_batch::hold`].
    connection: u64,
    requests: JoinSet<()>,
    buffer: BytesMut,
    /// When the frame clock of the partial frame now in `buffer` last (re)started, and
    /// `buffer.len()` then; `None` when it holds none. It restarts on progress (see
    /// FRAME_PROGRESS) and when a pause ends, so `frame_timeout` bounds a stall, not a frame.
    frame_began: Option<(Instant, usize)>,
    last_request: Instant,
    paused: bool,
    /// Pauses are this connection's own repeated event: logged through its own limiter.
    pause_log: WarnLimiter,
}

/// The writer task of a connection: it ends with an error when the socket breaks.
type WriterTask = tokio::task::JoinHandle<std::io::Result<()>>;

impl<H: RequestHandler> Session<H> {
    /// Registers the connection's writer, starts its writer task and tells the handler
    /// the connection opened.
    fn open<W: crate::net::WriteHalf>(
        peer: SocketAddr,
        handler: Rc<H>,
        limits: ConnectionLimits,
        traffic: Arc<Traffic>,
        writer: W,
    ) -> (Session<H>, WriterTask) {
        let writer: Box<dyn crate::net::WriteHalf> = Box::new(writer);
        let sender = BodySender::new(limits.body_send, traffic.clone(), &*writer);
        let backlog = Backlog::new(
            BacklogBounds {
                connection_requests: limits.max_requests_in_flight,
                connection_bytes: limits.max_queued_response_bytes,
                connection_parked: limits.max_parked_requests,
                shard_requests: limits.shard_max_requests_in_flight,
                shard_bytes: limits.shard_max_queued_response_bytes,
            },
            traffic.clone(),
        );
        let writer = ConnectionWriter::register(writer, traffic.clone(), backlog.clone());
        let connection = writer.number();
        let (responses, queued) = Outbound::new(backlog.clone());
        let writer_task = tokio::task::spawn_local(write_responses(writer, queued, sender));
        handler.connection_opened(peer, responses.clone());
        let session = Session {
            peer,
            handler,
            limits,
            traffic,
            backlog,
            responses,
            connection,
            requests: JoinSet::new(),
            buffer: BytesMut::with_capacity(limits.read_buffer),
            frame_began: None,
            last_request: Instant::now(),
            paused: false,
            pause_log: WarnLimiter::new(limits.warn_burst, limits.warn_interval),
        };
        (session, writer_task)
    }

    /// Takes whole frames while the backlog has room (stopped by a full one, the rest
    /// wait in the buffer, and the socket, until it drains) and starts each request; then
    /// keeps the read buffer's size and the frame clock. Fails on a framing error.
    fn take_frames(&mut self) -> Result<(), Ended> {
        let mut took = false;
        let capacity_before = self.buffer.capacity();
        let mut waiting_for_bytes = false;
        while !self.backlog.is_full() {
            let held = self.buffer.len();
            match take_frame(&mut self.buffer, self.limits.max_frame_len) {
                Ok(Some(request)) => {
                    took = true;
                    self.start_request(request, held - self.buffer.len());
                }
                Ok(None) => {
                    waiting_for_bytes = !self.buffer.is_empty();
                    break;
                }
                Err(error) => {
                    let error = log_safe_max(&error.to_string(), 256).to_string();
                    limited_warn!(shard_warning(&self.limits), peer = %self.peer, %error, "bad frame; closing the connection");
                    return Err(Ended::BadFrame(error));
                }
            }
        }
        if took {
            shrink_read_buffer(&mut self.buffer, capacity_before, self.limits.read_buffer);
        }
        let now = Instant::now();
        if took {
            self.last_request = now;
            self.frame_began = None;
        }
        if waiting_for_bytes {
            match &mut self.frame_began {
                None => self.frame_began = Some((now, self.buffer.len())),
                Some((began, mark)) if self.buffer.len() >= *mark + FRAME_PROGRESS => {
                    (*began, *mark) = (now, self.buffer.len());
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Starts one request of `frame_bytes`: a response frame goes to the handler as the
    /// answer to a call the node made; a request the handler can take at once is handed
    /// over with its [`Reply`]; any other runs in a task of its own.
    fn start_request(&mut self, request: RemotingCommand, frame_bytes: usize) {
        if request.is_response() {
            // The answer to a request the node sent (a relayed admin call).
            self.handler.response_arrived(self.peer, request);
            return;
        }
        let oneway = request.is_oneway();
        let reply = Reply {
            responses: self.responses.clone(),
            oneway,
            connection: self.connection,
            in_flight: self.backlog.start_request(frame_bytes),
        };
        let peer = self.peer;
        let Some(request) = self.handler.clone().handle_now(request, peer, reply) else {
            return;
        };
        // Handed back: `handle_now` dropped its reply, so count the request again for the
        // task that runs it.
        let in_flight = self.backlog.start_request(frame_bytes);
        let handler = self.handler.clone();
        let responses = self.responses.clone();
        let current = in_flight.backlog().cloned();
        self.requests.spawn_local(async move {
            let response = super::backlog::scope(current, handler.handle(request, peer)).await;
            if let (Some(response), false) = (response, oneway) {
                responses.respond(response, in_flight);
            }
        });
    }

    /// The connection's read buffer would take the node past its partial-frame bound.
    fn refuse_partial_frame(&self, refused: super::admission::PartialFrameRefused) -> Ended {
        self.traffic.count(LimitEvent::PartialFrameRefusal);
        limited_warn!(
            shard_warning(&self.limits),
            peer = %self.peer,
            held = refused.held,
            node_total = refused.node_total,
            max_partial_frame_bytes = refused.max,
            "the node holds too many bytes of partial frames; closing the connection"
        );
        Ended::PartialFrameLimit
    }

    /// Reaps finished request tasks, and pauses reading while the backlog is full (counted
    /// and logged as a pause begins); the frame clock restarts when a pause ends.
    fn update_pause(&mut self) {
        // Reap finished request tasks so the set holds only the live ones.
        while self.requests.try_join_next().is_some() {}
        let full = self.backlog.is_full();
        if full && !self.paused {
            self.traffic.count(LimitEvent::ReadPause);
            let decision = self.pause_log.check(std::time::Instant::now());
            if decision != Warn::Suppress {
                tracing::info!(
                    peer = %self.peer,
                    requests_in_flight = self.backlog.requests(),
                    queued_response_bytes = self.backlog.bytes(),
                    "responses are not being taken; reading paused until they drain"
                );
            }
        }
        if self.paused && !full {
            // Time the node was not reading is not the peer's: the frame clock restarts.
            if let Some((began, mark)) = &mut self.frame_began {
                (*began, *mark) = (Instant::now(), self.buffer.len());
            }
        }
        self.paused = full;
    }

    /// The timeouts at tick `now`: a partial frame stalled past `frame_timeout`, or no
    /// request for `idle_timeout` with nothing in flight.
    fn check_timeouts(&mut self, now: Instant) -> Option<Ended> {
        // A paused connection holds whole frames it has not taken, not a late one.
        if let (Some((began, _)), false) = (self.frame_began, self.paused) {
            if now.duration_since(began) >= self.limits.frame_timeout {
                self.traffic.count(LimitEvent::FrameTimeout);
                limited_warn!(
                    shard_warning(&self.limits),
                    peer = %self.peer,
                    held = self.buffer.len(),
                    timeout_ms = self.limits.frame_timeout.as_millis() as u64,
                    "a frame did not complete in time; closing the connection"
                );
                return Some(Ended::FrameTimeout);
            }
        }
        if now.duration_since(self.last_request) < self.limits.idle_timeout {
            return None;
        }
        if self.backlog.requests() > 0 || self.backlog.bytes() > 0 || self.paused {
            // Waiting for its own answers (a parked pull) is not idle, nor is reading a
            // backlog of them slowly (queued bytes, a pause).
            self.last_request = now;
            return None;
        }
        self.traffic.count(LimitEvent::IdleClose);
        tracing::debug!(peer = %self.peer, "idle; closing the connection");
        Some(Ended::Idle)
    }

    /// Ends the connection for `ended`: parked requests end, request tasks are left to
    /// finish (aborted at a shutdown), and the socket and the writer go to the closer.
    fn close<R: 'static>(mut self, ended: Ended, reader: R, writer_task: WriterTask) -> Ended {
        // Parked requests (long polls) end with their connection: nobody is left to answer,
        // and a parked request kept to its poll time would hold its slot and wake for
        // nothing.
        self.backlog.close();
        if ended == Ended::Shutdown {
            self.requests.abort_all();
        } else {
            self.requests.detach_all();
        }
        // The socket closes when both halves are gone (the write half does not close it,
        // see `reply_batch::WriteHalf`), and the writer task's cancellation drops the
        // connection's write state: the closer does both, with the read buffer, a batch
        // per turn, so many connections ending at once do not queue all that work in one
        // turn of the shard ahead of the connections still open (see `closer.rs`).
        let stop_writer = super::closer::AbortOnDrop(writer_task.abort_handle());
        let buffer = std::mem::take(&mut self.buffer);
        if ended == Ended::Shutdown {
            drop(stop_writer);
            drop((reader, buffer));
        } else {
            super::closer::close_later((reader, stop_writer, buffer));
        }
        self.handler.connection_closed(self.peer);
        tracing::debug!(peer = %self.peer, ?ended, "connection ended");
        ended
    }
}

/// Bytes of a partial frame that restart its clock when they arrive: a frame that keeps
/// coming at this much per `frame_timeout` (64 KiB per 30 s by default) is not cut, while
/// a trickle of a few bytes at a time is.
const FRAME_PROGRESS: usize = 64 * 1024;

/// How many times `read_buffer` a read buffer may keep as capacity once it holds little.
const READ_BUFFER_SLACK: usize = 4;

/// After frames were taken from `buffer`: if it had grown (for a large frame) past
/// [`READ_BUFFER_SLACK`] times `read_buffer` and now holds at most `read_buffer` bytes,
/// moves them into a fresh buffer of the normal size. Otherwise the big allocation stays
/// with the connection, uncharged: the next read reclaims it once the frame split off
/// it is dropped. `capacity_before` is the capacity before the frames were split off.
fn shrink_read_buffer(buffer: &mut BytesMut, capacity_before: usize, read_buffer: usize) {
    let limit = READ_BUFFER_SLACK * read_buffer;
    if capacity_before.max(buffer.capacity()) > limit && buffer.len() <= read_buffer {
        let mut fresh = BytesMut::with_capacity(read_buffer);
        fresh.extend_from_slice(buffer);
        *buffer = fresh;
    }
}

/// The writer's buffer: its normal capacity, and the most it encodes before it writes.
/// Past the batch bound the rest stay on the queue as commands: a connection whose socket
/// does not drain then holds one batch encoded, not everything it was answered.
pub(crate) const WRITE_BUFFER: usize = 64 * 1024;
const WRITE_BATCH_BYTES: usize = 2 * WRITE_BUFFER;
/// A write buffer (or reply batch's held bytes) grown past this goes back to
/// [`WRITE_BUFFER`] once written, so a burst's buffer is not kept, uncharged, for the
/// connection's life.
pub(crate) const WRITE_BUFFER_KEEP: usize = 4 * WRITE_BUFFER;

/// Writes responses as they come, batching what is already queued (up to
/// [`WRITE_BATCH_BYTES`]) into one write, behind the bytes a closed reply batch left for
/// it (see [`reply_batch`]); once a write is out, what its frames were charged comes off
/// the connection's backlog.
async fn write_responses(
    writer: Rc<ConnectionWriter>,
    mut queued: mpsc::UnboundedReceiver<Queued>,
    mut sender: BodySender,
) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(WRITE_BUFFER);
    loop {
        let mut next = tokio::select! {
            biased;
            first = queued.recv() => match first {
                Some(first) => Some(first),
                None => return Ok(()),
            },
            () = writer.kicked() => None,
        };
        out.clear();
        let Some((mut half, held)) = writer.begin_write(&mut out) else {
            // Only this task takes the half, and it always hands it back.
            return Err(std::io::Error::other("the connection's write half is gone"));
        };
        // Held bytes were charged exactly; a queued frame carries its charge.
        let mut charged = held;
        let written = async {
            while let Some(Queued {
                command,
                charged: cost,
            }) = next
            {
                charged += cost;
                if encode_response(&command, &mut out) {
                    sender
                        .send_body(&mut *half, &mut out, &command.file_body)
                        .await?;
                }
                next = if out.len() < WRITE_BATCH_BYTES {
                    queued.try_recv().ok()
                } else {
                    None
                };
            }
            sender.write_buffer(&mut *half, &out).await
        }
        .await;
        writer.end_write(half);
        written?;
        writer.backlog().written(charged);
        if out.capacity() > WRITE_BUFFER_KEEP {
            out = Vec::with_capacity(WRITE_BUFFER);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::remoting::frame::test_response as response;

    #[test]
    fn a_read_buffer_grown_for_a_large_frame_returns_to_its_normal_size() {
        let small = 64 * 1024;
        let mut big = response(1);
        big.body = vec![7u8; 4 * 1024 * 1024].into();
        let mut bytes = Vec::new();
        crate::remoting::frame::encode_frame(&big, &mut bytes).unwrap();
        // The start of the next frame stays behind.
        bytes.extend_from_slice(&[0, 0]);
        let mut buffer = BytesMut::with_capacity(small);
        buffer.extend_from_slice(&bytes);
        let capacity_before = buffer.capacity();
        let frame = take_frame(&mut buffer, usize::MAX >> 1).unwrap().unwrap();
        drop(frame);
        shrink_read_buffer(&mut buffer, capacity_before, small);
        // The next read makes room: a buffer still on the big allocation reclaims it here.
        buffer.reserve(1);
        assert!(
            buffer.capacity() <= READ_BUFFER_SLACK * small,
            "a read buffer kept {} bytes of capacity after a {}-byte frame (normal {small})",
            buffer.capacity(),
            bytes.len()
        );
        assert_eq!(&buffer[..], &[0, 0], "the leftover bytes are kept");
    }

    fn reply(responses: &Outbound, oneway: bool, in_flight: InFlight) -> Reply {
        Reply {
            responses: responses.clone(),
            oneway,
            connection: 0,
            in_flight,
        }
    }

    #[test]
    fn a_reply_is_charged_when_queued_and_a_reply_to_a_closed_connection_is_not() {
        let traffic = Arc::new(Traffic::new());
        let backlog = Backlog::new(BacklogBounds::per_connection(8, 1 << 20), traffic.clone());
        let (responses, mut queued) = Outbound::new(backlog.clone());
        let answer = response(1);
        let cost = crate::server::backlog::response_cost(&answer);
        reply(&responses, false, backlog.start_request(0)).send(answer);
        // Queued (and so charged) before a writer on any thread could see it.
        assert_eq!((backlog.requests(), backlog.bytes()), (0, cost));
        assert_eq!(queued.try_recv().map(|q| q.charged).ok(), Some(cost));
        backlog.written(cost);
        // A oneway request, and a reply after the writer has gone, charge nothing.
        reply(&responses, true, backlog.start_request(0)).send(response(2));
        drop(queued);
        reply(&responses, false, backlog.start_request(0)).send(response(3));
        assert_eq!((backlog.requests(), backlog.bytes()), (0, 0));
        let snapshot = traffic.snapshot();
        assert_eq!(
            (snapshot.requests_in_flight, snapshot.queued_response_bytes),
            (0, 0)
        );
    }

    #[test]
    fn replies_never_wait_for_the_writer_and_a_oneway_reply_sends_nothing() {
        // No runtime: a reply that had to wait for room would need one.
        let backlog = Backlog::new(
            BacklogBounds::per_connection(8, 1 << 20),
            Arc::new(Traffic::new()),
        );
        let (responses, mut queued) = Outbound::new(backlog.clone());
        for opaque in 1..=3000 {
            reply(&responses, false, InFlight::untracked()).send(response(opaque));
        }
        reply(&responses, true, InFlight::untracked()).send(response(99));
        drop(responses);
        let mut got = Vec::new();
        while let Ok(entry) = queued.try_recv() {
            got.push(entry.command.opaque);
        }
        assert_eq!(
            got,
            (1..=3000).collect::<Vec<_>>(),
            "every reply is queued, in order"
        );
    }
}
