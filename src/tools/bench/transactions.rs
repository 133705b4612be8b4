//! `ringmq bench transactions`, throughput mode: what a transactional send costs against
//! a plain one. `clients` connections, all driven from one event loop (as `bench produce
//! --io tasks` drives its producers), each with one transaction in flight:
//!
//! ```text
//!   half send (SEND_MESSAGE_V2, sysFlag 0x4, TRAN_MSG, PGROUP)   -> wait for its answer
//!   END_TRANSACTION COMMIT naming the half                       -> wait for its answer
//!                                                                   (or, with
//!                                                                   `oneway_commit`, only
//!                                                                   until it is written,
//!                                                                   as stock clients send it)
//! ```
//!
//! A transaction counts once its commit is answered SUCCESS (or written, oneway); its
//! latency runs from the half send to that point, and the two steps are also timed apart.
//! The plain-send figure to hold it against is `bench produce --connections <clients>
//! --producers-per-connection 1 --io tasks --mode sync` with the same size: the same
//! clients, one message in flight each (`perf/transactions.sh` runs both, interleaved).
//!
//! Pending halves and the broker's check-backs are the other mode (`bench/tx_pending.rs`).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::counters::Counters;
use super::latency::{Latencies, LatencySummary};
use super::lateness;
use super::produce_run::{per_second, process_cpu};
use super::tx_wire::{commit_of, half_send, HalfReceipt, TxKeys};
use crate::client::Client;
use crate::remoting::codes::response;

/// Options of `ringmq bench transactions` (throughput mode).
#[derive(Clone, Debug)]
pub struct TxOptions {
    pub addr: SocketAddr,
    /// Connections, one transaction in flight on each.
    pub clients: usize,
    /// Body bytes (at least [`lateness::MIN_BODY`]: the body names its sequence number).
    pub size: usize,
    pub topic: String,
    pub queues: usize,
    /// The producer group (send header and `PGROUP`).
    pub group: String,
    /// Send END_TRANSACTION oneway, as stock clients do, instead of waiting for its answer.
    pub oneway_commit: bool,
    pub messages: Option<u64>,
    pub duration: Option<Duration>,
    pub progress: bool,
}

/// The figures a throughput run ends with (`--json` prints this).
#[derive(Clone, Debug, Serialize)]
pub struct TxSummary {
    pub clients: usize,
    pub size: usize,
    /// `request` (answer awaited) or `oneway`.
    pub commit: String,
    /// Transactions whose commit was answered SUCCESS (written, oneway).
    pub transactions: u64,
    /// Transactions that failed, at either step.
    pub errors: u64,
    /// Failures by step and response code (`prepare:<code>`, `commit:<code>`) or I/O
    /// error kind.
    pub errors_by_code: std::collections::BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub tx_per_sec: f64,
    /// Half send to commit answered (or written), microseconds.
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// The half send's round trip alone.
    pub prepare_latency: LatencySummary,
    /// END_TRANSACTION's round trip (or its write, oneway) alone.
    pub commit_latency: LatencySummary,
    /// The load generator's own CPU (the whole process) per transaction, microseconds.
    pub loadgen_cpu_us_per_tx: Option<f64>,
}

/// One throughput run: the claims of its clients and what they measured.
struct TxRun {
    options: TxOptions,
    keys: TxKeys,
    claimed: Cell<u64>,
    deadline: Option<Instant>,
    counters: Arc<Counters>,
    prepare: RefCell<Latencies>,
    commit: RefCell<Latencies>,
}

impl TxRun {
    /// The next transaction's sequence number; `None` once the run is over.
    fn claim(&self) -> Option<u64> {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return None;
        }
        let seq = self.claimed.get();
        if self.options.messages.is_some_and(|limit| seq >= limit) {
            return None;
        }
        self.claimed.set(seq + 1);
        Some(seq)
    }
}

fn io_error(step: &str, error: &std::io::Error) -> String {
    format!("{step} io:{:?}", error.kind())
}

/// Sends the half of transaction `seq` and reads its receipt.
async fn prepare(run: &TxRun, client: &Client, seq: u64) -> Result<HalfReceipt, String> {
    let options = &run.options;
    let key = run.keys.key(seq);
    let body = lateness::body(seq, options.size);
    let queue_id = (seq % options.queues as u64) as i32;
    let half = half_send(&options.topic, queue_id, &body, &options.group, &key);
    let sent_at = Instant::now();
    let outcome = client.request(half).await;
    run.prepare
        .borrow_mut()
        .record_us(sent_at.elapsed().as_micros() as u64);
    match outcome {
        Ok(answer) if answer.code == response::SUCCESS => HalfReceipt::from_answer(&answer, &key)
            .map_err(|why| {
                tracing::warn!("{why}");
                "prepare:bad answer".to_owned()
            }),
        Ok(answer) => Err(format!("prepare:{}", answer.code)),
        Err(error) => Err(io_error("prepare", &error)),
    }
}

/// Commits the half `receipt` names.
async fn commit(run: &TxRun, client: &Client, receipt: &HalfReceipt) -> Result<(), String> {
    let options = &run.options;
    let end = commit_of(&options.group, &options.topic, receipt);
    let sent_at = Instant::now();
    let outcome = if options.oneway_commit {
        client.oneway(end).await.map(|()| None)
    } else {
        client.request(end).await.map(Some)
    };
    run.commit
        .borrow_mut()
        .record_us(sent_at.elapsed().as_micros() as u64);
    match outcome {
        Ok(None) => Ok(()),
        Ok(Some(answer)) if answer.code == response::SUCCESS => Ok(()),
        Ok(Some(answer)) => Err(format!("commit:{}", answer.code)),
        Err(error) => Err(io_error("commit", &error)),
    }
}

/// One client: transactions one after the other until the run is over or its connection
/// is gone.
async fn transactor(run: Rc<TxRun>, client: Client) {
    let size = run.options.size as u64;
    while let Some(seq) = run.claim() {
        let started = Instant::now();
        let outcome = match prepare(&run, &client, seq).await {
            Ok(receipt) => commit(&run, &client, &receipt).await,
            Err(why) => Err(why),
        };
        match outcome {
            Ok(()) => {
                run.counters
                    .record_latency_us(started.elapsed().as_micros() as u64);
                run.counters.add_done(1, size);
            }
            Err(key) => {
                run.counters.error(key, 1);
                if client.is_closed() {
                    return;
                }
            }
        }
    }
}

/// Runs a throughput round; must be called inside a `LocalSet`.
pub async fn transactions(options: TxOptions) -> anyhow::Result<TxSummary> {
    if options.clients == 0 || options.queues == 0 {
        anyhow::bail!("--clients and --queues must each be at least 1");
    }
    if options.messages.is_none() && options.duration.is_none() {
        anyhow::bail!("give --messages or --duration");
    }
    let mut clients = Vec::with_capacity(options.clients);
    for _ in 0..options.clients {
        clients.push(
            Client::connect(options.addr)
                .await
                .map_err(|error| anyhow::anyhow!("connecting to {}: {error}", options.addr))?,
        );
    }
    // The clock starts once every connection is up, as for `bench produce`.
    let started = Instant::now();
    let cpu_at_start = process_cpu();
    let run = Rc::new(TxRun {
        keys: TxKeys::new(now_ms()),
        claimed: Cell::new(0),
        deadline: options.duration.map(|duration| started + duration),
        counters: Arc::new(Counters::default()),
        prepare: RefCell::new(Latencies::default()),
        commit: RefCell::new(Latencies::default()),
        options,
    });
    let progress = run.options.progress.then(|| {
        let counters = run.counters.clone();
        tokio::task::spawn_local(super::wire::report_progress("transactions", counters))
    });
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|client| tokio::task::spawn_local(transactor(run.clone(), client)))
        .collect();
    for task in tasks {
        task.await?;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
    }
    let cpu = process_cpu()
        .zip(cpu_at_start)
        .map(|(end, start)| end.saturating_sub(start).as_secs_f64());
    Ok(summary(&run, elapsed_s, cpu))
}

fn summary(run: &TxRun, elapsed_s: f64, loadgen_cpu_s: Option<f64>) -> TxSummary {
    let counters = &run.counters;
    let done = counters.done();
    TxSummary {
        clients: run.options.clients,
        size: run.options.size.max(lateness::MIN_BODY),
        commit: if run.options.oneway_commit {
            "oneway"
        } else {
            "request"
        }
        .into(),
        transactions: done,
        errors: counters.errors(),
        errors_by_code: counters.errors_by_code(),
        elapsed_s,
        tx_per_sec: per_second(done as f64, elapsed_s),
        latency: counters.latency_summary(),
        prepare_latency: run.prepare.borrow().summary(),
        commit_latency: run.commit.borrow().summary(),
        loadgen_cpu_us_per_tx: loadgen_cpu_s
            .filter(|_| done > 0)
            .map(|cpu| cpu * 1e6 / done as f64),
    }
}

/// Wall-clock milliseconds, the clock of store timestamps.
pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs [`transactions`] on a thread of its own.
pub fn run_transactions(options: TxOptions) -> anyhow::Result<TxSummary> {
    super::wire::on_own_thread("ringmq-bench-transactions", move || {
        Box::pin(transactions(options))
    })
}

pub fn print_tx_summary(summary: &TxSummary) {
    println!(
        "ringmq bench transactions: {} clients (one transaction in flight each), {} B bodies, commit as {}",
        summary.clients, summary.size, summary.commit
    );
    println!(
        "  {} transactions in {:.2} s: {:.0} transactions/s",
        summary.transactions, summary.elapsed_s, summary.tx_per_sec
    );
    summary.latency.print("prepare+commit latency us");
    summary.prepare_latency.print("prepare latency us");
    summary.commit_latency.print("commit latency us");
    if let Some(cpu) = summary.loadgen_cpu_us_per_tx {
        println!("  load generator CPU: {cpu:.1} us per transaction");
    }
    let mut line = format!("  errors {}", summary.errors);
    for (code, count) in &summary.errors_by_code {
        line.push_str(&format!("  [{code}: {count}]"));
    }
    println!("{line}");
}
