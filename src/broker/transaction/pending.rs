//! RINGMQ_LIST_PENDING_HALVES (30002, ringmq-private; `ringmq admin tx-pending`): the
//! undecided half messages of one producer group, oldest first, on every shard.
//!
//! Header: `producerGroup` (required), `limit` (halves to list, 1 to [`MAX_LIST`], default
//! [`DEFAULT_LIST`]). Body: JSON `{"shards":[{"shard":n,"pending":all groups' undecided
//! halves,"cursor":o,"scanned":s,"halves":[...]}]}`, each half with its real topic and
//! queue, half queue offset, CommitLog offset, message ids, store time and checks so far.
//!
//! Bounded: each shard reads at most [`MAX_SCAN`] undecided halves from its cursor, so a
//! group whose halves sit behind a million others' is reported as not found within the
//! scan (the answer's `scanned` says how far it looked).

use std::net::SocketAddr;

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;
use crate::store::properties;
use crate::store::record::{self, Decoded, Verify};

use crate::broker::admin::fan_out::SHARD_ONLY;
use crate::broker::naming::ids;
use crate::broker::{bad_header, Broker};

use super::halves::{self, HALF_TOPIC};

/// Halves a request lists by default.
pub const DEFAULT_LIST: usize = 100;
/// Most halves one request lists per shard.
pub const MAX_LIST: usize = 1000;
/// Most undecided halves one shard reads for one request.
pub const MAX_SCAN: usize = 100_000;

/// The request, answered by every shard.
pub async fn list_pending(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let group = match request.get_str("producerGroup") {
        Ok(group) => group,
        Err(error) => return bad_header(request, error),
    };
    let limit = match request.opt_i64("limit") {
        Ok(None) => DEFAULT_LIST,
        Ok(Some(limit)) if (1..=MAX_LIST as i64).contains(&limit) => limit as usize,
        Ok(Some(limit)) => {
            return RemotingCommand::response_to(
                request,
                response::INVALID_PARAMETER,
                Some(format!("limit {limit} is not between 1 and {MAX_LIST}")),
            )
        }
        Err(error) => return bad_header(request, error),
    };
    let local = shard_part(broker, group, limit);
    if request.opt_str(SHARD_ONLY) == Some("true") {
        return RemotingCommand::response_to(request, response::SUCCESS, None)
            .with_body(local.into_bytes());
    }
    let mut parts = vec![local];
    for shard in 0..broker.shard.count() {
        if shard == broker.shard.id() {
            continue;
        }
        let mut copy = request.clone();
        copy.put_ext(SHARD_ONLY, "true");
        match Box::pin(broker.shard.forward(shard, copy, peer)).await {
            Some(answer) if answer.code == response::SUCCESS => {
                parts.push(String::from_utf8_lossy(&answer.body).into_owned())
            }
            other => {
                return RemotingCommand::response_to(
                    request,
                    response::SYSTEM_ERROR,
                    Some(format!(
                        "shard {shard} did not list its half messages: {:?}",
                        other.map(|answer| (answer.code, answer.remark))
                    )),
                )
            }
        }
    }
    let body = format!("{{\"shards\":[{}]}}", parts.join(","));
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body.into_bytes())
}

/// This shard's part of the answer, as a JSON object.
fn shard_part(broker: &Broker, group: &str, limit: usize) -> String {
    let shard = broker.shard().id();
    let Some(transactions) = broker.transactions.get() else {
        return format!(r#"{{"shard":{shard},"pending":0,"cursor":0,"scanned":0,"halves":[]}}"#);
    };
    transactions.catch_up(broker);
    let offsets = transactions.window.borrow().unresolved_from(0, MAX_SCAN);
    let mut halves_json = Vec::new();
    for &offset in &offsets {
        if halves_json.len() >= limit {
            break;
        }
        if let Some(json) = half_json(broker, transactions, group, offset) {
            halves_json.push(json);
        }
    }
    format!(
        r#"{{"shard":{shard},"pending":{},"cursor":{},"scanned":{},"halves":[{}]}}"#,
        transactions.pending(),
        transactions.cursor(),
        offsets.len(),
        halves_json.join(",")
    )
}

/// One half of `group` as JSON; `None` when it is another group's or cannot be read.
fn half_json(
    broker: &Broker,
    transactions: &super::Transactions,
    group: &str,
    offset: u64,
) -> Option<String> {
    let store = broker.store();
    let entry = store
        .queue_entry(HALF_TOPIC, transactions.half_queue, offset)
        .ok()??;
    let bytes = store
        .read_record(entry.phys_offset as u64, entry.size as usize)
        .ok()?;
    let Ok(Decoded::Record(half)) = record::decode(&bytes, Verify::Structure) else {
        return None;
    };
    if properties::get(half.properties, halves::PGROUP) != Some(group) {
        return None;
    }
    let text = |key: &str| {
        serde_json::Value::String(
            properties::get(half.properties, key)
                .unwrap_or("")
                .to_owned(),
        )
    };
    Some(
        serde_json::json!({
            "topic": text(crate::broker::delay::REAL_TOPIC),
            "queueId": properties::get(half.properties, crate::broker::delay::REAL_QID)
                .and_then(|queue| queue.parse::<i32>().ok()),
            "halfOffset": offset,
            "commitLogOffset": half.phys_offset,
            "msgId": text(properties::UNIQ_KEY),
            "offsetMsgId": ids::offset_msg_id(broker.identity.store_host, half.phys_offset as u64),
            "storeTimestamp": half.store_timestamp,
            "checks": transactions.window.borrow().checks(offset),
        })
        .to_string(),
    )
}
