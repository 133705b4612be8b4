//! The network node: N shard threads (D3), each pinned to a CPU and running a
//! tokio current-thread runtime with a `LocalSet`; each owns its `SO_REUSEPORT` listener on
//! the broker port, the connections the kernel gives it, its own store in
//! `<dir>/shard-<n>` and its own broker (see [`crate::shard`] for ownership and the
//! mailboxes between shards). Shard 0 also serves the embedded name server and runs the
//! node-wide housekeeping (client expiry, the periodic consumer-offset write).
//!
//! [`start`] is the one entry, and a validated `NodeConfig` the one thing it starts
//! from: `ringmq serve` builds that from broker.conf, TOML and flags, and the integration
//! tests build it too (`tests/common`, with port 0), so a test node runs with settings a
//! user could write and the start refuses what `ringmq serve` would. It validates the
//! config, binds every listener first (so a taken port fails the start before
//! any store opens), checks that the store root was made for this shard count, loads the
//! node-wide tables (`config/topics.json`, `config/consumerOffset.json`,
//! `config/delayOffset.json`, `config/subscriptionGroup.json`; a corrupt one stops the
//! start naming the file), then starts the shards and returns once every one serves, with
//! the bound addresses and a [`NodeHandle`]. Each shard opens the feature engines of its
//! service table (consumer-aware retention, delay levels, timers, POP; see
//! [`crate::shard::service`]) before the store's first retention run. If one shard fails to
//! start, the others are stopped cleanly and the start fails with that shard's error.
//!
//! Files: `start.rs` (the start's steps), `shard.rs` (one shard's life over any listener
//! of the network seam, and the service table), `local.rs` ([`local::LocalNode`]: one
//! shard on the calling thread over any transport, for the simulated-network tests), this
//! file ([`NodeHandle`], the final table writes).
//!
//! Every listener's accept loop (broker and name server, all shards) admits connections
//! through one node-wide `Admission` (`server::admission`): at most `max_connections` open, and at most
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

use tokio::sync::{oneshot, watch};

use crate::broker::NodeTables;
use crate::metrics::http::MetricsServer;
use crate::metrics::NodeMetrics;

mod assignment;
pub mod controller_mode;
pub mod local;
mod metadata_sync;
mod registration;
mod replication;
mod replication_sampler;
mod shard;
mod start;
mod timer_sync;

pub use assignment::{Assignment, RoleAssignment};
pub use start::{bind_listener, start, start_assigned, LISTEN_BACKLOG};

/// A running node. Dropping it stops the node too (and waits for it).
pub struct NodeHandle {
    addr: SocketAddr,
    namesrv_addr: SocketAddr,
    /// What the broker and name-server listeners are bound to (the bind address, often
    /// the wildcard), as against what clients are told (`addr`, `namesrv_addr`).
    bound: SocketAddr,
    /// `None` when the node registers with external name servers instead.
    namesrv_bound: Option<SocketAddr>,
    name_servers: Vec<SocketAddr>,
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

    /// The name server clients of this node ask for routes: the embedded one (the broker
    /// IP and its bound port), else the first of `namesrvAddr`.
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

    /// The address the embedded name server's listener is bound to, if it runs.
    pub fn namesrv_bound_addr(&self) -> Option<SocketAddr> {
        self.namesrv_bound
    }

    /// The external name servers the node registers with (`namesrvAddr`), resolved.
    pub fn name_servers(&self) -> &[SocketAddr] {
        &self.name_servers
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

    /// How many shards serve their connections on an io_uring network ring
    /// (`network_io`); the rest use epoll.
    pub fn network_ring_shards(&self) -> usize {
        self.metrics
            .shards()
            .iter()
            .filter(|shard| {
                shard
                    .network_ring
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .count()
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
            result = result.and(write_tables(&tables));
        }
        result
    }
}

/// The last write of the node-wide tables, once every shard stopped: the committed
/// consumer offsets, the subscription groups and the delay cursors (after the connections
/// and the schedulers, so no commit or delivery arrives after it).
/// Each is tried whatever became of the others; the error is the first one's.
fn write_tables(tables: &NodeTables) -> anyhow::Result<()> {
    let offsets = tables
        .consumer_offsets
        .persist()
        .map_err(anyhow::Error::from);
    let groups = &tables.subscription_groups;
    let groups_written = groups
        .flush()
        .map(|_| ())
        .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", groups.path().display()));
    let delay = tables.delay_offsets.persist().map_err(anyhow::Error::from);
    offsets.and(groups_written).and(delay)
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        if let Err(error) = self.stop_and_join() {
            tracing::error!("node stopped with an error: {error:#}");
        }
    }
}
