//! The timer part of a slave's round ([`super::metadata_sync`], issue 25 item 4/7): for
//! each shard k, the master's shard k's timer progress (RINGMQ_GET_TIMER_PROGRESS, 30000)
//! handed to this node's shard k (RINGMQ_TAKE_TIMER_PROGRESS, 30001), which checks it and
//! writes it as its own timer store's checkpoint when it changed
//! ([`crate::broker::timer::progress_requests`], [`crate::broker::timer::copy`]). Shard k's
//! store, queue and files are shard k's, so the write is made there, not here.
//!
//! A RocketMQ master answers REQUEST_CODE_NOT_SUPPORTED (its timing wheel's checkpoint
//! would mean nothing to this store): the copy is skipped for the round, said once at INFO
//! while it lasts, and the other tables are copied all the same. Any other refusal (a
//! master with `timerWheelEnable` off, a progress that does not check out, a write that
//! failed) leaves that shard's last copy as it is and the other shards go on; it is said
//! once at WARN until every shard copies again. A failed request (the connection) fails the
//! round, as for every table.

use std::cell::Cell;
use std::net::SocketAddr;

use compact_str::ToCompactString;

use crate::broker::requests::query::SHARD_ONLY;
use crate::broker::timer::progress_requests::{SHARD, WRITTEN};
use crate::broker::Broker;
use crate::client::Client;
use crate::remoting::codes::{request, response};
use crate::remoting::{ExtFields, RemotingCommand};

/// What the timer part of one round came to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum TimerOutcome {
    /// Every shard's copy is current; `written` of them changed.
    Copied { written: usize },
    /// The master does not serve RINGMQ_GET_TIMER_PROGRESS.
    NotServed,
    /// Some shards' copies were not taken, each with why; the others were.
    Refused(Vec<String>),
}

/// The state the log follows, so each is said when it begins, not every round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Copying,
    NotServed,
    Refused,
}

/// What was said last of the timer copy.
#[derive(Default)]
pub(super) struct TimerCopyLog {
    state: Cell<Option<State>>,
}

impl TimerCopyLog {
    /// Logs `outcome` if its state differs from the last round's; whether it did.
    pub fn note(&self, master: SocketAddr, outcome: &TimerOutcome) -> bool {
        let state = match outcome {
            TimerOutcome::Copied { .. } => State::Copying,
            TimerOutcome::NotServed => State::NotServed,
            TimerOutcome::Refused(_) => State::Refused,
        };
        if self.state.replace(Some(state)) == Some(state) {
            return false;
        }
        match outcome {
            TimerOutcome::Copied { .. } => tracing::info!(
                master = %master,
                "copying the master's timer checkpoints"
            ),
            TimerOutcome::NotServed => tracing::info!(
                master = %master,
                "the master does not serve RINGMQ_GET_TIMER_PROGRESS (a RocketMQ broker): its \
                 timer checkpoints are not copied, and this slave promoted would deliver \
                 again the timer messages the master delivered"
            ),
            TimerOutcome::Refused(why) => tracing::warn!(
                master = %master,
                "cannot copy the master's timer checkpoints: {}; those shards keep their \
                 last copy",
                why.join("; ")
            ),
        }
        true
    }
}

/// One round's timer part over `client`, connected to the master at `master`. `Err` is a
/// request that failed.
pub(super) async fn copy(
    broker: &Broker,
    client: &Client,
    master: SocketAddr,
) -> std::io::Result<TimerOutcome> {
    let mut written = 0;
    let mut refused = Vec::new();
    for shard in 0..broker.shard().count() {
        let fields = ExtFields::from([(SHARD, shard.to_compact_string())]);
        let asked = RemotingCommand::request(request::RINGMQ_GET_TIMER_PROGRESS, fields.clone());
        let progress = client.request(asked).await?;
        match progress.code {
            response::SUCCESS => {}
            response::REQUEST_CODE_NOT_SUPPORTED => return Ok(TimerOutcome::NotServed),
            code => {
                let remark = progress.remark.unwrap_or_default();
                refused.push(format!(
                    "shard {shard}: the master answered {code} ({remark})"
                ));
                continue;
            }
        }
        let mut take = RemotingCommand::request(request::RINGMQ_TAKE_TIMER_PROGRESS, fields)
            .with_body(progress.body);
        take.put_ext(SHARD_ONLY, "true");
        let taken = if shard == broker.shard().id() {
            broker.handle_owned(take, master).await
        } else {
            broker.shard().forward(shard, take, master).await
        };
        match taken {
            Some(answer) if answer.code == response::SUCCESS => {
                written += usize::from(answer.opt_str(WRITTEN) == Some("true"));
            }
            Some(answer) => refused.push(format!(
                "shard {shard}: {}",
                answer.remark.unwrap_or_default()
            )),
            None => refused.push(format!("shard {shard}: no answer")),
        }
    }
    if refused.is_empty() {
        Ok(TimerOutcome::Copied { written })
    } else {
        Ok(TimerOutcome::Refused(refused))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_of_the_timer_copy_is_said_once_when_it_begins() {
        let log = TimerCopyLog::default();
        let master: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let refused = |why: &str| TimerOutcome::Refused(vec![why.to_string()]);
        let rounds = [
            (TimerOutcome::Copied { written: 2 }, true),
            (TimerOutcome::Copied { written: 0 }, false),
            (TimerOutcome::NotServed, true),
            (TimerOutcome::NotServed, false),
            (refused("shard 0: timerWheelEnable is off"), true),
            (refused("shard 1: another reason"), false),
            (TimerOutcome::Copied { written: 1 }, true),
        ];
        for (n, (outcome, said)) in rounds.iter().enumerate() {
            assert_eq!(log.note(master, outcome), *said, "round {n}: {outcome:?}");
        }
    }
}
