//! The per-connection bound on work a peer has caused and not yet taken back: requests
//! read and not yet answered, and response bytes queued and not yet written to its socket.
//!
//! A peer that sends requests and never reads its responses would otherwise make the node
//! read, start and answer requests without end while the answers pile up in memory. The
//! connection's read loop asks [`Backlog::is_full`] before it takes the next frame and
//! before it reads; while full it stops reading, so the peer's own socket buffers fill
//! and TCP pushes back on it. Reading resumes when the answers drain.
//!
//! What is counted, and when:
//!
//! - A request is in flight from the moment its frame is taken from the read buffer until
//!   its response is queued for the socket, or it ends without one (a oneway request, a
//!   [`Reply`](super::connection::Reply) dropped unused). [`InFlight`] is that span: one
//!   guard per request, released on drop, so no path can forget it.
//! - Response bytes are counted from the moment a response is queued (encoded into a
//!   reply batch's held bytes, or put on the writer queue) until the socket took them.
//!   Held bytes count exactly; a response on the writer queue counts
//!   [`response_cost`], and the writer subtracts the same figure once it is written, so
//!   the count returns to zero when nothing is queued.
//!
//! So the bytes bound is reached, not held to the byte: requests already in flight when
//! the reader stops are still answered into the queue, so a connection queues at most
//! `max_bytes` plus the responses of `max_requests` requests.
//!
//! Invariants: the counts never go below zero (asserted, with the values); a response is
//! counted before its request's guard is released, so the read loop never sees a
//! momentary gap. Both counts are atomics: a reply can be sent from another shard.
//! The shard-wide gauges in [`Traffic`] move with every change, and whatever is still
//! counted when the last holder lets go (the connection broke with responses queued) is
//! taken off them then.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::command::RemotingCommand;
use super::traffic::Traffic;

/// The header bytes a queued response is charged for besides its body: a response frame's
/// prefix and a typical JSON header (code, opaque, flag, a few extFields).
pub const RESPONSE_HEADER_COST: usize = 256;

/// What a response on the writer queue is charged: its header estimate, remark and body
/// bytes (file bodies included: they are what the socket must take).
pub fn response_cost(response: &RemotingCommand) -> usize {
    RESPONSE_HEADER_COST
        + response.remark.as_ref().map_or(0, |remark| remark.len())
        + response.body.len()
        + response.file_body.len() as usize
}

/// One connection's counts and bounds; shared by its reader, writer and replies.
#[derive(Debug)]
pub struct Backlog {
    requests: AtomicUsize,
    /// Of `requests`, those parked (a long-polling pull waiting for a message). They count
    /// for the idle check but not against `max_requests`: a client sharing one connection
    /// across many idle queues parks one pull per queue, and pausing its reads would leave
    /// its sends and heartbeats unread until a pull times out. They are bounded per shard
    /// by `max_parked_pulls` instead.
    parked: AtomicUsize,
    bytes: AtomicUsize,
    max_requests: usize,
    max_bytes: usize,
    /// The reader waits on it; set while it does, so others notify only then.
    reader_waiting: AtomicBool,
    drained: Notify,
    traffic: Arc<Traffic>,
}

impl Backlog {
    /// A backlog of at most `max_requests` requests in flight (at least 1) and
    /// `max_bytes` queued response bytes (at least 1), counted into `traffic`'s gauges.
    pub fn new(max_requests: usize, max_bytes: usize, traffic: Arc<Traffic>) -> Arc<Backlog> {
        Arc::new(Backlog {
            requests: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            max_requests: max_requests.max(1),
            max_bytes: max_bytes.max(1),
            reader_waiting: AtomicBool::new(false),
            drained: Notify::new(),
            traffic,
        })
    }

    /// Counts a request read; the guard counts it done when dropped.
    pub fn start_request(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.traffic.add_requests_in_flight(1);
        InFlight(Some(self.clone()))
    }

    /// Counts `bytes` of a response queued for the socket.
    pub fn queued(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.bytes.fetch_add(bytes, Ordering::SeqCst);
        self.traffic.add_queued_response_bytes(bytes as i64);
    }

    /// Counts `bytes` of queued responses written (or dropped with the connection).
    pub fn written(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let before = self.bytes.fetch_sub(bytes, Ordering::SeqCst);
        assert!(
            before >= bytes,
            "{bytes} response bytes written with only {before} queued"
        );
        self.traffic.add_queued_response_bytes(-(bytes as i64));
        self.wake_reader();
    }

    fn request_done(&self) {
        let before = self.requests.fetch_sub(1, Ordering::SeqCst);
        assert!(before >= 1, "a request ended with {before} in flight");
        self.traffic.add_requests_in_flight(-1);
        self.wake_reader();
    }

    fn wake_reader(&self) {
        if self.reader_waiting.load(Ordering::SeqCst) {
            self.drained.notify_one();
        }
    }

    /// Requests in flight now.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Response bytes queued now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }

    /// Requests parked now (see [`Backlog::park`]).
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Counts one of this connection's requests as parked until the guard drops.
    pub fn park(self: &Arc<Self>) -> Parked {
        self.parked.fetch_add(1, Ordering::SeqCst);
        // Parking makes room: a reader paused on the requests bound must resume now, not
        // when some pull times out.
        self.wake_reader();
        Parked(self.clone())
    }

    /// True when the connection must not read: a bound is reached. Parked requests do
    /// not count against the requests bound.
    pub fn is_full(&self) -> bool {
        // Parked first: a parked request is in `requests` until after it unparks, so this
        // order never sees more parked than in flight, except when both dropped between
        // the reads (hence saturating).
        let parked = self.parked();
        self.requests().saturating_sub(parked) >= self.max_requests
            || self.bytes() >= self.max_bytes
    }

    /// Waits until the backlog is below both bounds. Only the connection's reader calls it.
    pub async fn wait_for_room(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the flag is set and the counts are read again: a release
            // between the check and the wait leaves a permit, never a lost wake-up.
            drained.as_mut().enable();
            self.reader_waiting.store(true, Ordering::SeqCst);
            if !self.is_full() {
                self.reader_waiting.store(false, Ordering::SeqCst);
                return;
            }
            drained.await;
            self.reader_waiting.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        // Nothing can add any more: take what is left off the shard's gauges.
        let requests = *self.requests.get_mut();
        let bytes = *self.bytes.get_mut();
        self.traffic.add_requests_in_flight(-(requests as i64));
        self.traffic.add_queued_response_bytes(-(bytes as i64));
    }
}

/// One request in flight on a connection (see [`Backlog::start_request`]).
#[derive(Debug)]
pub struct InFlight(Option<Arc<Backlog>>);

impl InFlight {
    /// A guard counting nothing, for replies made outside a connection (tests, tools).
    pub fn untracked() -> InFlight {
        InFlight(None)
    }

    /// Counts `bytes` of the request's response queued, then ends the request: in that
    /// order, so the reader never sees the work vanish and come back.
    pub fn answered(mut self, bytes: usize) -> Option<Arc<Backlog>> {
        let backlog = self.0.take()?;
        backlog.queued(bytes);
        backlog.request_done();
        Some(backlog)
    }

    /// The connection's backlog, if any.
    pub fn backlog(&self) -> Option<&Arc<Backlog>> {
        self.0.as_ref()
    }
}

/// One parked request (see [`Backlog::park`]); unparks on drop.
#[derive(Debug)]
pub struct Parked(Arc<Backlog>);

impl Drop for Parked {
    fn drop(&mut self) {
        let before = self.0.parked.fetch_sub(1, Ordering::SeqCst);
        assert!(before >= 1, "a request unparked with {before} parked");
        // Takes room, makes none: nothing to wake; the reader re-checks before each frame.
    }
}

tokio::task_local! {
    /// The backlog of the connection whose request the current task runs, so the handler
    /// can mark it parked without the request carrying its connection.
    static CURRENT: Arc<Backlog>;
}

/// Runs `request` (a request task's work) with `backlog` as its connection's backlog.
pub async fn scope<F: std::future::Future>(backlog: Option<Arc<Backlog>>, request: F) -> F::Output {
    match backlog {
        Some(backlog) => CURRENT.scope(backlog, request).await,
        None => request.await,
    }
}

/// Marks the request the current task runs as parked until the guard drops; `None`
/// outside a connection's request task (tests, tools).
pub fn park_current() -> Option<Parked> {
    CURRENT.try_with(|backlog| backlog.park()).ok()
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(backlog) = self.0.take() {
            backlog.request_done();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn backlog(requests: usize, bytes: usize) -> (Arc<Backlog>, Arc<Traffic>) {
        let traffic = Arc::new(Traffic::new());
        (Backlog::new(requests, bytes, traffic.clone()), traffic)
    }

    #[test]
    fn requests_count_until_answered_or_dropped_and_fill_at_the_bound() {
        let (backlog, traffic) = backlog(2, 1000);
        let first = backlog.start_request();
        assert!(!backlog.is_full());
        let second = backlog.start_request();
        assert!(backlog.is_full(), "2 of 2 in flight");
        assert_eq!(traffic.snapshot().requests_in_flight, 2);
        drop(first);
        assert!(!backlog.is_full());
        let backlog_again = second.answered(300).unwrap();
        assert_eq!((backlog.requests(), backlog.bytes()), (0, 300));
        assert_eq!(traffic.snapshot().queued_response_bytes, 300);
        backlog_again.queued(700);
        assert!(backlog.is_full(), "1000 of 1000 bytes queued");
        backlog.written(1000);
        assert!(!backlog.is_full());
        assert_eq!(traffic.snapshot().queued_response_bytes, 0);
    }

    #[test]
    fn what_is_left_when_the_connection_goes_comes_off_the_gauges() {
        let (backlog, traffic) = backlog(10, 1000);
        let request = backlog.start_request();
        backlog.queued(500);
        drop(backlog);
        assert_eq!(traffic.snapshot().queued_response_bytes, 500, "still held");
        drop(request);
        let snapshot = traffic.snapshot();
        assert_eq!(
            (snapshot.requests_in_flight, snapshot.queued_response_bytes),
            (0, 0)
        );
    }

    #[test]
    fn parked_requests_do_not_fill_the_bound_and_parking_wakes_the_reader() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (backlog, _) = backlog(2, 1000);
            let first = backlog.start_request();
            let second = backlog.start_request();
            assert!(backlog.is_full());
            let parked = backlog.park();
            tokio::time::timeout(Duration::from_secs(5), backlog.wait_for_room())
                .await
                .expect("parking wakes the reader");
            let third = backlog.start_request();
            assert!(backlog.is_full(), "2 of 2 unparked in flight");
            assert_eq!((backlog.requests(), backlog.parked()), (3, 1));
            drop(parked);
            drop((first, second, third));
            assert_eq!((backlog.requests(), backlog.parked()), (0, 0));
        });
    }

    #[test]
    #[should_panic(expected = "written with only")]
    fn writing_more_than_was_queued_is_a_bug() {
        let (backlog, _) = backlog(10, 1000);
        backlog.queued(10);
        backlog.written(11);
    }

    #[test]
    fn the_reader_wakes_when_room_is_made_from_another_thread() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (backlog, _) = backlog(1, 1000);
            let request = backlog.start_request();
            assert!(backlog.is_full());
            let other = std::thread::spawn(move || {
                // Whenever this runs, before or during the wait, the reader must wake.
                drop(request);
            });
            tokio::time::timeout(Duration::from_secs(5), backlog.wait_for_room())
                .await
                .expect("the reader wakes once the request is done");
            other.join().unwrap();
            assert!(!backlog.is_full());
        });
    }
}
