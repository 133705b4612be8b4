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
