//! Serving one TCP connection on its shard: bytes in, frames out, requests dispatched.
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
//! - A oneway request (flag bit 1) gets no response, whatever the handler returns.
//! - A framing error (bad or huge length, unknown serialize type, undecodable header)
//!   means the stream is out of step and cannot be resynchronised: it is logged at warn
//!   with the peer address and the connection is closed. Only this connection is touched.
//! - Every whole request read before the connection ends is carried out, even when the
//!   peer closes right after sending it: a producer that sends oneway messages and hangs
//!   up loses none of them (Java's broker behaves the same). Their responses, if any, are
//!   dropped. So when the peer closes or the stream breaks, request tasks still running
//!   are left to finish on their own (a parked pull ends at its suspend timeout, at most
//!   `max_suspend`); only a node shutdown aborts them (the store still finishes every put
//!   already queued). The writer task goes with the connection in every case.
//!
//! This file knows nothing about what a request means: that is the [`RequestHandler`]'s job
//! (the broker, in production). It is shard-local: it uses `spawn_local` and `Rc`.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::body_send::{BodySend, BodySender};
use super::command::RemotingCommand;
use super::frame::{encode_frame_header, take_frame};
use super::reply_batch::{self, ConnectionWriter};
use super::traffic::Traffic;

/// Frames to write on a connection: responses, and requests the node itself sends to the
/// client (NOTIFY_CONSUMER_IDS_CHANGED). `Send`, so any shard can write to any connection.
pub type Outbound = mpsc::Sender<RemotingCommand>;

/// What a connection needs from the code that gives requests their meaning.
pub trait RequestHandler: 'static {
    /// A connection from `peer` opened; `outbound` writes frames to it until it closes.
    fn connection_opened(&self, _peer: SocketAddr, _outbound: Outbound) {}

    /// The connection from `peer` closed, for whatever reason.
    fn connection_closed(&self, _peer: SocketAddr) {}

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
/// connection's writer. Dropping it unused sends nothing.
pub struct Reply {
    responses: Outbound,
    oneway: bool,
    /// The connection's number, for [`reply_batch::hold`].
    connection: u64,
}

impl Reply {
    /// Queues `response` for the writer; a oneway request's response is dropped, as is any
    /// response after the connection has gone.
    pub fn send(self, response: RemotingCommand) {
        if self.oneway {
            return;
        }
        // Answered inside a batch on the connection's own shard: written when it closes.
        if reply_batch::hold(self.connection, &response) {
            return;
        }
        match self.responses.try_send(response) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(response)) => {
                // The writer is that far behind: wait for room in a task rather than here,
                // where the caller (the store's appender) must not block. A plain runtime
                // task, not a local one: a reply can be dropped (and answer "unavailable")
                // wherever a store or mailbox is torn down. Without a runtime there is no
                // writer left to wait for.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let responses = self.responses;
                    runtime.spawn(async move {
                        let _ = responses.send(response).await;
                    });
                }
            }
        }
    }
}

/// Limits of one connection; every one is a named setting with a default.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Largest frame accepted (Java's `frameMaxLength`, 16 MiB).
    pub max_frame_len: usize,
    /// Responses waiting for the writer before handler tasks wait for room.
    pub response_queue: usize,
    /// Initial read buffer capacity.
    pub read_buffer: usize,
    /// How file bodies (pulled records) are sent: sendfile, writev from an mmap, or auto
    /// (sendfile for large ranges, the mapping for small ones).
    pub body_send: BodySend,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_frame_len: super::frame::DEFAULT_MAX_FRAME_LEN,
            response_queue: 1024,
            read_buffer: 64 * 1024,
            body_send: BodySend::default(),
        }
    }
}

/// Why a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The peer closed its side.
    PeerClosed,
    /// The bytes stopped making frames; the connection was closed on purpose.
    BadFrame(String),
    /// Reading or writing the socket failed.
    Io(String),
    /// The node is shutting down.
    Shutdown,
}

/// Serves `stream` until the peer closes it, it breaks, or `shutdown` turns true,
/// counting its bytes in `traffic`.
pub async fn serve_connection<H: RequestHandler>(
    stream: TcpStream,
    peer: SocketAddr,
    handler: Rc<H>,
    limits: ConnectionLimits,
    traffic: Arc<Traffic>,
    mut shutdown: watch::Receiver<bool>,
) -> Ended {
    // Responses are small and latency-bound; do not let Nagle hold them back.
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let writer = ConnectionWriter::register(writer, traffic.clone());
    let connection = writer.number();
    let (responses, queued) = mpsc::channel(limits.response_queue.max(1));
    let sender = BodySender::new(limits.body_send, traffic.clone());
    let mut writer_task = tokio::task::spawn_local(write_responses(writer, queued, sender));
    handler.connection_opened(peer, responses.clone());
    let mut requests = JoinSet::new();
    let mut buffer = BytesMut::with_capacity(limits.read_buffer);
    // Made once and kept registered: a fresh wait per read would join and leave the watch's
    // waiter list (a mutex) for every batch of requests.
    let stopping = shutdown.wait_for(|stop| *stop);
    tokio::pin!(stopping);
    let ended = 'serve: loop {
        loop {
            match take_frame(&mut buffer, limits.max_frame_len) {
                Ok(Some(request)) => {
                    if request.is_response() {
                        // We send no requests to clients yet, so nothing can be waiting.
                        tracing::debug!(%peer, opaque = request.opaque, "unexpected response dropped");
                        continue;
                    }
                    let reply = Reply {
                        responses: responses.clone(),
                        oneway: request.is_oneway(),
                        connection,
                    };
                    let Some(request) = handler.clone().handle_now(request, peer, reply) else {
                        continue;
                    };
                    let handler = handler.clone();
                    let responses = responses.clone();
                    requests.spawn_local(async move {
                        let oneway = request.is_oneway();
                        let response = handler.handle(request, peer).await;
                        if let (Some(response), false) = (response, oneway) {
                            // A closed channel means the connection is going away.
                            let _ = responses.send(response).await;
                        }
                    });
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%peer, %error, "bad frame; closing the connection");
                    break 'serve Ended::BadFrame(error.to_string());
                }
            }
        }
        // Reap finished request tasks so the set holds only the live ones.
        while requests.try_join_next().is_some() {}
        tokio::select! {
            // Reads first: they are what this loop is for; the other two end it once.
            biased;
            read = reader.read_buf(&mut buffer) => match read {
                Ok(0) => break Ended::PeerClosed,
                Ok(read) => traffic.add_in(read),
                Err(error) => break Ended::Io(error.to_string()),
            },
            written = &mut writer_task => {
                break match written {
                    Ok(Err(error)) => Ended::Io(error.to_string()),
                    _ => Ended::Io("the writer stopped".into()),
                };
            }
            _ = &mut stopping => break Ended::Shutdown,
        }
    };
    if ended == Ended::Shutdown {
        requests.abort_all();
    } else {
        requests.detach_all();
    }
    writer_task.abort();
    handler.connection_closed(peer);
    tracing::debug!(%peer, ?ended, "connection ended");
    ended
}

/// Writes responses as they come, batching whatever is already queued into one write,
/// behind the bytes a closed reply batch left for it (see [`reply_batch`]).
async fn write_responses(
    writer: Rc<ConnectionWriter>,
    mut queued: mpsc::Receiver<RemotingCommand>,
    mut sender: BodySender,
) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(64 * 1024);
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
        let Some(mut half) = writer.begin_write(&mut out) else {
            // Only this task takes the half, and it always hands it back.
            return Err(std::io::Error::other("the connection's write half is gone"));
        };
        let written = async {
            while let Some(response) = next {
                if encode_response(&response, &mut out) {
                    sender
                        .send_body(&mut half, &mut out, &response.file_body)
                        .await?;
                }
                next = queued.try_recv().ok();
            }
            sender.write_buffer(&mut half, &out).await
        }
        .await;
        writer.end_write(half);
        written?;
    }
}

/// Appends the frame header of `response` (its length counting the file body too) and its
/// byte body; true when its file body must follow.
pub(super) fn encode_response(response: &RemotingCommand, out: &mut Vec<u8>) -> bool {
    let body_len = response.body.len() + response.file_body.len() as usize;
    match encode_frame_header(response, body_len, out) {
        Ok(()) => {
            out.extend_from_slice(&response.body);
            !response.file_body.is_empty()
        }
        Err(error) => {
            // Only a header beyond the format's limits gets here; tell the client instead
            // of leaving its request to time out.
            tracing::error!(opaque = response.opaque, %error, "cannot encode a response");
            let mut fallback = response.clone();
            fallback.code = super::codes::response::SYSTEM_ERROR;
            fallback.ext_fields.clear();
            fallback.remark = Some(format!("the response could not be encoded: {error}"));
            fallback.body = bytes::Bytes::new();
            fallback.file_body = Default::default();
            let _ = encode_frame_header(&fallback, 0, out);
            false
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A SEND_MESSAGE response with `opaque` (the reply-batch tests use it too).
    pub(in crate::remoting) fn response(opaque: i32) -> RemotingCommand {
        let mut request = RemotingCommand::request(10, Default::default());
        request.opaque = opaque;
        RemotingCommand::response_to(&request, 0, None)
    }

    #[test]
    fn a_reply_waits_for_room_instead_of_dropping_and_a_oneway_reply_sends_nothing() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&runtime, async {
            let (responses, mut queued) = mpsc::channel(1);
            for opaque in 1..=3 {
                Reply {
                    responses: responses.clone(),
                    oneway: false,
                    connection: 0,
                }
                .send(response(opaque));
            }
            Reply {
                responses: responses.clone(),
                oneway: true,
                connection: 0,
            }
            .send(response(99));
            drop(responses);
            let mut got = Vec::new();
            while let Some(response) = queued.recv().await {
                got.push(response.opaque);
            }
            got.sort_unstable();
            assert_eq!(got, vec![1, 2, 3], "a full queue loses nothing");
        });
    }
}
