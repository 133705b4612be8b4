//! The leader's broker heartbeat table (RocketMQ's `DefaultBrokerHeartbeatManager`):
//! which brokers are alive, and the facts their last BROKER_HEARTBEAT reported. Not
//! replicated: it is this controller's own view, measured on the clock the caller passes
//! in (`now_ms`, milliseconds on any monotonic scale), so tests drive time.
//!
//! Invariants:
//! - memory is bounded by the replicated state: a heartbeat is recorded only for a broker
//!   registered there (same cluster, group and id), and
//!   [`BrokerLiveness::retain_registered`] drops entries whose broker was cleaned, so the
//!   table never holds more entries than there are registered brokers (asserted);
//! - a broker is alive while `now <= last_heartbeat + timeout` (Java's test), with its
//!   timeout the one it asked for (`heartbeatTimeoutMills`) held within
//!   [`LivenessLimits`];
//! - as in Java, the (epoch, maxOffset, confirmOffset) facts only move forward while the
//!   entry lives: a report with a lower (epoch, maxOffset) pair keeps the higher facts.

use std::collections::BTreeMap;

use super::election::BrokerFacts;
use super::headers::BrokerHeartbeatRequest;
use super::state::{BrokerId, ReplicasInfo};
use crate::remoting::codes::response as code;

/// A broker's identity in the table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrokerKey {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_id: BrokerId,
}

/// The bounds of a broker's heartbeat timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivenessLimits {
    /// Used when a heartbeat names none (Java's `DEFAULT_BROKER_CHANNEL_EXPIRED_TIME`,
    /// 10 s, also the broker's `controllerHeartBeatTimeoutMills` default).
    pub default_timeout_ms: u64,
    /// Below about two heartbeat intervals a broker would flap between alive and dead on
    /// one late heartbeat; 500 ms allows ringmq brokers' 300 ms beats with a 1.5 s
    /// timeout (`controllerHeartBeatTimeoutMills`), which is what makes a silent master's
    /// failover take under 2 s.
    pub min_timeout_ms: u64,
    /// A broker may not keep itself "alive" after dying for longer than this.
    pub max_timeout_ms: u64,
}

impl LivenessLimits {
    /// The timeout of a broker that declared `declared` (a heartbeat's, or the one it
    /// registered with): within the bounds, the default when it declared none.
    pub fn timeout_ms(&self, declared: Option<u64>) -> u64 {
        declared
            .unwrap_or(self.default_timeout_ms)
            .clamp(self.min_timeout_ms, self.max_timeout_ms)
    }
}

impl Default for LivenessLimits {
    fn default() -> LivenessLimits {
        LivenessLimits {
            default_timeout_ms: 10_000,
            min_timeout_ms: 500,
            max_timeout_ms: 120_000,
        }
    }
}

/// One broker's last heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveEntry {
    pub address: String,
    pub last_heartbeat_ms: u64,
    pub timeout_ms: u64,
    pub epoch: i32,
    pub max_offset: i64,
    pub confirm_offset: i64,
    pub election_priority: i32,
}

impl LiveEntry {
    pub fn is_alive(&self, now_ms: u64) -> bool {
        now_ms <= self.last_heartbeat_ms.saturating_add(self.timeout_ms)
    }

    pub fn facts(&self) -> BrokerFacts {
        BrokerFacts {
            epoch: self.epoch,
            max_offset: self.max_offset,
            election_priority: self.election_priority,
        }
    }
}

/// What became of a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeartbeatStatus {
    Recorded,
    /// No `brokerId` (Java answers CONTROLLER_INVALID_REQUEST).
    MissingBrokerId,
    /// The broker is not registered in the replicated state: not recorded.
    NotRegistered(BrokerKey),
}

impl HeartbeatStatus {
    /// The response code to answer the heartbeat with.
    pub fn code(&self) -> i32 {
        match self {
            HeartbeatStatus::Recorded => code::SUCCESS,
            HeartbeatStatus::MissingBrokerId => code::CONTROLLER_INVALID_REQUEST,
            HeartbeatStatus::NotRegistered(_) => code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
        }
    }
}

/// The heartbeat table; see the module doc.
#[derive(Clone, Debug, Default)]
pub struct BrokerLiveness {
    limits: LivenessLimits,
    entries: BTreeMap<BrokerKey, LiveEntry>,
    /// Brokers whose heartbeat connection closed since their last beat: known dead, not
    /// merely unheard (bounded by the registered brokers, as the entries are).
    closed: std::collections::BTreeSet<BrokerKey>,
}

impl BrokerLiveness {
    pub fn new(limits: LivenessLimits) -> BrokerLiveness {
        assert!(
            limits.min_timeout_ms <= limits.default_timeout_ms
                && limits.default_timeout_ms <= limits.max_timeout_ms,
            "liveness limits out of order: {limits:?}"
        );
        BrokerLiveness {
            limits,
            entries: BTreeMap::new(),
            closed: std::collections::BTreeSet::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entry(&self, key: &BrokerKey) -> Option<&LiveEntry> {
        self.entries.get(key)
    }

    /// Records a heartbeat received at `now_ms`, if its broker is registered in `state`.
    pub fn record(
        &mut self,
        state: &ReplicasInfo,
        heartbeat: &BrokerHeartbeatRequest,
        now_ms: u64,
    ) -> HeartbeatStatus {
        let Some(broker_id) = heartbeat.broker_id else {
            return HeartbeatStatus::MissingBrokerId;
        };
        let key = BrokerKey {
            cluster_name: heartbeat.cluster_name.clone(),
            broker_name: heartbeat.broker_name.clone(),
            broker_id,
        };
        if !state.is_registered(&key.cluster_name, &key.broker_name, broker_id) {
            return HeartbeatStatus::NotRegistered(key);
        }
        let report = self.entry_from(heartbeat, now_ms);
        self.closed.remove(&key);
        match self.entries.get_mut(&key) {
            Some(entry) => merge(entry, report),
            None => {
                self.entries.insert(key, report);
            }
        }
        assert!(
            self.entries.len() <= state.registered_brokers(),
            "heartbeat table holds {} entries for {} registered brokers",
            self.entries.len(),
            state.registered_brokers()
        );
        HeartbeatStatus::Recorded
    }

    /// The entry a heartbeat makes, Java's defaults for absent facts: epoch and offsets
    /// -1, priority `i32::MAX` (least preferred).
    fn entry_from(&self, heartbeat: &BrokerHeartbeatRequest, now_ms: u64) -> LiveEntry {
        let declared = heartbeat.heartbeat_timeout_mills;
        let timeout_ms = self
            .limits
            .timeout_ms(declared.map(|ms| ms.max(0).unsigned_abs()));
        LiveEntry {
            address: heartbeat.broker_addr.clone(),
            last_heartbeat_ms: now_ms,
            timeout_ms,
            epoch: heartbeat.epoch.unwrap_or(-1),
            max_offset: heartbeat.max_offset.unwrap_or(-1),
            confirm_offset: heartbeat.confirm_offset.unwrap_or(-1),
            election_priority: heartbeat.election_priority.unwrap_or(i32::MAX),
        }
    }

    /// Whether the broker is alive at `now_ms`.
    pub fn is_alive(&self, key: &BrokerKey, now_ms: u64) -> bool {
        self.entries
            .get(key)
            .is_some_and(|entry| entry.is_alive(now_ms))
    }

    /// The alive brokers of one group with their facts: the election's input.
    pub fn alive_in_group(
        &self,
        cluster_name: &str,
        broker_name: &str,
        now_ms: u64,
    ) -> BTreeMap<BrokerId, BrokerFacts> {
        self.entries
            .iter()
            .filter(|(key, entry)| {
                key.cluster_name == cluster_name
                    && key.broker_name == broker_name
                    && entry.is_alive(now_ms)
            })
            .map(|(key, entry)| (key.broker_id, entry.facts()))
            .collect()
    }

    /// Every broker alive at `now_ms`.
    pub fn alive(&self, now_ms: u64) -> Vec<BrokerKey> {
        self.keys_where(|entry| entry.is_alive(now_ms))
    }

    /// Every broker whose heartbeat expired at `now_ms` (still in the table).
    pub fn expired(&self, now_ms: u64) -> Vec<BrokerKey> {
        self.keys_where(|entry| !entry.is_alive(now_ms))
    }

    fn keys_where(&self, keep: impl Fn(&LiveEntry) -> bool) -> Vec<BrokerKey> {
        self.entries
            .iter()
            .filter(|(_, entry)| keep(entry))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Drops the expired entries and returns their brokers (Java's scan removes them and
    /// reports each as inactive).
    pub fn remove_expired(&mut self, now_ms: u64) -> Vec<BrokerKey> {
        let expired = self.expired(now_ms);
        for key in &expired {
            self.entries.remove(key);
        }
        expired
    }

    /// The bounds this table was made with.
    pub fn limits(&self) -> LivenessLimits {
        self.limits
    }

    /// Forgets one broker: it counts as dead from now on (its heartbeat connection closed).
    /// The broker's heartbeat connection closed: it is dead, and known to be (a broker
    /// only closes it when it stops or dies).
    pub fn closed(&mut self, key: &BrokerKey) {
        if self.entries.remove(key).is_some() {
            self.closed.insert(key.clone());
        }
    }

    /// Drops the entries of brokers `state` no longer registers (after a clean).
    pub fn retain_registered(&mut self, state: &ReplicasInfo) {
        self.entries.retain(|key, _| {
            state.is_registered(&key.cluster_name, &key.broker_name, key.broker_id)
        });
        self.closed
            .retain(|key| state.is_registered(&key.cluster_name, &key.broker_name, key.broker_id));
    }

    /// The groups whose master is not alive while another of their brokers is: the ones
    /// the controller should elect for (Java's `scanNeedReelectBrokerSets`).
    ///
    /// `leading_since_ms`: when this table's leadership began. A master it has not heard
    /// from (nor seen close its connection) may be alive, beating to the old leader, until
    /// one heartbeat timeout of that master's has passed since: its own, kept in the state
    /// when it registered, else the default. Its write lease, shorter than that timeout and
    /// counted from a beat the old leader answered, has lapsed by then.
    pub fn groups_to_reelect(
        &self,
        state: &ReplicasInfo,
        now_ms: u64,
        leading_since_ms: u64,
    ) -> Vec<String> {
        let mut names = Vec::new();
        for (name, group) in state.groups() {
            let Some(master) = group.master else {
                continue;
            };
            let key = |broker_id| BrokerKey {
                cluster_name: group.cluster_name.clone(),
                broker_name: name.clone(),
                broker_id,
            };
            let any_alive = group
                .brokers
                .keys()
                .any(|&id| self.is_alive(&key(id), now_ms));
            let registered = group.brokers.get(&master);
            let grace_ms = self
                .limits
                .timeout_ms(registered.and_then(|entry| entry.heartbeat_timeout_ms));
            let master = key(master);
            let known = now_ms >= leading_since_ms.saturating_add(grace_ms)
                || self.entries.contains_key(&master)
                || self.closed.contains(&master);
            if known && !self.is_alive(&master, now_ms) && any_alive {
                names.push(name.clone());
            }
        }
        names
    }
}

/// Folds a new report into an entry: time, timeout, address and priority always; the
/// log facts only when (epoch, maxOffset) moved forward.
fn merge(entry: &mut LiveEntry, report: LiveEntry) {
    entry.last_heartbeat_ms = report.last_heartbeat_ms;
    entry.timeout_ms = report.timeout_ms;
    entry.address = report.address;
    entry.election_priority = report.election_priority;
    if (report.epoch, report.max_offset) > (entry.epoch, entry.max_offset) {
        entry.epoch = report.epoch;
        entry.max_offset = report.max_offset;
        entry.confirm_offset = report.confirm_offset;
    }
}

#[cfg(test)]
#[path = "liveness_tests.rs"]
mod tests;
