//! What a produce run is, whatever does its I/O: the options of `ringmq bench produce`,
//! the run producers claim their sends from (message numbers, rate pacing, the deadline),
//! the request each claim sends, how an outcome is counted, and the summary a run ends
//! with. The task producers (`bench/wire.rs`) and the blocking-socket producers
//! (`bench/threads.rs`) both drive a [`ProduceRun`]; neither depends on the other.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use bytes::Bytes;
use serde::Serialize;
use tokio::time::Instant;

use super::counters::Counters;
use super::latency::LatencySummary;
use crate::client::send_request_v2;
use crate::remoting::codes::{request as codes, response};
use crate::remoting::send_header::{encode_batch, BatchItem};
use crate::remoting::RemotingCommand;
use crate::store::properties;

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
    /// Give message n the key `bench-<n>` (`KEYS`), so `ringmq admin query-key` finds it.
    pub keys: bool,
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
            keys: false,
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
    /// The load generator's own CPU time (user and system, the whole process) per
    /// acknowledged message, in microseconds, so a reader can tell whether it was the
    /// limit; `None` without procfs or when nothing was acknowledged.
    pub loadgen_cpu_us_per_msg: Option<f64>,
    /// The same CPU time over the run's length: 1.0 is one core kept busy.
    pub loadgen_cores: Option<f64>,
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times: `USER_HZ`, fixed at 100 in the
/// kernel's user ABI whatever the kernel's own tick rate.
const USER_HZ: f64 = 100.0;

/// This process's CPU time so far (user plus system, all threads), from
/// `/proc/self/stat`; `None` where it cannot be read. Resolution 10 ms.
pub(super) fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after
    // its closing one, where utime and stime are the 12th and 13th fields.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) as f64 / USER_HZ))
}

/// One produce run: its options, the claims producers take turns on, and its counters.
pub(super) struct ProduceRun {
    pub(super) options: ProduceOptions,
    topics: Vec<String>,
    deadline: Option<StdInstant>,
    claims: Mutex<Claims>,
    pub(super) counters: Arc<Counters>,
    /// The process's CPU time when the run began ([`process_cpu`]).
    cpu_at_start: Option<Duration>,
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
            cpu_at_start: process_cpu(),
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
    pub(super) async fn claim(&self) -> Option<(u64, u64)> {
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
        let key = |n: u64| self.options.keys.then(|| bench_key(n));
        if self.options.batch <= 1 {
            return send_request_v2(topic, queue_id, body, Some("TagA"), key(first).as_deref());
        }
        let items: Vec<BatchItem> = (first..first + count)
            .map(|n| {
                let key = key(n);
                let mut props = vec![(properties::TAGS, "TagA"), (properties::WAIT, "true")];
                if let Some(key) = &key {
                    props.push((properties::KEYS, key.as_str()));
                }
                BatchItem {
                    flag: 0,
                    body: Bytes::copy_from_slice(body),
                    properties: properties::encode(props),
                }
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

/// The key `--keys` gives message `n`.
pub fn bench_key(n: u64) -> String {
    format!("bench-{n}")
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
    let cpu_used = match (run.cpu_at_start, process_cpu()) {
        (Some(start), Some(end)) => Some(end.saturating_sub(start).as_secs_f64()),
        _ => None,
    };
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
        loadgen_cpu_us_per_msg: cpu_used
            .filter(|_| done > 0)
            .map(|cpu| cpu * 1e6 / done as f64),
        loadgen_cores: cpu_used
            .filter(|_| elapsed_s > 0.0)
            .map(|cpu| cpu / elapsed_s),
    }
}

/// `count` per second over `elapsed` seconds (0 for an empty run).
pub(super) fn per_second(count: f64, elapsed: f64) -> f64 {
    if elapsed > 0.0 {
        count / elapsed
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_counts_the_work_this_process_does() {
        let start = process_cpu().expect("procfs is there on Linux");
        let deadline = StdInstant::now() + Duration::from_secs(10);
        let mut spin = 0u64;
        // Busy work until the clock moves on by two ticks (20 ms), bounded by the deadline.
        while process_cpu().unwrap() < start + Duration::from_millis(20) {
            for i in 0..100_000u64 {
                spin = spin.wrapping_mul(31).wrapping_add(i);
            }
            assert!(
                StdInstant::now() < deadline,
                "10 s of busy work and the CPU time still reads {:?} (started at {start:?})",
                process_cpu()
            );
        }
        std::hint::black_box(spin);
    }
}
