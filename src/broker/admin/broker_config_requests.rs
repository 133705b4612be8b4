//! The broker's settings over the wire: GET_BROKER_CONFIG (26, `mqadmin getBrokerConfig`)
//! and UPDATE_BROKER_CONFIG (25, `mqadmin updateBrokerConfig`), over the node's
//! [`crate::broker::state::live_settings::LiveSettings`].
//!
//! GET_BROKER_CONFIG answers, as Java does, every setting as Java properties text in the
//! body (`key=value` lines, UTF-8; here in the key table's order and the `broker.conf`
//! spelling of each key, ringmq's own keys included) and the settings' `DataVersion` as
//! JSON in the response header field `version`.
//!
//! UPDATE_BROKER_CONFIG takes properties text in the body. The keys that can change while
//! the node runs ([`crate::node_config::live::LIVE_KEYS`]) change at once on every shard
//! and SUCCESS is answered; a request naming any other key changes nothing and is refused
//! with NO_PERMISSION (16), the code Java refuses a key of its `configBlackList` with,
//! with a remark naming the key and why. A live key with a bad value is INVALID_PARAMETER
//! (29) naming the key (Java logs and ignores a value it cannot parse). No body changes
//! nothing and is SUCCESS, as in Java.

use crate::broker::state::live_settings::Refused;
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::Broker;

/// GET_BROKER_CONFIG (26).
pub fn get_broker_config(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let (text, version) = broker.settings.snapshot();
    let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
    answer.put_ext("version", version);
    answer.with_body(text.into_bytes())
}

/// UPDATE_BROKER_CONFIG (25).
pub fn update_broker_config(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let Ok(text) = std::str::from_utf8(&request.body) else {
        return RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some("string2Properties error: the body is not UTF-8".into()),
        );
    };
    match broker.settings.update(
        text,
        broker.now_ms(),
        &broker.topics,
        &broker.subscription_groups,
    ) {
        Ok(changed) => {
            if !changed.is_empty() {
                tracing::info!(?changed, "UPDATE_BROKER_CONFIG changed settings");
            }
            RemotingCommand::response_to(request, response::SUCCESS, None)
        }
        Err(Refused::NotLive { key, why }) => RemotingCommand::response_to(
            request,
            response::NO_PERMISSION,
            Some(format!(
                "Can not update config {}: {why}",
                crate::remoting::log_safe::log_safe(&key)
            )),
        ),
        Err(Refused::Invalid(why)) => {
            RemotingCommand::response_to(request, response::INVALID_PARAMETER, Some(why))
        }
    }
}
