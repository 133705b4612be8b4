//! The topic commands:
//!
//! - `topics` (mqadmin topicList): GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) on the name
//!   server; with `--broker`, or when the name server does not support 206, the broker's
//!   GET_ALL_TOPIC_CONFIG (21), which also gives each topic's queues and permissions.
//! - `topic-create`, `topic-update` (mqadmin updateTopic): UPDATE_AND_CREATE_TOPIC (17),
//!   after 21 says whether the topic exists (create refuses an existing one, exit 2
//!   after that one request; update needs one, exit 1, and keeps what is not given).
//!   `topic-create --upsert` creates a missing topic and brings an existing one's given
//!   settings up to date, sending 17 only if something differs (`"action"` is `created`,
//!   `updated` or `unchanged`). `--perm` is 2, 4 or 6 ([`check_perm`]), checked before
//!   any request. With `--cluster`, each master of the cluster in turn (mqadmin's `-c`).
//! - `topic-delete` (mqadmin deleteTopic): DELETE_TOPIC_IN_BROKER (215) of a topic 21
//!   lists, on each target; then, when the name server named the targets (not `--broker`,
//!   not the default broker it could not name), DELETE_TOPIC_IN_NAMESRV (216) on every name
//!   server of `--namesrv`, which keep a topic's route until told.
//! - `topic-route` (mqadmin topicRoute): GET_ROUTEINFO_BY_TOPIC (105) on the name server,
//!   for a topic the topic list (206, else 21) names: an unknown topic is not found, and
//!   the route query cannot create it (ringmq's name server auto-creates on a route query
//!   when `autoCreateTopicEnable` is on).
//! - `topic-status` (mqadmin topicStatus): GET_TOPIC_STATS_INFO (202).

use serde_json::json;

use std::net::SocketAddr;

use crate::broker::tables::topics::{MAX_QUEUE_NUMS, PERM_READ_WRITE};
use crate::remoting::codes::{request, response};

use super::super::args::{TopicCreateArgs, TopicUpdateArgs};
use super::super::bodies::{self, TopicConfig};
use super::super::error::{bad_input, node_error, not_found, AdminResult};
use super::super::output::{human, Output, Table};
use super::super::time::format_utc;
use super::super::wire::{command, refusal, Role};
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

/// The permissions a user may give a topic: RocketMQ's PermName bits 2 (write) and 4
/// (read). 1 (inherit) and 8 (priority) are the broker's own, and a topic neither
/// readable nor writable (0, 1, 8, 9, ...) is of no use, so only 2, 4 and 6 are taken.
pub const USER_PERMS: [i64; 3] = [2, 4, 6];

pub fn check_perm(perm: i64) -> AdminResult<()> {
    if !USER_PERMS.contains(&perm) {
        let why = if perm & 6 == 0 {
            "a topic that can be neither read nor written"
        } else {
            "not a permission a topic is given"
        };
        return Err(bad_input(format!(
            "--perm {perm}: {why}; the permission is 2 (write only), 4 (read only) or 6 (read \
             and write)"
        )));
    }
    Ok(())
}

/// Every topic's name, and where the list came from: the name server's topic list (206)
/// unless `--broker` is given or the name server does not support it, else the broker's
/// table (21), whose entries come along.
async fn topic_names(ctx: &Ctx) -> AdminResult<(&'static str, Vec<String>, Vec<TopicConfig>)> {
    if !ctx.broker_given() {
        let namesrv = ctx.namesrv().await?;
        let answer = ctx
            .wire
            .call(
                namesrv,
                command(request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[]),
            )
            .await?;
        match answer.code {
            response::SUCCESS => {
                let topics = bodies::topic_list(&answer.body)?;
                return Ok(("namesrv", topics, Vec::new()));
            }
            // A name server without 206 (then the broker's table is read), or a broker
            // given as the name server (then that is said).
            response::REQUEST_CODE_NOT_SUPPORTED => {
                if let Some(error) = ctx.wire.wrong_role(namesrv, Role::NameServer).await {
                    return Err(error);
                }
            }
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

async fn put_topic(ctx: &Ctx, broker: SocketAddr, config: &TopicConfig) -> AdminResult<()> {
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

fn config_output(action: &str, broker: SocketAddr, config: &TopicConfig) -> Output {
    Output::new(
        json!({ "action": action, "topic": config, "broker": broker.to_string() }),
        format!(
            "{action} topic {} on {broker}: {} read queues, {} write queues, perm {} ({}), order {}\n",
            human(&config.topic_name),
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
            perm_text(config.perm),
            config.order
        ),
    )
}

/// The settings given on the command line, checked; `None` for those not given.
struct TopicSettings {
    read_queues: Option<i64>,
    write_queues: Option<i64>,
    perm: Option<i64>,
    order: Option<bool>,
}

impl TopicSettings {
    fn checked(
        read_queues: Option<i64>,
        write_queues: Option<i64>,
        perm: Option<i64>,
        order: Option<bool>,
    ) -> AdminResult<TopicSettings> {
        if let Some(read) = read_queues {
            check_queues("read-queues", read)?;
        }
        if let Some(write) = write_queues {
            check_queues("write-queues", write)?;
        }
        if let Some(perm) = perm {
            check_perm(perm)?;
        }
        Ok(TopicSettings {
            read_queues,
            write_queues,
            perm,
            order,
        })
    }

    /// `config` with the settings given.
    fn applied(&self, config: &TopicConfig) -> TopicConfig {
        let mut config = config.clone();
        config.read_queue_nums = self.read_queues.unwrap_or(config.read_queue_nums);
        config.write_queue_nums = self.write_queues.unwrap_or(config.write_queue_nums);
        config.perm = self.perm.unwrap_or(config.perm);
        config.order = self.order.unwrap_or(config.order);
        config
    }
}

/// A new topic's settings before the ones given: RocketMQ's defaults.
fn new_topic(topic: &str) -> TopicConfig {
    TopicConfig {
        topic_name: topic.to_owned(),
        read_queue_nums: 8,
        write_queue_nums: 8,
        perm: i64::from(PERM_READ_WRITE),
        topic_filter_type: "SINGLE_TAG".into(),
        topic_sys_flag: 0,
        order: false,
    }
}

pub async fn create(ctx: &Ctx, args: &TopicCreateArgs) -> AdminResult<Output> {
    check_topic(&args.topic)?;
    let settings =
        TopicSettings::checked(args.read_queues, args.write_queues, args.perm, args.order)?;
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        let existing = ctx.topic_table(broker).await?.remove(&args.topic);
        let output = match existing {
            None => {
                let config = settings.applied(&new_topic(&args.topic));
                put_topic(ctx, broker, &config).await?;
                config_output("created", broker, &config)
            }
            Some(_) if !args.upsert => {
                return Err(bad_input(format!(
                    "topic {} exists already on {broker}; topic-update changes it (or \
                     topic-create --upsert)",
                    args.topic
                )))
            }
            Some(existing) => {
                let config = settings.applied(&existing);
                if config == existing {
                    config_output("unchanged", broker, &config)
                } else {
                    put_topic(ctx, broker, &config).await?;
                    config_output("updated", broker, &config)
                }
            }
        };
        outputs.push(output);
    }
    Ok(ctx.combine(outputs))
}

pub async fn update(ctx: &Ctx, args: &TopicUpdateArgs) -> AdminResult<Output> {
    check_topic(&args.topic)?;
    let settings =
        TopicSettings::checked(args.read_queues, args.write_queues, args.perm, args.order)?;
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        let config = settings.applied(&ctx.require_topic(broker, &args.topic).await?);
        put_topic(ctx, broker, &config).await?;
        outputs.push(config_output("updated", broker, &config));
    }
    Ok(ctx.combine(outputs))
}

pub async fn delete(ctx: &Ctx, topic: &str) -> AdminResult<Output> {
    check_topic(topic)?;
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        ctx.require_topic(broker, topic).await?;
        ctx.wire
            .call_ok(
                broker,
                command(request::DELETE_TOPIC_IN_BROKER, &[("topic", &topic)]),
            )
            .await?;
        outputs.push(Output::new(
            json!({ "action": "deleted", "topic": topic, "broker": broker.to_string() }),
            format!("deleted topic {topic} from {broker}\n"),
        ));
    }
    let mut output = ctx.combine(outputs);
    if !ctx.broker_given() && !ctx.broker_fell_back() {
        let told = delete_in_name_servers(ctx, topic).await?;
        for namesrv in &told {
            output.text.push_str(&format!(
                "deleted topic {topic} from name server {namesrv}\n"
            ));
        }
        let told: Vec<String> = told.iter().map(SocketAddr::to_string).collect();
        output.json["namesrvs"] = json!(told);
    }
    Ok(output)
}

/// DELETE_TOPIC_IN_NAMESRV (216) on every name server of `--namesrv` (mqadmin's
/// deleteTopic does the same), with `clusterName` under `--cluster`; returns those told.
/// A name server keeps a topic a master stopped listing routed
/// (`deleteTopicWithBrokerRegistration=false`, the default), so the brokers' delete alone
/// would leave clients a route to nothing. Sent after the brokers' deletes; a name server
/// that does not confirm is an error naming it.
async fn delete_in_name_servers(ctx: &Ctx, topic: &str) -> AdminResult<Vec<SocketAddr>> {
    let namesrvs = ctx.namesrv_addrs()?;
    for &namesrv in &namesrvs {
        let mut fields: Vec<(&str, &dyn std::fmt::Display)> = vec![("topic", &topic)];
        let cluster = ctx.cluster();
        if let Some(cluster) = &cluster {
            fields.push(("clusterName", cluster));
        }
        ctx.wire
            .call_ok(namesrv, command(request::DELETE_TOPIC_IN_NAMESRV, &fields))
            .await
            .map_err(|error| {
                node_error(format!(
                    "topic {topic} was deleted from the brokers, but name server {namesrv} \
                     did not delete its route: {error}"
                ))
            })?;
    }
    Ok(namesrvs)
}

pub async fn route(ctx: &Ctx, topic: &str) -> AdminResult<Output> {
    check_topic(topic)?;
    // Asked first: a route query for an unknown topic creates it on a node with
    // `autoCreateTopicEnable`, and looking must not create anything.
    if !topic_names(ctx).await?.1.iter().any(|t| t == topic) {
        return Err(not_found(format!("topic {topic} does not exist")));
    }
    let namesrv = ctx.namesrv().await?;
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
    let route = bodies::topic_route(&answer.body)?;
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
    let queues = bodies::topic_stats(&answer.body)?;
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
        for bad in [-1, 0, 1, 3, 5, 7, 8, 9, 14, 15, 16] {
            assert!(check_perm(bad).is_err(), "{bad}");
        }
        for good in [2, 4, 6] {
            assert!(check_perm(good).is_ok(), "{good}");
        }
        let nine = check_perm(9).unwrap_err().to_string();
        assert!(nine.contains("neither read nor written"), "{nine}");
        assert!(
            nine.contains("2 (write only), 4 (read only) or 6"),
            "{nine}"
        );
        assert_eq!(check_perm(9).unwrap_err().exit_code(), 2);
    }
}
