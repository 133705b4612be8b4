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
//! Both drive a `ProduceRun` (`bench/produce_run.rs`), which owns the options, the claims
//! and the summary, so neither I/O model depends on the other.
//!
//! Consumers are one task per queue, each on its connection's client.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::counters::Counters;
use super::latency::LatencySummary;
use super::produce_run::{account, check_produce_options, per_second, produce_summary, ProduceRun};
pub use super::produce_run::{bench_key, ProduceOptions, ProduceSummary, ProducerIo, SendMode};
use super::PullBodyError;
use crate::client::{pull_request, queue_request, Client};
use crate::config::FlushMode;
use crate::remoting::codes::{request as codes, response};
use crate::remoting::RemotingCommand;
use crate::store::record::{decode, Decoded, Verify};

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
    /// Pop (POP_MESSAGE, acknowledged by one BATCH_ACK_MESSAGE per pop) instead of pull.
    pub pop: bool,
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
            pop: false,
        }
    }
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

/// Prints one progress line a second until aborted.
pub(super) async fn report_progress(what: &'static str, counters: Arc<Counters>) {
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
pub(super) fn on_own_thread<T, F>(name: &str, make: F) -> anyhow::Result<T>
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
fn take_records(counters: &Counters, body: &[u8]) -> Result<(), PullBodyError> {
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
            Ok(Decoded::Blank { .. }) => return Err(PullBodyError::Blank),
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Where a consumer of `queue_id` starts: the queue's min or max offset (`--from`); 0,
/// counted as an error, when the node does not say.
async fn first_offset(
    client: &Client,
    options: &ConsumeOptions,
    counters: &Counters,
    queue_id: i32,
) -> u64 {
    let start = match options.from {
        FromOffset::Earliest => codes::GET_MIN_OFFSET,
        FromOffset::Latest => codes::GET_MAX_OFFSET,
    };
    match client
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
    }
}

/// The pull of `queue_id` from `offset`, in the group, committing what was consumed.
fn bench_pull(
    options: &ConsumeOptions,
    queue_id: i32,
    offset: u64,
    suspend: Option<Duration>,
) -> RemotingCommand {
    let mut cmd = pull_request(
        &options.topic,
        queue_id,
        offset,
        options.max_per_pull as i32,
        suspend,
        // The subscription rides in the pull (FLAG_SUBSCRIPTION), as clients do: without
        // it a RocketMQ broker wants the group registered by a heartbeat first and
        // answers SUBSCRIPTION_NOT_EXIST (24) to every pull.
        Some("*"),
    );
    cmd.ext_fields
        .insert("consumerGroup".into(), options.group.clone());
    // Commit what was consumed with the next pull, as RocketMQ's push consumer does,
    // so the group and its progress show in `ringmq admin consumer-progress`.
    commit_with_pull(&mut cmd, offset);
    cmd
}

async fn consume_queue(run: Rc<ConsumeRun>, client: Client, queue_id: i32) {
    if run.options.pop {
        return pop_queue(run, client, queue_id).await;
    }
    let options = &run.options;
    let counters = &run.counters;
    let mut offset = first_offset(&client, options, counters, queue_id).await;
    let suspend = (!options.suspend.is_zero()).then_some(options.suspend);
    let timeout = crate::client::DEFAULT_TIMEOUT + options.suspend;
    loop {
        let cmd = bench_pull(options, queue_id, offset, suspend);
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
            // The last batch has no next pull to carry its commit.
            let commit = commit_request(&options.group, &options.topic, queue_id, offset);
            if let Err(error) = client.request(commit).await {
                counters.error(format!("io:{:?}", error.kind()), 0);
            }
            run.finished.notify_one();
            return;
        }
    }
}

/// Sets a pull's commit bit and `commitOffset`: every message below `offset` is consumed.
fn commit_with_pull(pull: &mut RemotingCommand, offset: u64) {
    let flag: i32 = pull
        .ext_fields
        .get("sysFlag")
        .and_then(|f| f.parse().ok())
        .unwrap_or(0);
    pull.ext_fields.insert(
        "sysFlag".into(),
        (flag | crate::remoting::requests::FLAG_COMMIT_OFFSET).to_string(),
    );
    pull.ext_fields
        .insert("commitOffset".into(), offset.to_string());
}

/// UPDATE_CONSUMER_OFFSET (15): the group has consumed `queue_id` below `offset`.
fn commit_request(group: &str, topic: &str, queue_id: i32, offset: u64) -> RemotingCommand {
    let mut fields = crate::remoting::ExtFields::new();
    fields.insert("consumerGroup".into(), group);
    fields.insert("topic".into(), topic);
    fields.insert("queueId".into(), queue_id.to_string());
    fields.insert("commitOffset".into(), offset.to_string());
    RemotingCommand::request(codes::UPDATE_CONSUMER_OFFSET, fields)
}

/// Invisible time of the bench's pops: longer than any run, so nothing comes back.
const BENCH_INVISIBLE_MS: i64 = 300_000;

/// The pop loop of one queue: pop, count the records, acknowledge them all in one batch
/// (the offsets from `msgOffsetInfo`, as a client builds its batch ack).
async fn pop_queue(run: Rc<ConsumeRun>, client: Client, queue_id: i32) {
    let options = &run.options;
    let counters = &run.counters;
    let timeout = crate::client::DEFAULT_TIMEOUT + options.suspend;
    let max = options.max_per_pull.min(32).to_string();
    let queue = queue_id.to_string();
    let invisible = BENCH_INVISIBLE_MS.to_string();
    let poll = options.suspend.as_millis().to_string();
    loop {
        let mut fields = crate::remoting::ExtFields::new();
        for (name, value) in [
            ("consumerGroup", options.group.as_str()),
            ("topic", options.topic.as_str()),
            ("queueId", queue.as_str()),
            ("maxMsgNums", max.as_str()),
            ("invisibleTime", invisible.as_str()),
            ("pollTime", poll.as_str()),
            ("bornTime", "0"),
            ("initMode", "0"),
        ] {
            fields.insert(name.into(), value);
        }
        let pop = RemotingCommand::request(codes::POP_MESSAGE, fields);
        let outcome = client.request_with_timeout(pop, timeout).await;
        run.pulls.set(run.pulls.get() + 1);
        match outcome {
            Ok(answer) if answer.code == response::SUCCESS => {
                if let Err(error) = take_records(counters, &answer.body) {
                    counters.error(format!("decode: {error}"), 0);
                }
                match batch_ack_of(options, queue_id, &answer) {
                    Some(ack) => match client.request(ack).await {
                        Ok(reply) if reply.code == response::SUCCESS => {}
                        Ok(reply) => counters.error(format!("ack:{}", reply.code), 0),
                        Err(error) => counters.error(format!("ack io:{:?}", error.kind()), 0),
                    },
                    None => counters.error("pop answer without offsets".into(), 0),
                }
            }
            Ok(answer) if answer.code == response::POLLING_TIMEOUT => {}
            Ok(answer) => {
                counters.error(answer.code.to_string(), 0);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
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

/// The BATCH_ACK_MESSAGE acknowledging everything a pop `answer` handed out.
fn batch_ack_of(
    options: &ConsumeOptions,
    queue_id: i32,
    answer: &RemotingCommand,
) -> Option<RemotingCommand> {
    let pop_time: i64 = answer.ext_fields.get("popTime")?.parse().ok()?;
    let start: u64 = answer
        .ext_fields
        .get("startOffsetInfo")?
        .split(' ')
        .nth(2)?
        .parse()
        .ok()?;
    let offsets: Vec<u64> = answer
        .ext_fields
        .get("msgOffsetInfo")?
        .split(' ')
        .nth(2)?
        .split(',')
        .filter_map(|offset| offset.parse().ok())
        .collect();
    let span = offsets.iter().max()? - start + 1;
    let mut bits = vec![0u8; span.div_ceil(8) as usize];
    for offset in offsets {
        let bit = offset - start;
        bits[(bit / 8) as usize] |= 1 << (bit % 8);
    }
    let body = serde_json::json!({
        "acks": [{"c": options.group, "t": options.topic, "r": "0", "so": start,
                  "q": queue_id, "rq": 0, "pt": pop_time, "it": BENCH_INVISIBLE_MS, "b": bits}]
    });
    Some(
        RemotingCommand::request(codes::BATCH_ACK_MESSAGE, crate::remoting::ExtFields::new())
            .with_body(body.to_string()),
    )
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
    // One shard on free loopback ports, unpinned and without a metrics endpoint: an
    // in-process node beside the load it measures.
    let config = crate::node_config::NodeConfig {
        store_path_root_dir: dir.path().into(),
        shards: 1,
        pin_shard_threads: false,
        listen_port: 0,
        namesrv_port: 0,
        bind_address: std::net::Ipv4Addr::LOCALHOST.into(),
        metrics_exporter_type: crate::node_config::MetricsExporter::Disable,
        flush_disk_type: options.flush,
        ..crate::node_config::NodeConfig::default()
    };
    let node = crate::node::start(config)?;
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
    if let (Some(per_message), Some(cores)) =
        (summary.loadgen_cpu_us_per_msg, summary.loadgen_cores)
    {
        println!(
            "  load generator CPU: {per_message:.1} us per message, {:.0}% of a core",
            cores * 100.0
        );
    }
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
    println!(
        "  (end-to-end: from each message's born time, set by its producer, to its arrival here; \
         a consume started after the produce counts the wait between them)"
    );
    print_errors(summary.errors, &summary.errors_by_code);
}

fn print_errors(errors: u64, by_code: &BTreeMap<String, u64>) {
    let mut line = format!("  errors {errors}");
    for (code, count) in by_code {
        line.push_str(&format!("  [{code}: {count}]"));
    }
    println!("{line}");
}
