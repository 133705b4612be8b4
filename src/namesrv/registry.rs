//! The standalone name server's registry: which broker groups exist, which of their
//! brokers are alive, and which topics each group serves. Pure data: no I/O, the time is
//! passed in (`now_ms`), so expiry is tested with an injected clock.
//!
//! It follows Java 5.x's `RouteInfoManager`:
//!
//! - **Register** (REGISTER_BROKER): the broker name joins its cluster, the broker's id
//!   maps to its address in the group, and its liveness entry (keyed by broker address)
//!   records the time, the heartbeat timeout from the header (default
//!   [`RegistryLimits::default_heartbeat_timeout_ms`], 120 s), the HA address, the data version and the
//!   connection it came on. Only a **master** (id 0) defines the group's queue data, and
//!   only when its data version changed or it registers first; a slave's registration
//!   never changes queue data. A slave's answer carries the master's address and HA
//!   address when the master is registered. An address registered again under another
//!   (name, id) leaves its old place first; an id registered again at another address
//!   drops the old address's liveness entry.
//! - A master's registration **adds** to the group's topics (Java's default
//!   `deleteTopicWithBrokerRegistration=false`): a topic the master no longer lists keeps
//!   its route until DELETE_TOPIC_IN_NAMESRV (`ringmq admin topic-delete` sends it). It must
//!   be so beside RocketMQ 5.x brokers, which register a topic they just created alone
//!   (`registerSingleTopicAll`): replacing would drop their other topics from every route
//!   until their next full registration. With
//!   [`RegistryLimits::replace_topics_on_register`] (the key set to `true`) a master's
//!   registration replaces its group's topic set.
//! - **Unregister** (UNREGISTER_BROKER, a closed connection, an expiry): as Java's
//!   `unRegisterBroker`, the liveness entry goes, the id leaves its group; a group left
//!   with no broker is removed with its queue data (a topic left with no group is
//!   removed) and leaves its cluster (an empty cluster is removed). When only the master
//!   left and the group allows an acting master, its queue data loses the write bit;
//!   otherwise the queue data stays, so consumers still read from the slaves while
//!   producers, which send only to groups with a master, skip the group.
//! - **Expiry** (`scanNotActiveBroker`, every `scanNotActiveBrokerInterval`): a broker
//!   whose last registration is older than its timeout is unregistered.
//! - **A closed connection** (`onChannelDestroy`) unregisters at once every broker that
//!   registered over it. Java closes an expired broker's channel; here the registry holds
//!   no sockets, so an expired broker's connection stays open until the broker closes it.
//!
//! Bounds: at most [`RegistryLimits::max_brokers`] broker addresses are alive (a new one
//! past it is refused, naming the limit); each registration is bounded by the codec's
//! [`RegisterLimits`] (body bytes, topics), so the topic table holds at most
//! `max_brokers × max_topics` entries.
//!
//! Invariants (asserted after every change): every liveness entry is the address of
//! exactly one (group, id), and every (group, id) address has a liveness entry; every
//! group is in its cluster's set and every cluster set is non-empty and names existing
//! groups; no topic has an empty queue-data map.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use crate::remoting::register_broker::{
    DataVersion, RegisterBrokerRequest, RegisterBrokerResult, RegisterLimits,
};

use super::route::{BrokerData, QueueData};

/// How long a broker stays registered without a new registration when its header has no
/// `heartbeatTimeoutMillis` (Java's `DEFAULT_BROKER_CHANNEL_EXPIRED_TIME`).
pub const DEFAULT_HEARTBEAT_TIMEOUT_MS: i64 = 120_000;

/// Broker addresses alive at once by default: a cluster of a few hundred groups with a
/// slave or two each fits; the cap keeps a misbehaving client from growing the tables.
pub const DEFAULT_MAX_BROKERS: usize = 1024;

const PERM_WRITE: i32 = 2;
/// Java's `TopicSysFlag` bits.
const FLAG_UNIT: i32 = 1;
const FLAG_UNIT_SUB: i32 = 2;

/// The registry's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegistryLimits {
    pub max_brokers: usize,
    /// A broker's timeout when its registration sets none.
    pub default_heartbeat_timeout_ms: i64,
    /// Whether a master's registration drops its group's topics it no longer lists
    /// (`deleteTopicWithBrokerRegistration`; see the module doc).
    pub replace_topics_on_register: bool,
    pub register: RegisterLimits,
}

impl Default for RegistryLimits {
    fn default() -> RegistryLimits {
        RegistryLimits {
            max_brokers: DEFAULT_MAX_BROKERS,
            default_heartbeat_timeout_ms: DEFAULT_HEARTBEAT_TIMEOUT_MS,
            replace_topics_on_register: false,
            register: RegisterLimits::default(),
        }
    }
}

/// Why a registration is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("name server holds {max} brokers (its maxBrokers limit); {addr} is not registered")]
    TooManyBrokers { addr: String, max: usize },
}

/// A live broker, by address.
#[derive(Clone, Debug)]
struct Live {
    broker_name: String,
    broker_id: i64,
    last_update_ms: i64,
    timeout_ms: i64,
    ha_server_addr: String,
    data_version: DataVersion,
    /// The connection it registered over, if any.
    connection: Option<SocketAddr>,
}

/// A broker group, by broker name.
#[derive(Clone, Debug)]
struct Group {
    cluster: String,
    /// By broker id; 0 = master.
    addrs: BTreeMap<i64, String>,
    enable_acting_master: bool,
}

/// A topic's route: the groups serving it and their queues, in broker-name order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRoute {
    pub brokers: Vec<BrokerData>,
    /// (broker name, its queues).
    pub queues: Vec<(String, QueueData)>,
}

/// Who left, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    pub broker_addr: String,
    pub broker_name: String,
    pub broker_id: i64,
}

/// The registry; see the module doc.
#[derive(Debug, Default)]
pub struct Registry {
    limits: RegistryLimits,
    groups: BTreeMap<String, Group>,
    clusters: BTreeMap<String, BTreeSet<String>>,
    live: BTreeMap<String, Live>,
    /// Topic → broker name → its queues.
    topics: BTreeMap<String, BTreeMap<String, QueueData>>,
}

impl Registry {
    pub fn new(limits: RegistryLimits) -> Registry {
        assert!(
            limits.max_brokers > 0,
            "max_brokers must be above 0, is {}",
            limits.max_brokers
        );
        Registry {
            limits,
            ..Registry::default()
        }
    }

    pub fn limits(&self) -> &RegistryLimits {
        &self.limits
    }

    /// Registers (or refreshes) the broker of `request`, which came over `connection`.
    pub fn register(
        &mut self,
        request: &RegisterBrokerRequest,
        connection: Option<SocketAddr>,
        now_ms: i64,
    ) -> Result<RegisterBrokerResult, RegistryError> {
        let header = &request.header;
        let addr = &header.broker_addr;
        if !self.live.contains_key(addr) && self.live.len() >= self.limits.max_brokers {
            return Err(RegistryError::TooManyBrokers {
                addr: addr.clone(),
                max: self.limits.max_brokers,
            });
        }
        // The same address under another (name, id) leaves its old place first.
        if let Some(old) = self.live.get(addr) {
            if old.broker_name != header.broker_name || old.broker_id != header.broker_id {
                self.unregister_addr(addr);
            }
        }
        self.move_group_to(&header.broker_name, &header.cluster_name);
        self.clusters
            .entry(header.cluster_name.clone())
            .or_default()
            .insert(header.broker_name.clone());
        let group = self
            .groups
            .entry(header.broker_name.clone())
            .or_insert_with(|| Group {
                cluster: header.cluster_name.clone(),
                addrs: BTreeMap::new(),
                enable_acting_master: false,
            });
        group.enable_acting_master = header.enable_acting_master;
        let replaced = group.addrs.insert(header.broker_id, addr.clone());
        let first = replaced.as_deref() != Some(addr.as_str());
        if let Some(old_addr) = replaced.filter(|old| old != addr) {
            // The id moved to a new address: the old one is no longer any broker.
            self.live.remove(&old_addr);
        }
        let changed = self
            .live
            .get(addr)
            .is_none_or(|live| live.data_version != request.body.data_version);
        if header.broker_id == 0 && (first || changed) {
            self.replace_queue_data(&header.broker_name, request);
        }
        self.live.insert(
            addr.clone(),
            Live {
                broker_name: header.broker_name.clone(),
                broker_id: header.broker_id,
                last_update_ms: now_ms,
                timeout_ms: header
                    .heartbeat_timeout_millis
                    .unwrap_or(self.limits.default_heartbeat_timeout_ms),
                ha_server_addr: header.ha_server_addr.clone(),
                data_version: request.body.data_version,
                connection,
            },
        );
        let result = self.master_of(&header.broker_name, header.broker_id);
        self.check();
        Ok(result)
    }

    /// A group registering under another cluster leaves its old one.
    fn move_group_to(&mut self, broker_name: &str, cluster: &str) {
        let Some(group) = self.groups.get_mut(broker_name) else {
            return;
        };
        if group.cluster == cluster {
            return;
        }
        let old = std::mem::replace(&mut group.cluster, cluster.to_owned());
        if let Some(names) = self.clusters.get_mut(&old) {
            names.remove(broker_name);
            if names.is_empty() {
                self.clusters.remove(&old);
            }
        }
    }

    /// For a slave, its master's addresses (when the master is registered).
    fn master_of(&self, broker_name: &str, broker_id: i64) -> RegisterBrokerResult {
        if broker_id == 0 {
            return RegisterBrokerResult::default();
        }
        let master = self
            .groups
            .get(broker_name)
            .and_then(|group| group.addrs.get(&0))
            .and_then(|addr| self.live.get(addr).map(|live| (addr, live)));
        match master {
            Some((addr, live)) => RegisterBrokerResult {
                master_addr: Some(addr.clone()),
                ha_server_addr: Some(live.ha_server_addr.clone()),
            },
            None => RegisterBrokerResult::default(),
        }
    }

    /// The master of `broker_name` registered `request`'s topics: they become the
    /// group's queue data, and topics it no longer lists lose the group.
    fn replace_queue_data(&mut self, broker_name: &str, request: &RegisterBrokerRequest) {
        let listed = &request.body.topics;
        if self.limits.replace_topics_on_register {
            self.topics.retain(|topic, queues| {
                if !listed.contains_key(topic) {
                    queues.remove(broker_name);
                }
                !queues.is_empty()
            });
        }
        for (name, topic) in listed {
            self.topics.entry(name.clone()).or_default().insert(
                broker_name.to_owned(),
                QueueData {
                    read_queue_nums: topic.read_queue_nums,
                    write_queue_nums: topic.write_queue_nums,
                    perm: topic.perm,
                    topic_sys_flag: topic.topic_sys_flag,
                },
            );
        }
    }

    /// UNREGISTER_BROKER: removes `broker_addr` if it is registered as (`broker_name`,
    /// `broker_id`). Returns whether it was.
    pub fn unregister(&mut self, broker_addr: &str, broker_name: &str, broker_id: i64) -> bool {
        let matches = self
            .live
            .get(broker_addr)
            .is_some_and(|live| live.broker_name == broker_name && live.broker_id == broker_id);
        if matches {
            self.unregister_addr(broker_addr);
            self.check();
        }
        matches
    }

    /// Every broker that registered over `connection`, which closed, leaves at once.
    pub fn connection_closed(&mut self, connection: SocketAddr) -> Vec<Removed> {
        let gone: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| live.connection == Some(connection))
            .map(|(addr, _)| addr.clone())
            .collect();
        self.remove_all(gone)
    }

    /// Every broker silent past its timeout at `now_ms` leaves.
    pub fn expire(&mut self, now_ms: i64) -> Vec<Removed> {
        let gone: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| live.last_update_ms.saturating_add(live.timeout_ms) < now_ms)
            .map(|(addr, _)| addr.clone())
            .collect();
        self.remove_all(gone)
    }

    fn remove_all(&mut self, addrs: Vec<String>) -> Vec<Removed> {
        let removed = addrs
            .into_iter()
            .filter_map(|addr| self.unregister_addr(&addr))
            .collect();
        self.check();
        removed
    }

    /// Removes the live broker at `addr` and what only it held (see the module doc).
    fn unregister_addr(&mut self, addr: &str) -> Option<Removed> {
        let live = self.live.remove(addr)?;
        let name = &live.broker_name;
        let group = self
            .groups
            .get_mut(name)
            .unwrap_or_else(|| panic!("live broker {addr} names group {name}, which is gone"));
        let held = group.addrs.remove(&live.broker_id);
        assert_eq!(
            held.as_deref(),
            Some(addr),
            "live broker {addr} is id {} of {name}",
            live.broker_id
        );
        if group.addrs.is_empty() {
            let cluster = self.groups.remove(name).map(|group| group.cluster);
            if let Some(cluster) = cluster {
                if let Some(names) = self.clusters.get_mut(&cluster) {
                    names.remove(name);
                    if names.is_empty() {
                        self.clusters.remove(&cluster);
                    }
                }
            }
            self.topics.retain(|_, queues| {
                queues.remove(name);
                !queues.is_empty()
            });
        } else if live.broker_id == 0 && group.enable_acting_master {
            self.set_write_perm(name, false);
        }
        Some(Removed {
            broker_addr: addr.to_owned(),
            broker_name: live.broker_name,
            broker_id: live.broker_id,
        })
    }

    /// QUERY_DATA_VERSION: whether `version` differs from the one `broker_addr` last
    /// registered (true when it is not registered), and that one; refreshes its liveness
    /// as Java's `queryBrokerTopicConfig` does.
    pub fn query_data_version(
        &mut self,
        broker_addr: &str,
        version: &DataVersion,
        now_ms: i64,
    ) -> (bool, Option<DataVersion>) {
        match self.live.get_mut(broker_addr) {
            Some(live) => {
                live.last_update_ms = now_ms;
                (live.data_version != *version, Some(live.data_version))
            }
            None => (true, None),
        }
    }

    /// BROKER_HEARTBEAT: refreshes `broker_addr`'s liveness; whether it is registered.
    pub fn heartbeat(&mut self, broker_addr: &str, now_ms: i64) -> bool {
        self.live
            .get_mut(broker_addr)
            .map(|live| live.last_update_ms = now_ms)
            .is_some()
    }

    /// WIPE_WRITE_PERM_OF_BROKER (`grant` false) and ADD_WRITE_PERM_OF_BROKER (true):
    /// the write bit of every topic of `broker_name`; how many topics.
    pub fn set_write_perm(&mut self, broker_name: &str, grant: bool) -> usize {
        let mut count = 0;
        for queues in self.topics.values_mut() {
            if let Some(queue) = queues.get_mut(broker_name) {
                queue.perm = if grant {
                    queue.perm | PERM_WRITE
                } else {
                    queue.perm & !PERM_WRITE
                };
                count += 1;
            }
        }
        count
    }

    /// DELETE_TOPIC_IN_NAMESRV: the topic's queue data of `cluster`'s groups, or all of it
    /// when no cluster is named.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) {
        let Some(queues) = self.topics.get_mut(topic) else {
            return;
        };
        match cluster.and_then(|cluster| self.clusters.get(cluster)) {
            Some(names) => queues.retain(|name, _| !names.contains(name)),
            None if cluster.is_some() => {}
            None => queues.clear(),
        }
        if queues.is_empty() {
            self.topics.remove(topic);
        }
    }

    fn broker_data(&self, name: &str, group: &Group) -> BrokerData {
        BrokerData {
            cluster: group.cluster.clone(),
            broker_name: name.to_owned(),
            addrs: group.addrs.clone(),
            enable_acting_master: group.enable_acting_master,
        }
    }

    /// GET_ROUTEINFO_BY_TOPIC: every group serving `topic` and its queues, in broker-name
    /// order; `None` when no group does.
    pub fn route(&self, topic: &str) -> Option<TopicRoute> {
        let queues = self.topics.get(topic)?;
        let brokers: Vec<BrokerData> = queues
            .keys()
            .filter_map(|name| Some(self.broker_data(name, self.groups.get(name)?)))
            .collect();
        if brokers.is_empty() {
            return None;
        }
        let queues = queues.iter().map(|(name, q)| (name.clone(), *q)).collect();
        Some(TopicRoute { brokers, queues })
    }

    /// Every group, in broker-name order (GET_BROKER_CLUSTER_INFO).
    pub fn brokers(&self) -> Vec<BrokerData> {
        self.groups
            .iter()
            .map(|(name, group)| self.broker_data(name, group))
            .collect()
    }

    /// Every topic, in name order.
    pub fn topic_names(&self) -> impl Iterator<Item = &str> {
        self.topics.keys().map(String::as_str)
    }

    /// The topics served by a group of `cluster` (GET_TOPICS_BY_CLUSTER).
    pub fn topics_of_cluster(&self, cluster: &str) -> Vec<&str> {
        let Some(names) = self.clusters.get(cluster) else {
            return Vec::new();
        };
        self.topics
            .iter()
            .filter(|(_, queues)| queues.keys().any(|name| names.contains(name)))
            .map(|(topic, _)| topic.as_str())
            .collect()
    }

    /// GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster names and broker names (Java's name server
    /// answers these, each being a system topic of its brokers), and one broker address.
    pub fn system_topics(&self) -> (Vec<&str>, Option<&str>) {
        let mut names = Vec::new();
        for (cluster, brokers) in &self.clusters {
            names.push(cluster.as_str());
            names.extend(brokers.iter().map(String::as_str));
        }
        let addr = self
            .groups
            .values()
            .find_map(|group| group.addrs.values().next())
            .map(String::as_str);
        (names, addr)
    }

    /// Topics whose first group's `topicSysFlag` has the unit bit (`want_unit`) and the
    /// unit-sub bit (`want_sub`) as asked; `None` = either.
    pub fn topics_by_flags(&self, want_unit: Option<bool>, want_sub: Option<bool>) -> Vec<&str> {
        let fits = |want: Option<bool>, has: bool| want.is_none_or(|want| want == has);
        self.topics
            .iter()
            .filter(|(_, queues)| {
                queues.values().next().is_some_and(|q| {
                    fits(want_unit, q.topic_sys_flag & FLAG_UNIT != 0)
                        && fits(want_sub, q.topic_sys_flag & FLAG_UNIT_SUB != 0)
                })
            })
            .map(|(topic, _)| topic.as_str())
            .collect()
    }

    /// How many broker addresses are alive.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// The invariants of the module doc.
    fn check(&self) {
        let mut slots = 0;
        for (name, group) in &self.groups {
            assert!(!group.addrs.is_empty(), "group {name} has no broker");
            let in_cluster = self
                .clusters
                .get(&group.cluster)
                .is_some_and(|names| names.contains(name));
            assert!(
                in_cluster,
                "group {name} is not in cluster {}",
                group.cluster
            );
            for (id, addr) in &group.addrs {
                let live = self.live.get(addr);
                assert!(
                    live.is_some_and(|l| &l.broker_name == name && l.broker_id == *id),
                    "{name} id {id} at {addr} has no matching liveness entry: {live:?}"
                );
                slots += 1;
            }
        }
        assert_eq!(
            slots,
            self.live.len(),
            "{} liveness entries for {slots} group slots",
            self.live.len()
        );
        for (cluster, names) in &self.clusters {
            assert!(!names.is_empty(), "cluster {cluster} is empty");
            for name in names {
                assert!(
                    self.groups.contains_key(name),
                    "cluster {cluster} names gone group {name}"
                );
            }
        }
        for (topic, queues) in &self.topics {
            assert!(!queues.is_empty(), "topic {topic} has no queue data");
        }
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
