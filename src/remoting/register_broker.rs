//! The broker-to-name-server registration requests, pure codec: REGISTER_BROKER (103),
//! its response, and UNREGISTER_BROKER (104) (reference §9.14, reference-2 §5.1; Java's
//! `RegisterBrokerRequestHeader`, `RegisterBrokerBody`, `RegisterBrokerResponseHeader`,
//! `UnRegisterBrokerRequestHeader`). A broker builds its requests with the encoders; a
//! name server reads them with the decoders.
//!
//! REGISTER_BROKER header fields: `brokerName`, `brokerAddr` (ip:port), `clusterName`,
//! `haServerAddr` (ip:haPort), `brokerId` (long, 0 = master), `heartbeatTimeoutMillis`
//! (long, optional: the name server's default, 120 s, when absent), `enableActingMaster`
//! (bool, optional), `compressed` (bool), `bodyCrc32` (int: CRC32(body) & 0x7FFFFFFF, 0 =
//! not checked). The body:
//!
//! ```json
//! {"filterServerList":[],
//!  "topicConfigSerializeWrapper":{
//!    "dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000},
//!    "topicConfigTable":{"T":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,
//!      "topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}},
//!    "topicQueueMappingInfoMap":{}}}
//! ```
//!
//! The encoder writes standard JSON (keys sorted, as fastjson writes them): the
//! rocketmq-rust name server reads the body with serde_json. The decoder reads standard
//! JSON and fastjson's forms (unquoted integer keys) through [`super::fastjson`]: a stock
//! Java broker's body has only string keys, but a lenient read costs nothing.
//!
//! Java's `RegisterBrokerBody.encode(true)` (broker setting `compressedRegister`, off by
//! default) deflates a length-prefixed binary layout instead of JSON; the decoder refuses
//! such a body ([`RegisterError::Compressed`]) rather than misread it.
//!
//! Field defaults follow Java's: a topic entry without `readQueueNums`/`writeQueueNums`
//! has 16, without `perm` 6 (read-write), as `TopicConfig`'s fields start; an empty body
//! registers no topics with data version zero (Java's name server reads a missing body as
//! an empty `RegisterBrokerBody`). Unknown fields are ignored, as fastjson does.
//!
//! Bounds: a body longer than [`RegisterLimits::max_body_bytes`] is refused before it is
//! parsed, and a table of more than [`RegisterLimits::max_topics`] entries before its
//! entries are read, so one registration cannot make the name server hold more than the
//! limits say.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::codes::request as codes;
use super::command::{FieldError, HeaderFields};
use super::fastjson;
use super::{ExtFields, RemotingCommand};

/// Largest REGISTER_BROKER body a name server reads by default: a broker with ten
/// thousand topics sends about 2.5 MiB (about 250 bytes per topic entry); Java's own
/// frame limit is 16 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Most topics one registration may carry by default: Java brokers hold a few thousand
/// (each group adds a `%RETRY%` topic); the cap keeps one body's cost bounded.
pub const DEFAULT_MAX_TOPICS: usize = 32 * 1024;

/// `TopicConfig`'s default queue counts and permission (read-write), for entries that
/// leave them out.
const JAVA_DEFAULT_QUEUE_NUMS: i32 = 16;
const JAVA_DEFAULT_PERM: i32 = 6;

/// The bounds a decoder holds a registration to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterLimits {
    pub max_body_bytes: usize,
    pub max_topics: usize,
}

impl Default for RegisterLimits {
    fn default() -> RegisterLimits {
        RegisterLimits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_topics: DEFAULT_MAX_TOPICS,
        }
    }
}

/// Who registers: REGISTER_BROKER's header without its wire-only fields (`compressed` and
/// `bodyCrc32`, which the encoder computes and the decoder checks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterBrokerHeader {
    pub broker_name: String,
    /// `ip:port` clients reach the broker at.
    pub broker_addr: String,
    pub cluster_name: String,
    /// `ip:haPort` a slave replicates from.
    pub ha_server_addr: String,
    /// 0 = master, above 0 = slave.
    pub broker_id: i64,
    /// How long the name server keeps the broker without a new registration; `None` =
    /// the name server's default.
    pub heartbeat_timeout_millis: Option<i64>,
    pub enable_acting_master: bool,
}

/// `DataVersion`: a broker bumps it when its topic table changes; a name server rebuilds
/// a master's queue data only when it differs from the last one registered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DataVersion {
    pub timestamp: i64,
    pub counter: i64,
    pub state_version: i64,
}

/// One entry of the registered `topicConfigTable` (Java's `TopicConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredTopic {
    pub topic_name: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    /// `"SINGLE_TAG"` or `"MULTI_TAG"`.
    pub topic_filter_type: String,
    pub topic_sys_flag: i32,
    pub order: bool,
    pub attributes: BTreeMap<String, String>,
}

impl RegisteredTopic {
    /// A read-write topic with `queues` read and write queues and Java's other defaults.
    pub fn new(topic_name: &str, queues: i32) -> RegisteredTopic {
        RegisteredTopic {
            topic_name: topic_name.to_owned(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: JAVA_DEFAULT_PERM,
            topic_filter_type: "SINGLE_TAG".to_owned(),
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }
}

/// REGISTER_BROKER's body (Java's `RegisterBrokerBody`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisterBrokerBody {
    /// By topic name.
    pub topics: BTreeMap<String, RegisteredTopic>,
    pub data_version: DataVersion,
    pub filter_server_list: Vec<String>,
}

/// A decoded REGISTER_BROKER request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterBrokerRequest {
    pub header: RegisterBrokerHeader,
    pub body: RegisterBrokerBody,
}

/// REGISTER_BROKER's response header (Java's `RegisterBrokerResponseHeader`): for a
/// slave whose master is registered, the master's address and HA address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisterBrokerResult {
    pub master_addr: Option<String>,
    pub ha_server_addr: Option<String>,
}

/// UNREGISTER_BROKER's header (Java's `UnRegisterBrokerRequestHeader`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnregisterBrokerHeader {
    pub broker_name: String,
    pub broker_addr: String,
    pub cluster_name: String,
    pub broker_id: i64,
}

/// Why a registration request cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error(transparent)]
    Header(#[from] FieldError),
    #[error(
        "compressed register bodies are not supported: set compressedRegister=false on the \
         broker"
    )]
    Compressed,
    #[error("register body CRC32 mismatch: header bodyCrc32 = {sent}, body's is {computed}")]
    Crc { sent: i32, computed: i32 },
    #[error("register body is {len} bytes, more than the {max} this name server reads")]
    BodyTooLarge { len: usize, max: usize },
    #[error("register body has {count} topics, more than the {max} this name server takes")]
    TooManyTopics { count: usize, max: usize },
    #[error("register body is not JSON: {0}")]
    Json(#[from] fastjson::ParseError),
    #[error("register body field `{field}` {problem}")]
    Body {
        field: String,
        problem: &'static str,
    },
}

/// CRC32 of `body` as Java's `UtilAll.crc32` gives it (the sign bit cleared).
pub fn body_crc32(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

/// The REGISTER_BROKER request a broker sends: standard JSON body, uncompressed, its CRC32
/// in `bodyCrc32`.
pub fn encode_register_broker(
    header: &RegisterBrokerHeader,
    body: &RegisterBrokerBody,
) -> RemotingCommand {
    let body = encode_body(body);
    let mut fields = ExtFields::with_capacity(9);
    fields.insert("brokerName".into(), header.broker_name.as_str());
    fields.insert("brokerAddr".into(), header.broker_addr.as_str());
    fields.insert("clusterName".into(), header.cluster_name.as_str());
    fields.insert("haServerAddr".into(), header.ha_server_addr.as_str());
    fields.insert("brokerId".into(), header.broker_id.to_string());
    if let Some(timeout) = header.heartbeat_timeout_millis {
        fields.insert("heartbeatTimeoutMillis".into(), timeout.to_string());
    }
    fields.insert(
        "enableActingMaster".into(),
        header.enable_acting_master.to_string(),
    );
    fields.insert("compressed".into(), "false");
    fields.insert("bodyCrc32".into(), body_crc32(&body).to_string());
    RemotingCommand::request(codes::REGISTER_BROKER, fields).with_body(Bytes::from(body))
}

/// The body as standard JSON bytes.
pub fn encode_body(body: &RegisterBrokerBody) -> Vec<u8> {
    let table: Map<String, Value> = body
        .topics
        .iter()
        .map(|(name, topic)| (name.clone(), topic_json(topic)))
        .collect();
    let version = body.data_version;
    json!({
        "filterServerList": body.filter_server_list,
        "topicConfigSerializeWrapper": {
            "dataVersion": {
                "counter": version.counter,
                "stateVersion": version.state_version,
                "timestamp": version.timestamp,
            },
            "topicConfigTable": table,
            "topicQueueMappingInfoMap": {},
        },
    })
    .to_string()
    .into_bytes()
}

fn topic_json(topic: &RegisteredTopic) -> Value {
    json!({
        "attributes": topic.attributes,
        "order": topic.order,
        "perm": topic.perm,
        "readQueueNums": topic.read_queue_nums,
        "topicFilterType": topic.topic_filter_type,
        "topicName": topic.topic_name,
        "topicSysFlag": topic.topic_sys_flag,
        "writeQueueNums": topic.write_queue_nums,
    })
}

/// Reads a REGISTER_BROKER request, holding it to `limits`.
pub fn decode_register_broker(
    request: &RemotingCommand,
    limits: &RegisterLimits,
) -> Result<RegisterBrokerRequest, RegisterError> {
    let fields = &request.ext_fields;
    let header = RegisterBrokerHeader {
        broker_name: fields.get_str("brokerName")?.to_owned(),
        broker_addr: fields.get_str("brokerAddr")?.to_owned(),
        cluster_name: fields.get_str("clusterName")?.to_owned(),
        ha_server_addr: fields.opt_str("haServerAddr").unwrap_or("").to_owned(),
        broker_id: fields.get_i64("brokerId")?,
        heartbeat_timeout_millis: fields.opt_i64("heartbeatTimeoutMillis")?,
        enable_acting_master: fields.opt_bool("enableActingMaster")?.unwrap_or(false),
    };
    let body = &request.body;
    if body.len() > limits.max_body_bytes {
        return Err(RegisterError::BodyTooLarge {
            len: body.len(),
            max: limits.max_body_bytes,
        });
    }
    if fields.opt_bool("compressed")?.unwrap_or(false) {
        return Err(RegisterError::Compressed);
    }
    let sent = fields.opt_i32("bodyCrc32")?.unwrap_or(0);
    if sent != 0 {
        let computed = body_crc32(body);
        if computed != sent {
            return Err(RegisterError::Crc { sent, computed });
        }
    }
    let body = decode_body(body, limits)?;
    Ok(RegisterBrokerRequest { header, body })
}

/// Reads a body (standard or fastjson JSON); empty = no topics.
pub fn decode_body(
    bytes: &[u8],
    limits: &RegisterLimits,
) -> Result<RegisterBrokerBody, RegisterError> {
    if bytes.is_empty() {
        return Ok(RegisterBrokerBody::default());
    }
    let value = fastjson::parse(bytes)?;
    let root = as_object(&value, "(body)")?;
    let wrapper = optional_object(root, "topicConfigSerializeWrapper")?;
    let mut body = RegisterBrokerBody::default();
    if let Some(wrapper) = wrapper {
        if let Some(version) = optional_object(wrapper, "dataVersion")? {
            body.data_version = DataVersion {
                timestamp: int(version, "timestamp", "dataVersion.timestamp", 0)?,
                counter: int(version, "counter", "dataVersion.counter", 0)?,
                state_version: int(version, "stateVersion", "dataVersion.stateVersion", 0)?,
            };
        }
        if let Some(table) = optional_object(wrapper, "topicConfigTable")? {
            if table.len() > limits.max_topics {
                return Err(RegisterError::TooManyTopics {
                    count: table.len(),
                    max: limits.max_topics,
                });
            }
            for (key, entry) in table {
                let topic = decode_topic(key, entry)?;
                body.topics.insert(topic.topic_name.clone(), topic);
            }
        }
    }
    if let Some(list) = root.get("filterServerList") {
        body.filter_server_list = string_list(list, "filterServerList")?;
    }
    Ok(body)
}

fn decode_topic(key: &str, entry: &Value) -> Result<RegisteredTopic, RegisterError> {
    let at = |name: &str| format!("topicConfigTable.{key}.{name}");
    let entry = as_object(entry, &format!("topicConfigTable.{key}"))?;
    let text = |name: &str, default: &str| -> Result<String, RegisterError> {
        match entry.get(name) {
            None | Some(Value::Null) => Ok(default.to_owned()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(body_error(at(name), "is not a string")),
        }
    };
    let number = |name: &str, default: i64| -> Result<i32, RegisterError> {
        let value = int(entry, name, &at(name), default)?;
        i32::try_from(value).map_err(|_| body_error(at(name), "does not fit a 32-bit integer"))
    };
    let order = match entry.get("order") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(body_error(at("order"), "is not a boolean")),
    };
    let attributes = match entry.get("attributes") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(value) => {
            let map = as_object(value, &at("attributes"))?;
            let mut attributes = BTreeMap::new();
            for (name, value) in map {
                let Value::String(value) = value else {
                    return Err(body_error(
                        at("attributes"),
                        "has a value that is not a string",
                    ));
                };
                attributes.insert(name.clone(), value.clone());
            }
            attributes
        }
    };
    Ok(RegisteredTopic {
        topic_name: text("topicName", key)?,
        read_queue_nums: number("readQueueNums", JAVA_DEFAULT_QUEUE_NUMS.into())?,
        write_queue_nums: number("writeQueueNums", JAVA_DEFAULT_QUEUE_NUMS.into())?,
        perm: number("perm", JAVA_DEFAULT_PERM.into())?,
        topic_filter_type: text("topicFilterType", "SINGLE_TAG")?,
        topic_sys_flag: number("topicSysFlag", 0)?,
        order,
        attributes,
    })
}

fn body_error(field: impl Into<String>, problem: &'static str) -> RegisterError {
    RegisterError::Body {
        field: field.into(),
        problem,
    }
}

fn as_object<'a>(value: &'a Value, field: &str) -> Result<&'a Map<String, Value>, RegisterError> {
    value
        .as_object()
        .ok_or_else(|| body_error(field, "is not an object"))
}

/// `map[name]` as an object; absent or null = `None`.
fn optional_object<'a>(
    map: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a Map<String, Value>>, RegisterError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => as_object(value, name).map(Some),
    }
}

/// `map[name]` as an integer; absent or null = `default`. `field` names it in errors.
fn int(
    map: &Map<String, Value>,
    name: &str,
    field: &str,
    default: i64,
) -> Result<i64, RegisterError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_i64()
            .ok_or_else(|| body_error(field, "is not a 64-bit integer")),
    }
}

fn string_list(value: &Value, field: &str) -> Result<Vec<String>, RegisterError> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(body_error(field, "has an item that is not a string")),
            })
            .collect(),
        _ => Err(body_error(field, "is not an array")),
    }
}

/// A `DataVersion` as JSON (QUERY_DATA_VERSION's request and response bodies).
pub fn encode_data_version(version: &DataVersion) -> Vec<u8> {
    json!({
        "counter": version.counter,
        "stateVersion": version.state_version,
        "timestamp": version.timestamp,
    })
    .to_string()
    .into_bytes()
}

/// Reads a `DataVersion` body (standard or fastjson JSON); missing fields are 0.
pub fn decode_data_version(bytes: &[u8]) -> Result<DataVersion, RegisterError> {
    let value = fastjson::parse(bytes)?;
    let version = as_object(&value, "(body)")?;
    Ok(DataVersion {
        timestamp: int(version, "timestamp", "timestamp", 0)?,
        counter: int(version, "counter", "counter", 0)?,
        state_version: int(version, "stateVersion", "stateVersion", 0)?,
    })
}

/// The SUCCESS response to `request` with `result`'s fields in the header (absent fields
/// are left out, as Java leaves null fields out).
pub fn encode_register_response(
    request: &RemotingCommand,
    result: &RegisterBrokerResult,
) -> RemotingCommand {
    let mut response = RemotingCommand::response_to(request, super::codes::response::SUCCESS, None);
    if let Some(master) = &result.master_addr {
        response.put_ext("masterAddr", master);
    }
    if let Some(ha) = &result.ha_server_addr {
        response.put_ext("haServerAddr", ha);
    }
    response
}

/// A REGISTER_BROKER response's header fields (the caller checks its code). Empty values
/// read as absent.
pub fn decode_register_response(response: &RemotingCommand) -> RegisterBrokerResult {
    let field = |name: &str| {
        response
            .ext_fields
            .opt_str(name)
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    RegisterBrokerResult {
        master_addr: field("masterAddr"),
        ha_server_addr: field("haServerAddr"),
    }
}

/// The UNREGISTER_BROKER request a broker sends at shutdown.
pub fn encode_unregister_broker(header: &UnregisterBrokerHeader) -> RemotingCommand {
    let fields = ExtFields::from([
        ("brokerName", header.broker_name.as_str()),
        ("brokerAddr", header.broker_addr.as_str()),
        ("clusterName", header.cluster_name.as_str()),
        ("brokerId", &header.broker_id.to_string()),
    ]);
    RemotingCommand::request(codes::UNREGISTER_BROKER, fields)
}

/// Reads an UNREGISTER_BROKER request's header.
pub fn decode_unregister_broker(
    request: &RemotingCommand,
) -> Result<UnregisterBrokerHeader, RegisterError> {
    let fields = &request.ext_fields;
    Ok(UnregisterBrokerHeader {
        broker_name: fields.get_str("brokerName")?.to_owned(),
        broker_addr: fields.get_str("brokerAddr")?.to_owned(),
        cluster_name: fields.get_str("clusterName")?.to_owned(),
        broker_id: fields.get_i64("brokerId")?,
    })
}

#[cfg(test)]
#[path = "register_broker_tests.rs"]
mod tests;
