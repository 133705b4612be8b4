//! `ringmq bench produce`, `ringmq bench consume` and the embedded `ringmq bench`: load
//! generators that speak the remoting protocol to a node through the in-project client.
//!
//! Everything runs on one thread: a tokio current-thread runtime and a `LocalSet`, like a
//! shard. Producers are tasks sharing their connection (requests are multiplexed on it by
//! opaque); consumers are one task per queue, each on its connection's client.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::latency::{Latencies, LatencySummary};
use crate::client::{pull_request, queue_request, send_request_v2, Client};
use crate::config::FlushMode;
use crate::remoting::codes::{request as codes, response};
use crate::remoting::send_header::{encode_batch, BatchItem};
use crate::remoting::RemotingCommand;
use crate::store::properties;
use crate::store::record::{decode, Decoded, Verify};

/// How a producer sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// Waits for each response before the next send.
    Sync,
    /// Keeps up to `inflight` sends outstanding.
    Async,
    /// Fire and forget: no response, no latency.
    Oneway,
}

impl SendMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SendMode::Sync => "sync",
            SendMode::Async => "async",
            SendMode::Oneway => "oneway",
        }
    }
}

impl FromStr for SendMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "sync" => Ok(SendMode::Sync),
            "async" => Ok(SendMode::Async),
            "oneway" => Ok(SendMode::Oneway),
            other => Err(format!("{other}: expected sync, async or oneway")),
        }
    }
}

/// Where a consumer starts in each queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FromOffset {
    Earliest,
    Latest,
}

impl FromStr for FromOffset {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "earliest" => Ok(FromOffset::Earliest),
            "latest" => Ok(FromOffset::Latest),
            other => Err(format!("{other}: expected earliest or latest")),
        }
    }
}

/// Options of `ringmq bench produce`.
#[derive(Clone, Debug)]
pub struct ProduceOptions {
    pub addr: SocketAddr,
    pub connections: usize,
    pub producers_per_connection: usize,
    pub size: usize,
    pub topic: String,
    pub topics: usize,
    pub queues: usize,
    pub mode: SendMode,
    pub inflight: usize,
    pub batch: usize,
    /// Messages per second over all producers; 0 is unlimited.
    pub rate: u64,
    pub messages: Option<u64>,
    pub duration: Option<Duration>,
    pub progress: bool,
}

impl ProduceOptions {
    pub fn new(addr: SocketAddr) -> ProduceOptions {
        ProduceOptions {
            addr,
            connections: 4,
            producers_per_connection: 4,
            size: 1024,
            topic: "BenchTopic".into(),
            topics: 1,
            queues: 8,
            mode: SendMode::Sync,
            inflight: 32,
            batch: 1,
            rate: 0,
            messages: Some(200_000),
            duration: None,
            progress: false,
        }
    }
}

/// Options of `ringmq bench consume`.
#[derive(Clone, Debug)]
pub struct ConsumeOptions {
    pub addr: SocketAddr,
    pub topic: String,
    pub queues: usize,
    pub connections: usize,
    pub group: String,
    pub from: FromOffset,
    pub max_per_pull: usize,
    pub suspend: Duration,
    pub messages: Option<u64>,
    pub duration: Option<Duration>,
    pub progress: bool,
}

impl ConsumeOptions {
    pub fn new(addr: SocketAddr) -> ConsumeOptions {
        ConsumeOptions {
            addr,
            topic: "BenchTopic".into(),
            queues: 8,
            connections: 4,
            group: "ringmq-bench-consumer".into(),
            from: FromOffset::Earliest,
            max_per_pull: 32,
            suspend: Duration::from_millis(1000),
            messages: Some(200_000),
            duration: None,
            progress: false,
        }
    }
}

/// The figures a produce run ends with (`--json` prints this).
#[derive(Clone, Debug, Serialize)]
pub struct ProduceSummary {
    pub mode: String,
    pub connections: usize,
    pub producers: usize,
    pub size: usize,
    pub batch: usize,
    /// Messages acknowledged (sent, for oneway).
    pub messages: u64,
    /// Messages whose send failed.
    pub errors: u64,
    /// Failed requests by response code, or by I/O error kind (`io:...`).
    pub errors_by_code: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub msgs_per_sec: f64,
    pub mb_per_sec: f64,
    /// Send latency (per request) in microseconds.
    #[serde(flatten)]
    pub latency: LatencySummary,
}

/// The figures a consume run ends with.
#[derive(Clone, Debug, Serialize)]
pub struct ConsumeSummary {
    pub connections: usize,
    pub queues: usize,
    pub messages: u64,
    pub bytes: u64,
    pub pulls: u64,
    pub errors: u64,
    pub errors_by_code: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub msgs_per_sec: f64,
    pub mb_per_sec: f64,
    /// End-to-end latency (born timestamp to receipt) in microseconds.
    #[serde(flatten)]
    pub latency: LatencySummary,
}

/// Counters shared by the tasks of one run.
#[derive(Default)]
struct Counters {
    done: Cell<u64>,
    bytes: Cell<u64>,
    errors: Cell<u64>,
    errors_by_code: RefCell<BTreeMap<String, u64>>,
    latencies: RefCell<Latencies>,
}

impl Counters {
    fn error(&self, key: String, messages: u64) {
        self.errors.set(self.errors.get() + messages);
        *self.errors_by_code.borrow_mut().entry(key).or_default() += 1;
    }
}

fn per_second(count: f64, elapsed: f64) -> f64 {
    if elapsed > 0.0 {
        count / elapsed
    } else {
        0.0
    }
}

/// Prints one progress line a second until aborted.
async fn report_progress(what: &'static str, counters: Rc<Counters>) {
    let started = Instant::now();
    let mut previous = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let done = counters.done.get();
        eprintln!(
            "[{:>4.0}s] {done:>10} {what}  {:>9} msgs/s  p99 {:>6} us  errors {}",
            started.elapsed().as_secs_f64(),
            done - previous,
            counters.latencies.borrow().percentile_us(99.0),
            counters.errors.get()
        );
        previous = done;
    }
}

/// Runs `future` on a new thread with a current-thread runtime and a `LocalSet`.
fn on_own_thread<T, F>(name: &str, make: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<T>>>>
        + Send
        + 'static,
{
    let thread =
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || -> anyhow::Result<T> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let local = tokio::task::LocalSet::new();
                // As a task rather than the LocalSet's own future, which is polled again
                // whenever any task wakes: once per response otherwise (see node.rs).
                local.block_on(&runtime, async move {
                    tokio::task::spawn_local(make())
                        .await
                        .unwrap_or_else(|error| {
                            Err(anyhow::anyhow!("the benchmark panicked: {error}"))
                        })
                })
            })?;
    thread
        .join()
        .map_err(|_| anyhow::anyhow!("the benchmark thread panicked"))?
}

// ---------------------------------------------------------------------------------------
// Produce

struct ProduceRun {
    options: ProduceOptions,
    topics: Vec<String>,
    claimed: Cell<u64>,
    deadline: Option<Instant>,
    /// Token pacing: the earliest time the next claim may send.
    next_slot: Cell<Option<Instant>>,
    counters: Rc<Counters>,
}

impl ProduceRun {
    /// Claims the next batch: its first message number and its size; `None` once over.
    async fn claim(&self) -> Option<(u64, u64)> {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return None;
        }
        let first = self.claimed.get();
        let mut count = self.options.batch as u64;
        if let Some(limit) = self.options.messages {
            count = count.min(limit.saturating_sub(first));
            if count == 0 {
                return None;
            }
        }
        self.claimed.set(first + count);
        if self.options.rate > 0 {
            let now = Instant::now();
            let slot = self.next_slot.get().map_or(now, |next| next.max(now));
            let step = Duration::from_secs_f64(count as f64 / self.options.rate as f64);
            self.next_slot.set(Some(slot + step));
            if slot > now {
                tokio::time::sleep_until(slot).await;
            }
        }
        Some((first, count))
    }

    fn request(&self, body: &[u8], first: u64, count: u64) -> RemotingCommand {
        let topic = &self.topics[first as usize % self.topics.len()];
        let queue_id = ((first / self.topics.len() as u64) % self.options.queues as u64) as i32;
        if self.options.batch <= 1 {
            return send_request_v2(topic, queue_id, body, Some("TagA"), None);
        }
        let props = properties::encode([(properties::TAGS, "TagA"), (properties::WAIT, "true")]);
        let items: Vec<BatchItem> = (0..count)
            .map(|_| BatchItem {
                flag: 0,
                body: Bytes::copy_from_slice(body),
                properties: props.clone(),
            })
            .collect();
        let mut encoded = Vec::with_capacity(count as usize * (body.len() + 64));
        encode_batch(&items, &mut encoded).expect("bench messages fit a batch");
        let mut cmd = send_request_v2(topic, queue_id, body, None, None);
        cmd.code = codes::SEND_BATCH_MESSAGE;
        cmd.ext_fields.insert("m".into(), "true");
        cmd.body = Bytes::from(encoded);
        cmd
    }
}

/// Records the outcome of one send request of `count` messages.
fn account(
    counters: &Counters,
    size: usize,
    count: u64,
    outcome: std::io::Result<RemotingCommand>,
) {
    match outcome {
        Ok(answer) if answer.code == response::SUCCESS => {
            counters.done.set(counters.done.get() + count);
            counters
                .bytes
                .set(counters.bytes.get() + count * size as u64);
        }
        Ok(answer) => counters.error(answer.code.to_string(), count),
        Err(error) => counters.error(format!("io:{:?}", error.kind()), count),
    }
}

async fn producer(run: Rc<ProduceRun>, client: Client) {
    let options = &run.options;
    let body = vec![b'x'; options.size];
    let window = std::sync::Arc::new(Semaphore::new(options.inflight.max(1)));
    while let Some((first, count)) = run.claim().await {
        let cmd = run.request(&body, first, count);
        let counters = run.counters.clone();
        match options.mode {
            SendMode::Oneway => match client.oneway(cmd).await {
                Ok(()) => {
                    counters.done.set(counters.done.get() + count);
                    counters
                        .bytes
                        .set(counters.bytes.get() + count * options.size as u64);
                }
                Err(error) => counters.error(format!("io:{:?}", error.kind()), count),
            },
            SendMode::Sync => {
                let sent_at = Instant::now();
                let outcome = client.request(cmd).await;
                counters
                    .latencies
                    .borrow_mut()
                    .record_us(sent_at.elapsed().as_micros() as u64);
                account(&counters, options.size, count, outcome);
            }
            SendMode::Async => {
                let permit = window
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the window is never closed");
                let client = client.clone();
                let size = options.size;
                tokio::task::spawn_local(async move {
                    let sent_at = Instant::now();
                    let outcome = client.request(cmd).await;
                    counters
                        .latencies
                        .borrow_mut()
                        .record_us(sent_at.elapsed().as_micros() as u64);
                    account(&counters, size, count, outcome);
                    drop(permit);
                });
            }
        }
    }
    // Wait for the outstanding async sends.
    let _all = window
        .acquire_many(options.inflight.max(1) as u32)
        .await
        .expect("the window is never closed");
}

/// Runs a produce round; must be called inside a `LocalSet`.
pub async fn produce(options: ProduceOptions) -> anyhow::Result<ProduceSummary> {
    if options.connections == 0
        || options.producers_per_connection == 0
        || options.topics == 0
        || options.queues == 0
        || options.batch == 0
    {
        anyhow::bail!("--connections, --producers-per-connection, --topics, --queues and --batch must each be at least 1");
    }
    if options.messages.is_none() && options.duration.is_none() {
        anyhow::bail!("give --messages or --duration");
    }
    let mut clients = Vec::new();
    for _ in 0..options.connections {
        clients.push(
            Client::connect(options.addr)
                .await
                .map_err(|error| anyhow::anyhow!("connecting to {}: {error}", options.addr))?,
        );
    }
    let topics = if options.topics == 1 {
        vec![options.topic.clone()]
    } else {
        (0..options.topics)
            .map(|topic| format!("{}{topic}", options.topic))
            .collect()
    };
    let counters = Rc::new(Counters::default());
    let started = Instant::now();
    let run = Rc::new(ProduceRun {
        deadline: options.duration.map(|duration| started + duration),
        options: options.clone(),
        topics,
        claimed: Cell::new(0),
        next_slot: Cell::new(None),
        counters: counters.clone(),
    });
    let progress = options
        .progress
        .then(|| tokio::task::spawn_local(report_progress("sent", counters.clone())));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..options.producers_per_connection {
            tasks.push(tokio::task::spawn_local(producer(
                run.clone(),
                client.clone(),
            )));
        }
    }
    for task in tasks {
        task.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
    }
    let done = counters.done.get();
    let errors_by_code = counters.errors_by_code.borrow().clone();
    let latency = counters.latencies.borrow().summary();
    Ok(ProduceSummary {
        mode: options.mode.as_str().into(),
        connections: options.connections,
        producers: options.connections * options.producers_per_connection,
        size: options.size,
        batch: options.batch,
        messages: done,
        errors: counters.errors.get(),
        errors_by_code,
        elapsed_s: elapsed,
        msgs_per_sec: per_second(done as f64, elapsed),
        mb_per_sec: per_second(counters.bytes.get() as f64, elapsed) / 1e6,
        latency,
    })
}

/// Runs a produce round on its own thread.
pub fn run_produce(options: ProduceOptions) -> anyhow::Result<ProduceSummary> {
    on_own_thread("ringmq-bench-produce", move || Box::pin(produce(options)))
}

// ---------------------------------------------------------------------------------------
// Consume

struct ConsumeRun {
    options: ConsumeOptions,
    deadline: Option<Instant>,
    finished: Notify,
    pulls: Cell<u64>,
    counters: Rc<Counters>,
}

impl ConsumeRun {
    fn target_reached(&self) -> bool {
        self.options
            .messages
            .is_some_and(|limit| self.counters.done.get() >= limit)
    }
}

fn ext_u64(cmd: &RemotingCommand, field: &str) -> Option<u64> {
    cmd.ext_fields
        .get(field)
        .and_then(|value| value.parse().ok())
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros() as i64)
        .unwrap_or(0)
}

/// Counts the records of a pull body and records their end-to-end latency.
fn take_records(counters: &Counters, body: &[u8]) -> Result<(), String> {
    let now = now_us();
    let mut rest = body;
    let mut latencies = counters.latencies.borrow_mut();
    while !rest.is_empty() {
        match decode(rest, Verify::Structure) {
            Ok(Decoded::Record(view)) => {
                latencies.record_us((now - view.born_timestamp * 1000).max(1) as u64);
                counters.done.set(counters.done.get() + 1);
                counters
                    .bytes
                    .set(counters.bytes.get() + view.body.len() as u64);
                rest = &rest[view.total_size as usize..];
            }
            Ok(Decoded::Blank { .. }) => return Err("a blank record in a pull body".into()),
            Err(error) => return Err(error.to_string()),
        }
    }
    Ok(())
}

async fn consume_queue(run: Rc<ConsumeRun>, client: Client, queue_id: i32) {
    let options = &run.options;
    let counters = &run.counters;
    let start = match options.from {
        FromOffset::Earliest => codes::GET_MIN_OFFSET,
        FromOffset::Latest => codes::GET_MAX_OFFSET,
    };
    let mut offset = match client
        .request(queue_request(start, &options.topic, queue_id))
        .await
    {
        Ok(answer) if answer.code == response::SUCCESS => ext_u64(&answer, "offset").unwrap_or(0),
        Ok(answer) => {
            counters.error(answer.code.to_string(), 0);
            0
        }
        Err(error) => {
            counters.error(format!("io:{:?}", error.kind()), 0);
            0
        }
    };
    let suspend = (!options.suspend.is_zero()).then_some(options.suspend);
    let timeout = crate::client::DEFAULT_TIMEOUT + options.suspend;
    loop {
        let mut cmd = pull_request(
            &options.topic,
            queue_id,
            offset,
            options.max_per_pull as i32,
            suspend,
            None,
        );
        cmd.ext_fields
            .insert("consumerGroup".into(), options.group.clone());
        let outcome = client.request_with_timeout(cmd, timeout).await;
        run.pulls.set(run.pulls.get() + 1);
        match outcome {
            Ok(answer) => match answer.code {
                response::SUCCESS => {
                    if let Err(error) = take_records(counters, &answer.body) {
                        counters.error(format!("decode: {error}"), 0);
                    }
                    offset = ext_u64(&answer, "nextBeginOffset").unwrap_or(offset);
                }
                response::PULL_NOT_FOUND
                | response::PULL_RETRY_IMMEDIATELY
                | response::PULL_OFFSET_MOVED => {
                    offset = ext_u64(&answer, "nextBeginOffset").unwrap_or(offset);
                }
                code => {
                    counters.error(code.to_string(), 0);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Err(error) => {
                counters.error(format!("io:{:?}", error.kind()), 0);
                if client.is_closed() {
                    run.finished.notify_one();
                    return;
                }
            }
        }
        if run.target_reached() {
            run.finished.notify_one();
            return;
        }
    }
}

/// Runs a consume round; must be called inside a `LocalSet`.
pub async fn consume(options: ConsumeOptions) -> anyhow::Result<ConsumeSummary> {
    if options.connections == 0 || options.queues == 0 || options.max_per_pull == 0 {
        anyhow::bail!("--connections, --queues and --max-per-pull must each be at least 1");
    }
    if options.messages.is_none() && options.duration.is_none() {
        anyhow::bail!("give --messages or --duration");
    }
    let mut clients = Vec::new();
    for _ in 0..options.connections.min(options.queues) {
        clients.push(
            Client::connect(options.addr)
                .await
                .map_err(|error| anyhow::anyhow!("connecting to {}: {error}", options.addr))?,
        );
    }
    let counters = Rc::new(Counters::default());
    let started = Instant::now();
    let run = Rc::new(ConsumeRun {
        deadline: options.duration.map(|duration| started + duration),
        options: options.clone(),
        finished: Notify::new(),
        pulls: Cell::new(0),
        counters: counters.clone(),
    });
    let progress = options
        .progress
        .then(|| tokio::task::spawn_local(report_progress("received", counters.clone())));
    let tasks: Vec<_> = (0..options.queues)
        .map(|queue| {
            let client = clients[queue % clients.len()].clone();
            tokio::task::spawn_local(consume_queue(run.clone(), client, queue as i32))
        })
        .collect();
    // Ends on the target count, the deadline, or every queue task giving up.
    let all_closed = || clients.iter().all(Client::is_closed);
    loop {
        if run.target_reached() || all_closed() {
            break;
        }
        let notified = run.finished.notified();
        match run.deadline {
            Some(deadline) => {
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    break;
                }
            }
            None => notified.await,
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    for task in &tasks {
        task.abort();
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    let done = counters.done.get();
    let errors_by_code = counters.errors_by_code.borrow().clone();
    let latency = counters.latencies.borrow().summary();
    Ok(ConsumeSummary {
        connections: clients.len(),
        queues: options.queues,
        messages: done,
        bytes: counters.bytes.get(),
        pulls: run.pulls.get(),
        errors: counters.errors.get(),
        errors_by_code,
        elapsed_s: elapsed,
        msgs_per_sec: per_second(done as f64, elapsed),
        mb_per_sec: per_second(counters.bytes.get() as f64, elapsed) / 1e6,
        latency,
    })
}

/// Runs a consume round on its own thread.
pub fn run_consume(options: ConsumeOptions) -> anyhow::Result<ConsumeSummary> {
    on_own_thread("ringmq-bench-consume", move || Box::pin(consume(options)))
}

// ---------------------------------------------------------------------------------------
// Embedded: a node of our own, a produce round, then a consume round.

/// Options of the embedded `ringmq bench`.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    pub flush: FlushMode,
    pub messages: u64,
    pub size: usize,
    pub connections: usize,
    pub producers_per_connection: usize,
    pub mode: SendMode,
    pub progress: bool,
}

/// Both summaries of the embedded run (`--json` prints this).
#[derive(Clone, Debug, Serialize)]
pub struct EmbeddedSummary {
    pub flush: String,
    pub produce: ProduceSummary,
    pub consume: ConsumeSummary,
}

/// Starts a node in a temporary directory on free ports, produces, consumes the same
/// messages, and stops the node.
pub fn run_embedded(options: EmbeddedOptions) -> anyhow::Result<EmbeddedSummary> {
    let dir = tempfile::Builder::new().prefix("ringmq-bench-").tempdir()?;
    let mut node_options = crate::node::NodeOptions::new(dir.path());
    node_options.port = 0;
    node_options.namesrv_port = 0;
    node_options.flush = options.flush;
    let node = crate::node::start(node_options)?;
    let mut produce = ProduceOptions::new(node.addr());
    produce.messages = Some(options.messages);
    produce.size = options.size;
    produce.connections = options.connections;
    produce.producers_per_connection = options.producers_per_connection;
    produce.mode = options.mode;
    produce.progress = options.progress;
    let produced = run_produce(produce)?;
    let mut consume = ConsumeOptions::new(node.addr());
    consume.messages = Some(produced.messages);
    consume.connections = options.connections;
    consume.progress = options.progress;
    // Stop after a while even if some messages never come back.
    consume.duration = Some(Duration::from_secs(60));
    let consumed = run_consume(consume)?;
    node.shutdown()?;
    Ok(EmbeddedSummary {
        flush: options.flush.as_str().into(),
        produce: produced,
        consume: consumed,
    })
}

// ---------------------------------------------------------------------------------------
// Summaries

pub fn print_produce_summary(summary: &ProduceSummary) {
    println!(
        "ringmq bench produce: {} connections, {} producers, {} B messages, {} mode, batch {}",
        summary.connections, summary.producers, summary.size, summary.mode, summary.batch
    );
    println!(
        "  {} messages in {:.2} s: {:.0} msgs/s, {:.1} MB/s",
        summary.messages, summary.elapsed_s, summary.msgs_per_sec, summary.mb_per_sec
    );
    summary.latency.print("send latency us");
    print_errors(summary.errors, &summary.errors_by_code);
}

pub fn print_consume_summary(summary: &ConsumeSummary) {
    println!(
        "ringmq bench consume: {} connections, {} queues, {} pulls",
        summary.connections, summary.queues, summary.pulls
    );
    println!(
        "  {} messages in {:.2} s: {:.0} msgs/s, {:.1} MB/s",
        summary.messages, summary.elapsed_s, summary.msgs_per_sec, summary.mb_per_sec
    );
    summary.latency.print("end-to-end latency us");
    print_errors(summary.errors, &summary.errors_by_code);
}

fn print_errors(errors: u64, by_code: &BTreeMap<String, u64>) {
    let mut line = format!("  errors {errors}");
    for (code, count) in by_code {
        line.push_str(&format!("  [{code}: {count}]"));
    }
    println!("{line}");
}
