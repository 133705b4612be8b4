//! The network node: N shard threads (D3), each pinned to a CPU and running a
//! tokio current-thread runtime with a `LocalSet`; each owns its `SO_REUSEPORT` listener on
//! the broker port, the connections the kernel gives it, its own store in
//! `<dir>/shard-<n>` and its own broker (see [`crate::shard`] for ownership and the
//! mailboxes between shards). Shard 0 also serves the embedded name server and runs the
//! node-wide housekeeping (client expiry, the periodic consumer-offset write).
//!
//! [`start`] is the one entry, and a validated [`NodeConfig`] the one thing it starts
//! from: `ringmq serve` builds that from broker.conf, TOML and flags, and the integration
//! tests build it too (`tests/common`, with port 0), so a test node runs with settings a
//! user could write and the start refuses what `ringmq serve` would. It validates the
//! config, binds every listener first (so a taken port fails the start before
//! any store opens), checks that the store root was made for this shard count, loads the
//! node-wide tables (`config/topics.json`, `config/consumerOffset.json`,
//! `config/delayOffset.json`, `config/subscriptionGroup.json`; a corrupt one stops the
//! start naming the file), then starts the shards and returns once every one serves, with
//! the bound addresses and a [`NodeHandle`]. Each shard runs the delay scheduler of every
//! level whose `SCHEDULE_TOPIC_XXXX` queue it owns (`broker/delay/mod.rs`) and registers the
//! protected consumer groups (`retentionProtectedGroups`) on its store as retention holds
//! before the store's first retention run (`broker/state/protected_groups.rs`). If one shard fails to start,
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

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::broker::delay::offsets::DelayOffsets;
use crate::broker::state::live_settings::LiveSettings;
use crate::broker::tables::consumer_offsets::ConsumerOffsets;
use crate::broker::tables::request_modes::RequestModes;
use crate::broker::tables::subscription_groups::SubscriptionGroups;
use crate::broker::tables::topics::TopicTable;
use crate::broker::{Broker, BrokerConfig, BrokerIdentity, NodeTables};
use crate::clock::Clock;
use crate::config::StoreConfig;
use crate::io::open_backend;
use crate::metrics::http::MetricsServer;
use crate::metrics::rates::ShardSampler;
use crate::metrics::{NodeMetrics, ShardMetrics};
use crate::namesrv::admin::NamesrvState;
use crate::namesrv::NameServer;
use crate::node_config::{self, MetricsExporter, NodeConfig};
use crate::remoting::admission::Admission;
use crate::remoting::connection::{serve_admitted, ConnectionLimits, RequestHandler};
use crate::remoting::traffic::{LimitEvent, Traffic};
use crate::shard::mailbox::{self, MailboxReceiver};
use crate::shard::{exclusive_port, layout, pin, ShardContext};
use crate::store::Store;

/// Connection backlog of every listener.
pub const LISTEN_BACKLOG: i32 = 1024;

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
    /// This shard's store settings, derived on the starting thread (it reads
    /// `/proc/meminfo`), not on the shard's reactor.
    store: StoreConfig,
}

/// What every shard runs with: the node's settings as they run (the ports picked free
/// written in) and the settings derived from them once for all shards.
#[derive(Clone)]
struct ShardSettings {
    config: Arc<NodeConfig>,
    broker: BrokerConfig,
    connection: ConnectionLimits,
}

/// Starts the node's shards from `config` and returns once all serve (or the start
/// failed). `config` is validated here whoever built it (a broker.conf, flags, a test),
/// so a node never runs with settings `ringmq serve` would refuse; listen ports of 0 are
/// picked free, and the settings GET_BROKER_CONFIG answers carry the picked ones.
pub fn start(config: NodeConfig) -> anyhow::Result<NodeHandle> {
    config
        .validate()
        .map_err(|error| anyhow::anyhow!("bad configuration: {error}"))?;
    let dir = config.store_path_root_dir.clone();
    let shard_count = config.shards;
    layout::check_shard_count(&dir, shard_count).map_err(|error| anyhow::anyhow!(error))?;
    for shard in 0..shard_count {
        let dir = layout::shard_dir(&dir, shard);
        std::fs::create_dir_all(&dir)
            .map_err(|error| anyhow::anyhow!("cannot create {}: {error}", dir.display()))?;
    }
    let bind_ip = config.bind_address;
    let reuse_port = shard_count > 1;
    let mut listeners = Vec::with_capacity(shard_count as usize);
    let mut port = config.listen_port;
    for _ in 0..shard_count {
        let listener = bind_listener(SocketAddr::new(bind_ip, port), LISTEN_BACKLOG, reuse_port)
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
    let advertised = SocketAddr::new(config.broker_ip, port);
    let namesrv_listener = bind_listener(
        SocketAddr::new(bind_ip, config.namesrv_port),
        LISTEN_BACKLOG,
        false,
    )
    .map_err(|error| {
        anyhow::anyhow!(
            "cannot listen on the name server port {}: {error}",
            config.namesrv_port
        )
    })?;
    let namesrv_bound = namesrv_listener.local_addr()?;
    let namesrv_addr = SocketAddr::new(config.broker_ip, namesrv_bound.port());
    let bound = SocketAddr::new(bind_ip, port);
    let metrics = NodeMetrics::with_caps(shard_count, node_config::stats_caps(&config));
    let metrics_server = match config.metrics_exporter_type {
        MetricsExporter::Prom => {
            let port = config.metrics_port;
            // The full backlog: a burst of connections must reach the endpoint, which
            // closes what it cannot hold, rather than wait in the kernel's queue.
            let listener = bind_listener(SocketAddr::new(bind_ip, port), LISTEN_BACKLOG, false)
                .map_err(|error| {
                    anyhow::anyhow!("cannot listen on the metrics port {port}: {error}")
                })?;
            Some(MetricsServer::start_with(
                listener,
                metrics.clone(),
                node_config::http_limits(&config),
            )?)
        }
        MetricsExporter::Disable => None,
    };
    // The settings as they run: what GET_BROKER_CONFIG answers, and STOREHOST's port.
    let mut running = config;
    running.listen_port = port;
    running.namesrv_port = namesrv_bound.port();
    if let Some(server) = &metrics_server {
        running.metrics_port = server.addr().port();
    }
    let mut tables = NodeTables::new(
        TopicTable::load(
            &dir,
            running.auto_create_topic_enable,
            running.default_topic_queue_nums,
        )?,
        ConsumerOffsets::load(&dir)?,
        SubscriptionGroups::load(&dir, running.auto_create_subscription_group)?,
    );
    tables.delay_offsets = Arc::new(DelayOffsets::load(&dir)?);
    tables.request_modes = Arc::new(RequestModes::load(&dir)?);
    tables.settings = Arc::new(LiveSettings::new(running.clone(), Clock::system().now_ms()));
    tables.namesrv = Arc::new(NamesrvState::new(namesrv_addr.port(), bind_ip));
    let settings = ShardSettings {
        broker: node_config::broker_config(&running),
        connection: node_config::connection_limits(&running),
        config: Arc::new(running),
    };
    let config = &settings.config;

    let admission = Admission::new(
        config.max_connections,
        config.max_partial_frame_bytes,
        settings.connection.warn_interval,
    );
    let (senders, inboxes): (Vec<_>, Vec<_>) = (0..shard_count)
        .map(|_| mailbox::mailbox(config.shard_mailbox_capacity))
        .unzip();
    let (stop, stop_rx) = watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<u8>();
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
    let mut namesrv_listener = Some(namesrv_listener);
    let mut shards = Vec::with_capacity(shard_count as usize);
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
            store: node_config::store_config(config, id),
        };
        let (settings, stop_rx, ready_tx, ended_tx) = (
            settings.clone(),
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
                if settings.config.pin_shard_threads {
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
                    tokio::task::spawn_local(run_shard(settings, start, stop_rx, ready_tx))
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
    settings: ShardSettings,
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
        store: config,
    } = start;
    let listener = TcpListener::from_std(listener)?;
    let namesrv_listener = namesrv_listener.map(TcpListener::from_std).transpose()?;
    let clock = Clock::system();
    let disk = open_backend(settings.config.io_backend, config.flush_mode.data_writes())?;
    let store = Store::open(config, disk, clock)
        .await
        .map_err(|error| anyhow::anyhow!("shard {id}: {error}"))?;
    // A turn's send responses leave in one write per connection, from the appender.
    store.set_answer_scope(Rc::new(crate::remoting::reply_batch::batch_replies));
    let broker = Rc::new(Broker::new(
        store.clone(),
        BrokerIdentity {
            broker_name: settings.config.broker_name.clone(),
            cluster_name: settings.config.broker_cluster_name.clone(),
            store_host: advertised,
        },
        settings.broker.clone(),
        tables,
        clock,
        context,
        metrics.clone(),
    ));
    // Before any await: the store's first retention run already keeps what they hold.
    crate::broker::state::protected_groups::protect(&broker);
    crate::broker::delay::holds::hold(&broker);
    let timers = Rc::new(
        crate::broker::timer::scheduler::Timers::open(
            Arc::new(crate::io::meta::RealFiles),
            &store.config().dir,
            crate::broker::timer::queue_of_shard(id, settings.config.shards),
            settings.broker.timer_limits,
        )
        .map_err(|error| anyhow::anyhow!("shard {id}: {error}"))?,
    );
    let timer_queue = crate::broker::timer::queue_of_shard(id, settings.config.shards);
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
                settings.config.shards,
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
        Box::pin(crate::broker::requests::consumers::reap_closed_connections(
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
    for level in crate::broker::delay::levels_on_shard(
        &settings.broker.delay_levels,
        id,
        settings.config.shards,
    ) {
        background.push(spawn_watched(
            "delay scheduler",
            Box::pin(crate::broker::delay::run_level(broker.clone(), level)),
        ));
    }
    if settings.broker.timer_enabled {
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
                settings.connection,
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
        settings.connection,
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
        crate::broker::state::stats_sampler::sample(&broker, &mut sampler);
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
