//! The consumer group commands that change the broker's subscription groups (mqadmin
//! updateSubGroup, deleteSubGroup):
//!
//! - `group-create`, `group-update`: GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) says whether
//!   the group exists, then UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) with the whole
//!   `SubscriptionGroupConfig` as its JSON body. Create refuses an existing group (exit 2,
//!   after 201) and starts from RocketMQ's defaults (those of
//!   [`SubscriptionGroupConfig::new`]); update needs one (exit 1) and sends the entry
//!   the broker listed with the given fields changed, so fields this tool does not know
//!   (a Java broker's `groupRetryPolicy`, `attributes`, ...) are kept. `group-create
//!   --upsert` creates a missing group and brings an existing one's given fields up to
//!   date, sending 200 only if something differs (`"action"` is `created`, `updated` or
//!   `unchanged`).
//! - `group-delete`: 201, then DELETE_SUBSCRIPTIONGROUP (207) with the header `groupName`
//!   and `cleanOffset` (`--remove-offset`, mqadmin's `-r`: the group's committed offsets go
//!   too). An unknown group is not found (exit 1); a broker answers SUCCESS either way.
//!   The group's `%RETRY%` and `%DLQ%` topics stay (mqadmin deletes them only with `-c`);
//!   `topic-delete` removes them.
//!
//! The numbers are checked before any request, against the node's bounds: retry queues 1
//! to [`MAX_RETRY_QUEUE_NUMS`], retry max times 0 to [`MAX_RETRY_TIMES`]. With
//! `--cluster`, each master of the cluster in turn.

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::broker::tables::subscription_groups::{
    SubscriptionGroupConfig, MAX_RETRY_QUEUE_NUMS, MAX_RETRY_TIMES,
};
use crate::remoting::codes::request;

use super::super::args::{GroupCreateArgs, GroupDeleteArgs, GroupSettings, GroupUpdateArgs};
use super::super::bodies::{self, as_i64};
use super::super::error::{bad_input, not_found, AdminResult};
use super::super::output::{human, Output};
use super::super::wire::command;
use super::{check_group, Ctx};

/// Checks the numbers of `settings` (exit 2 before any request).
pub fn check_settings(settings: &GroupSettings) -> AdminResult<()> {
    if let Some(queues) = settings.retry_queues {
        if !(1..=i64::from(MAX_RETRY_QUEUE_NUMS)).contains(&queues) {
            return Err(bad_input(format!(
                "--retry-queues {queues} is out of range: 1 to {MAX_RETRY_QUEUE_NUMS}"
            )));
        }
    }
    if let Some(times) = settings.retry_max_times {
        if !(0..=i64::from(MAX_RETRY_TIMES)).contains(&times) {
            return Err(bad_input(format!(
                "--retry-max-times {times} is out of range: 0 to {MAX_RETRY_TIMES}"
            )));
        }
    }
    Ok(())
}

/// `config` (a `SubscriptionGroupConfig` as JSON) with the fields `settings` gives.
pub fn applied(settings: &GroupSettings, config: &Value) -> Value {
    let mut config = config.clone();
    if !config.is_object() {
        config = json!({});
    }
    let fields = [
        ("retryQueueNums", settings.retry_queues.map(Value::from)),
        ("retryMaxTimes", settings.retry_max_times.map(Value::from)),
        ("consumeEnable", settings.consume_enable.map(Value::from)),
        (
            "consumeBroadcastEnable",
            settings.broadcast_enable.map(Value::from),
        ),
        ("consumeMessageOrderly", settings.orderly.map(Value::from)),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            config[key] = value;
        }
    }
    config
}

/// Whether applying `settings` to `existing` changes a field: compared by value, so a
/// number the broker wrote as `1` and the `1` given are the same.
fn changes(settings: &GroupSettings, existing: &Value) -> bool {
    let bool_field = |key: &str| existing.get(key).and_then(Value::as_bool);
    let int_field = |key: &str| existing.get(key).and_then(as_i64);
    let differs_i = |given: Option<i64>, key| given.is_some_and(|v| int_field(key) != Some(v));
    let differs_b = |given: Option<bool>, key| given.is_some_and(|v| bool_field(key) != Some(v));
    differs_i(settings.retry_queues, "retryQueueNums")
        || differs_i(settings.retry_max_times, "retryMaxTimes")
        || differs_b(settings.consume_enable, "consumeEnable")
        || differs_b(settings.broadcast_enable, "consumeBroadcastEnable")
        || differs_b(settings.orderly, "consumeMessageOrderly")
}

/// A new group's config: RocketMQ's defaults with `settings` applied.
pub fn new_group(group: &str, settings: &GroupSettings) -> Value {
    let defaults = serde_json::to_value(SubscriptionGroupConfig::new(group))
        .expect("a SubscriptionGroupConfig serializes");
    applied(settings, &defaults)
}

/// The broker's entry for `group`, as JSON, if it lists one (201).
async fn find_group(ctx: &Ctx, broker: SocketAddr, group: &str) -> AdminResult<Option<Value>> {
    let answer = ctx
        .wire
        .call_ok(
            broker,
            command(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]),
        )
        .await?;
    let groups = bodies::subscription_groups(&answer.body)?;
    Ok(groups
        .into_iter()
        .find(|g| g.group_name == group)
        .map(|g| g.config))
}

async fn put_group(ctx: &Ctx, broker: SocketAddr, config: &Value) -> AdminResult<()> {
    let body = serde_json::to_vec(config).expect("a JSON value serializes");
    ctx.wire
        .call_ok(
            broker,
            command(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).with_body(body),
        )
        .await?;
    Ok(())
}

fn group_output(action: &str, broker: SocketAddr, group: &str, config: &Value) -> Output {
    let show = |key: &str| match config.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(value) => value.to_string(),
        None => "-".into(),
    };
    Output::new(
        json!({ "action": action, "group": config, "broker": broker.to_string() }),
        format!(
            "{action} group {} on {broker}: retry queues {}, retry max times {}, consume {}, \
             broadcast {}, orderly {}\n",
            human(group),
            show("retryQueueNums"),
            show("retryMaxTimes"),
            show("consumeEnable"),
            show("consumeBroadcastEnable"),
            show("consumeMessageOrderly"),
        ),
    )
}

pub async fn create(ctx: &Ctx, args: &GroupCreateArgs) -> AdminResult<Output> {
    check_group(&args.group)?;
    check_settings(&args.settings)?;
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        let output = match find_group(ctx, broker, &args.group).await? {
            None => {
                let config = new_group(&args.group, &args.settings);
                put_group(ctx, broker, &config).await?;
                group_output("created", broker, &args.group, &config)
            }
            Some(_) if !args.upsert => {
                return Err(bad_input(format!(
                    "group {} exists already on {broker}; group-update changes it (or \
                     group-create --upsert)",
                    args.group
                )))
            }
            Some(existing) if !changes(&args.settings, &existing) => {
                group_output("unchanged", broker, &args.group, &existing)
            }
            Some(existing) => {
                let config = applied(&args.settings, &existing);
                put_group(ctx, broker, &config).await?;
                group_output("updated", broker, &args.group, &config)
            }
        };
        outputs.push(output);
    }
    Ok(ctx.combine(outputs))
}

pub async fn update(ctx: &Ctx, args: &GroupUpdateArgs) -> AdminResult<Output> {
    check_group(&args.group)?;
    check_settings(&args.settings)?;
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        let existing = find_group(ctx, broker, &args.group).await?.ok_or_else(|| {
            not_found(format!(
                "group {} does not exist on {broker}; group-create makes it",
                args.group
            ))
        })?;
        let config = applied(&args.settings, &existing);
        put_group(ctx, broker, &config).await?;
        outputs.push(group_output("updated", broker, &args.group, &config));
    }
    Ok(ctx.combine(outputs))
}

pub async fn delete(ctx: &Ctx, args: &GroupDeleteArgs) -> AdminResult<Output> {
    check_group(&args.group)?;
    let remove_offset = args.remove_offset.unwrap_or(false);
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        if find_group(ctx, broker, &args.group).await?.is_none() {
            return Err(not_found(format!(
                "group {} does not exist on {broker}",
                args.group
            )));
        }
        ctx.wire
            .call_ok(
                broker,
                command(
                    request::DELETE_SUBSCRIPTIONGROUP,
                    &[("groupName", &args.group), ("cleanOffset", &remove_offset)],
                ),
            )
            .await?;
        let offsets = if remove_offset {
            " and its committed offsets"
        } else {
            ""
        };
        outputs.push(Output::new(
            json!({
                "action": "deleted",
                "group": args.group,
                "broker": broker.to_string(),
                "removeOffset": remove_offset,
            }),
            format!(
                "deleted group {}{offsets} from {broker}\n",
                human(&args.group)
            ),
        ));
    }
    Ok(ctx.combine(outputs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> GroupSettings {
        GroupSettings::default()
    }

    #[test]
    fn numbers_are_checked() {
        for (queues, ok) in [(0, false), (1, true), (64, true), (65, false), (-1, false)] {
            let s = GroupSettings {
                retry_queues: Some(queues),
                ..settings()
            };
            assert_eq!(check_settings(&s).is_ok(), ok, "{queues}");
        }
        for (times, ok) in [(-1, false), (0, true), (1000, true), (1001, false)] {
            let s = GroupSettings {
                retry_max_times: Some(times),
                ..settings()
            };
            assert_eq!(check_settings(&s).is_ok(), ok, "{times}");
        }
        let error = check_settings(&GroupSettings {
            retry_queues: Some(0),
            ..settings()
        })
        .unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("1 to 64"), "{error}");
    }

    #[test]
    fn a_new_group_has_rocketmq_defaults_and_the_fields_given() {
        let config = new_group(
            "G",
            &GroupSettings {
                retry_max_times: Some(3),
                orderly: Some(true),
                ..settings()
            },
        );
        assert_eq!(config["groupName"], "G");
        assert_eq!(config["retryMaxTimes"], 3);
        assert_eq!(config["retryQueueNums"], 1);
        assert_eq!(config["consumeEnable"], true);
        assert_eq!(config["consumeBroadcastEnable"], true);
        assert_eq!(config["consumeMessageOrderly"], true);
        assert_eq!(config["consumeFromMinEnable"], true);
        // What the node reads back is what was meant.
        let parsed: SubscriptionGroupConfig = serde_json::from_value(config).unwrap();
        assert_eq!(parsed.retry_max_times, 3);
        assert!(parsed.consume_message_orderly);
    }

    #[test]
    fn an_update_keeps_unknown_fields_and_says_whether_it_changes_anything() {
        let existing = json!({
            "groupName": "G", "retryMaxTimes": 16, "consumeEnable": true,
            "groupRetryPolicy": {"type": "CUSTOMIZED"}
        });
        let same = GroupSettings {
            retry_max_times: Some(16),
            consume_enable: Some(true),
            ..settings()
        };
        assert!(!changes(&same, &existing));
        assert!(!changes(&settings(), &existing));
        let other = GroupSettings {
            consume_enable: Some(false),
            ..settings()
        };
        assert!(changes(&other, &existing));
        let updated = applied(&other, &existing);
        assert_eq!(updated["consumeEnable"], false);
        assert_eq!(updated["retryMaxTimes"], 16);
        assert_eq!(updated["groupRetryPolicy"]["type"], "CUSTOMIZED");
        // A field the broker did not list differs from any value given.
        let orderly = GroupSettings {
            orderly: Some(false),
            ..settings()
        };
        assert!(changes(&orderly, &existing));
    }
}
