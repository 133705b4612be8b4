//! The state of every one-way path between two hosts of the simulated network, and the
//! seeded draws that decide when a segment written on one arrives.
//!
//! A path is `(from, to)` host addresses. It is open, clogged until an instant (data waits,
//! then flows), or partitioned (data waits until [`Paths::heal`]). The delay of a segment is
//! drawn when it is written: a uniform one-way delay, plus a retransmission delay with
//! `loss_percent` chance (TCP hides a lost packet as a late one), and with
//! `clog_percent` chance the path clogs for a uniform time up to twice `clog_mean`.
//! Nothing here reads a clock: the caller passes `now`, so every draw is reproducible from
//! the seed and the order of calls.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::rng::SplitMix64;

/// What the simulated network does to every segment. The defaults are a quiet LAN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConfig {
    pub seed: u64,
    /// One-way delay of a segment: uniform in `[min_delay, max_delay]`.
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// Chance in percent that a segment is "lost" and arrives `retransmit_delay` late.
    pub loss_percent: u64,
    pub retransmit_delay: Duration,
    /// Chance in percent, per segment written, that its path clogs for up to twice
    /// `clog_mean` (uniform) from then on.
    pub clog_percent: u64,
    pub clog_mean: Duration,
    /// Bytes one direction of a connection holds unread before a writer waits (the socket
    /// buffers of both ends together).
    pub connection_buffer_bytes: usize,
    /// Connections a listener holds unaccepted before it refuses more.
    pub accept_backlog: usize,
}

impl Default for NetConfig {
    fn default() -> NetConfig {
        NetConfig {
            seed: 0,
            min_delay: Duration::from_micros(50),
            max_delay: Duration::from_micros(500),
            loss_percent: 0,
            retransmit_delay: Duration::from_millis(200),
            clog_percent: 0,
            clog_mean: Duration::from_millis(100),
            connection_buffer_bytes: 4 << 20,
            accept_backlog: 128,
        }
    }
}

impl NetConfig {
    /// Refuses a configuration the draws cannot use.
    pub fn validate(&self) -> Result<(), BadNetConfig> {
        if self.min_delay > self.max_delay {
            return Err(BadNetConfig::DelayRange {
                min: self.min_delay,
                max: self.max_delay,
            });
        }
        if self.loss_percent > 100 || self.clog_percent > 100 {
            return Err(BadNetConfig::NotAPercentage {
                loss: self.loss_percent,
                clog: self.clog_percent,
            });
        }
        if self.connection_buffer_bytes == 0 || self.accept_backlog == 0 {
            return Err(BadNetConfig::ZeroBound);
        }
        Ok(())
    }
}

/// Why a [`NetConfig`] is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadNetConfig {
    #[error("min_delay {min:?} exceeds max_delay {max:?}")]
    DelayRange { min: Duration, max: Duration },
    #[error("loss_percent {loss} and clog_percent {clog} must be percentages")]
    NotAPercentage { loss: u64, clog: u64 },
    #[error("connection_buffer_bytes and accept_backlog must be at least 1")]
    ZeroBound,
}

/// Which way a partition cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Only data from the first host to the second is held.
    OneWay,
    /// Data both ways is held.
    Both,
}

/// Whether a path lets data through at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathState {
    Open,
    /// Data waits until this instant.
    CloggedUntil(Instant),
    /// Data waits for a heal.
    Partitioned,
}

/// Every path's faults, and the generator the draws come from.
#[derive(Debug)]
pub struct Paths {
    config: NetConfig,
    rng: SplitMix64,
    partitioned: HashMap<(IpAddr, IpAddr), ()>,
    clogged_until: HashMap<(IpAddr, IpAddr), Instant>,
}

impl Paths {
    pub fn new(config: NetConfig) -> Paths {
        Paths {
            rng: SplitMix64::new(config.seed),
            config,
            partitioned: HashMap::new(),
            clogged_until: HashMap::new(),
        }
    }

    pub fn config(&self) -> &NetConfig {
        &self.config
    }

    /// Holds data from `a` to `b` (and from `b` to `a` for [`Direction::Both`]).
    pub fn partition(&mut self, a: IpAddr, b: IpAddr, direction: Direction) {
        self.partitioned.insert((a, b), ());
        if direction == Direction::Both {
            self.partitioned.insert((b, a), ());
        }
    }

    /// Ends every partition between `a` and `b`, both ways.
    pub fn heal(&mut self, a: IpAddr, b: IpAddr) {
        self.partitioned.remove(&(a, b));
        self.partitioned.remove(&(b, a));
    }

    /// Ends every partition.
    pub fn heal_all(&mut self) {
        self.partitioned.clear();
    }

    /// Clogs the path from `from` to `to` until `until` (never shortens a longer clog).
    pub fn clog(&mut self, from: IpAddr, to: IpAddr, until: Instant) {
        let entry = self.clogged_until.entry((from, to)).or_insert(until);
        *entry = (*entry).max(until);
    }

    pub fn state(&self, from: IpAddr, to: IpAddr, now: Instant) -> PathState {
        if self.partitioned.contains_key(&(from, to)) {
            return PathState::Partitioned;
        }
        match self.clogged_until.get(&(from, to)) {
            Some(&until) if until > now => PathState::CloggedUntil(until),
            _ => PathState::Open,
        }
    }

    /// When a segment written now on `from -> to` may arrive, not before `after` (the
    /// previous segment of its connection: TCP delivers in order). Draws the delay, the
    /// loss and a possible clog of the path.
    pub fn arrival(&mut self, from: IpAddr, to: IpAddr, now: Instant, after: Instant) -> Instant {
        let delay = self.uniform(self.config.min_delay, self.config.max_delay);
        let lost = self.rng.chance(self.config.loss_percent);
        let late = if lost {
            self.config.retransmit_delay
        } else {
            Duration::ZERO
        };
        if self.rng.chance(self.config.clog_percent) {
            let clog = self.uniform(Duration::ZERO, self.config.clog_mean * 2);
            self.clog(from, to, now + clog);
        }
        (now + delay + late).max(after)
    }

    /// A delay for the handshake of a connection: one way's draw.
    pub fn handshake_delay(&mut self) -> Duration {
        self.uniform(self.config.min_delay, self.config.max_delay)
    }

    fn uniform(&mut self, low: Duration, high: Duration) -> Duration {
        let (low, high) = (low.as_nanos() as u64, high.as_nanos() as u64);
        if high <= low {
            return Duration::from_nanos(low);
        }
        Duration::from_nanos(self.rng.range(low, high + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn arrivals_stay_in_order_within_a_connection_and_inside_the_delay_bounds() {
        let config = NetConfig {
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(9),
            ..NetConfig::default()
        };
        let mut paths = Paths::new(config);
        let start = Instant::now();
        let mut last = start;
        for step in 0..1_000u64 {
            let now = start + Duration::from_micros(step * 10);
            let at = paths.arrival(ip(1), ip(2), now, last);
            assert!(at >= last, "segment {step} overtook the one before");
            assert!(at >= now + Duration::from_millis(1), "segment {step} early");
            assert!(
                at <= (now + Duration::from_millis(9)).max(last),
                "segment {step} later than the delay bound"
            );
            last = at;
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_arrivals_and_another_seed_others() {
        let draw = |seed| {
            let mut paths = Paths::new(NetConfig {
                seed,
                loss_percent: 10,
                clog_percent: 5,
                ..NetConfig::default()
            });
            let start = Instant::now();
            (0..200)
                .map(|_| paths.arrival(ip(1), ip(2), start, start) - start)
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn loss_makes_segments_a_retransmission_late() {
        let mut paths = Paths::new(NetConfig {
            loss_percent: 100,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
            retransmit_delay: Duration::from_millis(200),
            ..NetConfig::default()
        });
        let now = Instant::now();
        assert_eq!(
            paths.arrival(ip(1), ip(2), now, now),
            now + Duration::from_millis(201)
        );
    }

    #[test]
    fn a_one_way_partition_holds_one_direction_and_heal_ends_it() {
        let mut paths = Paths::new(NetConfig::default());
        let now = Instant::now();
        paths.partition(ip(1), ip(2), Direction::OneWay);
        assert_eq!(paths.state(ip(1), ip(2), now), PathState::Partitioned);
        assert_eq!(paths.state(ip(2), ip(1), now), PathState::Open);
        paths.partition(ip(1), ip(3), Direction::Both);
        assert_eq!(paths.state(ip(3), ip(1), now), PathState::Partitioned);
        paths.heal(ip(2), ip(1));
        assert_eq!(paths.state(ip(1), ip(2), now), PathState::Open);
        assert_eq!(paths.state(ip(1), ip(3), now), PathState::Partitioned);
        paths.heal_all();
        assert_eq!(paths.state(ip(3), ip(1), now), PathState::Open);
    }

    #[test]
    fn a_clog_holds_its_path_until_it_ends_and_never_shortens() {
        let mut paths = Paths::new(NetConfig::default());
        let now = Instant::now();
        let later = now + Duration::from_millis(50);
        paths.clog(ip(1), ip(2), later);
        paths.clog(ip(1), ip(2), now + Duration::from_millis(10));
        assert_eq!(
            paths.state(ip(1), ip(2), now),
            PathState::CloggedUntil(later)
        );
        assert_eq!(paths.state(ip(2), ip(1), now), PathState::Open);
        assert_eq!(paths.state(ip(1), ip(2), later), PathState::Open);
    }

    #[test]
    fn bad_configurations_are_refused() {
        let inverted = NetConfig {
            min_delay: Duration::from_millis(2),
            max_delay: Duration::from_millis(1),
            ..NetConfig::default()
        };
        assert!(inverted
            .validate()
            .unwrap_err()
            .to_string()
            .contains("min_delay"));
        let loss = NetConfig {
            loss_percent: 101,
            ..NetConfig::default()
        };
        assert!(loss.validate().is_err());
        assert!(NetConfig::default().validate().is_ok());
    }
}
