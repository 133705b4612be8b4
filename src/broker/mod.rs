//! The broker: what each request means. A [`Broker`] holds one shard's [`Store`] and the
//! broker's identity and turns a request into its response (reference §9).
//!
//! - [`send`]: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).
//! - [`pull`]: PULL_MESSAGE (11), LITE_PULL_MESSAGE (361), with long polling.
//! - [`offsets`]: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29),
//!   GET_EARLIEST_MSG_STORETIME (32).
//! - [`ids`]: offsetMsgId and UNIQ_KEY.
//! - [`topics`]: the topic table (`config/topics.json`); [`topic_requests`]:
//!   UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21), DELETE_TOPIC_IN_BROKER (215).
//! - [`consumers`]: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
//!   and the heartbeat subscriptions pulls filter by; [`groups`]: the client registry they
//!   fill, indexed by group, client, connection and expiry.
//! - [`assignment`]: QUERY_ASSIGNMENT (400), server-side queue assignment.
//! - [`subscription_groups`]: the groups' settings (`config/subscriptionGroup.json`);
//!   [`subscription_group_requests`]: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
//!   GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207).
//! - [`lock_requests`]: LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), over the node's
//!   [`queue_locks`], for orderly consumers.
//! - [`consumer_offsets`]: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), a pull's
//!   `commitOffset`, and `config/consumerOffset.json`.
//! - [`query`]: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33).
//! - The admin requests (`ringmq admin`, mqadmin, the dashboard), answered in Java's JSON
//!   shapes ([`admin_json`]) with the whole node's view ([`fan_out`] asks every shard):
//!   [`runtime_info`] GET_BROKER_RUNTIME_INFO (28), [`topic_stats`] GET_TOPIC_STATS_INFO
//!   (202), [`consume_stats`] GET_CONSUME_STATS (208), [`consumer_connections`]
//!   GET_CONSUMER_CONNECTION_LIST (203),
//!   [`reset_offset`] INVOKE_BROKER_TO_RESET_OFFSET (222) with RESET_CONSUMER_CLIENT_OFFSET
//!   (220) to the live clients, [`topic_config_request`] GET_TOPIC_CONFIG (351),
//!   [`producer_connections`] GET_PRODUCER_CONNECTION_LIST (204),
//!   [`broker_config_requests`] GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25) over
//!   [`live_settings`], [`broker_consume_stats`] GET_BROKER_CONSUME_STATS (317),
//!   [`clone_offset`] CLONE_GROUP_OFFSET (314), [`consume_by_who`]
//!   QUERY_TOPIC_CONSUME_BY_WHO (300), [`stats_data`] VIEW_BROKER_STATS_DATA (315, no stats
//!   items kept: refused as Java refuses an item it lacks), and [`client_calls`]
//!   GET_CONSUMER_RUNNING_INFO (307), relayed to the consumer and back.
//! - [`protected_groups`]: the retention holds of `retentionProtectedGroups`, registered
//!   on the shard's store.
//! - [`delay`]: delay levels (`DELAY`, `messageDelayLevel`): delayed sends wait in
//!   `SCHEDULE_TOPIC_XXXX` and a scheduler per level delivers them on time;
//!   [`delay::offsets`]: its cursors, `config/delayOffset.json`, and GET_ALL_DELAY_OFFSET
//!   (45); [`delay::holds`]: the
//!   retention holds that keep waiting delayed messages past `fileReservedTime`.
//!
//! Invariants:
//! - Every request gets exactly one response (or none when it is oneway, which the
//!   connection enforces), and a bad request gets an error response naming what is wrong,
//!   never a closed connection: only framing errors close a connection.
//! - Responses carry every header field the Java client unboxes, on error paths too
//!   (reference §14 items 5 and 6).
//!
//! Shards (D3): each shard has its own `Broker` over its own store. A
//! request that names a queue ([`crate::shard::routing::queue_fields`]) is first routed:
//! if another shard owns the queue, [`Broker::handle`] forwards it over that shard's
//! bounded mailbox and returns the owner's answer; otherwise [`Broker::handle_owned`]
//! answers it here. A send that leaves the queue to the broker (`queueId` -1) gets a queue
//! this shard owns when the topic has one. A delayed send (`DELAY` above 0) is routed to
//! the owner of its level's `SCHEDULE_TOPIC_XXXX` queue instead, where its scheduler runs.
//! The node-wide tables (topics, groups, committed offsets, delay cursors) are one
//! [`NodeTables`] shared by every shard's broker; each is a [`persisted_table`]
//! ([`persisted_table::PersistedTable`]) whose writes run off the shard's reactor.
//!
//! Each feature engine is one folder: [`delay`], [`timer`], [`pop`] (and next,
//! transactions); its `mod.rs` holds the engine's requests and tasks, its submodules the
//! engine's state, codecs and retention holds.
//!
//! - [`timer`], [`timer::store`], [`timer::scheduler`], [`timer::holds`]: timer messages
//!   (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`, `TIMER_DEL_UNIQKEY`).
//! - [`pop`]: POP consumption, POP_MESSAGE (200050), ACK_MESSAGE (200051),
//!   BATCH_ACK_MESSAGE (200151), CHANGE_MESSAGE_INVISIBLETIME (200053), over
//!   [`pop::state`] (the in-flight table), [`pop::log`] (its revive log) and [`pop::wire`];
//!   [`request_modes`]: SET_MESSAGE_REQUEST_MODE (401), which switches a group to POP in
//!   QUERY_ASSIGNMENT's answer.
//!
//! Not yet here (each answers REQUEST_CODE_NOT_SUPPORTED): transactions.

pub mod admin_json;
pub mod assignment;
pub mod broker_config_requests;
pub mod broker_consume_stats;
pub mod client_calls;
pub mod clone_offset;
pub mod consume_by_who;
pub mod consume_stats;
pub mod consumer_connections;
pub mod consumer_offsets;
pub mod consumers;
pub mod delay;
pub mod fan_out;
pub mod groups;
pub mod ids;
pub mod live_settings;
pub mod lock_requests;
pub mod names;
pub mod notify;
pub mod offsets;
pub mod persisted_table;
pub mod pop;
pub mod producer_connections;
pub mod protected_groups;
pub mod pull;
pub mod query;
pub mod queue_locks;
pub mod request_modes;
pub mod reset_offset;
pub mod runtime_info;
pub mod send;
pub mod send_back;
pub mod stats_data;
pub mod stats_sampler;
pub mod subscription_group_requests;
pub mod subscription_groups;
pub mod timer;
pub mod topic_config_request;
pub mod topic_requests;
pub mod topic_stats;
pub mod topics;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::metrics::{Family, ShardMetrics};
use crate::remoting::codes::{request, response};
use crate::remoting::connection::{Outbound, Reply, RequestHandler};
use crate::remoting::send_header::SendMessageRequestHeader;
use crate::remoting::{FieldError, RemotingCommand};
use crate::shard::mailbox::{run_owned, DirectReply, NotForwarded, OwnerHandler};
use crate::shard::{routing, ShardContext};
use crate::store::topic::{validate_topic, SCHEDULE_TOPIC};
use crate::store::Store;

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
    /// keeps below the forced ratio ([`protected_groups`]); empty for none.
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
    pub groups: Arc<consumers::Groups>,
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
    /// What every shard's embedded name server shares.
    pub namesrv: Arc<crate::namesrv::admin::NamesrvState>,
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
        // The defaults until a node sets what it runs with ([`crate::node`] does at start).
        let settings = crate::node_config::NodeConfig::default();
        let namesrv =
            crate::namesrv::admin::NamesrvState::new(settings.namesrv_port, settings.bind_address);
        NodeTables {
            settings: Arc::new(live_settings::LiveSettings::new(settings, 0)),
            namesrv: Arc::new(namesrv),
            pop_wakes: Arc::new(pop::wake::AnyQueueWakes::default()),
            request_modes: Arc::new(request_modes),
            delay_offsets: Arc::new(delay_offsets),
            topics: Arc::new(topics),
            groups: Arc::new(consumers::Groups::new()),
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
    pub(crate) groups: Arc<consumers::Groups>,
    pub(crate) consumer_offsets: Arc<consumer_offsets::ConsumerOffsets>,
    pub(crate) links: Arc<notify::Links>,
    pub(crate) locks: Arc<queue_locks::QueueLocks>,
    pub(crate) subscription_groups: Arc<subscription_groups::SubscriptionGroups>,
    /// Closed connections whose clients are yet to leave their groups.
    pub(crate) closed: consumers::ClosedConnections,
    pub(crate) shard: ShardContext,
    pub(crate) metrics: Arc<ShardMetrics>,
    /// What pulls returned, by topic and group ([`stats_sampler`]).
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
    pub(crate) request_modes: Arc<request_modes::RequestModes>,
    pub(crate) settings: Arc<live_settings::LiveSettings>,
    pub(crate) namesrv: Arc<crate::namesrv::admin::NamesrvState>,
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
            request_modes: tables.request_modes,
            settings: tables.settings,
            namesrv: tables.namesrv,
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
    pub fn groups(&self) -> &consumers::Groups {
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

    /// Gives this shard its POP state (once, at start).
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

    /// Handles one request as it arrived on this shard: forwards it to the shard that
    /// owns its queue, or answers it here. `None` for requests that take no response.
    pub async fn handle(
        &self,
        mut request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        // Counted here, where the request arrived, not again on the owner shard.
        let started = std::time::Instant::now();
        let code = request.code;
        self.metrics.request(code);
        // The marker of the shards' own copies ([`fan_out`]) is never a client's to set.
        request.ext_fields.remove(query::SHARD_ONLY);
        request.ext_fields.remove(pop::NO_PARK);
        let response = match self.owner_of(&mut request) {
            Some(owner) if owner != self.shard.id() => {
                ShardMetrics::add(&self.metrics.forwarded, 1);
                Box::pin(self.shard.forward(owner, request, peer)).await
            }
            _ => self.handle_owned(request, peer).await,
        };
        if let Some(response) = &response {
            self.metrics
                .response(response.code, Family::of(code), started.elapsed());
        }
        response
    }

    /// The shard that must answer `request`, if it names a queue. A send that leaves the
    /// queue to the broker gets one here (written into its header), preferring a queue of
    /// this shard; a header too broken to route is answered locally, with the handler's
    /// own error.
    fn owner_of(&self, request: &mut RemotingCommand) -> Option<u8> {
        if matches!(
            request.code,
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2
        ) {
            // Before routing: a retry that is due for the DLQ goes to the DLQ's owner.
            send_back::dead_letter_if_due(self, request);
        }
        if self.shard.count() == 1 {
            return None;
        }
        if request.code == request::VIEW_MESSAGE_BY_ID
            || request.code == request::CONSUMER_SEND_MSG_BACK
        {
            // Both name a record by its CommitLog offset: the shard is its top byte (D4).
            return query::view_owner(request, self.shard.count());
        }
        let (fields, topic, queue_id) = routing::named_queue(request)?;
        let delay_level = if fields.is_send {
            self.delay_level_of(request)
        } else {
            None
        };
        if let (Some(level), true) = (delay_level, queue_id >= 0) {
            // Stored on the owner of its level's queue (`delay`); the real queue needs
            // picking here only when the broker is to pick it.
            return Some(self.shard.owner(SCHEDULE_TOPIC, level as i32 - 1));
        }
        if queue_id >= 0 {
            return Some(self.shard.owner(topic, queue_id));
        }
        // A send the broker refuses is answered here, before a topic is created for it.
        if !fields.is_send
            || validate_topic(topic).is_err()
            || names::is_not_allowed_send_topic(topic)
        {
            return None;
        }
        let topic = topic.to_owned();
        let config = self.topics.get_or_create(&topic, self.now_ms()).ok()?;
        let mut counter = self.next_queue.get();
        let queue_id = routing::pick_queue(
            &topic,
            config.write_queue_nums,
            self.shard.id(),
            self.shard.count(),
            &mut counter,
        );
        self.next_queue.set(counter);
        request.put_ext(fields.queue_id, queue_id);
        Some(match delay_level {
            Some(level) => self.shard.owner(SCHEDULE_TOPIC, level as i32 - 1),
            None => self.shard.owner(&topic, queue_id),
        })
    }

    /// The delay level a single-message send asks for, as [`delay::requested_level`]
    /// reads it on the shard that stores it; `None` for a plain send, a batch (refused
    /// where it lands) or a header too broken to say (answered where it lands).
    fn delay_level_of(&self, request: &RemotingCommand) -> Option<u32> {
        let properties = match request.code {
            request::SEND_MESSAGE => request.opt_str("properties")?,
            request::SEND_MESSAGE_V2 => request.opt_str("i")?,
            _ => return None,
        };
        if !properties.contains(delay::DELAY) {
            return None;
        }
        let header = SendMessageRequestHeader::from_command(request).ok()?;
        delay::requested_level(
            &header.properties,
            header.sys_flag,
            &self.config.delay_levels,
        )
        .ok()
        .flatten()
    }

    /// Answers a request whose queue (if it names one) this shard owns.
    pub async fn handle_owned(
        &self,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        let response = match request.code {
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2 => {
                Box::pin(send::send_message(self, &request, peer)).await
            }
            request::SEND_BATCH_MESSAGE => Box::pin(send::send_batch(self, &request, peer)).await,
            request::PULL_MESSAGE | request::LITE_PULL_MESSAGE => {
                Box::pin(pull::pull(self, &request)).await
            }
            request::QUERY_MESSAGE => Box::pin(query::query_message(self, &request, peer)).await,
            request::VIEW_MESSAGE_BY_ID => query::view_message(self, &request),
            request::GET_MAX_OFFSET => offsets::max_offset(self, &request),
            request::GET_MIN_OFFSET => offsets::min_offset(self, &request),
            request::SEARCH_OFFSET_BY_TIMESTAMP => offsets::search_by_timestamp(self, &request),
            request::GET_EARLIEST_MSG_STORETIME => offsets::earliest_store_time(self, &request),
            request::UPDATE_AND_CREATE_TOPIC => {
                topic_requests::update_and_create(self, &request).await
            }
            request::GET_ALL_TOPIC_CONFIG => topic_requests::get_all(self, &request),
            request::DELETE_TOPIC_IN_BROKER => topic_requests::delete(self, &request).await,
            request::QUERY_CONSUMER_OFFSET => consumer_offsets::query(self, &request),
            request::UPDATE_CONSUMER_OFFSET => {
                Box::pin(pop::reset::update_consumer_offset(self, &request)).await
            }
            request::HEART_BEAT => consumers::heartbeat(self, &request, peer),
            request::UNREGISTER_CLIENT => consumers::unregister_client(self, &request),
            request::GET_CONSUMER_LIST_BY_GROUP => consumers::consumer_list(self, &request),
            request::QUERY_ASSIGNMENT => assignment::query_assignment(self, &request),
            request::GET_BROKER_RUNTIME_INFO => {
                Box::pin(runtime_info::runtime_info(self, &request, peer)).await
            }
            request::GET_TOPIC_STATS_INFO => {
                Box::pin(topic_stats::topic_stats(self, &request, peer)).await
            }
            request::GET_CONSUME_STATS => {
                Box::pin(consume_stats::consume_stats(self, &request, peer)).await
            }
            request::INVOKE_BROKER_TO_RESET_OFFSET => {
                Box::pin(reset_offset::reset_offset(self, &request, peer)).await
            }
            request::GET_CONSUMER_CONNECTION_LIST => {
                consumer_connections::consumer_connections(self, &request)
            }
            request::CONSUMER_SEND_MSG_BACK => Box::pin(send_back::send_back(self, &request)).await,
            request::LOCK_BATCH_MQ => lock_requests::lock_batch(self, &request, peer),
            request::UNLOCK_BATCH_MQ => lock_requests::unlock_batch(self, &request),
            request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => {
                subscription_group_requests::get_all(self, &request)
            }
            request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => {
                Box::pin(subscription_group_requests::update_and_create(
                    self, &request,
                ))
                .await
            }
            request::DELETE_SUBSCRIPTIONGROUP => {
                Box::pin(subscription_group_requests::delete(self, &request)).await
            }
            request::GET_ALL_DELAY_OFFSET => delay::offsets::get_all(self, &request),
            request::POP_MESSAGE => Box::pin(pop::pop_message(self, &request)).await,
            request::ACK_MESSAGE => Box::pin(pop::ack_message(self, &request)).await,
            request::BATCH_ACK_MESSAGE => Box::pin(pop::batch_ack(self, &request)).await,
            request::CHANGE_MESSAGE_INVISIBLETIME => {
                Box::pin(pop::change_invisible_time(self, &request)).await
            }
            request::SET_MESSAGE_REQUEST_MODE => {
                request_modes::set_message_request_mode(self, &request).await
            }
            request::GET_TOPIC_CONFIG => topic_config_request::get_topic_config(self, &request),
            request::GET_PRODUCER_CONNECTION_LIST => {
                producer_connections::producer_connections(self, &request)
            }
            request::GET_BROKER_CONFIG => broker_config_requests::get_broker_config(self, &request),
            request::UPDATE_BROKER_CONFIG => {
                broker_config_requests::update_broker_config(self, &request)
            }
            request::GET_BROKER_CONSUME_STATS => {
                Box::pin(broker_consume_stats::broker_consume_stats(
                    self, &request, peer,
                ))
                .await
            }
            request::CLONE_GROUP_OFFSET => clone_offset::clone_group_offset(self, &request),
            request::VIEW_BROKER_STATS_DATA => stats_data::view_broker_stats_data(&request),
            request::QUERY_TOPIC_CONSUME_BY_WHO => {
                consume_by_who::query_topic_consume_by_who(self, &request)
            }
            request::GET_CONSUMER_RUNNING_INFO => {
                Box::pin(client_calls::consumer_running_info(self, &request)).await
            }
            other => RemotingCommand::response_to(
                &request,
                response::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(" request type {other} not supported")),
            ),
        };
        Some(response)
    }
}

impl OwnerHandler for Broker {
    /// A forwarded single-message send is stored without a task, its response going
    /// straight to the asking connection; anything else runs in a task.
    fn handle_owned_now(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
        reply: DirectReply,
    ) {
        if matches!(
            request.code,
            request::SEND_MESSAGE | request::SEND_MESSAGE_V2
        ) {
            send::send_message_then(&self, &request, peer, move |response| {
                reply.answer(Some(response))
            });
        } else {
            run_owned(self, request, peer, reply);
        }
    }

    async fn handle_owned(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        Broker::handle_owned(&self, request, peer).await
    }

    /// A delayed message another shard's scheduler delivers to a queue of this shard.
    fn put_owned(
        self: Rc<Self>,
        record: crate::store::record::RecordInput,
        reply: crate::shard::mailbox::PutReply,
    ) {
        self.store.put_with(record, move |outcome| {
            // The scheduler may have stopped meanwhile; its cursor did not move then.
            let _ = reply.send(outcome);
        });
    }
}

impl RequestHandler for Broker {
    /// Takes a single-message send whose queue this shard owns: checked and queued in the
    /// store here, answered from the store's callback (see [`send::send_message_then`]).
    /// Counted in the metrics as [`Broker::handle`] counts. Anything else goes back.
    fn handle_now(
        self: Rc<Self>,
        mut request: RemotingCommand,
        peer: SocketAddr,
        reply: Reply,
    ) -> Option<RemotingCommand> {
        let code = request.code;
        if !matches!(code, request::SEND_MESSAGE | request::SEND_MESSAGE_V2) {
            return Some(request);
        }
        let started = std::time::Instant::now();
        let metrics = self.metrics.clone();
        // Counted as `handle` counts: here, where the request arrived, whoever stores it.
        let respond = move |response: RemotingCommand| {
            metrics.response(response.code, Family::of(code), started.elapsed());
            reply.send(response);
        };
        match self.owner_of(&mut request) {
            Some(owner) if owner != self.shard.id() => {
                match self.shard.try_forward(owner, request, peer, respond) {
                    Ok(()) | Err(NotForwarded::Unavailable) => {}
                    // A full mailbox: a task waits for room, as `handle` does.
                    Err(NotForwarded::Full(request)) => return Some(*request),
                }
                ShardMetrics::add(&self.metrics.forwarded, 1);
            }
            _ => send::send_message_then(&self, &request, peer, respond),
        }
        self.metrics.request(code);
        None
    }

    fn connection_opened(&self, peer: SocketAddr, outbound: Outbound) {
        self.links.open(peer, outbound);
    }

    /// The clients leave their groups (and the members left are told) in
    /// [`consumers::reap_closed_connections`], a bounded step per turn of the shard.
    fn response_arrived(&self, peer: SocketAddr, response: RemotingCommand) {
        self.links.answered(peer, response);
    }

    fn connection_closed(&self, peer: SocketAddr) {
        self.links.close(peer);
        self.locks.connection_closed(peer);
        self.closed.push(peer);
    }

    async fn handle(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        Broker::handle(&self, request, peer).await
    }
}

pub(crate) use crate::remoting::command::bad_header;

/// `topic` and `queueId`, the pair most requests start with.
pub(crate) fn topic_and_queue(request: &RemotingCommand) -> Result<(&str, i32), FieldError> {
    Ok((request.get_str("topic")?, request.get_i32("queueId")?))
}
