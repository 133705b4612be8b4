//! The network node: N shard threads (D3), each pinned to a CPU and running a
//! tokio current-thread runtime with a `LocalSet`; each owns its `SO_REUSEPORT` listener on
//! the broker port, the connections the kernel gives it, its own store in
//! `<dir>/shard-<n>` and its own broker (see [`crate::shard`] for ownership and the
//! mailboxes between shards). Shard 0 also serves the embedded name server and runs the
//! node-wide housekeeping (client expiry, the periodic consumer-offset write).
//!
//! [`start`] is the one entry: `ringmq serve` calls it and so do the integration tests
//! (with port 0). It binds every listener first (so a taken port fails the start before
//! any store opens), checks that the store root was made for this shard count, loads the
//! node-wide tables (`config/topics.json`, `config/consumerOffset.json`,
//! `config/delayOffset.json`, `config/subscriptionGroup.json`; a corrupt one stops the
//! start naming the file), then starts the shards and returns once every one serves, with
//! the bound addresses and a [`NodeHandle`]. Each shard runs the delay scheduler of every
//! level whose `SCHEDULE_TOPIC_XXXX` queue it owns (`broker/delay.rs`) and registers the
//! protected consumer groups (`retentionProtectedGroups`) on its store as retention holds
//! before the store's first retention run (`broker/protected_groups.rs`). If one shard fails to start,
//! the others are stopped cleanly and the start fails with that shard's error.
//!
//! Every listener's accept loop (broker and name server, all shards) admits connections
//! through one node-wide [`Admission`]: at most `max_connections` open, and at most
//! `max_partial_frame_bytes` held in frames still arriving; a connection beyond the first
//! is closed as it is accepted, counted, and reported once per interval.
//!
//! Shutdown order, and why: every shard stops accepting and tells its connections to end
//! (their request tasks, parked pulls included, are aborted with them); then each shard's
//! `Store::shutdown` lets puts already queued finish, flushes, writes a clean checkpoint
//! and removes the `abort` marker, so the next start does not scan. Once every shard has
//! stopped, the committed consumer offsets and the delay cursors are written once more
//! (after the connections and the schedulers, so no commit or delivery arrives after the
//! write; a delivery aborted mid-put left its cursor where it was, so the next start
//! delivers that message again rather than lose it).
//!
//! With one shard SO_REUSEPORT stays off. With several it is on, so the shards share the
//! port; once they listen, the start checks that no other process's listener shares it
//! ([`crate::shard::exclusive_port`]) and fails with "Address already in use" if one does,
//! so a second node on the same port is refused whatever either's shard count.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::broker::consumer_offsets::ConsumerOffsets;
use crate::broker::delay::offsets::DelayOffsets;
use crate::broker::live_settings::LiveSettings;
use crate::broker::subscription_groups::SubscriptionGroups;
use crate::broker::topics::TopicTable;
use crate::broker::{Broker, BrokerConfig, BrokerIdentity, NodeTables};
use crate::clock::Clock;
use crate::config::{largest_message_for_segment, FlushMode, StoreConfig};
use crate::io::{open_backend, IoChoice};
use crate::metrics::http::{HttpLimits, MetricsServer};
use crate::metrics::rates::{ShardSampler, StatsCaps};
use crate::metrics::{NodeMetrics, ShardMetrics};
use crate::namesrv::admin::NamesrvState;
use crate::namesrv::NameServer;
use crate::node_config::{self, NodeConfig};
use crate::remoting::admission::Admission;
use crate::remoting::connection::{serve_admitted, ConnectionLimits, RequestHandler};
use crate::remoting::traffic::{LimitEvent, Traffic};
use crate::shard::mailbox::{self, MailboxReceiver};
use crate::shard::{exclusive_port, layout, pin, ShardContext};
use crate::store::Store;

/// Everything a node is started with.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The store root (`storePathRootDir`): `config/` and one `shard-<n>` per shard.
    pub dir: PathBuf,
    /// `listenPort`; 0 picks a free port (tests).
    pub port: u16,
    pub flush: FlushMode,
    pub io: IoChoice,
    /// The address clients reach this node at: STOREHOST and msgIds carry it.
    pub broker_ip: IpAddr,
    /// The address the listeners bind; `None`: every interface of `broker_ip`'s family.
    pub bind_ip: Option<IpAddr>,
    pub broker_name: String,
    pub cluster_name: String,
    /// CommitLog segment size; `None` keeps the template's (1 GiB by default).
    pub segment_size: Option<u64>,
    /// Connection backlog of the listener.
    pub backlog: i32,
    pub connection: ConnectionLimits,
    /// `max_connections`: connections open at once, all shards and both listeners (broker
    /// and name server) together; more are closed as they are accepted.
    pub max_connections: usize,
    /// `max_partial_frame_bytes`: bytes all connections together may hold in read
    /// buffers beyond their initial size (frames still arriving).
    pub max_partial_frame_bytes: usize,
    /// Per-shard broker settings (limits such as `max_parked_pulls` are per shard).
    pub broker: BrokerConfig,
    /// Port of the embedded name server (`namesrvPort`); 0 picks a free port (tests).
    pub namesrv_port: u16,
    /// `autoCreateTopicEnable`: a send to (or route query for) an unknown topic creates it.
    pub auto_create_topics: bool,
    /// `autoCreateSubscriptionGroup`: a heartbeat or pull of an unknown group creates it.
    pub auto_create_subscription_groups: bool,
    /// `defaultTopicQueueNums`: queues of an auto-created topic.
    pub default_topic_queue_nums: u32,
    /// Shards (threads, stores); a store root keeps the count it was made with.
    pub shards: u8,
    /// Pin shard n to the n-th allowed CPU (best effort, logged when refused).
    pub pin_threads: bool,
    /// Requests queued for another shard before the sender waits.
    pub mailbox_capacity: usize,
    /// Port of the Prometheus endpoint (`metricsPromExporterPort`); 0 picks a free one;
    /// `None` serves none.
    pub metrics_port: Option<u16>,
    /// The metrics endpoint's bounds (`metrics_max_connections`, `metrics_idle_timeout`).
    pub metrics_limits: HttpLimits,
    /// Topics and groups each shard keeps figures for (`metrics_max_topics`, `..._groups`).
    pub stats_caps: StatsCaps,
    /// Store settings every shard starts from; its `dir`, `shard_id`, `flush_mode`,
    /// `store_host`, `schedule_delays_ms` (from `broker.delay_levels`) and the segment
    /// size (when `segment_size` is set) are replaced.
    /// `None`: the store defaults.
    pub store_template: Option<StoreConfig>,
    /// The validated settings the options came from, as GET_BROKER_CONFIG answers them
    /// (the start writes what the fields above changed over them: ports picked free, the
    /// store root, names, flags).
    pub settings: NodeConfig,
}

/// Connection backlog of every listener.
pub const LISTEN_BACKLOG: i32 = 1024;

impl NodeOptions {
    /// The defaults of a one-shard node in `dir` (tests and embedded runs): the node keys'
    /// defaults (`NodeConfig::default`), unpinned, with no metrics endpoint, binding every
    /// interface of `broker_ip`'s family.
    pub fn new(dir: impl Into<PathBuf>) -> NodeOptions {
        let config = NodeConfig {
            store_path_root_dir: dir.into(),
            shards: 1,
            ..NodeConfig::default()
        };
        NodeOptions {
            bind_ip: None,
            pin_threads: false,
            metrics_port: None,
            ..NodeOptions::from_config(&config)
        }
    }

    /// The options `ringmq serve` runs with for a validated [`NodeConfig`]. Node-wide
    /// limits of the config (parked pulls) are split evenly between the shards.
    pub fn from_config(config: &NodeConfig) -> NodeOptions {
        NodeOptions {
            dir: config.store_path_root_dir.clone(),
            port: config.listen_port,
            flush: config.flush_disk_type,
            io: config.io_backend,
            broker_ip: config.broker_ip,
            bind_ip: Some(config.bind_address),
            broker_name: config.broker_name.clone(),
            cluster_name: config.broker_cluster_name.clone(),
            segment_size: Some(config.maped_file_size_commit_log),
            backlog: LISTEN_BACKLOG,
            connection: node_config::connection_limits(config),
            max_connections: config.max_connections,
            max_partial_frame_bytes: config.max_partial_frame_bytes,
            broker: node_config::broker_config(config),
            namesrv_port: config.namesrv_port,
            auto_create_topics: config.auto_create_topic_enable,
            auto_create_subscription_groups: config.auto_create_subscription_group,
            default_topic_queue_nums: config.default_topic_queue_nums,
            shards: config.shards,
            pin_threads: true,
            mailbox_capacity: config.shard_mailbox_capacity,
            metrics_port: Some(config.metrics_port),
            metrics_limits: HttpLimits {
                header_timeout: config.metrics_idle_timeout,
                max_connections: config.metrics_max_connections,
                ..HttpLimits::default()
            },
            stats_caps: StatsCaps {
                topics: config.metrics_max_topics,
                groups: config.metrics_max_groups,
            },
            store_template: Some(node_config::store_config(config, 0)),
            settings: config.clone(),
        }
    }

    /// The store settings of shard `shard`, whose clients reach it at `store_host`.
    fn store_config(&self, shard: u8, store_host: SocketAddr) -> StoreConfig {
        let dir = layout::shard_dir(&self.dir, shard);
        let mut config = match &self.store_template {
            Some(template) => StoreConfig {
                dir,
                ..template.clone()
            },
            None => StoreConfig::new(dir),
        };
        config.shard_id = shard;
        config.flush_mode = self.flush;
        config.store_host = store_host;
        // The delivery times in the schedule queues follow the broker's levels.
        config.schedule_delays_ms = self.broker.delay_levels.as_millis().to_vec();
        if let Some(size) = self.segment_size {
            config.commit_log_segment_size = size;
            // Keep the largest message within one segment, as `validate` demands.
            config.max_message_size = config
                .max_message_size
                .min(largest_message_for_segment(size) as usize)
                .max(1);
        }
        config
    }
}

/// A running node. Dropping it stops the node too (and waits for it).
pub struct NodeHandle {
    addr: SocketAddr,
    namesrv_addr: SocketAddr,
    /// What the broker and name-server listeners are bound to (the bind address, often
    /// the wildcard), as against what clients are told (`addr`, `namesrv_addr`).
    bound: SocketAddr,
    namesrv_bound: SocketAddr,
    stop: watch::Sender<bool>,
    shards: Vec<std::thread::JoinHandle<anyhow::Result<()>>>,
    exited: Option<oneshot::Receiver<()>>,
    tables: Option<NodeTables>,
    metrics: NodeMetrics,
    metrics_server: Option<MetricsServer>,
}

impl NodeHandle {
    /// The address clients connect to: the broker IP and the bound port.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the embedded name server: the broker IP and its bound port.
    pub fn namesrv_addr(&self) -> SocketAddr {
        self.namesrv_addr
    }

    /// The address of the Prometheus endpoint, if one serves.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        let port = self.metrics_server.as_ref()?.addr().port();
        Some(SocketAddr::new(self.addr.ip(), port))
    }

    /// The address the broker listeners are bound to (`bindAddress` and the port).
    pub fn bound_addr(&self) -> SocketAddr {
        self.bound
    }

    /// The address the name-server listener is bound to.
    pub fn namesrv_bound_addr(&self) -> SocketAddr {
        self.namesrv_bound
    }

    /// The address the Prometheus endpoint is bound to, if one serves.
    pub fn metrics_bound_addr(&self) -> Option<SocketAddr> {
        Some(self.metrics_server.as_ref()?.addr())
    }

    /// Every shard's metrics.
    pub fn metrics(&self) -> &NodeMetrics {
        &self.metrics
    }

    /// How many shards serve.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Resolves when any shard thread ends on its own (an error, a panic) or the node is
    /// stopped. Can be taken once.
    pub fn take_exit_signal(&mut self) -> Option<oneshot::Receiver<()>> {
        self.exited.take()
    }

    /// Stops the node and waits for its threads; the error is the first shard's that
    /// failed, else the last consumer-offset write's.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.metrics_server = None;
        let mut result = Ok(());
        for (id, shard) in self.shards.drain(..).enumerate() {
            let ended = shard
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("shard {id} panicked")));
            if let (Ok(()), Err(error)) = (&result, ended) {
                result = Err(error);
            }
        }
        if let Some(tables) = self.tables.take() {
            result = result.and(
                tables
                    .consumer_offsets
                    .persist()
                    .map_err(anyhow::Error::from),
            );
            let groups = &tables.subscription_groups;
            let written = groups.flush().map_err(|error| {
                anyhow::anyhow!("cannot write {}: {error}", groups.path().display())
            });
            result = result.and(written);
            result = result.and(tables.delay_offsets.persist().map_err(anyhow::Error::from));
        }
        result
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        if let Err(error) = self.stop_and_join() {
            tracing::error!("node stopped with an error: {error:#}");
        }
    }
}

/// What one shard thread starts with.
struct ShardStart {
    id: u8,
    listener: std::net::TcpListener,
    /// Shard 0 only.
    namesrv_listener: Option<std::net::TcpListener>,
    advertised: SocketAddr,
    inbox: MailboxReceiver,
    context: ShardContext,
    tables: NodeTables,
    metrics: Arc<ShardMetrics>,
    /// The node-wide connection bounds, shared by every shard.
    admission: Arc<Admission>,
}

/// `options.settings` with the values the node runs with written over it: a setting the
/// options changed after [`NodeOptions::from_config`], or a port picked free.
fn running_settings(
    options: &NodeOptions,
    advertised: SocketAddr,
    namesrv_addr: SocketAddr,
    bind_ip: IpAddr,
) -> NodeConfig {
    let mut settings = options.settings.clone();
    settings.store_path_root_dir = options.dir.clone();
    settings.listen_port = advertised.port();
    settings.namesrv_port = namesrv_addr.port();
    settings.broker_ip = options.broker_ip;
    settings.bind_address = bind_ip;
    settings.flush_disk_type = options.flush;
    settings.broker_name = options.broker_name.clone();
    settings.broker_cluster_name = options.cluster_name.clone();
    settings.auto_create_topic_enable = options.auto_create_topics;
    settings.auto_create_subscription_group = options.auto_create_subscription_groups;
    settings.default_topic_queue_nums = options.default_topic_queue_nums;
    settings.shards = options.shards;
    settings.client_call_timeout = options.broker.client_call_timeout;
    settings
}

/// Starts the node's shards and returns once all serve (or the start failed).
pub fn start(options: NodeOptions) -> anyhow::Result<NodeHandle> {
    anyhow::ensure!(
        (1..=crate::node_config::MAX_SHARDS).contains(&options.shards),
        "shards: {} must be between 1 and {}",
        options.shards,
        crate::node_config::MAX_SHARDS
    );
    for group in &options.broker.retention_protected_groups {
        crate::broker::names::validate_group(group)
            .map_err(|why| anyhow::anyhow!("retentionProtectedGroups: {why}"))?;
    }
    layout::check_shard_count(&options.dir, options.shards)
        .map_err(|error| anyhow::anyhow!(error))?;
    for shard in 0..options.shards {
        let dir = layout::shard_dir(&options.dir, shard);
        std::fs::create_dir_all(&dir)
            .map_err(|error| anyhow::anyhow!("cannot create {}: {error}", dir.display()))?;
    }
    // Listen on every interface of the broker IP's family, as Java brokers do, unless a
    // bind address is set; advertise the broker IP.
    let bind_ip = options.bind_ip.unwrap_or(match options.broker_ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    });
    let reuse_port = options.shards > 1;
    let mut listeners = Vec::with_capacity(options.shards as usize);
    let mut port = options.port;
    for _ in 0..options.shards {
        let listener = bind_listener(SocketAddr::new(bind_ip, port), options.backlog, reuse_port)
            .map_err(|error| anyhow::anyhow!("cannot listen on port {port}: {error}"))?;
        // Port 0 picks a free port for the first shard; the others share it.
        port = listener.local_addr()?.port();
        listeners.push(listener);
    }
    if reuse_port {
        // SO_REUSEPORT would also let another process's listener in: refuse to share.
        exclusive_port::check_alone(&listeners)
            .map_err(|error| anyhow::anyhow!("cannot listen on port {port}: {error}"))?;
    }
    let advertised = SocketAddr::new(options.broker_ip, port);
    let namesrv_listener = bind_listener(
        SocketAddr::new(bind_ip, options.namesrv_port),
        options.backlog,
        false,
    )
    .map_err(|error| {
        anyhow::anyhow!(
            "cannot listen on the name server port {}: {error}",
            options.namesrv_port
        )
    })?;
    let namesrv_bound = namesrv_listener.local_addr()?;
    let namesrv_addr = SocketAddr::new(options.broker_ip, namesrv_bound.port());
    let bound = SocketAddr::new(bind_ip, port);
    let metrics = NodeMetrics::with_caps(options.shards, options.stats_caps);
    let metrics_server = match options.metrics_port {
        Some(port) => {
            // The full backlog: a burst of connections must reach the endpoint, which
            // closes what it cannot hold, rather than wait in the kernel's queue.
            let listener = bind_listener(SocketAddr::new(bind_ip, port), LISTEN_BACKLOG, false)
                .map_err(|error| {
                    anyhow::anyhow!("cannot listen on the metrics port {port}: {error}")
                })?;
            Some(MetricsServer::start_with(
                listener,
                metrics.clone(),
                options.metrics_limits,
            )?)
        }
        None => None,
    };
    let mut tables = NodeTables::new(
        TopicTable::load(
            &options.dir,
            options.auto_create_topics,
            options.default_topic_queue_nums,
        )?,
        ConsumerOffsets::load(&options.dir)?,
        SubscriptionGroups::load(&options.dir, options.auto_create_subscription_groups)?,
    );
    tables.delay_offsets = Arc::new(DelayOffsets::load(&options.dir)?);
    tables.request_modes = Arc::new(crate::broker::request_modes::RequestModes::load(
        &options.dir,
    )?);
    tables.settings = Arc::new(LiveSettings::new(
        running_settings(&options, advertised, namesrv_addr, bind_ip),
        Clock::system().now_ms(),
    ));
    tables.namesrv = Arc::new(NamesrvState::new(namesrv_addr.port(), bind_ip));
    for shard in 0..options.shards {
        options
            .store_config(shard, advertised)
            .validate()
            .map_err(|error| anyhow::anyhow!(error))?;
    }

    let admission = Admission::new(
        options.max_connections,
        options.max_partial_frame_bytes,
        options.connection.warn_interval,
    );
    let (senders, inboxes): (Vec<_>, Vec<_>) = (0..options.shards)
        .map(|_| mailbox::mailbox(options.mailbox_capacity))
        .unzip();
    let (stop, stop_rx) = watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<u8>();
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
    let mut namesrv_listener = Some(namesrv_listener);
    let mut shards = Vec::with_capacity(options.shards as usize);
    for ((id, listener), inbox) in (0u8..).zip(listeners).zip(inboxes) {
        let start = ShardStart {
            id,
            listener,
            namesrv_listener: namesrv_listener.take(),
            advertised,
            inbox,
            context: ShardContext::new(id, senders.clone()),
            tables: tables.clone(),
            metrics: metrics.shard(id),
            admission: admission.clone(),
        };
        let (options, stop_rx, ready_tx, ended_tx) = (
            options.clone(),
            stop_rx.clone(),
            ready_tx.clone(),
            ended_tx.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("ringmq-shard-{id}"))
            .spawn(move || -> anyhow::Result<()> {
                // Sent when the thread ends, however it ends.
                struct Ended(std::sync::mpsc::Sender<()>);
                impl Drop for Ended {
                    fn drop(&mut self) {
                        let _ = self.0.send(());
                    }
                }
                let _ended = Ended(ended_tx);
                if options.pin_threads {
                    match pin::pin_current_thread(id as usize) {
                        Ok(cpu) => tracing::info!(shard = id, cpu, "shard pinned"),
                        Err(why) => tracing::warn!(shard = id, "shard not pinned: {why}"),
                    }
                }
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let local = tokio::task::LocalSet::new();
                // The shard runs as a task, not as the LocalSet's own future: that one is
                // polled every time any task on the shard wakes, and the shard's accept
                // loop would poll its listener and stop signal with it, once per message.
                local.block_on(&runtime, async move {
                    tokio::task::spawn_local(run_shard(options, start, stop_rx, ready_tx))
                        .await
                        .unwrap_or_else(|error| {
                            Err(anyhow::anyhow!("shard {id} panicked: {error}"))
                        })
                })
            });
        match spawned {
            Ok(thread) => shards.push(thread),
            Err(error) => {
                stop_shards(&stop, shards);
                return Err(anyhow::anyhow!("cannot start shard {id}: {error}"));
            }
        }
    }
    drop(ready_tx);
    drop(ended_tx);
    // Every shard says it serves, or one ends first: then stop the rest, and fail with
    // the error of the first shard that ended.
    for _ in 0..shards.len() {
        if ready_rx.recv().is_err() {
            let _ = stop.send(true);
            let mut first_error = None;
            for (id, thread) in shards.into_iter().enumerate() {
                let error = match thread.join() {
                    Ok(Ok(())) => None,
                    Ok(Err(error)) => Some(error),
                    Err(_) => Some(anyhow::anyhow!("shard {id} panicked while starting")),
                };
                first_error = first_error.or(error);
            }
            return Err(first_error
                .unwrap_or_else(|| anyhow::anyhow!("a shard stopped before it was ready")));
        }
    }
    // The exit signal: the first shard thread to end (or all, at shutdown) fires it.
    let (exit_tx, exited) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("ringmq-exit-watch".into())
        .spawn(move || {
            let _ = ended_rx.recv();
            let _ = exit_tx.send(());
        })?;
    tracing::info!(%advertised, %namesrv_addr, shards = shards.len(), "node serving");
    Ok(NodeHandle {
        addr: advertised,
        namesrv_addr,
        bound,
        namesrv_bound,
        stop,
        shards,
        exited: Some(exited),
        tables: Some(tables),
        metrics,
        metrics_server,
    })
}

fn stop_shards(
    stop: &watch::Sender<bool>,
    shards: Vec<std::thread::JoinHandle<anyhow::Result<()>>>,
) {
    let _ = stop.send(true);
    for thread in shards {
        let _ = thread.join();
    }
}

/// Binds a listening TCP socket with SO_REUSEADDR (restarts do not wait out TIME_WAIT) and,
/// if asked, SO_REUSEPORT (one listener per shard on the same port).
pub fn bind_listener(
    addr: SocketAddr,
    backlog: i32,
    reuse_port: bool,
) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

async fn run_shard(
    options: NodeOptions,
    start: ShardStart,
    stop: watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<u8>,
) -> anyhow::Result<()> {
    let ShardStart {
        id,
        listener,
        namesrv_listener,
        advertised,
        inbox,
        context,
        tables,
        metrics,
        admission,
    } = start;
    let listener = TcpListener::from_std(listener)?;
    let namesrv_listener = namesrv_listener.map(TcpListener::from_std).transpose()?;
    let clock = Clock::system();
    let config = options.store_config(id, advertised);
    let disk = open_backend(options.io, config.flush_mode.data_writes())?;
    let store = Store::open(config, disk, clock)
        .await
        .map_err(|error| anyhow::anyhow!("shard {id}: {error}"))?;
    // A turn's send responses leave in one write per connection, from the appender.
    store.set_answer_scope(Rc::new(crate::remoting::reply_batch::batch_replies));
    let broker = Rc::new(Broker::new(
        store.clone(),
        BrokerIdentity {
            broker_name: options.broker_name.clone(),
            cluster_name: options.cluster_name.clone(),
            store_host: advertised,
        },
        options.broker.clone(),
        tables,
        clock,
        context,
        metrics.clone(),
    ));
    // Before any await: the store's first retention run already keeps what they hold.
    crate::broker::protected_groups::protect(&broker);
    crate::broker::delay::holds::hold(&broker);
    let timers = Rc::new(
        crate::broker::timer::scheduler::Timers::open(
            Arc::new(crate::io::meta::RealFiles),
            &store.config().dir,
            crate::broker::timer::queue_of_shard(id, options.shards),
            options.broker.timer_limits,
        )
        .map_err(|error| anyhow::anyhow!("shard {id}: {error}"))?,
    );
    let timer_queue = crate::broker::timer::queue_of_shard(id, options.shards);
    timers
        .check_against_queue(store.max_offset(crate::broker::timer::TIMER_TOPIC, timer_queue))
        .map_err(|error| anyhow::anyhow!("shard {id}: {error}"))?;
    crate::broker::timer::holds::hold(&store, &timers);
    broker.set_timers(timers.clone());
    let pops = Rc::new(
        crate::broker::pop::Pops::open(
            &broker,
            Arc::new(crate::io::meta::RealFiles),
            crate::shard::routing::queue_of_shard(
                crate::broker::pop::log::POP_LOG_TOPIC,
                id,
                options.shards,
            ),
        )
        .map_err(|error| anyhow::anyhow!("shard {id}: cannot open the POP state: {error}"))?,
    );
    crate::broker::pop::holds::hold(&store, &pops);
    broker.set_pops(pops.clone());
    // Every shard task runs under the store's watch: a panic poisons the store (D11).
    let spawn_watched =
        |task: &'static str, future: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>| {
            tokio::task::spawn_local(store.watch(task, future))
        };
    let mut background = vec![spawn_watched(
        "mailbox",
        Box::pin(mailbox::serve_mailbox(inbox, broker.clone())),
    )];
    background.push(spawn_watched(
        "POP housekeeping",
        Box::pin(crate::broker::pop::run_housekeeping(
            broker.clone(),
            pops.clone(),
        )),
    ));
    background.push(spawn_watched(
        "metrics sampler",
        Box::pin(sample_metrics(broker.clone())),
    ));
    background.push(spawn_watched(
        "closed connection reaper",
        Box::pin(crate::broker::consumers::reap_closed_connections(
            broker.clone(),
        )),
    ));
    let namesrv = namesrv_listener.map(|listener| {
        let handler = NameServer::new(
            broker.identity().clone(),
            broker.topics.clone(),
            clock,
            broker.namesrv.clone(),
        );
        (listener, Rc::new(handler))
    });
    for level in
        crate::broker::delay::levels_on_shard(&options.broker.delay_levels, id, options.shards)
    {
        background.push(spawn_watched(
            "delay scheduler",
            Box::pin(crate::broker::delay::run_level(broker.clone(), level)),
        ));
    }
    if options.broker.timer_enabled {
        background.push(spawn_watched(
            "timer scheduler",
            Box::pin(crate::broker::timer::scheduler::run(
                broker.clone(),
                timers.clone(),
            )),
        ));
    }
    if id == 0 {
        // Node-wide housekeeping runs once, on shard 0.
        background.push(spawn_watched(
            "client sweep",
            Box::pin(sweep_clients(broker.clone())),
        ));
        background.push(spawn_watched(
            "consumer offset flush",
            Box::pin(flush_consumer_offsets(broker.clone())),
        ));
        background.push(spawn_watched(
            "delay offset flush",
            Box::pin(flush_delay_offsets(broker.clone())),
        ));
    }
    tracing::info!(shard = id, %advertised, backend = store.backend_name(), "shard serving");
    // `/health` answers 200 once every shard got here: its store open and recovered.
    metrics.set_ready(true);
    let _ = ready.send(id);

    if let Some((listener, namesrv)) = namesrv {
        background.push(spawn_watched(
            "name server listener",
            Box::pin(accept_connections(
                listener,
                namesrv,
                options.connection,
                stop.clone(),
                metrics.traffic.clone(),
                admission.clone(),
                None,
            )),
        ));
    }
    accept_connections(
        listener,
        broker.clone(),
        options.connection,
        stop.clone(),
        metrics.traffic.clone(),
        admission,
        Some(metrics),
    )
    .await;
    broker.metrics().set_ready(false);
    // Let every connection see the stop and abort its requests before the store goes.
    tokio::task::yield_now().await;
    for task in background {
        task.abort();
    }
    // The scheduler is stopped: what it acknowledged is not delivered again.
    if let Err(error) = timers.checkpoint() {
        tracing::error!(shard = id, "cannot checkpoint the timer store: {error}");
    }
    let pop_log_end = store.max_offset(crate::broker::pop::log::POP_LOG_TOPIC, pops.log_queue);
    if let Err(error) = pops.write_mark(pop_log_end).await {
        tracing::error!(shard = id, "cannot write the POP replay mark: {error}");
    }
    store.shutdown().await?;
    Ok(())
}

/// Accepts connections on `listener` and serves each with `handler` until `stop`; the
/// listener is closed when this returns. A connection beyond `max_connections` is closed
/// as soon as it is accepted (the kernel would otherwise keep it queued, unanswered),
/// counted, and reported at most once per interval.
async fn accept_connections<H: RequestHandler>(
    listener: TcpListener,
    handler: Rc<H>,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    traffic: Arc<Traffic>,
    admission: Arc<Admission>,
    metrics: Option<Arc<ShardMetrics>>,
) {
    // Connections get their own receivers; `stop` itself is borrowed by the select.
    let for_connections = stop.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(admitted) = admission.admit() else {
                        // Counted before the close: a peer that sees its EOF must also
                        // see the refusal in the counter.
                        traffic.count(LimitEvent::ConnectionRefused);
                        drop(stream);
                        if let Some(report) = admission.refused() {
                            tracing::warn!(
                                %peer,
                                refused = report.refused,
                                max_connections = report.max_connections,
                                "max_connections are open; refusing connections \
                                 ({} refused since the last report)",
                                report.refused
                            );
                        }
                        continue;
                    };
                    let served = serve_admitted(
                        stream,
                        peer,
                        handler.clone(),
                        limits,
                        traffic.clone(),
                        admitted,
                        for_connections.clone(),
                    );
                    let metrics = metrics.clone();
                    tokio::task::spawn_local(async move {
                        if let Some(metrics) = &metrics {
                            metrics.connections.fetch_add(1, Ordering::Relaxed);
                            ShardMetrics::add(&metrics.connections_total, 1);
                        }
                        served.await;
                        if let Some(metrics) = &metrics {
                            metrics.connections.fetch_sub(1, Ordering::Relaxed);
                        }
                    });
                }
                Err(error) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
}

/// Copies the figures that live in the shard's `Cell`s (store counters, parked pulls)
/// into its metrics, and samples its rates ([`crate::metrics::rates`]), once a second.
async fn sample_metrics(broker: Rc<Broker>) {
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sampler = ShardSampler::new(broker.metrics().caps());
    loop {
        ticks.tick().await;
        let metrics = broker.metrics();
        metrics.set_store(broker.store().stats());
        crate::broker::stats_sampler::sample(&broker, &mut sampler);
        metrics
            .parked_pulls
            .store(broker.parked_pulls() as i64, Ordering::Relaxed);
    }
}

/// Drops clients whose heartbeats stopped, every `client_sweep_interval`.
async fn sweep_clients(broker: Rc<Broker>) {
    let config = broker.config.clone();
    let mut ticks = tokio::time::interval(config.client_sweep_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // In batches, yielding between them: O(expired), never a long stall.
        let removed = broker
            .groups()
            .sweep_all(tokio::time::Instant::now(), config.client_expiry)
            .await;
        if removed > 0 {
            tracing::info!(removed, "expired clients dropped");
        }
    }
}

/// Queues a write of the consumer offsets every `consumer_offset_flush_interval` when
/// commits were made, and of the subscription groups after a failed write. The writes run
/// on tokio's blocking pool: no connection of this shard waits for their fsyncs (a failed
/// one is logged there and tried again by the next tick).
async fn flush_consumer_offsets(broker: Rc<Broker>) {
    let mut ticks = tokio::time::interval(broker.config.consumer_offset_flush_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        broker.consumer_offsets().write_if_behind();
        broker.subscription_groups.write_if_behind();
    }
}

/// Queues a write of the delay cursors every `delay_offset_flush_interval` when one moved,
/// as [`flush_consumer_offsets`].
async fn flush_delay_offsets(broker: Rc<Broker>) {
    let mut ticks = tokio::time::interval(broker.config.delay_offset_flush_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        broker.delay_offsets().write_if_behind();
    }
}
