//! The consumer group commands:
//!
//! - `groups`: GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201).
//! - `consumer-progress` (mqadmin consumerProgress): GET_CONSUME_STATS (208); an empty
//!   offset table means the group has no progress there: not found, as mqadmin says.
//! - `consumer-connections` (mqadmin consumerConnection): GET_CONSUMER_CONNECTION_LIST
//!   (203); CONSUMER_NOT_ONLINE (206) is not found.
//! - `reset-offset` (mqadmin resetOffsetByTime): INVOKE_BROKER_TO_RESET_OFFSET (222) with
//!   `queueId` -1 (every queue), then GET_EARLIEST_MSG_STORETIME (32) per queue to say
//!   which queues the time is before the oldest message of (their offsets go to the
//!   queue's minimum). The offsets are reset once 222 answers; a queue whose oldest time
//!   cannot be read then shows it as unknown (`-`, -1 in JSON) rather than failing.
//!   ringmq's node writes the offsets itself; a Java broker only asks the online
//!   consumers and, with none online, answers CONSUMER_NOT_ONLINE (exit 1).

use std::net::SocketAddr;

use serde_json::json;

use crate::remoting::codes::request;

use super::super::args::{ConsumerProgressArgs, ResetOffsetArgs};
use super::super::bodies;
use super::super::error::{bad_input, not_found, AdminResult};
use super::super::output::{cell, fields, Output, Table};
use super::super::time::{format_utc, now_ms, parse_timestamp};
use super::super::wire::command;
use super::{check_group, check_topic, Ctx};

pub async fn groups(ctx: &Ctx) -> AdminResult<Output> {
    let broker = ctx.broker().await?;
    let answer = ctx
        .wire
        .call_ok(
            broker,
            command(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]),
        )
        .await?;
    let groups = bodies::subscription_groups(&answer.body)?;
    let mut table = Table::new(&[
        "group",
        "consume",
        "broadcast",
        "#retry queues",
        "#retry max",
    ]);
    for group in &groups {
        table.row(vec![
            group.group_name.clone(),
            cell(group.consume_enable),
            cell(group.consume_broadcast_enable),
            cell(group.retry_queue_nums),
            cell(group.retry_max_times),
        ]);
    }
    Ok(Output::new(
        json!({ "broker": broker.to_string(), "groups": groups }),
        table.render(),
    ))
}

pub async fn progress(ctx: &Ctx, args: &ConsumerProgressArgs) -> AdminResult<Output> {
    check_group(&args.group)?;
    if let Some(topic) = &args.topic {
        check_topic(topic)?;
    }
    let broker = ctx.broker().await?;
    let mut cmd = command(
        request::GET_CONSUME_STATS,
        &[("consumerGroup", &args.group)],
    );
    if let Some(topic) = &args.topic {
        cmd.put_ext("topic", topic);
    }
    let answer = ctx.wire.call_ok(broker, cmd).await?;
    let stats = bodies::consume_stats(&answer.body)?;
    if stats.queues.is_empty() {
        return Err(not_found(match &args.topic {
            Some(topic) => format!(
                "group {} has no consume progress on topic {topic} at {broker}",
                args.group
            ),
            None => format!("group {} has no consume progress at {broker}", args.group),
        }));
    }
    let mut table = Table::new(&[
        "topic",
        "broker",
        "#queue",
        "#broker offset",
        "#consumer offset",
        "#lag",
        "last consumed (UTC)",
    ]);
    for queue in &stats.queues {
        table.row(vec![
            queue.queue.topic.clone(),
            queue.queue.broker_name.clone(),
            queue.queue.queue_id.to_string(),
            queue.broker_offset.to_string(),
            queue.consumer_offset.to_string(),
            queue.lag.to_string(),
            format_utc(queue.last_timestamp),
        ]);
    }
    let text = format!(
        "{}total lag: {}\nconsume tps: {:.2}\n",
        table.render(),
        stats.total_lag,
        stats.consume_tps
    );
    Ok(Output::new(
        json!({
            "group": args.group,
            "topic": args.topic,
            "queues": stats.queues,
            "totalLag": stats.total_lag,
            "consumeTps": stats.consume_tps,
        }),
        text,
    ))
}

pub async fn connections(ctx: &Ctx, group: &str) -> AdminResult<Output> {
    check_group(group)?;
    let broker = ctx.broker().await?;
    let answer = ctx
        .wire
        .call_ok(
            broker,
            command(
                request::GET_CONSUMER_CONNECTION_LIST,
                &[("consumerGroup", &group)],
            ),
        )
        .await?;
    let connection = bodies::consumer_connection(&answer.body)?;
    if connection.connections.is_empty() {
        return Err(not_found(format!(
            "no consumer of group {group} is online at {broker}"
        )));
    }
    let mut clients = Table::new(&["client id", "addr", "language", "version"]);
    for c in &connection.connections {
        clients.row(vec![
            c.client_id.clone(),
            c.client_addr.clone(),
            c.language.clone(),
            c.version.clone(),
        ]);
    }
    let mut subscriptions = Table::new(&["topic", "expression", "type"]);
    for s in &connection.subscriptions {
        subscriptions.row(vec![
            s.topic.clone(),
            s.sub_string.clone(),
            s.expression_type.clone(),
        ]);
    }
    let text = format!(
        "{}\n{}\n{}",
        fields(&[
            ("group", group.to_owned()),
            ("consume type", connection.consume_type.clone()),
            ("message model", connection.message_model.clone()),
            ("consume from", connection.consume_from_where.clone()),
        ]),
        clients.render(),
        subscriptions.render()
    );
    Ok(Output::new(
        json!({ "group": group, "connection": connection }),
        text,
    ))
}

pub async fn reset_offset(ctx: &Ctx, args: &ResetOffsetArgs) -> AdminResult<Output> {
    check_group(&args.group)?;
    check_topic(&args.topic)?;
    let timestamp =
        parse_timestamp(&args.timestamp, now_ms()).map_err(|why| bad_input(why.to_string()))?;
    let broker = ctx.broker().await?;
    ctx.require_topic(broker, &args.topic).await?;
    let offsets = reset_on(ctx, broker, args, timestamp).await?;
    let mut queues = Vec::new();
    let mut before_oldest = 0;
    let mut table = Table::new(&[
        "broker",
        "#queue",
        "#offset",
        "oldest message (UTC)",
        "note",
    ]);
    for entry in &offsets {
        let earliest = earliest_store_time(ctx, broker, &args.topic, entry.queue.queue_id).await;
        let before = earliest > 0 && timestamp < earliest;
        before_oldest += usize::from(before);
        table.row(vec![
            entry.queue.broker_name.clone(),
            entry.queue.queue_id.to_string(),
            entry.offset.to_string(),
            format_utc(earliest),
            if before {
                "before the oldest: minimum".into()
            } else {
                String::new()
            },
        ]);
        queues.push(json!({
            "topic": entry.queue.topic,
            "brokerName": entry.queue.broker_name,
            "queueId": entry.queue.queue_id,
            "offset": entry.offset,
            "earliestStoreTimestamp": earliest,
            "beforeOldest": before,
        }));
    }
    let note = (before_oldest > 0).then(|| {
        format!(
            "{} is before the oldest message of {before_oldest} of {} queues: their offsets go to the queue's minimum",
            format_utc(timestamp),
            offsets.len()
        )
    });
    let mut text = format!(
        "reset group {} on topic {} to {} ({timestamp})\n{}",
        args.group,
        args.topic,
        format_utc(timestamp),
        table.render()
    );
    if let Some(note) = &note {
        text.push_str(&format!("note: {note}\n"));
    }
    Ok(Output::new(
        json!({
            "group": args.group,
            "topic": args.topic,
            "timestamp": timestamp,
            "force": args.force,
            "queues": queues,
            "note": note,
        }),
        text,
    ))
}

/// INVOKE_BROKER_TO_RESET_OFFSET: the offsets the broker reset the group's queues to; none
/// is not found.
async fn reset_on(
    ctx: &Ctx,
    broker: SocketAddr,
    args: &ResetOffsetArgs,
    timestamp: i64,
) -> AdminResult<Vec<bodies::QueueOffset>> {
    let answer = ctx
        .wire
        .call_ok(
            broker,
            command(
                request::INVOKE_BROKER_TO_RESET_OFFSET,
                &[
                    ("topic", &args.topic),
                    ("group", &args.group),
                    ("timestamp", &timestamp),
                    ("isForce", &args.force),
                    ("queueId", &-1),
                ],
            ),
        )
        .await?;
    let offsets = bodies::reset_offsets(&answer.body)?;
    if offsets.is_empty() {
        return Err(not_found(format!(
            "group {} has no offsets on topic {} at {broker}",
            args.group, args.topic
        )));
    }
    Ok(offsets)
}

/// GET_EARLIEST_MSG_STORETIME of one queue. The reset has happened by now: a queue whose
/// oldest time cannot be read is reported as unknown (-1), not as a failed command.
async fn earliest_store_time(ctx: &Ctx, broker: SocketAddr, topic: &str, queue_id: i32) -> i64 {
    let answer = ctx
        .wire
        .call_ok(
            broker,
            command(
                request::GET_EARLIEST_MSG_STORETIME,
                &[("topic", &topic), ("queueId", &queue_id)],
            ),
        )
        .await;
    match answer {
        Ok(answer) => answer
            .opt_str("timestamp")
            .and_then(|t| t.parse::<i64>().ok())
            .unwrap_or(-1),
        Err(error) => {
            tracing::warn!(%error, queue = queue_id, "no oldest store time");
            -1
        }
    }
}
