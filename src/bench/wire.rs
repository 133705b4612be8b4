//! `ringmq bench produce`, `ringmq bench consume` and the embedded `ringmq bench`: load
//! generators that speak the remoting protocol to a node through the in-project client.
//!
//! Producers run in one of two ways ([`ProducerIo`]):
//! - as tasks on one thread (a tokio current-thread runtime and a `LocalSet`, like a
//!   shard), sharing their connection: requests are multiplexed on it by opaque. Every
//!   mode and any number of producers per connection.
//! - as one thread per connection on a blocking socket (`bench/threads.rs`), for sync
//!   sends with one producer per connection, where a send is a bare round trip.
//!
//! Consumers are one task per queue, each on its connection's client.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::counters::Counters;
use super::latency::LatencySummary;
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

/// How producers do their I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerIo {
    /// `Threads` for sync sends with one producer per connection, `Tasks` otherwise.
    Auto,
    /// Tasks on one thread, multiplexed on shared connections.
    Tasks,
    /// One thread per connection on a blocking socket; sync mode, one producer per
    /// connection only.
    Threads,
}

impl ProducerIo {
    pub fn as_str(self) -> &'static str {
        match self {
            ProducerIo::Auto => "auto",
            ProducerIo::Tasks => "tasks",
            ProducerIo::Threads => "threads",
        }
    }

    /// What `self` comes to for `options`, or why it cannot run them.
    pub fn resolve(self, options: &ProduceOptions) -> anyhow::Result<ProducerIo> {
        let one_sync_producer_per_connection =
            options.mode == SendMode::Sync && options.producers_per_connection == 1;
        match self {
            ProducerIo::Auto if one_sync_producer_per_connection => Ok(ProducerIo::Threads),
            ProducerIo::Auto => Ok(ProducerIo::Tasks),
            ProducerIo::Threads if !one_sync_producer_per_connection => anyhow::bail!(
                "--io threads runs one sync producer per connection: it needs --mode sync \
                 and --producers-per-connection 1"
            ),
            other => Ok(other),
        }
    }
}

impl FromStr for ProducerIo {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(ProducerIo::Auto),
            "tasks" => Ok(ProducerIo::Tasks),
            "threads" => Ok(ProducerIo::Threads),
            other => Err(format!("{other}: expected auto, tasks or threads")),
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
    pub io: ProducerIo,
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
            io: ProducerIo::Auto,
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
    /// `tasks` or `threads` ([`ProducerIo`]).
    pub io: String,
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

fn per_second(count: f64, elapsed: f64) -> f64 {
    if elapsed > 0.0 {
        count / elapsed
    } else {
        0.0
    }
}

/// Prints one progress line a second until aborted.
async fn report_progress(what: &'static str, counters: Arc<Counters>) {
    let started = Instant::now();
    let mut previous = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let done = counters.done();
        let elapsed = started.elapsed().as_secs_f64();
        eprintln!("{}", counters.progress_line(what, elapsed, done - previous));
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

pub(super) struct ProduceRun {
    pub(super) options: ProduceOptions,
    topics: Vec<String>,
    deadline: Option<StdInstant>,
    claims: Mutex<Claims>,
    pub(super) counters: Arc<Counters>,
}

#[derive(Default)]
struct Claims {
    claimed: u64,
    /// Token pacing: the earliest time the next claim may send.
    next_slot: Option<StdInstant>,
}

impl ProduceRun {
    /// A run of `options` whose clock started at `started`.
    pub(super) fn new(options: ProduceOptions, started: StdInstant) -> ProduceRun {
        let topics = if options.topics == 1 {
            vec![options.topic.clone()]
        } else {
            (0..options.topics)
                .map(|topic| format!("{}{topic}", options.topic))
                .collect()
        };
        ProduceRun {
            deadline: options.duration.map(|duration| started + duration),
            options,
            topics,
            claims: Mutex::new(Claims::default()),
            counters: Arc::new(Counters::default()),
        }
    }

    /// Claims the next batch: its first message number, its size, and (under a rate
    /// limit) the time it may be sent if that is still ahead; `None` once the run is over.
    fn claim_slot(&self) -> Option<(u64, u64, Option<StdInstant>)> {
        let now = StdInstant::now();
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            return None;
        }
        let mut claims = self
            .claims
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let first = claims.claimed;
        let mut count = self.options.batch as u64;
        if let Some(limit) = self.options.messages {
            count = count.min(limit.saturating_sub(first));
            if count == 0 {
                return None;
            }
        }
        claims.claimed = first + count;
        let mut wait_until = None;
        if self.options.rate > 0 {
            let slot = claims.next_slot.map_or(now, |next| next.max(now));
            let step = Duration::from_secs_f64(count as f64 / self.options.rate as f64);
            claims.next_slot = Some(slot + step);
            wait_until = (slot > now).then_some(slot);
        }
        Some((first, count, wait_until))
    }

    /// [`ProduceRun::claim_slot`], waiting for the slot on the runtime's timer.
    async fn claim(&self) -> Option<(u64, u64)> {
        let (first, count, wait_until) = self.claim_slot()?;
        if let Some(slot) = wait_until {
            tokio::time::sleep_until(Instant::from_std(slot)).await;
        }
        Some((first, count))
    }

    /// [`ProduceRun::claim_slot`], waiting for the slot by sleeping the thread.
    pub(super) fn claim_blocking(&self) -> Option<(u64, u64)> {
        let (first, count, wait_until) = self.claim_slot()?;
        if let Some(slot) = wait_until {
            std::thread::sleep(slot.saturating_duration_since(StdInstant::now()));
        }
        Some((first, count))
    }

    /// The send request for messages `first..first + count`.
    pub(super) fn request(&self, body: &[u8], first: u64, count: u64) -> RemotingCommand {
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
pub(super) fn account(
    counters: &Counters,
    size: usize,
    count: u64,
    outcome: std::io::Result<RemotingCommand>,
) {
    match outcome {
        Ok(answer) if answer.code == response::SUCCESS => {
            counters.add_done(count, count * size as u64);
        }
        Ok(answer) => counters.error(answer.code.to_string(), count),
        Err(error) => counters.error(format!("io:{:?}", error.kind()), count),
    }
}

async fn producer(run: Arc<ProduceRun>, client: Client) {
    let options = &run.options;
    let body = vec![b'x'; options.size];
    let window = std::sync::Arc::new(Semaphore::new(options.inflight.max(1)));
    while let Some((first, count)) = run.claim().await {
        let cmd = run.request(&body, first, count);
        let counters = run.counters.clone();
        match options.mode {
            SendMode::Oneway => match client.oneway(cmd).await {
                Ok(()) => counters.add_done(count, count * options.size as u64),
                Err(error) => counters.error(format!("io:{:?}", error.kind()), count),
            },
            SendMode::Sync => {
                let sent_at = Instant::now();
                let outcome = client.request(cmd).await;
                counters.record_latency_us(sent_at.elapsed().as_micros() as u64);
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
                    counters.record_latency_us(sent_at.elapsed().as_micros() as u64);
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

/// Refuses option values no run can use.
pub(super) fn check_produce_options(options: &ProduceOptions) -> anyhow::Result<()> {
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
    Ok(())
}

/// The summary of `run`, which took `elapsed_s` with producers doing `io`.
pub(super) fn produce_summary(run: &ProduceRun, io: ProducerIo, elapsed_s: f64) -> ProduceSummary {
    let options = &run.options;
    let counters = &run.counters;
    let done = counters.done();
    ProduceSummary {
        mode: options.mode.as_str().into(),
        io: io.as_str().into(),
        connections: options.connections,
        producers: options.connections * options.producers_per_connection,
        size: options.size,
        batch: options.batch,
        messages: done,
        errors: counters.errors(),
        errors_by_code: counters.errors_by_code(),
        elapsed_s,
        msgs_per_sec: per_second(done as f64, elapsed_s),
        mb_per_sec: per_second(counters.bytes() as f64, elapsed_s) / 1e6,
        latency: counters.latency_summary(),
    }
}

/// Runs a produce round with task producers (whatever `options.io` says); must be called
/// inside a `LocalSet`.
pub async fn produce(options: ProduceOptions) -> anyhow::Result<ProduceSummary> {
    check_produce_options(&options)?;
    let mut clients = Vec::new();
    for _ in 0..options.connections {
        clients.push(
            Client::connect(options.addr)
                .await
                .map_err(|error| anyhow::anyhow!("connecting to {}: {error}", options.addr))?,
        );
    }
    let started = StdInstant::now();
    let run = Arc::new(ProduceRun::new(options, started));
    let progress = run
        .options
        .progress
        .then(|| tokio::task::spawn_local(report_progress("sent", run.counters.clone())));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..run.options.producers_per_connection {
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
    Ok(produce_summary(&run, ProducerIo::Tasks, elapsed))
}

/// Runs a produce round: on blocking threads or as tasks on a thread of its own, as
/// `options.io` resolves.
pub fn run_produce(options: ProduceOptions) -> anyhow::Result<ProduceSummary> {
    match options.io.resolve(&options)? {
        ProducerIo::Threads => super::threads::produce(options),
        _ => on_own_thread("ringmq-bench-produce", move || Box::pin(produce(options))),
    }
}

// ---------------------------------------------------------------------------------------
// Consume

struct ConsumeRun {
    options: ConsumeOptions,
    deadline: Option<Instant>,
    finished: Notify,
    pulls: Cell<u64>,
    counters: Arc<Counters>,
}

impl ConsumeRun {
    fn target_reached(&self) -> bool {
        self.options
            .messages
            .is_some_and(|limit| self.counters.done() >= limit)
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
    let mut latencies = counters.latencies();
    while !rest.is_empty() {
        match decode(rest, Verify::Structure) {
            Ok(Decoded::Record(view)) => {
                latencies.record_us((now - view.born_timestamp * 1000).max(1) as u64);
                counters.add_done(1, view.body.len() as u64);
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
    let counters = Arc::new(Counters::default());
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
    let done = counters.done();
    Ok(ConsumeSummary {
        connections: clients.len(),
        queues: options.queues,
        messages: done,
        bytes: counters.bytes(),
        pulls: run.pulls.get(),
        errors: counters.errors(),
        errors_by_code: counters.errors_by_code(),
        elapsed_s: elapsed,
        msgs_per_sec: per_second(done as f64, elapsed),
        mb_per_sec: per_second(counters.bytes() as f64, elapsed) / 1e6,
        latency: counters.latency_summary(),
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
        "ringmq bench produce: {} connections, {} producers ({} I/O), {} B messages, {} mode, batch {}",
        summary.connections,
        summary.producers,
        summary.io,
        summary.size,
        summary.mode,
        summary.batch
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
