//! Typed readers of the response bodies the admin commands use, all read through
//! [`fastjson::parse`] (so fastjson's object and integer keys are accepted wherever they
//! occur). Each reader names the field that is missing or of the wrong type; numbers are
//! accepted as JSON numbers or as decimal strings (RocketMQ's KVTable sends strings).
//!
//! Tables keyed by message queue come out sorted by topic, broker and queue id.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::body_error::BodyError;
use super::body_error::BodyProblem::{
    NoArray, NoField, NoObject, NotABrokerId, NotANumber, NotAQueue, NotAnObject, NotAnOffset,
};
use crate::remoting::fastjson;

/// A message queue as RocketMQ names one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    pub topic: String,
    pub broker_name: String,
    pub queue_id: i32,
}

fn document(body: &[u8], what: &str) -> Result<Value, BodyError> {
    fastjson::parse(body).map_err(|error| BodyError::new(what, error.into()))
}

fn object<'a>(
    value: &'a Value,
    field: &'static str,
    what: &str,
) -> Result<&'a Map<String, Value>, BodyError> {
    match value.get(field) {
        Some(Value::Object(map)) => Ok(map),
        Some(Value::Null) | None => Err(BodyError::new(what, NoObject { field })),
        Some(_) => Err(BodyError::new(what, NotAnObject { field })),
    }
}

/// An optional object field: missing or null is empty.
fn object_or_empty(
    value: &Value,
    field: &'static str,
    what: &str,
) -> Result<Map<String, Value>, BodyError> {
    match value.get(field) {
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(Value::Null) | None => Ok(Map::new()),
        Some(_) => Err(BodyError::new(what, NotAnObject { field })),
    }
}

/// A number, or a decimal string of one.
pub fn as_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Number(number) => number
            .as_i64()
            .or_else(|| number.as_f64().map(|f| f as i64)),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

fn i64_field(value: &Value, field: &'static str, what: &str) -> Result<i64, BodyError> {
    match value.get(field) {
        Some(found) => as_i64(found).ok_or_else(|| BodyError::new(what, NotANumber { field })),
        None => Err(BodyError::new(what, NoField { field })),
    }
}

fn opt_i64_field(value: &Value, field: &'static str, what: &str) -> Result<Option<i64>, BodyError> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(found) => as_i64(found)
            .map(Some)
            .ok_or_else(|| BodyError::new(what, NotANumber { field })),
    }
}

fn str_field(value: &Value, field: &str) -> String {
    match value.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A string value; other scalars as their JSON text.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A map key naming a message queue, in either of fastjson's forms.
pub fn message_queue(key: &str, what: &str) -> Result<MessageQueue, BodyError> {
    let value = fastjson::parse_key(key);
    let queue_id = i64_field(&value, "queueId", what)
        .ok()
        .and_then(|id| i32::try_from(id).ok());
    match (value.get("topic"), queue_id) {
        (Some(Value::String(topic)), Some(queue_id)) => Ok(MessageQueue {
            topic: topic.clone(),
            broker_name: str_field(&value, "brokerName"),
            queue_id,
        }),
        _ => Err(BodyError::new(
            what,
            NotAQueue {
                key: key.to_string(),
            },
        )),
    }
}

/// `{"table":{"k":"v",...}}` (GET_BROKER_RUNTIME_INFO), sorted by key.
pub fn kv_table(body: &[u8]) -> Result<BTreeMap<String, String>, BodyError> {
    let what = "the runtime info (KVTable)";
    let doc = document(body, what)?;
    Ok(object(&doc, "table", what)?
        .iter()
        .map(|(key, value)| (key.clone(), as_text(value)))
        .collect())
}

/// One broker of a cluster: its name and its addresses by broker id (0 is the master).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerData {
    pub cluster: String,
    pub broker_name: String,
    pub broker_addrs: BTreeMap<i64, String>,
}

impl BrokerData {
    pub fn master(&self) -> Option<&str> {
        self.broker_addrs.get(&0).map(String::as_str)
    }
}

fn broker_data(value: &Value, what: &str) -> Result<BrokerData, BodyError> {
    let mut broker_addrs = BTreeMap::new();
    for (id, addr) in object(value, "brokerAddrs", what)? {
        let id = id
            .trim()
            .parse()
            .map_err(|_| BodyError::new(what, NotABrokerId { id: id.clone() }))?;
        broker_addrs.insert(id, as_text(addr));
    }
    Ok(BrokerData {
        cluster: str_field(value, "cluster"),
        broker_name: str_field(value, "brokerName"),
        broker_addrs,
    })
}

/// GET_BROKER_CLUSTER_INFO's ClusterInfo: every broker, with the cluster that lists it
/// (`clusterAddrTable`) where the broker data does not say, sorted by cluster and name.
pub fn cluster_info(body: &[u8]) -> Result<Vec<BrokerData>, BodyError> {
    let what = "the cluster info";
    let doc = document(body, what)?;
    let mut cluster_of = BTreeMap::new();
    for (cluster, names) in object_or_empty(&doc, "clusterAddrTable", what)? {
        for name in names.as_array().into_iter().flatten() {
            cluster_of.insert(as_text(name), cluster.clone());
        }
    }
    let mut brokers = Vec::new();
    for (name, value) in object(&doc, "brokerAddrTable", what)? {
        let mut broker = broker_data(value, what)?;
        if broker.broker_name.is_empty() {
            broker.broker_name = name.clone();
        }
        if broker.cluster.is_empty() {
            broker.cluster = cluster_of.get(name).cloned().unwrap_or_default();
        }
        brokers.push(broker);
    }
    brokers.sort_by(|a, b| (&a.cluster, &a.broker_name).cmp(&(&b.cluster, &b.broker_name)));
    Ok(brokers)
}

/// `{"topicList":["a",...]}` (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted.
pub fn topic_list(body: &[u8]) -> Result<Vec<String>, BodyError> {
    let what = "the topic list";
    let doc = document(body, what)?;
    let list = doc
        .get("topicList")
        .and_then(Value::as_array)
        .ok_or_else(|| BodyError::new(what, NoArray { field: "topicList" }))?;
    let mut topics: Vec<String> = list.iter().map(as_text).collect();
    topics.sort();
    topics.dedup();
    Ok(topics)
}

/// One entry of a broker's topic table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfig {
    pub topic_name: String,
    pub read_queue_nums: i64,
    pub write_queue_nums: i64,
    pub perm: i64,
    pub topic_filter_type: String,
    pub topic_sys_flag: i64,
    pub order: bool,
}

/// `{"topicConfigTable":{"t":{...}},"dataVersion":{...}}` (GET_ALL_TOPIC_CONFIG), by name.
pub fn topic_config_table(body: &[u8]) -> Result<BTreeMap<String, TopicConfig>, BodyError> {
    let what = "the topic config table";
    let doc = document(body, what)?;
    let mut table = BTreeMap::new();
    for (name, value) in object(&doc, "topicConfigTable", what)? {
        let what = format!("{what}, topic {name:?}");
        let filter = str_field(value, "topicFilterType");
        table.insert(
            name.clone(),
            TopicConfig {
                topic_name: name.clone(),
                read_queue_nums: i64_field(value, "readQueueNums", &what)?,
                write_queue_nums: i64_field(value, "writeQueueNums", &what)?,
                perm: opt_i64_field(value, "perm", &what)?.unwrap_or(6),
                topic_filter_type: if filter.is_empty() {
                    "SINGLE_TAG".into()
                } else {
                    filter
                },
                topic_sys_flag: opt_i64_field(value, "topicSysFlag", &what)?.unwrap_or(0),
                order: value.get("order").and_then(Value::as_bool).unwrap_or(false),
            },
        );
    }
    Ok(table)
}

/// One queue entry of a topic route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueData {
    pub broker_name: String,
    pub read_queue_nums: i64,
    pub write_queue_nums: i64,
    pub perm: i64,
    pub topic_sys_flag: i64,
}

/// GET_ROUTEINFO_BY_TOPIC's TopicRouteData.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRoute {
    pub broker_datas: Vec<BrokerData>,
    pub queue_datas: Vec<QueueData>,
}

pub fn topic_route(body: &[u8]) -> Result<TopicRoute, BodyError> {
    let what = "the topic route";
    let doc = document(body, what)?;
    let mut broker_datas = Vec::new();
    for value in doc
        .get("brokerDatas")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        broker_datas.push(broker_data(value, what)?);
    }
    let mut queue_datas = Vec::new();
    for value in doc
        .get("queueDatas")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        queue_datas.push(QueueData {
            broker_name: str_field(value, "brokerName"),
            read_queue_nums: i64_field(value, "readQueueNums", what)?,
            write_queue_nums: i64_field(value, "writeQueueNums", what)?,
            perm: opt_i64_field(value, "perm", what)?.unwrap_or(6),
            topic_sys_flag: opt_i64_field(value, "topicSysFlag", what)?.unwrap_or(0),
        });
    }
    broker_datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    queue_datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    Ok(TopicRoute {
        broker_datas,
        queue_datas,
    })
}

/// One queue of GET_TOPIC_STATS_INFO's TopicStatsTable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueStats {
    #[serde(flatten)]
    pub queue: MessageQueue,
    pub min_offset: i64,
    pub max_offset: i64,
    pub last_update_timestamp: i64,
}

/// The messages between each queue's min and max offset, added up. The offsets are the
/// node's numbers: the arithmetic saturates (and a max below its min counts none), so a
/// bad answer cannot overflow.
pub fn messages_held(queues: &[QueueStats]) -> i64 {
    queues.iter().fold(0i64, |sum, queue| {
        sum.saturating_add(queue.max_offset.saturating_sub(queue.min_offset).max(0))
    })
}

/// `{"offsetTable":{{mq}:{"minOffset":..,"maxOffset":..,"lastUpdateTimestamp":..}}}`.
pub fn topic_stats(body: &[u8]) -> Result<Vec<QueueStats>, BodyError> {
    let what = "the topic stats";
    let doc = document(body, what)?;
    let mut queues = Vec::new();
    for (key, value) in object_or_empty(&doc, "offsetTable", what)? {
        queues.push(QueueStats {
            queue: message_queue(&key, what)?,
            min_offset: i64_field(&value, "minOffset", what)?,
            max_offset: i64_field(&value, "maxOffset", what)?,
            last_update_timestamp: opt_i64_field(&value, "lastUpdateTimestamp", what)?.unwrap_or(0),
        });
    }
    queues.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(queues)
}

/// One queue of GET_CONSUME_STATS's ConsumeStats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueProgress {
    #[serde(flatten)]
    pub queue: MessageQueue,
    pub broker_offset: i64,
    pub consumer_offset: i64,
    pub pull_offset: i64,
    /// `brokerOffset - consumerOffset`, never below 0.
    pub lag: i64,
    pub last_timestamp: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeStats {
    pub queues: Vec<QueueProgress>,
    pub consume_tps: f64,
    pub total_lag: i64,
}

/// `{"offsetTable":{{mq}:{"brokerOffset":..,"consumerOffset":..,"pullOffset":..,
/// "lastTimestamp":..}},"consumeTps":0.0}`.
pub fn consume_stats(body: &[u8]) -> Result<ConsumeStats, BodyError> {
    let what = "the consume stats";
    let doc = document(body, what)?;
    let mut queues = Vec::new();
    for (key, value) in object_or_empty(&doc, "offsetTable", what)? {
        let broker_offset = i64_field(&value, "brokerOffset", what)?;
        let consumer_offset = i64_field(&value, "consumerOffset", what)?;
        queues.push(QueueProgress {
            queue: message_queue(&key, what)?,
            broker_offset,
            consumer_offset,
            pull_offset: opt_i64_field(&value, "pullOffset", what)?.unwrap_or(consumer_offset),
            lag: lag(broker_offset, consumer_offset),
            last_timestamp: opt_i64_field(&value, "lastTimestamp", what)?.unwrap_or(0),
        });
    }
    queues.sort_by(|a, b| a.queue.cmp(&b.queue));
    let consume_tps = doc.get("consumeTps").and_then(Value::as_f64).unwrap_or(0.0);
    let total_lag = total_lag(&queues);
    Ok(ConsumeStats {
        queues,
        consume_tps,
        total_lag,
    })
}

/// The lags of `queues` added up, saturating (the offsets are the node's numbers).
pub fn total_lag(queues: &[QueueProgress]) -> i64 {
    queues
        .iter()
        .fold(0i64, |sum, queue| sum.saturating_add(queue.lag))
}

/// What a group has yet to consume of a queue: none before it committed anything
/// (`consumerOffset` -1, mqadmin counts the whole queue then), never negative.
pub fn lag(broker_offset: i64, consumer_offset: i64) -> i64 {
    broker_offset.saturating_sub(consumer_offset.max(0)).max(0)
}

/// One client of GET_CONSUMER_CONNECTION_LIST.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    pub client_id: String,
    pub client_addr: String,
    pub language: String,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub topic: String,
    pub sub_string: String,
    pub expression_type: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerConnection {
    pub connections: Vec<Connection>,
    pub subscriptions: Vec<Subscription>,
    pub consume_type: String,
    pub message_model: String,
    pub consume_from_where: String,
}

/// `{"connectionSet":[...],"subscriptionTable":{"t":{...}},"consumeType":..,...}`.
pub fn consumer_connection(body: &[u8]) -> Result<ConsumerConnection, BodyError> {
    let what = "the consumer connections";
    let doc = document(body, what)?;
    let mut connections: Vec<Connection> = doc
        .get("connectionSet")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| Connection {
            client_id: str_field(c, "clientId"),
            client_addr: str_field(c, "clientAddr"),
            language: str_field(c, "language"),
            version: str_field(c, "version"),
        })
        .collect();
    connections.sort_by(|a, b| a.client_id.cmp(&b.client_id));
    let subscriptions = object_or_empty(&doc, "subscriptionTable", what)?
        .iter()
        .map(|(topic, s)| {
            let named = str_field(s, "topic");
            Subscription {
                topic: if named.is_empty() {
                    topic.clone()
                } else {
                    named
                },
                sub_string: str_field(s, "subString"),
                expression_type: str_field(s, "expressionType"),
            }
        })
        .collect();
    Ok(ConsumerConnection {
        connections,
        subscriptions,
        consume_type: str_field(&doc, "consumeType"),
        message_model: str_field(&doc, "messageModel"),
        consume_from_where: str_field(&doc, "consumeFromWhere"),
    })
}

/// One subscription group of GET_ALL_SUBSCRIPTIONGROUP_CONFIG: its name and the fields
/// the table shows; `config` is the whole entry as sent.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupConfig {
    pub group_name: String,
    pub consume_enable: Option<bool>,
    pub consume_broadcast_enable: Option<bool>,
    pub retry_queue_nums: Option<i64>,
    pub retry_max_times: Option<i64>,
    pub config: Value,
}

/// `{"subscriptionGroupTable":{"g":{"groupName":"g",...}},"forbiddenTable":{},...}`.
pub fn subscription_groups(body: &[u8]) -> Result<Vec<GroupConfig>, BodyError> {
    let what = "the subscription group table";
    let doc = document(body, what)?;
    let mut groups = Vec::new();
    for (name, value) in object(&doc, "subscriptionGroupTable", what)? {
        let named = str_field(value, "groupName");
        groups.push(GroupConfig {
            group_name: if named.is_empty() {
                name.clone()
            } else {
                named
            },
            consume_enable: value.get("consumeEnable").and_then(Value::as_bool),
            consume_broadcast_enable: value.get("consumeBroadcastEnable").and_then(Value::as_bool),
            retry_queue_nums: value.get("retryQueueNums").and_then(as_i64),
            retry_max_times: value.get("retryMaxTimes").and_then(as_i64),
            config: value.clone(),
        });
    }
    groups.sort_by(|a, b| a.group_name.cmp(&b.group_name));
    Ok(groups)
}

/// One queue of INVOKE_BROKER_TO_RESET_OFFSET's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueOffset {
    #[serde(flatten)]
    pub queue: MessageQueue,
    pub offset: i64,
}

/// `{"offsetTable":{{mq}:offset}}`.
pub fn reset_offsets(body: &[u8]) -> Result<Vec<QueueOffset>, BodyError> {
    let what = "the reset offsets";
    let doc = document(body, what)?;
    let mut queues = Vec::new();
    for (key, value) in object_or_empty(&doc, "offsetTable", what)? {
        queues.push(QueueOffset {
            queue: message_queue(&key, what)?,
            offset: as_i64(&value)
                .ok_or_else(|| BodyError::new(what, NotAnOffset { key: key.clone() }))?,
        });
    }
    queues.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(queues)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(topic: &str, queue_id: i32) -> MessageQueue {
        MessageQueue {
            topic: topic.into(),
            broker_name: "b".into(),
            queue_id,
        }
    }

    #[test]
    fn runtime_info_is_a_sorted_string_table() {
        let table = kv_table(br#"{"table":{"z":"1","a":"x","n":5}}"#).unwrap();
        let pairs: Vec<_> = table
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(pairs, [("a", "x"), ("n", "5"), ("z", "1")]);
        assert!(kv_table(br#"{"tabel":{}}"#)
            .unwrap_err()
            .to_string()
            .contains("`table`"));
    }

    #[test]
    fn cluster_info_in_standard_and_fastjson_form() {
        let standard = br#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"C","enableActingMaster":false}},"clusterAddrTable":{"C":["broker-a"]}}"#;
        let fastjson = br#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a"}},"clusterAddrTable":{"C":["broker-a"]}}"#;
        let a = cluster_info(standard).unwrap();
        let b = cluster_info(fastjson).unwrap();
        assert_eq!(a[0].cluster, "C");
        assert_eq!(b[0].cluster, "C", "taken from clusterAddrTable");
        assert_eq!(a[0].master(), Some("10.0.0.1:10911"));
        assert_eq!(
            b[0].broker_addrs.get(&1).map(String::as_str),
            Some("10.0.0.2:10911")
        );
    }

    #[test]
    fn topic_stats_accept_object_keys_and_string_keys() {
        let object_keys = br#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:{"minOffset":2,"maxOffset":5,"lastUpdateTimestamp":1700000000000},{"brokerName":"b","queueId":0,"topic":"t"}:{"minOffset":0,"maxOffset":3,"lastUpdateTimestamp":0}}}"#;
        let string_keys = br#"{"offsetTable":{"{\"brokerName\":\"b\",\"queueId\":1,\"topic\":\"t\"}":{"minOffset":2,"maxOffset":5,"lastUpdateTimestamp":1700000000000},"{\"brokerName\":\"b\",\"queueId\":0,\"topic\":\"t\"}":{"minOffset":0,"maxOffset":3,"lastUpdateTimestamp":0}}}"#;
        for body in [&object_keys[..], &string_keys[..]] {
            let stats = topic_stats(body).unwrap();
            assert_eq!(stats.len(), 2);
            assert_eq!(stats[0].queue, mq("t", 0));
            assert_eq!((stats[1].min_offset, stats[1].max_offset), (2, 5));
            assert_eq!(stats[1].last_update_timestamp, 1_700_000_000_000);
        }
        let bad = br#"{"offsetTable":{"nope":{"minOffset":0,"maxOffset":0}}}"#;
        assert!(topic_stats(bad)
            .unwrap_err()
            .to_string()
            .contains("not a message queue"));
    }

    #[test]
    fn consume_stats_compute_lag() {
        let body = br#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":10,"consumerOffset":4,"pullOffset":4,"lastTimestamp":1700000000000},{"brokerName":"b","queueId":1,"topic":"t"}:{"brokerOffset":3,"consumerOffset":5,"pullOffset":5,"lastTimestamp":0},{"brokerName":"b","queueId":2,"topic":"t"}:{"brokerOffset":7,"consumerOffset":-1,"pullOffset":0,"lastTimestamp":0}},"consumeTps":1.5}"#;
        let stats = consume_stats(body).unwrap();
        let lags: Vec<i64> = stats.queues.iter().map(|q| q.lag).collect();
        assert_eq!(lags, [6, 0, 7]);
        assert_eq!(stats.total_lag, 13);
        assert_eq!(stats.consume_tps, 1.5);
        let empty = consume_stats(br#"{"offsetTable":{},"consumeTps":0.0}"#).unwrap();
        assert!(empty.queues.is_empty());
    }

    #[test]
    fn sums_of_node_numbers_saturate() {
        let stats = |min, max| QueueStats {
            queue: mq("t", 0),
            min_offset: min,
            max_offset: max,
            last_update_timestamp: 0,
        };
        assert_eq!(messages_held(&[stats(2, 10), stats(0, 5)]), 13);
        assert_eq!(messages_held(&[stats(i64::MIN, i64::MAX)]), i64::MAX);
        assert_eq!(
            messages_held(&[stats(0, i64::MAX), stats(0, i64::MAX)]),
            i64::MAX
        );
        assert_eq!(messages_held(&[stats(10, 2)]), 0);
        let progress = |broker_offset, consumer_offset| QueueProgress {
            queue: mq("t", 0),
            broker_offset,
            consumer_offset,
            pull_offset: consumer_offset,
            lag: lag(broker_offset, consumer_offset),
            last_timestamp: 0,
        };
        assert_eq!(lag(i64::MAX, -1), i64::MAX);
        assert_eq!(lag(i64::MIN, 5), 0);
        assert_eq!(
            total_lag(&[progress(i64::MAX, 0), progress(i64::MAX, 0)]),
            i64::MAX
        );
        assert_eq!(total_lag(&[progress(10, 4), progress(7, -1)]), 13);
    }

    #[test]
    fn consumer_connections_and_groups() {
        let body = br#"{"connectionSet":[{"clientId":"c2","clientAddr":"127.0.0.1:2","language":"RUST","version":479},{"clientId":"c1","clientAddr":"127.0.0.1:1","language":"JAVA","version":479}],"subscriptionTable":{"t":{"topic":"t","subString":"*","expressionType":"TAG"}},"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET"}"#;
        let connection = consumer_connection(body).unwrap();
        assert_eq!(connection.connections[0].client_id, "c1");
        assert_eq!(connection.connections[1].version, "479");
        assert_eq!(connection.subscriptions[0].sub_string, "*");
        assert_eq!(connection.message_model, "CLUSTERING");

        let groups = subscription_groups(br#"{"subscriptionGroupTable":{"g2":{"groupName":"g2","consumeEnable":true,"retryQueueNums":1},"g1":{}},"forbiddenTable":{},"dataVersion":{"counter":1}}"#).unwrap();
        assert_eq!(groups[0].group_name, "g1");
        assert_eq!(groups[1].consume_enable, Some(true));
        assert_eq!(groups[1].retry_queue_nums, Some(1));
    }

    #[test]
    fn topic_tables_and_routes() {
        let table = topic_config_table(br#"{"topicConfigTable":{"t":{"topicName":"t","readQueueNums":4,"writeQueueNums":2,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{}}},"dataVersion":{}}"#).unwrap();
        assert_eq!(table["t"].write_queue_nums, 2);
        assert!(topic_config_table(
            br#"{"topicConfigTable":{"t":{"readQueueNums":"x","writeQueueNums":1}}}"#
        )
        .unwrap_err()
        .to_string()
        .contains("readQueueNums"));
        let route = topic_route(br#"{"brokerDatas":[{"brokerAddrs":{"0":"1.2.3.4:10911"},"brokerName":"b","cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}"#).unwrap();
        assert_eq!(route.broker_datas[0].master(), Some("1.2.3.4:10911"));
        assert_eq!(route.queue_datas[0].read_queue_nums, 8);
        assert_eq!(
            topic_list(br#"{"topicList":["b","a","b"]}"#).unwrap(),
            ["a", "b"]
        );
    }

    #[test]
    fn reset_offsets_read_both_key_forms() {
        let body = br#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:7,"{\"brokerName\":\"b\",\"queueId\":0,\"topic\":\"t\"}":3}}"#;
        let offsets = reset_offsets(body).unwrap();
        assert_eq!(offsets.len(), 2);
        assert_eq!((offsets[0].queue.queue_id, offsets[0].offset), (0, 3));
        assert_eq!((offsets[1].queue.queue_id, offsets[1].offset), (1, 7));
    }
}
