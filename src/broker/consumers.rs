//! Producer and consumer groups as heartbeats describe them (reference §9.7, §9.8, §14
//! pitfall 7): HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), and
//! the per-group subscriptions a pull falls back on when it carries none.
//!
//! What this file owns: the shard's [`Groups`] table, in memory only (clients re-register
//! every 30 s, so nothing here is persisted).
//!
//! The HEART_BEAT body is `HeartbeatData` JSON, parsed tolerant of unknown and `null` fields:
//!
//! ```text
//! {"clientID":"10.0.0.5@12345",
//!  "producerDataSet":[{"groupName":"P1"}],
//!  "consumerDataSet":[{"groupName":"g1","consumeType":"CONSUME_PASSIVELY",
//!    "messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,
//!    "subscriptionDataSet":[{"topic":"T1","subString":"TagA","tagsSet":["TagA"],
//!      "codeSet":[2598919],"subVersion":1700000000000,"expressionType":"TAG"},
//!      {"topic":"%RETRY%g1","subString":"*","subVersion":1700000000001, ...}]}]}
//! ```
//!
//! GET_CONSUMER_LIST_BY_GROUP answers `{"consumerIdList":["a@1","b@2"]}`, sorted; a group
//! with no live client answers SYSTEM_ERROR "no consumer for this group, `<group>`" (§9.8).
//!
//! Invariants:
//! - A group exists only while it has at least one client; removing the last client (by
//!   UNREGISTER_CLIENT or by expiry) removes the group and its subscriptions.
//! - A group's subscriptions are those of its latest heartbeat (the `%RETRY%<group>` one
//!   included), topic by topic, except that a subscription is never replaced by one with a
//!   lower `subVersion` (a late, stale heartbeat). Topics missing from a heartbeat are dropped.
//! - A client not heard from for `BrokerConfig::client_expiry` (120 s) is dropped by
//!   [`Groups::sweep`], which the node runs every `BrokerConfig::client_sweep_interval`.
//!   Times are tokio `Instant`s, so paused-time tests control expiry.
//!
//! - Each client is tied to the connection its latest heartbeat came over. When that
//!   connection closes, the client leaves every group at once (Java's channel-close
//!   cleanup), instead of waiting out the expiry.
//! - Whenever a consumer group gains or loses a client (heartbeat, UNREGISTER_CLIENT,
//!   connection close), every remaining member is sent NOTIFY_CONSUMER_IDS_CHANGED (40,
//!   oneway, header `consumerGroup`) over its connection, so clients rebalance at once
//!   instead of on their own timer ([`super::notify`]).
//!
//! Not done here: retry-topic creation (topic configs) and heartbeat V2 (the response
//! claims no V2 support, so clients keep sending full heartbeats).

use crate::sync::Locked;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use serde::{Deserialize, Deserializer};
use tokio::time::{Duration, Instant};

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use super::pull::tag_codes;
use super::{bad_header, Broker};

/// `null` and absent both mean the default.
fn or_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// One `SubscriptionData` of a heartbeat.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionData {
    #[serde(default, deserialize_with = "or_default")]
    pub topic: String,
    #[serde(default, deserialize_with = "or_default")]
    pub sub_string: String,
    #[serde(default, deserialize_with = "or_default")]
    pub tags_set: Vec<String>,
    #[serde(default, deserialize_with = "or_default")]
    pub code_set: Vec<i32>,
    #[serde(default, deserialize_with = "or_default")]
    pub sub_version: i64,
    #[serde(default, deserialize_with = "or_default")]
    pub expression_type: Option<String>,
}

impl SubscriptionData {
    /// The tag hashes this subscription selects, `None` for everything: the hashes of the
    /// trimmed tags of `subString` together with the client's `codeSet`. Both, because a
    /// client may hash the untrimmed tags (rocketmq-client-rust 1.0.0 sends
    /// `hash("TagA ")` for `"TagA || TagB"`) while it filters by the trimmed `tagsSet`
    /// itself; a correct client's `codeSet` is the same set.
    pub fn filter_codes(&self) -> Option<Vec<i32>> {
        let mut codes = tag_codes(&self.sub_string)?;
        for code in &self.code_set {
            if !codes.contains(code) {
                codes.push(*code);
            }
        }
        Some(codes)
    }

    /// TAG (or unspecified) expressions are the only kind filtered here.
    pub fn is_tag(&self) -> bool {
        matches!(self.expression_type.as_deref(), None | Some("TAG"))
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerData {
    #[serde(default, deserialize_with = "or_default")]
    pub group_name: String,
    #[serde(default, deserialize_with = "or_default")]
    pub consume_type: String,
    #[serde(default, deserialize_with = "or_default")]
    pub message_model: String,
    #[serde(default, deserialize_with = "or_default")]
    pub consume_from_where: String,
    #[serde(default, deserialize_with = "or_default")]
    pub subscription_data_set: Vec<SubscriptionData>,
    #[serde(default, deserialize_with = "or_default")]
    pub unit_mode: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducerData {
    #[serde(default, deserialize_with = "or_default")]
    pub group_name: String,
}

/// A HEART_BEAT body.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatData {
    #[serde(rename = "clientID", default, deserialize_with = "or_default")]
    pub client_id: String,
    #[serde(default, deserialize_with = "or_default")]
    pub producer_data_set: Vec<ProducerData>,
    #[serde(default, deserialize_with = "or_default")]
    pub consumer_data_set: Vec<ConsumerData>,
}

#[derive(Debug, Default)]
struct ConsumerGroup {
    /// Client id → last heartbeat.
    clients: BTreeMap<String, Instant>,
    /// Topic → subscription.
    subscriptions: BTreeMap<String, SubscriptionData>,
}

#[derive(Debug, Default)]
struct Tables {
    consumers: BTreeMap<String, ConsumerGroup>,
    /// Producer group → client id → last heartbeat.
    producers: BTreeMap<String, BTreeMap<String, Instant>>,
    /// Client id → the connection its latest heartbeat came over.
    peers: BTreeMap<String, SocketAddr>,
}

/// The shard's producer and consumer groups.
#[derive(Debug, Default)]
pub struct Groups {
    tables: Locked<Tables>,
}

impl Groups {
    pub fn new() -> Groups {
        Groups::default()
    }

    /// Registers (or refreshes) everything one heartbeat, received from `peer`, names;
    /// returns the consumer groups the client newly joined.
    pub fn heartbeat(&self, data: &HeartbeatData, now: Instant, peer: SocketAddr) -> Vec<String> {
        let mut joined = Vec::new();
        let mut tables = self.tables.lock();
        tables.peers.insert(data.client_id.clone(), peer);
        for producer in &data.producer_data_set {
            tables
                .producers
                .entry(producer.group_name.clone())
                .or_default()
                .insert(data.client_id.clone(), now);
        }
        for consumer in &data.consumer_data_set {
            let group = tables
                .consumers
                .entry(consumer.group_name.clone())
                .or_default();
            if group.clients.insert(data.client_id.clone(), now).is_none() {
                joined.push(consumer.group_name.clone());
            }
            let mut subscriptions = BTreeMap::new();
            for sub in &consumer.subscription_data_set {
                let keep = match group.subscriptions.get(&sub.topic) {
                    Some(old) if old.sub_version > sub.sub_version => old.clone(),
                    _ => sub.clone(),
                };
                subscriptions.insert(sub.topic.clone(), keep);
            }
            group.subscriptions = subscriptions;
        }
        joined
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
        let everywhere = producer_group.is_none() && consumer_group.is_none();
        tables.producers.retain(|name, clients| {
            if everywhere || Some(name.as_str()) == producer_group {
                clients.remove(client_id);
            }
            !clients.is_empty()
        });
        let mut left = Vec::new();
        tables.consumers.retain(|name, group| {
            if (everywhere || Some(name.as_str()) == consumer_group)
                && group.clients.remove(client_id).is_some()
                && !group.clients.is_empty()
            {
                left.push(name.clone());
            }
            !group.clients.is_empty()
        });
        if everywhere {
            tables.peers.remove(client_id);
        }
        left
    }

    /// Removes every client whose latest heartbeat came over the connection from `peer`
    /// (it closed); returns the consumer groups that still have members and lost one.
    pub fn connection_closed(&self, peer: SocketAddr) -> Vec<String> {
        let gone: Vec<String> = {
            let tables = self.tables.lock();
            tables
                .peers
                .iter()
                .filter(|(_, at)| **at == peer)
                .map(|(id, _)| id.clone())
                .collect()
        };
        let mut left = BTreeSet::new();
        for client in gone {
            left.extend(self.unregister(&client, None, None));
        }
        left.into_iter().collect()
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
            .filter_map(|id| tables.peers.get(id).copied())
            .collect()
    }

    /// Drops every client whose last heartbeat is `expiry` or more before `now`; returns
    /// how many (client, group) registrations went.
    pub fn sweep(&self, now: Instant, expiry: Duration) -> usize {
        let mut removed = 0;
        let alive = |last: &Instant| now.saturating_duration_since(*last) < expiry;
        let mut tables = self.tables.lock();
        tables.producers.retain(|_, clients| {
            let before = clients.len();
            clients.retain(|_, last| alive(last));
            removed += before - clients.len();
            !clients.is_empty()
        });
        tables.consumers.retain(|_, group| {
            let before = group.clients.len();
            group.clients.retain(|_, last| alive(last));
            removed += before - group.clients.len();
            !group.clients.is_empty()
        });
        // Forget the connection of a client no group holds any more.
        let Tables {
            consumers,
            producers,
            peers,
        } = &mut *tables;
        peers.retain(|id, _| {
            consumers.values().any(|g| g.clients.contains_key(id))
                || producers.values().any(|clients| clients.contains_key(id))
        });
        removed
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
}

/// HEART_BEAT (34) from the connection of `peer`.
pub fn heartbeat(broker: &Broker, request: &RemotingCommand, peer: SocketAddr) -> RemotingCommand {
    let data: HeartbeatData = match serde_json::from_slice(&request.body) {
        Ok(data) => data,
        Err(error) => {
            return RemotingCommand::response_to(
                request,
                response::SYSTEM_ERROR,
                Some(format!("bad HeartbeatData body: {error}")),
            )
        }
    };
    if data.client_id.is_empty() {
        return RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some("HeartbeatData has no clientID".into()),
        );
    }
    if let Some(why) = refused_name(&data) {
        return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why));
    }
    for group in broker.groups.heartbeat(&data, Instant::now(), peer) {
        broker.notify_consumer_ids_changed(&group);
    }
    RemotingCommand::response_to(request, response::SUCCESS, None)
}

/// The first group or subscribed topic of a heartbeat that the rules every request
/// applies ([`super::names`]) refuse, as the remark to answer; nothing is registered then.
fn refused_name(data: &HeartbeatData) -> Option<String> {
    let producers = data
        .producer_data_set
        .iter()
        .map(|producer| super::names::validate_group(&producer.group_name));
    let consumers = data.consumer_data_set.iter().flat_map(|consumer| {
        std::iter::once(super::names::validate_group(&consumer.group_name)).chain(
            consumer
                .subscription_data_set
                .iter()
                .map(|sub| super::names::validate_topic(&sub.topic)),
        )
    });
    producers
        .chain(consumers)
        .find_map(Result::err)
        .map(|why| format!("bad HeartbeatData: {why}"))
}

/// UNREGISTER_CLIENT (35).
pub fn unregister_client(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let client_id = match request.get_str("clientID") {
        Ok(id) => id,
        Err(error) => return bad_header(request, error),
    };
    let named = |field| request.opt_str(field).filter(|name| !name.is_empty());
    let left = broker
        .groups
        .unregister(client_id, named("producerGroup"), named("consumerGroup"));
    for group in left {
        broker.notify_consumer_ids_changed(&group);
    }
    RemotingCommand::response_to(request, response::SUCCESS, None)
}

/// GET_CONSUMER_LIST_BY_GROUP (38).
pub fn consumer_list(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let group = match request.get_str("consumerGroup") {
        Ok(group) => group,
        Err(error) => return bad_header(request, error),
    };
    match broker.groups.consumer_ids(group) {
        Some(ids) => {
            let body = serde_json::json!({ "consumerIdList": ids }).to_string();
            RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body)
        }
        None => RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("no consumer for this group, {group}")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 40000);

    fn beat(client: &str, group: &str, subs: &str) -> HeartbeatData {
        let text = format!(
            r#"{{"clientID":"{client}","unknownField":1,"producerDataSet":null,
            "consumerDataSet":[{{"groupName":"{group}","consumeType":"CONSUME_PASSIVELY",
            "subscriptionDataSet":[{subs}]}}]}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn clients_expire_after_the_timeout_and_take_the_group_with_them() {
        let groups = Groups::new();
        let expiry = Duration::from_secs(120);
        groups.heartbeat(&beat("b@1", "g", ""), Instant::now(), PEER);
        groups.heartbeat(&beat("a@1", "g", ""), Instant::now(), PEER);
        assert_eq!(groups.consumer_ids("g").unwrap(), ["a@1", "b@1"]);
        tokio::time::advance(Duration::from_secs(100)).await;
        groups.heartbeat(&beat("a@1", "g", ""), Instant::now(), PEER);
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(groups.sweep(Instant::now(), expiry), 1);
        assert_eq!(groups.consumer_ids("g").unwrap(), ["a@1"]);
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(groups.sweep(Instant::now(), expiry), 1);
        assert_eq!(groups.consumer_ids("g"), None);
    }

    #[test]
    fn a_stale_heartbeat_does_not_replace_a_newer_subscription() {
        let groups = Groups::new();
        let now = Instant::now();
        let new = r#"{"topic":"T","subString":"TagA","codeSet":[1],"subVersion":5}"#;
        let old = r#"{"topic":"T","subString":"TagB","codeSet":[2],"subVersion":4}"#;
        groups.heartbeat(&beat("a@1", "g", new), now, PEER);
        groups.heartbeat(&beat("b@1", "g", old), now, PEER);
        let sub = groups.subscription("g", "T").unwrap();
        assert_eq!((sub.sub_string.as_str(), sub.sub_version), ("TagA", 5));
        let tag_a = crate::store::properties::java_string_hash("TagA");
        assert_eq!(sub.filter_codes(), Some(vec![tag_a, 1]));
        // A heartbeat without the topic drops it.
        groups.heartbeat(&beat("a@1", "g", ""), now, PEER);
        assert_eq!(groups.subscription("g", "T"), None);
    }

    #[test]
    fn star_selects_everything_and_missing_codes_come_from_the_expression() {
        let all = SubscriptionData {
            sub_string: "*".into(),
            code_set: vec![7],
            ..Default::default()
        };
        assert_eq!(all.filter_codes(), None);
        let computed = SubscriptionData {
            sub_string: "TagA".into(),
            ..Default::default()
        };
        assert_eq!(computed.filter_codes(), tag_codes("TagA"));
    }

    #[test]
    fn untrimmed_client_codes_still_select_the_trimmed_tags() {
        let hash = crate::store::properties::java_string_hash;
        let sub = SubscriptionData {
            sub_string: "TagA || TagB".into(),
            code_set: vec![hash("TagA "), hash(" TagB")],
            ..Default::default()
        };
        let codes = sub.filter_codes().unwrap();
        for tag in ["TagA", "TagB"] {
            assert!(codes.contains(&hash(tag)), "{tag} selected");
        }
        assert!(!codes.contains(&hash("TagC")));
    }
}
