//! RINGMQ_GET_TIMER_PROGRESS (30000) and RINGMQ_TAKE_TIMER_PROGRESS (30001), ringmq-private:
//! how a slave's copy of its master's timer checkpoints travels (issue 25 item 4/7).
//!
//! ```text
//!   slave, shard 0 (node::metadata_sync, every slaveMetadataSyncInterval), per shard k:
//!     RINGMQ_GET_TIMER_PROGRESS shard=k ─▶ master, any shard ══ mailbox ══▶ master shard k
//!       ◀─ SUCCESS, body: shard k's TimerProgress as JSON (store::progress)
//!     RINGMQ_TAKE_TIMER_PROGRESS shard=k, marked, that body ══ mailbox ══▶ slave shard k:
//!       checked, clamped to the slave's timer queue, written if it changed (copy)
//!       ◀─ SUCCESS, WRITTEN = whether it wrote
//! ```
//!
//! Field [`SHARD`] names the shard; the dispatch routes both requests to it, so the shard
//! that answers is the one asked about, with its own store. What is refused, each with a
//! remark saying why: a shard the node does not have (INVALID_PARAMETER); the progress
//! asked of a slave (its checkpoint is a copy, not progress of its own) or of a node with
//! `timerWheelEnable` off (it runs no timers); a progress handed to a master, or brought
//! by a connection instead of the node's own shard 0 (the mark, [`SHARD_ONLY`], is removed
//! from every request a connection brings), or one that does not check out
//! ([`TimerProgress::parse`]): nothing is written then.

use crate::broker::requests::query::SHARD_ONLY;
use crate::broker::Broker;
use crate::remoting::codes::{request, response};
use crate::remoting::RemotingCommand;
use crate::store::replica::StoreRole;

use super::store::progress::TimerProgress;
use super::TIMER_TOPIC;

/// The shard asked about.
pub const SHARD: &str = "shard";
/// In RINGMQ_TAKE_TIMER_PROGRESS's answer: whether the checkpoint was written (it changed).
pub const WRITTEN: &str = "written";

/// The shard a timer-progress request names, if it is one of `shards`: the dispatch routes
/// it there. `None` for any other request, and for a shard the node does not have (then
/// answered where it arrived, saying so).
pub fn routed_shard(request: &RemotingCommand, shards: u8) -> Option<u8> {
    if !matches!(
        request.code,
        request::RINGMQ_GET_TIMER_PROGRESS | request::RINGMQ_TAKE_TIMER_PROGRESS
    ) {
        return None;
    }
    request
        .opt_str(SHARD)?
        .parse::<u8>()
        .ok()
        .filter(|&shard| shard < shards)
}

fn answer(request: &RemotingCommand, code: i32, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::response_to(request, code, Some(remark.into()))
}

/// The refusal of a request whose shard is not this one (it names no shard the node has:
/// a known one was routed here).
fn wrong_shard(broker: &Broker, request: &RemotingCommand) -> Option<RemotingCommand> {
    let shard = broker.shard();
    let asked = request.opt_str(SHARD).unwrap_or_default();
    if asked.parse::<u8>().ok() == Some(shard.id()) {
        return None;
    }
    Some(answer(
        request,
        response::INVALID_PARAMETER,
        format!(
            "{SHARD} '{asked}' is not a shard of this broker: it has {} (0 to {})",
            shard.count(),
            shard.count() - 1
        ),
    ))
}

fn is_slave(broker: &Broker) -> bool {
    broker.store().role() == StoreRole::Replica
}

/// RINGMQ_GET_TIMER_PROGRESS (30000): this shard's timer progress, for its slaves.
pub fn get_progress(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    if let Some(refused) = wrong_shard(broker, request) {
        return refused;
    }
    if is_slave(broker) {
        return answer(
            request,
            response::SYSTEM_ERROR,
            "this broker is a slave: its timer checkpoint is a copy of its master's; ask the \
             master",
        );
    }
    if !broker.config.timer_enabled {
        return answer(
            request,
            response::SYSTEM_ERROR,
            "timerWheelEnable is off on this broker: it runs no timers",
        );
    }
    let Some(timers) = broker.timers.get() else {
        return answer(
            request,
            response::SYSTEM_ERROR,
            format!("shard {} has no timer store", broker.shard().id()),
        );
    };
    let body = serde_json::to_vec(&timers.progress()).expect("a timer progress serializes");
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body)
}

/// RINGMQ_TAKE_TIMER_PROGRESS (30001): a slave shard writes its master's progress as its
/// timer store's checkpoint.
pub async fn take_progress(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    if request.opt_str(SHARD_ONLY) != Some("true") {
        return answer(
            request,
            response::NO_PERMISSION,
            "RINGMQ_TAKE_TIMER_PROGRESS is internal to a slave node: its shard 0 sends it",
        );
    }
    if let Some(refused) = wrong_shard(broker, request) {
        return refused;
    }
    if !is_slave(broker) {
        return answer(
            request,
            response::SYSTEM_ERROR,
            "this broker is a master: its timer store is its own",
        );
    }
    let Some(timers) = broker.timers.get() else {
        return answer(
            request,
            response::SYSTEM_ERROR,
            format!("shard {} has no timer store", broker.shard().id()),
        );
    };
    let progress = match TimerProgress::parse(&request.body) {
        Ok(progress) => progress,
        Err(why) => return answer(request, response::SYSTEM_ERROR, why.to_string()),
    };
    let queue_end = broker.store().max_offset(TIMER_TOPIC, timers.queue);
    match timers.take_copy(progress, queue_end).await {
        Ok(written) => {
            let mut ok = RemotingCommand::response_to(request, response::SUCCESS, None);
            ok.put_ext(WRITTEN, written);
            ok
        }
        Err(why) => answer(request, response::SYSTEM_ERROR, why.to_string()),
    }
}
