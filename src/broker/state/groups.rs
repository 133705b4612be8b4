//! The node's client registry: which client is in which producer and consumer group, over
//! which connection its latest heartbeat came, and when each registration expires. The wire
//! side (HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP) is [`crate::broker::requests::consumers`].
//!
//! What this file owns: [`Groups`], one per node, shared by every shard behind one lock,
//! in memory only (clients re-register every 30 s, so nothing here is persisted).
//!
//! The unit of membership is a *registration*: (role, group, client), with the time of the
//! latest heartbeat that named it. A heartbeat that leaves a group out does not refresh that
//! registration; it then expires on its own, as Java's per-group `ClientChannelInfo` does.
//!
//! Indexes, kept in step by every operation:
//! - by group: producer group → client → last heartbeat; consumer group → client → last
//!   heartbeat, plus the group's subscriptions;
//! - by client: its connection and the (role, group) pairs it is registered in;
//! - by connection: the clients whose latest heartbeat came over it;
//! - by expiry: every registration ordered by its last heartbeat, oldest first.
//!
//! Costs (n = registrations in the node, k = what the operation changes), each under the
//! lock: a heartbeat naming k groups is O(k log n); UNREGISTER_CLIENT is O(k log n) for the
//! k registrations it removes; a closed connection is O(k log n) for the k registrations of
//! its clients; a sweep is O(log n) plus O(log n) per registration it expires. Neither a
//! sweep nor the cleanup of closed connections removes more than [`SWEEP_BATCH`]
//! registrations per lock hold and per turn of the shard ([`Groups::sweep_all`];
//! [`Groups::connection_closed_step`] driven by
//! [`crate::broker::requests::consumers::reap_closed_connections`]), however many expire or close at once.
//! Nothing scans every group or every client. What stays O(members) is inherent: listing a
//! group, and telling its members it changed.
//!
//! Expiry tells nobody (as before this index existed): the members left rebalance on their
//! own timer. UNREGISTER_CLIENT and a closed connection do tell them.
//!
//! Invariants (checked with `assert!` where an operation relies on them, and all at once
//! by the unit tests' consistency check):
//! - A group exists only while it has a client; a client entry exists only while it has a
//!   registration; a connection is indexed only while a client is on it.
//! - Client c is in group g's members iff (role, g) is in c's registrations, iff the expiry
//!   order holds (last heartbeat, role, g, c) with the same time as g's member map.
//! - Connection p lists client c iff c's entry names p.
//! - A group's subscriptions are those of its latest heartbeat, topic by topic, except that
//!   a subscription is never replaced by one with a lower `subVersion` (a late, stale
//!   heartbeat). Topics missing from a heartbeat are dropped.
//!
//! Times are tokio `Instant`s, so paused-time tests control expiry.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

use tokio::time::{Duration, Instant};

use crate::sync::Locked;

use crate::broker::requests::consumers::{HeartbeatData, SubscriptionData};

/// Registrations one sweep or close-cleanup step removes under the lock before it lets the
/// shard (and the other shards waiting on the lock) run again: a bound on the stall, not on
/// what a sweep can expire. `examples/client_sweep_stall.rs` measures the stall; with 1024
/// it was 7 to 13 ms at the worst on a loaded 2-core machine. At 256 a step took about
/// 0.8 ms (some 3 µs a registration), and a round trip of another connection waits behind
/// such a step once per hop (its read, its request, its write), so steps are smaller.
pub const SWEEP_BATCH: usize = 64;

/// What one [`Groups::connection_closed_step`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct CloseStep {
    /// The consumer groups that lost a client and still have members, in name order.
    pub left: Vec<String>,
    /// Registrations removed.
    pub removed: usize,
    /// No client of the connection is left.
    pub done: bool,
}

/// One client of a consumer group, as GET_CONSUMER_CONNECTION_LIST lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConnection {
    pub client_id: String,
    /// The connection its latest heartbeat came over.
    pub peer: SocketAddr,
    pub language: String,
    pub version: i32,
}

/// A consumer group's clients, subscriptions (in topic order) and settings.
#[derive(Clone, Debug)]
pub struct GroupConnections {
    pub clients: Vec<ClientConnection>,
    pub subscriptions: Vec<SubscriptionData>,
    pub consume_type: String,
    pub message_model: String,
    pub consume_from_where: String,
}

/// Which kind of group a registration is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Producer,
    Consumer,
}

#[derive(Debug, Default)]
struct ConsumerGroup {
    /// Client id → last heartbeat naming this group.
    clients: BTreeMap<String, Instant>,
    /// Topic → subscription.
    subscriptions: BTreeMap<String, SubscriptionData>,
    /// How the group consumes, as its latest heartbeat said (for the admin tools).
    consume_type: String,
    message_model: String,
    consume_from_where: String,
}

#[derive(Debug)]
struct Client {
    /// The connection its latest heartbeat came over.
    peer: SocketAddr,
    /// The groups it is registered in.
    registrations: BTreeSet<(Role, String)>,
    /// The client's language and `MQVersion` ordinal, from its latest heartbeat's header.
    language: String,
    version: i32,
}

/// One entry of the expiry order: (last heartbeat, role, group, client).
type Deadline = (Instant, Role, String, String);

#[derive(Debug, Default)]
struct Tables {
    consumers: HashMap<String, ConsumerGroup>,
    /// Producer group → client id → last heartbeat.
    producers: HashMap<String, BTreeMap<String, Instant>>,
    clients: HashMap<String, Client>,
    /// Connection → the clients whose latest heartbeat came over it.
    by_peer: HashMap<SocketAddr, BTreeSet<String>>,
    /// Every registration, oldest heartbeat first.
    expiry: BTreeSet<Deadline>,
}

impl Tables {
    /// The members of (role, group), if the group exists.
    fn members_mut(&mut self, role: Role, group: &str) -> Option<&mut BTreeMap<String, Instant>> {
        match role {
            Role::Producer => self.producers.get_mut(group),
            Role::Consumer => self.consumers.get_mut(group).map(|g| &mut g.clients),
        }
    }

    /// Ties `client` to `peer`, creating its entry (with no registration yet) if needed.
    fn link(&mut self, client: &str, peer: SocketAddr) {
        let old = match self.clients.get_mut(client) {
            Some(entry) if entry.peer == peer => return,
            Some(entry) => Some(std::mem::replace(&mut entry.peer, peer)),
            None => {
                let entry = Client {
                    peer,
                    registrations: BTreeSet::new(),
                    language: String::new(),
                    version: 0,
                };
                self.clients.insert(client.to_owned(), entry);
                None
            }
        };
        if let Some(old) = old {
            self.unlink(old, client);
        }
        self.by_peer
            .entry(peer)
            .or_default()
            .insert(client.to_owned());
    }

    /// Takes `client` off the connection index of `peer`.
    fn unlink(&mut self, peer: SocketAddr, client: &str) {
        let on_peer = self.by_peer.get_mut(&peer);
        let removed = on_peer.map(|clients| (clients.remove(client), clients.is_empty()));
        assert!(
            matches!(removed, Some((true, _))),
            "client {client:?} names connection {peer} but is not indexed under it"
        );
        if let Some((_, true)) = removed {
            self.by_peer.remove(&peer);
        }
    }

    /// Registers or refreshes (role, group, client) at `now`; true if it is new. The client
    /// must be linked already.
    /// How many registrations `data` would add: the (role, group) pairs it names that its
    /// client does not hold yet, each once.
    fn new_registrations(&self, data: &HeartbeatData) -> usize {
        let held = self
            .clients
            .get(&data.client_id)
            .map(|client| &client.registrations);
        let named = data
            .producer_data_set
            .iter()
            .map(|producer| (Role::Producer, producer.group_name.as_str()))
            .chain(
                data.consumer_data_set
                    .iter()
                    .map(|consumer| (Role::Consumer, consumer.group_name.as_str())),
            );
        let mut new = BTreeSet::new();
        for (role, group) in named {
            let holds = held.is_some_and(|held| held.contains(&(role, group.to_owned())));
            if !holds {
                new.insert((role, group));
            }
        }
        new.len()
    }

    fn register(&mut self, role: Role, group: &str, client: &str, now: Instant) -> bool {
        let members = match role {
            Role::Producer => self.producers.entry(group.to_owned()).or_default(),
            Role::Consumer => &mut self.consumers.entry(group.to_owned()).or_default().clients,
        };
        let previous = members.insert(client.to_owned(), now);
        if let Some(last) = previous {
            let refreshed = self
                .expiry
                .remove(&(last, role, group.to_owned(), client.to_owned()));
            assert!(
                refreshed,
                "{role:?} registration {group:?}/{client:?} at {last:?} is not in the expiry order"
            );
        }
        self.expiry
            .insert((now, role, group.to_owned(), client.to_owned()));
        let entry = self.clients.get_mut(client);
        assert!(
            entry.is_some(),
            "{role:?} registration {group:?}/{client:?} for a client that was never linked"
        );
        if let Some(entry) = entry {
            entry.registrations.insert((role, group.to_owned()));
        }
        previous.is_none()
    }

    /// Removes (role, group, client) from every index; `None` if there was no such
    /// registration, else whether the group still has members.
    fn deregister(&mut self, role: Role, group: &str, client: &str) -> Option<bool> {
        let members = self.members_mut(role, group)?;
        let last = members.remove(client)?;
        let still_has_members = !members.is_empty();
        if !still_has_members {
            // The last member takes the group (and a consumer group's subscriptions) along.
            match role {
                Role::Producer => {
                    self.producers.remove(group);
                }
                Role::Consumer => {
                    self.consumers.remove(group);
                }
            }
        }
        let expired = self
            .expiry
            .remove(&(last, role, group.to_owned(), client.to_owned()));
        assert!(
            expired,
            "{role:?} registration {group:?}/{client:?} at {last:?} is not in the expiry order"
        );
        let entry = self.clients.get_mut(client);
        let (listed, emptied, peer) = match entry {
            Some(entry) => (
                entry.registrations.remove(&(role, group.to_owned())),
                entry.registrations.is_empty(),
                entry.peer,
            ),
            None => panic!("{role:?} member {group:?}/{client:?} has no client entry"),
        };
        assert!(
            listed,
            "{role:?} member {group:?}/{client:?} is missing from the client's registrations"
        );
        if emptied {
            self.clients.remove(client);
            self.unlink(peer, client);
        }
        Some(still_has_members)
    }

    /// The consumer groups of `groups` that still have members, in name order.
    fn still_joined(&self, groups: BTreeSet<String>) -> Vec<String> {
        groups
            .into_iter()
            .filter(|group| self.consumers.contains_key(group))
            .collect()
    }

    /// Removes every registration of `client`; returns the consumer groups that lost it and
    /// still have members, in name order.
    fn deregister_everywhere(&mut self, client: &str) -> Vec<String> {
        let Some(entry) = self.clients.get(client) else {
            return Vec::new();
        };
        let registrations: Vec<(Role, String)> = entry.registrations.iter().cloned().collect();
        let mut left = Vec::new();
        for (role, group) in registrations {
            let remaining = self.deregister(role, &group, client);
            assert!(
                remaining.is_some(),
                "client {client:?} lists {role:?} group {group:?}, which does not list it"
            );
            if role == Role::Consumer && remaining == Some(true) {
                left.push(group);
            }
        }
        assert!(
            !self.clients.contains_key(client),
            "client {client:?} outlived its last registration"
        );
        left
    }
}

impl Tables {
    /// Client `id`'s connection entry; `lister` (a group that lists it) names the broken
    /// invariant if it has none.
    fn client_connection(&self, lister: &str, id: &str) -> ClientConnection {
        let client = self.clients.get(id);
        assert!(
            client.is_some(),
            "{lister} lists client {id:?}, which has no entry"
        );
        let client = client.expect("checked above");
        ClientConnection {
            client_id: id.to_owned(),
            peer: client.peer,
            language: client.language.clone(),
            version: client.version,
        }
    }
}

/// The node's producer and consumer groups.
#[derive(Debug, Default)]
pub struct Groups {
    tables: Locked<Tables>,
}

impl Groups {
    pub fn new() -> Groups {
        Groups::default()
    }

    /// Registers (or refreshes) everything one heartbeat, received from `peer`, names, and
    /// ties the client to `peer`; returns the consumer groups the client newly joined.
    pub fn heartbeat(&self, data: &HeartbeatData, now: Instant, peer: SocketAddr) -> Vec<String> {
        match self.heartbeat_bounded(data, now, peer, usize::MAX) {
            Ok(joined) => joined,
            Err(held) => unreachable!("{held} registrations reached an unbounded table's bound"),
        }
    }

    /// [`Groups::heartbeat`], unless the registrations it would add take the table past
    /// `max_registrations`: then it registers nothing (not even a refresh) and returns
    /// the registrations held. Refreshing what a client holds never counts against it.
    pub fn heartbeat_bounded(
        &self,
        data: &HeartbeatData,
        now: Instant,
        peer: SocketAddr,
        max_registrations: usize,
    ) -> Result<Vec<String>, usize> {
        let mut joined = Vec::new();
        let mut tables = self.tables.lock();
        let client = data.client_id.as_str();
        let held = tables.expiry.len();
        let added = tables.new_registrations(data);
        if added > 0 && held.saturating_add(added) > max_registrations {
            return Err(held);
        }
        let names_a_group =
            !data.producer_data_set.is_empty() || !data.consumer_data_set.is_empty();
        if !names_a_group && !tables.clients.contains_key(client) {
            // Nothing to register, and no entry may exist without a registration.
            return Ok(joined);
        }
        tables.link(client, peer);
        if let Some(entry) = tables.clients.get_mut(client) {
            entry.language.clone_from(&data.language);
            entry.version = data.version;
        }
        for producer in &data.producer_data_set {
            tables.register(Role::Producer, &producer.group_name, client, now);
        }
        for consumer in &data.consumer_data_set {
            if tables.register(Role::Consumer, &consumer.group_name, client, now) {
                joined.push(consumer.group_name.clone());
            }
            let group = tables.consumers.get_mut(&consumer.group_name);
            let Some(group) = group else {
                panic!(
                    "consumer group {:?} vanished after a registration",
                    consumer.group_name
                );
            };
            let mut subscriptions = BTreeMap::new();
            for sub in &consumer.subscription_data_set {
                let keep = match group.subscriptions.get(&sub.topic) {
                    Some(old) if old.sub_version > sub.sub_version => old.clone(),
                    _ => sub.clone(),
                };
                subscriptions.insert(sub.topic.clone(), keep);
            }
            group.subscriptions = subscriptions;
            group.consume_type.clone_from(&consumer.consume_type);
            group.message_model.clone_from(&consumer.message_model);
            group
                .consume_from_where
                .clone_from(&consumer.consume_from_where);
        }
        Ok(joined)
    }

    /// Removes `client_id` from the named groups, or from every group when none is named;
    /// returns the consumer groups that still have members and lost this one.
    pub fn unregister(
        &self,
        client_id: &str,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) -> Vec<String> {
        let mut tables = self.tables.lock();
        if producer_group.is_none() && consumer_group.is_none() {
            return tables.deregister_everywhere(client_id);
        }
        if let Some(group) = producer_group {
            tables.deregister(Role::Producer, group, client_id);
        }
        match consumer_group {
            Some(group) if tables.deregister(Role::Consumer, group, client_id) == Some(true) => {
                vec![group.to_owned()]
            }
            _ => Vec::new(),
        }
    }

    /// Removes every client whose latest heartbeat came over the connection from `peer`
    /// (it closed); returns the consumer groups that still have members and lost one.
    pub fn connection_closed(&self, peer: SocketAddr) -> Vec<String> {
        let mut left = BTreeSet::new();
        loop {
            let step = self.connection_closed_step(peer, SWEEP_BATCH);
            left.extend(step.left);
            if step.done {
                // A group one closing client left may have lost its last member to another.
                return self.tables.lock().still_joined(left);
            }
        }
    }

    /// Removes clients of the closed connection from `peer`, whole clients at a time, until
    /// `budget` registrations went or none is left.
    pub fn connection_closed_step(&self, peer: SocketAddr, budget: usize) -> CloseStep {
        let mut tables = self.tables.lock();
        let mut left = BTreeSet::new();
        let mut removed = 0;
        while removed < budget {
            let Some(client) = tables.by_peer.get(&peer).and_then(|c| c.first().cloned()) else {
                return CloseStep {
                    left: tables.still_joined(left),
                    removed,
                    done: true,
                };
            };
            let before = tables.expiry.len();
            left.extend(tables.deregister_everywhere(&client));
            removed += before - tables.expiry.len();
        }
        CloseStep {
            left: tables.still_joined(left),
            removed,
            done: !tables.by_peer.contains_key(&peer),
        }
    }

    /// The connections the group's clients last heartbeated over.
    pub fn consumer_peers(&self, group: &str) -> Vec<SocketAddr> {
        let tables = self.tables.lock();
        let Some(group) = tables.consumers.get(group) else {
            return Vec::new();
        };
        group
            .clients
            .keys()
            .filter_map(|id| tables.clients.get(id).map(|client| client.peer))
            .collect()
    }

    /// Drops up to `max` registrations whose last heartbeat is `expiry` or more before
    /// `now`, oldest first; returns how many went. O(log n) per registration dropped.
    pub fn sweep(&self, now: Instant, expiry: Duration, max: usize) -> usize {
        let mut tables = self.tables.lock();
        let mut removed = 0;
        while removed < max {
            let Some((last, role, group, client)) = tables.expiry.first().cloned() else {
                break;
            };
            if now.saturating_duration_since(last) < expiry {
                break;
            }
            let dropped = tables.deregister(role, &group, &client);
            assert!(
                dropped.is_some(),
                "expiry order names {role:?} {group:?}/{client:?} at {last:?}, which no group has"
            );
            removed += 1;
        }
        removed
    }

    /// Drops every registration whose last heartbeat is `expiry` or more before `now`, in
    /// batches of [`SWEEP_BATCH`] with a yield between them, so that a sweep expiring many
    /// clients holds neither the lock nor the shard for long. Returns how many went.
    pub async fn sweep_all(&self, now: Instant, expiry: Duration) -> usize {
        let mut total = 0;
        loop {
            let removed = self.sweep(now, expiry, SWEEP_BATCH);
            total += removed;
            if removed < SWEEP_BATCH {
                return total;
            }
            tokio::task::yield_now().await;
        }
    }

    /// The group's client ids, sorted; `None` when the group has no client.
    pub fn consumer_ids(&self, group: &str) -> Option<Vec<String>> {
        let tables = self.tables.lock();
        let group = tables.consumers.get(group)?;
        Some(group.clients.keys().cloned().collect())
    }

    /// The producer group's client ids, sorted.
    pub fn producer_ids(&self, group: &str) -> Vec<String> {
        let tables = self.tables.lock();
        tables
            .producers
            .get(group)
            .map(|clients| clients.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The producer group's clients (GET_PRODUCER_CONNECTION_LIST), in client id order;
    /// `None` when the group has no client.
    pub fn producer_connections(&self, group: &str) -> Option<Vec<ClientConnection>> {
        let tables = self.tables.lock();
        let members = tables.producers.get(group)?;
        Some(
            members
                .keys()
                .map(|id| tables.client_connection(&format!("producer group {group:?}"), id))
                .collect(),
        )
    }

    /// The connection and version of client `client_id` while it is in consumer group
    /// `group` (GET_CONSUMER_RUNNING_INFO is relayed over it); `None` when it is not.
    pub fn consumer_client(&self, group: &str, client_id: &str) -> Option<ClientConnection> {
        let tables = self.tables.lock();
        let members = tables.consumers.get(group)?;
        members.clients.get(client_id)?;
        Some(tables.client_connection(&format!("consumer group {group:?}"), client_id))
    }

    /// The group's subscription to `topic`, if a heartbeat registered one.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<SubscriptionData> {
        let tables = self.tables.lock();
        tables
            .consumers
            .get(group)?
            .subscriptions
            .get(topic)
            .cloned()
    }

    /// The consumer groups with at least one client, in name order.
    pub fn consumer_groups(&self) -> Vec<String> {
        let tables = self.tables.lock();
        let mut names: Vec<String> = tables.consumers.keys().cloned().collect();
        names.sort();
        names
    }

    /// The group's clients, subscriptions and consumption settings; `None` when the group
    /// has no client.
    pub fn connections(&self, group: &str) -> Option<GroupConnections> {
        let tables = self.tables.lock();
        let entry = tables.consumers.get(group)?;
        let clients = entry
            .clients
            .keys()
            .map(|id| tables.client_connection(&format!("consumer group {group:?}"), id))
            .collect();
        Some(GroupConnections {
            clients,
            subscriptions: entry.subscriptions.values().cloned().collect(),
            consume_type: entry.consume_type.clone(),
            message_model: entry.message_model.clone(),
            consume_from_where: entry.consume_from_where.clone(),
        })
    }

    /// Registrations held right now (every role and group).
    pub fn registrations(&self) -> usize {
        self.tables.lock().expiry.len()
    }
}

#[cfg(test)]
pub(in crate::broker) mod tests {
    use super::*;

    /// A task running beside a stepped removal of `total` registrations saw `seen` left:
    /// at least `times` of its looks fell between the first and the last step, and each of
    /// those between two whole steps of [`SWEEP_BATCH`].
    pub(in crate::broker) fn assert_ran_between_steps(
        seen: &std::collections::BTreeSet<usize>,
        total: usize,
        times: usize,
        what: &str,
    ) {
        let between: Vec<usize> = seen
            .iter()
            .copied()
            .filter(|&n| n > 0 && n < total)
            .collect();
        assert!(
            between.len() >= times,
            "the other task ran only outside the {what}: it saw {seen:?} registrations"
        );
        for left in between {
            assert_eq!((total - left) % SWEEP_BATCH, 0, "it ran mid-step at {left}");
        }
    }
    use crate::rng::SplitMix64;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    const PEER: u16 = 40000;

    /// A heartbeat of `client` in the given producer and consumer groups.
    fn beat(client: &str, producers: &[&str], consumers: &[&str]) -> HeartbeatData {
        let text = serde_json::json!({
            "clientID": client,
            "producerDataSet": producers.iter().map(|g| serde_json::json!({"groupName": g}))
                .collect::<Vec<_>>(),
            "consumerDataSet": consumers.iter().map(|g| serde_json::json!({"groupName": g}))
                .collect::<Vec<_>>(),
        });
        serde_json::from_value(text).unwrap()
    }

    /// A consumer heartbeat with the given subscriptions (JSON objects, comma-separated).
    fn beat_subs(client: &str, group: &str, subs: &str) -> HeartbeatData {
        let text = format!(
            r#"{{"clientID":"{client}","unknownField":1,"producerDataSet":null,
            "consumerDataSet":[{{"groupName":"{group}","consumeType":"CONSUME_PASSIVELY",
            "subscriptionDataSet":[{subs}]}}]}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    type Registrations = BTreeMap<(Role, String, String), Instant>;

    /// Checks every invariant of the module docs across all indexes; returns the
    /// registrations and each client's connection.
    fn consistent(groups: &Groups) -> (Registrations, BTreeMap<String, SocketAddr>) {
        let tables = groups.tables.lock();
        let from_groups = registrations_listed_by_groups(&tables);
        let peers = check_clients_list_their_groups(&tables, &from_groups);
        check_connection_index(&tables);
        check_expiry_order(&tables, &from_groups);
        (from_groups, peers)
    }

    /// Every registration the groups list: no group without members, and every member's
    /// client entry lists the group.
    fn registrations_listed_by_groups(tables: &Tables) -> Registrations {
        let mut from_groups = Registrations::new();
        let producers = tables.producers.iter().map(|(g, m)| (Role::Producer, g, m));
        let consumers = tables
            .consumers
            .iter()
            .map(|(g, group)| (Role::Consumer, g, &group.clients));
        for (role, group, members) in producers.chain(consumers) {
            assert!(
                !members.is_empty(),
                "{role:?} group {group:?} exists with no member"
            );
            for (client, last) in members {
                let entry = tables.clients.get(client);
                let entry = entry.unwrap_or_else(|| panic!("member {client:?} has no entry"));
                assert!(
                    entry.registrations.contains(&(role, group.clone())),
                    "{client:?} is in {role:?} {group:?} but does not list it"
                );
                from_groups.insert((role, group.clone(), client.clone()), *last);
            }
        }
        from_groups
    }

    /// Every client entry lists only groups that list it, and is indexed under its
    /// connection; each client's connection.
    fn check_clients_list_their_groups(
        tables: &Tables,
        from_groups: &Registrations,
    ) -> BTreeMap<String, SocketAddr> {
        let mut peers = BTreeMap::new();
        let mut listed = 0;
        for (client, entry) in &tables.clients {
            assert!(
                !entry.registrations.is_empty(),
                "{client:?} has no registration"
            );
            for (role, group) in &entry.registrations {
                assert!(
                    from_groups.contains_key(&(*role, group.clone(), client.clone())),
                    "{client:?} lists {role:?} {group:?}, which does not list it"
                );
            }
            listed += entry.registrations.len();
            let on_peer = tables.by_peer.get(&entry.peer);
            assert!(
                on_peer.is_some_and(|clients| clients.contains(client)),
                "{client:?} names {} but is not indexed under it",
                entry.peer
            );
            peers.insert(client.clone(), entry.peer);
        }
        assert_eq!(
            listed,
            from_groups.len(),
            "client lists and group lists differ"
        );
        peers
    }

    /// The connection index holds every client once, under the connection it names.
    fn check_connection_index(tables: &Tables) {
        let indexed: usize = tables.by_peer.values().map(BTreeSet::len).sum();
        assert_eq!(indexed, tables.clients.len(), "connection index size");
        for (at, clients) in &tables.by_peer {
            assert!(!clients.is_empty(), "{at} indexed with no client");
            for client in clients {
                assert_eq!(
                    tables.clients.get(client).map(|e| e.peer),
                    Some(*at),
                    "{client:?}"
                );
            }
        }
    }

    /// The expiry order holds every registration once, at its last heartbeat.
    fn check_expiry_order(tables: &Tables, from_groups: &Registrations) {
        let from_expiry: Registrations = tables
            .expiry
            .iter()
            .map(|(last, role, group, client)| ((*role, group.clone(), client.clone()), *last))
            .collect();
        assert_eq!(
            tables.expiry.len(),
            from_expiry.len(),
            "a registration is in the order twice"
        );
        assert_eq!(
            &from_expiry, from_groups,
            "the expiry order and the groups differ"
        );
    }

    /// What the registry should hold, kept the obvious (slow) way.
    #[derive(Default)]
    struct Model {
        registrations: Registrations,
        peers: BTreeMap<String, SocketAddr>,
    }

    impl Model {
        fn has_members(&self, role: Role, group: &str) -> bool {
            self.registrations
                .keys()
                .any(|(r, g, _)| *r == role && g == group)
        }

        fn remove(&mut self, keys: Vec<(Role, String, String)>) -> BTreeSet<String> {
            let mut lost = BTreeSet::new();
            for key in keys {
                self.registrations.remove(&key);
                if key.0 == Role::Consumer {
                    lost.insert(key.1);
                }
            }
            let registrations = &self.registrations;
            self.peers
                .retain(|client, _| registrations.keys().any(|(_, _, c)| c == client));
            lost.into_iter()
                .filter(|group| self.has_members(Role::Consumer, group))
                .collect()
        }

        fn of_client(
            &self,
            client: &str,
            role: Option<(Role, &str)>,
        ) -> Vec<(Role, String, String)> {
            self.registrations
                .keys()
                .filter(|(r, g, c)| {
                    c == client && role.is_none_or(|(role, group)| *r == role && g == group)
                })
                .cloned()
                .collect()
        }
    }

    /// One random run's registry, its model and its clock.
    struct Run {
        rng: SplitMix64,
        groups: Groups,
        model: Model,
        now: Instant,
        group_names: Vec<String>,
    }

    impl Run {
        /// A heartbeat of `client` joining random producer and consumer groups from a
        /// random connection: it joins exactly the consumer groups it was not in.
        fn heartbeat(&mut self, step: usize, client: &String) {
            let group_names = &self.group_names;
            let pick = |rng: &mut SplitMix64| -> Vec<&str> {
                group_names
                    .iter()
                    .map(String::as_str)
                    .filter(|_| rng.below(3) == 0)
                    .collect()
            };
            let (producers, consumers) = (pick(&mut self.rng), pick(&mut self.rng));
            let at = peer(PEER + self.rng.below(4) as u16);
            let now = self.now;
            let joined = self
                .groups
                .heartbeat(&beat(client, &producers, &consumers), now, at);
            let model = &mut self.model;
            let mut expected = Vec::new();
            if !producers.is_empty() || !consumers.is_empty() || model.peers.contains_key(client) {
                model.peers.insert(client.clone(), at);
            }
            for (role, names) in [(Role::Producer, &producers), (Role::Consumer, &consumers)] {
                for group in names.iter() {
                    let key = (role, group.to_string(), client.clone());
                    if model.registrations.insert(key, now).is_none() && role == Role::Consumer {
                        expected.push(group.to_string());
                    }
                }
            }
            assert_eq!(joined, expected, "step {step}: heartbeat joins");
        }

        /// `client` leaves every group: the consumer groups left with members are told.
        fn unregister_everywhere(&mut self, step: usize, client: &str) {
            let left = self.groups.unregister(client, None, None);
            let keys = self.model.of_client(client, None);
            let expected: Vec<String> = self.model.remove(keys).into_iter().collect();
            assert_eq!(left, expected, "step {step}: unregister everywhere");
        }

        /// `client` leaves one group as a producer, a consumer or both.
        fn unregister_one(&mut self, step: usize, client: &str) {
            let group = self.group_names[self.rng.below(self.group_names.len())].clone();
            let (producer, consumer) = match self.rng.below(3) {
                0 => (Some(group.as_str()), None),
                1 => (None, Some(group.as_str())),
                _ => (Some(group.as_str()), Some(group.as_str())),
            };
            let left = self.groups.unregister(client, producer, consumer);
            let mut keys = Vec::new();
            if let Some(group) = producer {
                keys.extend(self.model.of_client(client, Some((Role::Producer, group))));
            }
            if let Some(group) = consumer {
                keys.extend(self.model.of_client(client, Some((Role::Consumer, group))));
            }
            let expected: Vec<String> = self.model.remove(keys).into_iter().collect();
            assert_eq!(
                left, expected,
                "step {step}: unregister {producer:?} {consumer:?}"
            );
        }

        /// A random connection closes: its clients leave everything.
        fn close(&mut self, step: usize) {
            let at = peer(PEER + self.rng.below(4) as u16);
            let left = self.groups.connection_closed(at);
            let model = &mut self.model;
            let gone: Vec<String> = model
                .peers
                .iter()
                .filter(|(_, p)| **p == at)
                .map(|(c, _)| c.clone())
                .collect();
            let keys = gone.iter().flat_map(|c| model.of_client(c, None)).collect();
            let expected: Vec<String> = model.remove(keys).into_iter().collect();
            assert_eq!(left, expected, "step {step}: close {at}");
        }

        /// A sweep of at most a random few: the oldest expired registrations go.
        fn sweep(&mut self, step: usize, expiry: Duration) {
            let max = 1 + self.rng.below(4);
            let now = self.now;
            let removed = self.groups.sweep(now, expiry, max);
            let mut due: Vec<_> = self
                .model
                .registrations
                .iter()
                .filter(|(_, last)| now.saturating_duration_since(**last) >= expiry)
                .map(|(key, last)| (*last, key.clone()))
                .collect();
            due.sort();
            due.truncate(max);
            assert_eq!(removed, due.len(), "step {step}: sweep count");
            self.model
                .remove(due.into_iter().map(|(_, key)| key).collect());
        }
    }

    #[test]
    fn random_operations_keep_every_index_in_step_and_expire_exactly_the_expired() {
        let names = |prefix: &str, n: usize| -> Vec<String> {
            (0..n).map(|i| format!("{prefix}{i}")).collect()
        };
        let clients = names("c@", 8);
        let start = Instant::now();
        let mut run = Run {
            rng: SplitMix64::new(7),
            groups: Groups::new(),
            model: Model::default(),
            now: start,
            group_names: names("g", 5),
        };
        let expiry = Duration::from_secs(120);
        for step in 0..5_000 {
            run.now += Duration::from_secs(run.rng.below(30) as u64);
            let client = &clients[run.rng.below(clients.len())];
            match run.rng.below(10) {
                0..=4 => run.heartbeat(step, client),
                5 => run.unregister_everywhere(step, client),
                6 => run.unregister_one(step, client),
                7 => run.close(step),
                _ => run.sweep(step, expiry),
            }
            let (registrations, peers) = consistent(&run.groups);
            assert_eq!(
                registrations, run.model.registrations,
                "step {step}: registrations"
            );
            assert_eq!(peers, run.model.peers, "step {step}: connections");
        }
        assert!(run.now > start + expiry * 10, "the run spans many expiries");
    }

    #[test]
    fn a_sweep_drops_exactly_the_registrations_past_the_expiry() {
        let groups = Groups::new();
        let expiry = Duration::from_secs(120);
        let t0 = Instant::now();
        groups.heartbeat(&beat("old@1", &["P"], &["g", "h"]), t0, peer(PEER));
        groups.heartbeat(
            &beat("new@1", &["P"], &["g"]),
            t0 + Duration::from_secs(60),
            peer(PEER),
        );
        // old@1 refreshes only g: its P and h registrations keep their first time.
        groups.heartbeat(
            &beat("old@1", &[], &["g"]),
            t0 + Duration::from_secs(100),
            peer(PEER),
        );
        assert_eq!(
            groups.sweep(t0 + Duration::from_secs(119), expiry, usize::MAX),
            0
        );
        assert_eq!(groups.sweep(t0 + expiry, expiry, usize::MAX), 2);
        assert_eq!(groups.producer_ids("P"), ["new@1"]);
        assert_eq!(groups.consumer_ids("h"), None);
        assert_eq!(groups.consumer_ids("g").unwrap(), ["new@1", "old@1"]);
        assert_eq!(
            groups.sweep(t0 + Duration::from_secs(180), expiry, usize::MAX),
            2
        );
        assert_eq!(groups.consumer_ids("g").unwrap(), ["old@1"]);
        let (registrations, peers) = consistent(&groups);
        assert_eq!(registrations.len(), 1);
        assert_eq!(peers.keys().collect::<Vec<_>>(), ["old@1"]);
    }

    #[test]
    fn a_sweep_takes_at_most_its_batch_and_leaves_the_rest_for_the_next() {
        let groups = Groups::new();
        let t0 = Instant::now();
        for i in 0..10 {
            let client = format!("c@{i}");
            groups.heartbeat(&beat(&client, &[], &[&format!("g{i}")]), t0, peer(PEER));
        }
        let later = t0 + Duration::from_secs(200);
        let expiry = Duration::from_secs(120);
        assert_eq!(groups.sweep(later, expiry, 4), 4);
        assert_eq!(groups.registrations(), 6);
        assert_eq!(groups.sweep(later, expiry, 100), 6);
        assert_eq!(groups.registrations(), 0);
        consistent(&groups);
    }

    #[tokio::test]
    async fn a_sweep_expiring_many_clients_lets_other_work_in_between_batches() {
        let groups = std::sync::Arc::new(Groups::new());
        let t0 = Instant::now();
        let clients = 3 * SWEEP_BATCH + 10;
        for i in 0..clients {
            let client = format!("c@{i}");
            groups.heartbeat(&beat(&client, &[], &[&format!("g{i}")]), t0, peer(PEER));
        }
        let later = t0 + Duration::from_secs(200);
        let local = tokio::task::LocalSet::new();
        let (removed, seen) = local
            .run_until(async {
                let sweeping = groups.clone();
                let sweeper = tokio::task::spawn_local(async move {
                    sweeping.sweep_all(later, Duration::from_secs(120)).await
                });
                // Another task on the same thread, as a connection would be: what does it
                // find each time it gets to run?
                let probing = groups.clone();
                let probe = tokio::task::spawn_local(async move {
                    let mut seen = BTreeSet::new();
                    loop {
                        let left = probing.registrations();
                        seen.insert(left);
                        if left == 0 {
                            return seen;
                        }
                        tokio::task::yield_now().await;
                    }
                });
                (sweeper.await.unwrap(), probe.await.unwrap())
            })
            .await;
        assert_eq!(removed, clients);
        assert_ran_between_steps(&seen, clients, 2, "sweep");
    }

    #[test]
    fn a_closed_connection_takes_only_the_clients_whose_latest_heartbeat_came_over_it() {
        let groups = Groups::new();
        let now = Instant::now();
        groups.heartbeat(&beat("a@1", &["P"], &["g"]), now, peer(1));
        groups.heartbeat(&beat("b@1", &[], &["g", "h"]), now, peer(1));
        groups.heartbeat(&beat("c@1", &[], &["h"]), now, peer(2));
        // a@1 moves to connection 3: closing 1 no longer takes it.
        groups.heartbeat(&beat("a@1", &["P"], &["g"]), now, peer(3));
        assert_eq!(groups.consumer_peers("g"), [peer(3), peer(1)]);
        assert_eq!(groups.connection_closed(peer(1)), ["g", "h"]);
        assert_eq!(groups.consumer_ids("g").unwrap(), ["a@1"]);
        assert_eq!(groups.consumer_ids("h").unwrap(), ["c@1"]);
        assert_eq!(groups.connection_closed(peer(1)), Vec::<String>::new());
        // The last member of g leaving is no notice for g: nobody is left to tell.
        assert_eq!(groups.connection_closed(peer(3)), Vec::<String>::new());
        assert_eq!(groups.consumer_ids("g"), None);
        assert_eq!(groups.producer_ids("P"), Vec::<String>::new());
        let (registrations, peers) = consistent(&groups);
        assert_eq!(registrations.len(), 1);
        assert_eq!(peers, BTreeMap::from([("c@1".to_owned(), peer(2))]));
    }

    #[test]
    fn a_closed_connections_cleanup_takes_whole_clients_up_to_its_budget_per_step() {
        let groups = Groups::new();
        let now = Instant::now();
        for i in 0..5 {
            let client = format!("c@{i}");
            groups.heartbeat(
                &beat(&client, &["P"], &["g", &format!("own{i}")]),
                now,
                peer(1),
            );
        }
        groups.heartbeat(&beat("stays@1", &[], &["g"]), now, peer(2));
        // Three registrations per client: a budget of 4 takes two whole clients.
        let step = groups.connection_closed_step(peer(1), 4);
        assert_eq!((step.removed, step.done), (6, false), "{step:?}");
        assert_eq!(step.left, ["g"]);
        consistent(&groups);
        let step = groups.connection_closed_step(peer(1), 100);
        assert_eq!((step.removed, step.done), (9, true), "{step:?}");
        assert_eq!(groups.consumer_ids("g").unwrap(), ["stays@1"]);
        assert_eq!(groups.producer_ids("P"), Vec::<String>::new());
        let step = groups.connection_closed_step(peer(1), 100);
        assert_eq!((step.removed, step.done, step.left.len()), (0, true, 0));
        assert_eq!(consistent(&groups).0.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn clients_expire_after_the_timeout_and_take_the_group_with_them() {
        let groups = Groups::new();
        let expiry = Duration::from_secs(120);
        let at = peer(PEER);
        groups.heartbeat(&beat_subs("b@1", "g", ""), Instant::now(), at);
        groups.heartbeat(&beat_subs("a@1", "g", ""), Instant::now(), at);
        assert_eq!(groups.consumer_ids("g").unwrap(), ["a@1", "b@1"]);
        tokio::time::advance(Duration::from_secs(100)).await;
        groups.heartbeat(&beat_subs("a@1", "g", ""), Instant::now(), at);
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(groups.sweep_all(Instant::now(), expiry).await, 1);
        assert_eq!(groups.consumer_ids("g").unwrap(), ["a@1"]);
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(groups.sweep_all(Instant::now(), expiry).await, 1);
        assert_eq!(groups.consumer_ids("g"), None);
        consistent(&groups);
    }

    #[test]
    fn a_stale_heartbeat_does_not_replace_a_newer_subscription() {
        let groups = Groups::new();
        let now = Instant::now();
        let at = peer(PEER);
        let new = r#"{"topic":"T","subString":"TagA","codeSet":[1],"subVersion":5}"#;
        let old = r#"{"topic":"T","subString":"TagB","codeSet":[2],"subVersion":4}"#;
        groups.heartbeat(&beat_subs("a@1", "g", new), now, at);
        groups.heartbeat(&beat_subs("b@1", "g", old), now, at);
        let sub = groups.subscription("g", "T").unwrap();
        assert_eq!((sub.sub_string.as_str(), sub.sub_version), ("TagA", 5));
        let tag_a = crate::store::properties::java_string_hash("TagA");
        assert_eq!(sub.filter_codes(), Some(vec![tag_a, 1]));
        // A heartbeat without the topic drops it.
        groups.heartbeat(&beat_subs("a@1", "g", ""), now, at);
        assert_eq!(groups.subscription("g", "T"), None);
    }

    #[test]
    fn a_heartbeat_naming_no_group_registers_nothing() {
        let groups = Groups::new();
        let joined = groups.heartbeat(&beat("idle@1", &[], &[]), Instant::now(), peer(PEER));
        assert!(joined.is_empty());
        let (registrations, peers) = consistent(&groups);
        assert!(registrations.is_empty() && peers.is_empty(), "{peers:?}");
    }
}
