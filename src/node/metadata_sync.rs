//! A slave's copy of its master's tables (issue 25 item 4): the state a reading or promoted
//! slave needs besides the log, kept no staler than `slaveMetadataSyncInterval` (1 s by
//! default) while the master answers.
//!
//! Runs on shard 0 of a `SLAVE` node (the tables are node-wide). Every interval it asks the
//! master's broker port (the address the name servers answer the slave's registration
//! with, [`MasterAddress`]) for:
//!
//! | table | request | taken |
//! |---|---|---|
//! | topics | GET_ALL_TOPIC_CONFIG (21) | when its data version differs, file first |
//! | subscription groups | GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) | when its data version differs |
//! | consumer offsets | GET_ALL_CONSUMER_OFFSET (43) | always, with commits made on the slave over it |
//! | delay-level cursors | GET_ALL_DELAY_OFFSET (45) | when they differ |
//! | request modes (pull or POP) | GET_ALL_MESSAGE_REQUEST_MODE (402) | when they differ, file first |
//! | timer checkpoint, per shard | RINGMQ_GET_TIMER_PROGRESS (30000, ringmq-private), `shard` = k | by shard k, when it changed ([`super::timer_sync`]) |
//!
//! The timer checkpoint: shard k of the master answers its timer store's progress (the
//! checkpoint without its runs, from the lowest timer-queue offset it still needs); this
//! node's shard k checks it, clamps it to the timer queue it holds, and writes it as its
//! own timer store's `checkpoint.json` (`shard-<k>/timer/`), so the store's own recovery,
//! run by this slave started again as a master, rebuilds the master's pending timers: none
//! delivered again that the master had delivered when the copy was made, none lost
//! (`broker::timer::store::progress` says why). A RocketMQ master answers
//! REQUEST_CODE_NOT_SUPPORTED: the timer copy is skipped (said once at INFO) and the other
//! tables are copied all the same.
//!
//! Before it asks, it gives the master every offset consumers committed on the slave that
//! the master has not confirmed (UPDATE_CONSUMER_OFFSET, 15; [`crate::broker::tables::mirror`]):
//! commits made while the master was away reach it when it is back, and no consumer reads
//! those messages again.
//!
//! What does not travel here, and why: POP state (checkpoints and acks) is written to the
//! CommitLog (D16), so it is in the replicated log itself, as the timer messages and the
//! delayed ones are (the timer store's checkpoint travels here: it says which of the timer
//! messages in the log were delivered, which the log does not). The timer store's run files
//! do not travel: they are an index of the timer queue the slave rebuilds from its copy of
//! the queue.
//!
//! Bound: a change on the master reaches the slave within one interval plus one round of
//! requests (each bounded by `slaveMetadataRequestTimeout`, 3 s by default) while the master answers; for a timer
//! checkpoint, a delivery the master acknowledged is in the slave's copy within that
//! bound, so a slave promoted later delivers again at most what the master delivered in
//! the last interval plus one round (and, while the slave's timer queue is behind the
//! master's, what the master delivered above its end). A failed round changes nothing;
//! the state (answering or not, and the timer copy's) is logged when it changes, not
//! every round. With no name server (`haMasterAddress` alone) the slave never learns the
//! broker address and copies nothing: the start warns of it ([`warn_without_name_servers`]).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use compact_str::{CompactString, ToCompactString};

use crate::broker::tables::mirror::MirrorError;
use crate::broker::Broker;
use crate::client::Client;
use crate::net::Transport;
use crate::remoting::codes::{request, response};
use crate::remoting::{ExtFields, RemotingCommand};
use crate::shard::service::{ShardService, ShardTask};

use super::replication::MasterAddress;
use super::timer_sync::{TimerCopyLog, TimerOutcome};

/// Why one round failed.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("{what} failed: {error}")]
    Request {
        what: &'static str,
        error: std::io::Error,
    },
    #[error("{what} answered {code} ({remark})")]
    Refused {
        what: &'static str,
        code: i32,
        remark: String,
    },
    #[error(transparent)]
    Mirror(#[from] MirrorError),
}

/// The service on shard 0 of a slave.
pub struct MetadataSync<T: Transport> {
    inner: Rc<Inner<T>>,
}

struct Inner<T: Transport> {
    broker: Rc<Broker>,
    transport: T,
    master: MasterAddress,
    interval: Duration,
    /// `slaveMetadataRequestTimeout`: longest the connect or one request of a round may
    /// take.
    request_timeout: Duration,
    /// The connection to the master's broker port, kept between rounds.
    client: RefCell<Option<Client>>,
    /// Whether the last round succeeded: what a state change is logged against.
    answering: Cell<Option<bool>>,
    /// What was said last of the timer checkpoints' copy.
    timer_log: TimerCopyLog,
}

impl<T: Transport> MetadataSync<T> {
    pub fn new(
        broker: &Rc<Broker>,
        transport: T,
        master: MasterAddress,
        interval: Duration,
        request_timeout: Duration,
    ) -> MetadataSync<T> {
        broker.consumer_offsets.keep_commits_for_master();
        MetadataSync {
            inner: Rc::new(Inner {
                broker: broker.clone(),
                transport,
                master,
                interval,
                request_timeout,
                client: RefCell::new(None),
                answering: Cell::new(None),
                timer_log: TimerCopyLog::default(),
            }),
        }
    }
}

/// The warning a slave without name servers gets at start: it learns its master's broker
/// address only from them.
pub fn warn_without_name_servers() {
    tracing::warn!(
        "this SLAVE has no namesrvAddr: it learns its master's broker address only from the \
         name servers, so it will not copy the master's topics, subscription groups and \
         consumer offsets (set namesrvAddr)"
    );
}

impl<T: Transport> Inner<T> {
    async fn run(self: Rc<Self>) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut master = self.master.broker_receiver.clone();
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                // A master learned or moved: copy at once.
                changed = master.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.client.replace(None);
                }
            }
            let Some(addr) = *master.borrow_and_update() else {
                continue;
            };
            let outcome = self.round(addr).await;
            self.note(addr, outcome);
        }
    }

    fn note(&self, addr: SocketAddr, outcome: Result<Changed, SyncError>) {
        if outcome.is_err() {
            self.client.replace(None);
        }
        let was = self.answering.replace(Some(outcome.is_ok()));
        match outcome {
            Ok(changed) if was != Some(true) => tracing::info!(
                master = %addr,
                "copying the master's tables (first round changed: {changed})"
            ),
            Ok(changed) if !changed.is_empty() => {
                tracing::debug!(master = %addr, "copied the master's {changed}");
            }
            Err(why) if was != Some(false) => tracing::warn!(
                master = %addr,
                "cannot copy the master's tables: {why}; the slave keeps what it has"
            ),
            _ => {}
        }
    }

    /// One round: the pending commits to the master, then every table from it.
    async fn round(&self, addr: SocketAddr) -> Result<Changed, SyncError> {
        let client = self.client(addr).await?;
        self.give_commits(&client).await?;
        let tables = &self.broker;
        let mut changed = Changed::default();
        let body = fetch(&client, request::GET_ALL_TOPIC_CONFIG, "topics").await?;
        changed.topics = tables.topics.mirror(&body).await?;
        let body = fetch(&client, request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "groups").await?;
        changed.groups = tables.subscription_groups.mirror(&body)?;
        let body = fetch(&client, request::GET_ALL_CONSUMER_OFFSET, "offsets").await?;
        changed.offsets = tables.consumer_offsets.mirror(&body)?;
        let body = fetch(&client, request::GET_ALL_DELAY_OFFSET, "delay offsets").await?;
        changed.delay = tables.delay_offsets.mirror(&body)?;
        let body = fetch(
            &client,
            request::GET_ALL_MESSAGE_REQUEST_MODE,
            "request modes",
        )
        .await?;
        changed.modes = tables.request_modes.mirror(&body).await?;
        // Last: a master that does not serve it (RocketMQ) has every other table copied.
        let timers = super::timer_sync::copy(tables, &client, addr)
            .await
            .map_err(|error| SyncError::Request {
                what: "timer progress",
                error,
            })?;
        self.timer_log.note(addr, &timers);
        changed.timers = matches!(timers, TimerOutcome::Copied { written } if written > 0);
        Ok(changed)
    }

    /// Every offset committed here that the master has not confirmed, one
    /// UPDATE_CONSUMER_OFFSET each; a confirmed one is no longer pending.
    async fn give_commits(&self, client: &Client) -> Result<(), SyncError> {
        let offsets = &self.broker.consumer_offsets;
        for (topic, group, queue_id, offset) in offsets.pending_for_master() {
            let fields = ExtFields::from([
                ("consumerGroup", CompactString::from(group.as_str())),
                ("topic", CompactString::from(topic.as_str())),
                ("queueId", queue_id.to_compact_string()),
                ("commitOffset", offset.to_compact_string()),
            ]);
            let command = RemotingCommand::request(request::UPDATE_CONSUMER_OFFSET, fields);
            call(client, command, "an offset commit").await?;
            offsets.given_to_master(&topic, &group, queue_id, offset);
        }
        Ok(())
    }

    async fn client(&self, addr: SocketAddr) -> Result<Client, SyncError> {
        let kept = self.client.borrow().clone();
        if let Some(client) = kept.filter(|client| !client.is_closed()) {
            return Ok(client);
        }
        let connect = Client::connect_over(&self.transport, addr);
        let client = tokio::time::timeout(self.request_timeout, connect)
            .await
            .map_err(|_| SyncError::Connect(std::io::ErrorKind::TimedOut.into()))?
            .map_err(SyncError::Connect)?;
        client.set_timeout(self.request_timeout);
        self.client.replace(Some(client.clone()));
        Ok(client)
    }
}

/// What one round changed, for the log.
#[derive(Default)]
struct Changed {
    topics: bool,
    groups: bool,
    offsets: bool,
    delay: bool,
    modes: bool,
    /// A shard's timer checkpoint was written.
    timers: bool,
}

impl Changed {
    fn is_empty(&self) -> bool {
        !(self.topics || self.groups || self.offsets || self.delay || self.modes || self.timers)
    }
}

impl std::fmt::Display for Changed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (self.topics, "topics"),
            (self.groups, "subscription groups"),
            (self.offsets, "consumer offsets"),
            (self.delay, "delay offsets"),
            (self.modes, "request modes"),
            (self.timers, "timer checkpoints"),
        ];
        let changed: Vec<&str> = names.iter().filter(|(c, _)| *c).map(|(_, n)| *n).collect();
        if changed.is_empty() {
            return f.write_str("nothing");
        }
        f.write_str(&changed.join(", "))
    }
}

/// One request whose answer must be SUCCESS; its body.
async fn fetch(client: &Client, code: i32, what: &'static str) -> Result<Vec<u8>, SyncError> {
    let command = RemotingCommand::request(code, ExtFields::new());
    Ok(call(client, command, what).await?.body.to_vec())
}

async fn call(
    client: &Client,
    command: RemotingCommand,
    what: &'static str,
) -> Result<RemotingCommand, SyncError> {
    let answer = client
        .request(command)
        .await
        .map_err(|error| SyncError::Request { what, error })?;
    if answer.code != response::SUCCESS {
        return Err(SyncError::Refused {
            what,
            code: answer.code,
            remark: answer.remark.unwrap_or_default(),
        });
    }
    Ok(answer)
}

impl<T: Transport> ShardService for MetadataSync<T> {
    fn name(&self) -> &'static str {
        "master table copy"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        vec![ShardTask::new(
            "master table copy",
            self.inner.clone().run(),
        )]
    }
}
