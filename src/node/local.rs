//! A node served on the calling thread, over any transport of the network seam
//! ([`crate::net`]): each shard a task of the caller's `LocalSet`. It is how a test puts a
//! whole node on the simulated network ([`crate::net::sim`], which is single-threaded),
//! beside its clients and the other nodes of a cluster.
//!
//! It is the real node's shards (`node/shard.rs`): the same config validation, stores,
//! brokers, feature engines, mailboxes between shards, connection code and name server.
//! What it leaves out is what only a process needs: shard threads and pinning (every shard
//! on the caller's thread), and the Prometheus endpoint (its figures are in
//! [`LocalNode::metrics`]). Where the real node's shards share the broker port
//! (`SO_REUSEPORT`), here shard 0 listens on it and the other shards on ports of their
//! own that no client is told of: every connection lands on shard 0, which forwards what
//! other shards own through their mailboxes, as a real shard does with what lands on it.
//! An HA stream for another shard is handed over on the thread
//! ([`crate::replication::service`]'s in-thread handoff).

use std::future::Future;
use std::net::SocketAddr;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::replication::ha_port;
use super::shard::run_shard;
use super::start::{prepare_store_root, resolve_name_servers, NodeParts};
use super::write_tables;
use crate::broker::NodeTables;
use crate::config::BrokerRole;
use crate::metrics::NodeMetrics;
use crate::net::{Listener, Transport};
use crate::node_config::{self, NodeConfig};

/// A node running as a task of the caller's `LocalSet`. Stop it with
/// [`LocalNode::shutdown`], crash it with [`LocalNode::kill`]; dropping it aborts its shard
/// as a kill does, without waiting for the shard to be gone.
pub struct LocalNode {
    addr: SocketAddr,
    namesrv_addr: SocketAddr,
    /// A master's HA address (its slaves' `haMasterAddress`); `None` for a slave.
    ha_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    /// Every shard's task, shard 0 first; empty once stopped or killed.
    shards: Vec<JoinHandle<anyhow::Result<()>>>,
    tables: NodeTables,
    metrics: NodeMetrics,
}

impl LocalNode {
    /// Starts a node from `config` listening through `transport`, and returns once every
    /// shard serves. Ports of 0 are picked free by the transport.
    pub async fn start<T: Transport>(
        config: NodeConfig,
        transport: &T,
    ) -> anyhow::Result<LocalNode> {
        prepare_store_root(&config)?;
        let name_servers = resolve_name_servers(&config)?;
        let bound = bind_all(&config, transport, name_servers.is_empty()).await?;
        let (listener, namesrv, ha_listener) = (bound.broker, bound.namesrv, bound.ha);
        let (port, namesrv_port, ha_listener_bound) =
            (bound.port, bound.namesrv_port, bound.ha_port);
        let ha_bound = ha_listener_bound.unwrap_or_else(|| ha_port(&config));
        let addr = SocketAddr::new(config.broker_ip, port);
        let namesrv_addr = match (namesrv_port, name_servers.first()) {
            (Some(bound), _) => SocketAddr::new(config.broker_ip, bound),
            (None, Some(first)) => *first,
            (None, None) => unreachable!("no name server is bound and none is configured"),
        };
        let shards = config.shards;
        let metrics = NodeMetrics::with_caps(shards, node_config::stats_caps(&config));
        let mut listeners = vec![listener];
        for _ in 1..shards {
            let unnamed = SocketAddr::new(config.bind_address, 0);
            listeners.push(transport.bind(unnamed).await?);
        }
        let mut running = config;
        running.listen_port = port;
        if let Some(bound) = namesrv_port {
            running.namesrv_port = bound;
        }
        running.ha_listen_port = Some(ha_bound);
        let parts = NodeParts::load(running, name_servers, None)?;
        let starts = parts.shard_starts(listeners, namesrv, ha_listener, addr, &metrics);
        let (stop, stop_rx) = watch::channel(false);
        let tasks = spawn_shards(&parts, starts, transport, stop_rx).await?;
        let ha_addr = ha_listener_bound.map(|port| SocketAddr::new(addr.ip(), port));
        Ok(LocalNode {
            addr,
            namesrv_addr,
            ha_addr,
            stop,
            shards: tasks,
            tables: parts.tables,
            metrics,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The name server its clients ask for routes: the embedded one, else the first of
    /// `namesrvAddr`.
    pub fn namesrv_addr(&self) -> SocketAddr {
        self.namesrv_addr
    }

    /// Where a master's slaves stream from; `None` for a slave.
    pub fn ha_addr(&self) -> Option<SocketAddr> {
        self.ha_addr
    }

    pub fn metrics(&self) -> &NodeMetrics {
        &self.metrics
    }

    /// Stops the node as a clean shutdown does: connections end, the engines and the
    /// store stop, and the node-wide tables are written.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        let mut stopped = Ok(());
        for (id, shard) in std::mem::take(&mut self.shards).into_iter().enumerate() {
            let result = shard
                .await
                .unwrap_or_else(|error| Err(anyhow::anyhow!("shard {id} panicked: {error}")));
            stopped = stopped.and(result);
        }
        stopped.and(write_tables(&self.tables))
    }

    /// Ends the node as `kill -9` ends a process, and returns once it is gone: nothing is
    /// written on the way out (no clean checkpoint, the store's abort marker stays, the
    /// node-wide tables are not written), every task of the node ends (the shard's, its
    /// store's, its connections' and streams'), its listeners close and its store
    /// directory is unlocked, so a node started again on the directory runs crash
    /// recovery. Writes already made stay, as a killed process's do in the page cache.
    pub async fn kill(mut self) {
        let shards = std::mem::take(&mut self.shards);
        // Dropping a shard's future drops its listener, aborts its background tasks and
        // connections, and abandons its store (`run_shard`).
        abort_all(&shards);
        for shard in shards {
            // Cancelled, or ended by itself just before: gone either way.
            let _ = shard.await;
        }
        // The aborted tasks are dropped when the `LocalSet` next runs them (queued before
        // this task's wake-up): one turn lets their sockets (the HA and name server
        // listeners, connections) close before the caller binds the ports again.
        tokio::task::yield_now().await;
    }
}

impl Drop for LocalNode {
    fn drop(&mut self) {
        abort_all(&self.shards);
    }
}

/// Runs every shard of `starts` as a task of the caller's `LocalSet`, and returns once all
/// serve; the first error of a shard that ended before, with the others aborted.
async fn spawn_shards<L: Listener, T: Transport>(
    parts: &NodeParts,
    starts: Vec<super::shard::ShardStart<L>>,
    transport: &T,
    stop_rx: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<anyhow::Result<()>>>> {
    let shards = starts.len();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks: Vec<JoinHandle<anyhow::Result<()>>> = starts
        .into_iter()
        .map(|start| {
            let ready_tx = ready_tx.clone();
            tokio::task::spawn_local(run_shard(
                parts.settings.clone(),
                start,
                transport.clone(),
                stop_rx.clone(),
                move |id| {
                    let _ = ready_tx.send(id);
                },
            ))
        })
        .collect();
    drop(ready_tx);
    let mut ready = 0;
    while ready < shards {
        let ended_first = futures_first_ended(&mut tasks);
        tokio::select! {
            served = ready_rx.recv() => match served {
                Some(_) => ready += 1,
                // Every shard ended before it was ready: the first error says why.
                None => return Err(ended_all(tasks).await),
            },
            (at, result) = ended_first => {
                tasks.remove(at);
                abort_all(&tasks);
                return Err(ended(result));
            }
        }
    }
    Ok(tasks)
}

fn abort_all(shards: &[JoinHandle<anyhow::Result<()>>]) {
    for shard in shards {
        shard.abort();
    }
}

/// The first of `shards` to end: its index and outcome (pending while none has).
async fn futures_first_ended(
    shards: &mut [JoinHandle<anyhow::Result<()>>],
) -> (usize, Result<anyhow::Result<()>, tokio::task::JoinError>) {
    std::future::poll_fn(|cx| {
        for (at, shard) in shards.iter_mut().enumerate() {
            if let std::task::Poll::Ready(result) = std::pin::Pin::new(shard).poll(cx) {
                return std::task::Poll::Ready((at, result));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Why a node none of whose shards got ready did not start: the first shard's error.
async fn ended_all(shards: Vec<JoinHandle<anyhow::Result<()>>>) -> anyhow::Error {
    abort_all(&shards);
    let mut shards = shards.into_iter();
    match shards.next() {
        Some(first) => ended(first.await),
        None => anyhow::anyhow!("the node has no shard"),
    }
}

/// What a local node listens on, and the ports picked.
struct Bound<L> {
    broker: L,
    port: u16,
    /// The embedded name server's, unless the node registers with external ones.
    namesrv: Option<L>,
    namesrv_port: Option<u16>,
    /// A master's HA port's; a slave has none.
    ha: Option<L>,
    ha_port: Option<u16>,
}

/// Binds the node's listeners through `transport`, as the real node does: the embedded
/// name server only when `embedded_namesrv` (no `namesrvAddr`), the HA port only on a
/// master.
async fn bind_all<T: Transport>(
    config: &NodeConfig,
    transport: &T,
    embedded_namesrv: bool,
) -> anyhow::Result<Bound<T::Listener>> {
    let bind = |port| SocketAddr::new(config.bind_address, port);
    let broker = transport.bind(bind(config.listen_port)).await?;
    let namesrv = match embedded_namesrv {
        true => Some(transport.bind(bind(config.namesrv_port)).await?),
        false => None,
    };
    let ha = match config.broker_role {
        BrokerRole::Slave => None,
        _ => Some(transport.bind(bind(ha_port(config))).await?),
    };
    let port_of = |listener: &Option<T::Listener>| -> std::io::Result<Option<u16>> {
        Ok(listener
            .as_ref()
            .map(Listener::local_addr)
            .transpose()?
            .map(|a| a.port()))
    };
    Ok(Bound {
        port: broker.local_addr()?.port(),
        namesrv_port: port_of(&namesrv)?,
        ha_port: port_of(&ha)?,
        broker,
        namesrv,
        ha,
    })
}

/// The error of a shard that ended before it served.
fn ended(result: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Error {
    match result {
        Ok(Ok(())) => anyhow::anyhow!("the shard stopped before it was ready"),
        Ok(Err(error)) => error,
        Err(error) => anyhow::anyhow!("a shard panicked while starting: {error}"),
    }
}
