//! The one clock. Every store timestamp, interval and timeout reads time through tokio's
//! clock, so tests that pause tokio time control all of it, and the wall-clock reading is
//! derived from a monotonic base so store timestamps never run backwards while a store runs.
//!
//! The base is kept in nanoseconds and the sum is truncated once: truncating the base and the
//! elapsed time apart would read up to 1 ms behind the system clock, and a delayed message
//! would then be stored 1 ms before its sender's clock says its delay is over.

use tokio::time::Instant;

/// Wall-clock milliseconds derived from a monotonic instant.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base_wall_ns: i128,
    base_instant: Instant,
}

impl Clock {
    /// A clock that starts at the system's wall-clock time now.
    pub fn system() -> Clock {
        let wall_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos() as i128)
            .unwrap_or(0);
        Clock::starting_at_ns(wall_ns)
    }

    /// A clock that reads `wall_ms` now (tests pick a fixed start so runs repeat exactly).
    pub fn starting_at(wall_ms: i64) -> Clock {
        Clock::starting_at_ns(i128::from(wall_ms) * NANOS_PER_MILLI)
    }

    fn starting_at_ns(wall_ns: i128) -> Clock {
        Clock {
            base_wall_ns: wall_ns,
            base_instant: Instant::now(),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        let now_ns = self.base_wall_ns + self.base_instant.elapsed().as_nanos() as i128;
        now_ns.div_euclid(NANOS_PER_MILLI) as i64
    }
}

impl Clock {
    /// Milliseconds since this clock was made: monotonic, for timeouts and leases (a wall
    /// clock stepped back or forward does not move it).
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.base_instant.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

const NANOS_PER_MILLI: i128 = 1_000_000;

// Howard Hinnant's proleptic Gregorian calendar conversions.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_reading_carries_the_base_fraction_of_a_millisecond() {
        // 0.6 ms past a whole millisecond, then 0.5 ms later: 1.1 ms past it, so one more ms.
        let clock = Clock::starting_at_ns(1_000 * NANOS_PER_MILLI + 600_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::advance(Duration::from_micros(500)).await;
        assert_eq!(
            clock.now_ms(),
            1_001,
            "truncating base and elapsed apart reads 1000"
        );
        tokio::time::advance(Duration::from_micros(899)).await;
        assert_eq!(clock.now_ms(), 1_001);
        tokio::time::advance(Duration::from_micros(1)).await;
        assert_eq!(clock.now_ms(), 1_002);
    }
}
