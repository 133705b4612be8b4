//! One shard of a running node: its store, its broker, the feature engines it runs
//! ([`SERVICES`], each through the shard service seam, [`crate::shard::service`]), its
//! background tasks, and its accept loops, over any transport of the network seam
//! ([`crate::net`]): kernel TCP in a real node, the simulated network in tests
//! ([`super::local`]).
//!
//! Order of a shard's life: open the store; make the broker; open every engine in
//! [`SERVICES`] order (before any await, so their retention holds count from the store's
//! first retention run); spawn the core tasks and every engine's tasks, each under the
//! store's watch; say it is ready; accept until the stop signal; then let the connections
//! end, abort every task, stop the engines in reverse order, and shut the store down.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::registration::{Registration, RegistrationSettings};
use super::replication::{MasterAddress, ReplicationStart};
use crate::broker::{Broker, BrokerConfig, BrokerIdentity, NodeTables};
use crate::clock::Clock;
use crate::config::BrokerRole;
use crate::config::StoreConfig;
use crate::io::open_backend;
use crate::metrics::rates::ShardSampler;
use crate::metrics::ShardMetrics;
use crate::namesrv::admin::NamesrvState;
use crate::namesrv::NameServer;
use crate::net::{Listener, Transport};
use crate::node_config::NodeConfig;
use crate::server::admission::Admission;
use crate::server::connection::{serve_admitted, ConnectionLimits, RequestHandler};
use crate::server::traffic::{LimitEvent, Traffic};
use crate::shard::mailbox::{self, MailboxReceiver};
use crate::shard::service::{ShardService, ShardTask};
use crate::shard::ShardContext;
use crate::store::Store;

/// Opens one feature engine on a shard (see [`crate::shard::service`]).
type OpenService = fn(&Rc<Broker>) -> anyhow::Result<Rc<dyn ShardService>>;

/// The feature engines every shard runs, in opening order; they stop in the reverse order.
/// A new engine is one entry here (and its metrics section in
/// [`crate::metrics::sections`]).
const SERVICES: &[OpenService] = &[
    crate::broker::state::protected_groups::open_service,
    crate::broker::delay::service::open,
    crate::broker::timer::service::open,
    crate::broker::pop::service::open,
    crate::broker::transaction::service::open,
];

/// What one shard starts with; `L` is its transport's listener.
pub(super) struct ShardStart<L> {
    pub id: u8,
    pub listener: L,
    /// Shard 0 only: the embedded name server's listener and state.
    pub namesrv: Option<(L, Arc<NamesrvState>)>,
    /// The HA port's listener (shard 0 of a master) and the stream handoff.
    pub replication: ReplicationStart<L>,
    pub advertised: SocketAddr,
    pub inbox: MailboxReceiver,
    pub context: ShardContext,
    pub tables: NodeTables,
    pub metrics: Arc<ShardMetrics>,
    /// The node-wide connection bounds, shared by every shard.
    pub admission: Arc<Admission>,
    /// This shard's store settings, derived on the starting thread (it reads
    /// `/proc/meminfo`), not on the shard's reactor.
    pub store: StoreConfig,
}

impl<L> ShardStart<L> {
    /// The same start with its listeners turned into another type (the real node's
    /// std listeners become tokio ones on the shard's own runtime).
    pub fn map_listeners<M>(
        self,
        mut change: impl FnMut(L) -> std::io::Result<M>,
    ) -> std::io::Result<ShardStart<M>> {
        Ok(ShardStart {
            id: self.id,
            listener: change(self.listener)?,
            namesrv: match self.namesrv {
                Some((listener, state)) => Some((change(listener)?, state)),
                None => None,
            },
            replication: ReplicationStart {
                listener: self.replication.listener.map(&mut change).transpose()?,
                senders: self.replication.senders,
                inbox: self.replication.inbox,
                node: self.replication.node,
            },
            advertised: self.advertised,
            inbox: self.inbox,
            context: self.context,
            tables: self.tables,
            metrics: self.metrics,
            admission: self.admission,
            store: self.store,
        })
    }
}

/// What every shard runs with: the node's settings as they run (the ports picked free
/// written in) and the settings derived from them once for all shards.
#[derive(Clone)]
pub(super) struct ShardSettings {
    pub config: Arc<NodeConfig>,
    /// The resolved `namesrvAddr`: shard 0 registers the node with each.
    pub name_servers: Vec<SocketAddr>,
    /// A slave's master HA address, shared by every shard.
    pub master: MasterAddress,
    /// The role the controllers assigned to this run, in controller mode (D18).
    pub assignment: Option<super::RoleAssignment>,
    /// Controller mode: set when the run stops for a role change.
    pub role_change: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The HA port this node's slaves replicate from (bound: a picked free port written in).
    pub ha_port: u16,
    pub broker: BrokerConfig,
    pub connection: ConnectionLimits,
}

/// Runs one shard until `stop`; `ready` is called with its id once it serves. `transport`
/// carries what the shard itself connects to (the name servers it registers with).
pub(super) async fn run_shard<L: Listener, T: Transport>(
    settings: ShardSettings,
    start: ShardStart<L>,
    transport: T,
    stop: watch::Receiver<bool>,
    ready: impl FnOnce(u8),
) -> anyhow::Result<()> {
    let id = start.id;
    let (broker, listeners, replication) = open_shard(&settings, start).await?;
    // A shard aborted or failed before its clean stop leaves nothing of its store running
    // and its directory unlocked, as a killed process would (`LocalNode::kill`).
    let _abandon = broker.store().abandon_on_drop();
    let mut services = open_services(&broker)?;
    // A slave runs none of the engines' tasks: delay levels, timers and POP revive write
    // to the log, which only its master does (their state still opens, for reads); it runs
    // their replica tasks instead, which keep that state following the replicated log.
    let engines = services.len();
    let engines_run = settings.config.broker_role != BrokerRole::Slave;
    services.extend(open_replication(&settings, &broker, replication, transport.clone()).await?);
    services.extend(open_node_services(&settings, &broker, transport));
    let store = broker.store().clone();
    // Every shard task runs under the store's watch: a panic poisons the store (D11).
    let mut background = Background(
        core_tasks(&broker, listeners.inbox)
            .into_iter()
            .chain(services.iter().enumerate().flat_map(|(at, service)| {
                match engines_run || at >= engines {
                    true => service.tasks(),
                    false => service.replica_tasks(),
                }
            }))
            .map(|task| tokio::task::spawn_local(store.watch(task.name, task.future)))
            .collect(),
    );
    tracing::info!(shard = id, advertised = %broker.identity().store_host, backend = store.backend_name(), "shard serving");
    // `/health` answers 200 once every shard got here: its store open and recovered.
    broker.metrics().set_ready(true);
    ready(id);
    let traffic = broker.metrics().traffic.clone();
    if let Some((listener, state)) = listeners.namesrv {
        let handler = Rc::new(NameServer::new(
            broker.identity().clone(),
            broker.topics.clone(),
            broker.clock,
            state,
        ));
        let accepting = accept_connections(
            listener,
            handler,
            settings.connection,
            stop.clone(),
            traffic.clone(),
            listeners.admission.clone(),
            None,
        );
        background.0.push(tokio::task::spawn_local(
            store.watch("name server listener", Box::pin(accepting)),
        ));
    }
    accept_connections(
        listeners.broker,
        broker.clone(),
        settings.connection,
        stop,
        traffic,
        listeners.admission,
        Some(broker.metrics().clone()),
    )
    .await;
    broker.metrics().set_ready(false);
    // Let every connection see the stop and abort its requests before the store goes.
    tokio::task::yield_now().await;
    drop(background);
    for service in services.iter().rev() {
        service.stop().await;
    }
    store.shutdown().await?;
    Ok(())
}

/// The shard's background tasks, aborted when it is dropped: at a clean stop, and when
/// the shard's own task is aborted (a node on the simulated network killed), so nothing
/// of a stopped shard goes on running, its listeners included.
struct Background(Vec<tokio::task::JoinHandle<Option<()>>>);

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// What a shard accepts on, and what it serves with besides its broker.
struct ShardListeners<L> {
    broker: L,
    namesrv: Option<(L, Arc<NamesrvState>)>,
    inbox: MailboxReceiver,
    admission: Arc<Admission>,
}

/// Opens the shard's store and makes its broker.
async fn open_shard<L>(
    settings: &ShardSettings,
    start: ShardStart<L>,
) -> anyhow::Result<(Rc<Broker>, ShardListeners<L>, ReplicationStart<L>)> {
    let ShardStart {
        id,
        listener,
        namesrv,
        replication,
        advertised,
        inbox,
        context,
        tables,
        metrics,
        admission,
        store: config,
    } = start;
    let clock = Clock::system();
    let disk = open_backend(settings.config.io_backend, config.flush_mode.data_writes())?;
    let store = Store::open(config, disk, clock)
        .await
        .map_err(|error| anyhow::anyhow!("shard {id}: {error}"))?;
    // A turn's send responses leave in one write per connection, from the appender.
    store.set_answer_scope(Rc::new(crate::server::reply_batch::batch_replies));
    let identity = BrokerIdentity {
        broker_name: settings.config.broker_name.clone(),
        cluster_name: settings.config.broker_cluster_name.clone(),
        store_host: advertised,
    };
    let broker = Rc::new(Broker::new(
        store,
        identity,
        settings.broker.clone(),
        tables,
        clock,
        context,
        metrics,
    ));
    let listeners = ShardListeners {
        broker: listener,
        namesrv,
        inbox,
        admission,
    };
    Ok((broker, listeners, replication))
}

/// Opens every engine of [`SERVICES`] on the shard, in order; the first failure fails the
/// shard, naming it.
fn open_services(broker: &Rc<Broker>) -> anyhow::Result<Vec<Rc<dyn ShardService>>> {
    let id = broker.shard().id();
    SERVICES
        .iter()
        .map(|open| open(broker).map_err(|error| anyhow::anyhow!("shard {id}: {error}")))
        .collect()
}

/// The shard's replication service for the node's role (and the run's assignment in
/// controller mode).
async fn open_replication<L: Listener, T: Transport>(
    settings: &ShardSettings,
    broker: &Rc<Broker>,
    start: ReplicationStart<L>,
    transport: T,
) -> anyhow::Result<Vec<Rc<dyn ShardService>>> {
    super::replication::open(
        &settings.config,
        broker,
        start,
        transport,
        &settings.master,
        settings.assignment.as_ref(),
    )
    .await
}

/// The services shard 0 runs for the whole node: the registration with the name servers of
/// `namesrvAddr`, and on a slave the copy of its master's tables. Opened after the
/// engines, so they stop first at a clean stop: the name servers stop routing to this node
/// before its engines and store go.
fn open_node_services<T: Transport>(
    settings: &ShardSettings,
    broker: &Rc<Broker>,
    transport: T,
) -> Vec<Rc<dyn ShardService>> {
    if broker.shard().id() != 0 {
        return Vec::new();
    }
    let mut services: Vec<Rc<dyn ShardService>> = Vec::new();
    let config = &settings.config;
    if config.broker_role == BrokerRole::Slave {
        if settings.name_servers.is_empty() {
            super::metadata_sync::warn_without_name_servers();
        }
        services.push(Rc::new(super::metadata_sync::MetadataSync::new(
            broker,
            transport.clone(),
            settings.master.clone(),
            config.slave_metadata_sync_interval,
            config.slave_metadata_request_timeout,
        )));
    }
    services.extend(open_registration(settings, broker, transport));
    services
}

/// The registration with the name servers of `namesrvAddr`, if there are any.
fn open_registration<T: Transport>(
    settings: &ShardSettings,
    broker: &Rc<Broker>,
    transport: T,
) -> Option<Rc<dyn ShardService>> {
    let config = &settings.config;
    let advertised = broker.identity().store_host;
    let registration = RegistrationSettings {
        name_servers: settings.name_servers.clone(),
        broker_id: config.broker_id,
        ha_server_addr: SocketAddr::new(
            config.broker_ip2.unwrap_or(advertised.ip()),
            settings.ha_port,
        ),
        master: settings.master.clone(),
        master_configured: config.ha_master_address.is_some(),
        expected_master: settings
            .assignment
            .as_ref()
            .and_then(|role| role.expected_master()),
        role_change: settings.role_change.clone(),
        lease: settings
            .assignment
            .as_ref()
            .and_then(|role| role.write_lease().cloned()),
        period: config.register_name_server_period,
        timeout: config.register_broker_timeout_mills,
    };
    let service = Registration::open(broker, registration, transport)?;
    Some(Rc::new(service))
}

/// The tasks every shard runs whatever engines it has: its mailbox, the metrics sampler,
/// the closed-connection reaper, and on shard 0 the node-wide housekeeping.
fn core_tasks(broker: &Rc<Broker>, inbox: MailboxReceiver) -> Vec<ShardTask> {
    let mut tasks = vec![
        ShardTask::new("mailbox", mailbox::serve_mailbox(inbox, broker.clone())),
        ShardTask::new("metrics sampler", sample_metrics(broker.clone())),
        ShardTask::new(
            "closed connection reaper",
            crate::broker::requests::consumers::reap_closed_connections(broker.clone()),
        ),
    ];
    if broker.shard().id() == 0 {
        // Node-wide housekeeping runs once, on shard 0.
        tasks.extend([
            ShardTask::new("client sweep", sweep_clients(broker.clone())),
            ShardTask::new(
                "consumer offset flush",
                flush_consumer_offsets(broker.clone()),
            ),
            ShardTask::new("delay offset flush", flush_delay_offsets(broker.clone())),
        ]);
    }
    tasks
}

/// Accepts connections on `listener` and serves each with `handler` until `stop`; the
/// listener is closed when this returns. A connection beyond `max_connections` is closed
/// as soon as it is accepted (the kernel would otherwise keep it queued, unanswered),
/// counted, and reported at most once per interval.
async fn accept_connections<L: Listener, H: RequestHandler>(
    listener: L,
    handler: Rc<H>,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    traffic: Arc<Traffic>,
    admission: Arc<Admission>,
    metrics: Option<Arc<ShardMetrics>>,
) {
    // Connections get their own receivers; `stop` itself is borrowed by the select.
    let for_connections = stop.clone();
    // Aborted with this loop when the shard is (a kill); detached at a clean stop, where
    // each sees the stop and ends by itself.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        tokio::select! {
            // Through the seam: its TCP accept also turns Nagle off.
            accepted = Listener::accept(&listener) => match accepted {
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
                    connections.spawn_local(async move {
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
    connections.detach_all();
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
