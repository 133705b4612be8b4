//! The subscription-group admin requests, over [`crate::broker::tables::subscription_groups`]:
//!
//! - UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): body a `SubscriptionGroupConfig` JSON;
//!   creates or replaces the group and answers SUCCESS once the file holds it (written
//!   off the reactor, [`crate::broker::tables::subscription_groups`]). A body
//!   that does not parse or that [`check_config`] refuses is SYSTEM_ERROR naming why.
//! - GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): body the table as the file holds it
//!   (`SubscriptionGroupWrapper`).
//! - DELETE_SUBSCRIPTIONGROUP (207): header `groupName` (and Java's `cleanOffset`: with
//!   `true` the group's committed offsets go too); SUCCESS whether or not the group
//!   existed, as Java answers.

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::tables::subscription_groups::{check_config, SubscriptionGroupConfig};
use crate::broker::{bad_header, naming::names, Broker};

fn failed(request: &RemotingCommand, why: String) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
}

pub async fn update_and_create(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let config: SubscriptionGroupConfig = match serde_json::from_slice(&request.body) {
        Ok(config) => config,
        Err(error) => {
            return failed(
                request,
                format!("bad SubscriptionGroupConfig body: {error}"),
            )
        }
    };
    if let Err(why) = check_config(&config) {
        return failed(request, format!("bad SubscriptionGroupConfig: {why}"));
    }
    let group = config.group_name.clone();
    // Answered once the file holds it; written off the reactor.
    match broker
        .subscription_groups
        .put_durable(config, broker.now_ms())
        .await
    {
        Ok(()) => {
            tracing::info!(group = %crate::remoting::log_safe::log_safe(&group), "subscription group updated");
            RemotingCommand::response_to(request, response::SUCCESS, None)
        }
        Err(error) => failed(
            request,
            format!("cannot persist subscription group {group}: {error}"),
        ),
    }
}

pub fn get_all(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(broker.subscription_groups.to_json().into_bytes())
}

pub async fn delete(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let group = match request.get_str("groupName") {
        Ok(group) => group,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_group(group) {
        return bad_header(request, why);
    }
    let clean_offsets = match request.opt_bool("cleanOffset") {
        Ok(clean) => clean.unwrap_or(false),
        Err(error) => return bad_header(request, error),
    };
    if let Err(error) = broker
        .subscription_groups
        .remove_durable(group, broker.now_ms())
        .await
    {
        return failed(
            request,
            format!("cannot persist the removal of {group}: {error}"),
        );
    }
    if clean_offsets {
        broker.consumer_offsets.remove_group(group);
    }
    RemotingCommand::response_to(request, response::SUCCESS, None)
}
