//! GET_BROKER_HA_STATUS (907), `mqadmin haStatus` and `ringmq admin ha-status`: the node's
//! replication as RocketMQ 5's `HARuntimeInfo` JSON, answered by masters and slaves.
//!
//! ```text
//! {"master":true,"masterCommitLogMaxOffset":N,"inSyncSlaveNums":n,
//!  "haConnectionInfo":[{"addr":"ip:port","slaveAckOffset":A,"diff":D,"inSync":true,
//!                       "transferredByteInSecond":B,"transferFromWhere":F,
//!                       "shard":0,"slaveBrokerId":1,"lagMillis":12}],
//!  "haClientRuntimeInfo":{"masterAddr":…,"maxOffset":…,"transferredByteInSecond":…,
//!                         "lastReadTimestamp":…,"lastWriteTimestamp":…,
//!                         "masterFlushOffset":0,"shards":[…]},
//!  "brokerRole":"SYNC_MASTER","shardCount":2}
//! ```
//!
//! ringmq runs one stream per shard (D14): a master lists **one connection entry per
//! slave per shard**, each with the ringmq fields `shard`, `slaveBrokerId` (from the
//! slave's handshake) and `lagMillis` (the age of the first record that slave does not
//! hold on that shard, `node::replication_sampler`; null when it could not be read). Java's
//! readers ignore fields they do not know (fastjson, and mqadmin prints its own columns).
//! Offsets are physical offsets, the shard id in their top byte (D4), so `diff` is within
//! the entry's shard. `inSync` is Java classic's: within `haSlaveFallbehindMax`.
//! `inSyncSlaveNums` counts slaves (by broker id) in sync on every shard.
//!
//! A slave answers `master:false` and its `haClientRuntimeInfo`, over every shard:
//! `maxOffset` the highest written offset, `transferredByteInSecond` the sum,
//! `lastReadTimestamp` the oldest of the shards' "stream last seen up" times (a shard
//! whose stream is down shows as stale), `lastWriteTimestamp` the latest append,
//! `masterFlushOffset` 0 (a ringmq slave is not told it); `shards` (ringmq) has each
//! shard's figures. `brokerRole` and `shardCount` are ringmq's too.
//!
//! The figures are the replication sampler's, at most a second old. The shard the request
//! reached asks every other shard for its part (the request copy marked
//! [`fan_out::SHARD_ONLY`], answered with the part as the body) and merges; a shard that
//! cannot answer fails the request with a SYSTEM_ERROR naming it, never a partial answer.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::config::BrokerRole;
use crate::metrics::ReplicationFigures;
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::admin::fan_out;
use crate::broker::Broker;

/// One slave's stream on one shard: Java's `HAConnectionRuntimeInfo` and ringmq's fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionInfo {
    pub addr: String,
    pub slave_ack_offset: u64,
    pub diff: u64,
    pub in_sync: bool,
    pub transferred_byte_in_second: u64,
    pub transfer_from_where: u64,
    pub shard: u8,
    pub slave_broker_id: Option<u64>,
    pub lag_millis: Option<u64>,
}

/// One slave shard's stream to its master (ringmq's `shards` entries).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientShard {
    pub shard: u8,
    pub connected: bool,
    pub max_offset: u64,
    pub transferred_byte_in_second: u64,
    pub last_read_timestamp: i64,
    pub last_write_timestamp: i64,
}

/// One shard's part of the answer, as it travels between shards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardPart {
    pub shard: u8,
    pub written: u64,
    pub connections: Vec<ConnectionInfo>,
    pub client: Option<ClientPart>,
}

/// A slave shard's part: its stream and its master's address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientPart {
    pub master_addr: Option<String>,
    pub figures: ClientShard,
}

impl ShardPart {
    /// The part of shard `shard` from its replication figures.
    pub fn of(shard: u8, figures: &ReplicationFigures) -> ShardPart {
        let connections = figures
            .peers
            .iter()
            .filter(|peer| peer.streaming)
            .map(|peer| ConnectionInfo {
                addr: peer.addr.clone(),
                slave_ack_offset: peer.ack,
                diff: peer.lag.bytes,
                in_sync: peer.in_sync,
                transferred_byte_in_second: peer.bytes_per_second,
                transfer_from_where: peer.from,
                shard,
                slave_broker_id: peer.slave_id,
                lag_millis: peer.lag.millis,
            })
            .collect();
        let client = figures.slave.then(|| ClientPart {
            master_addr: figures.master.clone(),
            figures: ClientShard {
                shard,
                connected: figures.connected,
                max_offset: figures.written,
                transferred_byte_in_second: figures.bytes_per_second,
                last_read_timestamp: figures.last_up_ms,
                last_write_timestamp: figures.last_append_ms,
            },
        });
        ShardPart {
            shard,
            written: figures.written,
            connections,
            client,
        }
    }
}

/// Why another shard's part cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("shard {shard} did not answer")]
    NoAnswer { shard: u8 },
    #[error("shard {shard} answered with code {code}: {remark}")]
    Refused {
        shard: u8,
        code: i32,
        remark: String,
    },
    #[error("shard {shard}'s part does not read: {why}")]
    Unreadable { shard: u8, why: serde_json::Error },
    #[error("shard {asked} answered for shard {answered}")]
    WrongShard { asked: u8, answered: u8 },
}

pub async fn ha_status(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let local = ShardPart::of(broker.shard.id(), &broker.metrics.replication());
    if request.opt_str(fan_out::SHARD_ONLY) == Some("true") {
        let body = serde_json::to_vec(&local).expect("a shard part serializes");
        return RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body);
    }
    let mut parts = vec![local];
    for shard in 0..broker.shard.count() {
        if shard == broker.shard.id() {
            continue;
        }
        match part_of(broker, request, peer, shard).await {
            Ok(part) => parts.push(part),
            Err(why) => {
                return RemotingCommand::response_to(
                    request,
                    response::SYSTEM_ERROR,
                    Some(why.to_string()),
                )
            }
        }
    }
    parts.sort_by_key(|part| part.shard);
    let role = broker.store.config().broker_role;
    let body = runtime_info(role, &parts).to_string().into_bytes();
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body)
}

/// Asks shard `shard` for its part.
async fn part_of(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
    shard: u8,
) -> Result<ShardPart, PartError> {
    let mut copy = request.clone();
    copy.put_ext(fan_out::SHARD_ONLY, "true");
    let answer = Box::pin(broker.shard.forward(shard, copy, peer))
        .await
        .ok_or(PartError::NoAnswer { shard })?;
    read_part(shard, &answer)
}

/// Shard `shard`'s part from its answer.
pub fn read_part(shard: u8, answer: &RemotingCommand) -> Result<ShardPart, PartError> {
    if answer.code != response::SUCCESS {
        return Err(PartError::Refused {
            shard,
            code: answer.code,
            remark: answer.remark.clone().unwrap_or_default(),
        });
    }
    let part: ShardPart =
        serde_json::from_slice(&answer.body).map_err(|why| PartError::Unreadable { shard, why })?;
    if part.shard != shard {
        return Err(PartError::WrongShard {
            asked: shard,
            answered: part.shard,
        });
    }
    Ok(part)
}

/// The `HARuntimeInfo` JSON of a node running `role` whose shards gave `parts`.
pub fn runtime_info(role: BrokerRole, parts: &[ShardPart]) -> serde_json::Value {
    let master = role != BrokerRole::Slave;
    let connections: Vec<&ConnectionInfo> =
        parts.iter().flat_map(|part| &part.connections).collect();
    let max_offset = parts.iter().map(|part| part.written).max().unwrap_or(0);
    serde_json::json!({
        "master": master,
        "masterCommitLogMaxOffset": if master { max_offset } else { 0 },
        "inSyncSlaveNums": in_sync_slaves(&connections, parts.len()),
        "haConnectionInfo": connections,
        "haClientRuntimeInfo": client_info(parts),
        "brokerRole": role.as_str(),
        "shardCount": parts.len(),
    })
}

/// Slaves (by broker id; by address for a stream without one) streaming on all `shards`
/// shards, each within `haSlaveFallbehindMax`.
fn in_sync_slaves(connections: &[&ConnectionInfo], shards: usize) -> usize {
    let mut by_slave: BTreeMap<String, (usize, bool)> = BTreeMap::new();
    for connection in connections {
        let slave = match connection.slave_broker_id {
            Some(id) => format!("id {id}"),
            None => connection.addr.clone(),
        };
        let (streams, in_sync) = by_slave.entry(slave).or_insert((0, true));
        *streams += 1;
        *in_sync &= connection.in_sync;
    }
    by_slave
        .values()
        .filter(|(streams, in_sync)| *in_sync && *streams >= shards)
        .count()
}

/// Java's `HAClientRuntimeInfo` over the slave's shards, with each shard's figures; a
/// master's is Java's default (zeros, no address).
fn client_info(parts: &[ShardPart]) -> serde_json::Value {
    let shards: Vec<&ClientShard> = parts
        .iter()
        .filter_map(|part| part.client.as_ref().map(|client| &client.figures))
        .collect();
    let master_addr = parts
        .iter()
        .find_map(|part| part.client.as_ref().and_then(|c| c.master_addr.clone()));
    let mut info = serde_json::json!({
        "maxOffset": shards.iter().map(|s| s.max_offset).max().unwrap_or(0),
        "transferredByteInSecond": shards.iter().map(|s| s.transferred_byte_in_second).sum::<u64>(),
        "lastReadTimestamp": shards.iter().map(|s| s.last_read_timestamp).min().unwrap_or(0),
        "lastWriteTimestamp": shards.iter().map(|s| s.last_write_timestamp).max().unwrap_or(0),
        "masterFlushOffset": 0,
    });
    if !shards.is_empty() {
        info["shards"] = serde_json::json!(shards);
    }
    if let Some(addr) = master_addr {
        info["masterAddr"] = serde_json::Value::from(addr);
    }
    info
}

#[cfg(test)]
#[path = "ha_status_tests.rs"]
mod tests;
