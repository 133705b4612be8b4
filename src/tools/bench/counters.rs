//! What a load-generator run counts: messages and bytes done, errors by code, and the
//! latency histogram, shared by everything that sends or receives in the run.
//!
//! Shareable between threads: the task-based producers and consumers use it from one
//! thread, the blocking producers ([`super::threads`]) from one thread per connection.
//! A message costs two relaxed atomic adds and one lock of the latency histogram (two
//! locks for an error), against a round trip of tens of microseconds; with one thread
//! per connection the histogram lock is shared, but each holds it for well under a
//! microsecond between round trips.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::latency::{Latencies, LatencySummary};

#[derive(Default)]
pub(super) struct Counters {
    done: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    errors_by_code: Mutex<BTreeMap<String, u64>>,
    latencies: Mutex<Latencies>,
}

/// A poisoned lock only means another thread panicked mid-update of a counter; the
/// figures are still worth reporting.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Counters {
    /// `messages` more done, carrying `bytes` of bodies.
    pub(super) fn add_done(&self, messages: u64, bytes: u64) {
        self.done.fetch_add(messages, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// One failed request of `messages` messages, counted under `key` (a response code or
    /// `io:<kind>`).
    pub(super) fn error(&self, key: String, messages: u64) {
        self.errors.fetch_add(messages, Ordering::Relaxed);
        *lock(&self.errors_by_code).entry(key).or_default() += 1;
    }

    pub(super) fn record_latency_us(&self, micros: u64) {
        lock(&self.latencies).record_us(micros);
    }

    /// The histogram itself, for recording many values under one lock.
    pub(super) fn latencies(&self) -> MutexGuard<'_, Latencies> {
        lock(&self.latencies)
    }

    pub(super) fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(super) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub(super) fn errors_by_code(&self) -> BTreeMap<String, u64> {
        lock(&self.errors_by_code).clone()
    }

    pub(super) fn latency_summary(&self) -> LatencySummary {
        lock(&self.latencies).summary()
    }

    /// The progress line printed once a second: `done` in total, `since` of them in the
    /// last second.
    pub(super) fn progress_line(&self, what: &str, elapsed_s: f64, since: u64) -> String {
        format!(
            "[{:>4.0}s] {:>10} {what}  {since:>9} msgs/s  p99 {:>6} us  errors {}",
            elapsed_s,
            self.done(),
            lock(&self.latencies).percentile_us(99.0),
            self.errors()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_several_threads_add_up() {
        let counters = Counters::default();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        counters.add_done(2, 2048);
                        counters.record_latency_us(50);
                    }
                    counters.error("io:TimedOut".into(), 3);
                });
            }
        });
        assert_eq!(counters.done(), 8000);
        assert_eq!(counters.bytes(), 8 * 1024 * 1000);
        assert_eq!(counters.errors(), 12);
        assert_eq!(counters.errors_by_code().get("io:TimedOut"), Some(&4));
        assert_eq!(counters.latencies().count(), 4000);
        assert_eq!(counters.latency_summary().p50_us, 50);
    }
}
