//! Latency recording and the summary line every benchmark prints.

use hdrhistogram::Histogram;

/// An HDR histogram of microseconds, 1 µs to 60 s at 3 significant digits.
pub struct Latencies {
    histogram: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            histogram: Histogram::new_with_bounds(1, 60_000_000, 3)
                .expect("valid histogram bounds"),
        }
    }
}

impl Latencies {
    pub fn record_us(&mut self, micros: u64) {
        self.histogram.saturating_record(micros.max(1));
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    pub fn percentile_us(&self, percentile: f64) -> u64 {
        if self.histogram.is_empty() {
            return 0;
        }
        self.histogram.value_at_quantile(percentile / 100.0)
    }

    pub fn max_us(&self) -> u64 {
        self.histogram.max()
    }
}

/// The percentiles every benchmark summary reports, in microseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct LatencySummary {
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latencies {
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            p50_us: self.percentile_us(50.0),
            p99_us: self.percentile_us(99.0),
            p999_us: self.percentile_us(99.9),
            max_us: self.max_us(),
        }
    }
}

impl LatencySummary {
    /// Prints the summary line, as `ack latency us: p50 …  p99 …  p99.9 …  max …`.
    pub fn print(&self, what: &str) {
        println!(
            "  {what}: p50 {}  p99 {}  p99.9 {}  max {}",
            self.p50_us, self.p99_us, self.p999_us, self.max_us
        );
    }
}
