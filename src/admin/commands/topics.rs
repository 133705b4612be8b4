//! The topic commands:
//!
//! - `topics` (mqadmin topicList): GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) on the name
//!   server; with `--broker`, or when the name server does not support 206, the broker's
//!   GET_ALL_TOPIC_CONFIG (21), which also gives each topic's queues and permissions.
//! - `topic-create`, `topic-update` (mqadmin updateTopic): UPDATE_AND_CREATE_TOPIC (17),
//!   after 21 says whether the topic exists (create refuses an existing one, exit 2
//!   after that one request, the only exit 2 that needs the node;
//!   update needs one, exit 1, and keeps what is not given).
//! - `topic-delete` (mqadmin deleteTopic): DELETE_TOPIC_IN_BROKER (215) of a topic 21
//!   lists (the node's name server reads the same table, so there is no second delete;
//!   DELETE_TOPIC_IN_NAMESRV, 216, is not sent, so a Java name server is not told).
//! - `topic-route` (mqadmin topicRoute): GET_ROUTEINFO_BY_TOPIC (105) on the name server,
//!   for a topic the topic list (206, else 21) names: an unknown topic is not found, and
//!   the route query cannot create it (ringmq's name server auto-creates on a route query
//!   when `autoCreateTopicEnable` is on).
//! - `topic-status` (mqadmin topicStatus): GET_TOPIC_STATS_INFO (202).

use serde_json::json;

use crate::broker::topics::{MAX_QUEUE_NUMS, PERM_ALL};
use crate::remoting::codes::{request, response};

use super::super::args::{TopicCreateArgs, TopicUpdateArgs};
use super::super::bodies::{self, TopicConfig};
use super::super::error::{bad_input, node_error, not_found, AdminResult};
use super::super::output::{human, Output, Table};
use super::super::time::format_utc;
use super::super::wire::{command, refusal};
use super::{check_topic, Ctx};

/// The topic the default-topic field of UPDATE_AND_CREATE_TOPIC names, as mqadmin sends it.
const DEFAULT_TOPIC: &str = "TBW102";

/// `perm` as RocketMQ writes it: `RW`, `R-`, `-W`, `--`.
pub fn perm_text(perm: i64) -> String {
    let read = if perm & 4 != 0 { 'R' } else { '-' };
    let write = if perm & 2 != 0 { 'W' } else { '-' };
    format!("{read}{write}")
}

fn check_queues(field: &str, value: i64) -> AdminResult<()> {
    if !(1..=i64::from(MAX_QUEUE_NUMS)).contains(&value) {
        return Err(bad_input(format!(
            "--{field} {value} is out of range: 1 to {MAX_QUEUE_NUMS}"
        )));
    }
    Ok(())
}

fn check_perm(perm: i64) -> AdminResult<()> {
    if !(0..=i64::from(PERM_ALL)).contains(&perm) {
        return Err(bad_input(format!(
            "--perm {perm}: expected bits of 2 (write), 4 (read), 8, 1: 0 to 15"
        )));
    }
    Ok(())
}

/// Every topic's name, and where the list came from: the name server's topic list (206)
/// unless `--broker` is given or the name server does not support it, else the broker's
/// table (21), whose entries come along.
async fn topic_names(ctx: &Ctx) -> AdminResult<(&'static str, Vec<String>, Vec<TopicConfig>)> {
    if !ctx.broker_given() {
        let namesrv = ctx.namesrv()?;
        let answer = ctx
            .wire
            .call(
                namesrv,
                command(request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[]),
            )
            .await?;
        match answer.code {
            response::SUCCESS => {
                let topics = bodies::topic_list(&answer.body).map_err(node_error)?;
                return Ok(("namesrv", topics, Vec::new()));
            }
            response::REQUEST_CODE_NOT_SUPPORTED => {}
            _ => {
                return Err(refusal(
                    request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                    namesrv,
                    &answer,
                ))
            }
        }
    }
    let broker = ctx.broker().await?;
    let table = ctx.topic_table(broker).await?;
    Ok((
        "broker",
        table.keys().cloned().collect(),
        table.into_values().collect(),
    ))
}

pub async fn list(ctx: &Ctx) -> AdminResult<Output> {
    let (source, topics, configs) = topic_names(ctx).await?;
    let text = if configs.is_empty() {
        topics.iter().map(|t| format!("{}\n", human(t))).collect()
    } else {
        let mut table = Table::new(&["topic", "#read queues", "#write queues", "perm", "order"]);
        for config in &configs {
            table.row(vec![
                config.topic_name.clone(),
                config.read_queue_nums.to_string(),
                config.write_queue_nums.to_string(),
                perm_text(config.perm),
                config.order.to_string(),
            ]);
        }
        table.render()
    };
    let mut json = json!({ "source": source, "topics": topics });
    if source == "broker" {
        json["configs"] = json!(configs);
    }
    Ok(Output::new(json, text))
}

async fn put_topic(ctx: &Ctx, config: &TopicConfig) -> AdminResult<()> {
    let broker = ctx.broker().await?;
    ctx.wire
        .call_ok(
            broker,
            command(
                request::UPDATE_AND_CREATE_TOPIC,
                &[
                    ("topic", &config.topic_name),
                    ("defaultTopic", &DEFAULT_TOPIC),
                    ("readQueueNums", &config.read_queue_nums),
                    ("writeQueueNums", &config.write_queue_nums),
                    ("perm", &config.perm),
                    ("topicFilterType", &config.topic_filter_type),
                    ("topicSysFlag", &config.topic_sys_flag),
                    ("order", &config.order),
                ],
            ),
        )
        .await?;
    Ok(())
}

fn config_output(action: &str, config: &TopicConfig) -> Output {
    Output::new(
        json!({ "action": action, "topic": config }),
        format!(
            "{action} topic {}: {} read queues, {} write queues, perm {} ({}), order {}\n",
            human(&config.topic_name),
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
            perm_text(config.perm),
            config.order
        ),
    )
}

pub async fn create(ctx: &Ctx, args: &TopicCreateArgs) -> AdminResult<Output> {
    check_topic(&args.topic)?;
    check_queues("read-queues", args.read_queues)?;
    check_queues("write-queues", args.write_queues)?;
    check_perm(args.perm)?;
    let broker = ctx.broker().await?;
    if ctx.topic_table(broker).await?.contains_key(&args.topic) {
        return Err(bad_input(format!(
            "topic {} exists already on {broker}; topic-update changes it",
            args.topic
        )));
    }
    let config = TopicConfig {
        topic_name: args.topic.clone(),
        read_queue_nums: args.read_queues,
        write_queue_nums: args.write_queues,
        perm: args.perm,
        topic_filter_type: "SINGLE_TAG".into(),
        topic_sys_flag: 0,
        order: args.order,
    };
    put_topic(ctx, &config).await?;
    Ok(config_output("created", &config))
}

pub async fn update(ctx: &Ctx, args: &TopicUpdateArgs) -> AdminResult<Output> {
    check_topic(&args.topic)?;
    if let Some(read) = args.read_queues {
        check_queues("read-queues", read)?;
    }
    if let Some(write) = args.write_queues {
        check_queues("write-queues", write)?;
    }
    if let Some(perm) = args.perm {
        check_perm(perm)?;
    }
    let broker = ctx.broker().await?;
    let mut config = ctx.require_topic(broker, &args.topic).await?;
    config.read_queue_nums = args.read_queues.unwrap_or(config.read_queue_nums);
    config.write_queue_nums = args.write_queues.unwrap_or(config.write_queue_nums);
    config.perm = args.perm.unwrap_or(config.perm);
    config.order = args.order.unwrap_or(config.order);
    put_topic(ctx, &config).await?;
    Ok(config_output("updated", &config))
}

pub async fn delete(ctx: &Ctx, topic: &str) -> AdminResult<Output> {
    check_topic(topic)?;
    let broker = ctx.broker().await?;
    ctx.require_topic(broker, topic).await?;
    ctx.wire
        .call_ok(
            broker,
            command(request::DELETE_TOPIC_IN_BROKER, &[("topic", &topic)]),
        )
        .await?;
    Ok(Output::new(
        json!({ "action": "deleted", "topic": topic, "broker": broker.to_string() }),
        format!("deleted topic {topic} from {broker}\n"),
    ))
}

pub async fn route(ctx: &Ctx, topic: &str) -> AdminResult<Output> {
    check_topic(topic)?;
    // Asked first: a route query for an unknown topic creates it on a node with
    // `autoCreateTopicEnable`, and looking must not create anything.
    if !topic_names(ctx).await?.1.iter().any(|t| t == topic) {
        return Err(not_found(format!("topic {topic} does not exist")));
    }
    let namesrv = ctx.namesrv()?;
    let answer = ctx
        .wire
        .call_ok(
            namesrv,
            command(
                request::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", &topic), ("acceptStandardJsonOnly", &true)],
            ),
        )
        .await?;
    let route = bodies::topic_route(&answer.body).map_err(node_error)?;
    let mut brokers = Table::new(&["broker", "cluster", "#id", "addr"]);
    for broker in &route.broker_datas {
        for (id, addr) in &broker.broker_addrs {
            brokers.row(vec![
                broker.broker_name.clone(),
                broker.cluster.clone(),
                id.to_string(),
                addr.clone(),
            ]);
        }
    }
    let mut queues = Table::new(&["broker", "#read queues", "#write queues", "perm"]);
    for queue in &route.queue_datas {
        queues.row(vec![
            queue.broker_name.clone(),
            queue.read_queue_nums.to_string(),
            queue.write_queue_nums.to_string(),
            perm_text(queue.perm),
        ]);
    }
    Ok(Output::new(
        json!({ "topic": topic, "route": route }),
        format!("{}\n{}", brokers.render(), queues.render()),
    ))
}

pub async fn status(ctx: &Ctx, topic: &str) -> AdminResult<Output> {
    check_topic(topic)?;
    let broker = ctx.broker().await?;
    let answer = ctx
        .wire
        .call_ok(
            broker,
            command(request::GET_TOPIC_STATS_INFO, &[("topic", &topic)]),
        )
        .await?;
    let queues = bodies::topic_stats(&answer.body).map_err(node_error)?;
    let mut table = Table::new(&[
        "broker",
        "#queue",
        "#min offset",
        "#max offset",
        "last update (UTC)",
    ]);
    for queue in &queues {
        table.row(vec![
            queue.queue.broker_name.clone(),
            queue.queue.queue_id.to_string(),
            queue.min_offset.to_string(),
            queue.max_offset.to_string(),
            format_utc(queue.last_update_timestamp),
        ]);
    }
    let messages = bodies::messages_held(&queues);
    let text = format!(
        "{}{} queues, {messages} messages between their min and max offsets\n",
        table.render(),
        queues.len()
    );
    Ok(Output::new(
        json!({ "topic": topic, "queues": queues }),
        text,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perms_and_ranges() {
        assert_eq!(perm_text(6), "RW");
        assert_eq!(perm_text(4), "R-");
        assert_eq!(perm_text(2), "-W");
        assert_eq!(perm_text(0), "--");
        assert!(check_queues("read-queues", 0).is_err());
        assert!(check_queues("read-queues", 1025).is_err());
        assert!(check_queues("read-queues", 1024).is_ok());
        assert!(check_perm(16).is_err());
        assert!(check_perm(-1).is_err());
        assert!(check_perm(6).is_ok());
    }
}
