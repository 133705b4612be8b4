//! The `ringmq` command: parses the command line and dispatches to the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

// The node and the load generator allocate a few small objects per message (header
// fields, tasks, responses); mimalloc's thread-local free lists serve them faster than
// glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use ringmq::banner;
use ringmq::broker::delay::DelayLevels;
use ringmq::config::FlushMode;
use ringmq::io::{portable::PortableDisk, Disk, IoChoice};
use ringmq::node;
use ringmq::node_config::NodeConfig;
use ringmq::quiet_pipe;
use ringmq::store::inspect;
use ringmq::tools::bench::delivery::{
    print_delivery_summary, print_send_back_summary, run_delivery, run_send_back, DeliveryOptions,
    SendBackOptions, Waiting,
};
use ringmq::tools::bench::store::{print_summary, run_store_bench, StoreBenchOptions};
use ringmq::tools::bench::transactions::{print_tx_summary, run_transactions, TxOptions};
use ringmq::tools::bench::tx_pending::{print_pending_summary, run_pending, PendingOptions};
use ringmq::tools::bench::wire::{
    print_consume_summary, print_produce_summary, run_consume, run_embedded, run_produce,
    ConsumeOptions, EmbeddedOptions, FromOffset, ProduceOptions, ProducerIo, SendMode,
};

#[derive(Parser)]
#[command(
    name = "ringmq",
    version,
    about = "A RocketMQ-compatible message storage node"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker node: N shards serving the RocketMQ remoting protocol.
    Serve(ServeArgs),
    /// Load generators. With no subcommand: start an embedded node, produce to it, then
    /// consume the same messages back.
    Bench(BenchArgs),
    /// Offline tools for a store directory (the store must not be running).
    #[command(subcommand)]
    Store(StoreCommand),
    /// mqadmin's everyday commands against a running node, over the remoting protocol.
    /// Exit codes: 0 done, 1 not found, 2 bad input, 3 the node failed or is unreachable.
    Admin(ringmq::tools::admin::args::AdminArgs),
    /// The standalone name server (brokers register with it, clients read routes from
    /// it), configured by a RocketMQ namesrv.conf.
    Namesrv(NamesrvArgs),
    /// A failover controller (RocketMQ 5's controller mode: elects each broker group's
    /// master over Raft), configured by a RocketMQ controller.conf.
    Controller(ControllerArgs),
}

/// `ringmq controller -c controller.conf`, as RocketMQ's `mqcontroller -c`.
#[derive(Args)]
struct ControllerArgs {
    /// A RocketMQ controller.conf (properties): controllerDLegerGroup,
    /// controllerDLegerPeers, controllerDLegerSelfId are required.
    #[arg(short = 'c', long = "conf")]
    conf: PathBuf,
}

/// `ringmq namesrv -c namesrv.conf`, as RocketMQ's `mqnamesrv -c`.
#[derive(Args)]
struct NamesrvArgs {
    /// A RocketMQ namesrv.conf (properties); without one, the defaults (port 9876).
    #[arg(short = 'c', long = "conf")]
    conf: Option<PathBuf>,
}

/// `ringmq serve`: settings come from defaults, then `--config` (TOML), then
/// `--broker-conf` (RocketMQ properties), then `--set` and the flags below, which are
/// shorthands for `--set <key>=<value>`. Every key is listed in `ringmq serve --help-keys`.
#[derive(Args)]
struct ServeArgs {
    /// A TOML file of settings (snake_case keys).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A RocketMQ broker.conf (camelCase keys it shares with ringmq); `-c` as in
    /// RocketMQ's `mqbroker -c broker.conf`.
    #[arg(short = 'c', long)]
    broker_conf: Option<PathBuf>,
    /// Override one setting, `key=value` (either spelling); repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Store root (`storePathRootDir`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Remoting port (`listenPort`); 0 picks a free one.
    #[arg(long)]
    port: Option<u16>,
    /// sync (ack after fdatasync, group commit) or async (ack after the page-cache write).
    #[arg(long)]
    flush: Option<FlushMode>,
    /// Disk backend: auto (io_uring, else portable), uring, or portable.
    #[arg(long)]
    io: Option<IoChoice>,
    /// The address clients reach this broker at (STOREHOST, msgIds): `brokerIP1`.
    #[arg(long)]
    broker_ip: Option<std::net::IpAddr>,
    /// CommitLog segment size in bytes (`mapedFileSizeCommitLog`).
    #[arg(long)]
    segment_size: Option<u64>,
    /// Port of the embedded name server (`namesrvPort`); 0 picks a free one.
    #[arg(long)]
    namesrv_port: Option<u16>,
    /// Port of the Prometheus endpoint (`metricsPromExporterPort`); 0 picks a free one.
    #[arg(long)]
    metrics_port: Option<u16>,
    /// `autoCreateTopicEnable`: create unknown topics on their first send or route query.
    #[arg(long, action = clap::ArgAction::Set)]
    auto_create_topics: Option<bool>,
    /// Shards: pinned threads, each with its own store [default: one per CPU].
    #[arg(long)]
    shards: Option<u8>,
    /// How pulled records are sent: auto (sendfile for large ranges, writev from a mapping
    /// of the segment for small ones), sendfile (every range; mmap where the kernel
    /// refuses it) or mmap (every range): `bodySend`.
    #[arg(long)]
    body_send: Option<ringmq::server::body_send::BodySend>,
    /// Print the settings the node would run with, and exit.
    #[arg(long)]
    print_config: bool,
    /// Print every setting key (broker.conf spelling, default, range, meaning) as the
    /// markdown of docs/configuration.md, and exit.
    #[arg(long)]
    help_keys: bool,
}

impl ServeArgs {
    /// The flags as `key=value` overrides, after the `--set` ones (flags win).
    fn overrides(&self) -> Vec<String> {
        let mut overrides = self.overrides.clone();
        let mut set = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                overrides.push(format!("{key}={value}"));
            }
        };
        set(
            "store_path_root_dir",
            self.dir.as_ref().map(|d| d.display().to_string()),
        );
        set("listen_port", self.port.map(|p| p.to_string()));
        set(
            "flush_disk_type",
            self.flush.map(|f| {
                match f {
                    FlushMode::Sync => "SYNC_FLUSH",
                    FlushMode::Async => "ASYNC_FLUSH",
                }
                .to_string()
            }),
        );
        set(
            "io_backend",
            self.io.map(|io| {
                match io {
                    IoChoice::Auto => "auto",
                    IoChoice::Uring => "uring",
                    IoChoice::Portable => "portable",
                }
                .to_string()
            }),
        );
        set("broker_ip", self.broker_ip.map(|ip| ip.to_string()));
        set(
            "maped_file_size_commit_log",
            self.segment_size.map(|s| s.to_string()),
        );
        set("namesrv_port", self.namesrv_port.map(|p| p.to_string()));
        set("metrics_port", self.metrics_port.map(|p| p.to_string()));
        set(
            "auto_create_topic_enable",
            self.auto_create_topics.map(|b| b.to_string()),
        );
        set("shards", self.shards.map(|n| n.to_string()));
        set(
            "body_send",
            self.body_send.map(|mode| mode.as_str().to_string()),
        );
        overrides
    }
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    embedded: EmbeddedBenchArgs,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Drive the embedded store in-process, with no network.
    Store(StoreBenchArgs),
    /// Send messages to a node over the remoting protocol.
    Produce(ProduceArgs),
    /// Pull messages from a node over the remoting protocol.
    Consume(ConsumeArgs),
    /// Delay levels under a backlog: send messages with `DELAY` levels in turn, pull their
    /// deliveries, and report lateness (delivered minus due), losses and the node's memory.
    Delayed(DelayedArgs),
    /// Timer messages under a backlog: send messages with `TIMER_DELIVER_MS` spread over a
    /// window, pull their deliveries, and report lateness, losses and the node's memory.
    Timers(TimersArgs),
    /// CONSUMER_SEND_MSG_BACK throughput: store messages with plain sends, then hand each
    /// back; reports both rates and their ratio.
    SendBack(SendBackArgs),
    /// Transactional sends: each client sends a half (prepared) message, then commits it
    /// with END_TRANSACTION. With --pending P: P halves left undecided, the node's
    /// CHECK_TRANSACTION_STATE check-backs answered with commits, their lateness reported.
    Transactions(TransactionsArgs),
}

/// What `bench delayed`, `bench timers` and `bench send-back` share.
#[derive(Args)]
struct DeliveryLoadArgs {
    /// The broker's remoting address.
    #[arg(long)]
    addr: String,
    /// Messages to send.
    #[arg(long)]
    messages: u64,
    /// Message body size in bytes (at least 12: the body names its sequence number).
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Queues of the topic the messages go to.
    #[arg(long, default_value_t = 4)]
    queues: usize,
    /// Connections the requests go over.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Requests in flight on each connection (one message each).
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// The node's process id: its memory and CPU time are read from /proc.
    #[arg(long)]
    node_pid: Option<u32>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct DelayedArgs {
    #[command(flatten)]
    load: DeliveryLoadArgs,
    /// The node's `messageDelayLevel` (it must match: due times are computed from it).
    #[arg(long, default_value = "1s 2s 5s 10s 20s 30s")]
    levels: String,
    #[arg(long, default_value = "DelayBench")]
    topic: String,
    /// Seconds past the last due time to wait for deliveries still missing.
    #[arg(long, default_value_t = 30.0)]
    grace: f64,
}

#[derive(Args)]
struct TimersArgs {
    #[command(flatten)]
    load: DeliveryLoadArgs,
    /// Seconds from the first send to the earliest due time.
    #[arg(long, default_value_t = 40.0)]
    lead: f64,
    /// Seconds the due times are spread over, after the lead.
    #[arg(long, default_value_t = 50.0)]
    span: f64,
    #[arg(long, default_value = "TimerBench")]
    topic: String,
    /// Seconds past the last due time to wait for deliveries still missing.
    #[arg(long, default_value_t = 30.0)]
    grace: f64,
}

#[derive(Args)]
struct SendBackArgs {
    #[command(flatten)]
    load: DeliveryLoadArgs,
    #[arg(long, default_value = "SendBackBench")]
    topic: String,
    /// The consumer group handing messages back.
    #[arg(long, default_value = "ringmq-send-back-bench")]
    group: String,
    /// The header's delayLevel: 0 lets the node choose (level 3 on a first retry), -1
    /// sends straight to the dead-letter queue.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    delay_level: i32,
}

fn seconds(what: &str, value: f64) -> anyhow::Result<Duration> {
    if !(value >= 0.0 && value.is_finite()) {
        anyhow::bail!("--{what} {value}: must be a number of seconds, 0 or more");
    }
    Ok(Duration::from_secs_f64(value))
}

fn delivery_options(
    load: &DeliveryLoadArgs,
    topic: String,
    waiting: Waiting,
    grace: f64,
) -> anyhow::Result<DeliveryOptions> {
    Ok(DeliveryOptions {
        addr: resolve(&load.addr)?,
        waiting,
        messages: load.messages,
        size: load.size,
        topic,
        queues: load.queues,
        connections: load.connections,
        inflight: load.inflight,
        grace: seconds("grace", grace)?,
        node_pid: load.node_pid,
        progress: !load.quiet,
    })
}

fn bench_delayed(args: DelayedArgs) -> anyhow::Result<ExitCode> {
    let levels = DelayLevels::parse(&args.levels)
        .map_err(|why| anyhow::anyhow!("--levels {:?}: {why}", args.levels))?;
    let options = delivery_options(
        &args.load,
        args.topic,
        Waiting::Delay { levels },
        args.grace,
    )?;
    let summary = run_delivery(options)?;
    report(args.load.json, &summary, print_delivery_summary)?;
    Ok(exit_code(summary.send.errors + summary.missing))
}

fn bench_timers(args: TimersArgs) -> anyhow::Result<ExitCode> {
    let waiting = Waiting::Timer {
        lead: seconds("lead", args.lead)?,
        span: seconds("span", args.span)?,
    };
    let options = delivery_options(&args.load, args.topic, waiting, args.grace)?;
    let summary = run_delivery(options)?;
    report(args.load.json, &summary, print_delivery_summary)?;
    Ok(exit_code(summary.send.errors + summary.missing))
}

fn bench_send_back(args: SendBackArgs) -> anyhow::Result<ExitCode> {
    let load = &args.load;
    let summary = run_send_back(SendBackOptions {
        addr: resolve(&load.addr)?,
        messages: load.messages,
        size: load.size,
        topic: args.topic,
        queues: load.queues,
        connections: load.connections,
        inflight: load.inflight,
        group: args.group,
        delay_level: args.delay_level,
        node_pid: load.node_pid,
        progress: !load.quiet,
    })?;
    report(load.json, &summary, print_send_back_summary)?;
    Ok(exit_code(summary.plain.errors + summary.send_back.errors))
}

#[derive(Args)]
struct TransactionsArgs {
    /// The broker's remoting address.
    #[arg(long)]
    addr: String,
    /// Clients (connections driven from one event loop), one transaction in flight each.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Message body size in bytes (at least 12: the body names its sequence number).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    #[arg(long, default_value = "TxBenchTopic")]
    topic: String,
    /// Queues of the topic the halves name.
    #[arg(long, default_value_t = 8)]
    queues: usize,
    /// The producer group (send header, PGROUP, HEART_BEAT).
    #[arg(long, default_value = "ringmq-bench-tx")]
    group: String,
    /// Send END_TRANSACTION oneway, as stock clients do (a transaction then counts once its
    /// commit is written), instead of waiting for the node's answer.
    #[arg(long)]
    oneway_commit: bool,
    /// Pending mode: send this many halves without deciding them, answer the node's
    /// checks with commits over a producer connection registered by HEART_BEAT, and
    /// report check-back lateness.
    #[arg(long)]
    pending: Option<u64>,
    /// Pending mode: connections the halves go over.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Pending mode: half sends in flight on each connection.
    #[arg(long, default_value_t = 64)]
    inflight: usize,
    /// Pending mode: the node's transactionTimeOut in ms (a half is due a check that long
    /// after its store time); it must match the node's.
    #[arg(long, default_value_t = 6000)]
    check_timeout_ms: u64,
    /// Pending mode: seconds past the last half's eligibility to wait for checks missing.
    #[arg(long, default_value_t = 120.0)]
    grace: f64,
    /// Pending mode: the node's process id, whose memory is read from /proc.
    #[arg(long)]
    node_pid: Option<u32>,
    #[command(flatten)]
    run: RunArgs,
}

fn bench_transactions(args: TransactionsArgs) -> anyhow::Result<ExitCode> {
    let addr = resolve(&args.addr)?;
    if let Some(pending) = args.pending {
        let summary = run_pending(PendingOptions {
            addr,
            pending,
            size: args.size,
            topic: args.topic,
            queues: args.queues,
            group: args.group,
            connections: args.connections,
            inflight: args.inflight,
            check_timeout: Duration::from_millis(args.check_timeout_ms),
            grace: seconds("grace", args.grace)?,
            node_pid: args.node_pid,
            progress: !args.run.quiet,
        })?;
        report(args.run.json, &summary, print_pending_summary)?;
        return Ok(exit_code(summary.load_errors + summary.unchecked));
    }
    let (messages, duration) = args.run.length()?;
    let summary = run_transactions(TxOptions {
        addr,
        clients: args.clients,
        size: args.size,
        topic: args.topic,
        queues: args.queues,
        group: args.group,
        oneway_commit: args.oneway_commit,
        messages,
        duration,
        progress: !args.run.quiet,
    })?;
    report(args.run.json, &summary, print_tx_summary)?;
    Ok(exit_code(summary.errors))
}

/// The embedded run: a node of its own (temporary directory, free ports), a produce round,
/// then a consume round of the same messages.
#[derive(Args)]
struct EmbeddedBenchArgs {
    /// sync (ack after fdatasync, group commit) or async (ack after the page-cache write).
    #[arg(long, default_value = "async")]
    flush: FlushMode,
    /// Messages to produce and then consume.
    #[arg(long, default_value_t = 200_000)]
    messages: u64,
    /// Message body size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Connections to the node.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Concurrent producers sharing each connection.
    #[arg(long, default_value_t = 4)]
    producers_per_connection: usize,
    /// sync, async or oneway.
    #[arg(long, default_value = "sync")]
    mode: SendMode,
    /// Print both summaries as one JSON object.
    #[arg(long)]
    json: bool,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

/// How long a benchmark runs and how it reports: shared by `bench produce`, `bench consume`
/// and `bench store`.
#[derive(Args)]
struct RunArgs {
    /// Stop after this many messages [default: 200000 unless --duration is given].
    #[arg(long)]
    messages: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

impl RunArgs {
    /// `--messages` and `--duration`: 200,000 messages when neither is given.
    fn length(&self) -> anyhow::Result<(Option<u64>, Option<Duration>)> {
        let duration = match self.duration {
            Some(seconds) if !(seconds > 0.0 && seconds.is_finite()) => {
                anyhow::bail!("--duration {seconds}: must be a positive number of seconds")
            }
            other => other.map(Duration::from_secs_f64),
        };
        let messages = self.messages.or(if duration.is_none() {
            Some(200_000)
        } else {
            None
        });
        Ok((messages, duration))
    }
}

/// Prints a summary as one JSON object or, without `--json`, as text.
fn report<T: serde::Serialize>(
    json: bool,
    summary: &T,
    print: impl FnOnce(&T),
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(summary)?);
    } else {
        print(summary);
    }
    Ok(())
}

#[derive(Args)]
struct ProduceArgs {
    /// The broker's remoting address.
    #[arg(long)]
    addr: String,
    /// Connections to the node.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Concurrent producers sharing each connection.
    #[arg(long, default_value_t = 4)]
    producers_per_connection: usize,
    /// Message body size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Topic (with --topics N > 1, the prefix of TOPIC0..TOPICN-1).
    #[arg(long, default_value = "BenchTopic")]
    topic: String,
    /// Number of topics.
    #[arg(long, default_value_t = 1)]
    topics: usize,
    /// Queues per topic.
    #[arg(long, default_value_t = 8)]
    queues: usize,
    /// sync (wait for each response), async (up to --inflight outstanding) or oneway.
    #[arg(long, default_value = "sync")]
    mode: SendMode,
    /// Producer I/O: tasks (one thread drives every connection from one event loop, as
    /// redis-benchmark does; producers multiplex on the connections), threads (one
    /// blocking socket and thread per connection; sync mode, one producer per connection),
    /// or auto (threads where they can run, tasks otherwise). The summary names the mode
    /// and the load generator's own CPU per message.
    #[arg(long, default_value = "auto")]
    io: ProducerIo,
    /// Outstanding sends per producer in async mode.
    #[arg(long, default_value_t = 32)]
    inflight: usize,
    /// Messages per request; above 1 uses SEND_BATCH_MESSAGE.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Messages per second over all producers; 0 is unlimited.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Give message n the key `bench-<n>` (KEYS), for `ringmq admin query-key --key bench-0`.
    #[arg(long)]
    keys: bool,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct ConsumeArgs {
    /// The broker's remoting address.
    #[arg(long)]
    addr: String,
    #[arg(long, default_value = "BenchTopic")]
    topic: String,
    /// Queues of the topic to pull from (0..Q-1).
    #[arg(long, default_value_t = 8)]
    queues: usize,
    /// Connections; the queues are shared out among them.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Consumer group.
    #[arg(long, default_value = "ringmq-bench-consumer")]
    group: String,
    /// Start at each queue's earliest or latest offset.
    #[arg(long, default_value = "earliest")]
    from_offset: FromOffset,
    /// Most messages per pull.
    #[arg(long, default_value_t = 32)]
    max_per_pull: usize,
    /// Long-polling suspension in milliseconds (0: no suspension).
    #[arg(long, default_value_t = 1000)]
    suspend_ms: u64,
    /// Pop instead of pull (POP_MESSAGE, at most 32 a pop, long-polling for
    /// `--suspend-ms`), acknowledging each pop with one BATCH_ACK_MESSAGE.
    #[arg(long)]
    pop: bool,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct StoreBenchArgs {
    /// Store directory [default: a temporary directory, removed afterwards].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// sync (ack after fdatasync, group commit) or async (ack after the page-cache write).
    #[arg(long, default_value = "async")]
    flush: FlushMode,
    /// Concurrent producers, each waiting for its acknowledgement before its next send.
    #[arg(long, default_value_t = 16)]
    producers: usize,
    /// Message body size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Number of topics.
    #[arg(long, default_value_t = 1)]
    topics: usize,
    /// Queues per topic.
    #[arg(long, default_value_t = 8)]
    queues: usize,
    /// Disk backend: auto (io_uring, else portable), uring, or portable.
    #[arg(long, default_value = "auto")]
    io: IoChoice,
    /// Append one JSON line per acknowledged message to this file.
    #[arg(long)]
    ack_log: Option<PathBuf>,
    /// CommitLog segment size in bytes [default: 1 GiB].
    #[arg(long)]
    segment_size: Option<u64>,
    /// Keys per message (KEYS tokens), each an IndexFile entry; 0 sends none.
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// The first key of message n is `key<n mod this>` (0: a key of its own per message).
    #[arg(long, default_value_t = 0)]
    distinct_keys: u64,
    /// Lookups by key of random first keys after the puts, timed (needs --distinct-keys).
    #[arg(long, default_value_t = 0)]
    queries: u64,
    /// After the puts, delete every closed segment and report the longest shard stall.
    #[arg(long)]
    delete_probe: bool,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Check every record and ConsumeQueue entry; exits 1 on damage.
    Verify {
        #[arg(long)]
        dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print one JSON line per valid record, in log order.
    Dump {
        #[arg(long)]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    quiet_pipe::install();
    let cli = Cli::parse();
    // `ringmq admin` says what went wrong in its one error line; the client's warnings
    // (e.g. an HTTP answer read as a bad frame) would only repeat it.
    let default_log = match cli.command {
        Command::Admin(_) => "error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RINGMQ_LOG")
                .unwrap_or_else(|_| default_log.into()),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let outcome = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::Store(args)),
            ..
        }) => bench_store(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::Produce(args)),
            ..
        }) => bench_produce(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::Consume(args)),
            ..
        }) => bench_consume(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::Delayed(args)),
            ..
        }) => bench_delayed(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::Timers(args)),
            ..
        }) => bench_timers(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::SendBack(args)),
            ..
        }) => bench_send_back(args),
        Command::Bench(BenchArgs {
            command: Some(BenchCommand::Transactions(args)),
            ..
        }) => bench_transactions(args),
        Command::Bench(BenchArgs {
            command: None,
            embedded,
        }) => bench_embedded(embedded),
        Command::Store(StoreCommand::Verify { dir, json }) => verify(&dir, json),
        Command::Store(StoreCommand::Dump { dir }) => dump(&dir),
        Command::Admin(args) => Ok(ringmq::tools::admin::run(args)),
        Command::Namesrv(args) => namesrv(args),
        Command::Controller(args) => controller(args),
    };
    match outcome {
        Ok(code) => code,
        Err(error) if quiet_pipe::is_closed_stdout(&error) => quiet_pipe::die_of_sigpipe(),
        Err(error) => {
            eprintln!("ringmq: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the node until SIGINT or SIGTERM (exit 0 after a clean stop), or until the shard
/// stops on its own (exit 1).
fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if args.help_keys {
        print!("{}", ringmq::node_config::render::document());
        return Ok(ExitCode::SUCCESS);
    }
    let config = match NodeConfig::load(
        args.config.as_deref(),
        args.broker_conf.as_deref(),
        &args.overrides(),
    ) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("ringmq: bad configuration: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    if args.print_config {
        for (key, value) in config.settings() {
            println!("{key} = {value}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{}",
        banner::starting(&banner::Running {
            version: env!("CARGO_PKG_VERSION"),
            store: &config.store_path_root_dir,
            shards: config.shards,
            flush: config.flush_disk_type.as_str(),
            role: match config.enable_controller_mode {
                true => "chosen by the controllers",
                false => config.broker_role.as_str(),
            },
        })
    );
    if config.enable_controller_mode {
        return serve_in_controller_mode(config);
    }
    let mut node = node::start(config)?;
    print_serving_banner(&node);
    let signalled = wait_for_stop(node.take_exit_signal())?;
    if signalled {
        eprintln!("ringmq: stopping");
    }
    node.shutdown()?;
    Ok(if signalled {
        eprintln!("ringmq: stopped cleanly");
        ExitCode::SUCCESS
    } else {
        eprintln!("ringmq: a shard stopped on its own");
        ExitCode::from(1)
    })
}

/// Runs a broker in controller mode (D18) until SIGINT or SIGTERM (exit 0 after a clean
/// stop), or until a run's node stops on its own (exit 1).
fn serve_in_controller_mode(config: NodeConfig) -> anyhow::Result<ExitCode> {
    use node::controller_mode::{self, supervisor::Ended};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let ended = local.block_on(&runtime, async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let stop = async {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        };
        controller_mode::run(config, stop, |node, role| {
            eprintln!("ringmq: controller mode: serving as {role:?}");
            print_serving_banner(node);
        })
        .await
    })?;
    Ok(match ended {
        Ended::Stopped => {
            eprintln!("ringmq: stopped cleanly");
            ExitCode::SUCCESS
        }
        Ended::NodeExited => {
            eprintln!("ringmq: a shard stopped on its own");
            ExitCode::from(1)
        }
    })
}

/// Runs the standalone name server until SIGINT or SIGTERM (exit 0); a bad config is exit 2.
fn namesrv(args: NamesrvArgs) -> anyhow::Result<ExitCode> {
    use ringmq::namesrv::{config::NamesrvConfig, standalone};
    let loaded = match NamesrvConfig::load(args.conf.as_deref()) {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("ringmq: bad configuration: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let version = env!("CARGO_PKG_VERSION");
    standalone::run(&loaded.config, |addr| {
        eprintln!("ringmq: name server {version} listening on {addr}");
    })?;
    eprintln!("ringmq: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

fn controller(args: ControllerArgs) -> anyhow::Result<ExitCode> {
    use ringmq::controller::{config::ControllerConfig, standalone};
    let loaded = match ControllerConfig::load(&args.conf) {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("ringmq: bad configuration: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let version = env!("CARGO_PKG_VERSION");
    let config = &loaded.config;
    let result = standalone::run(config, |addr| {
        eprintln!(
            "ringmq: controller {version} {} of group {} listening on {addr}",
            config.self_id, config.group
        );
    });
    if let Err(error) = result {
        eprintln!("ringmq: controller stopped: {error}");
        return Ok(ExitCode::from(2));
    }
    eprintln!("ringmq: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

/// The addresses the node serves on, one line each, once it listens.
fn print_serving_banner(node: &node::NodeHandle) {
    for line in banner::serving(&banner::Bound {
        broker: node.bound_addr(),
        advertised: node.addr(),
        namesrv: node.namesrv_bound_addr(),
        namesrv_addrs: node.name_servers(),
        metrics: node.metrics_bound_addr(),
        shards: node.shard_count(),
        network_ring_shards: node.network_ring_shards(),
    }) {
        eprintln!("{line}");
    }
}

/// Waits for SIGTERM or SIGINT (true) or for a shard to stop on its own (false).
fn wait_for_stop(exited: Option<impl std::future::Future>) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let exited = async {
            match exited {
                Some(exited) => {
                    let _ = exited.await;
                }
                None => std::future::pending().await,
            }
        };
        anyhow::Ok(tokio::select! {
            _ = terminate.recv() => true,
            _ = interrupt.recv() => true,
            _ = exited => false,
        })
    })
}

fn bench_store(args: StoreBenchArgs) -> anyhow::Result<ExitCode> {
    let (messages, duration) = args.run.length()?;
    let summary = run_store_bench(StoreBenchOptions {
        dir: args.dir,
        flush: args.flush,
        producers: args.producers,
        size: args.size,
        messages,
        duration,
        topics: args.topics,
        queues: args.queues,
        io: args.io,
        ack_log: args.ack_log,
        segment_size: args.segment_size,
        progress: !args.run.quiet,
        keys: args.keys,
        distinct_keys: args.distinct_keys,
        queries: args.queries,
        delete_probe: args.delete_probe,
    })?;
    report(args.run.json, &summary, print_summary)?;
    Ok(exit_code(summary.errors))
}

fn resolve(addr: &str) -> anyhow::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{addr}: no address"))
}

fn exit_code(errors: u64) -> ExitCode {
    if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn bench_produce(args: ProduceArgs) -> anyhow::Result<ExitCode> {
    let (messages, duration) = args.run.length()?;
    let mut options = ProduceOptions::new(resolve(&args.addr)?);
    options.connections = args.connections;
    options.producers_per_connection = args.producers_per_connection;
    options.size = args.size;
    options.topic = args.topic;
    options.topics = args.topics;
    options.queues = args.queues;
    options.mode = args.mode;
    options.io = args.io;
    options.inflight = args.inflight;
    options.batch = args.batch;
    options.rate = args.rate;
    options.keys = args.keys;
    options.messages = messages;
    options.duration = duration;
    options.progress = !args.run.quiet;
    let summary = run_produce(options)?;
    report(args.run.json, &summary, print_produce_summary)?;
    Ok(exit_code(summary.errors))
}

fn bench_consume(args: ConsumeArgs) -> anyhow::Result<ExitCode> {
    let (messages, duration) = args.run.length()?;
    let mut options = ConsumeOptions::new(resolve(&args.addr)?);
    options.topic = args.topic;
    options.queues = args.queues;
    options.connections = args.connections;
    options.group = args.group;
    options.from = args.from_offset;
    options.max_per_pull = args.max_per_pull;
    options.suspend = Duration::from_millis(args.suspend_ms);
    options.pop = args.pop;
    options.messages = messages;
    options.duration = duration;
    options.progress = !args.run.quiet;
    let summary = run_consume(options)?;
    report(args.run.json, &summary, print_consume_summary)?;
    Ok(exit_code(summary.errors))
}

fn bench_embedded(args: EmbeddedBenchArgs) -> anyhow::Result<ExitCode> {
    let summary = run_embedded(EmbeddedOptions {
        flush: args.flush,
        messages: args.messages,
        size: args.size,
        connections: args.connections,
        producers_per_connection: args.producers_per_connection,
        mode: args.mode,
        progress: !args.quiet,
    })?;
    report(args.json, &summary, |summary| {
        println!("ringmq bench: embedded node, {}", summary.flush);
        print_produce_summary(&summary.produce);
        print_consume_summary(&summary.consume);
    })?;
    let complete = summary.consume.messages == summary.produce.messages;
    if !complete {
        eprintln!(
            "ringmq bench: consumed {} of {} produced messages",
            summary.consume.messages, summary.produce.messages
        );
    }
    Ok(if complete {
        exit_code(summary.produce.errors + summary.consume.errors)
    } else {
        ExitCode::from(1)
    })
}

fn offline_disk() -> Rc<dyn Disk> {
    Rc::new(PortableDisk::new())
}

fn verify(dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let report = inspect::verify(offline_disk(), dir)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{}: {} segments, {} records ({} bytes), log end {}, durable point {}{}",
            dir.display(),
            report.segments,
            report.records,
            report.record_bytes,
            report.log_end,
            report.durable_point,
            if report.crashed {
                " (not cleanly stopped)"
            } else {
                ""
            }
        );
        println!(
            "{} consume queues, {} entries ({} below the log's start, expired)",
            report.queues, report.queue_entries, report.expired_queue_entries
        );
        if let Some(tail) = &report.unrecovered_tail {
            println!("unrecovered tail (the next start cuts it): {tail}");
        }
        for damage in &report.damage {
            println!("DAMAGE: {damage}");
        }
        println!(
            "{}",
            if report.damage.is_empty() {
                "OK"
            } else {
                "DAMAGED"
            }
        );
    }
    Ok(if report.damage.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn dump(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let (end, invalid) = inspect::dump(offline_disk(), dir, |record| {
        serde_json::to_writer(&mut out, &record)?;
        out.write_all(b"\n")
    })?;
    out.flush()?;
    if let Some(reason) = invalid {
        eprintln!("dump stopped at {end}: {reason}");
    }
    Ok(ExitCode::SUCCESS)
}
