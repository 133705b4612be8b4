//! The one clock. Every store timestamp, interval and timeout reads time through tokio's
//! clock, so tests that pause tokio time control all of it, and the wall-clock reading is
//! derived from a monotonic base so store timestamps never run backwards while a store runs.

use tokio::time::Instant;

/// Wall-clock milliseconds derived from a monotonic instant.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base_wall_ms: i64,
    base_instant: Instant,
}

impl Clock {
    /// A clock that starts at the system's wall-clock time now.
    pub fn system() -> Clock {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as i64)
            .unwrap_or(0);
        Clock::starting_at(wall)
    }

    /// A clock that reads `wall_ms` now (tests pick a fixed start so runs repeat exactly).
    pub fn starting_at(wall_ms: i64) -> Clock {
        Clock {
            base_wall_ms: wall_ms,
            base_instant: Instant::now(),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.base_wall_ms + self.base_instant.elapsed().as_millis() as i64
    }
}
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
