//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361), with long polling (reference §9.4, D8).
//!
//! Invariants:
//! - Every pull response carries `nextBeginOffset`, `minOffset`, `maxOffset` and
//!   `suggestWhichBrokerId`, whatever its code (the Java client unboxes all four).
//! - Status → code as `PullMessageProcessor`: FOUND → SUCCESS (body = the stored records,
//!   byte for byte, concatenated, as a file body the connection writer sends straight from
//!   the CommitLog segments: D8); NO_MATCHED_MESSAGE → PULL_RETRY_IMMEDIATELY; an empty
//!   queue → PULL_NOT_FOUND at offset 0 else PULL_OFFSET_MOVED; offset == max →
//!   PULL_NOT_FOUND; offset below min or above max → PULL_OFFSET_MOVED.
//! - Long polling: a PULL_NOT_FOUND with the suspend bit (0x2) parks the request's own task
//!   (never the connection) until a message becomes visible or `suspendTimeoutMillis`
//!   (capped by `BrokerConfig::max_suspend`) passes, then reads again. Arrivals are
//!   store-wide, so a wake-up for another queue just reads and parks again until the
//!   deadline. The waiter registers before each read, so an arrival between the read and the
//!   wait is not missed. At the deadline the answer is whatever the last read says
//!   (PULL_NOT_FOUND when nothing came).
//!
//! Subscriptions: a tag expression sent with the request (sysFlag bit 0x4) filters by tag
//! hash; without one the group's subscription to the topic from its heartbeats is used
//! (reference §14 pitfall 7), and a request `subVersion` newer than that subscription's
//! answers SUBSCRIPTION_NOT_LATEST (the client heartbeats again). With no heartbeat
//! subscription at all the pull is not filtered (Java answers SUBSCRIPTION_NOT_EXIST; we are
//! lenient so tools and tests can pull without heartbeating). SQL92 is refused with
//! SUBSCRIPTION_PARSE_FAILED.
//!
//! Names: the group, topic and queue id pass the one check the offset requests use
//! ([`crate::broker::requests::consumer_offset_requests::check_target`]) before anything else happens; a pull that
//! fails it is refused with SYSTEM_ERROR (as Java's `PullMessageProcessor` answers an
//! illegal queueId), so neither it nor its `commitOffset` touches any table.
//!
//! On a slave, and with `slaveReadEnable`, the answer's `suggestWhichBrokerId` and a slave's
//! answer past its end follow [`super::read_from_slave`].
//!
//! Commit: with the commit bit (0x1) a non-negative `commitOffset` is stored as the group's
//! committed offset for the queue, once, before the pull reads or parks.

use crate::remoting::codes::response;
use crate::remoting::requests::{FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND};
use crate::remoting::{FieldError, RemotingCommand};
use crate::store::replica::StoreRole;
use crate::store::{properties, GetStatus, PullRead};

use crate::broker::requests::consumer_offset_requests::check_target;
use crate::broker::requests::read_from_slave;
use crate::broker::{bad_header, Broker};

/// The request header fields this slice uses.
#[derive(Clone, Debug)]
pub struct PullRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub max_msg_nums: i32,
    pub sys_flag: i32,
    pub commit_offset: i64,
    pub suspend_timeout_millis: i64,
    pub subscription: Option<String>,
    pub sub_version: i64,
    pub expression_type: Option<String>,
}

impl PullRequestHeader {
    pub fn decode(request: &RemotingCommand) -> Result<PullRequestHeader, FieldError> {
        Ok(PullRequestHeader {
            consumer_group: request.get_str("consumerGroup")?.to_owned(),
            topic: request.get_str("topic")?.to_owned(),
            queue_id: request.get_i32("queueId")?,
            queue_offset: request.get_i64("queueOffset")?,
            max_msg_nums: request.get_i32("maxMsgNums")?,
            sys_flag: request.get_i32("sysFlag")?,
            commit_offset: request.get_i64("commitOffset")?,
            suspend_timeout_millis: request.get_i64("suspendTimeoutMillis")?,
            subscription: request.opt_str("subscription").map(str::to_owned),
            // Java requires it; lite pull clients send 0. Absent is harmless until
            // subscription versions are tracked.
            sub_version: request.opt_i64("subVersion")?.unwrap_or(0),
            expression_type: request.opt_str("expressionType").map(str::to_owned),
        })
    }
}

/// The tag hashes a tag expression selects, or `None` for "everything" (`*` or empty).
pub fn tag_codes(expression: &str) -> Option<Vec<i32>> {
    let mut codes = Vec::new();
    for tag in expression.split("||").map(str::trim) {
        if tag == "*" {
            return None;
        }
        if !tag.is_empty() {
            codes.push(properties::java_string_hash(tag));
        }
    }
    if codes.is_empty() {
        None
    } else {
        Some(codes)
    }
}

/// What a read amounts to, before it becomes a response.
struct Outcome {
    code: i32,
    status: &'static str,
    next_begin_offset: u64,
    result: PullRead,
}

fn status_name(status: GetStatus) -> &'static str {
    match status {
        GetStatus::Found => "FOUND",
        GetStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
        GetStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
        GetStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
        GetStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
        GetStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
    }
}

fn classify(offset: u64, result: PullRead, on_slave: bool) -> Outcome {
    let status = status_name(result.status);
    let (code, next) = match result.status {
        GetStatus::Found => (response::SUCCESS, result.next_begin_offset),
        GetStatus::NoMatchedMessage => (response::PULL_RETRY_IMMEDIATELY, result.next_begin_offset),
        // The store calls a queue whose entries were all cleaned up (min == max > 0) empty
        // too; Java only does when it never had any. Waiting at its end is the same as
        // OFFSET_OVERFLOW_ONE; anywhere else the consumer must move to the end.
        GetStatus::NoMessageInQueue if result.max_offset > 0 => {
            if offset == result.max_offset {
                (response::PULL_NOT_FOUND, offset)
            } else {
                (response::PULL_OFFSET_MOVED, result.max_offset)
            }
        }
        GetStatus::NoMessageInQueue if offset != 0 => (response::PULL_OFFSET_MOVED, 0),
        GetStatus::NoMessageInQueue => (response::PULL_NOT_FOUND, 0),
        GetStatus::OffsetOverflowOne => (response::PULL_NOT_FOUND, offset),
        GetStatus::OffsetTooSmall => (response::PULL_OFFSET_MOVED, result.min_offset),
        GetStatus::OffsetOverflowBadly => (response::PULL_OFFSET_MOVED, result.max_offset),
    };
    let (code, next) = if on_slave {
        read_from_slave::on_slave(code, next, offset, result.max_offset)
    } else {
        (code, next)
    };
    Outcome {
        code,
        status,
        next_begin_offset: next,
        result,
    }
}

/// Decrements the parked count however the parked future ends (answered or aborted).
pub(crate) struct ParkedGuard<'a>(pub(crate) &'a Broker);

impl Drop for ParkedGuard<'_> {
    fn drop(&mut self) {
        self.0.parked.set(self.0.parked.get() - 1);
    }
}

pub async fn pull(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let header = match PullRequestHeader::decode(request) {
        Ok(header) => header,
        Err(error) => return bad_header(request, error),
    };
    if let Err(refused) = check_pull(broker, request, &header) {
        return *refused;
    }
    if header.sys_flag & FLAG_COMMIT_OFFSET != 0 && header.commit_offset >= 0 {
        broker.consumer_offsets.commit(
            &header.consumer_group,
            &header.topic,
            header.queue_id,
            header.commit_offset,
        );
    }
    let filter = match pull_filter(broker, request, &header) {
        Ok(filter) => filter,
        Err(refused) => return *refused,
    };
    let offset = header.queue_offset as u64;
    let max = header.max_msg_nums.max(1) as u32;
    let on_slave = broker.store.role() == StoreRole::Replica;
    let read = || {
        broker
            .store
            .read_messages(
                &header.topic,
                header.queue_id,
                offset,
                max,
                filter.as_deref(),
            )
            .map(|result| classify(offset, result, on_slave))
    };
    let outcome = match read() {
        Ok(outcome) => outcome,
        Err(error) => return store_error(request, error),
    };
    let may_park = header.sys_flag & FLAG_SUSPEND != 0
        && header.suspend_timeout_millis > 0
        && broker.parked.get() < broker.config.max_parked_pulls;
    let outcome = if outcome.code == response::PULL_NOT_FOUND && may_park {
        match park_until_found(broker, &header, read, outcome).await {
            Ok(outcome) => outcome,
            Err(error) => return store_error(request, error),
        }
    } else {
        outcome
    };
    crate::metrics::ShardMetrics::add(
        &broker.metrics.messages_out,
        outcome.result.records.len() as u64,
    );
    crate::broker::state::stats_sampler::count_pull(
        broker,
        &header.topic,
        &header.consumer_group,
        &outcome.result.records,
    );
    let last_record = outcome
        .result
        .records
        .last()
        .map(|record| record.phys_offset);
    let suggested = read_from_slave::suggested_broker(broker, &header.consumer_group, last_record);
    respond(request, outcome, suggested)
}

/// The refusals a pull gets before anything is read: a group, topic or queue the rules
/// refuse, a group that may not consume, a negative offset.
fn check_pull(
    broker: &Broker,
    request: &RemotingCommand,
    header: &PullRequestHeader,
) -> Result<(), Box<RemotingCommand>> {
    if let Err(why) = check_target(
        broker,
        &header.consumer_group,
        &header.topic,
        header.queue_id,
    ) {
        return Err(Box::new(refusal(
            request,
            response::SYSTEM_ERROR,
            why.to_string(),
        )));
    }
    if let Err((code, why)) = broker.subscription_group(&header.consumer_group, true) {
        return Err(Box::new(refusal(request, code, why)));
    }
    if header.queue_offset < 0 {
        return Err(Box::new(RemotingCommand::response_to(
            request,
            response::INVALID_PARAMETER,
            Some(format!("queueOffset {} is negative", header.queue_offset)),
        )));
    }
    Ok(())
}

/// The tag codes a pull selects (`None`: everything): the pull's own subscription when it
/// carries one, else the group's from its heartbeats, which must be as new as the pull's.
fn pull_filter(
    broker: &Broker,
    request: &RemotingCommand,
    header: &PullRequestHeader,
) -> Result<Option<Vec<i32>>, Box<RemotingCommand>> {
    if header.sys_flag & FLAG_SUBSCRIPTION != 0 {
        return match header.expression_type.as_deref() {
            None | Some("TAG") => Ok(header.subscription.as_deref().and_then(tag_codes)),
            Some(other) => Err(Box::new(not_tag(request, other))),
        };
    }
    match broker
        .groups
        .subscription(&header.consumer_group, &header.topic)
    {
        None => Ok(None),
        Some(sub) if sub.sub_version < header.sub_version => {
            Err(Box::new(RemotingCommand::response_to(
                request,
                response::SUBSCRIPTION_NOT_LATEST,
                Some(format!(
                    "the consumer's subscription is not latest: {} < {}",
                    sub.sub_version, header.sub_version
                )),
            )))
        }
        Some(sub) if !sub.is_tag() => Err(Box::new(not_tag(
            request,
            sub.expression_type.as_deref().unwrap_or(""),
        ))),
        Some(sub) => Ok(sub.filter_codes()),
    }
}

/// Parks a pull that found nothing until `read` finds something, its suspend time (capped
/// by `max_suspend`) runs out or its connection closes; the last outcome read. A pull its
/// connection may not park (past `maxParkedRequestsPerConnection`) keeps `outcome`.
async fn park_until_found(
    broker: &Broker,
    header: &PullRequestHeader,
    read: impl Fn() -> Result<Outcome, crate::store::StoreError>,
    mut outcome: Outcome,
) -> Result<Outcome, crate::store::StoreError> {
    let wait = std::time::Duration::from_millis(header.suspend_timeout_millis as u64)
        .min(broker.config.max_suspend);
    let deadline = tokio::time::Instant::now() + wait;
    // Parked, it no longer holds its connection's reads back (bounded per shard by the
    // caller, and per connection here: past that bound it answers at once).
    let Ok(connection_parked) = crate::server::backlog::try_park_current() else {
        return Ok(outcome);
    };
    broker.parked.set(broker.parked.get() + 1);
    let _parked = ParkedGuard(broker);
    loop {
        // Register before reading, so an arrival after the read still wakes us.
        let arrival = broker.store.arrivals();
        outcome = read()?;
        if outcome.code != response::PULL_NOT_FOUND {
            return Ok(outcome);
        }
        tokio::select! {
            woken = tokio::time::timeout_at(deadline, arrival) => {
                if woken.is_err() {
                    return Ok(outcome);
                }
            }
            // Nobody is left to answer.
            () = crate::server::backlog::closed(&connection_parked) => return Ok(outcome),
        }
    }
}

fn not_tag(request: &RemotingCommand, expression_type: &str) -> RemotingCommand {
    RemotingCommand::response_to(
        request,
        response::SUBSCRIPTION_PARSE_FAILED,
        Some(format!(
            "expressionType {expression_type} is not supported; only TAG"
        )),
    )
}

fn store_error(request: &RemotingCommand, error: crate::store::StoreError) -> RemotingCommand {
    refusal(request, response::SYSTEM_ERROR, error.to_string())
}

fn refusal(request: &RemotingCommand, code: i32, remark: String) -> RemotingCommand {
    let mut answer = RemotingCommand::response_to(request, code, Some(remark));
    // Even an error carries the fields the client unboxes; zeros send it back to offset 0
    // only if it acts on them, which it does not for SYSTEM_ERROR.
    answer.put_ext("nextBeginOffset", 0);
    answer.put_ext("minOffset", 0);
    answer.put_ext("maxOffset", 0);
    answer.put_ext("suggestWhichBrokerId", 0);
    answer
}

fn respond(request: &RemotingCommand, outcome: Outcome, suggested: i64) -> RemotingCommand {
    let mut answer =
        RemotingCommand::response_to(request, outcome.code, Some(outcome.status.to_owned()));
    answer.put_ext("nextBeginOffset", outcome.next_begin_offset);
    answer.put_ext("minOffset", outcome.result.min_offset);
    answer.put_ext("maxOffset", outcome.result.max_offset);
    answer.put_ext("suggestWhichBrokerId", suggested);
    if outcome.code == response::SUCCESS {
        answer.file_body = outcome.result.body;
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_expressions() {
        assert_eq!(tag_codes("*"), None);
        assert_eq!(tag_codes(""), None);
        assert_eq!(tag_codes(" || "), None);
        assert_eq!(
            tag_codes("TagA || TagB"),
            Some(vec![
                properties::java_string_hash("TagA"),
                properties::java_string_hash("TagB")
            ])
        );
        assert_eq!(tag_codes("TagA || *"), None);
    }
}
