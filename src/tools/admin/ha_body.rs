//! The body of GET_BROKER_HA_STATUS (907): RocketMQ 5's `HARuntimeInfo`, from a Java broker
//! or a ringmq node (whose extra fields, `shard`, `slaveBrokerId`, `lagMillis`,
//! `brokerRole`, `shardCount` and the slave's `shards`, are read when present and absent
//! otherwise; see `broker::admin::ha_status`). Read through [`fastjson::parse`]; a field of
//! the wrong type is named, a missing one takes Java's default (fastjson omits nulls).

use serde::Serialize;
use serde_json::Value;

use super::bodies::as_i64;
use super::body_error::BodyError;
use super::body_error::BodyProblem::{NotANumber, NotAnObject};
use crate::remoting::fastjson;

const WHAT: &str = "the HA status (HARuntimeInfo)";

/// A broker's replication as 907 answers it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HaStatus {
    pub master: bool,
    pub master_commit_log_max_offset: i64,
    pub in_sync_slave_nums: i64,
    pub ha_connection_info: Vec<HaConnection>,
    pub ha_client_runtime_info: HaClient,
    /// ringmq: `brokerRole` (`SYNC_MASTER`, `ASYNC_MASTER`, `SLAVE`).
    pub broker_role: Option<String>,
    /// ringmq: the node's shard count.
    pub shard_count: Option<i64>,
}

/// One slave's stream (on one shard, from a ringmq master).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HaConnection {
    pub addr: String,
    pub slave_ack_offset: i64,
    pub diff: i64,
    pub in_sync: bool,
    pub transferred_byte_in_second: i64,
    pub transfer_from_where: i64,
    pub shard: Option<i64>,
    pub slave_broker_id: Option<i64>,
    pub lag_millis: Option<i64>,
}

/// A slave's stream to its master, over every shard.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HaClient {
    pub master_addr: Option<String>,
    pub max_offset: i64,
    pub transferred_byte_in_second: i64,
    pub last_read_timestamp: i64,
    pub last_write_timestamp: i64,
    pub master_flush_offset: i64,
    /// ringmq: each shard's stream.
    pub shards: Vec<HaClientShard>,
}

/// One slave shard's stream (ringmq).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HaClientShard {
    pub shard: i64,
    pub connected: bool,
    pub max_offset: i64,
    pub transferred_byte_in_second: i64,
    pub last_read_timestamp: i64,
    pub last_write_timestamp: i64,
}

/// Reads a 907 body.
pub fn ha_status(body: &[u8]) -> Result<HaStatus, BodyError> {
    let doc = fastjson::parse(body).map_err(|error| BodyError::new(WHAT, error.into()))?;
    let client = match doc.get("haClientRuntimeInfo") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(value @ Value::Object(_)) => value.clone(),
        Some(_) => {
            return Err(problem(NotAnObject {
                field: "haClientRuntimeInfo",
            }))
        }
    };
    Ok(HaStatus {
        master: flag(&doc, "master"),
        master_commit_log_max_offset: number(&doc, "masterCommitLogMaxOffset")?.unwrap_or(0),
        in_sync_slave_nums: number(&doc, "inSyncSlaveNums")?.unwrap_or(0),
        ha_connection_info: list(&doc, "haConnectionInfo")?
            .iter()
            .map(connection)
            .collect::<Result<_, _>>()?,
        ha_client_runtime_info: client_info(&client)?,
        broker_role: text(&doc, "brokerRole"),
        shard_count: number(&doc, "shardCount")?,
    })
}

fn connection(value: &Value) -> Result<HaConnection, BodyError> {
    Ok(HaConnection {
        addr: text(value, "addr").unwrap_or_default(),
        slave_ack_offset: number(value, "slaveAckOffset")?.unwrap_or(0),
        diff: number(value, "diff")?.unwrap_or(0),
        in_sync: flag(value, "inSync"),
        transferred_byte_in_second: number(value, "transferredByteInSecond")?.unwrap_or(0),
        transfer_from_where: number(value, "transferFromWhere")?.unwrap_or(0),
        shard: number(value, "shard")?,
        slave_broker_id: number(value, "slaveBrokerId")?,
        lag_millis: number(value, "lagMillis")?,
    })
}

fn client_info(value: &Value) -> Result<HaClient, BodyError> {
    Ok(HaClient {
        master_addr: text(value, "masterAddr"),
        max_offset: number(value, "maxOffset")?.unwrap_or(0),
        transferred_byte_in_second: number(value, "transferredByteInSecond")?.unwrap_or(0),
        last_read_timestamp: number(value, "lastReadTimestamp")?.unwrap_or(0),
        last_write_timestamp: number(value, "lastWriteTimestamp")?.unwrap_or(0),
        master_flush_offset: number(value, "masterFlushOffset")?.unwrap_or(0),
        shards: list(value, "shards")?
            .iter()
            .map(|shard| {
                Ok(HaClientShard {
                    shard: number(shard, "shard")?.unwrap_or(0),
                    connected: flag(shard, "connected"),
                    max_offset: number(shard, "maxOffset")?.unwrap_or(0),
                    transferred_byte_in_second: number(shard, "transferredByteInSecond")?
                        .unwrap_or(0),
                    last_read_timestamp: number(shard, "lastReadTimestamp")?.unwrap_or(0),
                    last_write_timestamp: number(shard, "lastWriteTimestamp")?.unwrap_or(0),
                })
            })
            .collect::<Result<_, BodyError>>()?,
    })
}

fn problem(problem: super::body_error::BodyProblem) -> BodyError {
    BodyError::new(WHAT, problem)
}

/// A number field; missing or null is `None`, anything else not a number is an error.
fn number(value: &Value, field: &'static str) -> Result<Option<i64>, BodyError> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(found) => as_i64(found)
            .map(Some)
            .ok_or_else(|| problem(NotANumber { field })),
    }
}

/// A boolean field (`true`, or the string `"true"`); anything else is false.
fn flag(value: &Value, field: &str) -> bool {
    match value.get(field) {
        Some(Value::Bool(flag)) => *flag,
        Some(Value::String(text)) => text == "true",
        _ => false,
    }
}

fn text(value: &Value, field: &str) -> Option<String> {
    match value.get(field) {
        Some(Value::String(text)) => Some(text.clone()),
        _ => None,
    }
}

/// An array field; missing or null is empty, anything else is an error.
fn list<'a>(value: &'a Value, field: &'static str) -> Result<&'a [Value], BodyError> {
    match value.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(problem(super::body_error::BodyProblem::NoArray { field })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_java_masters_answer_reads_without_ringmqs_fields() {
        let body = br#"{"haClientRuntimeInfo":{"lastReadTimestamp":0,"lastWriteTimestamp":0,"masterFlushOffset":0,"maxOffset":0,"transferredByteInSecond":0},"haConnectionInfo":[{"addr":"10.0.0.2:51234","diff":0,"inSync":true,"slaveAckOffset":1024,"transferFromWhere":0,"transferredByteInSecond":0}],"inSyncSlaveNums":1,"master":true,"masterCommitLogMaxOffset":1024}"#;
        let status = ha_status(body).unwrap();
        assert!(status.master);
        assert_eq!(status.master_commit_log_max_offset, 1024);
        assert_eq!(status.ha_connection_info.len(), 1);
        let connection = &status.ha_connection_info[0];
        assert_eq!(connection.addr, "10.0.0.2:51234");
        assert!(connection.in_sync);
        assert_eq!(connection.shard, None);
        assert_eq!(connection.slave_broker_id, None);
        assert_eq!(status.broker_role, None);
    }

    #[test]
    fn a_ringmq_slaves_answer_reads_with_its_shards() {
        let body = br#"{"master":false,"masterCommitLogMaxOffset":0,"inSyncSlaveNums":0,"haConnectionInfo":[],"haClientRuntimeInfo":{"masterAddr":"10.0.0.1:10912","maxOffset":70,"transferredByteInSecond":5,"lastReadTimestamp":9,"lastWriteTimestamp":8,"masterFlushOffset":0,"shards":[{"shard":0,"connected":true,"maxOffset":70,"transferredByteInSecond":5,"lastReadTimestamp":9,"lastWriteTimestamp":8}]},"brokerRole":"SLAVE","shardCount":1}"#;
        let status = ha_status(body).unwrap();
        assert!(!status.master);
        let client = &status.ha_client_runtime_info;
        assert_eq!(client.master_addr.as_deref(), Some("10.0.0.1:10912"));
        assert_eq!(client.shards.len(), 1);
        assert!(client.shards[0].connected);
        assert_eq!(status.broker_role.as_deref(), Some("SLAVE"));
    }

    #[test]
    fn a_body_with_fields_of_the_wrong_kind_names_them() {
        for (body, named) in [
            (
                &br#"{"master":true,"masterCommitLogMaxOffset":"x"}"#[..],
                "`masterCommitLogMaxOffset` is not a number",
            ),
            (br#"{"haConnectionInfo":{}}"#, "no `haConnectionInfo` array"),
            (
                br#"{"haConnectionInfo":[{"diff":[]}]}"#,
                "`diff` is not a number",
            ),
            (
                br#"{"haClientRuntimeInfo":7}"#,
                "`haClientRuntimeInfo` is not an object",
            ),
        ] {
            let why = ha_status(body).unwrap_err().to_string();
            assert!(why.contains(named), "{why}");
        }
        assert!(ha_status(b"{\"master\":tr").is_err());
        assert!(ha_status(b"").is_err());
    }
}
