//! The topic admin requests on the broker port (reference §9.15):
//!
//! - UPDATE_AND_CREATE_TOPIC (17): header `topic`, `readQueueNums`, `writeQueueNums`,
//!   `perm`, `topicFilterType`, optional `topicSysFlag`, `order`; creates or replaces the
//!   topic and persists the table before answering SUCCESS.
//! - GET_ALL_TOPIC_CONFIG (21): body = the `topics.json` JSON,
//!   `{"topicConfigTable":{...},"dataVersion":{...}}`.
//! - DELETE_TOPIC_IN_BROKER (215): header `topic`; removes it from the table.
//!
//! Invariants: SUCCESS is answered only once the table is on disk; a topic is stored only
//! if it passes [`check_config`], the check the table's load applies; a system topic
//! ([`is_reserved_topic`]: `TBW102`, `SCHEDULE_TOPIC_XXXX`, the `rmq_sys_` ones the timer
//! wheel and the POP revive log live in) is never created, changed or deleted by a
//! request, as in RocketMQ 5: SYSTEM_ERROR "The topic[..] is conflict with system topic.".
//! Changing one would reroute or drop what the node itself stored there (delayed, timed
//! and POP state).

use crate::broker::naming::names::{is_reserved_topic, reserved_topic_remark, validate_topic};
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::tables::topics::{check_config, TopicConfig, PERM_READ_WRITE};
use crate::broker::{bad_header, Broker};

pub use crate::broker::tables::topics::MAX_QUEUE_NUMS;

fn invalid(request: &RemotingCommand, remark: String) -> RemotingCommand {
    RemotingCommand::response_to(request, response::INVALID_PARAMETER, Some(remark))
}

/// SYSTEM_ERROR with RocketMQ's remark, if `topic` is a system topic.
fn refuse_reserved(request: &RemotingCommand, topic: &str) -> Option<RemotingCommand> {
    is_reserved_topic(topic).then(|| {
        RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(reserved_topic_remark(topic)),
        )
    })
}

fn queue_nums(request: &RemotingCommand, field: &'static str) -> Result<u32, QueueNumsError> {
    let value = request.get_i32(field)?;
    if value < 1 || value as u32 > MAX_QUEUE_NUMS {
        return Err(QueueNumsError::OutOfRange { field, value });
    }
    Ok(value as u32)
}

/// Why a queue count field is refused.
#[derive(Debug, thiserror::Error)]
enum QueueNumsError {
    #[error(transparent)]
    Field(#[from] crate::remoting::FieldError),
    #[error("{field} {value} is out of range: 1 to {MAX_QUEUE_NUMS}")]
    OutOfRange { field: &'static str, value: i32 },
}

/// UPDATE_AND_CREATE_TOPIC (17).
pub async fn update_and_create(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let topic = match request.get_str("topic") {
        Ok(topic) => topic,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = validate_topic(topic) {
        // Java answers SYSTEM_ERROR with the validator's remark here.
        return RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("the topic name is illegal: {why}")),
        );
    }
    if let Some(refused) = refuse_reserved(request, topic) {
        return refused;
    }
    let (read, write) = match (
        queue_nums(request, "readQueueNums"),
        queue_nums(request, "writeQueueNums"),
    ) {
        (Ok(read), Ok(write)) => (read, write),
        (Err(why), _) | (_, Err(why)) => return invalid(request, why.to_string()),
    };
    let mut config = TopicConfig::new(topic, read);
    config.write_queue_nums = write;
    let optional = (|| -> Result<(), crate::remoting::FieldError> {
        config.perm = request.opt_i32("perm")?.unwrap_or(PERM_READ_WRITE);
        config.topic_sys_flag = request.opt_i32("topicSysFlag")?.unwrap_or(0);
        config.order = request.opt_bool("order")?.unwrap_or(false);
        Ok(())
    })();
    if let Err(error) = optional {
        return bad_header(request, error);
    }
    if let Some(filter) = request.opt_str("topicFilterType") {
        if filter != "SINGLE_TAG" && filter != "MULTI_TAG" {
            return invalid(
                request,
                format!("topicFilterType {filter:?}: expected SINGLE_TAG or MULTI_TAG"),
            );
        }
        config.topic_filter_type = filter.to_owned();
    }
    // The rules loading applies, so the node never writes a table it would refuse to start on.
    if let Err(why) = check_config(&config) {
        return invalid(request, why.to_string());
    }
    match broker.topics.put_written(config, broker.now_ms()).await {
        Ok(()) => RemotingCommand::response_to(request, response::SUCCESS, None),
        Err(error) => RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("cannot persist the topic table: {error}")),
        ),
    }
}

/// GET_ALL_TOPIC_CONFIG (21).
pub fn get_all(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(broker.topics.to_json().into_bytes())
}

/// DELETE_TOPIC_IN_BROKER (215). Only the table entry goes: the topic's messages stay in
/// the CommitLog and its ConsumeQueues until retention removes them, as in Java (which
/// also deletes the ConsumeQueue files; ringmq leaves that to retention for now).
/// Deleting an unknown topic succeeds, as in Java.
pub async fn delete(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let topic = match request.get_str("topic") {
        Ok(topic) => topic,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = validate_topic(topic) {
        // No such name can be in the table; refused as UPDATE_AND_CREATE_TOPIC refuses it.
        return RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("the topic name is illegal: {why}")),
        );
    }
    if let Some(refused) = refuse_reserved(request, topic) {
        return refused;
    }
    match broker.topics.remove_written(topic, broker.now_ms()).await {
        Ok(_) => RemotingCommand::response_to(request, response::SUCCESS, None),
        Err(error) => RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("cannot persist the topic table: {error}")),
        ),
    }
}
