//! Node-wide bounds shared by every shard's connections: how many may be open
//! (`max_connections`), and how many bytes all of them together may hold in frames that
//! have not fully arrived (`max_partial_frame_bytes`).
//!
//! One [`Admission`] per node, shared (`Arc`) by every accept loop. An accepted socket
//! gets an [`Admitted`] ticket or is closed at once; the ticket gives its place back when
//! the connection ends, however it ends. A connection charges its partial frame to the
//! node through [`PartialFrame`], and is refused (closed) when the charge would take the
//! node past its bound.
//!
//! Why partial frames only above a threshold: a connection's read buffer holds the tail of
//! its last read, usually a few bytes or nothing, and charging every read to one atomic
//! shared by all shards would put a contended cache line on the data path. A connection
//! charges only once its partial frame exceeds [`PartialFrame`]'s free allowance (the
//! initial read buffer size), so what is left uncharged is bounded by
//! `max_connections` times that allowance, and the frame timeout bounds how long it stays.
//!
//! Invariants: the open count never exceeds `max_connections` (taken with a compare and
//! swap, not a check then an add); the partial-byte charge never exceeds
//! `max_partial_frame_bytes`; both are given back exactly (asserted on release).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The node-wide connection bounds (see the module docs).
#[derive(Debug)]
pub struct Admission {
    max_connections: usize,
    max_partial_bytes: usize,
    open: AtomicUsize,
    partial_bytes: AtomicUsize,
    /// Refusals not yet reported in a log line, and when the last line went out (ms since
    /// `epoch`; 0 = never), so a flood of refusals logs once per interval.
    refused_unlogged: AtomicU64,
    last_refusal_log_ms: AtomicU64,
    refusal_log_interval: Duration,
    epoch: std::time::Instant,
}

/// What a refused connection's log line should say, if one is due now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusalReport {
    /// Refusals since the last line, this one included.
    pub refused: u64,
    pub max_connections: usize,
}

impl Admission {
    /// Bounds for a node; both at least 1. A refusal is logged at most once per
    /// `refusal_log_interval`.
    pub fn new(
        max_connections: usize,
        max_partial_bytes: usize,
        refusal_log_interval: Duration,
    ) -> Arc<Admission> {
        Arc::new(Admission {
            max_connections: max_connections.max(1),
            max_partial_bytes: max_partial_bytes.max(1),
            open: AtomicUsize::new(0),
            partial_bytes: AtomicUsize::new(0),
            refused_unlogged: AtomicU64::new(0),
            last_refusal_log_ms: AtomicU64::new(0),
            refusal_log_interval,
            epoch: std::time::Instant::now(),
        })
    }

    /// A place for one more connection, or `None` when `max_connections` are open.
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < self.max_connections).then_some(open + 1)
            })
            .ok()?;
        Some(Admitted(self.clone()))
    }

    /// Records a refused connection; `Some` when a log line is due (the first refusal,
    /// then at most one per interval, carrying the count since the last line).
    pub fn refused(&self) -> Option<RefusalReport> {
        self.refused_unlogged.fetch_add(1, Ordering::SeqCst);
        // +1: 0 means "never logged", and a refusal in the first millisecond must log.
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let last = self.last_refusal_log_ms.load(Ordering::SeqCst);
        let due =
            last == 0 || now.saturating_sub(last) >= self.refusal_log_interval.as_millis() as u64;
        // One shard wins the line; the others' refusals go into the next one.
        if !due
            || self
                .last_refusal_log_ms
                .compare_exchange(last, now, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return None;
        }
        Some(RefusalReport {
            refused: self.refused_unlogged.swap(0, Ordering::SeqCst),
            max_connections: self.max_connections,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Bytes charged for partial frames now, all connections together.
    pub fn partial_bytes(&self) -> usize {
        self.partial_bytes.load(Ordering::SeqCst)
    }

    pub fn max_partial_bytes(&self) -> usize {
        self.max_partial_bytes
    }
}

/// One admitted connection's place; given back on drop.
#[derive(Debug)]
pub struct Admitted(Arc<Admission>);

impl Admitted {
    /// The partial-frame charge of this connection, free up to `allowance` bytes.
    pub fn partial_frame(&self, allowance: usize) -> PartialFrame {
        PartialFrame {
            admission: self.0.clone(),
            allowance,
            charged: 0,
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let before = self.0.open.fetch_sub(1, Ordering::SeqCst);
        assert!(before >= 1, "a connection closed with {before} open");
    }
}

/// A connection's share of the node's partial-frame bytes; given back on drop.
#[derive(Debug)]
pub struct PartialFrame {
    admission: Arc<Admission>,
    allowance: usize,
    charged: usize,
}

/// The node-wide bound on partial-frame bytes was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialFrameRefused {
    /// What this connection holds.
    pub held: usize,
    /// What all connections hold, this one's earlier charge included.
    pub node_total: usize,
    pub max: usize,
}

impl PartialFrame {
    /// Sets this connection's partial frame to `held` bytes: charged to the node when
    /// above the allowance, refused when that would pass the node's bound.
    pub fn hold(&mut self, held: usize) -> Result<(), PartialFrameRefused> {
        let wanted = if held > self.allowance { held } else { 0 };
        if wanted == self.charged {
            return Ok(());
        }
        let partial = &self.admission.partial_bytes;
        if wanted < self.charged {
            let before = partial.fetch_sub(self.charged - wanted, Ordering::SeqCst);
            assert!(
                before >= self.charged,
                "{} partial bytes released with only {before} charged",
                self.charged
            );
            self.charged = wanted;
            return Ok(());
        }
        let more = wanted - self.charged;
        let max = self.admission.max_partial_bytes;
        partial
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |total| {
                (total + more <= max).then_some(total + more)
            })
            .map_err(|node_total| PartialFrameRefused {
                held,
                node_total,
                max,
            })?;
        self.charged = wanted;
        Ok(())
    }

    /// Bytes this connection has charged to the node.
    pub fn charged(&self) -> usize {
        self.charged
    }
}

impl Drop for PartialFrame {
    fn drop(&mut self) {
        let _ = self.hold(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_connections_are_admitted_and_a_closed_one_frees_its_place() {
        let admission = Admission::new(2, 100, Duration::from_secs(10));
        let first = admission.admit().unwrap();
        let _second = admission.admit().unwrap();
        assert!(admission.admit().is_none());
        assert_eq!(admission.open(), 2);
        drop(first);
        assert_eq!(admission.open(), 1);
        assert!(admission.admit().is_some());
    }

    #[test]
    fn refusals_log_once_per_interval_with_the_count_since_the_last_line() {
        let admission = Admission::new(1, 100, Duration::from_secs(3600));
        assert_eq!(
            admission.refused(),
            Some(RefusalReport {
                refused: 1,
                max_connections: 1
            })
        );
        for _ in 0..50 {
            assert_eq!(admission.refused(), None, "within the interval");
        }
        assert_eq!(admission.refused_unlogged.load(Ordering::SeqCst), 50);
        let every_time = Admission::new(1, 100, Duration::ZERO);
        assert!(every_time.refused().is_some());
        assert_eq!(every_time.refused().map(|r| r.refused), Some(1));
    }

    #[test]
    fn partial_frames_charge_above_the_allowance_and_are_refused_past_the_bound() {
        let admission = Admission::new(10, 1000, Duration::from_secs(10));
        let (one, two) = (admission.admit().unwrap(), admission.admit().unwrap());
        let mut a = one.partial_frame(100);
        let mut b = two.partial_frame(100);
        a.hold(100).unwrap();
        assert_eq!(admission.partial_bytes(), 0, "within the allowance");
        a.hold(600).unwrap();
        assert_eq!(admission.partial_bytes(), 600);
        assert_eq!(
            b.hold(401),
            Err(PartialFrameRefused {
                held: 401,
                node_total: 600,
                max: 1000
            })
        );
        b.hold(400).unwrap();
        assert_eq!(admission.partial_bytes(), 1000, "exactly at the bound");
        a.hold(50).unwrap();
        assert_eq!(admission.partial_bytes(), 400);
        drop(b);
        assert_eq!(admission.partial_bytes(), 0, "given back on drop");
        assert_eq!(a.charged(), 0);
    }
}
