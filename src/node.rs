//! The network node: one shard thread (a pinned-to-be OS thread running a tokio
//! current-thread runtime and a `LocalSet`) that owns the listener, the store, the broker
//! and every connection it accepts (ARCHITECTURE D3).
//!
//! [`start`] is the one entry: `ringmq serve` calls it and so do the integration tests
//! (with port 0). It returns once the listener is bound and the store is open, with the
//! bound addresses (broker port and embedded name-server port, both served on this
//! shard) and a [`NodeHandle`] whose [`NodeHandle::shutdown`] stops the node.
//!
//! Shutdown order, and why: stop accepting; tell every connection to end (their request
//! tasks, parked pulls included, are aborted with them); then `Store::shutdown`, which
//! lets puts already queued finish, flushes, writes a clean checkpoint and removes the
//! `abort` marker, so the next start does not scan. The committed consumer offsets are
//! written once more just before the store goes (after the connections, so no commit
//! arrives after the write).
//!
//! Start loads `config/consumerOffset.json` right after the store opens; if it is corrupt
//! the store is shut down cleanly and the start fails with an error naming the file. Two
//! housekeeping tasks run beside the listener: the client-expiry sweep and the periodic
//! consumer-offset write (both intervals are `BrokerConfig` settings).
//!
//! Multi-shard (later) plugs in here: `start` will spawn N shard threads, each binding its
//! own listener on the same port with SO_REUSEPORT (see [`bind_listener`], whose
//! `reuse_port` argument exists for that) and opening its own store directory, with a
//! mailbox per shard so brokers can forward requests for queues they do not own. With one
//! shard SO_REUSEPORT stays off: it would let a second node on the same port silently take
//! half the connections.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::broker::consumer_offsets::ConsumerOffsets;
use crate::broker::topics::TopicTable;
use crate::broker::{Broker, BrokerConfig, BrokerIdentity};
use crate::clock::Clock;
use crate::config::{FlushMode, StoreConfig, RECORD_OVERHEAD_MAX};
use crate::io::{open_backend, IoChoice};
use crate::namesrv::NameServer;
use crate::remoting::connection::{serve_connection, ConnectionLimits};
use crate::remoting::traffic::Traffic;
use crate::store::Store;

/// Everything a node is started with.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub dir: PathBuf,
    /// `listenPort`; 0 picks a free port (tests).
    pub port: u16,
    pub flush: FlushMode,
    pub io: IoChoice,
    /// The address clients reach this node at: STOREHOST and msgIds carry it.
    pub broker_ip: IpAddr,
    pub broker_name: String,
    pub cluster_name: String,
    /// CommitLog segment size; `None` keeps the 1 GiB default.
    pub segment_size: Option<u64>,
    /// Connection backlog of the listener.
    pub backlog: i32,
    pub connection: ConnectionLimits,
    pub broker: BrokerConfig,
    /// Port of the embedded name server (`namesrvPort`); 0 picks a free port (tests).
    pub namesrv_port: u16,
    /// `autoCreateTopicEnable`: a send to (or route query for) an unknown topic creates it.
    pub auto_create_topics: bool,
    /// `defaultTopicQueueNums`: queues of an auto-created topic.
    pub default_topic_queue_nums: u32,
}

impl NodeOptions {
    pub fn new(dir: impl Into<PathBuf>) -> NodeOptions {
        NodeOptions {
            dir: dir.into(),
            port: 10911,
            flush: FlushMode::Async,
            io: IoChoice::Auto,
            broker_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            broker_name: "broker-a".into(),
            cluster_name: "DefaultCluster".into(),
            segment_size: None,
            backlog: 1024,
            connection: ConnectionLimits::default(),
            broker: BrokerConfig::default(),
            namesrv_port: 9876,
            auto_create_topics: true,
            default_topic_queue_nums: 8,
        }
    }
}

/// A running node. Dropping it stops the node too (and waits for it).
pub struct NodeHandle {
    addr: SocketAddr,
    namesrv_addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    exited: Option<oneshot::Receiver<()>>,
    traffic: Arc<Traffic>,
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

    /// The byte counters of the node's connections (see `remoting::traffic`).
    pub fn traffic(&self) -> Arc<Traffic> {
        self.traffic.clone()
    }

    /// Resolves when the shard thread ends on its own (an error, a panic) or is stopped.
    /// Can be taken once.
    pub fn take_exit_signal(&mut self) -> Option<oneshot::Receiver<()>> {
        self.exited.take()
    }

    /// Stops the node and waits for its thread; the error is the shard's, if it failed.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .map_err(|_| anyhow::anyhow!("the shard thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        if let Err(error) = self.stop_and_join() {
            tracing::error!("node stopped with an error: {error:#}");
        }
    }
}

/// Starts the node's shard thread and returns once it serves (or failed to start).
pub fn start(options: NodeOptions) -> anyhow::Result<NodeHandle> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<(SocketAddr, SocketAddr)>();
    let (stop, stop_rx) = watch::channel(false);
    let (exit_tx, exited) = oneshot::channel::<()>();
    let traffic = Arc::new(Traffic::new());
    let shard_traffic = traffic.clone();
    let thread = std::thread::Builder::new()
        .name("ringmq-shard-0".into())
        .spawn(move || -> anyhow::Result<()> {
            // Dropped when the thread ends, however it ends: the exit signal.
            let _exit = exit_tx;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let local = tokio::task::LocalSet::new();
            local.block_on(
                &runtime,
                run_shard(options, shard_traffic, stop_rx, ready_tx),
            )
        })?;
    match ready_rx.recv() {
        Ok((addr, namesrv_addr)) => Ok(NodeHandle {
            addr,
            namesrv_addr,
            stop,
            thread: Some(thread),
            exited: Some(exited),
            traffic,
        }),
        // The thread ended before it was ready: its result says why.
        Err(_) => match thread.join() {
            Ok(Err(error)) => Err(error),
            Ok(Ok(())) => Err(anyhow::anyhow!("the shard stopped before it was ready")),
            Err(_) => Err(anyhow::anyhow!("the shard thread panicked while starting")),
        },
    }
}

/// Binds a listening TCP socket with SO_REUSEADDR (restarts do not wait out TIME_WAIT) and,
/// if asked, SO_REUSEPORT (one listener per shard on the same port).
pub fn bind_listener(
    addr: SocketAddr,
    backlog: i32,
    reuse_port: bool,
) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

async fn run_shard(
    options: NodeOptions,
    traffic: Arc<Traffic>,
    mut stop: watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<(SocketAddr, SocketAddr)>,
) -> anyhow::Result<()> {
    // Listen on every interface of the broker IP's family, as Java brokers do; advertise
    // the broker IP.
    let any = match options.broker_ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let listener = bind_listener(SocketAddr::new(any, options.port), options.backlog, false)
        .map_err(|error| anyhow::anyhow!("cannot listen on port {}: {error}", options.port))?;
    let advertised = SocketAddr::new(options.broker_ip, listener.local_addr()?.port());
    let namesrv_listener = bind_listener(
        SocketAddr::new(any, options.namesrv_port),
        options.backlog,
        false,
    )
    .map_err(|error| {
        anyhow::anyhow!(
            "cannot listen on the name server port {}: {error}",
            options.namesrv_port
        )
    })?;
    let namesrv_addr = SocketAddr::new(options.broker_ip, namesrv_listener.local_addr()?.port());
    // Read the topic table before the store opens: a corrupt one stops the start early.
    let topics = TopicTable::load(
        &options.dir,
        options.auto_create_topics,
        options.default_topic_queue_nums,
    )?;

    let mut config = StoreConfig::new(&options.dir);
    config.flush_mode = options.flush;
    config.store_host = advertised;
    if let Some(size) = options.segment_size {
        config.commit_log_segment_size = size;
        // Keep the largest message within one segment, as `validate` demands.
        config.max_message_size = config
            .max_message_size
            .min(size.saturating_sub(RECORD_OVERHEAD_MAX + 8) as usize)
            .max(1);
    }
    config.validate().map_err(|error| anyhow::anyhow!(error))?;
    let clock = Clock::system();
    let store = Store::open(config, open_backend(options.io)?, clock).await?;
    let consumer_offsets = match ConsumerOffsets::load(&options.dir) {
        Ok(offsets) => offsets,
        Err(error) => {
            if let Err(shutdown) = store.shutdown().await {
                tracing::warn!("store shutdown after a failed start: {shutdown}");
            }
            return Err(error);
        }
    };
    let broker = Rc::new(Broker::new(
        store.clone(),
        BrokerIdentity {
            broker_name: options.broker_name.clone(),
            cluster_name: options.cluster_name.clone(),
            store_host: advertised,
        },
        options.broker.clone(),
        topics,
        clock,
        consumer_offsets,
    ));
    let namesrv = Rc::new(NameServer::new(broker.clone()));
    let housekeeping = [
        tokio::task::spawn_local(sweep_clients(broker.clone())),
        tokio::task::spawn_local(flush_consumer_offsets(broker.clone())),
    ];
    tracing::info!(%advertised, %namesrv_addr, backend = store.backend_name(), "serving");
    let _ = ready.send((advertised, namesrv_addr));

    // Connections get their own receivers; `stop` itself is borrowed by the select.
    let for_connections = stop.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tokio::task::spawn_local(serve_connection(
                        stream,
                        peer,
                        broker.clone(),
                        options.connection,
                        traffic.clone(),
                        for_connections.clone(),
                    ));
                }
                Err(error) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            accepted = namesrv_listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tokio::task::spawn_local(serve_connection(
                        stream,
                        peer,
                        namesrv.clone(),
                        options.connection,
                        traffic.clone(),
                        for_connections.clone(),
                    ));
                }
                Err(error) => {
                    tracing::warn!(%error, "name server accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    drop(listener);
    drop(namesrv_listener);
    // Let every connection see the stop and abort its requests before the store goes.
    tokio::task::yield_now().await;
    for task in housekeeping {
        task.abort();
    }
    let offsets = broker.consumer_offsets().persist().map_err(|error| {
        anyhow::anyhow!(
            "cannot write {}: {error}",
            broker.consumer_offsets().path().display()
        )
    });
    store.shutdown().await?;
    offsets
}

/// Drops clients whose heartbeats stopped, every `client_sweep_interval`.
async fn sweep_clients(broker: Rc<Broker>) {
    let config = broker.config.clone();
    let mut ticks = tokio::time::interval(config.client_sweep_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let removed = broker
            .groups()
            .sweep(tokio::time::Instant::now(), config.client_expiry);
        if removed > 0 {
            tracing::info!(removed, "expired clients dropped");
        }
    }
}

/// Writes changed consumer offsets every `consumer_offset_flush_interval`.
async fn flush_consumer_offsets(broker: Rc<Broker>) {
    let mut ticks = tokio::time::interval(broker.config.consumer_offset_flush_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(error) = broker.consumer_offsets().persist_if_changed() {
            // Kept dirty: the next tick tries again.
            tracing::error!(
                "cannot write {}: {error}",
                broker.consumer_offsets().path().display()
            );
        }
    }
}
