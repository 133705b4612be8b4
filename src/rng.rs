//! The one small seeded PRNG (splitmix64) behind every reproducible random choice: the
//! simulated disk's crash faults, the crash simulation's workloads and the fuzz loops.
//! Not for anything that needs unpredictability.

/// splitmix64: tiny, fast, and good enough to drive fault choices and test workloads
/// reproducibly from one seed.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1): the top 53 bits as a float mantissa.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)`; `n` must be at least 1.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[low, high)`; `high` must exceed `low`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low)
    }

    /// True with the given chance in percent.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_ranges_hold() {
        let mut first = SplitMix64::new(42);
        let mut second = SplitMix64::new(42);
        let drawn: Vec<u64> = (0..8).map(|_| first.next_u64()).collect();
        assert_eq!(drawn, (0..8).map(|_| second.next_u64()).collect::<Vec<_>>());
        assert_ne!(drawn[0], SplitMix64::new(43).next_u64());
        for _ in 0..1000 {
            let value = first.range(10, 20);
            assert!((10..20).contains(&value));
            assert!(first.below(3) < 3);
            let unit = first.next_f64();
            assert!((0.0..1.0).contains(&unit));
        }
    }
}
