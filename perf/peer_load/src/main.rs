//! `peer_load`: the load generator `perf/peers.sh` points at two of ringmq's peers, NATS
//! JetStream and Redis streams, for the loads `ringmq bench` and `redis-benchmark` cannot
//! make.
//!
//! Shaped like `ringmq bench produce --io tasks`: one thread, one tokio current-thread event
//! loop, N connections, each one client with one message in flight that waits for its
//! acknowledgement before the next. Besides that closed loop it writes a backlog fast (many
//! in flight) and reads a backlog back. Every subcommand prints one JSON line: `messages`,
//! `bytes`, `seconds`, `msgs_per_sec`, `p50_us` and `p99_us` (null where nothing waits for
//! an acknowledgement), `errors`.

mod nats;
mod redis;

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use hdrhistogram::Histogram;

#[derive(Parser)]
#[command(about = "Load for NATS JetStream and Redis streams, one thread, one event loop")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Creates the file-backed stream that holds the subject.
    NatsSetup(NatsTarget),
    /// N clients, each publishing and waiting for the PubAck of every message.
    NatsProduce {
        #[command(flatten)]
        target: NatsTarget,
        #[arg(long, default_value_t = 1)]
        clients: usize,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
    },
    /// Writes a backlog from one connection, `--inflight` publishes awaiting their PubAcks.
    NatsFill {
        #[command(flatten)]
        target: NatsTarget,
        #[arg(long)]
        messages: u64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
        #[arg(long, default_value_t = 256)]
        inflight: usize,
    },
    /// Reads the backlog with one ephemeral pull consumer (ack policy none).
    NatsConsume {
        #[command(flatten)]
        target: NatsTarget,
        #[arg(long)]
        messages: u64,
        /// Messages per pull request (the client keeps the next one asked for at half).
        #[arg(long, default_value_t = 200)]
        batch: usize,
    },
    /// Writes a backlog spread over `--streams` streams, pipelined XADDs on one connection.
    RedisFill {
        #[command(flatten)]
        target: RedisTarget,
        #[arg(long)]
        messages: u64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
        #[arg(long, default_value_t = 128)]
        pipeline: usize,
    },
    /// Reads the backlog: one connection per stream, XREAD COUNT `--count` after the last id.
    RedisConsume {
        #[command(flatten)]
        target: RedisTarget,
        #[arg(long)]
        messages: u64,
        #[arg(long, default_value_t = 32)]
        count: usize,
    },
}

/// Where the NATS server is and which stream and subject to use.
#[derive(Args, Clone)]
pub struct NatsTarget {
    #[arg(long, default_value = "127.0.0.1:4222")]
    pub url: String,
    #[arg(long, default_value = "BENCH")]
    pub stream: String,
    #[arg(long, default_value = "bench.messages")]
    pub subject: String,
}

/// Where the Redis server is and which streams to use: `{key}-0` .. `{key}-{streams - 1}`.
#[derive(Args, Clone)]
pub struct RedisTarget {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    #[arg(long, default_value = "backlog")]
    pub key: String,
    #[arg(long, default_value_t = 4)]
    pub streams: usize,
}

/// What a run did, merged over its clients.
pub struct Summary {
    pub messages: u64,
    pub bytes: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Send to acknowledgement, in microseconds, where each message is waited for.
    latency: Option<Histogram<u64>>,
}

impl Summary {
    pub fn new(with_latency: bool) -> Self {
        let latency = with_latency
            .then(|| Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds"));
        Summary {
            messages: 0,
            bytes: 0,
            errors: 0,
            seconds: 0.0,
            latency,
        }
    }

    /// Counts one acknowledged (or read) message of `bytes`, waited for `waited`.
    pub fn record(&mut self, bytes: usize, waited: Option<Duration>) {
        self.messages += 1;
        self.bytes += bytes as u64;
        if let (Some(histogram), Some(waited)) = (self.latency.as_mut(), waited) {
            histogram.saturating_record(waited.as_micros().try_into().unwrap_or(u64::MAX));
        }
    }

    pub fn merge(&mut self, other: Summary) {
        self.messages += other.messages;
        self.bytes += other.bytes;
        self.errors += other.errors;
        if let (Some(mine), Some(theirs)) = (self.latency.as_mut(), other.latency) {
            mine.add(theirs).expect("histograms of the same bounds");
        }
    }

    fn json(&self) -> serde_json::Value {
        let quantile = |q| self.latency.as_ref().map(|h| h.value_at_quantile(q));
        serde_json::json!({
            "messages": self.messages,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "msgs_per_sec": if self.seconds > 0.0 { self.messages as f64 / self.seconds } else { 0.0 },
            "p50_us": quantile(0.5),
            "p99_us": quantile(0.99),
            "errors": self.errors,
        })
    }
}

async fn run(command: Command) -> anyhow::Result<Option<Summary>> {
    Ok(Some(match command {
        Command::NatsSetup(target) => {
            nats::setup(&target).await?;
            return Ok(None);
        }
        Command::NatsProduce {
            target,
            clients,
            seconds,
            size,
        } => nats::produce(&target, clients, Duration::from_secs_f64(seconds), size).await?,
        Command::NatsFill {
            target,
            messages,
            size,
            inflight,
        } => nats::fill(&target, messages, size, inflight.max(1)).await?,
        Command::NatsConsume {
            target,
            messages,
            batch,
        } => nats::consume(&target, messages, batch).await?,
        Command::RedisFill {
            target,
            messages,
            size,
            pipeline,
        } => redis::fill(&target, messages, size, pipeline.max(1)).await?,
        Command::RedisConsume {
            target,
            messages,
            count,
        } => redis::consume(&target, messages, count).await?,
    }))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Some(summary) = runtime.block_on(run(cli.command))? {
        println!("{}", summary.json());
    }
    Ok(())
}
