//! How long the client bookkeeping stalls other work: the longest round trip a ping
//! connection sees while the node sweeps, expires and disconnects many registered clients
//! (issue 10, defect 2: 16,000 clients made a request wait 1.4 s during a sweep and 1.7 s
//! when their connections closed). A benchmark, not a test: it asserts nothing about time
//! and prints what it measured.
//!
//! ```text
//! cargo run --release --example client_sweep_stall -- [CLIENTS] [CONNECTIONS]
//! ```
//!
//! Defaults: 50,000 clients, one consumer group each (as the issue measured), spread over
//! 500 connections (100 clients heartbeat over each, so a closing connection takes 100).
//! Each phase runs on a fresh in-process node with one shard on the portable backend,
//! storing into a temporary directory. A ping thread, with its own runtime and connection,
//! asks GET_CONSUMER_LIST_BY_GROUP for a group nobody is in (the answer takes the groups
//! lock, so it waits for both the shard and the lock) one request at a time, a millisecond
//! apart, and records each round trip against the phase it was sent in. Phases:
//!
//! - `idle`: the node with nothing registered, for the machine's noise floor.
//! - `sweeps_nothing_expires`: 3 s after registering every client, with a sweep every
//!   second and the 120 s expiry, so each sweep finds every client alive.
//! - `sweep_expires_all`: the clients registered within the 5 s expiry and the next sweep
//!   (10 s after the node started) expires them all at once; ends when sampled groups
//!   (every 1,000th and the last) are gone.
//! - `mass_disconnect`: every client connection closed at once (the sweep is hourly, so
//!   only the closes run); ends when the node counts only the ping and control connections
//!   again and the sampled groups are gone.
//!
//! Output: one line per phase, `phase=<name> seconds=<length> pings=<n> max_stall_ms=<longest
//! round trip> p99_ms=<99th percentile> longest_sent_at_ms=<when the longest was sent, from
//! the phase's start>`, the pings being those sent during the phase (the one in flight at
//! its end included, however long it takes). It only uses the node's public API, so the
//! same file runs against an earlier commit for a before/after comparison.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::node::NodeHandle;
use ringmq::node_config::{MetricsExporter, NodeConfig};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

const PHASES: [&str; 4] = [
    "idle",
    "sweeps_nothing_expires",
    "sweep_expires_all",
    "mass_disconnect",
];
/// The phase number while no phase is being measured (registration, node start and stop).
const BETWEEN: usize = usize::MAX;
/// Long enough for the slowest stall the old quadratic code showed at this size.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest any phase may take before the bench gives up.
const PHASE_LIMIT: Duration = Duration::from_secs(600);

/// Round trips recorded per phase, in microseconds.
struct Stalls {
    phase: AtomicUsize,
    /// Pings sent between phases that have come back.
    finished_between: AtomicU64,
    stop: AtomicBool,
    /// What the round trips are timed from.
    epoch: Instant,
    /// The nice value the ping thread got.
    ping_nice: std::sync::atomic::AtomicI64,
    /// When the phase being measured began, in microseconds since `epoch`.
    phase_began_us: AtomicU64,
    /// Per phase: (sent, in microseconds since `epoch`; round trip, in microseconds).
    samples: Mutex<Vec<Vec<(u64, u64)>>>,
}

fn run_local<F: std::future::Future>(future: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tokio::task::LocalSet::new().block_on(&runtime, future)
}

fn consumer_list(group: &str) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("consumerGroup".into(), group);
    RemotingCommand::request(request::GET_CONSUMER_LIST_BY_GROUP, fields)
}

/// A consumer's heartbeat naming one group and one subscription.
fn heartbeat(client_id: &str, group: &str) -> RemotingCommand {
    let body = serde_json::json!({
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": false,
            "subscriptionDataSet": [{"topic": "BenchTopic", "subString": "*", "tagsSet": [],
                "codeSet": [], "subVersion": 1_700_000_000_000_i64, "expressionType": "TAG"}]
        }]
    });
    RemotingCommand::request(request::HEART_BEAT, ExtFields::new()).with_body(body.to_string())
}

fn group_name(i: usize) -> String {
    format!("bench-group-{i}")
}

fn start_node(dir: &std::path::Path, expiry: Duration, sweep: Duration) -> NodeHandle {
    let segment = 4 * 1024 * 1024;
    let options = NodeConfig {
        store_path_root_dir: dir.into(),
        listen_port: 0,
        namesrv_port: 0,
        bind_address: std::net::Ipv4Addr::LOCALHOST.into(),
        metrics_exporter_type: MetricsExporter::Disable,
        pin_shard_threads: false,
        shards: 1,
        io_backend: ringmq::io::IoChoice::Portable,
        maped_file_size_commit_log: segment,
        max_message_size: ringmq::config::largest_message_for_segment(segment) as usize,
        channel_expired_timeout: expiry,
        client_sweep_interval: sweep,
        ..NodeConfig::default()
    };
    ringmq::node::start(options).expect("node starts")
}

/// Raises this thread's priority as far as allowed (nice -20 needs root): on two cores the
/// bench's own threads (closing 500 sockets, registering clients) and the node's shard
/// keep both busy, and a ping waiting for a CPU would be counted as the node's stall.
/// Returns the nice value the ping thread runs at.
#[allow(unsafe_code)] // two plain system calls, nothing else in this bench needs it
fn raise_priority() -> i32 {
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
    unsafe {
        let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
        for nice in [-20, -10, 0] {
            if libc::setpriority(libc::PRIO_PROCESS, thread, nice) == 0 {
                return nice;
            }
        }
    }
    0
}

/// Pings `addr` until told to stop, recording each round trip under the phase it began in.
fn ping(addr: SocketAddr, stalls: Arc<Stalls>) {
    stalls
        .ping_nice
        .store(raise_priority() as i64, Ordering::Relaxed);
    run_local(async move {
        let client = Client::connect(addr).await.expect("ping connects");
        client.set_timeout(REQUEST_TIMEOUT);
        while !stalls.stop.load(Ordering::Relaxed) {
            let phase = stalls.phase.load(Ordering::Relaxed);
            let sent = Instant::now();
            let sent_us = sent.duration_since(stalls.epoch).as_micros() as u64;
            let answer = client
                .request(consumer_list("bench-ping"))
                .await
                .expect("ping answered");
            let took = sent.elapsed().as_micros() as u64;
            assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
            if phase == BETWEEN {
                stalls.finished_between.fetch_add(1, Ordering::Relaxed);
            } else {
                stalls.samples.lock().unwrap()[phase].push((sent_us, took));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
}

/// Registers `clients` clients, one group each, over `connections` connections (client i
/// on connection i % connections); returns the connections, still open.
async fn register(addr: SocketAddr, clients: usize, connections: usize) -> Vec<Client> {
    let mut tasks = Vec::new();
    for c in 0..connections {
        tasks.push(tokio::task::spawn_local(async move {
            let client = Client::connect(addr).await.expect("client connects");
            client.set_timeout(REQUEST_TIMEOUT);
            for i in (c..clients).step_by(connections) {
                let id = format!("10.1.{}.{}@{i}", c / 256, c % 256);
                let answer = client
                    .request(heartbeat(&id, &group_name(i)))
                    .await
                    .expect("heartbeat answered");
                assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            }
            client
        }));
    }
    let mut open = Vec::new();
    for task in tasks {
        open.push(task.await.expect("registration task"));
    }
    open
}

/// Every 1,000th group and the last one.
fn sampled_groups(clients: usize) -> Vec<String> {
    let mut picked: Vec<usize> = (0..clients).step_by(1000).collect();
    picked.push(clients - 1);
    picked.into_iter().map(group_name).collect()
}

async fn group_exists(control: &Client, group: &str) -> bool {
    let answer = control
        .request(consumer_list(group))
        .await
        .expect("list answered");
    answer.code == response::SUCCESS
}

/// Waits (bounded by `PHASE_LIMIT`) until none of `groups` has a member.
async fn until_gone(control: &Client, groups: &[String]) {
    let deadline = Instant::now() + PHASE_LIMIT;
    for group in groups {
        while group_exists(control, group).await {
            assert!(Instant::now() < deadline, "{group} still has members");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn begin(stalls: &Stalls, phase: usize) -> Instant {
    let now = Instant::now();
    let since_epoch = now.duration_since(stalls.epoch).as_micros() as u64;
    stalls.phase_began_us.store(since_epoch, Ordering::Relaxed);
    stalls.phase.store(phase, Ordering::Relaxed);
    now
}

/// Ends `phase` and prints it. The ping in flight when it ends belongs to it (it may be the
/// longest stall of all): the figures are taken once a ping sent afterwards came back.
async fn end(stalls: &Stalls, phase: usize, began: Instant) {
    let length = began.elapsed();
    stalls.phase.store(BETWEEN, Ordering::Relaxed);
    let mark = stalls.finished_between.load(Ordering::Relaxed);
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    while stalls.finished_between.load(Ordering::Relaxed) <= mark {
        assert!(Instant::now() < deadline, "the ping never came back");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let samples = stalls.samples.lock().unwrap()[phase].clone();
    let began_us = stalls.phase_began_us.load(Ordering::Relaxed);
    let (longest_sent, max) = samples
        .iter()
        .copied()
        .max_by_key(|&(_, took)| took)
        .unwrap_or((began_us, 0));
    let mut trips: Vec<u64> = samples.iter().map(|&(_, took)| took).collect();
    trips.sort_unstable();
    let ms = |us: u64| us as f64 / 1000.0;
    let p99 = trips.get(trips.len() * 99 / 100).copied().unwrap_or(0);
    println!(
        "phase={} seconds={:.1} pings={} max_stall_ms={:.2} p99_ms={:.2} longest_sent_at_ms={:.1} \
         ping_nice={}",
        PHASES[phase],
        length.as_secs_f64(),
        samples.len(),
        ms(max),
        ms(p99),
        ms(longest_sent.saturating_sub(began_us)),
        stalls.ping_nice.load(Ordering::Relaxed)
    );
}

/// A fresh node with a ping thread against it.
struct Rig {
    _dir: tempfile::TempDir,
    node: NodeHandle,
    stalls: Arc<Stalls>,
    pinger: std::thread::JoinHandle<()>,
}

impl Rig {
    fn start(expiry: Duration, sweep: Duration) -> Rig {
        let dir = tempfile::tempdir().expect("temporary directory");
        let node = start_node(dir.path(), expiry, sweep);
        let stalls = Arc::new(Stalls {
            phase: AtomicUsize::new(BETWEEN),
            finished_between: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
            ping_nice: std::sync::atomic::AtomicI64::new(0),
            phase_began_us: AtomicU64::new(0),
            samples: Mutex::new(vec![Vec::new(); PHASES.len()]),
        });
        let pinger = {
            let (addr, stalls) = (node.addr(), stalls.clone());
            std::thread::spawn(move || ping(addr, stalls))
        };
        Rig {
            _dir: dir,
            node,
            stalls,
            pinger,
        }
    }

    async fn control(&self) -> Client {
        let control = Client::connect(self.node.addr())
            .await
            .expect("control connects");
        control.set_timeout(REQUEST_TIMEOUT);
        control
    }

    fn stop(self) {
        self.stalls.stop.store(true, Ordering::Relaxed);
        self.pinger.join().expect("ping thread");
        self.node.shutdown().expect("node stops");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut number = |default: usize| {
        args.next()
            .map(|text| text.parse().expect("CLIENTS and CONNECTIONS are numbers"))
            .unwrap_or(default)
    };
    let (clients, connections) = (number(50_000), number(500));
    assert!(
        clients >= 1 && connections >= 1,
        "at least one client and one connection"
    );
    println!("clients={clients} connections={connections} shards=1");
    let sampled = sampled_groups(clients);

    // Idle, then sweeps (every second) that find every client alive.
    let rig = Rig::start(Duration::from_secs(120), Duration::from_secs(1));
    run_local(async {
        let stalls = &rig.stalls;
        let began = begin(stalls, 0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        end(stalls, 0, began).await;
        let open = register(rig.node.addr(), clients, connections).await;
        let began = begin(stalls, 1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        end(stalls, 1, began).await;
        drop(open);
    });
    rig.stop();

    // One sweep, 10 s after the start, expires every client (registered within the 5 s
    // expiry before it).
    let rig = Rig::start(Duration::from_secs(5), Duration::from_secs(10));
    run_local(async {
        let control = rig.control().await;
        let registering = Instant::now();
        let open = register(rig.node.addr(), clients, connections).await;
        let took = registering.elapsed();
        if took > Duration::from_secs(4) {
            println!("registering took {took:?}: the expiry spreads over more than one sweep");
        }
        let began = begin(&rig.stalls, 2);
        until_gone(&control, &sampled).await;
        end(&rig.stalls, 2, began).await;
        drop(open);
    });
    rig.stop();

    // Every client connection closes at once; no sweep runs meanwhile.
    let rig = Rig::start(Duration::from_secs(120), Duration::from_secs(3600));
    run_local(async {
        let control = rig.control().await;
        let open = register(rig.node.addr(), clients, connections).await;
        let shard = rig.node.metrics().shard(0);
        let began = begin(&rig.stalls, 3);
        drop(open);
        let deadline = Instant::now() + PHASE_LIMIT;
        // The ping and control connections stay.
        while shard.connections.load(Ordering::Relaxed) > 2 {
            assert!(Instant::now() < deadline, "connections still open");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        until_gone(&control, &sampled).await;
        end(&rig.stalls, 3, began).await;
    });
    rig.stop();
}
