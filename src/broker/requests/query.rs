//! QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33): finding messages by key and by
//! offsetMsgId (reference §9.10, part 2 §4.1).
//!
//! QUERY_MESSAGE fans out: the shard that received it asks every shard's index (its own
//! directly, the others through their mailboxes with [`SHARD_ONLY`] set), keeps the
//! newest `maxNum` records of all their answers, and answers them in CommitLog order.
//! `maxNum` is capped at [`MAX_MSGS_NUM_BATCH`] (64), and a unique-key query
//! (`_UNIQUE_KEY_QUERY=true`) takes [`DEFAULT_QUERY_MAX_NUM`] (32), as RocketMQ does. The
//! response header carries `indexLastUpdateTimestamp` and `indexLastUpdatePhyoffset` (the
//! Rust client requires both), the largest of the shards'. Nothing found is
//! QUERY_NOT_FOUND. Hash collisions may add records of other keys; the clients filter by
//! the actual key, as they do against RocketMQ.
//!
//! VIEW_MESSAGE_BY_ID is routed by its `offset` alone: the shard is the offset's top byte
//! (D4), and a record must start exactly there. Not found is SYSTEM_ERROR, as in Java.
//!
//! Both send the records straight from the CommitLog segments, like pulls (D8).

use std::net::SocketAddr;

use crate::io::file_body::FileBody;
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;
use crate::store::query::{FoundRecord, KeyLookup};
use crate::store::topic::validate_topic;

use crate::broker::{bad_header, Broker};

/// RocketMQ's `maxMsgsNumBatch`: most records one query returns.
pub const MAX_MSGS_NUM_BATCH: usize = 64;
/// RocketMQ's `defaultQueryMaxNum`: what a unique-key query returns at most.
pub const DEFAULT_QUERY_MAX_NUM: usize = 32;
/// The client's marker of a unique-key query.
pub const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";
/// Set on the copies a shard sends the others: answer from your own index only.
pub const SHARD_ONLY: &str = "_ringmqShardOnly";
/// In a shard's answer: `phys:size:timestamp` of each record of its body, `,`-separated.
const FOUND: &str = "_ringmqFound";

struct QueryHeader<'a> {
    topic: &'a str,
    key: &'a str,
    max: usize,
    begin: i64,
    end: i64,
}

fn decode(request: &RemotingCommand) -> Result<QueryHeader<'_>, crate::remoting::FieldError> {
    let max_num = request.get_i32("maxNum")?;
    let unique = request.opt_str(UNIQUE_KEY_QUERY) == Some("true");
    let max = if unique {
        DEFAULT_QUERY_MAX_NUM
    } else {
        (max_num.max(0) as usize).min(MAX_MSGS_NUM_BATCH)
    };
    Ok(QueryHeader {
        topic: request.get_str("topic")?,
        key: request.get_str("key")?,
        max,
        begin: request.get_i64("beginTimestamp")?,
        end: request.get_i64("endTimestamp")?,
    })
}

pub async fn query_message(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let header = match decode(request) {
        Ok(header) => header,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = validate_topic(header.topic) {
        return RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(why.to_string()),
        );
    }
    let local = match local_lookup(broker, &header) {
        Ok(local) => local,
        Err(error) => {
            return RemotingCommand::response_to(
                request,
                response::SYSTEM_ERROR,
                Some(error.to_string()),
            )
        }
    };
    if request.opt_str(SHARD_ONLY) == Some("true") {
        return shard_answer(request, local);
    }
    let mut answers = vec![local];
    for shard in 0..broker.shard.count() {
        if shard == broker.shard.id() {
            continue;
        }
        let mut copy = request.clone();
        copy.put_ext(SHARD_ONLY, "true");
        let Some(answer) = Box::pin(broker.shard.forward(shard, copy, peer)).await else {
            continue;
        };
        match from_shard_answer(answer) {
            Ok(lookup) => answers.push(lookup),
            Err(why) => {
                return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
            }
        }
    }
    merged_answer(request, answers, header.max)
}

fn local_lookup(
    broker: &Broker,
    header: &QueryHeader<'_>,
) -> Result<KeyLookup, crate::store::StoreError> {
    if header.max == 0 || header.begin > header.end {
        return Ok(KeyLookup::default());
    }
    broker.store.lookup_keys(
        header.topic,
        header.key,
        header.max,
        header.begin,
        header.end,
    )
}

fn put_last_update(answer: &mut RemotingCommand, timestamp: i64, phys: i64) {
    answer.put_ext("indexLastUpdateTimestamp", timestamp);
    answer.put_ext("indexLastUpdatePhyoffset", phys);
}

/// One shard's answer to another: its records listed in [`FOUND`], its body as is.
fn shard_answer(request: &RemotingCommand, lookup: KeyLookup) -> RemotingCommand {
    let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
    put_last_update(
        &mut answer,
        lookup.last_update_timestamp,
        lookup.last_update_phys_offset,
    );
    let found: Vec<String> = lookup
        .records
        .iter()
        .map(|r| format!("{}:{}:{}", r.phys_offset, r.size, r.store_timestamp))
        .collect();
    answer.put_ext(FOUND, found.join(","));
    answer.file_body = lookup.body;
    answer
}

fn from_shard_answer(answer: RemotingCommand) -> Result<KeyLookup, String> {
    if answer.code != response::SUCCESS {
        return Err(format!(
            "a shard answered the query with code {}: {}",
            answer.code,
            answer.remark.as_deref().unwrap_or("")
        ));
    }
    let field = |name: &str| {
        answer
            .get_i64(name)
            .map_err(|error| format!("a shard's query answer: {error}"))
    };
    let mut records = Vec::new();
    for item in answer
        .opt_str(FOUND)
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
    {
        let parts: Vec<&str> = item.split(':').collect();
        let parsed = match parts.as_slice() {
            [phys, size, ts] => phys
                .parse()
                .ok()
                .zip(size.parse().ok())
                .zip(ts.parse().ok())
                .map(|((phys_offset, size), store_timestamp)| FoundRecord {
                    phys_offset,
                    size,
                    store_timestamp,
                }),
            _ => None,
        };
        records.push(parsed.ok_or_else(|| format!("a shard's query answer lists {item:?}"))?);
    }
    let lookup = KeyLookup {
        last_update_timestamp: field("indexLastUpdateTimestamp")?,
        last_update_phys_offset: field("indexLastUpdatePhyoffset")?,
        body: answer.file_body.clone(),
        records,
    };
    if lookup.body.chunks().len() != lookup.records.len() {
        return Err(format!(
            "a shard's query answer lists {} records with {} body chunks",
            lookup.records.len(),
            lookup.body.chunks().len()
        ));
    }
    Ok(lookup)
}

/// The newest `max` records of all shards' answers, in CommitLog order.
fn merged_answer(
    request: &RemotingCommand,
    answers: Vec<KeyLookup>,
    max: usize,
) -> RemotingCommand {
    let last_timestamp = answers
        .iter()
        .map(|a| a.last_update_timestamp)
        .max()
        .unwrap_or(0);
    let last_phys = answers
        .iter()
        .map(|a| a.last_update_phys_offset)
        .max()
        .unwrap_or(0);
    let mut all: Vec<_> = answers
        .into_iter()
        .flat_map(|answer| {
            answer
                .records
                .into_iter()
                .zip(answer.body.chunks().to_vec())
        })
        .collect();
    all.sort_by_key(|(record, _)| std::cmp::Reverse((record.store_timestamp, record.phys_offset)));
    all.truncate(max);
    all.sort_by_key(|(record, _)| record.phys_offset);
    let code = if all.is_empty() {
        response::QUERY_NOT_FOUND
    } else {
        response::SUCCESS
    };
    let remark = all
        .is_empty()
        .then(|| "can not find message, maybe time range not correct".to_string());
    let mut answer = RemotingCommand::response_to(request, code, remark);
    put_last_update(&mut answer, last_timestamp, last_phys);
    let mut body = FileBody::new();
    for (_, chunk) in all {
        body.push(chunk);
    }
    answer.file_body = body;
    answer
}

/// The shard VIEW_MESSAGE_BY_ID goes to: the top byte of its offset, if that shard exists.
pub fn view_owner(request: &RemotingCommand, shards: u8) -> Option<u8> {
    offset_owner(request, "offset", shards)
}

/// The shard whose CommitLog holds the offset in header field `field` (its top byte, D4),
/// if that shard exists; `None` for a missing, bad or negative offset.
pub fn offset_owner(request: &RemotingCommand, field: &str, shards: u8) -> Option<u8> {
    let offset = request.opt_i64(field).ok()??;
    let shard = (offset as u64 >> 56) as u8;
    (offset >= 0 && shard < shards).then_some(shard)
}

pub fn view_message(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let offset = match request.get_i64("offset") {
        Ok(offset) => offset,
        Err(error) => return bad_header(request, error),
    };
    let not_found = || {
        RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("no message at commit log offset {offset}")),
        )
    };
    if offset < 0 {
        return not_found();
    }
    match broker.store.record_at(offset as u64) {
        Ok(Some((_, chunk))) => {
            let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
            answer.file_body.push(chunk);
            answer
        }
        Ok(None) => not_found(),
        Err(error) => {
            RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(error.to_string()))
        }
    }
}
