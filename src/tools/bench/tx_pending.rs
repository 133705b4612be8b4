//! `ringmq bench transactions --pending P`: a backlog of undecided halves and the
//! broker's check-backs of it.
//!
//! ```text
//!   checker:  one producer connection (bench/tx_checker.rs) registered for the group by
//!             HEART_BEAT before the first half is sent; it answers every
//!             CHECK_TRANSACTION_STATE with a oneway END_TRANSACTION COMMIT
//!   load:     P half sends, `connections` x `inflight` in flight, never decided by the
//!             bench itself; the time each was acknowledged is kept by sequence number
//!   wait:     until every acknowledged half was checked, or `grace` past the moment the
//!             last one became eligible
//! ```
//!
//! A half becomes eligible for a check at its store time plus the node's
//! `transactionTimeOut` (`check_timeout`, which must be the node's). Check-back lateness is
//! a check's arrival (its bytes read) minus that, in ms on the one machine's wall clock:
//! `lateness_store` from the store time the check's body carries, `lateness_ack` from
//! when the bench saw the half acknowledged (no earlier than its store time), the one
//! figure when a check has no body. Each half counts once, at its first check; further
//! checks of it are counted as duplicates. The wait includes up to one
//! `transactionCheckInterval`: the broker checks in rounds.
//!
//! With `node_pid`, the node's VmRSS and RssAnon are read before the load, when it ends,
//! at the end, and sampled every 100 ms for their peaks.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::latency::{Latencies, LatencySummary};
use super::lateness::{self, LatenessSummary, NodeProcess};
use super::transactions::now_ms;
use super::tx_checker::Checker;
use super::tx_wire::{half_send, Check, TxKeys};
use crate::client::{queue_request, Client};
use crate::remoting::codes::{request as codes, response};

/// How often the node's memory is sampled.
const RSS_EVERY: Duration = Duration::from_millis(100);

/// Options of `ringmq bench transactions --pending`.
#[derive(Clone, Debug)]
pub struct PendingOptions {
    pub addr: SocketAddr,
    /// Halves to send.
    pub pending: u64,
    pub size: usize,
    pub topic: String,
    pub queues: usize,
    pub group: String,
    pub connections: usize,
    /// Half sends in flight on each connection.
    pub inflight: usize,
    /// The node's `transactionTimeOut`.
    pub check_timeout: Duration,
    /// How long past the last half's eligibility unchecked halves are waited for.
    pub grace: Duration,
    pub node_pid: Option<u32>,
    pub progress: bool,
}

/// The node's memory, kB (with `node_pid`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PendingMemory {
    pub rss_before_kb: Option<u64>,
    pub anon_before_kb: Option<u64>,
    /// When the last half was acknowledged: the backlog at its largest, unless checks
    /// began before the load ended (`checked_during_load`).
    pub rss_after_load_kb: Option<u64>,
    pub anon_after_load_kb: Option<u64>,
    pub rss_sampled_peak_kb: Option<u64>,
    pub anon_sampled_peak_kb: Option<u64>,
    pub rss_at_end_kb: Option<u64>,
    pub anon_at_end_kb: Option<u64>,
    pub vmhwm_kb: Option<u64>,
}

/// The figures a pending run ends with (`--json` prints this).
#[derive(Clone, Debug, Serialize)]
pub struct PendingSummary {
    pub size: usize,
    pub connections: usize,
    pub inflight_per_connection: usize,
    pub check_timeout_ms: u64,
    /// Halves acknowledged, and the sends that failed (by code).
    pub halves: u64,
    pub load_errors: u64,
    pub load_errors_by_code: BTreeMap<String, u64>,
    pub load_elapsed_s: f64,
    pub halves_per_sec: f64,
    /// Half-send latency, microseconds.
    pub load_latency: LatencySummary,
    /// Halves acknowledged after the first one became eligible for a check.
    pub acked_after_first_eligible: u64,
    /// Distinct halves checked before the load ended.
    pub checked_during_load: u64,
    /// CHECK_TRANSACTION_STATE requests received, and the distinct halves they named.
    pub checks: u64,
    pub checked: u64,
    /// Checks of a half already checked.
    pub duplicates: u64,
    /// Checks naming no half of this run, and checks the bench could not read.
    pub foreign: u64,
    pub unreadable: u64,
    /// Checks whose body held no readable record (only `lateness_ack` counts them).
    pub without_record: u64,
    /// Acknowledged halves never checked before the run gave up.
    pub unchecked: u64,
    pub lateness_store: LatenessSummary,
    pub lateness_ack: LatenessSummary,
    /// From the first check to the last first-check, and distinct halves checked per
    /// second over it.
    pub check_span_s: f64,
    pub checked_per_sec: f64,
    /// Messages in the topic's queues at the end (the committed halves landed there).
    pub topic_messages: Option<u64>,
    pub heartbeat_failures: u64,
    pub checker_closed: bool,
    pub node_memory: PendingMemory,
    pub elapsed_s: f64,
}

/// What the checks said, half by half (index: sequence number).
struct Tracker {
    keys: TxKeys,
    ack_ms: Vec<i64>,
    /// Arrival of each half's first check, and its store time (`i64::MIN`: none).
    checked_at: Vec<i64>,
    store_ms: Vec<i64>,
    checked: u64,
    first_check_ms: Option<i64>,
    last_first_check_ms: i64,
    duplicates: u64,
    foreign: u64,
    without_record: u64,
}

impl Tracker {
    fn new(keys: TxKeys, halves: u64) -> Tracker {
        let slots = halves as usize;
        Tracker {
            keys,
            ack_ms: vec![i64::MIN; slots],
            checked_at: vec![i64::MIN; slots],
            store_ms: vec![i64::MIN; slots],
            checked: 0,
            first_check_ms: None,
            last_first_check_ms: 0,
            duplicates: 0,
            foreign: 0,
            without_record: 0,
        }
    }

    fn note(&mut self, check: &Check, at_ms: i64) {
        let record = check.record.as_ref();
        let seq = record
            .and_then(|record| record.body_seq)
            .or_else(|| self.keys.seq_of(&check.transaction_id));
        let Some(slot) = seq
            .map(|seq| seq as usize)
            .filter(|&s| s < self.ack_ms.len())
        else {
            self.foreign += 1;
            return;
        };
        if self.checked_at[slot] != i64::MIN {
            self.duplicates += 1;
            return;
        }
        self.checked_at[slot] = at_ms;
        match record {
            Some(record) => self.store_ms[slot] = record.store_timestamp,
            None => self.without_record += 1,
        }
        self.checked += 1;
        self.first_check_ms.get_or_insert(at_ms);
        self.last_first_check_ms = at_ms;
    }

    /// Lateness against the store times and against the acknowledgements, and how many
    /// acknowledged halves were never checked.
    fn lateness(&self, timeout_ms: i64) -> (LatenessSummary, LatenessSummary, u64) {
        let mut by_store = Vec::with_capacity(self.checked as usize);
        let mut by_ack = Vec::with_capacity(self.checked as usize);
        let mut unchecked = 0;
        for (slot, &at) in self.checked_at.iter().enumerate() {
            if at == i64::MIN {
                unchecked += u64::from(self.ack_ms[slot] != i64::MIN);
                continue;
            }
            if self.store_ms[slot] != i64::MIN {
                by_store.push(at - (self.store_ms[slot] + timeout_ms));
            }
            if self.ack_ms[slot] != i64::MIN {
                by_ack.push(at - (self.ack_ms[slot] + timeout_ms));
            }
        }
        (
            lateness::summarize(&mut by_store),
            lateness::summarize(&mut by_ack),
            unchecked,
        )
    }
}

/// The load of halves: claims, acknowledgements, errors.
struct Load {
    options: PendingOptions,
    tracker: Rc<RefCell<Tracker>>,
    next: Cell<u64>,
    acked: Cell<u64>,
    errors: RefCell<BTreeMap<String, u64>>,
    latencies: RefCell<Latencies>,
}

async fn load_worker(load: Rc<Load>, client: Client) {
    let options = &load.options;
    loop {
        let seq = load.next.get();
        if seq >= options.pending {
            return;
        }
        load.next.set(seq + 1);
        let key = load.tracker.borrow().keys.key(seq);
        let body = lateness::body(seq, options.size);
        let queue_id = (seq % options.queues as u64) as i32;
        let half = half_send(&options.topic, queue_id, &body, &options.group, &key);
        let sent_at = Instant::now();
        let outcome = client.request(half).await;
        load.latencies
            .borrow_mut()
            .record_us(sent_at.elapsed().as_micros() as u64);
        let failure = match outcome {
            Ok(answer) if answer.code == response::SUCCESS => {
                load.tracker.borrow_mut().ack_ms[seq as usize] = now_ms();
                load.acked.set(load.acked.get() + 1);
                continue;
            }
            Ok(answer) => answer.code.to_string(),
            Err(error) => format!("io:{:?}", error.kind()),
        };
        *load.errors.borrow_mut().entry(failure).or_default() += 1;
        if client.is_closed() {
            return;
        }
    }
}

/// Sends every half, `inflight` at a time on each client; returns the wall time.
async fn load_halves(load: &Rc<Load>, clients: &[Client]) -> f64 {
    let started = Instant::now();
    let reporter = load.options.progress.then(|| {
        let load = load.clone();
        tokio::task::spawn_local(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                eprintln!(
                    "  halves: {} of {} acknowledged, {} checked ({:.0} s)",
                    load.acked.get(),
                    load.options.pending,
                    load.tracker.borrow().checked,
                    started.elapsed().as_secs_f64()
                );
            }
        })
    });
    let workers: Vec<_> = clients
        .iter()
        .flat_map(|client| (0..load.options.inflight.max(1)).map(move |_| client.clone()))
        .map(|client| tokio::task::spawn_local(load_worker(load.clone(), client)))
        .collect();
    for worker in workers {
        let _ = worker.await;
    }
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    started.elapsed().as_secs_f64()
}

/// Samples VmRSS and RssAnon until aborted, keeping their peaks.
async fn sample_peaks(node: NodeProcess, peaks: Rc<Cell<(Option<u64>, Option<u64>)>>) {
    let higher = |old: Option<u64>, new: Option<u64>| old.max(new);
    loop {
        let (rss, anon) = peaks.get();
        peaks.set((
            higher(rss, node.status_kb("VmRSS")),
            higher(anon, node.status_kb("RssAnon")),
        ));
        tokio::time::sleep(RSS_EVERY).await;
    }
}

/// Waits until every acknowledged half was checked or `give_up_ms` has passed.
async fn wait_for_checks(tracker: &RefCell<Tracker>, acked: u64, give_up_ms: i64, progress: bool) {
    let mut last_report = Instant::now();
    while tracker.borrow().checked < acked && now_ms() < give_up_ms {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if progress && last_report.elapsed() >= Duration::from_secs(2) {
            last_report = Instant::now();
            eprintln!("  checked {} of {acked}", tracker.borrow().checked);
        }
    }
}

/// Sum of the end offsets of the topic's queues; `None` if the node does not say.
async fn topic_messages(client: &Client, topic: &str, queues: usize) -> Option<u64> {
    let mut total = 0;
    for queue in 0..queues {
        let answer = client
            .request(queue_request(codes::GET_MAX_OFFSET, topic, queue as i32))
            .await
            .ok()?;
        if answer.code != response::SUCCESS {
            return None;
        }
        total += answer.opt_str("offset")?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Runs a pending benchmark; must be called inside a `LocalSet`.
pub async fn pending(options: PendingOptions) -> anyhow::Result<PendingSummary> {
    if options.pending == 0 || options.queues == 0 || options.connections == 0 {
        anyhow::bail!("--pending, --queues and --connections must each be at least 1");
    }
    let node = options.node_pid.map(|pid| NodeProcess { pid });
    let started = Instant::now();
    let tracker = Rc::new(RefCell::new(Tracker::new(
        TxKeys::new(now_ms()),
        options.pending,
    )));
    let noted = tracker.clone();
    let on_check = Box::new(move |check: &Check, at: i64| noted.borrow_mut().note(check, at));
    let checker = Checker::start(options.addr, &options.group, on_check).await?;
    let clients = connect_all(options.addr, options.connections).await?;
    let mut memory = PendingMemory {
        rss_before_kb: node.and_then(|n| n.status_kb("VmRSS")),
        anon_before_kb: node.and_then(|n| n.status_kb("RssAnon")),
        ..PendingMemory::default()
    };
    let peaks = Rc::new(Cell::new((None, None)));
    let sampler = node.map(|node| tokio::task::spawn_local(sample_peaks(node, peaks.clone())));
    let load = Rc::new(Load {
        options: options.clone(),
        tracker: tracker.clone(),
        next: Cell::new(0),
        acked: Cell::new(0),
        errors: RefCell::new(BTreeMap::new()),
        latencies: RefCell::new(Latencies::default()),
    });
    let load_elapsed_s = load_halves(&load, &clients).await;
    memory.rss_after_load_kb = node.and_then(|n| n.status_kb("VmRSS"));
    memory.anon_after_load_kb = node.and_then(|n| n.status_kb("RssAnon"));
    let checked_during_load = tracker.borrow().checked;
    let timeout_ms = options.check_timeout.as_millis() as i64;
    let give_up_ms = now_ms() + timeout_ms + options.grace.as_millis() as i64;
    wait_for_checks(&tracker, load.acked.get(), give_up_ms, options.progress).await;
    // The last commits answered oneway need a moment to be stored.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let topic_messages = topic_messages(&clients[0], &options.topic, options.queues).await;
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    memory.rss_sampled_peak_kb = peaks.get().0;
    memory.anon_sampled_peak_kb = peaks.get().1;
    memory.rss_at_end_kb = node.and_then(|n| n.status_kb("VmRSS"));
    memory.anon_at_end_kb = node.and_then(|n| n.status_kb("RssAnon"));
    memory.vmhwm_kb = node.and_then(|n| n.status_kb("VmHWM"));
    let stats = checker.stats.clone();
    checker.stop();
    let figures = Ending {
        load_elapsed_s,
        checked_during_load,
        topic_messages,
        memory,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    let summary = summarize(&options, &load, &tracker.borrow(), &stats, figures);
    Ok(summary)
}

/// What [`pending`] measured besides the load and the tracker.
struct Ending {
    load_elapsed_s: f64,
    checked_during_load: u64,
    topic_messages: Option<u64>,
    memory: PendingMemory,
    elapsed_s: f64,
}

fn summarize(
    options: &PendingOptions,
    load: &Load,
    tracker: &Tracker,
    stats: &super::tx_checker::CheckerStats,
    ending: Ending,
) -> PendingSummary {
    let timeout_ms = options.check_timeout.as_millis() as i64;
    let (lateness_store, lateness_ack, unchecked) = tracker.lateness(timeout_ms);
    let acks = tracker.ack_ms.iter().filter(|&&at| at != i64::MIN);
    let first_eligible = acks.clone().min().map(|first| first + timeout_ms);
    let acked_after_first_eligible = first_eligible
        .map(|eligible| acks.filter(|&&at| at > eligible).count() as u64)
        .unwrap_or(0);
    let check_span_s = tracker
        .first_check_ms
        .map(|first| (tracker.last_first_check_ms - first) as f64 / 1000.0)
        .unwrap_or(0.0);
    let halves = load.acked.get();
    PendingSummary {
        size: options.size.max(lateness::MIN_BODY),
        connections: options.connections,
        inflight_per_connection: options.inflight,
        check_timeout_ms: timeout_ms as u64,
        halves,
        load_errors: load.errors.borrow().values().sum(),
        load_errors_by_code: load.errors.borrow().clone(),
        load_elapsed_s: ending.load_elapsed_s,
        halves_per_sec: super::produce_run::per_second(halves as f64, ending.load_elapsed_s),
        load_latency: load.latencies.borrow().summary(),
        acked_after_first_eligible,
        checked_during_load: ending.checked_during_load,
        checks: stats.checks.get(),
        checked: tracker.checked,
        duplicates: tracker.duplicates,
        foreign: tracker.foreign,
        unreadable: stats.unreadable.get(),
        without_record: tracker.without_record,
        unchecked,
        lateness_store,
        lateness_ack,
        check_span_s,
        checked_per_sec: super::produce_run::per_second(tracker.checked as f64, check_span_s),
        topic_messages: ending.topic_messages,
        heartbeat_failures: stats.heartbeat_failures.get(),
        checker_closed: stats.closed.get(),
        node_memory: ending.memory,
        elapsed_s: ending.elapsed_s,
    }
}

async fn connect_all(addr: SocketAddr, connections: usize) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        clients.push(
            Client::connect(addr)
                .await
                .map_err(|error| anyhow::anyhow!("connecting to {addr}: {error}"))?,
        );
    }
    Ok(clients)
}

/// Runs [`pending`] on a thread of its own.
pub fn run_pending(options: PendingOptions) -> anyhow::Result<PendingSummary> {
    super::wire::on_own_thread("ringmq-bench-tx-pending", move || {
        Box::pin(pending(options))
    })
}

pub fn print_pending_summary(summary: &PendingSummary) {
    println!(
        "ringmq bench transactions --pending: {} B bodies, {} connections x {} in flight, transactionTimeOut {} ms",
        summary.size, summary.connections, summary.inflight_per_connection, summary.check_timeout_ms
    );
    let l = &summary.load_latency;
    println!(
        "  halves acknowledged {} ({} errors {:?}) in {:.2} s: {:.0} halves/s; send latency us p50 {} p99 {} max {}",
        summary.halves, summary.load_errors, summary.load_errors_by_code, summary.load_elapsed_s,
        summary.halves_per_sec, l.p50_us, l.p99_us, l.max_us
    );
    println!(
        "  checks received {}: halves checked {} (during the load {}), unchecked {}, duplicates {}, foreign {}, unreadable {}, without a record {}; acknowledged after the first was eligible {}",
        summary.checks, summary.checked, summary.checked_during_load, summary.unchecked,
        summary.duplicates, summary.foreign, summary.unreadable, summary.without_record,
        summary.acked_after_first_eligible
    );
    for (what, l) in [
        ("store time + timeout", &summary.lateness_store),
        ("acknowledged + timeout", &summary.lateness_ack),
    ] {
        println!(
            "  check-back lateness ms (arrival - ({what})): p50 {} p90 {} p99 {} p99.9 {} max {} min {} mean {:.1}; early {} of {}",
            l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms, l.min_ms, l.mean_ms, l.early, l.count
        );
    }
    println!(
        "  first checks over {:.2} s: {:.0} halves checked/s; messages in the topic at the end {:?}; heartbeat failures {}, checker connection closed {}",
        summary.check_span_s, summary.checked_per_sec, summary.topic_messages,
        summary.heartbeat_failures, summary.checker_closed
    );
    let m = &summary.node_memory;
    println!(
        "  node memory kB: VmRSS before {:?}, after the load {:?}, sampled peak {:?}, at end {:?}, VmHWM {:?}; RssAnon before {:?}, after the load {:?}, sampled peak {:?}, at end {:?}",
        m.rss_before_kb, m.rss_after_load_kb, m.rss_sampled_peak_kb, m.rss_at_end_kb, m.vmhwm_kb,
        m.anon_before_kb, m.anon_after_load_kb, m.anon_sampled_peak_kb, m.anon_at_end_kb
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bench::tx_wire::CheckedRecord;

    fn check(key: &str, record: Option<(i64, u64)>) -> Check {
        Check {
            topic: "TxT".into(),
            queue_offset: 0,
            commit_log_offset: 0,
            transaction_id: key.into(),
            record: record.map(|(store_timestamp, seq)| CheckedRecord {
                store_timestamp,
                body_seq: Some(seq),
                producer_group: None,
                topic: "TxT".into(),
            }),
        }
    }

    #[test]
    fn checks_count_once_per_half_and_lateness_runs_from_eligibility() {
        let keys = TxKeys::new(1);
        let mut tracker = Tracker::new(keys.clone(), 4);
        for (seq, ack) in [(0, 1_000), (1, 1_010), (2, 1_020)] {
            tracker.ack_ms[seq] = ack;
        }
        // Half 0 stored at 995, checked 6,030 ms later with a 6,000 ms timeout.
        tracker.note(&check("x", Some((995, 0))), 7_025);
        tracker.note(&check("x", Some((995, 0))), 9_000);
        // Half 1 named by its key only, in a check with no body.
        tracker.note(&check(&keys.key(1), None), 7_100);
        tracker.note(&check("someone else's", None), 7_200);
        tracker.note(&check(&keys.key(99), None), 7_200);
        assert_eq!(tracker.checked, 2);
        assert_eq!(tracker.duplicates, 1);
        assert_eq!(tracker.foreign, 2);
        assert_eq!(tracker.without_record, 1);
        let (store, ack, unchecked) = tracker.lateness(6_000);
        assert_eq!(unchecked, 1, "half 2 was acknowledged and never checked");
        assert_eq!((store.count, store.max_ms), (1, 30));
        assert_eq!((ack.count, ack.min_ms, ack.max_ms), (2, 25, 90));
        assert_eq!(tracker.first_check_ms, Some(7_025));
        assert_eq!(tracker.last_first_check_ms, 7_100);
    }
}
