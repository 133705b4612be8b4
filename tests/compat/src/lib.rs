//! The compatibility suite's harness: a real `ringmq serve` process ([`node::Node`]) and
//! the stock Rust RocketMQ client (`rocketmq-client-rust`) driving it.
//!
//! With `COMPAT_TARGET=rocketmq` ([`node::target`]) the same scenarios drive the real
//! Apache RocketMQ 5.5.0 name server and broker instead (`scripts/rocketmq.sh`). What
//! differs there is said where it happens: [`prepare_topic`] creates a topic the real name
//! server would not route yet, [`ringmq_specific`] skips (and prints) a check of ringmq's
//! own internals, [`timer_precision_ms`] is RocketMQ's timer granularity.
//!
//! Each scenario in `tests/` is a plain `#[test]` that starts its own node on free ports in
//! a temporary directory and runs its client code on a client runtime from [`run_clients`].
//! Waiting is always a bounded poll of a condition ([`wait_until`]), never a bare sleep.

pub mod cluster;
pub mod node;
pub mod raw;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cheetah_string::CheetahString;
use rocketmq_client_rust::{
    AllocateMessageQueueStrategy, ClientConfig, ClientResult, ClientRuntime, ClientRuntimeConfig,
    ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, ConsumeOrderlyContext,
    ConsumeOrderlyStatus, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently, MessageListenerOrderly,
};
use rocketmq_model::allocation::AllocateMessageQueueAveragely;
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

/// How long a scenario waits for messages to arrive.
pub const DELIVERY_DEADLINE: Duration = Duration::from_secs(90);
/// How long a consumer group may take to settle its queue assignment.
pub const REBALANCE_DEADLINE: Duration = Duration::from_secs(60);

/// A seed for names and bodies, printed so a failing run can be told apart in the logs.
pub fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    nanos ^ ((std::process::id() as u64) << 32)
}

/// Once per process: the client's rebalance period (a client setting read from the
/// environment when a client instance starts) is shortened from 20 s to 1 s so a group
/// settles within seconds, and the client's logs go to stderr when `RUST_LOG` is set.
/// Every harness entry point ([`run_clients`], [`node::Node::start`]) calls this first, so
/// the environment is only changed before any test thread spawns a process or a client.
pub fn init_process() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        const KEY: &str = "rocketmq.client.rebalance.waitInterval";
        if std::env::var_os(KEY).is_none() {
            // Runs before any test thread has spawned a node or a client: each harness
            // entry point calls init_process first, and the OnceLock makes the others
            // wait here. (scripts/compat.sh sets the variable, so this is for bare runs.)
            std::env::set_var(KEY, "1000");
        }
        if std::env::var_os("RUST_LOG").is_some() {
            let config = rocketmq_observability::TelemetryBootstrapConfig::default();
            match rocketmq_observability::install_global(&config) {
                Ok(guard) => {
                    // Lives as long as the process.
                    std::mem::forget(guard);
                }
                Err(error) => eprintln!("client logging not installed: {error}"),
            }
        }
    });
}

/// Runs `scenario` on a fresh client runtime and shuts the runtime down afterwards.
pub fn run_clients<F, Fut>(name: &str, scenario: F)
where
    F: FnOnce(Arc<ClientRuntime>) -> Fut,
    Fut: Future<Output = ()>,
{
    init_process();
    let owner = RuntimeOwner::plan(client_runtime_config(name))
        .expect("runtime configuration")
        .build()
        .expect("build the client runtime");
    let telemetry = rocketmq_observability::TelemetryRuntimeGuard::noop();
    let runtime = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        telemetry.handle(),
    )
    .expect("create the client runtime");
    owner.block_on(scenario(Arc::clone(&runtime)));
    owner.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(30), runtime.shutdown()).await;
        let _ = owner.shutdown_tasks().await;
    });
    let _ = owner.shutdown_background();
}

/// Threads the client's blocking lanes may use, and the work each lane may queue.
const CLIENT_BLOCKING_THREADS: usize = 32;
const CLIENT_CONSUME_THREADS: usize = 16;
const CLIENT_CONSUME_QUEUE_DEPTH: usize = 4096;

/// The client runtime a scenario runs on: the default, except for the metadata-io lane.
///
/// The push consumer runs every listener call on that lane
/// (`spawn_client_blocking_io_with_context`). By default it gets 2 threads per core and
/// 8 queued tasks per core: 4 and 16 on a 2-core machine, shared by every client in the
/// runtime. When they are full, the call fails with `runtime.capacity.exhausted` and the
/// listener is never called. In CLUSTERING mode that message is redelivered. In
/// BROADCASTING mode the client drops it ("BROADCASTING, the message consume failed, drop
/// it"). Beside two busy loops, the broadcasting scenario lost messages this way in 3 of
/// 6 runs with the default sizing, and in none of 12 with this one. Java's consumer has 20
/// threads and an unbounded queue, so this sizing is closer to what a stock application
/// runs with.
pub fn client_runtime_config(name: &str) -> RuntimeConfig {
    let mut config = RuntimeConfig {
        thread_name: format!("compat-{name}"),
        ..Default::default()
    }
    .with_max_blocking_threads(CLIENT_BLOCKING_THREADS)
    .expect("a supported blocking-thread limit");
    let lane = &mut config.blocking_lane_policies.metadata_io;
    lane.max_concurrency = CLIENT_CONSUME_THREADS;
    lane.max_queue_depth = CLIENT_CONSUME_QUEUE_DEPTH;
    config.validate().expect("a valid client runtime config");
    config
}

/// Polls `condition` every 50 ms until it holds; panics with `what` (and `detail()`) when
/// `deadline` passes first.
pub async fn wait_until(
    what: &str,
    deadline: Duration,
    mut condition: impl FnMut() -> bool,
    detail: impl Fn() -> String,
) {
    let until = Instant::now() + deadline;
    loop {
        if condition() {
            return;
        }
        if Instant::now() >= until {
            panic!(
                "timed out after {deadline:?} waiting for {what}: {}",
                detail()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a check of ringmq's own behaviour (not RocketMQ's protocol: its shard layout,
/// its version string, its log or store) applies: true under ringmq; under the rocketmq
/// target, prints that `check` is skipped and why, and returns false.
pub fn ringmq_specific(check: &str) -> bool {
    if node::is_rocketmq() {
        println!("SKIPPED under COMPAT_TARGET=rocketmq (ringmq-specific): {check}");
        false
    } else {
        true
    }
}

/// How early a timer message (5.x `TIMER_DELAY_MS`, `TIMER_DELAY_SEC`, `TIMER_DELIVER_MS`)
/// may be due compared with the time its sender asked for: 0 on ringmq; on RocketMQ its
/// `timerPrecisionMs` (default 1000), because the broker rounds a due time down to a
/// multiple of it (HookUtils.handleScheduleMessage: `deliverMs / precision * precision`,
/// and a whole multiple one precision earlier) and stores that as `TIMER_OUT_MS`.
pub fn timer_precision_ms() -> i64 {
    if node::is_rocketmq() {
        1000
    } else {
        0
    }
}

/// Queues of a topic a scenario creates before anything is sent to it: ringmq's
/// `defaultTopicQueueNums` (8), so both targets split the same queues.
pub const PREPARED_TOPIC_QUEUES: u32 = 8;

/// Makes `topic` routable before a consumer subscribes to it, for scenarios that start
/// their consumers before the first send.
///
/// ringmq: nothing. Its name server creates an unknown topic on the first route query
/// (`defaultTopicQueueNums` queues, 8), which the scenarios exercise as before.
///
/// RocketMQ: its name server answers TOPIC_NOT_EXIST for a topic no broker has registered
/// (a producer falls back to `TBW102` and the broker creates the topic, with 4 queues, on
/// the first send), so a consumer started first would find no queues until its next route
/// poll (30 s). The topic is created through the stock admin (UPDATE_AND_CREATE_TOPIC,
/// [`PREPARED_TOPIC_QUEUES`] read and write queues, perm RW) and this waits (bounded) until
/// the name server routes it (GET_ROUTEINFO_BY_TOPIC).
pub async fn prepare_topic(runtime: &Arc<ClientRuntime>, namesrv: &str, broker: &str, topic: &str) {
    use rocketmq_client_rust::{DefaultMQAdminExt, TopicAdmin};
    if !node::is_rocketmq() {
        return;
    }
    let mut admin = DefaultMQAdminExt::new(Arc::clone(runtime));
    admin.set_namesrv_addr(namesrv);
    admin.start().await.expect("start the admin client");
    let config = rocketmq_model::common::config::TopicConfig::with_perm(
        topic,
        PREPARED_TOPIC_QUEUES,
        PREPARED_TOPIC_QUEUES,
        6,
    );
    admin
        .create_and_update_topic_config(broker.to_string().into(), config)
        .await
        .unwrap_or_else(|e| panic!("create topic {topic} on {broker}: {e}"));
    admin.shutdown().await;
    let namesrv = namesrv.to_string();
    let routed = || {
        raw::request(&namesrv, 105, serde_json::json!({"topic": topic}))
            .is_ok_and(|response| response.code == 0)
    };
    wait_until(
        "the RocketMQ name server to route the created topic",
        Duration::from_secs(30),
        routed,
        || format!("topic {topic}"),
    )
    .await;
    println!(
        "rocketmq: topic {topic} created with {PREPARED_TOPIC_QUEUES} queues before its \
         consumers start (RocketMQ's name server does not create topics on a route query)"
    );
}

/// A client config naming its instance, so two members in one process are two clients.
pub fn client_config(namesrv: &str, instance: &str) -> ClientConfig {
    let mut config = ClientConfig {
        namesrv_addr: Some(namesrv.to_string().into()),
        vip_channel_enabled: false,
        ..Default::default()
    };
    config.set_instance_name(instance.to_string().into());
    config
}

/// A started producer.
pub async fn start_producer(
    runtime: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
) -> DefaultMQProducer {
    let mut producer = DefaultMQProducer::builder(Arc::clone(runtime))
        .client_config(client_config(namesrv, &format!("{group}-producer")))
        .producer_group(group.to_string())
        .name_server_addr(namesrv.to_string())
        .send_msg_timeout(5_000)
        .build();
    producer.start().await.expect("start the producer");
    producer
}

/// One delivered message, as a listener saw it.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub member: String,
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub body: String,
    pub tags: Option<String>,
    pub keys: Vec<String>,
    /// The message's timestamps as delivered (`bornTimestamp`, `storeTimestamp`), ms.
    pub born_timestamp: i64,
    pub store_timestamp: i64,
    /// The wall clock when the listener got it, ms since the epoch.
    pub received_ms: i64,
    /// Its `REAL_TOPIC` and `DELAY` properties (set on a delayed message, `DELAY` only
    /// until it is delivered).
    pub real_topic: Option<String>,
    pub delay: Option<String>,
    /// The properties named in [`PICKED_PROPERTIES`] that the message carries.
    pub picked: BTreeMap<String, String>,
    /// The stored record's sysFlag and PREPARED TRANSACTION OFFSET field (a committed
    /// transactional message: `TRANSACTION_COMMIT_TYPE` and its half's CommitLog offset).
    pub sys_flag: i32,
    pub prepared_transaction_offset: i64,
}

/// Properties a [`Delivery`] keeps besides those it has fields for: the 5.x timer ones,
/// the real queue, the unique key (the msgId the producer got), and the transactional
/// ones (`TRAN_MSG`, `PGROUP`, `__transactionId__`).
pub const PICKED_PROPERTIES: [&str; 10] = [
    "TIMER_OUT_MS",
    "TIMER_DEQUEUE_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "TIMER_DELIVER_MS",
    "REAL_QID",
    "UNIQ_KEY",
    "TRAN_MSG",
    "PGROUP",
    "__transactionId__",
];

/// Collects every delivery of one member into a shared list.
#[derive(Clone)]
pub struct Collector {
    member: String,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl Collector {
    pub fn new(member: &str) -> Collector {
        Collector {
            member: member.to_string(),
            deliveries: Arc::default(),
        }
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.deliveries.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bodies delivered so far, with how often each was delivered.
    pub fn body_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for delivery in self.deliveries.lock().unwrap().iter() {
            *counts.entry(delivery.body.clone()).or_default() += 1;
        }
        counts
    }
}

impl MessageListenerConcurrently for Collector {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        self.record(msgs);
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// The same collector as an orderly listener: the client calls it for one queue at a time,
/// holding that queue's lock (LOCK_BATCH_MQ), so the deliveries of a queue arrive in order.
impl MessageListenerOrderly for Collector {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &mut ConsumeOrderlyContext,
    ) -> ClientResult<ConsumeOrderlyStatus> {
        self.record(msgs);
        Ok(ConsumeOrderlyStatus::Success)
    }
}

impl Collector {
    fn record(&self, msgs: &[&MessageExt]) {
        let mut deliveries = self.deliveries.lock().unwrap();
        let received_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64);
        for msg in msgs {
            let inner = msg.message_inner();
            deliveries.push(Delivery {
                member: self.member.clone(),
                topic: msg.topic().to_string(),
                queue_id: msg.queue_id(),
                queue_offset: msg.queue_offset(),
                body: String::from_utf8_lossy(inner.body_slice()).into_owned(),
                tags: inner.tags().map(str::to_string),
                keys: inner.keys().unwrap_or_default(),
                born_timestamp: msg.born_timestamp(),
                store_timestamp: msg.store_timestamp(),
                received_ms,
                real_topic: inner.property("REAL_TOPIC").map(str::to_string),
                delay: inner.property("DELAY").map(str::to_string),
                picked: PICKED_PROPERTIES
                    .iter()
                    .filter_map(|key| Some((key.to_string(), inner.property(key)?.to_string())))
                    .collect(),
                sys_flag: msg.sys_flag(),
                prepared_transaction_offset: msg.prepared_transaction_offset(),
            });
        }
    }
}

/// The averaging allocation strategy, recording each allocation it computes so a test can
/// see when a group has settled (every member saw every member, and the queues are split).
pub struct RecordingAllocator {
    inner: AllocateMessageQueueAveragely,
    /// Per topic: every allocation computed, in order.
    log: Mutex<HashMap<String, Vec<Allocation>>>,
}

/// One allocation a member computed.
#[derive(Clone, Debug)]
pub struct Allocation {
    pub members: usize,
    pub all: BTreeSet<i32>,
    pub mine: BTreeSet<i32>,
}

impl RecordingAllocator {
    pub fn new() -> Arc<RecordingAllocator> {
        Arc::new(RecordingAllocator {
            inner: AllocateMessageQueueAveragely,
            log: Mutex::default(),
        })
    }

    /// The allocations computed for `topic` so far.
    pub fn allocations(&self, topic: &str) -> Vec<Allocation> {
        self.log
            .lock()
            .unwrap()
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }
}

impl AllocateMessageQueueStrategy for RecordingAllocator {
    fn allocate(
        &self,
        consumer_group: &CheetahString,
        current_cid: &CheetahString,
        mq_all: &[MessageQueue],
        cid_all: &[CheetahString],
    ) -> rocketmq_error::Result<Vec<MessageQueue>> {
        let result = self
            .inner
            .allocate(consumer_group, current_cid, mq_all, cid_all)?;
        if let Some(first) = mq_all.first() {
            self.log
                .lock()
                .unwrap()
                .entry(first.topic_str().to_string())
                .or_default()
                .push(Allocation {
                    members: cid_all.len(),
                    all: mq_all.iter().map(MessageQueue::queue_id).collect(),
                    mine: result.iter().map(MessageQueue::queue_id).collect(),
                });
        }
        Ok(result)
    }

    fn get_name(&self) -> &'static str {
        "AVG"
    }
}

/// True once every member has computed at least two allocations for `topic` that saw all
/// `members.len()` members (the second proves the first was applied), and the latest ones
/// split the topic's queues with no queue held twice and none left over.
pub fn group_settled(members: &[&RecordingAllocator], topic: &str) -> bool {
    let mut held: Vec<i32> = Vec::new();
    let mut all = None;
    for member in members {
        let allocations = member.allocations(topic);
        let full: Vec<&Allocation> = allocations
            .iter()
            .filter(|a| a.members == members.len())
            .collect();
        if full.len() < 2 || allocations.last().unwrap().members != members.len() {
            return false;
        }
        let last = full.last().unwrap();
        held.extend(last.mine.iter().copied());
        all = Some(last.all.clone());
    }
    let Some(all) = all else { return false };
    let distinct: BTreeSet<i32> = held.iter().copied().collect();
    distinct.len() == held.len() && distinct == all
}

/// Describes the members' latest allocations for `topic`, for failure messages.
pub fn describe_allocations(members: &[&RecordingAllocator], topic: &str) -> String {
    members
        .iter()
        .enumerate()
        .map(|(i, m)| format!("member {i}: {:?}", m.allocations(topic).last()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a push consumer is built with.
pub struct ConsumerSpec<'a> {
    pub namesrv: &'a str,
    pub group: &'a str,
    pub instance: &'a str,
    pub topic: &'a str,
    pub expression: &'a str,
    pub model: MessageModel,
}

/// A started push consumer with its collector and its allocation recorder.
pub struct Member {
    pub consumer: DefaultMQPushConsumer,
    pub collector: Collector,
    pub allocator: Arc<RecordingAllocator>,
}

impl Member {
    pub async fn shutdown(mut self) {
        self.consumer.shutdown().await;
    }
}

/// Builds, subscribes and starts a push consumer that consumes from the first offset when
/// its group has no committed offset.
pub async fn start_member(runtime: &Arc<ClientRuntime>, spec: ConsumerSpec<'_>) -> Member {
    start_member_as(runtime, spec, false).await
}

/// [`start_member`] with the collector registered as an orderly listener.
pub async fn start_orderly_member(runtime: &Arc<ClientRuntime>, spec: ConsumerSpec<'_>) -> Member {
    start_member_as(runtime, spec, true).await
}

async fn start_member_as(
    runtime: &Arc<ClientRuntime>,
    spec: ConsumerSpec<'_>,
    orderly: bool,
) -> Member {
    let collector = Collector::new(spec.instance);
    let allocator = RecordingAllocator::new();
    let mut consumer = DefaultMQPushConsumer::builder(Arc::clone(runtime))
        .client_config(client_config(spec.namesrv, spec.instance))
        .name_server_addr(spec.namesrv.to_string())
        .consumer_group(spec.group.to_string())
        .message_model(spec.model)
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .allocate_message_queue_strategy(allocator.clone())
        .build();
    consumer
        .subscribe(spec.topic, spec.expression)
        .await
        .expect("subscribe");
    if orderly {
        consumer.register_message_listener_orderly(collector.clone());
    } else {
        consumer.register_message_listener_concurrently(collector.clone());
    }
    consumer.start().await.expect("start the push consumer");
    Member {
        consumer,
        collector,
        allocator,
    }
}
