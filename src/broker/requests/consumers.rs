//! Producer and consumer groups as heartbeats describe them (reference §9.7, §9.8, §14
//! pitfall 7): HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38), and
//! the per-group subscriptions a pull falls back on when it carries none.
//!
//! What this file owns: the HEART_BEAT body's types and the three requests' handlers. The
//! node's registry of groups, clients and connections they fill is [`Groups`]
//! ([`crate::broker::state::groups`], where its indexes, invariants and costs are stated).
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
//!   UNREGISTER_CLIENT, expiry or a closed connection) removes the group and its
//!   subscriptions.
//! - A group's subscriptions are those of its latest heartbeat (the `%RETRY%<group>` one
//!   included), topic by topic, never replaced by a lower `subVersion`.
//! - A client not heard from for `BrokerConfig::client_expiry` (key
//!   `channel_expired_timeout`) is dropped by [`Groups::sweep_all`], which the node runs
//!   every `BrokerConfig::client_sweep_interval`.
//! - Each client is tied to the connection its latest heartbeat came over. When that
//!   connection closes, the client leaves every group at once (Java's channel-close
//!   cleanup), instead of waiting out the expiry.
//! - Whenever a consumer group gains or loses a client (heartbeat, UNREGISTER_CLIENT,
//!   connection close), every remaining member is sent NOTIFY_CONSUMER_IDS_CHANGED (40,
//!   oneway, header `consumerGroup`) over its connection, so clients rebalance at once
//!   instead of on their own timer ([`crate::broker::state::notify`]).
//!
//! Not done here: retry-topic creation (topic configs) and heartbeat V2 (the response
//! claims no V2 support, so clients keep sending full heartbeats).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;

use serde::{Deserialize, Deserializer};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::ShardMetrics;
use crate::remoting::codes::response;
use crate::remoting::log_safe::{log_safe, Warn, WarnLimiter};
use crate::remoting::RemotingCommand;

use crate::broker::requests::pull::tag_codes;
use crate::broker::tables::subscription_groups::SubscriptionGroupConfig;
use crate::broker::{bad_header, Broker};

use crate::broker::state::groups::{Groups, SWEEP_BATCH};

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
    /// The sender's language and version, from the request header, not the body.
    #[serde(skip)]
    pub language: String,
    #[serde(skip)]
    pub version: i32,
}

/// The shard's closed connections whose clients are still registered. A close only queues
/// its peer here; [`reap_closed_connections`] removes the clients, a bounded step per turn,
/// so that hundreds of connections closing at once (each a task run back to back) do not
/// hold the shard for the sum of their cleanups. Until then (normally the same or the next
/// turn) the clients are still listed; a new connection from the same address and port in
/// that window would lose the clients it registered, which TIME_WAIT on the client side
/// makes unlikely.
#[derive(Debug, Default)]
pub struct ClosedConnections {
    queue: RefCell<VecDeque<SocketAddr>>,
    wake: Notify,
}

impl ClosedConnections {
    pub fn push(&self, peer: SocketAddr) {
        self.queue.borrow_mut().push_back(peer);
        self.wake.notify_one();
    }

    /// Connections closed and not yet cleaned up.
    pub fn len(&self) -> usize {
        self.queue.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.borrow().is_empty()
    }
}

/// Takes the clients of this shard's closed connections out of their groups, at most
/// [`SWEEP_BATCH`] registrations per turn of the shard, and tells the remaining members of
/// every group that lost one. Runs for the shard's life.
pub async fn reap_closed_connections(broker: Rc<Broker>) {
    loop {
        broker
            .closed
            .reap_queued(&broker.groups, |group| {
                broker.notify_consumer_ids_changed(group)
            })
            .await;
        broker.closed.wake.notified().await;
    }
}

impl ClosedConnections {
    /// Cleans up every queued connection, yielding after each [`SWEEP_BATCH`]
    /// registrations; `changed` gets each consumer group that lost a client and still has
    /// members.
    pub async fn reap_queued(&self, groups: &Groups, mut changed: impl FnMut(&str)) {
        let mut budget = SWEEP_BATCH;
        loop {
            let Some(peer) = self.queue.borrow().front().copied() else {
                return;
            };
            let step = groups.connection_closed_step(peer, budget);
            for group in &step.left {
                changed(group);
            }
            if step.done {
                self.queue.borrow_mut().pop_front();
            }
            // A step that found nothing left still counts, so the loop always yields.
            budget = budget.saturating_sub(step.removed.max(1));
            if budget == 0 {
                // Let the shard's connections run before the next step.
                tokio::task::yield_now().await;
                budget = SWEEP_BATCH;
            }
        }
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
    if let Err(why) = check_bounds(&data, &broker.config) {
        return RemotingCommand::response_to(request, response::INVALID_PARAMETER, Some(why));
    }
    let mut data = registrable(data);
    data.language = request.language.to_string();
    data.version = request.version;
    // Registered first, so a heartbeat the full client table refuses creates no group.
    let joined = match broker.groups.heartbeat_bounded(
        &data,
        Instant::now(),
        peer,
        broker.config.max_client_registrations,
    ) {
        Ok(joined) => joined,
        Err(held) => {
            ShardMetrics::add(&broker.metrics.heartbeats_refused, 1);
            return RemotingCommand::response_to(
                request,
                response::SYSTEM_BUSY,
                Some(format!(
                    "the node holds {held} client registrations, at most {} (maxClientRegistrations); try again later",
                    broker.config.max_client_registrations
                )),
            );
        }
    };
    if broker.subscription_groups.auto_create() {
        for consumer in &data.consumer_data_set {
            let config = SubscriptionGroupConfig::new(&consumer.group_name);
            // In memory at once, written off the reactor (`subscription_groups`).
            if let Err(held) = broker.subscription_groups.create_if_absent(
                config,
                broker.now_ms(),
                broker.config.max_subscription_groups,
            ) {
                // The heartbeat still registers the client; its pulls of the group are
                // refused naming the bound until there is room.
                ShardMetrics::add(&broker.metrics.subscription_groups_refused, 1);
                warn_skipped(
                    &data.client_id,
                    "consumer group",
                    &consumer.group_name,
                    &format!("not created: the node holds {held} subscription groups (maxSubscriptionGroups)"),
                );
            }
        }
    }
    for group in joined {
        broker.notify_consumer_ids_changed(&group);
    }
    RemotingCommand::response_to(request, response::SUCCESS, None)
}

/// What one heartbeat may register (`maxHeartbeatSubscriptions`,
/// `maxSubscriptionExpressionBytes`): a client registers a few groups with a few
/// subscriptions each, and every one is kept in the node-wide client table and compared
/// on every later heartbeat, so a body of thousands (or a megabyte expression) is refused
/// whole, before anything is registered, naming the bound.
fn check_bounds(data: &HeartbeatData, config: &crate::broker::BrokerConfig) -> Result<(), String> {
    let max = config.max_heartbeat_subscriptions;
    let groups = data.consumer_data_set.len() + data.producer_data_set.len();
    if groups > max {
        return Err(format!(
            "the heartbeat names {groups} groups; at most {max} (maxHeartbeatSubscriptions)"
        ));
    }
    let subscriptions: usize = data
        .consumer_data_set
        .iter()
        .map(|consumer| consumer.subscription_data_set.len())
        .sum();
    if subscriptions > max {
        return Err(format!(
            "the heartbeat registers {subscriptions} subscriptions; at most {max} (maxHeartbeatSubscriptions)"
        ));
    }
    let longest = config.max_subscription_expression_bytes;
    for consumer in &data.consumer_data_set {
        for sub in &consumer.subscription_data_set {
            let tags: usize = sub.tags_set.iter().map(|tag| tag.len() + 2).sum();
            let size = sub.sub_string.len().max(tags).max(sub.code_set.len() * 4);
            if size > longest {
                return Err(format!(
                    "a subscription of group {} to {} is {size} bytes long; at most {longest} (maxSubscriptionExpressionBytes)",
                    log_safe(&consumer.group_name),
                    log_safe(&sub.topic)
                ));
            }
        }
    }
    Ok(())
}

thread_local! {
    /// The shard's limiter for skipped heartbeat names: a client heartbeats every 30 s,
    /// so one bad subscription would otherwise log forever, once per client per beat.
    static SKIPPED_NAMES: RefCell<WarnLimiter> =
        RefCell::new(WarnLimiter::new(5, std::time::Duration::from_secs(10)));
}

/// Logs (rate-limited, escaped: all three strings come from the client) that a heartbeat's `what` named `name`, refused for `why`.
fn warn_skipped(client: &str, what: &str, name: &str, why: &dyn std::fmt::Display) {
    let decision =
        SKIPPED_NAMES.with(|limiter| limiter.borrow_mut().check(std::time::Instant::now()));
    // The reason quotes the name, so it is escaped too.
    let why = why.to_string();
    let (client, name, why) = (log_safe(client), log_safe(name), log_safe(&why));
    match decision {
        Warn::Log => {}
        Warn::LogAfterSuppressed(left_out) => {
            tracing::warn!(left_out, "{left_out} similar warnings were left out")
        }
        Warn::Suppress => return,
    }
    tracing::warn!(%client, %name, "heartbeat {what} skipped: {why}");
}

/// `data` without the producer and consumer groups and the subscribed topics that the
/// rules every request applies ([`crate::broker::naming::names`]) refuse. Only those are skipped, not the
/// whole heartbeat: one client process heartbeats all its groups at once, and a single
/// bad name (a legal 250-character group whose `%RETRY%<group>` topic is too long, a Java
/// 4.x client subscribing to `a.b`) must not leave its other groups with no consumer list.
/// Java's broker registers the others too, and answers SUCCESS.
fn registrable(mut data: HeartbeatData) -> HeartbeatData {
    let client = data.client_id.clone();
    data.producer_data_set.retain(|producer| {
        let verdict = crate::broker::naming::names::validate_group(&producer.group_name);
        if let Err(why) = &verdict {
            warn_skipped(&client, "producer group", &producer.group_name, why);
        }
        verdict.is_ok()
    });
    data.consumer_data_set.retain_mut(|consumer| {
        if let Err(why) = crate::broker::naming::names::validate_group(&consumer.group_name) {
            warn_skipped(&client, "consumer group", &consumer.group_name, &why);
            return false;
        }
        consumer.subscription_data_set.retain(|sub| {
            let verdict = crate::broker::naming::names::validate_topic(&sub.topic);
            if let Err(why) = &verdict {
                warn_skipped(&client, "subscription topic", &sub.topic, why);
            }
            verdict.is_ok()
        });
        true
    });
    for name in data
        .producer_data_set
        .iter()
        .map(|producer| &producer.group_name)
    {
        assert!(
            crate::broker::naming::names::validate_group(name).is_ok(),
            "producer group {name:?} kept"
        );
    }
    for consumer in &data.consumer_data_set {
        let group = &consumer.group_name;
        assert!(
            crate::broker::naming::names::validate_group(group).is_ok(),
            "consumer group {group:?} kept"
        );
        for topic in consumer.subscription_data_set.iter().map(|sub| &sub.topic) {
            assert!(
                crate::broker::naming::names::validate_topic(topic).is_ok(),
                "topic {topic:?} of {group:?} kept"
            );
        }
    }
    data
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

    #[tokio::test]
    async fn many_connections_closing_at_once_are_cleaned_up_in_bounded_steps() {
        let groups = std::sync::Arc::new(Groups::new());
        let closed = Rc::new(ClosedConnections::default());
        let now = Instant::now();
        let (connections, per_connection) = (40, 50);
        for c in 0..connections {
            let peer = SocketAddr::from(([127, 0, 0, 1], 1000 + c as u16));
            for i in 0..per_connection {
                let text = serde_json::json!({"clientID": format!("c{c}@{i}"),
                    "consumerDataSet": [{"groupName": format!("g{c}-{i}")}]});
                let data: HeartbeatData = serde_json::from_value(text).unwrap();
                groups.heartbeat(&data, now, peer);
            }
            closed.push(peer);
        }
        let total = connections * per_connection;
        assert!(
            total > 4 * SWEEP_BATCH,
            "{total} registrations span several steps"
        );
        let local = tokio::task::LocalSet::new();
        let seen = local
            .run_until(async {
                let (reaping, cleaning) = (groups.clone(), closed.clone());
                let reaper = tokio::task::spawn_local(async move {
                    cleaning.reap_queued(&reaping, |_| {}).await
                });
                // Another task on the same thread, as a connection would be.
                let probing = groups.clone();
                let probe = tokio::task::spawn_local(async move {
                    let mut seen = std::collections::BTreeSet::new();
                    loop {
                        let left = probing.registrations();
                        seen.insert(left);
                        if left == 0 {
                            return seen;
                        }
                        tokio::task::yield_now().await;
                    }
                });
                reaper.await.unwrap();
                probe.await.unwrap()
            })
            .await;
        assert!(closed.is_empty(), "{} connections left", closed.len());
        crate::broker::state::groups::tests::assert_ran_between_steps(&seen, total, 3, "cleanup");
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

    #[test]
    fn a_heartbeat_registers_its_legal_names_and_skips_only_the_illegal_ones() {
        let long = "g".repeat(250);
        let retry = format!("%RETRY%{long}");
        assert!(crate::broker::naming::names::validate_group(&long).is_ok());
        assert!(crate::broker::naming::names::validate_topic(&retry).is_err());
        let text = serde_json::json!({"clientID": "c@1",
        "producerDataSet": [{"groupName": "P1"}, {"groupName": "bad producer"}],
        "consumerDataSet": [
            {"groupName": "good", "subscriptionDataSet": [{"topic": "T"}]},
            {"groupName": "bad@group", "subscriptionDataSet": [{"topic": "T"}]},
            {"groupName": "dotted", "subscriptionDataSet": [{"topic": "a.b"}, {"topic": "T"}]},
            {"groupName": long.clone(), "subscriptionDataSet": [{"topic": retry.clone()}, {"topic": "T"}]}
        ]});
        let data: HeartbeatData = serde_json::from_value(text).unwrap();
        let groups = Groups::new();
        let peer = SocketAddr::from(([127, 0, 0, 1], 1000));
        groups.heartbeat(&registrable(data), Instant::now(), peer);
        for group in ["good", "dotted", long.as_str()] {
            assert_eq!(
                groups.consumer_ids(group),
                Some(vec!["c@1".to_string()]),
                "{group}"
            );
            assert!(
                groups.subscription(group, "T").is_some(),
                "{group} subscribes to T"
            );
        }
        assert_eq!(groups.consumer_ids("bad@group"), None);
        assert!(groups.subscription("dotted", "a.b").is_none());
        assert!(groups.subscription(&long, &retry).is_none());
        assert_eq!(groups.producer_ids("P1"), vec!["c@1".to_string()]);
        assert!(groups.producer_ids("bad producer").is_empty());
        // The 3 legal consumer groups and the legal producer group, each with client c@1.
        assert_eq!(
            groups.registrations(),
            4,
            "nothing illegal reached the tables"
        );
    }
}
