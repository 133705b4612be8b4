//! Starting a node: the steps of [`start`], each its own function, and the parts a node
//! over another transport ([`super::local`]) shares with it.
//!
//! Order, and why: validate the config; check the store root's shard count and make the
//! shard directories; bind every listener (so a taken port fails the start before any
//! store opens); start the metrics endpoint; load the node-wide tables (a corrupt one stops
//! the start naming its file); then start the shards and wait until every one serves. If
//! one shard fails to start, the others are stopped and the start fails with its error.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::replication::{self, MasterAddress, ReplicationStart};
use super::shard::{run_shard, ShardSettings, ShardStart};
use super::{Assignment, NodeHandle, RoleAssignment};
use crate::broker::delay::offsets::DelayOffsets;
use crate::broker::state::live_settings::LiveSettings;
use crate::broker::tables::consumer_offsets::ConsumerOffsets;
use crate::broker::tables::subscription_groups::SubscriptionGroups;
use crate::broker::tables::topics::TopicTable;
use crate::broker::NodeTables;
use crate::clock::Clock;
use crate::config::BrokerRole;
use crate::metrics::http::MetricsServer;
use crate::metrics::NodeMetrics;
use crate::namesrv::admin::NamesrvState;
use crate::net::tcp::Tcp;
use crate::net::uring::{NetRing, NetRingSettings, UringListener};
use crate::net::NetworkIo;
use crate::node_config::{self, MetricsExporter, NodeConfig};
use crate::server::admission::Admission;
use crate::shard::mailbox::{self, MailboxReceiver};
use crate::shard::{exclusive_port, layout, pin, ShardContext};

/// Connection backlog of every listener.
pub const LISTEN_BACKLOG: i32 = 1024;

type ShardThread = std::thread::JoinHandle<anyhow::Result<()>>;

/// Starts the node's shards from `config` and returns once all serve (or the start
/// failed). `config` is validated here whoever built it (a broker.conf, flags, a test),
/// so a node never runs with settings `ringmq serve` would refuse; listen ports of 0 are
/// picked free, and the settings GET_BROKER_CONFIG answers carry the picked ones.
pub fn start(config: NodeConfig) -> anyhow::Result<NodeHandle> {
    start_assigned(config, None)
}

/// [`start`] for one run of a node in controller mode, under the role the controllers
/// assigned ([`RoleAssignment`]): `config` is that run's (its `broker_role` and
/// `broker_id` the role's, `enable_controller_mode` off: the supervisor, not the node,
/// talks to the controllers). A config that asks for controller mode is refused here:
/// such a node is run by its supervisor ([`super::controller_mode`]).
pub fn start_assigned(
    config: NodeConfig,
    assignment: Option<Assignment>,
) -> anyhow::Result<NodeHandle> {
    check_assignment(&config, assignment.as_ref().map(|a| &a.role))?;
    prepare_store_root(&config)?;
    let name_servers = resolve_name_servers(&config)?;
    let (listeners, port) = bind_broker_listeners(&config)?;
    let bind_ip = config.bind_address;
    let advertised = SocketAddr::new(config.broker_ip, port);
    // With external name servers the embedded one does not run: the node opens only the
    // ports its config names, and routes come from the cluster's name servers.
    let namesrv_listener = match name_servers.is_empty() {
        true => Some(bind_namesrv_listener(&config)?),
        false => None,
    };
    let namesrv_bound = namesrv_listener
        .as_ref()
        .map(std::net::TcpListener::local_addr)
        .transpose()?;
    let namesrv_addr = match (namesrv_bound, name_servers.first()) {
        (Some(bound), _) => SocketAddr::new(config.broker_ip, bound.port()),
        (None, Some(first)) => *first,
        (None, None) => unreachable!("no name server is bound and none is configured"),
    };
    let ha_listener = bind_ha_listener(&config)?;
    let ha_port = match &ha_listener {
        Some(listener) => listener.local_addr()?.port(),
        None => replication::ha_port(&config),
    };
    let metrics = NodeMetrics::with_caps(config.shards, node_config::stats_caps(&config));
    let metrics_server = start_metrics_server(&config, &metrics)?;
    // The settings as they run: what GET_BROKER_CONFIG answers, and STOREHOST's port.
    let mut running = config;
    running.listen_port = port;
    if let Some(bound) = namesrv_bound {
        running.namesrv_port = bound.port();
    }
    if let Some(server) = &metrics_server {
        running.metrics_port = server.addr().port();
    }
    running.ha_listen_port = Some(ha_port);
    let parts = NodeParts::load(running, name_servers.clone(), assignment)?;
    let tables = parts.tables.clone();
    let starts = parts.shard_starts(
        listeners,
        namesrv_listener,
        ha_listener,
        advertised,
        &metrics,
    );
    let (stop, shards, exited) = spawn_shards(&parts.settings, starts)?;
    tracing::info!(%advertised, %namesrv_addr, shards = shards.len(), "node serving");
    Ok(NodeHandle {
        addr: advertised,
        namesrv_addr,
        bound: SocketAddr::new(bind_ip, port),
        namesrv_bound,
        name_servers,
        stop,
        shards,
        exited: Some(exited),
        tables: Some(tables),
        metrics,
        metrics_server,
    })
}

/// The run's config agrees with its assignment, and no config reaches a node asking for
/// controller mode.
fn check_assignment(
    config: &NodeConfig,
    assignment: Option<&RoleAssignment>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !config.enable_controller_mode,
        "enable_controller_mode: a node in controller mode is run by its supervisor \
         (`ringmq serve` runs it), which starts each run under the role the controllers assign"
    );
    let is_slave = config.broker_role == BrokerRole::Slave;
    match assignment {
        Some(RoleAssignment::Master { .. }) => anyhow::ensure!(
            !is_slave && config.broker_id == 0,
            "a master run has a master role and broker id 0, not {} {}",
            config.broker_role.as_str(),
            config.broker_id
        ),
        Some(RoleAssignment::Slave { .. }) => anyhow::ensure!(
            is_slave,
            "a slave run has the SLAVE role, not {}",
            config.broker_role.as_str()
        ),
        None => {}
    }
    Ok(())
}

/// A master's HA listener on `haListenPort` (else the broker port + 1); a slave has none.
fn bind_ha_listener(config: &NodeConfig) -> anyhow::Result<Option<std::net::TcpListener>> {
    if config.broker_role == BrokerRole::Slave {
        return Ok(None);
    }
    // From the configured ports: `listenPort` 0 (a free port) makes the HA port free too.
    let port = replication::ha_port(config);
    let addr = SocketAddr::new(config.bind_address, port);
    let listener = bind_listener(addr, LISTEN_BACKLOG, false).map_err(|error| {
        anyhow::anyhow!("cannot listen on the HA port {port} (haListenPort): {error}")
    })?;
    Ok(Some(listener))
}

/// `haMasterAddress`, resolved once at start like the name servers.
pub(super) fn resolve_ha_master(config: &NodeConfig) -> anyhow::Result<Option<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let Some(addr) = config.ha_master_address.as_deref() else {
        return Ok(None);
    };
    let resolved = addr
        .to_socket_addrs()
        .map_err(|error| anyhow::anyhow!("haMasterAddress: cannot resolve {addr}: {error}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("haMasterAddress: {addr} resolves to no address"))?;
    Ok(Some(resolved))
}

/// The embedded name server's listener on `namesrvPort`.
fn bind_namesrv_listener(config: &NodeConfig) -> anyhow::Result<std::net::TcpListener> {
    let addr = SocketAddr::new(config.bind_address, config.namesrv_port);
    bind_listener(addr, LISTEN_BACKLOG, false).map_err(|error| {
        anyhow::anyhow!(
            "cannot listen on the name server port {}: {error}",
            config.namesrv_port
        )
    })
}

/// The name servers of `namesrvAddr`, resolved once at start (on the starting thread: a
/// host name may need a DNS lookup, which blocks). A name that does not resolve fails the
/// start naming it: a broker that silently registers nowhere is not in its cluster.
pub(super) fn resolve_name_servers(config: &NodeConfig) -> anyhow::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let Some(list) = config.namesrv_addr.as_deref() else {
        return Ok(Vec::new());
    };
    let mut resolved = Vec::new();
    for part in list
        .split(';')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        let addr = part
            .to_socket_addrs()
            .map_err(|error| anyhow::anyhow!("namesrvAddr: cannot resolve {part}: {error}"))?
            .next()
            .ok_or_else(|| anyhow::anyhow!("namesrvAddr: {part} resolves to no address"))?;
        if !resolved.contains(&addr) {
            resolved.push(addr);
        }
    }
    Ok(resolved)
}

/// Validates `config`, checks the store root was made for its shard count, and makes
/// the shard directories.
pub(super) fn prepare_store_root(config: &NodeConfig) -> anyhow::Result<()> {
    config
        .validate()
        .map_err(|error| anyhow::anyhow!("bad configuration: {error}"))?;
    let dir = &config.store_path_root_dir;
    layout::check_shard_count(dir, config.shards).map_err(|error| anyhow::anyhow!(error))?;
    for shard in 0..config.shards {
        let dir = layout::shard_dir(dir, shard);
        std::fs::create_dir_all(&dir)
            .map_err(|error| anyhow::anyhow!("cannot create {}: {error}", dir.display()))?;
    }
    Ok(())
}

/// One listener per shard on the broker port (port 0 picks a free one for the first shard;
/// the others share it with SO_REUSEPORT), and the port they listen on. With several
/// shards, refuses a port another process's listener shares.
fn bind_broker_listeners(config: &NodeConfig) -> anyhow::Result<(Vec<std::net::TcpListener>, u16)> {
    let reuse_port = config.shards > 1;
    let mut listeners = Vec::with_capacity(config.shards as usize);
    let mut port = config.listen_port;
    for _ in 0..config.shards {
        let addr = SocketAddr::new(config.bind_address, port);
        let listener = bind_listener(addr, LISTEN_BACKLOG, reuse_port)
            .map_err(|error| anyhow::anyhow!("cannot listen on port {port}: {error}"))?;
        port = listener.local_addr()?.port();
        listeners.push(listener);
    }
    if reuse_port {
        // SO_REUSEPORT would also let another process's listener in: refuse to share.
        exclusive_port::check_alone(&listeners)
            .map_err(|error| anyhow::anyhow!("cannot listen on port {port}: {error}"))?;
    }
    Ok((listeners, port))
}

/// The Prometheus endpoint, unless `metricsExporterType` disables it.
fn start_metrics_server(
    config: &NodeConfig,
    metrics: &NodeMetrics,
) -> anyhow::Result<Option<MetricsServer>> {
    match config.metrics_exporter_type {
        MetricsExporter::Prom => {
            let port = config.metrics_port;
            // The full backlog: a burst of connections must reach the endpoint, which
            // closes what it cannot hold, rather than wait in the kernel's queue.
            let addr = SocketAddr::new(config.bind_address, port);
            let listener = bind_listener(addr, LISTEN_BACKLOG, false).map_err(|error| {
                anyhow::anyhow!("cannot listen on the metrics port {port}: {error}")
            })?;
            let server = MetricsServer::start_with(
                listener,
                metrics.clone(),
                node_config::http_limits(config),
            )?;
            Ok(Some(server))
        }
        MetricsExporter::Disable => Ok(None),
    }
}

/// What every shard of a node shares, loaded once from the settings as they run.
pub(super) struct NodeParts {
    pub settings: ShardSettings,
    pub tables: NodeTables,
    pub admission: Arc<Admission>,
    /// What the embedded name server keeps (its config, its KV entries); served by shard 0.
    pub namesrv: Arc<NamesrvState>,
}

impl NodeParts {
    /// Loads the node-wide tables from the store root of `running` and derives the shard
    /// settings; `name_servers` are the resolved `namesrvAddr` (none: the embedded name
    /// server on `running.namesrv_port` answers routes).
    pub fn load(
        running: NodeConfig,
        name_servers: Vec<SocketAddr>,
        assignment: Option<Assignment>,
    ) -> anyhow::Result<NodeParts> {
        let tables = load_tables(&running)?;
        let namesrv_port = running.namesrv_port;
        let master = MasterAddress::new(resolve_ha_master(&running)?);
        let mut broker = node_config::broker_config(&running);
        broker.role_notices = assignment.as_ref().map(|a| a.role_notices.clone());
        let settings = ShardSettings {
            name_servers,
            master,
            role_change: assignment.as_ref().map(|a| a.role_change.clone()),
            assignment: assignment.map(|a| a.role),
            ha_port: replication::ha_port(&running),
            broker,
            connection: node_config::connection_limits(&running),
            config: Arc::new(running),
        };
        let admission = Admission::new(
            settings.config.max_connections,
            settings.config.max_partial_frame_bytes,
            settings.connection.warn_interval,
        );
        let namesrv = Arc::new(NamesrvState::new(
            namesrv_port,
            settings.config.bind_address,
        ));
        Ok(NodeParts {
            settings,
            tables,
            admission,
            namesrv,
        })
    }

    /// What each shard starts with: `listeners` has one per shard; the name-server
    /// listener goes to shard 0.
    pub fn shard_starts<L>(
        &self,
        listeners: Vec<L>,
        mut namesrv_listener: Option<L>,
        mut ha_listener: Option<L>,
        advertised: SocketAddr,
        metrics: &NodeMetrics,
    ) -> Vec<ShardStart<L>> {
        let config = &self.settings.config;
        let (senders, inboxes): (Vec<_>, Vec<MailboxReceiver>) = (0..config.shards)
            .map(|_| mailbox::mailbox(config.shard_mailbox_capacity))
            .unzip();
        let (handoff_senders, handoff_inboxes) = replication::handoff_channels(config.shards);
        let node = crate::replication::service::next_node_key();
        (0u8..)
            .zip(listeners)
            .zip(inboxes)
            .zip(handoff_inboxes)
            .map(|(((id, listener), inbox), handoff)| ShardStart {
                id,
                listener,
                namesrv: namesrv_listener
                    .take()
                    .map(|listener| (listener, self.namesrv.clone())),
                // Shard 0 accepts every stream and hands each to the shard it names.
                replication: ReplicationStart {
                    listener: ha_listener.take(),
                    senders: if id == 0 {
                        handoff_senders.clone()
                    } else {
                        Vec::new()
                    },
                    inbox: handoff,
                    node,
                },
                advertised,
                inbox,
                context: ShardContext::new(id, senders.clone()),
                tables: self.tables.clone(),
                metrics: metrics.shard(id),
                admission: self.admission.clone(),
                store: node_config::store_config(config, id),
            })
            .collect()
    }
}

/// The node-wide tables of `running`'s store root.
fn load_tables(running: &NodeConfig) -> anyhow::Result<NodeTables> {
    let dir = &running.store_path_root_dir;
    let topics = TopicTable::load(
        dir,
        running.auto_create_topic_enable,
        running.default_topic_queue_nums,
    )?;
    let groups = SubscriptionGroups::load(dir, running.auto_create_subscription_group)?;
    let mut tables = NodeTables::new(topics, ConsumerOffsets::load(dir)?, groups);
    tables.delay_offsets = Arc::new(DelayOffsets::load(dir)?);
    tables.request_modes = Arc::new(crate::broker::tables::request_modes::RequestModes::load(
        dir,
    )?);
    let live = Box::new(running.clone());
    tables.settings = Arc::new(LiveSettings::new(live, Clock::system().now_ms()));
    Ok(tables)
}

/// Starts one thread per shard and waits until every one serves; on a failure stops the
/// rest and fails with the first error. Returns the stop signal, the threads, and the exit
/// signal (fired when the first shard thread ends, or all at shutdown).
fn spawn_shards(
    settings: &ShardSettings,
    starts: Vec<ShardStart<std::net::TcpListener>>,
) -> anyhow::Result<(watch::Sender<bool>, Vec<ShardThread>, oneshot::Receiver<()>)> {
    let (stop, stop_rx) = watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<u8>();
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
    let mut shards = Vec::with_capacity(starts.len());
    for start in starts {
        let id = start.id;
        let spawned = spawn_shard(
            settings.clone(),
            start,
            stop_rx.clone(),
            ready_tx.clone(),
            ended_tx.clone(),
        );
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
    let shards = wait_until_ready(&stop, shards, &ready_rx)?;
    let (exit_tx, exited) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("ringmq-exit-watch".into())
        .spawn(move || {
            let _ = ended_rx.recv();
            let _ = exit_tx.send(());
        })?;
    Ok((stop, shards, exited))
}

/// Starts shard `start.id`'s thread: pinned if asked, a current-thread runtime and a
/// `LocalSet`, the shard as a task of it.
fn spawn_shard(
    settings: ShardSettings,
    start: ShardStart<std::net::TcpListener>,
    stop: watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<u8>,
    ended: std::sync::mpsc::Sender<()>,
) -> std::io::Result<ShardThread> {
    let id = start.id;
    std::thread::Builder::new()
        .name(format!("ringmq-shard-{id}"))
        .spawn(move || -> anyhow::Result<()> {
            // Sent when the thread ends, however it ends.
            struct Ended(std::sync::mpsc::Sender<()>);
            impl Drop for Ended {
                fn drop(&mut self) {
                    let _ = self.0.send(());
                }
            }
            let _ended = Ended(ended);
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
                let ready = move |id| {
                    let _ = ready.send(id);
                };
                let shard = match network_ring(&settings.config, id)? {
                    Some(ring) => {
                        start
                            .metrics
                            .network_ring
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        let start = start.map_listeners(|listener| {
                            UringListener::from_std(listener, ring.clone())
                        })?;
                        tokio::task::spawn_local(run_shard(settings, start, Tcp, stop, ready))
                    }
                    None => {
                        let start = start.map_listeners(TcpListener::from_std)?;
                        tokio::task::spawn_local(run_shard(settings, start, Tcp, stop, ready))
                    }
                };
                shard
                    .await
                    .unwrap_or_else(|error| Err(anyhow::anyhow!("shard {id} panicked: {error}")))
            })
        })
}

/// Shard `id`'s network ring, if `network_io` asks for one and the kernel gives it: with
/// `uring` a refusal stops the start, with `auto` it is logged and the shard serves on
/// epoll. Runs on the shard's thread, inside its `LocalSet`.
fn network_ring(config: &NodeConfig, id: u8) -> anyhow::Result<Option<Rc<NetRing>>> {
    let settings = NetRingSettings {
        entries: config.network_ring_entries,
        recv_buffers: config.network_recv_buffers,
        recv_buffer_bytes: config.network_recv_buffer_bytes,
        send_queue_bytes: config.network_send_queue_bytes,
    };
    let ring = match config.network_io {
        NetworkIo::Epoll => return Ok(None),
        NetworkIo::Uring => NetRing::new(settings).map_err(|error| {
            anyhow::anyhow!(
                "networkIo=uring: shard {id} cannot have its network ring ({error}); \
                 set networkIo=epoll (or auto) on this machine"
            )
        })?,
        NetworkIo::Auto => match NetRing::new(settings) {
            Ok(ring) => ring,
            Err(error) => {
                tracing::warn!(
                    shard = id,
                    %error,
                    "networkIo=auto: the kernel refused io_uring; the shard serves its connections on epoll"
                );
                return Ok(None);
            }
        },
    };
    Ok(Some(ring))
}

/// Waits until every shard says it serves. If one ends first, stops the rest and fails
/// with the error of the first shard that ended.
fn wait_until_ready(
    stop: &watch::Sender<bool>,
    shards: Vec<ShardThread>,
    ready: &std::sync::mpsc::Receiver<u8>,
) -> anyhow::Result<Vec<ShardThread>> {
    for _ in 0..shards.len() {
        if ready.recv().is_ok() {
            continue;
        }
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
        return Err(
            first_error.unwrap_or_else(|| anyhow::anyhow!("a shard stopped before it was ready"))
        );
    }
    Ok(shards)
}

fn stop_shards(stop: &watch::Sender<bool>, shards: Vec<ShardThread>) {
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
