//! CONSUMER_SEND_MSG_BACK (36): a consumer hands back a message it failed to consume, to
//! be delivered again later or, after too many tries, parked in the group's dead-letter
//! queue (reference part 2 §1.1, §1.2).
//!
//! Header: `offset` (the message's CommitLog offset, shard bits included, D4), `group`,
//! `delayLevel` (0: the broker chooses, below 0: straight to the DLQ, above 0: that
//! level), optional `maxReconsumeTimes` (else the group's `retryMaxTimes`), `originMsgId`,
//! `originTopic`. The request is routed to the shard the offset names, which reads the
//! original record there.
//!
//! As Java's `consumerSendMsgBack`:
//! - The group must exist (created with the defaults under `autoCreateSubscriptionGroup`),
//!   else SUBSCRIPTION_GROUP_NOT_EXIST.
//! - DLQ when the record's `reconsumeTimes >= maxReconsumeTimes` or `delayLevel < 0`:
//!   topic `%DLQ%<group>`, queue 0, no delay. Otherwise retry: topic `%RETRY%<group>`, a
//!   queue of its `retryQueueNums`, `DELAY` = `delayLevel`, or `3 + reconsumeTimes` when 0
//!   (the delay path clamps it to the highest level).
//! - The new record keeps the body, flag, sysFlag, born time and born host, and every
//!   property, plus `RETRY_TOPIC` (the original topic, set by the first retry and kept),
//!   `ORIGIN_MESSAGE_ID` (the first original's offsetMsgId, kept likewise) and `WAIT=false`;
//!   its `reconsumeTimes` is the original's plus one. `UNIQ_KEY` is unchanged, so the id
//!   the client sees stays the same across retries.
//! - It is stored through the send path (so a delayed retry goes to
//!   `SCHEDULE_TOPIC_XXXX` and is delivered by the scheduler, [`crate::broker::delay`]), on the
//!   shard that owns its queue; SUCCESS once it is stored as durably as a send, else
//!   SYSTEM_ERROR with the send's remark. An offset that starts no record is SYSTEM_ERROR
//!   "look message by offset failed", as Java answers.
//! - The copy is routed as a plain send is, so the rule of [`dead_letter_if_due`] applies
//!   to it too: a retry of a group that holds an orderly lock goes to the DLQ. Java
//!   applies that rule to plain retry sends only; an orderly group does not send back, so
//!   the two agree in practice.

use std::cell::Cell;

use crate::remoting::codes::{request as request_code, response};
use crate::remoting::{ExtFields, FieldError, RemotingCommand};
use crate::store::properties;
use crate::store::record::{self, Decoded, Verify};

use crate::broker::naming::names::{DLQ_PREFIX, RETRY_PREFIX};
use crate::broker::naming::{ids, names};
use crate::broker::requests::send;
use crate::broker::{bad_header, Broker};

/// `MessageConst.PROPERTY_RETRY_TOPIC`.
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
/// `MessageConst.PROPERTY_ORIGIN_MESSAGE_ID`.
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
pub use crate::broker::delay::DELAY;
/// The first retry waits level 3 (10 s by default); each later one a level more.
pub const FIRST_RETRY_LEVEL: i32 = 3;

thread_local! {
    /// Spreads a shard's retries over a group's retry queues.
    static NEXT_RETRY_QUEUE: Cell<u32> = const { Cell::new(0) };
}

struct SendBackHeader<'a> {
    offset: i64,
    group: &'a str,
    delay_level: i32,
    max_reconsume_times: Option<i32>,
}

fn decode(request: &RemotingCommand) -> Result<SendBackHeader<'_>, FieldError> {
    Ok(SendBackHeader {
        offset: request.get_i64("offset")?,
        group: request.get_str("group")?,
        delay_level: request.get_i32("delayLevel")?,
        max_reconsume_times: request.opt_i32("maxReconsumeTimes")?,
    })
}

/// Where a handed-back message goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Destination {
    Retry { level: i32 },
    DeadLetter,
}

/// The decision of §1.2 step 6 for a record tried `reconsume_times` times.
pub fn destination(
    reconsume_times: i32,
    max_reconsume_times: i32,
    delay_level: i32,
) -> Destination {
    if reconsume_times >= max_reconsume_times || delay_level < 0 {
        Destination::DeadLetter
    } else if delay_level == 0 {
        Destination::Retry {
            level: FIRST_RETRY_LEVEL.saturating_add(reconsume_times),
        }
    } else {
        Destination::Retry { level: delay_level }
    }
}

fn failed(request: &RemotingCommand, why: String) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
}

pub async fn send_back(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let header = match decode(request) {
        Ok(header) => header,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_group(header.group) {
        return bad_header(request, why);
    }
    let config = match broker.subscription_group(header.group, false) {
        Ok(config) => config,
        Err((code, remark)) => return RemotingCommand::response_to(request, code, Some(remark)),
    };
    let bytes = match read_record(broker, header.offset) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return failed(
                request,
                format!("look message by offset failed, {}", header.offset),
            )
        }
        Err(why) => return failed(request, why.to_string()),
    };
    let view = match record::decode(&bytes, Verify::Structure) {
        Ok(Decoded::Record(view)) => view,
        other => {
            return failed(
                request,
                format!(
                    "look message by offset failed, {}: {other:?}",
                    header.offset
                ),
            )
        }
    };
    let max = header.max_reconsume_times.unwrap_or(config.retry_max_times);
    let destination = destination(view.reconsume_times, max, header.delay_level);
    let (topic, queue_id) = target_queue(broker, &header, &config, &destination);
    let resend = resend_request(&header, &view, &destination, (&topic, queue_id), max);
    let answer = match store_resend(broker, resend, view.born_host).await {
        Ok(answer) => answer,
        Err(why) => return failed(request, why.to_string()),
    };
    if answer.code != response::SUCCESS {
        return failed(
            request,
            format!(
                "the message could not be stored to {topic}: {}",
                answer.remark.as_deref().unwrap_or("")
            ),
        );
    }
    let counter = match destination {
        Destination::Retry { .. } => &broker.metrics.retries,
        Destination::DeadLetter => &broker.metrics.dead_letters,
    };
    crate::metrics::ShardMetrics::add(counter, 1);
    tracing::debug!(
        group = %crate::remoting::log_safe::log_safe(header.group),
        ?destination,
        reconsume_times = view.reconsume_times + 1,
        "message sent back"
    );
    RemotingCommand::response_to(request, response::SUCCESS, None)
}

/// The topic and queue a handed-back message is stored to: the group's DLQ queue 0, or
/// one of its retry queues in turn.
fn target_queue(
    broker: &Broker,
    header: &SendBackHeader<'_>,
    config: &crate::broker::tables::subscription_groups::SubscriptionGroupConfig,
    destination: &Destination,
) -> (String, i32) {
    match destination {
        Destination::DeadLetter => (format!("{DLQ_PREFIX}{}", header.group), 0),
        Destination::Retry { .. } => {
            let topic = format!("{RETRY_PREFIX}{}", header.group);
            // The retry topic is created with one queue on first use; never name a queue
            // it does not have.
            let existing = broker.topics.get(&topic).map_or(1, |c| c.write_queue_nums);
            let queues = (config.retry_queue_nums.max(1) as u32).min(existing.max(1));
            let next = NEXT_RETRY_QUEUE.with(|next| {
                let value = next.get();
                next.set(value.wrapping_add(1));
                value
            });
            (topic, (next % queues) as i32)
        }
    }
}

/// The original's user properties for the copy: without its delay and WAIT, with where
/// it came from (`RETRY_TOPIC`, `ORIGIN_MESSAGE_ID`, kept from an earlier retry), and the
/// retry's delay level.
fn resend_properties(view: &record::RecordView<'_>, destination: &Destination) -> String {
    let original_id = ids::offset_msg_id(view.store_host, view.phys_offset as u64);
    let mut props: Vec<(&str, String)> = properties::parse(view.user_properties())
        .into_iter()
        .filter(|(key, _)| *key != DELAY && *key != properties::WAIT)
        .map(|(key, value)| (key, value.to_owned()))
        .collect();
    if !props.iter().any(|(key, _)| *key == RETRY_TOPIC) {
        props.push((RETRY_TOPIC, view.topic.to_owned()));
    }
    if !props.iter().any(|(key, _)| *key == ORIGIN_MESSAGE_ID) {
        props.push((ORIGIN_MESSAGE_ID, original_id));
    }
    props.push((properties::WAIT, "false".into()));
    if let Destination::Retry { level } = destination {
        props.push((DELAY, level.to_string()));
    }
    properties::encode(props.iter().map(|(key, value)| (*key, value.as_str())))
}

/// The SEND_MESSAGE that stores the copy of `view` to `(topic, queue_id)`, tried once
/// more than the original.
fn resend_request(
    header: &SendBackHeader<'_>,
    view: &record::RecordView<'_>,
    destination: &Destination,
    (topic, queue_id): (&str, i32),
    max: i32,
) -> RemotingCommand {
    let encoded = resend_properties(view, destination);
    let mut fields = ExtFields::new();
    let queue_text = queue_id.to_string();
    let sys_flag = view.sys_flag.to_string();
    let born = view.born_timestamp.to_string();
    let flag = view.flag.to_string();
    let reconsume = view.reconsume_times.saturating_add(1).to_string();
    let max_text = max.to_string();
    for (name, value) in [
        ("producerGroup", header.group),
        ("topic", topic),
        ("defaultTopic", "TBW102"),
        ("defaultTopicQueueNums", "4"),
        ("queueId", queue_text.as_str()),
        ("sysFlag", sys_flag.as_str()),
        ("bornTimestamp", born.as_str()),
        ("flag", flag.as_str()),
        ("properties", encoded.as_str()),
        ("reconsumeTimes", reconsume.as_str()),
        ("unitMode", "false"),
        ("maxReconsumeTimes", max_text.as_str()),
    ] {
        fields.insert(name.into(), value);
    }
    RemotingCommand::request(request_code::SEND_MESSAGE, fields).with_body(view.body.to_vec())
}

/// Stores the copy as its send would be: on the shard that owns its queue. The store's
/// answer, or why there is none.
async fn store_resend(
    broker: &Broker,
    mut resend: RemotingCommand,
    born_host: std::net::SocketAddr,
) -> Result<RemotingCommand, ShardSilent> {
    match broker.owner_of(&mut resend) {
        Some(owner) if owner != broker.shard.id() => {
            Box::pin(broker.shard.forward(owner, resend, born_host))
                .await
                .ok_or(ShardSilent { shard: owner })
        }
        _ => Ok(Box::pin(send::send_message(broker, &resend, born_host)).await),
    }
}

/// The plain-send path to a retry topic (part 2 §1.3): a send to `%RETRY%<group>` that has
/// been tried more than `maxReconsumeTimes` (header, else the group's `retryMaxTimes`),
/// or whose group holds an unexpired orderly lock, goes to `%DLQ%<group>` queue 0 with
/// no delay. Rewrites `request` (a SEND_MESSAGE or SEND_MESSAGE_V2) in place, before it is
/// routed, so it lands on the shard that owns the DLQ queue. Clients send this way when a
/// send-back fails, and orderly consumers always do. Note `>` here and `>=` in
/// [`destination`], as Java has it.
pub fn dead_letter_if_due(broker: &Broker, request: &mut RemotingCommand) {
    let v2 = request.code == request_code::SEND_MESSAGE_V2;
    let (topic_field, queue_field, props_field, times_field, max_field) = if v2 {
        ("b", "e", "i", "j", "l")
    } else {
        (
            "topic",
            "queueId",
            "properties",
            "reconsumeTimes",
            "maxReconsumeTimes",
        )
    };
    let Some(group) = request
        .opt_str(topic_field)
        .and_then(|topic| topic.strip_prefix(RETRY_PREFIX))
        .filter(|group| names::validate_group(group).is_ok())
        .map(str::to_owned)
    else {
        return;
    };
    let times = request.opt_i32(times_field).ok().flatten().unwrap_or(0);
    let max = match request.opt_i32(max_field).ok().flatten() {
        Some(max) => max,
        None => broker
            .subscription_groups
            .get(&group)
            .map_or(16, |config| config.retry_max_times),
    };
    let locked = broker
        .locks
        .group_holds_any(&group, tokio::time::Instant::now());
    if times <= max && !locked {
        return;
    }
    let kept: Vec<(String, String)> = properties::parse(request.opt_str(props_field).unwrap_or(""))
        .into_iter()
        .filter(|(key, _)| *key != DELAY)
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    let props = properties::encode(kept.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    crate::metrics::ShardMetrics::add(&broker.metrics.dead_letters, 1);
    request.put_ext(topic_field, format!("{DLQ_PREFIX}{group}"));
    request.put_ext(queue_field, 0);
    request.put_ext(props_field, props);
    tracing::debug!(
        group = %crate::remoting::log_safe::log_safe(&group),
        times,
        max,
        locked,
        "a retry send goes to the dead-letter queue"
    );
}

/// The bytes of the visible record that starts at `phys` on this shard.
fn read_record(broker: &Broker, phys: i64) -> Result<Option<Vec<u8>>, crate::store::StoreError> {
    if phys < 0 {
        return Ok(None);
    }
    let Some((size, _)) = broker.store.record_at(phys as u64)? else {
        return Ok(None);
    };
    broker
        .store
        .read_log(phys as u64, size as usize)
        .map(|bytes| Some(bytes.to_vec()))
}

/// The shard that owns a handed-back message's queue gave no answer (it is stopping).
#[derive(Debug, thiserror::Error)]
#[error("shard {shard} did not answer")]
struct ShardSilent {
    shard: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_schedule_and_the_dead_letter_rule() {
        assert_eq!(destination(0, 16, 0), Destination::Retry { level: 3 });
        assert_eq!(destination(15, 16, 0), Destination::Retry { level: 18 });
        assert_eq!(
            destination(16, 16, 0),
            Destination::DeadLetter,
            ">= on send-back"
        );
        assert_eq!(destination(2, 16, 7), Destination::Retry { level: 7 });
        assert_eq!(destination(0, 16, -1), Destination::DeadLetter);
        assert_eq!(destination(0, 0, 0), Destination::DeadLetter);
        assert_eq!(
            destination(i32::MAX - 1, i32::MAX, 0),
            Destination::Retry { level: i32::MAX }
        );
    }
}
