//! Byte counters of the remoting connections, for the metrics endpoint and benchmarks.
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

use std::sync::atomic::{AtomicU64, Ordering};

/// Byte counters; `Send + Sync`, shared as `Arc<Traffic>`.
#[derive(Debug, Default)]
pub struct Traffic {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    bytes_out_zero_copy: AtomicU64,
    bytes_out_mmap: AtomicU64,
    bytes_out_copied: AtomicU64,
}

/// A point-in-time copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficSnapshot {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub bytes_out_zero_copy: u64,
    pub bytes_out_mmap: u64,
    pub bytes_out_copied: u64,
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

    pub fn snapshot(&self) -> TrafficSnapshot {
        TrafficSnapshot {
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            bytes_out_zero_copy: self.bytes_out_zero_copy.load(Ordering::Relaxed),
            bytes_out_mmap: self.bytes_out_mmap.load(Ordering::Relaxed),
            bytes_out_copied: self.bytes_out_copied.load(Ordering::Relaxed),
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
        assert_eq!(
            traffic.snapshot(),
            TrafficSnapshot {
                bytes_in: 10,
                bytes_out: 110,
                bytes_out_zero_copy: 107,
                bytes_out_mmap: 7,
                bytes_out_copied: 3,
            }
        );
        fn shared<T: Send + Sync>() {}
        shared::<Traffic>();
    }
}
