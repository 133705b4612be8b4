//! Responses written straight to their sockets at the end of a batch of answers, without
//! a wake-up of each connection's writer task.
//!
//! The store answers a whole appender turn of sends at once. Through the writer tasks
//! that costs one task wake-up and poll per connection per turn, which for a single
//! producer is one extra hop on every round trip (about 1.4 µs of node CPU per message,
//! measured by adding a hop). Inside [`batch_replies`], a [`Reply`](super::connection::Reply)
//! for a connection of this thread is encoded into that connection's held bytes instead;
//! when the batch closes, each connection's held bytes go out with one `try_write`, so
//! responses to one connection from one turn still leave in one write.
//!
//! ```text
//!   appender turn ─ batch_replies ─┬─ Reply::send ─▶ held bytes of conn A   ┐ at close:
//!                                  ├─ Reply::send ─▶ held bytes of conn A   ├ try_write
//!                                  └─ Reply::send ─▶ held bytes of conn B   ┘ per conn
//!   anything else (no batch open, another thread's connection, a file body):
//!                                     Reply::send ─▶ writer queue ─▶ writer task
//! ```
//!
//! Invariants:
//! - Frames never interleave on a socket: the writer task takes the write half for as
//!   long as it writes; a batch that closes meanwhile leaves its bytes held and wakes
//!   the writer task, which sends held bytes before anything else it encodes. Bytes a
//!   `try_write` could not take stay held for the writer task too.
//! - Held bytes are whole frames, in the order they were answered.
//! - Everything here is thread-local: a connection is only written directly from its
//!   own shard's thread; a reply answered on another shard (a forwarded send) takes the
//!   writer queue, which is `Send`.
//! - A batch that unwinds (a panic in an answer) still closes and sends what it holds.
//! - Held bytes are charged to the connection's [`Backlog`] when they are encoded and
//!   taken off it as the socket takes them (here, or in the writer task after
//!   `ConnectionWriter::begin_write` handed them over), so a peer that does not read
//!   cannot make them grow past the backlog's bound by much: its reader stops.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::backlog::Backlog;
use super::traffic::Traffic;
use crate::net;
use crate::remoting::command::RemotingCommand;

/// Node-wide connection numbers, so a number never names two connections on any thread.
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's connections, by number.
    static WRITERS: RefCell<HashMap<u64, Weak<ConnectionWriter>>> = RefCell::new(HashMap::new());
    /// The connections with held bytes in the open batch; `None` when no batch is open.
    static OPEN_BATCH: RefCell<Option<Vec<Rc<ConnectionWriter>>>> = const { RefCell::new(None) };
}

/// A connection's write half that does not end the connection when dropped where the
/// backend allows it ([`net::WriteHalf::release`]): a kernel socket shuts down when its read
/// half goes, which the connection hands to the closer (`closer.rs`). Dropping a plain
/// `OwnedWriteHalf` shuts the socket's writing down on the spot, and on loopback the kernel
/// then delivers the FIN to the peer in the same call: with 500 connections ending at once,
/// those calls were a fifth of the shard's time in the turns that stalled another
/// connection for 10-25 ms (issue 10, `examples/client_sweep_stall.rs`).
pub(crate) struct WriteHalf(Option<Box<dyn net::WriteHalf>>);

impl WriteHalf {
    fn new(half: Box<dyn net::WriteHalf>) -> WriteHalf {
        WriteHalf(Some(half))
    }
}

impl std::ops::Deref for WriteHalf {
    type Target = dyn net::WriteHalf;

    fn deref(&self) -> &(dyn net::WriteHalf + 'static) {
        self.0
            .as_deref()
            .expect("a write half is only taken by its drop")
    }
}

impl std::ops::DerefMut for WriteHalf {
    fn deref_mut(&mut self) -> &mut (dyn net::WriteHalf + 'static) {
        self.0
            .as_deref_mut()
            .expect("a write half is only taken by its drop")
    }
}

impl Drop for WriteHalf {
    fn drop(&mut self) {
        if let Some(half) = self.0.take() {
            half.release();
        }
    }
}

/// The write side of one connection, shared by its writer task and the batches.
pub(crate) struct ConnectionWriter {
    number: u64,
    /// The socket's write half; `None` while the writer task has it (it is writing, and
    /// nothing else may).
    half: RefCell<Option<WriteHalf>>,
    /// Encoded frames waiting for the socket.
    held: RefCell<Vec<u8>>,
    /// Already listed in the open batch.
    in_batch: Cell<bool>,
    /// Tells the writer task that `held` has bytes for it.
    kick: Notify,
    traffic: Arc<Traffic>,
    /// What the connection has queued and not written, held bytes included.
    backlog: Arc<Backlog>,
}

impl ConnectionWriter {
    /// Registers a connection's write half with this thread.
    pub(crate) fn register(
        half: Box<dyn net::WriteHalf>,
        traffic: Arc<Traffic>,
        backlog: Arc<Backlog>,
    ) -> Rc<ConnectionWriter> {
        let writer = Rc::new(ConnectionWriter {
            number: NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed),
            half: RefCell::new(Some(WriteHalf::new(half))),
            held: RefCell::new(Vec::new()),
            in_batch: Cell::new(false),
            kick: Notify::new(),
            traffic,
            backlog,
        });
        WRITERS.with(|writers| {
            writers
                .borrow_mut()
                .insert(writer.number, Rc::downgrade(&writer))
        });
        writer
    }

    /// The number replies use to find this connection.
    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// The connection's backlog, which the writer task takes written bytes off.
    pub(crate) fn backlog(&self) -> &Backlog {
        &self.backlog
    }

    /// Waits until held bytes are waiting for the writer task.
    pub(crate) async fn kicked(&self) {
        self.kick.notified().await
    }

    /// Starts a write by the writer task: the held bytes move to the front of `out`
    /// (they were answered first), and the task takes the write half, so no batch writes
    /// until it is handed back with [`ConnectionWriter::end_write`]; with it, how many
    /// held bytes moved (still charged to the backlog: the caller takes them off once
    /// written). `None` if a write is already under way (the writer task is the only
    /// caller, one write at a time).
    pub(crate) fn begin_write(&self, out: &mut Vec<u8>) -> Option<(WriteHalf, usize)> {
        let mut held = self.held.borrow_mut();
        let moved = held.len();
        if !held.is_empty() {
            held.extend_from_slice(out);
            std::mem::swap(&mut *held, out);
            held.clear();
            // A burst's buffer is not kept, uncharged, for the connection's life.
            held.shrink_to(super::connection::WRITE_BUFFER_KEEP);
        }
        let half = self.half.borrow_mut().take()?;
        Some((half, moved))
    }

    /// Ends a write begun with [`ConnectionWriter::begin_write`].
    pub(crate) fn end_write(&self, half: WriteHalf) {
        *self.half.borrow_mut() = Some(half);
    }

    /// Sends the held bytes now if the writer task is not writing; whatever is left
    /// (all of it, if it is) goes to the writer task.
    fn flush_held(&self) {
        let mut held = self.held.borrow_mut();
        if held.is_empty() {
            return;
        }
        if let Some(half) = self.half.borrow().as_ref() {
            // On an error (a full socket buffer, or one the writer task will meet and
            // report) the bytes stay held.
            if let Ok(written) = half.try_write(&held) {
                self.traffic.add_copied(written);
                self.backlog.written(written);
                held.drain(..written);
            }
        }
        if !held.is_empty() {
            self.kick.notify_one();
        }
    }
}

impl Drop for ConnectionWriter {
    fn drop(&mut self) {
        // `try_with`: the thread's table may already be gone when a runtime shuts down.
        let _ = WRITERS.try_with(|writers| {
            if let Ok(mut writers) = writers.try_borrow_mut() {
                writers.remove(&self.number);
            }
        });
    }
}

/// Runs `answers` with replies to this thread's connections held back, then sends each
/// connection's held responses in one write. Nested calls join the outer batch.
pub fn batch_replies(answers: &mut dyn FnMut()) {
    let opened = OPEN_BATCH.with(|batch| {
        let mut batch = batch.borrow_mut();
        batch.is_none().then(|| *batch = Some(Vec::new())).is_some()
    });
    if !opened {
        answers();
        return;
    }
    /// Closes the batch however `answers` ends.
    struct Close;
    impl Drop for Close {
        fn drop(&mut self) {
            let writers = OPEN_BATCH.with(|batch| batch.borrow_mut().take().unwrap_or_default());
            for writer in writers {
                writer.in_batch.set(false);
                writer.flush_held();
            }
        }
    }
    let _close = Close;
    answers();
}

/// Holds `response` (encoded) for connection `number` in the open batch; false when it
/// must take the writer queue instead (no batch open, not this thread's connection, or a
/// file body to send).
pub(crate) fn hold(number: u64, response: &RemotingCommand) -> bool {
    if !response.file_body.is_empty() {
        return false;
    }
    OPEN_BATCH.with(|batch| {
        let mut batch = batch.borrow_mut();
        let Some(batch) = batch.as_mut() else {
            return false;
        };
        let writer = WRITERS.with(|writers| writers.borrow().get(&number).and_then(Weak::upgrade));
        let Some(writer) = writer else {
            return false;
        };
        let mut held = writer.held.borrow_mut();
        let before = held.len();
        crate::remoting::frame::encode_response(response, &mut held);
        writer.backlog.queued(held.len() - before);
        drop(held);
        if !writer.in_batch.replace(true) {
            batch.push(writer);
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::BytesMut;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::remoting::frame::test_response as response;
    use crate::remoting::frame::{take_frame, DEFAULT_MAX_FRAME_LEN};

    fn run<F: std::future::Future>(future: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&runtime, future)
    }

    /// A registered connection (its write half) and the peer that reads from it.
    async fn connection() -> (Rc<ConnectionWriter>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (_read, write) = server.into_split();
        let traffic = Arc::new(Traffic::new());
        let backlog = Backlog::new(
            crate::server::backlog::BacklogBounds::per_connection(1024, 1 << 20),
            traffic.clone(),
        );
        let writer = ConnectionWriter::register(Box::new(write), traffic, backlog);
        (writer, peer)
    }

    /// Reads frames from `peer` until `count` have come, within a bound.
    async fn read_frames(peer: &mut TcpStream, count: usize) -> Vec<i32> {
        let mut buffer = BytesMut::new();
        let mut opaques = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), async {
            while opaques.len() < count {
                while let Some(frame) = take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN).unwrap() {
                    opaques.push(frame.opaque);
                }
                if opaques.len() < count {
                    peer.read_buf(&mut buffer).await.unwrap();
                }
            }
        })
        .await
        .expect("the frames arrive");
        opaques
    }

    fn nothing_to_read(peer: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(peer.try_read(&mut byte), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock)
    }

    #[test]
    fn a_batch_sends_each_connections_responses_at_close_in_one_write() {
        run(async {
            let (writer, mut peer) = connection().await;
            let number = writer.number();
            // No writer task exists here: whatever arrives was written by the batch.
            batch_replies(&mut || {
                for opaque in 1..=3 {
                    assert!(hold(number, &response(opaque)));
                }
                assert!(writer.in_batch.get(), "listed once in the batch");
                assert!(!writer.held.borrow().is_empty());
            });
            assert!(writer.held.borrow().is_empty(), "all of it was written");
            assert_eq!(read_frames(&mut peer, 3).await, vec![1, 2, 3]);
            assert!(nothing_to_read(&peer));
        });
    }

    #[test]
    fn replies_outside_a_batch_or_for_another_connection_take_the_writer_queue() {
        run(async {
            let (writer, _peer) = connection().await;
            let number = writer.number();
            assert!(!hold(number, &response(1)), "no batch is open");
            batch_replies(&mut || {
                assert!(!hold(number + 1_000_000, &response(2)), "unknown");
                let mut with_file = response(3);
                with_file
                    .file_body
                    .push(crate::io::file_body::BodyChunk::Bytes(
                        bytes::Bytes::from_static(b"x"),
                    ));
                assert!(!hold(number, &with_file), "a file body");
            });
            drop(writer);
            batch_replies(&mut || {
                assert!(!hold(number, &response(4)), "a closed connection");
            });
        });
    }

    #[test]
    fn a_busy_writer_task_gets_the_held_bytes_first_and_nothing_interleaves() {
        run(async {
            let (writer, mut peer) = connection().await;
            let number = writer.number();
            let mut out = Vec::new();
            let (half, _) = writer.begin_write(&mut out).unwrap();
            assert!(
                writer.begin_write(&mut out).is_none(),
                "one write at a time"
            );
            batch_replies(&mut || {
                assert!(hold(number, &response(7)));
            });
            assert!(
                nothing_to_read(&peer),
                "nothing written while the task writes"
            );
            // The task is told, and takes the held frame ahead of its own.
            tokio::time::timeout(Duration::from_secs(5), writer.kicked())
                .await
                .expect("the writer task is kicked");
            writer.end_write(half);
            let mut own = Vec::new();
            crate::remoting::frame::encode_response(&response(8), &mut own);
            let (half, moved) = writer.begin_write(&mut own).unwrap();
            assert_eq!(
                writer.backlog().bytes(),
                moved,
                "the held frame is still charged"
            );
            half.try_write(&own).unwrap();
            writer.end_write(half);
            assert_eq!(read_frames(&mut peer, 2).await, vec![7, 8]);
        });
    }
}
