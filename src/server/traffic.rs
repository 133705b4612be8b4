//! Byte counters and limit counters of the remoting connections, for the metrics endpoint,
//! tests and benchmarks.
//!
//! One [`Traffic`] per shard, shared by every connection that shard serves (the broker's
//! and the embedded name server's), kept in its [`crate::metrics::ShardMetrics`].
//! Connections add to it with relaxed atomics: the counters are statistics, they order
//! nothing, and a reader on another thread (the metrics endpoint) may see one counter a
//! little ahead of another.
//!
//! What each counter means:
//!
//! | counter               | counts                                                              |
//! |-----------------------|---------------------------------------------------------------------|
//! | `bytes_in`            | bytes read from sockets (whole frames and partial ones)             |
//! | `bytes_out`           | bytes written to sockets: `bytes_out_zero_copy + bytes_out_copied`  |
//! | `bytes_out_zero_copy` | file bytes sent without a copy through a user-space buffer: `sendfile`, or `writev` from an mmap of the segment |
//! | `bytes_out_mmap`      | the part of `bytes_out_zero_copy` that went the mmap/writev way     |
//! | `bytes_out_copied`    | bytes written from user-space buffers: frame headers, ordinary bodies, records the simulator backend copied |
//! | `requests_in_flight`  | gauge: requests read and not yet answered ([`super::backlog`]) |
//! | `queued_response_bytes` | gauge: response bytes queued and not yet written ([`super::backlog`]) |
//! | `request_bytes_in_flight` | gauge: bytes the requests in flight hold, frames and their cost ([`super::backlog`]) |
//! | `parked_requests` | gauge: of the requests in flight, those parked (long-polling pulls) |
//! | `read_pauses`         | times a connection stopped reading because its backlog was full |
//! | `idle_closes`         | connections closed after the idle timeout |
//! | `frame_timeouts`      | connections closed because a frame did not complete in time |
//! | `partial_frame_refusals` | connections closed because the node-wide bound on partial-frame bytes was reached |
//! | `connections_refused` | connections closed at accept because `max_connections` were open |

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Byte counters; `Send + Sync`, shared as `Arc<Traffic>`.
#[derive(Debug, Default)]
pub struct Traffic {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    bytes_out_zero_copy: AtomicU64,
    bytes_out_mmap: AtomicU64,
    bytes_out_copied: AtomicU64,
    requests_in_flight: AtomicI64,
    queued_response_bytes: AtomicI64,
    request_bytes_in_flight: AtomicI64,
    parked_requests: AtomicI64,
    read_pauses: AtomicU64,
    idle_closes: AtomicU64,
    frame_timeouts: AtomicU64,
    partial_frame_refusals: AtomicU64,
    connections_refused: AtomicU64,
}

/// The limit counters [`Traffic::count`] adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitEvent {
    ReadPause,
    IdleClose,
    FrameTimeout,
    PartialFrameRefusal,
    ConnectionRefused,
}

/// A point-in-time copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficSnapshot {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub bytes_out_zero_copy: u64,
    pub bytes_out_mmap: u64,
    pub bytes_out_copied: u64,
    pub requests_in_flight: i64,
    pub queued_response_bytes: i64,
    pub request_bytes_in_flight: i64,
    pub parked_requests: i64,
    pub read_pauses: u64,
    pub idle_closes: u64,
    pub frame_timeouts: u64,
    pub partial_frame_refusals: u64,
    pub connections_refused: u64,
}

/// See [`Traffic::held`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub active_requests: usize,
    pub bytes: usize,
}

impl Traffic {
    pub fn new() -> Traffic {
        Traffic::default()
    }

    pub fn add_in(&self, bytes: usize) {
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes written from a user-space buffer.
    pub fn add_copied(&self, bytes: usize) {
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
        self.bytes_out_copied
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// File bytes sent with `sendfile`.
    pub fn add_sendfile(&self, bytes: usize) {
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
        self.bytes_out_zero_copy
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// File bytes written from an mmap of the file.
    pub fn add_mmap(&self, bytes: usize) {
        self.add_sendfile(bytes);
        self.bytes_out_mmap
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Moves the requests-in-flight gauge by `delta` and the bytes they hold by `bytes`.
    pub fn add_requests_in_flight(&self, delta: i64, bytes: i64) {
        self.requests_in_flight.fetch_add(delta, Ordering::Relaxed);
        self.request_bytes_in_flight
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// Moves the parked-requests gauge by `delta`.
    pub fn add_parked_requests(&self, delta: i64) {
        self.parked_requests.fetch_add(delta, Ordering::Relaxed);
    }

    /// What the shard's connections hold now, for the shard bounds of
    /// [`super::backlog::Backlog`]: requests in flight and not parked, and bytes held by
    /// requests in flight and queued responses. Relaxed reads of gauges others move: a
    /// bound is reached a few requests early or late, never missed for long (the next
    /// change re-checks).
    pub fn held(&self) -> Held {
        let load = |gauge: &AtomicI64| gauge.load(Ordering::Relaxed).max(0) as usize;
        Held {
            active_requests: load(&self.requests_in_flight)
                .saturating_sub(load(&self.parked_requests)),
            bytes: load(&self.request_bytes_in_flight) + load(&self.queued_response_bytes),
        }
    }

    /// Moves the queued-response-bytes gauge by `delta`.
    pub fn add_queued_response_bytes(&self, delta: i64) {
        self.queued_response_bytes
            .fetch_add(delta, Ordering::Relaxed);
    }

    /// Counts one `event`.
    pub fn count(&self, event: LimitEvent) {
        let counter = match event {
            LimitEvent::ReadPause => &self.read_pauses,
            LimitEvent::IdleClose => &self.idle_closes,
            LimitEvent::FrameTimeout => &self.frame_timeouts,
            LimitEvent::PartialFrameRefusal => &self.partial_frame_refusals,
            LimitEvent::ConnectionRefused => &self.connections_refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> TrafficSnapshot {
        TrafficSnapshot {
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            bytes_out_zero_copy: self.bytes_out_zero_copy.load(Ordering::Relaxed),
            bytes_out_mmap: self.bytes_out_mmap.load(Ordering::Relaxed),
            bytes_out_copied: self.bytes_out_copied.load(Ordering::Relaxed),
            requests_in_flight: self.requests_in_flight.load(Ordering::Relaxed),
            queued_response_bytes: self.queued_response_bytes.load(Ordering::Relaxed),
            request_bytes_in_flight: self.request_bytes_in_flight.load(Ordering::Relaxed),
            parked_requests: self.parked_requests.load(Ordering::Relaxed),
            read_pauses: self.read_pauses.load(Ordering::Relaxed),
            idle_closes: self.idle_closes.load(Ordering::Relaxed),
            frame_timeouts: self.frame_timeouts.load(Ordering::Relaxed),
            partial_frame_refusals: self.partial_frame_refusals.load(Ordering::Relaxed),
            connections_refused: self.connections_refused.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up() {
        let traffic = Traffic::new();
        traffic.add_in(10);
        traffic.add_copied(3);
        traffic.add_sendfile(100);
        traffic.add_mmap(7);
        traffic.add_requests_in_flight(2, 5000);
        traffic.add_requests_in_flight(-1, -2000);
        traffic.add_parked_requests(1);
        traffic.add_queued_response_bytes(40);
        traffic.count(LimitEvent::ReadPause);
        traffic.count(LimitEvent::ConnectionRefused);
        traffic.count(LimitEvent::ConnectionRefused);
        assert_eq!(
            traffic.snapshot(),
            TrafficSnapshot {
                bytes_in: 10,
                bytes_out: 110,
                bytes_out_zero_copy: 107,
                bytes_out_mmap: 7,
                bytes_out_copied: 3,
                requests_in_flight: 1,
                queued_response_bytes: 40,
                request_bytes_in_flight: 3000,
                parked_requests: 1,
                read_pauses: 1,
                connections_refused: 2,
                ..TrafficSnapshot::default()
            }
        );
        fn shared<T: Send + Sync>() {}
        shared::<Traffic>();
    }
}
