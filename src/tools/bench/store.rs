//! `ringmq bench store`: producers appending to the embedded store in-process, no network.
//!
//! The store runs on one thread (a shard) in a tokio current-thread runtime; each producer
//! is a task on it that sends a message, waits for its acknowledgement, records the
//! latency and sends the next. With `--ack-log` every acknowledgement is written to the
//! log as one JSON line, with one `write` per line, before the next send, so a process
//! killed at any moment leaves in the log only messages that were acknowledged.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tokio::time::Instant;

use super::latency::{Latencies, LatencySummary};
use crate::clock::Clock;
use crate::config::{FlushMode, StoreConfig};
use crate::io::{open_backend, IoChoice};
use crate::store::record::{body_crc, RecordInput};
use crate::store::{properties, PutResult, PutStatus, Store, StoreStats};

/// Options of `ringmq bench store`.
#[derive(Clone, Debug)]
pub struct StoreBenchOptions {
    /// The store directory; a temporary one (removed afterwards) when `None`.
    pub dir: Option<PathBuf>,
    pub flush: FlushMode,
    pub producers: usize,
    pub size: usize,
    pub messages: Option<u64>,
    pub duration: Option<Duration>,
    pub topics: usize,
    pub queues: usize,
    pub io: IoChoice,
    pub ack_log: Option<PathBuf>,
    pub segment_size: Option<u64>,
    pub progress: bool,
    /// Keys per message (`KEYS` tokens, each indexed): `k<stamp>`, `k<stamp>-1`, ...
    pub keys: usize,
    /// With more than 0, the first key of message `n` is `key<n mod distinct_keys>`
    /// instead of one of its own, so each key names `messages / distinct_keys` messages.
    pub distinct_keys: u64,
    /// Lookups by key, of random keys among the first key's, once the puts are done.
    pub queries: u64,
    /// After the puts, delete every closed segment (retention with `fileReservedTime=0`)
    /// while a task on the shard measures how long the shard could not run it.
    pub delete_probe: bool,
}

/// What `--delete-probe` measured (all zero without it).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeleteProbe {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    /// The longest the shard thread went without running the probe task, in µs.
    pub longest_stall_us: u64,
    /// From the start of the cleanup run to its end (unlinks included), in µs.
    pub cleanup_us: u64,
    /// The longest single step of it on the shard's thread (one queue's trim, or moving
    /// the log start and the index).
    pub longest_step_us: u64,
}

/// The lookups' figures (all zero without `--queries`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct QuerySummary {
    pub queries: u64,
    pub query_p50_us: u64,
    pub query_p99_us: u64,
    pub query_max_us: u64,
    /// Records found per lookup, on average.
    pub query_records_mean: f64,
    /// Lookups that found nothing (a key that was sent must be found).
    pub query_misses: u64,
}

/// The figures a run ends with (`--json` prints this).
#[derive(Clone, Debug, Serialize)]
pub struct StoreBenchSummary {
    pub io_backend: String,
    pub flush: String,
    pub producers: usize,
    pub size: usize,
    pub messages: u64,
    pub errors: u64,
    pub flush_timeouts: u64,
    pub elapsed_s: f64,
    pub msgs_per_sec: f64,
    pub mb_per_sec: f64,
    /// Acknowledgement latency in microseconds.
    #[serde(flatten)]
    pub latency: LatencySummary,
    pub fsyncs_per_msg: f64,
    pub batches: u64,
    #[serde(flatten)]
    pub query: QuerySummary,
    #[serde(flatten)]
    pub delete: DeleteProbe,
}

#[derive(Serialize)]
struct AckLine<'a> {
    topic: &'a str,
    queue_id: i32,
    queue_offset: u64,
    phys_offset: u64,
    body_crc: i32,
    store_timestamp: i64,
}

struct Run {
    options: StoreBenchOptions,
    store: Store,
    latencies: RefCell<Latencies>,
    sent: Cell<u64>,
    acked: Cell<u64>,
    errors: Cell<u64>,
    flush_timeouts: Cell<u64>,
    first_error: RefCell<Option<String>>,
    ack_log: RefCell<Option<File>>,
    deadline: Option<Instant>,
}

impl Run {
    /// Claims the next message number, or `None` once the run is over.
    fn claim(&self) -> Option<u64> {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return None;
        }
        let next = self.sent.get();
        if self.options.messages.is_some_and(|limit| next >= limit) {
            return None;
        }
        self.sent.set(next + 1);
        Some(next)
    }
}

/// Runs the benchmark on a dedicated thread and returns its summary.
pub fn run_store_bench(options: StoreBenchOptions) -> anyhow::Result<StoreBenchSummary> {
    if options.producers == 0 || options.topics == 0 || options.queues == 0 {
        anyhow::bail!("--producers, --topics and --queues must each be at least 1");
    }
    if options.messages.is_none() && options.duration.is_none() {
        anyhow::bail!("give --messages or --duration");
    }
    let (dir, _temporary) = match &options.dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let temporary = tempfile::Builder::new().prefix("ringmq-bench-").tempdir()?;
            (temporary.path().to_path_buf(), Some(temporary))
        }
    };
    let thread = std::thread::Builder::new()
        .name("ringmq-shard-0".into())
        .spawn(move || -> anyhow::Result<StoreBenchSummary> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, bench_on_shard(options, dir))
        })?;
    thread
        .join()
        .map_err(|_| anyhow::anyhow!("the benchmark thread panicked"))?
}

/// The store's defaults in `dir` with the bench's flush mode and segment size; the
/// deletion probe makes every closed segment expired at every hour. The largest message
/// is lowered to what a (small) segment holds.
fn bench_store_config(options: &StoreBenchOptions, dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    config.flush_mode = options.flush;
    if options.delete_probe {
        config.retention.file_reserved = Duration::ZERO;
        config.retention.delete_when = (0..24).collect();
        config.retention.delete_batch_max = usize::MAX;
    }
    if let Some(size) = options.segment_size {
        config.commit_log_segment_size = size;
    }
    config.max_message_size = config
        .max_message_size
        .min(
            config
                .commit_log_segment_size
                .saturating_sub(crate::config::RECORD_OVERHEAD_MAX + 8) as usize,
        )
        .max(1);
    config
}

async fn bench_on_shard(
    options: StoreBenchOptions,
    dir: PathBuf,
) -> anyhow::Result<StoreBenchSummary> {
    let config = bench_store_config(&options, &dir);
    let disk = open_backend(options.io, config.flush_mode.data_writes())?;
    let store = Store::open(config, disk, Clock::system()).await?;
    let ack_log = match &options.ack_log {
        Some(path) => Some(File::create(path)?),
        None => None,
    };
    let started = Instant::now();
    let run = Rc::new(Run {
        deadline: options.duration.map(|duration| started + duration),
        options: options.clone(),
        store: store.clone(),
        latencies: RefCell::new(Latencies::default()),
        sent: Cell::new(0),
        acked: Cell::new(0),
        errors: Cell::new(0),
        flush_timeouts: Cell::new(0),
        first_error: RefCell::new(None),
        ack_log: RefCell::new(ack_log),
    });
    let progress = options
        .progress
        .then(|| tokio::task::spawn_local(report_progress(run.clone())));
    let producers: Vec<_> = (0..options.producers)
        .map(|producer| tokio::task::spawn_local(produce(run.clone(), producer)))
        .collect();
    for producer in producers {
        producer.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
    }
    let query = run_queries(&store, &options, run.sent.get())?;
    let delete = if options.delete_probe {
        probe_deletion(&store).await?
    } else {
        DeleteProbe::default()
    };
    let stats = store.stats();
    store.shutdown().await?;
    if let Some(error) = run.first_error.borrow().as_ref() {
        eprintln!("first error: {error}");
    }
    Ok(summary(&run, &store, &stats, elapsed, query, delete))
}

/// The run's figures; `stats` as the store counted them before it shut down.
fn summary(
    run: &Run,
    store: &Store,
    stats: &StoreStats,
    elapsed: f64,
    query: QuerySummary,
    delete: DeleteProbe,
) -> StoreBenchSummary {
    let options = &run.options;
    let latencies = run.latencies.borrow();
    let acked = run.acked.get();
    let per_second = |count: f64| if elapsed > 0.0 { count / elapsed } else { 0.0 };
    StoreBenchSummary {
        io_backend: store.backend_name().to_string(),
        flush: options.flush.as_str().to_string(),
        producers: options.producers,
        size: options.size,
        messages: acked,
        errors: run.errors.get(),
        flush_timeouts: run.flush_timeouts.get(),
        elapsed_s: elapsed,
        msgs_per_sec: per_second(acked as f64),
        mb_per_sec: per_second(acked as f64 * options.size as f64) / 1e6,
        latency: latencies.summary(),
        fsyncs_per_msg: if acked > 0 {
            stats.log_syncs as f64 / acked as f64
        } else {
            0.0
        },
        batches: stats.batches,
        query,
        delete,
    }
}

/// Runs one cleanup (every closed segment has expired: the store was opened with
/// `fileReservedTime=0` and every hour a `deleteWhen` hour) while a task that only yields
/// records the longest gap between its turns.
async fn probe_deletion(store: &Store) -> anyhow::Result<DeleteProbe> {
    // Let the flusher and the checkpointer record a safe offset past the closed segments
    // (bounded: the flusher's thorough interval and two checkpoints).
    let deadline = Instant::now()
        + store.config().flush_thorough_interval
        + store.config().checkpoint_interval * 2;
    while store.checkpointed_safe_offset()
        < store.log_start() + 2 * store.config().commit_log_segment_size
        && Instant::now() < deadline
    {
        tokio::time::sleep(store.config().checkpoint_interval / 4).await;
    }
    let done = Rc::new(Cell::new(false));
    let longest = Rc::new(Cell::new(Duration::ZERO));
    let ticker = {
        let (done, longest) = (done.clone(), longest.clone());
        tokio::task::spawn_local(async move {
            let mut last = std::time::Instant::now();
            while !done.get() {
                tokio::task::yield_now().await;
                let now = std::time::Instant::now();
                longest.set(longest.get().max(now - last));
                last = now;
            }
        })
    };
    tokio::task::yield_now().await;
    let began = std::time::Instant::now();
    let report = store.clean_now().await?;
    let cleanup = began.elapsed();
    done.set(true);
    ticker.await?;
    Ok(DeleteProbe {
        segments_deleted: report.segments,
        bytes_deleted: report.bytes,
        longest_stall_us: longest.get().as_micros() as u64,
        cleanup_us: cleanup.as_micros() as u64,
        longest_step_us: report.longest_step_micros,
    })
}

/// `options.queries` lookups of random first keys, each timed alone; the records they find
/// are file ranges, not read (the node sends them with sendfile).
fn run_queries(
    store: &Store,
    options: &StoreBenchOptions,
    sent: u64,
) -> anyhow::Result<QuerySummary> {
    if options.queries == 0 || options.keys == 0 || sent == 0 {
        return Ok(QuerySummary::default());
    }
    if options.distinct_keys == 0 {
        anyhow::bail!("--queries needs --distinct-keys, so that the keys to look up are known");
    }
    let mut rng = crate::rng::SplitMix64::new(0x5eed);
    let mut latencies = Latencies::default();
    let (mut records, mut misses) = (0u64, 0u64);
    let key_space = options.distinct_keys.min(sent);
    for _ in 0..options.queries {
        let n = rng.range(0, key_space);
        let topic = format!("BenchTopic{}", n as usize % options.topics);
        let key = format!("key{n}");
        let began = std::time::Instant::now();
        let found = store.lookup_keys(&topic, &key, 64, 0, i64::MAX)?;
        latencies.record_us(began.elapsed().as_micros() as u64);
        records += found.records.len() as u64;
        misses += u64::from(found.records.is_empty());
    }
    Ok(QuerySummary {
        queries: options.queries,
        query_p50_us: latencies.percentile_us(50.0),
        query_p99_us: latencies.percentile_us(99.0),
        query_max_us: latencies.max_us(),
        query_records_mean: records as f64 / options.queries as f64,
        query_misses: misses,
    })
}

async fn produce(run: Rc<Run>, producer: usize) {
    let options = &run.options;
    let topics: Vec<String> = (0..options.topics)
        .map(|topic| format!("BenchTopic{topic}"))
        .collect();
    let born_host = SocketAddr::from(([127, 0, 0, 1], 40000 + (producer % 20000) as u16));
    let store_host = run.store.config().store_host;
    let mut body = vec![b'x'; options.size];
    let clock = Clock::system();
    let mut properties = String::with_capacity(64);
    while let Some(number) = run.claim() {
        // A distinct body per message, so every acknowledged body CRC is checkable; the
        // stamp is written in place so the generator itself stays cheap.
        let stamp_len = write_stamp(&mut body, producer as u64, number);
        let body = Bytes::copy_from_slice(&body[..]);
        let topic = &topics[number as usize % topics.len()];
        let queue_id = ((number / topics.len() as u64) % options.queues as u64) as i32;
        let stamp = std::str::from_utf8(&body[stamp_len.0..stamp_len.1]).unwrap_or("0");
        write_properties(&mut properties, options, stamp, number);
        let input = RecordInput {
            topic: topic.clone(),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: clock.now_ms(),
            born_host,
            store_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: body_crc(&body),
            body,
            properties: properties.clone(),
        };
        let crc = input.body_crc;
        let sent_at = Instant::now();
        let outcome = run.store.put(input).await;
        let micros = sent_at.elapsed().as_micros() as u64;
        match outcome {
            Ok(result) => record_ack(&run, &result, micros, topic, queue_id, crc),
            Err(error) => {
                run.errors.set(run.errors.get() + 1);
                run.first_error
                    .borrow_mut()
                    .get_or_insert(error.to_string());
                if run.store.poison_cause().is_some() {
                    return;
                }
            }
        }
    }
}

/// The record's properties: KEYS when the bench asks for keys (the first one of few
/// distinct values when `distinct_keys` is set, the others unique, from `stamp`), and TAGS.
fn write_properties(
    properties: &mut String,
    options: &StoreBenchOptions,
    stamp: &str,
    number: u64,
) {
    properties.clear();
    if options.keys > 0 {
        properties.push_str(properties::KEYS);
        properties.push('\u{1}');
        for key in 0..options.keys {
            if key > 0 {
                properties.push(' ');
            }
            if key == 0 && options.distinct_keys > 0 {
                use std::fmt::Write as _;
                let _ = write!(properties, "key{}", number % options.distinct_keys);
                continue;
            }
            properties.push('k');
            properties.push_str(stamp);
            if key > 0 {
                properties.push('-');
                properties.push(char::from(b'0' + (key % 10) as u8));
            }
        }
        properties.push('\u{2}');
    }
    properties.push_str(properties::TAGS);
    properties.push_str("\u{1}TagA\u{2}");
}

/// Counts an acknowledged put and writes its line to the ack log, if there is one.
fn record_ack(run: &Run, result: &PutResult, micros: u64, topic: &str, queue_id: i32, crc: i32) {
    run.latencies.borrow_mut().record_us(micros);
    run.acked.set(run.acked.get() + 1);
    if result.status == PutStatus::FlushDiskTimeout {
        run.flush_timeouts.set(run.flush_timeouts.get() + 1);
    }
    if let (Some(placement), Some(log)) = (result.placement, run.ack_log.borrow_mut().as_mut()) {
        let line = AckLine {
            topic,
            queue_id,
            queue_offset: placement.queue_offset,
            phys_offset: placement.phys_offset,
            body_crc: crc,
            store_timestamp: placement.store_timestamp,
        };
        let mut text = serde_json::to_string(&line).expect("plain fields serialize");
        text.push('\n');
        if let Err(error) = log.write_all(text.as_bytes()) {
            run.first_error
                .borrow_mut()
                .get_or_insert(format!("writing the ack log: {error}"));
        }
    }
}

async fn report_progress(run: Rc<Run>) {
    let started = Instant::now();
    let mut previous = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let acked = run.acked.get();
        let latencies = run.latencies.borrow();
        eprintln!(
            "[{:>4.0}s] {acked:>10} acked  {:>9} msgs/s  p99 {:>6} us  errors {}",
            started.elapsed().as_secs_f64(),
            acked - previous,
            latencies.percentile_us(99.0),
            run.errors.get()
        );
        previous = acked;
    }
}

/// Writes `p<producer>-m<number>-` at the start of `body` (as much as fits) and returns
/// where the message number's digits are.
fn write_stamp(body: &mut [u8], producer: u64, number: u64) -> (usize, usize) {
    let mut at = 0;
    let mut put = |byte: u8, at: &mut usize| {
        if *at < body.len() {
            body[*at] = byte;
        }
        *at += 1;
    };
    put(b'p', &mut at);
    for digit in decimal_digits(producer) {
        put(digit, &mut at);
    }
    put(b'-', &mut at);
    put(b'm', &mut at);
    let digits_start = at;
    for digit in decimal_digits(number) {
        put(digit, &mut at);
    }
    let digits_end = at;
    put(b'-', &mut at);
    let limit = body.len();
    (digits_start.min(limit), digits_end.min(limit))
}

fn decimal_digits(mut value: u64) -> impl Iterator<Item = u8> {
    let mut digits = [0u8; 20];
    let mut count = 0;
    loop {
        digits[19 - count] = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    digits.into_iter().skip(20 - count)
}

/// The human-readable summary.
pub fn print_summary(summary: &StoreBenchSummary) {
    println!(
        "ringmq bench store: {} producers, {} B messages, {}, io {}",
        summary.producers, summary.size, summary.flush, summary.io_backend
    );
    println!(
        "  {} messages in {:.2} s: {:.0} msgs/s, {:.1} MB/s",
        summary.messages, summary.elapsed_s, summary.msgs_per_sec, summary.mb_per_sec
    );
    summary.latency.print("ack latency us");
    println!(
        "  fsyncs per message {:.4}  ({} batches)  errors {}  flush timeouts {}",
        summary.fsyncs_per_msg, summary.batches, summary.errors, summary.flush_timeouts
    );
    let delete = &summary.delete;
    if delete.segments_deleted > 0 {
        println!(
            "  deleted {} segments ({} bytes) in {} us (longest step on the shard {} us); longest shard stall meanwhile {} us",
            delete.segments_deleted,
            delete.bytes_deleted,
            delete.cleanup_us,
            delete.longest_step_us,
            delete.longest_stall_us
        );
    }
    let query = &summary.query;
    if query.queries > 0 {
        println!(
            "  {} lookups by key: p50 {} us, p99 {} us, max {} us; {:.1} records each, {} found nothing",
            query.queries,
            query.query_p50_us,
            query.query_p99_us,
            query.query_max_us,
            query.query_records_mean,
            query.query_misses
        );
    }
}
