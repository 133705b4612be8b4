//! The message queries:
//!
//! - `query-key` (mqadmin queryMsgByKey): QUERY_MESSAGE (12); the answer is filtered to
//!   the records of the topic whose KEYS hold the key (the index may return hash
//!   collisions, as RocketMQ's does).
//! - `query-uniq` (mqadmin queryMsgByUniqueKey): QUERY_MESSAGE with `_UNIQUE_KEY_QUERY`,
//!   filtered to UNIQ_KEY (or offsetMsgId) equal to the id.
//! - `query-id` (mqadmin queryMsgById): VIEW_MESSAGE_BY_ID (33) to the store host the id
//!   names (or `--broker` when given: behind NAT the id's address may not be reachable);
//!   a malformed id is exit 2 before any request. The node answers an offset that starts
//!   no record with SYSTEM_ERROR, as Java does: that is not found here only when the
//!   remark says so (ringmq's "no message at commit log offset ...", Java's "can not find
//!   message ..."); any other SYSTEM_ERROR is the node failing (exit 3).
//! - `query-offset` (mqadmin queryMsgByOffset): PULL_MESSAGE (11) of one message at the
//!   offset as group `TOOLS_CONSUMER` with subscription `*`, as mqadmin does; no message
//!   there, or a first record at another offset, is not found, with the queue's range.
//!
//! A topic must be in the broker's table (GET_ALL_TOPIC_CONFIG, 21) first: an unknown
//! topic is not found rather than an empty answer.

use serde_json::json;

use crate::broker::naming::ids::decode_offset_msg_id;
use crate::remoting::codes::{request, response};
use crate::remoting::requests::pull_request;

use super::super::args::{QueryIdArgs, QueryKeyArgs, QueryOffsetArgs, QueryUniqArgs};
use super::super::error::{bad_input, node_error, not_found, AdminResult};
use super::super::message::{decode_records, is_message_id_shape, preview, Message, BODY_PREVIEW};
use super::super::output::{cell, fields, Output};
use super::super::time::{format_utc, now_ms, parse_timestamp};
use super::super::wire::{command, refusal};
use super::{check_topic, Ctx};

/// The group the admin pulls as: mqadmin's tools group.
const TOOLS_GROUP: &str = "TOOLS_CONSUMER";
/// The subscription the pull carries, as mqadmin's: every tag.
const SUBSCRIBE_ALL: &str = "*";
/// What a unique-key query asks for (the broker forces RocketMQ's `defaultQueryMaxNum`).
const UNIQ_MAX: i32 = 32;
/// The broker's cap on a key query (`maxMsgsNumBatch`).
const KEY_MAX: i32 = 64;

/// One message as `key: value` lines.
pub fn describe(message: &Message) -> String {
    let body = match &message.body {
        Some(text) => preview(text, BODY_PREVIEW),
        None => "(not UTF-8)".into(),
    };
    fields(&[
        ("topic", message.topic.clone()),
        ("queue", message.queue_id.to_string()),
        ("queue offset", message.queue_offset.to_string()),
        ("commit log offset", message.commit_log_offset.to_string()),
        ("keys", cell(message.keys.as_ref())),
        ("tags", cell(message.tags.as_ref())),
        ("uniq key", cell(message.uniq_key.as_ref())),
        ("offsetMsgId", message.offset_msg_id.clone()),
        (
            "born",
            format!(
                "{} from {}",
                format_utc(message.born_timestamp),
                message.born_host
            ),
        ),
        (
            "stored",
            format!(
                "{} at {}",
                format_utc(message.store_timestamp),
                message.store_host
            ),
        ),
        ("reconsumes", message.reconsume_times.to_string()),
        ("body size", message.body_size.to_string()),
        ("body", body),
    ])
}

fn messages_output(messages: &[Message]) -> Output {
    let text = messages.iter().map(describe).collect::<Vec<_>>().join("\n");
    Output::new(json!({ "messages": messages }), text)
}

/// QUERY_MESSAGE and its records, filtered by `keep`; nothing kept is not found.
async fn query(
    ctx: &Ctx,
    topic: &str,
    key: &str,
    (begin, end): (i64, i64),
    max: i32,
    unique: bool,
    keep: impl Fn(&Message) -> bool,
) -> AdminResult<Vec<Message>> {
    let broker = ctx.broker().await?;
    ctx.require_topic(broker, topic).await?;
    let mut cmd = command(
        request::QUERY_MESSAGE,
        &[
            ("topic", &topic),
            ("key", &key),
            ("maxNum", &max),
            ("beginTimestamp", &begin),
            ("endTimestamp", &end),
        ],
    );
    if unique {
        cmd.put_ext("_UNIQUE_KEY_QUERY", "true");
    }
    let what = if unique { "unique key" } else { "key" };
    let nothing = || {
        not_found(format!(
            "no message of topic {topic} with {what} {key} at {broker}"
        ))
    };
    let answer = ctx.wire.call(broker, cmd).await?;
    match answer.code {
        response::SUCCESS => {}
        response::QUERY_NOT_FOUND => return Err(nothing()),
        _ => return Err(refusal(request::QUERY_MESSAGE, broker, &answer)),
    }
    let messages: Vec<Message> = decode_records(&answer.body)?
        .into_iter()
        .filter(|m| m.topic == topic && keep(m))
        .collect();
    if messages.is_empty() {
        return Err(nothing());
    }
    Ok(messages)
}

pub async fn by_key(ctx: &Ctx, args: &QueryKeyArgs) -> AdminResult<Output> {
    check_topic(&args.topic)?;
    if args.key.is_empty() || args.key.contains(' ') {
        return Err(bad_input("--key: one key, not empty, without spaces"));
    }
    if !(1..=KEY_MAX).contains(&args.max) {
        return Err(bad_input(format!("--max {}: 1 to {KEY_MAX}", args.max)));
    }
    let now = now_ms();
    let parse = |text: &Option<String>, default: i64, name: &str| match text {
        Some(text) => {
            parse_timestamp(text, now).map_err(|why| bad_input(format!("--{name}: {why}")))
        }
        None => Ok(default),
    };
    let begin = parse(&args.begin, 0, "begin")?;
    let end = parse(&args.end, i64::MAX, "end")?;
    if begin > end {
        return Err(bad_input(format!(
            "--begin {} is after --end {}",
            format_utc(begin),
            format_utc(end)
        )));
    }
    let messages = query(
        ctx,
        &args.topic,
        &args.key,
        (begin, end),
        args.max,
        false,
        |m| m.has_key(&args.key),
    )
    .await?;
    Ok(messages_output(&messages))
}

pub async fn by_uniq_key(ctx: &Ctx, args: &QueryUniqArgs) -> AdminResult<Output> {
    check_topic(&args.topic)?;
    if !is_message_id_shape(&args.id) {
        return Err(bad_input(format!(
            "--id {:?} is not a unique key: 32 or 56 hex digits",
            args.id
        )));
    }
    let id = args.id.to_ascii_uppercase();
    let messages = query(ctx, &args.topic, &id, (0, i64::MAX), UNIQ_MAX, true, |m| {
        m.uniq_key
            .as_deref()
            .is_some_and(|k| k.eq_ignore_ascii_case(&id))
            || m.offset_msg_id.eq_ignore_ascii_case(&id)
    })
    .await?;
    Ok(messages_output(&messages))
}

/// Whether a SYSTEM_ERROR remark to VIEW_MESSAGE_BY_ID says there is no message at the
/// offset: ringmq's node answers "no message at commit log offset N" (its `view_message`),
/// Java's "can not find message by the offset, N". Any other
/// SYSTEM_ERROR is the node failing.
fn says_no_message(remark: Option<&str>) -> bool {
    let remark = remark.unwrap_or("").trim().to_ascii_lowercase();
    remark.starts_with("no message at commit log offset")
        || remark.contains("can not find message")
        || remark.contains("cannot find message")
}

pub async fn by_id(ctx: &Ctx, args: &QueryIdArgs) -> AdminResult<Output> {
    let malformed = || {
        bad_input(format!(
            "--id {:?} is not an offsetMsgId: 32 (IPv4) or 56 (IPv6) hex digits of store host and commit log offset",
            args.id
        ))
    };
    if !is_message_id_shape(&args.id) {
        return Err(malformed());
    }
    let (store_host, offset) =
        decode_offset_msg_id(&args.id.to_ascii_uppercase()).ok_or_else(malformed)?;
    if offset > i64::MAX as u64 {
        return Err(malformed());
    }
    let broker = if ctx.broker_given() {
        ctx.broker().await?
    } else {
        store_host
    };
    let answer = ctx
        .wire
        .call(
            broker,
            command(request::VIEW_MESSAGE_BY_ID, &[("offset", &offset)]),
        )
        .await?;
    let nothing = || {
        not_found(format!(
            "no message at commit log offset {offset} of {broker}"
        ))
    };
    match answer.code {
        response::SUCCESS if !answer.body.is_empty() => {}
        response::SUCCESS => return Err(nothing()),
        response::SYSTEM_ERROR if says_no_message(answer.remark.as_deref()) => {
            return Err(nothing())
        }
        _ => return Err(refusal(request::VIEW_MESSAGE_BY_ID, broker, &answer)),
    }
    let messages = decode_records(&answer.body)?;
    if messages.len() != 1 || messages[0].commit_log_offset as u64 != offset {
        return Err(node_error(format!(
            "{broker} answered VIEW_MESSAGE_BY_ID of offset {offset} with {} records, not the one there",
            messages.len()
        )));
    }
    Ok(messages_output(&messages))
}

pub async fn by_offset(ctx: &Ctx, args: &QueryOffsetArgs) -> AdminResult<Output> {
    check_topic(&args.topic)?;
    if args.queue < 0 {
        return Err(bad_input(format!("--queue {}: not negative", args.queue)));
    }
    if args.offset < 0 {
        return Err(bad_input(format!("--offset {}: not negative", args.offset)));
    }
    let broker = ctx.broker().await?;
    let config = ctx.require_topic(broker, &args.topic).await?;
    let queues = config.read_queue_nums.max(config.write_queue_nums);
    if i64::from(args.queue) >= queues {
        return Err(not_found(format!(
            "topic {} has no queue {} (it has {queues})",
            args.topic, args.queue
        )));
    }
    // As mqadmin's pull: subscription `*` (FLAG_SUBSCRIPTION, expressionType TAG), so a
    // node that keeps no subscription for the tools group still filters nothing out.
    let mut cmd = pull_request(
        &args.topic,
        args.queue,
        args.offset as u64,
        1,
        None,
        Some(SUBSCRIBE_ALL),
    );
    cmd.put_ext("consumerGroup", TOOLS_GROUP);
    let answer = ctx.wire.call(broker, cmd).await?;
    match answer.code {
        response::SUCCESS => {}
        response::PULL_NOT_FOUND
        | response::PULL_OFFSET_MOVED
        | response::PULL_RETRY_IMMEDIATELY
        | response::NO_MESSAGE => {
            let range = match (answer.opt_i64("minOffset"), answer.opt_i64("maxOffset")) {
                (Ok(Some(min)), Ok(Some(max))) if max > min => {
                    format!(" (it holds offsets {min} to {})", max - 1)
                }
                (Ok(Some(_)), Ok(Some(_))) => " (it holds no messages)".to_owned(),
                _ => String::new(),
            };
            return Err(not_found(format!(
                "no message at offset {} of queue {} of topic {}{range}",
                args.offset, args.queue, args.topic
            )));
        }
        _ => return Err(refusal(request::PULL_MESSAGE, broker, &answer)),
    }
    let messages = decode_records(&answer.body)?;
    let Some(message) = messages.into_iter().next() else {
        return Err(node_error(format!(
            "{broker} answered a pull with no records"
        )));
    };
    // A broker may answer a pull from a later offset than asked (the next message it
    // has, e.g. past a gap): that is not the message at this offset.
    if message.queue_offset != args.offset {
        return Err(not_found(format!(
            "no message at offset {} of queue {} of topic {} (the next is at offset {})",
            args.offset, args.queue, args.topic, message.queue_offset
        )));
    }
    Ok(messages_output(&[message]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_no_message_remark_is_not_found() {
        for remark in [
            "no message at commit log offset 12345",
            "can not find message by the offset, 12345",
            "Can not find message, maybe deleted",
        ] {
            assert!(says_no_message(Some(remark)), "{remark}");
        }
        for remark in [
            None,
            Some(""),
            Some("disk full"),
            Some("java.lang.NullPointerException"),
            Some("store is shutting down"),
        ] {
            assert!(!says_no_message(remark), "{remark:?}");
        }
    }
}
