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
//!   guard per request, released on drop, so no path can forget it. While in flight it
//!   holds bytes too: its frame and [`REQUEST_COST`] for its decoded header and task,
//!   counted in the same bytes bound as queued responses (a 4 MiB message waiting for
//!   its fsync is memory as much as a 4 MiB answer waiting for the socket).
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
//! The shard bounds ([`BacklogBounds::shard_requests`], [`BacklogBounds::shard_bytes`])
//! cap all of a shard's connections together, whatever their number: once the shard's
//! gauges are at one, a connection that holds anything of that kind stops reading too,
//! until its own count changes (each change wakes its reader, which looks again). A
//! connection holding nothing can always take one frame, so a flood of connections that
//! never read cannot starve one that does, and the shard holds at most its bound plus
//! one request per connection.
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

use super::traffic::Traffic;
use crate::remoting::command::RemotingCommand;

/// The header bytes a queued response is charged for besides its body: a response frame's
/// prefix and a typical JSON header (code, opaque, flag, a few extFields).
pub const RESPONSE_HEADER_COST: usize = 256;

/// What a request in flight is charged besides its frame: its decoded header fields and
/// its task, measured at about 1 to 2.5 KiB (issue 10's heap profile of 200 connections
/// that never read).
pub const REQUEST_COST: usize = 2048;

/// The bounds a [`Backlog`] enforces: its connection's own, and its shard's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BacklogBounds {
    /// Requests in flight on the connection, parked ones not counted (at least 1).
    pub connection_requests: usize,
    /// Bytes the connection holds: requests in flight and responses queued (at least 1).
    pub connection_bytes: usize,
    /// Requests in flight on all of the shard's connections, parked ones not counted.
    pub shard_requests: usize,
    /// Bytes all of the shard's connections hold.
    pub shard_bytes: usize,
    /// Requests parked at once on the connection ([`Backlog::try_park`]).
    pub connection_parked: usize,
}

impl BacklogBounds {
    /// Bounds on the connection alone.
    pub fn per_connection(requests: usize, bytes: usize) -> BacklogBounds {
        BacklogBounds {
            connection_requests: requests,
            connection_bytes: bytes,
            shard_requests: usize::MAX,
            shard_bytes: usize::MAX,
            connection_parked: usize::MAX,
        }
    }
}

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
    /// Bytes held: requests in flight (frame and [`REQUEST_COST`]) and responses queued.
    bytes: AtomicUsize,
    bounds: BacklogBounds,
    /// The reader waits on it; set while it does, so others notify only then.
    reader_waiting: AtomicBool,
    drained: Notify,
    traffic: Arc<Traffic>,
    /// Set when the connection ended; parked requests wait on `closed_notify` for it.
    closed: AtomicBool,
    closed_notify: Notify,
}

impl Backlog {
    /// A backlog within `bounds`, counted into `traffic`, the shard's gauges (which the
    /// shard bounds are checked against).
    pub fn new(bounds: BacklogBounds, traffic: Arc<Traffic>) -> Arc<Backlog> {
        Arc::new(Backlog {
            requests: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            bounds: BacklogBounds {
                connection_requests: bounds.connection_requests.max(1),
                connection_bytes: bounds.connection_bytes.max(1),
                ..bounds
            },
            reader_waiting: AtomicBool::new(false),
            drained: Notify::new(),
            traffic,
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
        })
    }

    /// Counts a request read from a frame of `frame_bytes`; the guard counts it done when
    /// dropped.
    pub fn start_request(self: &Arc<Self>, frame_bytes: usize) -> InFlight {
        let cost = REQUEST_COST + frame_bytes;
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.bytes.fetch_add(cost, Ordering::SeqCst);
        self.traffic.add_requests_in_flight(1, cost as i64);
        InFlight(Some((self.clone(), cost)))
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

    fn request_done(&self, cost: usize) {
        let before = self.requests.fetch_sub(1, Ordering::SeqCst);
        assert!(before >= 1, "a request ended with {before} in flight");
        let held = self.bytes.fetch_sub(cost, Ordering::SeqCst);
        assert!(
            held >= cost,
            "a request charged {cost} bytes ended with only {held} held"
        );
        self.traffic.add_requests_in_flight(-1, -(cost as i64));
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

    /// Bytes held now: requests in flight and responses queued.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }

    /// Requests parked now (see [`Backlog::park`]).
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Marks the connection ended: every parked request's [`Parked::closed`] completes.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.closed_notify.notify_waiters();
    }

    /// [`Backlog::park`] unless `connection_parked` requests are parked already: then
    /// how many are.
    pub fn try_park(self: &Arc<Self>) -> Result<Parked, usize> {
        let parked = self.parked();
        if parked >= self.bounds.connection_parked {
            return Err(parked);
        }
        Ok(self.park())
    }

    /// Counts one of this connection's requests as parked until the guard drops.
    pub fn park(self: &Arc<Self>) -> Parked {
        self.parked.fetch_add(1, Ordering::SeqCst);
        self.traffic.add_parked_requests(1);
        // Parking makes room: a reader paused on the requests bound must resume now, not
        // when some pull times out.
        self.wake_reader();
        Parked(self.clone())
    }

    /// True when the connection must not read: a bound of its own is reached, or one of
    /// its shard's while it holds something of that kind. Parked requests do not count
    /// against the requests bounds.
    pub fn is_full(&self) -> bool {
        // Parked first: a parked request is in `requests` until after it unparks, so this
        // order never sees more parked than in flight, except when both dropped between
        // the reads (hence saturating).
        let parked = self.parked();
        let requests = self.requests().saturating_sub(parked);
        let bytes = self.bytes();
        let bounds = &self.bounds;
        if requests >= bounds.connection_requests || bytes >= bounds.connection_bytes {
            return true;
        }
        let shard = self.traffic.held();
        (requests > 0 && shard.active_requests >= bounds.shard_requests)
            || (bytes > 0 && shard.bytes >= bounds.shard_bytes)
    }

    /// True when the connection's bytes are at their bound (whatever the requests).
    pub fn bytes_full(&self) -> bool {
        self.bytes() >= self.bounds.connection_bytes
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
        // Every request guard holds the backlog, so none is in flight now; queued
        // responses (and parked counts, which their guards also hold) are all that can be.
        let requests = *self.requests.get_mut();
        assert_eq!(requests, 0, "a backlog dropped with requests in flight");
        let bytes = *self.bytes.get_mut();
        self.traffic.add_queued_response_bytes(-(bytes as i64));
    }
}

/// One request in flight on a connection (see [`Backlog::start_request`]).
#[derive(Debug)]
pub struct InFlight(Option<(Arc<Backlog>, usize)>);

impl InFlight {
    /// A guard counting nothing, for replies made outside a connection (tests, tools).
    pub fn untracked() -> InFlight {
        InFlight(None)
    }

    /// The connection's backlog, if any.
    pub fn backlog(&self) -> Option<&Arc<Backlog>> {
        self.0.as_ref().map(|(backlog, _)| backlog)
    }
}

/// One parked request (see [`Backlog::park`]); unparks on drop.
#[derive(Debug)]
pub struct Parked(Arc<Backlog>);

impl Parked {
    /// Completes once the connection has ended (at once if it has).
    pub async fn closed(&self) {
        let backlog = &self.0;
        let notified = backlog.closed_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if backlog.closed.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }
}

/// Waits for `parked`'s connection to end; forever without one (a request run outside a
/// connection: tests, tools).
pub async fn closed(parked: &Option<Parked>) {
    match parked {
        Some(parked) => parked.closed().await,
        None => std::future::pending().await,
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let before = self.0.parked.fetch_sub(1, Ordering::SeqCst);
        assert!(before >= 1, "a request unparked with {before} parked");
        self.0.traffic.add_parked_requests(-1);
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

/// [`park_current`] within the connection's bound: `Err` with the number parked on it
/// when it is reached; `Ok(None)` outside a connection's request task.
pub fn try_park_current() -> Result<Option<Parked>, usize> {
    match CURRENT.try_with(|backlog| backlog.try_park()) {
        Ok(Ok(parked)) => Ok(Some(parked)),
        Ok(Err(parked)) => Err(parked),
        Err(_) => Ok(None),
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((backlog, cost)) = self.0.take() {
            backlog.request_done(cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn backlog(requests: usize, bytes: usize) -> (Arc<Backlog>, Arc<Traffic>) {
        let traffic = Arc::new(Traffic::new());
        let bounds = BacklogBounds::per_connection(requests, bytes);
        (Backlog::new(bounds, traffic.clone()), traffic)
    }

    #[test]
    fn requests_count_until_answered_or_dropped_and_fill_at_the_bound() {
        let (backlog, traffic) = backlog(2, 1 << 20);
        let first = backlog.start_request(100);
        assert!(!backlog.is_full());
        let second = backlog.start_request(0);
        assert!(backlog.is_full(), "2 of 2 in flight");
        let snapshot = traffic.snapshot();
        assert_eq!(
            (
                snapshot.requests_in_flight,
                snapshot.request_bytes_in_flight
            ),
            (2, 2 * REQUEST_COST as i64 + 100)
        );
        drop(first);
        assert!(!backlog.is_full());
        // Answered: the response is charged before the request's bytes go.
        backlog.queued(300);
        drop(second);
        assert_eq!((backlog.requests(), backlog.bytes()), (0, 300));
        let snapshot = traffic.snapshot();
        assert_eq!(
            (
                snapshot.queued_response_bytes,
                snapshot.request_bytes_in_flight
            ),
            (300, 0)
        );
        backlog.written(300);
        assert_eq!(traffic.snapshot().queued_response_bytes, 0);
    }

    #[test]
    fn a_request_in_flight_holds_its_frame_against_the_bytes_bound() {
        let (backlog, _) = backlog(100, REQUEST_COST + 4096);
        let small = backlog.start_request(1000);
        assert!(
            !backlog.is_full(),
            "{} of {} bytes",
            backlog.bytes(),
            REQUEST_COST + 4096
        );
        let big = backlog.start_request(4096);
        assert!(backlog.is_full(), "a 4 KiB frame in flight fills it");
        drop(big);
        assert!(!backlog.is_full());
        drop(small);
        assert_eq!(backlog.bytes(), 0);
    }

    #[test]
    fn the_shard_bounds_stop_connections_that_hold_something_and_not_those_that_hold_nothing() {
        let traffic = Arc::new(Traffic::new());
        let bounds = BacklogBounds {
            connection_requests: 1000,
            connection_bytes: 1 << 30,
            shard_requests: 3,
            shard_bytes: 10 * REQUEST_COST,
            connection_parked: usize::MAX,
        };
        let busy = Backlog::new(bounds, traffic.clone());
        let idle = Backlog::new(bounds, traffic.clone());
        let held: Vec<_> = (0..3).map(|_| busy.start_request(0)).collect();
        assert!(busy.is_full(), "3 of the shard's 3 requests are its own");
        assert!(
            !idle.is_full(),
            "a connection holding nothing may take a frame"
        );
        let one = idle.start_request(0);
        assert!(idle.is_full(), "now it holds one, and the shard is over");
        drop(held);
        assert!(!busy.is_full() && !idle.is_full());
        // Bytes: queued responses on one connection stop the others that hold bytes.
        busy.queued(10 * REQUEST_COST);
        assert!(
            idle.is_full(),
            "it holds a request's bytes and the shard is at its bound"
        );
        drop(one);
        assert!(!idle.is_full(), "holding nothing, it reads");
        busy.written(10 * REQUEST_COST);
        assert!(!busy.is_full());
    }

    #[test]
    fn parked_requests_count_for_neither_requests_bound() {
        let traffic = Arc::new(Traffic::new());
        let bounds = BacklogBounds {
            connection_requests: 2,
            connection_bytes: 1 << 30,
            shard_requests: 2,
            shard_bytes: usize::MAX,
            connection_parked: usize::MAX,
        };
        let backlog = Backlog::new(bounds, traffic.clone());
        let first = backlog.start_request(0);
        let _parked = backlog.park();
        let second = backlog.start_request(0);
        assert!(
            !backlog.is_full(),
            "one of two counted: the other is parked"
        );
        assert_eq!(traffic.held().active_requests, 1);
        drop((first, second));
    }

    #[test]
    fn what_is_left_when_the_connection_goes_comes_off_the_gauges() {
        let (backlog, traffic) = backlog(10, 1000);
        let request = backlog.start_request(0);
        backlog.queued(500);
        drop(backlog);
        assert_eq!(traffic.snapshot().queued_response_bytes, 500, "still held");
        drop(request);
        let snapshot = traffic.snapshot();
        assert_eq!(
            (
                snapshot.requests_in_flight,
                snapshot.queued_response_bytes,
                snapshot.request_bytes_in_flight
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn parked_requests_do_not_fill_the_bound_and_parking_wakes_the_reader() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (backlog, _) = backlog(2, 1 << 20);
            let first = backlog.start_request(0);
            let second = backlog.start_request(0);
            assert!(backlog.is_full());
            let parked = backlog.park();
            tokio::time::timeout(Duration::from_secs(5), backlog.wait_for_room())
                .await
                .expect("parking wakes the reader");
            let third = backlog.start_request(0);
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
            let (backlog, _) = backlog(1, 1 << 20);
            let request = backlog.start_request(0);
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
