//! A master's write lease (controller mode, D18): until when the controllers have
//! confirmed this broker as master, on this process's monotonic clock. Renewed by the
//! broker's supervisor after each confirmation, read by every shard's store: a put is
//! refused once it lapsed, and no batch is released (made visible and answered SEND_OK)
//! while it is lapsed, so a master that lost touch with the controllers (a zombie back
//! from a pause, one cut from them) acknowledges nothing after its lease, which ends
//! before the controllers may elect another master.
//!
//! Shared across threads: the deadline is nanoseconds past a base instant taken once per
//! process, in one atomic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

/// How often a store holding batches for a lapsed lease looks whether it holds again
/// (the supervisor renews it every heartbeat).
pub const RECHECK: std::time::Duration = std::time::Duration::from_millis(20);

/// The instant deadlines count from.
fn base() -> Instant {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    Instant::from_std(*BASE.get_or_init(std::time::Instant::now))
}

fn nanos_since_base(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base()).as_nanos()).unwrap_or(u64::MAX)
}

/// One node's lease, cloned into every shard's store; starts lapsed.
#[derive(Clone, Debug, Default)]
pub struct WriteLease(Arc<AtomicU64>);

impl WriteLease {
    pub fn new() -> WriteLease {
        WriteLease::default()
    }

    /// Extends the lease to `until` (never shortens it).
    pub fn renew_until(&self, until: Instant) {
        self.0.fetch_max(nanos_since_base(until), Ordering::AcqRel);
    }

    /// Whether the lease holds at `now`.
    pub fn holds_at(&self, now: Instant) -> bool {
        nanos_since_base(now) < self.0.load(Ordering::Acquire)
    }

    pub fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }
}

impl PartialEq for WriteLease {
    fn eq(&self, other: &WriteLease) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for WriteLease {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lease_holds_until_its_deadline_and_is_never_shortened() {
        let lease = WriteLease::new();
        let now = Instant::now();
        assert!(!lease.holds_at(now), "a new lease is lapsed");
        lease.renew_until(now + Duration::from_millis(100));
        assert!(lease.holds_at(now + Duration::from_millis(99)));
        assert!(!lease.holds_at(now + Duration::from_millis(100)));
        lease.renew_until(now + Duration::from_millis(50));
        assert!(
            lease.holds_at(now + Duration::from_millis(99)),
            "not shortened"
        );
        let clone = lease.clone();
        clone.renew_until(now + Duration::from_secs(1));
        assert!(
            lease.holds_at(now + Duration::from_millis(500)),
            "clones share it"
        );
    }
}
