//! `ringmq bench delayed`, `ringmq bench timers` and `ringmq bench send-back`: what the
//! node's waiting-message paths cost, measured over the network with the in-project client.
//!
//! Delayed and timer runs ([`run_delivery`]):
//! ```text
//!   consumers: one long-polling pull loop per queue of the target topic, from offset 0,
//!              started before the first send; each record is noted by the sequence number
//!              its body names (lateness::body), with its store time and receipt time
//!   producers: `connections` x `inflight` sends in flight, one message per request
//!              (a batch cannot be delayed or timed), message n asking for
//!              delay level (n mod levels) + 1, or TIMER_DELIVER_MS = lateness::timer_due(n)
//!   wait:      until every acknowledged message was received, or the last due time plus
//!              the grace period has passed
//!   due times: timer, the TIMER_OUT_MS of the delivered copy; delay, the store time of its
//!              record in SCHEDULE_TOPIC_XXXX (pulled afterwards) plus its level's delay
//! ```
//! Lateness is the delivered copy's store timestamp minus its due time (what the scheduler
//! adds), and the consumer's receipt time minus its due time (what a consumer sees, with
//! the pull path and the load generator's own scheduling on top). Both in ms, both on the
//! one machine's wall clock. Missing, duplicate and early deliveries are counted.
//!
//! Send-back runs ([`run_send_back`]): plain sends of `messages` messages (timed), a pull
//! of all of them for their CommitLog offsets (not timed), then CONSUMER_SEND_MSG_BACK (36)
//! of each (timed), both with the same requests in flight; the ratio is the figure.
//!
//! With `node_pid`, the node's memory (VmRSS sampled every 100 ms, VmRSS when the sends
//! end, VmHWM at the end) and CPU time are read from `/proc`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use compact_str::ToCompactString;
use serde::Serialize;

use super::latency::{Latencies, LatencySummary};
use super::lateness::{self, LatenessSummary, NodeProcess};
use super::PullBodyError;
use crate::broker::delay::{DelayLevels, DELAY};
use crate::broker::timer::{TIMER_DELIVER_MS, TIMER_OUT_MS};
use crate::client::{pull_request, queue_request, send_request_v2, Client, DEFAULT_TIMEOUT};
use crate::remoting::codes::{request as codes, response};
use crate::remoting::{ExtFields, RemotingCommand};
use crate::store::properties;
use crate::store::record::{decode, Decoded, Verify};
use crate::store::topic::SCHEDULE_TOPIC;

/// Records asked for per pull.
const MAX_PER_PULL: i32 = 64;
/// Long-polling suspension of the consumers' pulls.
const SUSPEND: Duration = Duration::from_millis(1000);
/// How often the node's VmRSS is sampled.
const RSS_EVERY: Duration = Duration::from_millis(100);
/// The consumer group the benchmark pulls as.
const GROUP: &str = "ringmq-delivery-bench";

/// What the messages wait for.
#[derive(Clone, Debug)]
pub enum Waiting {
    /// `DELAY` levels in turn; `levels` must be the node's `messageDelayLevel`.
    Delay { levels: DelayLevels },
    /// `TIMER_DELIVER_MS` spread over `[start + lead, start + lead + span]`, where start
    /// is when the first send goes out.
    Timer { lead: Duration, span: Duration },
}

/// Options of `ringmq bench delayed` and `ringmq bench timers`.
#[derive(Clone, Debug)]
pub struct DeliveryOptions {
    pub addr: SocketAddr,
    pub waiting: Waiting,
    pub messages: u64,
    pub size: usize,
    pub topic: String,
    pub queues: usize,
    pub connections: usize,
    /// Requests in flight on each connection.
    pub inflight: usize,
    /// How long past the last due time the run waits for missing deliveries.
    pub grace: Duration,
    pub node_pid: Option<u32>,
    pub progress: bool,
}

/// What the sends of a phase came to.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SendFigures {
    pub messages: u64,
    pub errors: u64,
    pub errors_by_code: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub msgs_per_sec: f64,
    /// Request-to-response time, microseconds.
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// The node's CPU time over the phase per acknowledged message (with `node_pid`).
    pub node_cpu_us_per_msg: Option<f64>,
}

/// The node's memory, kB (with `node_pid`). VmRSS counts the pages of the store's mapped
/// files the node touched as well as its heap; RssAnon is the heap (and stacks) alone,
/// which is what pending timers cost.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct NodeMemory {
    /// VmRSS when the last send was acknowledged: the backlog is fullest about then.
    pub rss_at_backlog_kb: Option<u64>,
    /// RssAnon at the same moment.
    pub anon_at_backlog_kb: Option<u64>,
    /// The largest VmRSS sampled (every 100 ms) during the run.
    pub rss_sampled_peak_kb: Option<u64>,
    /// The largest RssAnon sampled (every 100 ms) during the run.
    pub anon_sampled_peak_kb: Option<u64>,
    /// VmHWM at the end: the peak VmRSS over the node's life.
    pub vmhwm_kb: Option<u64>,
    /// VmRSS at the end.
    pub rss_at_end_kb: Option<u64>,
    /// RssAnon and RssFile at the end.
    pub anon_at_end_kb: Option<u64>,
    pub file_at_end_kb: Option<u64>,
}

impl NodeMemory {
    /// The figures read at the end of a run, with those gathered during it.
    fn at_end(node: Option<NodeProcess>, during: NodeMemory) -> NodeMemory {
        NodeMemory {
            vmhwm_kb: node.and_then(|n| n.status_kb("VmHWM")),
            rss_at_end_kb: node.and_then(|n| n.status_kb("VmRSS")),
            anon_at_end_kb: node.and_then(|n| n.status_kb("RssAnon")),
            file_at_end_kb: node.and_then(|n| n.status_kb("RssFile")),
            ..during
        }
    }
}

/// Lateness of one delay level.
#[derive(Clone, Debug, Serialize)]
pub struct LevelLateness {
    pub level: u32,
    pub delay_ms: u64,
    #[serde(flatten)]
    pub lateness: LatenessSummary,
}

/// The figures a delayed or timer run ends with (`--json` prints this).
#[derive(Clone, Debug, Serialize)]
pub struct DeliverySummary {
    /// `delay` or `timer`.
    pub kind: String,
    /// The delay levels, or the timer window (`lead+span` seconds after the first send).
    pub schedule: String,
    pub size: usize,
    pub connections: usize,
    pub inflight_per_connection: usize,
    pub send: SendFigures,
    /// Messages delivered (distinct sequence numbers received).
    pub delivered: u64,
    /// Acknowledged messages never received before the run gave up.
    pub missing: u64,
    /// Receipts of a message already received.
    pub duplicates: u64,
    /// Received records whose body is not the benchmark's, or names no sent message.
    pub foreign: u64,
    /// Delivered messages with no known due time (a delay record not found in
    /// SCHEDULE_TOPIC_XXXX, a timer copy without TIMER_OUT_MS); left out of the lateness.
    pub no_due: u64,
    /// Timer: copies whose TIMER_OUT_MS is not the due time asked for.
    pub due_mismatch: u64,
    /// Acknowledged messages not delivered yet when the last send was acknowledged.
    pub pending_at_send_end: u64,
    /// Timer: sends acknowledged after the first due time (0: the whole backlog was
    /// pending at once).
    pub sent_after_first_due: u64,
    /// Delivered copy's store timestamp minus due time.
    pub lateness_store: LatenessSummary,
    /// Consumer's receipt time minus due time.
    pub lateness_receipt: LatenessSummary,
    /// Delay: `lateness_store` per level.
    pub per_level: Vec<LevelLateness>,
    /// From the first send to the last delivery received (or giving up).
    pub elapsed_s: f64,
    pub node_memory: NodeMemory,
    /// The node's CPU time over the whole run per delivered message (sends, deliveries,
    /// pulls).
    pub node_cpu_us_per_msg: Option<f64>,
    pub consume_errors_by_code: BTreeMap<String, u64>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

fn ext_i64(cmd: &RemotingCommand, field: &str) -> Option<i64> {
    cmd.ext_fields
        .get(field)
        .and_then(|value| value.parse().ok())
}

fn count(map: &RefCell<BTreeMap<String, u64>>, key: String) {
    *map.borrow_mut().entry(key).or_default() += 1;
}

// ---------------------------------------------------------------------------------------
// Sending

/// One phase of pipelined requests: `total` of them, request `n` built by `make(n)`.
struct SendRun {
    total: u64,
    next: Cell<u64>,
    ok: Cell<u64>,
    acked: RefCell<Vec<bool>>,
    errors: RefCell<BTreeMap<String, u64>>,
    latencies: RefCell<Latencies>,
    make: Box<dyn Fn(u64) -> RemotingCommand>,
    /// Acknowledgements that came after this wall-clock time (ms), counted in
    /// `acked_after`.
    threshold_ms: Option<i64>,
    acked_after: Cell<u64>,
}

async fn send_worker(run: Rc<SendRun>, client: Client) {
    loop {
        let n = run.next.get();
        if n >= run.total {
            return;
        }
        run.next.set(n + 1);
        let cmd = (run.make)(n);
        let sent_at = Instant::now();
        let outcome = client.request(cmd).await;
        run.latencies
            .borrow_mut()
            .record_us(sent_at.elapsed().as_micros() as u64);
        match outcome {
            Ok(answer) if answer.code == response::SUCCESS => {
                run.ok.set(run.ok.get() + 1);
                run.acked.borrow_mut()[n as usize] = true;
                if run
                    .threshold_ms
                    .is_some_and(|threshold| now_ms() > threshold)
                {
                    run.acked_after.set(run.acked_after.get() + 1);
                }
            }
            Ok(answer) => count(&run.errors, answer.code.to_string()),
            Err(error) => count(&run.errors, format!("io:{:?}", error.kind())),
        }
    }
}

/// Sends `total` requests with `inflight` in flight on each client; returns the run and
/// its wall time.
async fn send_all(
    clients: &[Client],
    inflight: usize,
    total: u64,
    make: Box<dyn Fn(u64) -> RemotingCommand>,
    threshold_ms: Option<i64>,
    progress: Option<&'static str>,
) -> (Rc<SendRun>, f64) {
    let run = Rc::new(SendRun {
        total,
        next: Cell::new(0),
        ok: Cell::new(0),
        acked: RefCell::new(vec![false; total as usize]),
        errors: RefCell::new(BTreeMap::new()),
        latencies: RefCell::new(Latencies::default()),
        make,
        threshold_ms,
        acked_after: Cell::new(0),
    });
    let started = Instant::now();
    let reporter = progress.map(|what| {
        let run = run.clone();
        tokio::task::spawn_local(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                eprintln!(
                    "  {what}: {} of {} acknowledged ({:.0} s)",
                    run.ok.get(),
                    run.total,
                    started.elapsed().as_secs_f64()
                );
            }
        })
    });
    let workers: Vec<_> = clients
        .iter()
        .flat_map(|client| (0..inflight.max(1)).map(move |_| client.clone()))
        .map(|client| tokio::task::spawn_local(send_worker(run.clone(), client)))
        .collect();
    for worker in workers {
        let _ = worker.await;
    }
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    (run, started.elapsed().as_secs_f64())
}

fn send_figures(run: &SendRun, elapsed_s: f64, node_cpu_s: Option<f64>) -> SendFigures {
    let messages = run.ok.get();
    let errors = run.errors.borrow().values().sum();
    SendFigures {
        messages,
        errors,
        errors_by_code: run.errors.borrow().clone(),
        elapsed_s,
        msgs_per_sec: if elapsed_s > 0.0 {
            messages as f64 / elapsed_s
        } else {
            0.0
        },
        latency: run.latencies.borrow().summary(),
        node_cpu_us_per_msg: node_cpu_s
            .filter(|_| messages > 0)
            .map(|cpu| cpu * 1e6 / messages as f64),
    }
}

/// A SEND_MESSAGE_V2 of bench message `seq` with the extra property `extra`.
fn bench_send(
    topic: &str,
    queues: usize,
    size: usize,
    seq: u64,
    extra: &[(&str, &str)],
) -> RemotingCommand {
    let body = lateness::body(seq, size);
    let mut cmd = send_request_v2(
        topic,
        (seq % queues as u64) as i32,
        &body,
        Some("TagA"),
        None,
    );
    if !extra.is_empty() {
        let mut props = cmd.opt_str("i").unwrap_or("").to_owned();
        for (key, value) in extra {
            properties::push_pair(&mut props, key, value);
        }
        cmd.put_ext("i", props);
    }
    cmd
}

async fn connect_all(addr: SocketAddr, connections: usize) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::new();
    for _ in 0..connections.max(1) {
        clients.push(
            Client::connect(addr)
                .await
                .map_err(|error| anyhow::anyhow!("connecting to {addr}: {error}"))?,
        );
    }
    Ok(clients)
}

// ---------------------------------------------------------------------------------------
// Receiving

#[derive(Clone, Copy)]
struct Seen {
    store_ms: i64,
    receipt_ms: i64,
    /// TIMER_OUT_MS of the copy, or `i64::MIN`.
    timer_out_ms: i64,
}

struct Collector {
    seen: RefCell<Vec<Option<Seen>>>,
    delivered: Cell<u64>,
    duplicates: Cell<u64>,
    foreign: Cell<u64>,
    errors: RefCell<BTreeMap<String, u64>>,
}

impl Collector {
    fn take(&self, body: &[u8]) -> Result<(), PullBodyError> {
        let receipt_ms = now_ms();
        let mut rest = body;
        let mut seen = self.seen.borrow_mut();
        while !rest.is_empty() {
            let view = match decode(rest, Verify::Structure) {
                Ok(Decoded::Record(view)) => view,
                Ok(Decoded::Blank { .. }) => return Err(PullBodyError::Blank),
                Err(error) => return Err(error.into()),
            };
            rest = &rest[view.total_size as usize..];
            let Some(slot) =
                lateness::body_seq(view.body).and_then(|seq| seen.get_mut(seq as usize))
            else {
                self.foreign.set(self.foreign.get() + 1);
                continue;
            };
            if slot.is_some() {
                self.duplicates.set(self.duplicates.get() + 1);
                continue;
            }
            let timer_out_ms = properties::get(view.properties, TIMER_OUT_MS)
                .and_then(|value| value.parse().ok())
                .unwrap_or(i64::MIN);
            *slot = Some(Seen {
                store_ms: view.store_timestamp,
                receipt_ms,
                timer_out_ms,
            });
            self.delivered.set(self.delivered.get() + 1);
        }
        Ok(())
    }
}

/// Pulls `topic` queue `queue` from offset 0 with long polling until aborted.
async fn collect_queue(client: Client, topic: String, queue: i32, collector: Rc<Collector>) {
    let mut offset = 0u64;
    loop {
        let mut cmd = pull_request(&topic, queue, offset, MAX_PER_PULL, Some(SUSPEND), None);
        cmd.ext_fields.insert("consumerGroup".into(), GROUP);
        match client
            .request_with_timeout(cmd, DEFAULT_TIMEOUT + SUSPEND)
            .await
        {
            Ok(answer) => match answer.code {
                response::SUCCESS => {
                    if let Err(error) = collector.take(&answer.body) {
                        count(&collector.errors, format!("decode: {error}"));
                    }
                    offset = ext_i64(&answer, "nextBeginOffset").map_or(offset, |o| o as u64);
                }
                response::PULL_NOT_FOUND
                | response::PULL_RETRY_IMMEDIATELY
                | response::PULL_OFFSET_MOVED => {
                    offset = ext_i64(&answer, "nextBeginOffset").map_or(offset, |o| o as u64);
                }
                code => {
                    count(&collector.errors, code.to_string());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Err(error) => {
                count(&collector.errors, format!("io:{:?}", error.kind()));
                if client.is_closed() {
                    return;
                }
            }
        }
    }
}

/// Every record of `topic` queue `queue` from offset 0 to its end, without waiting:
/// `visit(record)` for each.
async fn read_queue(
    client: &Client,
    topic: &str,
    queue: i32,
    mut visit: impl FnMut(&crate::store::record::RecordView<'_>),
) -> anyhow::Result<()> {
    let mut offset = 0u64;
    loop {
        let mut cmd = pull_request(topic, queue, offset, 256, None, None);
        cmd.ext_fields.insert("consumerGroup".into(), GROUP);
        let answer = client.request(cmd).await?;
        match answer.code {
            response::SUCCESS => {
                let mut rest = &answer.body[..];
                while !rest.is_empty() {
                    match decode(rest, Verify::Structure) {
                        Ok(Decoded::Record(view)) => {
                            rest = &rest[view.total_size as usize..];
                            visit(&view);
                        }
                        other => anyhow::bail!("{topic}/{queue} at {offset}: {other:?}"),
                    }
                }
                let next = ext_i64(&answer, "nextBeginOffset").map_or(offset, |o| o as u64);
                if next == offset {
                    return Ok(());
                }
                offset = next;
            }
            response::PULL_NOT_FOUND | response::PULL_OFFSET_MOVED => return Ok(()),
            code => anyhow::bail!(
                "pulling {topic}/{queue} at {offset}: code {code} {}",
                answer.remark.as_deref().unwrap_or("")
            ),
        }
    }
}

/// Samples the node's VmRSS and RssAnon until aborted; their peaks are kept in `peaks`.
async fn sample_rss(node: NodeProcess, peaks: Rc<Cell<(Option<u64>, Option<u64>)>>) {
    let higher = |old: Option<u64>, new: Option<u64>| match (old, new) {
        (Some(old), Some(new)) => Some(old.max(new)),
        (old, new) => old.or(new),
    };
    loop {
        let (rss, anon) = peaks.get();
        peaks.set((
            higher(rss, node.status_kb("VmRSS")),
            higher(anon, node.status_kb("RssAnon")),
        ));
        tokio::time::sleep(RSS_EVERY).await;
    }
}

// ---------------------------------------------------------------------------------------
// Delayed and timer runs

/// Runs a delayed or timer benchmark; must be called inside a `LocalSet`.
pub async fn delivery(options: DeliveryOptions) -> anyhow::Result<DeliverySummary> {
    if options.messages == 0 || options.queues == 0 {
        anyhow::bail!("--messages and --queues must each be at least 1");
    }
    let node = options.node_pid.map(|pid| NodeProcess { pid });
    let clients = connect_all(options.addr, options.connections).await?;
    let consumer = Client::connect(options.addr).await?;
    warm_up_queues(&consumer, &options).await?;
    let receiving = Receiving::start(&consumer, &options, node);
    let collector = receiving.collector.clone();

    let started = Instant::now();
    let start_ms = now_ms();
    let cpu_start = node.and_then(|n| n.cpu_seconds());
    let sent = send_phase(&options, &clients, node, &collector, start_ms).await;
    let (sends, send_elapsed) = (&sent.sends, sent.elapsed_s);

    wait_for_deliveries(
        &options,
        &collector,
        sends.ok.get(),
        start_ms,
        sent.done_ms,
        started,
    )
    .await;
    let elapsed_s = started.elapsed().as_secs_f64();
    let cpu_end = node.and_then(|n| n.cpu_seconds());
    let node_memory = receiving.stop(node, sent.at_backlog);

    // Due times (read before `seen` is borrowed: the reads await).
    let mut due_of = delay_due_times(&consumer, &options).await?;
    let seen = collector.seen.borrow();
    let due_mismatch = timer_due_times(&options, &seen, start_ms, &mut due_of);
    let lateness = Lateness::of(&options.waiting, &seen, &sends.acked.borrow(), &due_of);
    let delivered = collector.delivered.get();
    let consume_errors_by_code = collector.errors.borrow().clone();
    Ok(DeliverySummary {
        kind: sent.kind.into(),
        schedule: sent.schedule,
        size: options.size.max(lateness::MIN_BODY),
        connections: options.connections,
        inflight_per_connection: options.inflight,
        send: send_figures(
            sends,
            send_elapsed,
            cpu_start.zip(sent.cpu_done).map(|(a, b)| b - a),
        ),
        delivered,
        missing: lateness.missing,
        duplicates: collector.duplicates.get(),
        foreign: collector
            .foreign
            .get()
            .saturating_sub(options.queues as u64),
        no_due: lateness.no_due,
        due_mismatch,
        pending_at_send_end: sent.pending_at_end,
        sent_after_first_due: sends.acked_after.get(),
        lateness_store: lateness.store,
        lateness_receipt: lateness.receipt,
        per_level: lateness.per_level,
        elapsed_s,
        node_memory,
        node_cpu_us_per_msg: cpu_start
            .zip(cpu_end)
            .filter(|_| delivered > 0)
            .map(|(a, b)| (b - a) * 1e6 / delivered as f64),
        consume_errors_by_code,
    })
}

/// What runs while the messages are delivered: one puller per queue feeding the
/// collector, and the node's memory sampler.
struct Receiving {
    collector: Rc<Collector>,
    pullers: Vec<tokio::task::JoinHandle<()>>,
    sampler: Option<tokio::task::JoinHandle<()>>,
    peaks: Rc<Cell<(Option<u64>, Option<u64>)>>,
}

impl Receiving {
    fn start(consumer: &Client, options: &DeliveryOptions, node: Option<NodeProcess>) -> Receiving {
        let collector = Rc::new(Collector {
            seen: RefCell::new(vec![None; options.messages as usize]),
            delivered: Cell::new(0),
            duplicates: Cell::new(0),
            foreign: Cell::new(0),
            errors: RefCell::new(BTreeMap::new()),
        });
        let pullers = (0..options.queues)
            .map(|queue| {
                tokio::task::spawn_local(collect_queue(
                    consumer.clone(),
                    options.topic.clone(),
                    queue as i32,
                    collector.clone(),
                ))
            })
            .collect();
        let peaks = Rc::new(Cell::new((None, None)));
        let sampler = node.map(|node| tokio::task::spawn_local(sample_rss(node, peaks.clone())));
        Receiving {
            collector,
            pullers,
            sampler,
            peaks,
        }
    }

    /// Stops the pullers and the sampler; the node's memory at the end, with the figures
    /// taken when the sends were done (`at_backlog`) and the sampled peaks.
    fn stop(self, node: Option<NodeProcess>, at_backlog: NodeMemory) -> NodeMemory {
        for puller in &self.pullers {
            puller.abort();
        }
        if let Some(sampler) = &self.sampler {
            sampler.abort();
        }
        NodeMemory::at_end(
            node,
            NodeMemory {
                rss_sampled_peak_kb: self.peaks.get().0,
                anon_sampled_peak_kb: self.peaks.get().1,
                ..at_backlog
            },
        )
    }
}

/// A run's sends and what was measured when they were done.
struct SendPhase {
    kind: &'static str,
    schedule: String,
    sends: Rc<SendRun>,
    elapsed_s: f64,
    done_ms: i64,
    /// The node's CPU seconds when the sends were done.
    cpu_done: Option<f64>,
    /// The node's memory when the sends were done: the backlog at its largest.
    at_backlog: NodeMemory,
    /// Acknowledged and not yet delivered when the sends were done.
    pending_at_end: u64,
}

/// Sends every message of the run, `inflight` at a time on each client.
async fn send_phase(
    options: &DeliveryOptions,
    clients: &[Client],
    node: Option<NodeProcess>,
    collector: &Collector,
    start_ms: i64,
) -> SendPhase {
    let (kind, schedule, make) = send_maker(options, start_ms);
    // Timer: the earliest due time is at least start + lead; sends acknowledged after it
    // overlapped deliveries.
    let first_due_ms = match &options.waiting {
        Waiting::Timer { lead, .. } => Some(start_ms + lead.as_millis() as i64),
        Waiting::Delay { .. } => None,
    };
    let progress = options.progress.then_some("sent");
    let (sends, send_elapsed) = send_all(
        clients,
        options.inflight,
        options.messages,
        make,
        first_due_ms,
        progress,
    )
    .await;
    let done_ms = now_ms();
    let cpu_done = node.and_then(|n| n.cpu_seconds());
    let at_backlog = NodeMemory {
        rss_at_backlog_kb: node.and_then(|n| n.status_kb("VmRSS")),
        anon_at_backlog_kb: node.and_then(|n| n.status_kb("RssAnon")),
        ..NodeMemory::default()
    };
    let pending_at_end = sends.ok.get().saturating_sub(collector.delivered.get());
    if options.progress {
        eprintln!(
            "  sends done in {send_elapsed:.1} s: {} acknowledged, {} errors, {pending_at_end} pending",
            sends.ok.get(),
            sends.errors.borrow().values().sum::<u64>()
        );
    }

    SendPhase {
        kind,
        schedule,
        sends,
        elapsed_s: send_elapsed,
        done_ms,
        cpu_done,
        at_backlog,
        pending_at_end,
    }
}

/// Makes the topic exist (with its queues) before the consumers ask for it: one plain
/// message per queue, whose bodies are not bench bodies (counted as foreign).
async fn warm_up_queues(consumer: &Client, options: &DeliveryOptions) -> anyhow::Result<()> {
    for queue in 0..options.queues {
        let answer = consumer
            .send_message(&options.topic, queue as i32, b"warmup", None, None)
            .await?;
        if answer.code != response::SUCCESS {
            anyhow::bail!(
                "warm-up send to {}/{queue}: code {} {}",
                options.topic,
                answer.code,
                answer.remark.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}

/// The run's kind, its schedule as the summary states it, and the maker of send `seq`:
/// a delay level by `seq`, or a TIMER_DELIVER_MS spread over the timer window.
fn send_maker(
    options: &DeliveryOptions,
    start_ms: i64,
) -> (&'static str, String, Box<dyn Fn(u64) -> RemotingCommand>) {
    let (topic, queues, size) = (options.topic.clone(), options.queues, options.size);
    match &options.waiting {
        Waiting::Delay { levels } => {
            let levels = levels.clone();
            (
                "delay",
                levels.to_string(),
                Box::new(move |seq| {
                    let level = lateness::delay_level(seq, &levels).to_string();
                    bench_send(&topic, queues, size, seq, &[(DELAY, &level)])
                }),
            )
        }
        Waiting::Timer { lead, span } => {
            let (lead_ms, span_ms) = (lead.as_millis() as u64, span.as_millis() as u64);
            (
                "timer",
                format!(
                    "TIMER_DELIVER_MS spread at random over {}-{} s after the first send",
                    lead.as_secs_f64(),
                    (*lead + *span).as_secs_f64()
                ),
                Box::new(move |seq| {
                    let due = lateness::timer_due(start_ms, lead_ms, span_ms, seq).to_string();
                    bench_send(&topic, queues, size, seq, &[(TIMER_DELIVER_MS, &due)])
                }),
            )
        }
    }
}

/// Waits until `expected` messages were delivered or the grace past the last due time is
/// over, reporting progress every 2 s when asked.
async fn wait_for_deliveries(
    options: &DeliveryOptions,
    collector: &Collector,
    expected: u64,
    start_ms: i64,
    sends_done_ms: i64,
    started: Instant,
) {
    let last_due_ms = match &options.waiting {
        Waiting::Delay { levels } => {
            sends_done_ms + *levels.as_millis().iter().max().expect("a level") as i64
        }
        Waiting::Timer { lead, span } => start_ms + (*lead + *span).as_millis() as i64,
    };
    let give_up_ms = last_due_ms + options.grace.as_millis() as i64;
    let mut last_report = Instant::now();
    while collector.delivered.get() < expected && now_ms() < give_up_ms {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if options.progress && last_report.elapsed() >= Duration::from_secs(2) {
            last_report = Instant::now();
            eprintln!(
                "  delivered {} of {expected} ({:.0} s)",
                collector.delivered.get(),
                started.elapsed().as_secs_f64()
            );
        }
    }
}

/// Each message's due time, `i64::MIN` where unknown. A delay run reads them from the
/// `SCHEDULE_TOPIC_XXXX` copies: store time plus the level's delay.
async fn delay_due_times(consumer: &Client, options: &DeliveryOptions) -> anyhow::Result<Vec<i64>> {
    let mut due_of: Vec<i64> = vec![i64::MIN; options.messages as usize];
    if let Waiting::Delay { levels } = &options.waiting {
        for level in 1..=levels.max_level() {
            let delay = levels.delay_ms(level).expect("a level") as i64;
            read_queue(consumer, SCHEDULE_TOPIC, (level - 1) as i32, |view| {
                if let Some(slot) =
                    lateness::body_seq(view.body).and_then(|seq| due_of.get_mut(seq as usize))
                {
                    *slot = view.store_timestamp + delay;
                }
            })
            .await?;
        }
    }
    Ok(due_of)
}

/// A timer run's due times, from each delivered copy's TIMER_OUT_MS; returns how many
/// differ from the due time the message was sent with.
fn timer_due_times(
    options: &DeliveryOptions,
    seen: &[Option<Seen>],
    start_ms: i64,
    due_of: &mut [i64],
) -> u64 {
    let Waiting::Timer { lead, span } = &options.waiting else {
        return 0;
    };
    let (lead_ms, span_ms) = (lead.as_millis() as u64, span.as_millis() as u64);
    let mut due_mismatch = 0;
    for (seq, slot) in seen.iter().enumerate() {
        if let Some(seen) = slot {
            due_of[seq] = seen.timer_out_ms;
            if seen.timer_out_ms != lateness::timer_due(start_ms, lead_ms, span_ms, seq as u64) {
                due_mismatch += 1;
            }
        }
    }
    due_mismatch
}

/// How late the delivered messages were, against their due times.
struct Lateness {
    store: LatenessSummary,
    receipt: LatenessSummary,
    per_level: Vec<LevelLateness>,
    /// Delivered, with no due time known.
    no_due: u64,
    /// Acknowledged and never delivered.
    missing: u64,
}

impl Lateness {
    fn of(waiting: &Waiting, seen: &[Option<Seen>], acked: &[bool], due_of: &[i64]) -> Lateness {
        let mut store_late = Vec::with_capacity(seen.len());
        let mut receipt_late = Vec::with_capacity(seen.len());
        let mut by_level: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
        let (mut no_due, mut missing) = (0u64, 0u64);
        for (seq, slot) in seen.iter().enumerate() {
            let Some(seen) = slot else {
                if acked[seq] {
                    missing += 1;
                }
                continue;
            };
            let due = due_of[seq];
            if due == i64::MIN {
                no_due += 1;
                continue;
            }
            store_late.push(seen.store_ms - due);
            receipt_late.push(seen.receipt_ms - due);
            if let Waiting::Delay { levels } = waiting {
                by_level
                    .entry(lateness::delay_level(seq as u64, levels))
                    .or_default()
                    .push(seen.store_ms - due);
            }
        }
        let per_level = match waiting {
            Waiting::Delay { levels } => by_level
                .into_iter()
                .map(|(level, mut values)| LevelLateness {
                    level,
                    delay_ms: levels.delay_ms(level).unwrap_or(0),
                    lateness: lateness::summarize(&mut values),
                })
                .collect(),
            Waiting::Timer { .. } => Vec::new(),
        };
        Lateness {
            store: lateness::summarize(&mut store_late),
            receipt: lateness::summarize(&mut receipt_late),
            per_level,
            no_due,
            missing,
        }
    }
}

/// Runs [`delivery`] on a thread of its own.
pub fn run_delivery(options: DeliveryOptions) -> anyhow::Result<DeliverySummary> {
    super::wire::on_own_thread("ringmq-bench-delivery", move || Box::pin(delivery(options)))
}

pub fn print_delivery_summary(summary: &DeliverySummary) {
    println!("ringmq bench {}: {}", summary.kind, summary.schedule);
    let send = &summary.send;
    println!(
        "  sent {} ({} errors) in {:.2} s: {:.0} msgs/s; send latency us p50 {} p99 {} max {}",
        send.messages,
        send.errors,
        send.elapsed_s,
        send.msgs_per_sec,
        send.latency.p50_us,
        send.latency.p99_us,
        send.latency.max_us
    );
    println!(
        "  delivered {} missing {} duplicates {} foreign {} no-due {} due-mismatch {}; pending when the sends ended {}, sent after the first due time {}",
        summary.delivered,
        summary.missing,
        summary.duplicates,
        summary.foreign,
        summary.no_due,
        summary.due_mismatch,
        summary.pending_at_send_end,
        summary.sent_after_first_due
    );
    for (what, l) in [
        ("store time - due", &summary.lateness_store),
        ("receipt - due", &summary.lateness_receipt),
    ] {
        println!(
            "  lateness ms ({what}): p50 {} p90 {} p99 {} p99.9 {} max {} min {} mean {:.1}; early {}",
            l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms, l.min_ms, l.mean_ms, l.early
        );
    }
    for level in &summary.per_level {
        let l = &level.lateness;
        println!(
            "    level {} ({} ms): {} delivered, p50 {} p99 {} max {} ms",
            level.level, level.delay_ms, l.count, l.p50_ms, l.p99_ms, l.max_ms
        );
    }
    let m = &summary.node_memory;
    println!(
        "  node memory kB: VmRSS at backlog {:?}, sampled peak {:?}, VmHWM {:?}, at end {:?}; RssAnon at backlog {:?}, sampled peak {:?}, at end {:?}; RssFile at end {:?}",
        m.rss_at_backlog_kb, m.rss_sampled_peak_kb, m.vmhwm_kb, m.rss_at_end_kb,
        m.anon_at_backlog_kb, m.anon_sampled_peak_kb, m.anon_at_end_kb, m.file_at_end_kb
    );
    println!(
        "  node CPU us per delivered message: {:?}",
        summary.node_cpu_us_per_msg
    );
    if !summary.consume_errors_by_code.is_empty() {
        println!("  consume errors {:?}", summary.consume_errors_by_code);
    }
}

// ---------------------------------------------------------------------------------------
// Send-back

/// Options of `ringmq bench send-back`.
#[derive(Clone, Debug)]
pub struct SendBackOptions {
    pub addr: SocketAddr,
    pub messages: u64,
    pub size: usize,
    pub topic: String,
    pub queues: usize,
    pub connections: usize,
    pub inflight: usize,
    pub group: String,
    /// The header's `delayLevel`: 0 lets the node choose (level 3 for a first retry).
    pub delay_level: i32,
    pub node_pid: Option<u32>,
    pub progress: bool,
}

/// The figures a send-back run ends with.
#[derive(Clone, Debug, Serialize)]
pub struct SendBackSummary {
    pub size: usize,
    pub connections: usize,
    pub inflight_per_connection: usize,
    pub delay_level: i32,
    /// The plain sends that stored the messages.
    pub plain: SendFigures,
    /// CONSUMER_SEND_MSG_BACK of each stored message.
    pub send_back: SendFigures,
    /// send_back.msgs_per_sec / plain.msgs_per_sec.
    pub ratio: f64,
    /// Records SCHEDULE_TOPIC_XXXX's queues gained during the send-backs (the delayed
    /// retry copies; with a delay level of -1 the copies go to the DLQ instead).
    pub scheduled_copies: u64,
    pub node_memory: NodeMemory,
}

/// Sum of the end offsets of SCHEDULE_TOPIC_XXXX queues 0..levels (a queue that does not
/// exist counts 0).
async fn schedule_ends(client: &Client, levels: i32) -> anyhow::Result<u64> {
    let mut total = 0;
    for queue in 0..levels {
        let answer = client
            .request(queue_request(codes::GET_MAX_OFFSET, SCHEDULE_TOPIC, queue))
            .await?;
        if answer.code == response::SUCCESS {
            total += ext_i64(&answer, "offset").unwrap_or(0).max(0) as u64;
        }
    }
    Ok(total)
}

/// Runs a send-back benchmark; must be called inside a `LocalSet`.
pub async fn send_back(options: SendBackOptions) -> anyhow::Result<SendBackSummary> {
    if options.messages == 0 || options.queues == 0 {
        anyhow::bail!("--messages and --queues must each be at least 1");
    }
    let node = options.node_pid.map(|pid| NodeProcess { pid });
    let clients = connect_all(options.addr, options.connections).await?;
    let progress = options.progress;
    let (topic, queues, size) = (options.topic.clone(), options.queues, options.size);

    let cpu_0 = node.and_then(|n| n.cpu_seconds());
    let (plain, plain_elapsed) = send_all(
        &clients,
        options.inflight,
        options.messages,
        Box::new(move |seq| bench_send(&topic, queues, size, seq, &[])),
        None,
        progress.then_some("plain sends"),
    )
    .await;
    let cpu_1 = node.and_then(|n| n.cpu_seconds());

    let offsets = stored_offsets(&clients[0], &options, plain.ok.get()).await?;
    // Enough queues for any level a retry may ask for (the default levels have 18).
    const SCHEDULE_QUEUES: i32 = 32;
    let scheduled_before = schedule_ends(&clients[0], SCHEDULE_QUEUES).await?;
    let (group, origin_topic, level) = (
        options.group.clone(),
        options.topic.clone(),
        options.delay_level.to_compact_string(),
    );
    let cpu_2 = node.and_then(|n| n.cpu_seconds());
    let (backs, back_elapsed) = send_all(
        &clients,
        options.inflight,
        offsets.len() as u64,
        Box::new(move |n| send_back_request(offsets[n as usize], &group, &level, &origin_topic)),
        None,
        progress.then_some("send-backs"),
    )
    .await;
    let cpu_3 = node.and_then(|n| n.cpu_seconds());
    let scheduled_after = schedule_ends(&clients[0], SCHEDULE_QUEUES).await?;
    let plain = send_figures(&plain, plain_elapsed, cpu_0.zip(cpu_1).map(|(a, b)| b - a));
    let send_back = send_figures(&backs, back_elapsed, cpu_2.zip(cpu_3).map(|(a, b)| b - a));
    Ok(SendBackSummary {
        size: options.size.max(lateness::MIN_BODY),
        connections: options.connections,
        inflight_per_connection: options.inflight,
        delay_level: options.delay_level,
        ratio: if plain.msgs_per_sec > 0.0 {
            send_back.msgs_per_sec / plain.msgs_per_sec
        } else {
            0.0
        },
        plain,
        send_back,
        scheduled_copies: scheduled_after.saturating_sub(scheduled_before),
        node_memory: NodeMemory::at_end(node, NodeMemory::default()),
    })
}

/// Runs [`send_back`] on a thread of its own.
/// The CommitLog offsets of the bench messages stored on the topic, in sequence order;
/// an error unless every one of the `acknowledged` is read back.
async fn stored_offsets(
    client: &Client,
    options: &SendBackOptions,
    acknowledged: u64,
) -> anyhow::Result<Vec<i64>> {
    let mut offsets = vec![-1i64; options.messages as usize];
    for queue in 0..options.queues {
        read_queue(client, &options.topic, queue as i32, |view| {
            if let Some(slot) =
                lateness::body_seq(view.body).and_then(|seq| offsets.get_mut(seq as usize))
            {
                *slot = view.phys_offset;
            }
        })
        .await?;
    }
    let offsets: Vec<i64> = offsets.into_iter().filter(|&o| o >= 0).collect();
    if offsets.len() as u64 != acknowledged {
        anyhow::bail!(
            "{} messages acknowledged but {} read back",
            acknowledged,
            offsets.len()
        );
    }
    Ok(offsets)
}

/// CONSUMER_SEND_MSG_BACK of the record at `offset` with `level`.
fn send_back_request(offset: i64, group: &str, level: &str, origin_topic: &str) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("offset".into(), offset.to_compact_string());
    fields.insert("group".into(), group);
    fields.insert("delayLevel".into(), level);
    fields.insert("originTopic".into(), origin_topic);
    fields.insert("maxReconsumeTimes".into(), "16");
    RemotingCommand::request(codes::CONSUMER_SEND_MSG_BACK, fields)
}

pub fn run_send_back(options: SendBackOptions) -> anyhow::Result<SendBackSummary> {
    super::wire::on_own_thread("ringmq-bench-send-back", move || {
        Box::pin(send_back(options))
    })
}

pub fn print_send_back_summary(summary: &SendBackSummary) {
    println!(
        "ringmq bench send-back: {} connections x {} in flight, {} B bodies, delayLevel {}",
        summary.connections, summary.inflight_per_connection, summary.size, summary.delay_level
    );
    for (what, f) in [
        ("plain send", &summary.plain),
        ("send-back", &summary.send_back),
    ] {
        println!(
            "  {what}: {} ({} errors) in {:.2} s: {:.0} msgs/s; latency us p50 {} p99 {} max {}; node CPU us/msg {:?} {:?}",
            f.messages, f.errors, f.elapsed_s, f.msgs_per_sec, f.latency.p50_us, f.latency.p99_us,
            f.latency.max_us, f.node_cpu_us_per_msg, f.errors_by_code
        );
    }
    println!(
        "  send-back / plain: {:.2}; copies scheduled in {SCHEDULE_TOPIC}: {}",
        summary.ratio, summary.scheduled_copies
    );
}
