//! The broker: what each request means. A [`Broker`] holds one shard's [`Store`] and the
//! broker's identity and turns a request into its response (reference §9).
//!
//! The folder is sorted by what the code is; each subfolder's `mod.rs` says what it owns
//! and what it may import:
//!
//! - [`dispatch`]: the one match from request code to handler, and the routing of a request
//!   to the shard that owns its queue (D3).
//! - [`requests`]: what clients send in their normal work (send, pull, send-back, query,
//!   offsets, heartbeats, assignment, orderly locks, request modes).
//! - [`admin`]: the admin requests (`ringmq admin`, mqadmin, the dashboard), in Java's JSON
//!   shapes, with the whole node's view.
//! - [`tables`]: the node's persisted tables (topics, subscription groups, consumer
//!   offsets, request modes), each a [`tables::persisted_table::PersistedTable`] whose
//!   writes run off the shard's reactor.
//! - [`state`]: the node's shared in-memory state (client registry, queue locks, client
//!   links, live settings, retention holds, the metrics sampler's inputs).
//! - [`naming`]: the pure rules for names and message ids.
//! - The feature engines, one folder each: [`delay`] (delay levels, `SCHEDULE_TOPIC_XXXX`),
//!   [`timer`] (timer messages, `rmq_sys_wheel_timer`), [`pop`] (POP consumption, D16) and
//!   [`transaction`] (half messages, END_TRANSACTION, check-back). An engine's `mod.rs` holds its requests and tasks, its submodules
//!   its state, codecs and retention holds.
//!
//! The arrows run one way: [`dispatch`] names every folder; [`admin`] may use [`requests`];
//! [`requests`] and the engines use [`state`], [`tables`] and [`naming`]; [`tables`] use
//! only [`naming`]. This file holds what all of them share: [`Broker`] (one shard's
//! context), its settings ([`BrokerConfig`], [`BrokerIdentity`]) and the node-wide
//! [`NodeTables`] every shard's broker reads.
//!
//! Invariants:
//! - Every request gets exactly one response (or none when it is oneway, which the
//!   connection enforces), and a bad request gets an error response naming what is wrong,
//!   never a closed connection: only framing errors close a connection.
//! - Responses carry every header field the Java client unboxes, on error paths too
//!   (reference §14 items 5 and 6).
//!
//! Shards (D3): each shard has its own `Broker` over its own store; the node-wide tables
//! (topics, groups, committed offsets, delay cursors) are one [`NodeTables`] shared by
//! every shard's broker.
//!

pub mod admin;
pub mod delay;
pub mod dispatch;
pub mod naming;
pub mod pop;
pub mod requests;
pub mod state;
pub mod tables;
pub mod timer;
pub mod transaction;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::metrics::ShardMetrics;
use crate::remoting::codes::response;
use crate::remoting::{FieldError, RemotingCommand};
use crate::shard::ShardContext;
use crate::store::Store;

use self::naming::ids;
use self::requests::consumers;
use self::state::{groups, live_settings, notify, queue_locks};
use self::tables::{consumer_offsets, request_modes, subscription_groups, topics};

/// Who this broker is, as clients and tools see it.
#[derive(Clone, Debug)]
pub struct BrokerIdentity {
    pub broker_name: String,
    pub cluster_name: String,
    /// The reachable remoting address, written as STOREHOST and encoded in msgIds.
    pub store_host: SocketAddr,
}

/// Broker settings of one shard, derived from the node's keys by
/// [`crate::node_config::broker_config`]; the two that are not keys are the constants below.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Controller mode (D18): where NOTIFY_BROKER_ROLE_CHANGED (1008) is passed on, to the
    /// broker's supervisor, which asks the controllers for the group at once. `None`: the
    /// request is not served.
    pub role_notices: Option<std::sync::Arc<tokio::sync::Notify>>,
    /// Longest a pull may stay parked, whatever its `suspendTimeoutMillis` asks.
    pub max_suspend: Duration,
    /// Most pulls parked at once on this shard; past it a pull that would park answers
    /// PULL_NOT_FOUND at once (the client simply pulls again).
    pub max_parked_pulls: usize,
    /// Most subscriptions (and consumer and producer groups) one heartbeat may register.
    pub max_heartbeat_subscriptions: usize,
    /// Longest subscription expression (and tag list) one heartbeat may register.
    pub max_subscription_expression_bytes: usize,
    /// Most registrations (a client in a group) the node's client table holds
    /// (`maxClientRegistrations`, node-wide).
    pub max_client_registrations: usize,
    /// Most subscription groups a heartbeat or pull may auto-create up to
    /// (`maxSubscriptionGroups`, node-wide).
    pub max_subscription_groups: usize,
    /// Most entries one BATCH_ACK_MESSAGE may carry (`maxBatchAckEntries`).
    pub max_batch_ack_entries: usize,
    /// Most bitset bytes one BATCH_ACK_MESSAGE may carry, all entries together
    /// (`maxBatchAckBitsetBytes`).
    pub max_batch_ack_bitset_bytes: usize,
    /// A client not heard from (heartbeat) for this long is dropped from its groups
    /// (`channelExpiredTimeout`).
    pub client_expiry: Duration,
    /// How often the node sweeps expired clients (`clientSweepInterval`).
    pub client_sweep_interval: Duration,
    /// Longest a request relayed to a client waits for its answer (`clientCallTimeout`).
    pub client_call_timeout: Duration,
    /// How often changed consumer offsets are written to `config/consumerOffset.json`; a
    /// crash loses at most this much of the commits.
    pub consumer_offset_flush_interval: Duration,
    /// `retentionProtectedGroups`: consumer groups whose unconsumed records retention
    /// keeps below the forced ratio ([`state::protected_groups`]); empty for none.
    pub retention_protected_groups: Vec<String>,
    /// `messageDelayLevel`: the delay of each level ([`delay`]).
    pub delay_levels: delay::DelayLevels,
    /// How often moved delay cursors are written to `config/delayOffset.json`
    /// (`flushDelayOffsetInterval`, default [`DELAY_OFFSET_FLUSH_INTERVAL`]); a crash
    /// delivers at most this much again.
    pub delay_offset_flush_interval: Duration,
    /// `timerWheelEnable`: timer messages are delivered when due ([`timer`]).
    pub timer_enabled: bool,
    /// `timerMaxDelaySec`.
    pub timer_max_delay_sec: u64,
    /// `timerMaxPending`: this shard's share.
    pub timer_max_pending: u64,
    /// The timer store's memory bounds (`timerMemoryEntries`).
    pub timer_limits: timer::store::TimerLimits,
    /// `scheduleDeliveryWindow`: due messages each delay level's scheduler, and the timer
    /// scheduler, keep in flight to their real queues.
    pub schedule_delivery_window: usize,
    /// `slaveReadEnable`: a pull reading cold data is told to go to the group's
    /// `whichBrokerWhenConsumeSlowly` ([`requests::read_from_slave`]).
    pub slave_read_enable: bool,
    /// The transaction keys ([`transaction`]).
    pub transactions: transaction::TransactionSettings,
}

/// [`BrokerConfig::max_suspend`]: the Java client times a suspended pull out after 30 s;
/// stay inside it.
pub const MAX_SUSPEND: Duration = Duration::from_secs(20);
/// [`BrokerConfig::consumer_offset_flush_interval`].
pub const CONSUMER_OFFSET_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// The default of `flushDelayOffsetInterval`, [`BrokerConfig::delay_offset_flush_interval`]
/// (Java's is 10 s; a shorter one redelivers less after a crash, and the file is written
/// only when a cursor moved).
pub const DELAY_OFFSET_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// The tables every shard of a node reads and writes: off the data path, each behind its
/// own lock (`crate::sync::Locked`). Cloning shares them.
#[derive(Clone, Debug)]
pub struct NodeTables {
    pub topics: Arc<topics::TopicTable>,
    pub groups: Arc<groups::Groups>,
    pub consumer_offsets: Arc<consumer_offsets::ConsumerOffsets>,
    /// Every open client connection of every shard, by peer address.
    pub links: Arc<notify::Links>,
    /// The orderly-consumption queue locks.
    pub locks: Arc<queue_locks::QueueLocks>,
    /// The subscription groups (`config/subscriptionGroup.json`).
    pub subscription_groups: Arc<subscription_groups::SubscriptionGroups>,
    /// The delay schedulers' cursors.
    pub delay_offsets: Arc<delay::offsets::DelayOffsets>,
    /// Which groups pop rather than pull (`config/messageRequestMode.json`).
    pub request_modes: Arc<request_modes::RequestModes>,
    /// The node's settings as the admin requests read and change them.
    pub settings: Arc<live_settings::LiveSettings>,
    /// The parked pops of any queue, which every shard's arrivals wake.
    pub pop_wakes: Arc<pop::wake::AnyQueueWakes>,
}

impl NodeTables {
    pub fn new(
        topics: topics::TopicTable,
        consumer_offsets: consumer_offsets::ConsumerOffsets,
        subscription_groups: subscription_groups::SubscriptionGroups,
    ) -> NodeTables {
        // In memory, beside the consumer offsets' file; a node loads its own at start.
        let delay_offsets = delay::offsets::DelayOffsets::in_memory(
            consumer_offsets
                .path()
                .with_file_name(delay::offsets::FILE_NAME),
        );
        let request_modes = request_modes::RequestModes::in_memory(
            consumer_offsets
                .path()
                .with_file_name(request_modes::FILE_NAME),
        );
        NodeTables {
            // Until a node sets what it runs with ([`crate::node`] does at start).
            settings: Arc::new(live_settings::LiveSettings::unset()),
            pop_wakes: Arc::new(pop::wake::AnyQueueWakes::default()),
            request_modes: Arc::new(request_modes),
            delay_offsets: Arc::new(delay_offsets),
            topics: Arc::new(topics),
            groups: Arc::new(groups::Groups::new()),
            consumer_offsets: Arc::new(consumer_offsets),
            links: Arc::new(notify::Links::default()),
            locks: Arc::new(queue_locks::QueueLocks::new()),
            subscription_groups: Arc::new(subscription_groups),
        }
    }
}

/// One shard's request handler.
pub struct Broker {
    pub(crate) store: Store,
    pub(crate) identity: BrokerIdentity,
    pub(crate) config: BrokerConfig,
    pub(crate) topics: Arc<topics::TopicTable>,
    pub(crate) clock: Clock,
    pub(crate) uniq_keys: ids::UniqKeys,
    pub(crate) parked: Cell<usize>,
    pub(crate) next_queue: Cell<u32>,
    pub(crate) groups: Arc<groups::Groups>,
    pub(crate) consumer_offsets: Arc<consumer_offsets::ConsumerOffsets>,
    pub(crate) links: Arc<notify::Links>,
    pub(crate) locks: Arc<queue_locks::QueueLocks>,
    pub(crate) subscription_groups: Arc<subscription_groups::SubscriptionGroups>,
    /// Closed connections whose clients are yet to leave their groups.
    pub(crate) closed: consumers::ClosedConnections,
    pub(crate) shard: ShardContext,
    pub(crate) metrics: Arc<ShardMetrics>,
    /// What pulls returned, by topic and group ([`state::stats_sampler`]).
    pub(crate) gets: crate::metrics::rates::GetTable,
    /// When this broker started (ms since the epoch), for GET_BROKER_RUNTIME_INFO.
    pub(crate) started_ms: i64,
    pub(crate) delay_offsets: Arc<delay::offsets::DelayOffsets>,
    /// Per delay level (level 1 first): wakes its scheduler when a delayed message is
    /// stored on this shard.
    pub(crate) delay_wakes: Vec<Rc<tokio::sync::Notify>>,
    /// This shard's timer store and scheduler state, set once at start
    /// ([`Broker::set_timers`]); unset, timer sends are refused.
    pub(crate) timers: std::cell::OnceCell<Rc<timer::scheduler::Timers>>,
    /// This shard's POP state, set once at start ([`Broker::set_pops`]); unset, POP
    /// requests are refused.
    pub(crate) pops: std::cell::OnceCell<Rc<pop::Pops>>,
    /// This shard's transaction state, set once at start ([`Broker::set_transactions`]);
    /// unset, transactional sends and END_TRANSACTION are refused.
    pub(crate) transactions: std::cell::OnceCell<Rc<transaction::Transactions>>,
    /// A slave shard's: whether its stream to the master is up, set once at start
    /// ([`Broker::set_master_stream`]); unset on a master.
    master_stream: std::cell::OnceCell<Rc<Cell<bool>>>,
    pub(crate) request_modes: Arc<request_modes::RequestModes>,
    pub(crate) settings: Arc<live_settings::LiveSettings>,
    pub(crate) pop_wakes: Arc<pop::wake::AnyQueueWakes>,
}

impl Broker {
    pub fn new(
        store: Store,
        identity: BrokerIdentity,
        config: BrokerConfig,
        tables: NodeTables,
        clock: Clock,
        shard: ShardContext,
        metrics: Arc<ShardMetrics>,
    ) -> Broker {
        let started_ms = clock.now_ms();
        // Every record made visible here may wake a parked pop of any queue elsewhere.
        let pop_wakes = tables.pop_wakes.clone();
        store.set_visible_hook(Rc::new(move |topic: &str| pop_wakes.arrived(topic)));
        let delay_wakes = (0..config.delay_levels.max_level())
            .map(|_| Rc::new(tokio::sync::Notify::new()))
            .collect();
        Broker {
            delay_offsets: tables.delay_offsets,
            delay_wakes,
            timers: std::cell::OnceCell::new(),
            pops: std::cell::OnceCell::new(),
            transactions: std::cell::OnceCell::new(),
            master_stream: std::cell::OnceCell::new(),
            request_modes: tables.request_modes,
            settings: tables.settings,
            pop_wakes: tables.pop_wakes,
            topics: tables.topics,
            groups: tables.groups,
            consumer_offsets: tables.consumer_offsets,
            links: tables.links,
            locks: tables.locks,
            subscription_groups: tables.subscription_groups,
            closed: consumers::ClosedConnections::default(),
            uniq_keys: ids::UniqKeys::new(identity.store_host.ip(), shard.id()),
            store,
            identity,
            config,
            clock,
            parked: Cell::new(0),
            next_queue: Cell::new(0),
            shard,
            gets: crate::metrics::rates::GetTable::new(metrics.caps().groups),
            metrics,
            started_ms,
        }
    }

    /// This shard's metrics.
    pub fn metrics(&self) -> &Arc<ShardMetrics> {
        &self.metrics
    }

    /// This broker's shard: its id and the node's shard count.
    pub fn shard(&self) -> &ShardContext {
        &self.shard
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn identity(&self) -> &BrokerIdentity {
        &self.identity
    }

    pub fn topics(&self) -> &topics::TopicTable {
        &self.topics
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The producer and consumer groups heartbeats registered.
    pub fn groups(&self) -> &groups::Groups {
        &self.groups
    }

    /// The committed consumer offsets.
    pub fn consumer_offsets(&self) -> &consumer_offsets::ConsumerOffsets {
        &self.consumer_offsets
    }

    /// The delay schedulers' cursors.
    pub fn delay_offsets(&self) -> &delay::offsets::DelayOffsets {
        &self.delay_offsets
    }

    /// What wakes the scheduler of `level` (1 to the last level).
    pub(crate) fn delay_wake(&self, level: u32) -> &Rc<tokio::sync::Notify> {
        &self.delay_wakes[level as usize - 1]
    }

    /// Gives this shard its timers (once, at start).
    pub fn set_timers(&self, timers: Rc<timer::scheduler::Timers>) {
        assert!(
            self.timers.set(timers).is_ok(),
            "shard {}'s timers were set twice",
            self.shard.id()
        );
    }

    /// This shard's transaction state, once opened.
    pub fn transactions(&self) -> Option<&Rc<transaction::Transactions>> {
        self.transactions.get()
    }

    /// Gives this shard its transaction state (once, at start).
    pub fn set_transactions(&self, transactions: Rc<transaction::Transactions>) {
        assert!(
            self.transactions.set(transactions).is_ok(),
            "shard {}'s transaction state was set twice",
            self.shard.id()
        );
    }

    /// Gives this shard its POP state (once, at start).
    /// Shares a slave shard's "stream to the master is up" flag with the broker.
    pub fn set_master_stream(&self, up: Rc<Cell<bool>>) {
        assert!(
            self.master_stream.set(up).is_ok(),
            "shard {}'s master stream flag was set twice",
            self.shard.id()
        );
    }

    /// Whether this slave shard's stream to its master is up (false on a master).
    pub fn master_stream_up(&self) -> bool {
        self.master_stream.get().is_some_and(|up| up.get())
    }

    pub fn set_pops(&self, pops: Rc<pop::Pops>) {
        assert!(
            self.pops.set(pops).is_ok(),
            "shard {}'s POP state was set twice",
            self.shard.id()
        );
    }

    /// `group`'s subscription group for a pull, pop or send-back, auto-created when allowed
    /// up to `maxSubscriptionGroups` ([`subscription_groups`]); with `consuming`, a
    /// disabled group is refused too. A creation refused at the bound is counted.
    pub(crate) fn subscription_group(
        &self,
        group: &str,
        consuming: bool,
    ) -> Result<subscription_groups::SubscriptionGroupConfig, (i32, String)> {
        let groups = &self.subscription_groups;
        let max = self.config.max_subscription_groups;
        let found = if consuming {
            groups.for_consumption(group, self.now_ms(), max)
        } else {
            groups.find_or_create(group, self.now_ms(), max)
        };
        if let Err((code, _)) = &found {
            // With auto-creation on, only the bound keeps a group from existing.
            if *code == response::SUBSCRIPTION_GROUP_NOT_EXIST && groups.auto_create() {
                ShardMetrics::add(&self.metrics.subscription_groups_refused, 1);
            }
        }
        found
    }

    /// Pulls parked right now (for metrics and tests).
    pub fn parked_pulls(&self) -> usize {
        self.parked.get()
    }
}

pub(crate) use crate::remoting::command::bad_header;

/// `topic` and `queueId`, the pair most requests start with.
pub(crate) fn topic_and_queue(request: &RemotingCommand) -> Result<(&str, i32), FieldError> {
    Ok((request.get_str("topic")?, request.get_i32("queueId")?))
}
