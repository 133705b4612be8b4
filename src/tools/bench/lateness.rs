//! The arithmetic of the delivery benchmarks (`bench/delivery.rs`): the bench message body
//! that names its sequence number, the due time or delay level each message asks for,
//! the lateness summary (percentiles of delivered-minus-due, early ones counted), and what
//! `/proc/<pid>/status` and `/proc/<pid>/stat` say about the node.
//!
//! Pure, so the figures the benchmark prints rest on tested code.

use serde::Serialize;

use crate::broker::delay::DelayLevels;
use crate::rng::SplitMix64;

/// The first bytes of every bench body, so records that are not the benchmark's are told
/// apart.
const MAGIC: &[u8; 4] = b"RMQB";
/// Bytes of magic and sequence number: the smallest body.
pub const MIN_BODY: usize = 12;

/// A body of `size` bytes (at least [`MIN_BODY`]) naming message `seq`.
pub fn body(seq: u64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size.max(MIN_BODY));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&seq.to_be_bytes());
    out.resize(size.max(MIN_BODY), b'x');
    out
}

/// The sequence number a bench body names; `None` for any other body.
pub fn body_seq(body: &[u8]) -> Option<u64> {
    if body.len() < MIN_BODY || &body[..4] != MAGIC {
        return None;
    }
    Some(u64::from_be_bytes(body[4..12].try_into().expect("8 bytes")))
}

/// The due time of timer message `seq`: `start_ms + lead_ms` plus a pseudo-random offset
/// in `[0, span_ms]` drawn from `seq`, so due times arrive in no particular order (as a
/// real backlog does) and the benchmark can compute each one again without storing it.
pub fn timer_due(start_ms: i64, lead_ms: u64, span_ms: u64, seq: u64) -> i64 {
    let spread = SplitMix64::new(seq ^ 0x5EED_0F71_AE00).next_u64() % (span_ms + 1);
    start_ms + (lead_ms + spread) as i64
}

/// The delay level of message `seq`: the levels in turn, 1 first.
pub fn delay_level(seq: u64, levels: &DelayLevels) -> u32 {
    (seq % levels.max_level() as u64) as u32 + 1
}

/// Percentiles of lateness (delivered minus due), in milliseconds. Negative values are
/// early deliveries; `early` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatenessSummary {
    pub count: u64,
    pub early: u64,
    pub min_ms: i64,
    pub p50_ms: i64,
    pub p90_ms: i64,
    pub p99_ms: i64,
    pub p999_ms: i64,
    pub max_ms: i64,
    pub mean_ms: f64,
}

/// The value at `percentile` of sorted `values` (nearest rank).
fn nearest_rank(sorted: &[i64], percentile: f64) -> i64 {
    // Less a hair, so that e.g. 99.9 % of 1000 is rank 999 and not, by rounding, 1000.
    let rank = (percentile * sorted.len() as f64 / 100.0 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarises `values` (sorted in place); all zero when there are none.
pub fn summarize(values: &mut [i64]) -> LatenessSummary {
    if values.is_empty() {
        return LatenessSummary::default();
    }
    values.sort_unstable();
    let sum: i128 = values.iter().map(|&v| v as i128).sum();
    LatenessSummary {
        count: values.len() as u64,
        early: values.iter().take_while(|&&v| v < 0).count() as u64,
        min_ms: values[0],
        p50_ms: nearest_rank(values, 50.0),
        p90_ms: nearest_rank(values, 90.0),
        p99_ms: nearest_rank(values, 99.0),
        p999_ms: nearest_rank(values, 99.9),
        max_ms: values[values.len() - 1],
        mean_ms: sum as f64 / values.len() as f64,
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in kB.
pub fn status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// utime + stime of a `/proc/<pid>/stat` line, in clock ticks.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces: count from after
    // its closing one, where utime and stime are the 12th and 13th fields.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A process's `/proc` figures, read when asked; `None` where they cannot be read.
#[derive(Clone, Copy, Debug)]
pub struct NodeProcess {
    pub pid: u32,
}

impl NodeProcess {
    pub fn status_kb(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        status_kb(&status, field)
    }

    /// CPU time (user and system, all threads) so far, in seconds (`USER_HZ` = 100).
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        Some(stat_cpu_ticks(&stat)? as f64 / 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_names_its_sequence_number_and_others_name_none() {
        let b = body(123_456_789, 100);
        assert_eq!(b.len(), 100);
        assert_eq!(body_seq(&b), Some(123_456_789));
        assert_eq!(body(7, 0).len(), MIN_BODY, "never shorter than the header");
        assert_eq!(body_seq(&body(7, 0)), Some(7));
        assert_eq!(body_seq(b"warmup"), None);
        assert_eq!(body_seq(b"XMQB\0\0\0\0\0\0\0\x01"), None);
    }

    #[test]
    fn timer_dues_stay_in_the_window_unordered_and_repeatable() {
        let dues: Vec<i64> = (0..10_000)
            .map(|s| timer_due(1_000, 10_000, 50_000, s))
            .collect();
        assert!(dues.iter().all(|&d| (11_000..=61_000).contains(&d)));
        assert_eq!(dues[17], timer_due(1_000, 10_000, 50_000, 17));
        assert!(dues.windows(2).any(|w| w[0] > w[1]), "not sorted by seq");
        // Spread over the window: each tenth of it gets some.
        for tenth in 0..10 {
            let low = 11_000 + tenth * 5_000;
            assert!(dues.iter().any(|&d| (low..low + 5_000).contains(&d)));
        }
        assert_eq!(timer_due(5, 3, 0, 99), 8, "a zero span is the lead");
    }

    #[test]
    fn delay_levels_are_used_in_turn() {
        let levels = DelayLevels::parse("1s 2s 5s").unwrap();
        let got: Vec<u32> = (0..7).map(|s| delay_level(s, &levels)).collect();
        assert_eq!(got, [1, 2, 3, 1, 2, 3, 1]);
    }

    #[test]
    fn lateness_percentiles_use_the_nearest_rank_and_count_early_ones() {
        let mut values: Vec<i64> = (1..=1000).rev().collect();
        values[0] = -5;
        let summary = summarize(&mut values);
        assert_eq!(summary.count, 1000);
        assert_eq!(summary.early, 1);
        assert_eq!(summary.min_ms, -5);
        assert_eq!(summary.p50_ms, 499, "the 500th of -5, 1, 2, ..., 999");
        assert_eq!(summary.p99_ms, 989);
        assert_eq!(summary.p999_ms, 998);
        assert_eq!(summary.max_ms, 999);
        assert_eq!(summarize(&mut []), LatenessSummary::default());
        let one = summarize(&mut [42]);
        assert_eq!(
            (one.p50_ms, one.p99_ms, one.max_ms, one.mean_ms),
            (42, 42, 42, 42.0)
        );
    }

    #[test]
    fn proc_figures_are_read_from_their_fields() {
        let status = "Name:\tringmq\nVmHWM:\t  123456 kB\nVmRSS:\t   98765 kB\n";
        assert_eq!(status_kb(status, "VmHWM"), Some(123_456));
        assert_eq!(status_kb(status, "VmRSS"), Some(98_765));
        assert_eq!(status_kb(status, "VmSwap"), None);
        let stat = "4242 (ringmq shard) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(stat_cpu_ticks(stat), Some(300));
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process_can_be_read_as_a_node() {
        let me = NodeProcess {
            pid: std::process::id(),
        };
        assert!(me.status_kb("VmRSS").unwrap() > 0);
        assert!(me.cpu_seconds().is_some());
    }
}
