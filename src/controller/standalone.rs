//! The controller process (`ringmq controller -c controller.conf`): one thread, a
//! current-thread tokio runtime with a `LocalSet`, serving on the one address its entry of
//! `controllerDLegerPeers` names (brokers' requests and its peers' Raft RPCs alike; no other
//! port, so three run on one host), with its Raft vote, log and snapshot under
//! `controllerStorePath` through the disk seam. SIGTERM or SIGINT stops it: the listener
//! closes, connections see the stop, Raft stops, and [`run`] returns.
//!
//! Invariant: a store directory holding anything but this controller's own files is
//! refused at start (a DLedger controller's directory, a broker's store): its files would
//! be neither read nor kept, and a controller starting empty beside peers that remember
//! the group must not look like a fresh one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::watch;

use super::config::ControllerConfig;
use super::elections::{scan_loop, Connector};
use super::node::ControllerNode;
use super::raft::{ControllerRaft, RaftSettings};
use super::replicas::liveness::LivenessLimits;
use super::replicas::state::ReplicasInfo;
use crate::clock::Clock;
use crate::io::{open_backend, DataWrites, Disk, IoChoice};
use crate::metrics::http::MetricsServer;
use crate::net::{Listener, Transport};
use crate::remoting::DEFAULT_MAX_FRAME_LEN;
use crate::server::accept::{accept_loop, run_until_signalled, AcceptLimits, OneThreadError};
use crate::server::connection::{self, ConnectionLimits};

/// The entries a controller's store directory may hold: the Raft adapter's.
const OWN_ENTRIES: &[&str] = &["log", "snapshot"];
/// Connections: brokers (one or two each), admin tools and the peers.
const MAX_CONNECTIONS: usize = 4096;
const MAX_PARTIAL_FRAME_BYTES: usize = 64 * 1024 * 1024;
/// Requests read and not yet answered on one connection before it stops reading.
const MAX_REQUESTS_IN_FLIGHT_PER_CONNECTION: usize = 256;
const MAX_QUEUED_RESPONSE_BYTES_PER_CONNECTION: usize = 16 * 1024 * 1024;
const MAX_REQUESTS_IN_FLIGHT: usize = 65_536;
const MAX_QUEUED_RESPONSE_BYTES: usize = 256 * 1024 * 1024;
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("controllerStorePath {path}: {why}")]
    Store { path: String, why: String },
    #[error("the controller's Raft does not start: {0}")]
    Raft(std::io::Error),
    #[error(transparent)]
    Runtime(#[from] OneThreadError),
}

/// The limits of one connection.
pub fn connection_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_frame_len: DEFAULT_MAX_FRAME_LEN,
        read_buffer: connection::READ_BUFFER,
        body_send: Default::default(),
        max_requests_in_flight: MAX_REQUESTS_IN_FLIGHT_PER_CONNECTION,
        max_parked_requests: 1,
        max_queued_response_bytes: MAX_QUEUED_RESPONSE_BYTES_PER_CONNECTION,
        shard_max_requests_in_flight: MAX_REQUESTS_IN_FLIGHT,
        shard_max_queued_response_bytes: MAX_QUEUED_RESPONSE_BYTES,
        frame_timeout: FRAME_TIMEOUT,
        idle_timeout: IDLE_TIMEOUT,
        warn_burst: connection::WARN_BURST,
        warn_interval: connection::WARN_INTERVAL,
        socket_send_buffer: 0,
    }
}

/// Refuses a store directory that holds anything but the controller's own files.
pub fn check_store_dir(disk: &dyn Disk, dir: &Path) -> Result<(), ControllerError> {
    let refuse = |why: String| ControllerError::Store {
        path: dir.display().to_string(),
        why,
    };
    disk.create_dir_all(dir)
        .map_err(|e| refuse(format!("cannot be created: {e}")))?;
    let entries = disk
        .list_dir(dir)
        .map_err(|e| refuse(format!("cannot be listed: {e}")))?;
    let foreign: Vec<&String> = entries
        .iter()
        .filter(|name| !OWN_ENTRIES.contains(&name.as_str()))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    Err(refuse(format!(
        "holds {foreign:?}, which are not a ringmq controller's files (a DLedger \
         controller's directory?); give the controller a directory of its own"
    )))
}

/// The peers as Raft sees them: node id (the index in `controllerDLegerPeers`) to address.
pub fn raft_peers(config: &ControllerConfig) -> BTreeMap<u64, SocketAddr> {
    (0u64..)
        .zip(config.peers.iter())
        .map(|(id, peer)| (id, peer.addr))
        .collect()
}

/// Serves on `transport` until `stop` turns true; `ready` gets the node once it listens
/// and its Raft started. Runs inside a `LocalSet`.
pub async fn serve<T: Transport>(
    transport: &T,
    config: &ControllerConfig,
    disk: Rc<dyn Disk>,
    settings: RaftSettings,
    clock: Clock,
    stop: watch::Receiver<bool>,
    ready: impl FnOnce(&Rc<ControllerNode>, SocketAddr),
) -> Result<(), ControllerError> {
    check_store_dir(disk.as_ref(), &config.store_path)?;
    let addr = config.self_peer().addr;
    let listener = transport
        .bind(addr)
        .await
        .map_err(|source| ControllerError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ControllerError::Bind { addr, source })?;
    let id = config.node_id(&config.self_id).expect("load() checks it");
    let node = Rc::new(start_node(transport, config, disk, settings, clock, id).await?);
    // Raft RPCs from the peers arrive on this listener: serve before anything waits on them.
    let serving = tokio::task::spawn_local(accept_loop(
        listener,
        node.clone(),
        connection_limits(),
        AcceptLimits {
            max_connections: MAX_CONNECTIONS,
            max_partial_frame_bytes: MAX_PARTIAL_FRAME_BYTES,
        },
        stop.clone(),
    ));
    let scan = tokio::task::spawn_local(scan_loop(
        node.clone(),
        config.scan_not_active_broker_interval,
        stop.clone(),
    ));
    ready(&node, bound);
    let _ = serving.await;
    scan.abort();
    if let Err(error) = node.raft().shutdown().await {
        tracing::warn!(%error, "the controller's Raft did not stop cleanly");
    }
    tokio::task::yield_now().await;
    Ok(())
}

async fn start_node<T: Transport>(
    transport: &T,
    config: &ControllerConfig,
    disk: Rc<dyn Disk>,
    settings: RaftSettings,
    clock: Clock,
    id: u64,
) -> Result<ControllerNode, ControllerError> {
    let raft = ControllerRaft::start(
        id,
        raft_peers(config),
        &config.store_path,
        disk,
        transport.clone(),
        ReplicasInfo::default(),
        settings,
    )
    .await
    .map_err(ControllerError::Raft)?;
    let connector: Rc<dyn Connector> = Rc::new(transport.clone());
    Ok(ControllerNode::new(
        raft,
        config.clone(),
        clock,
        LivenessLimits::default(),
        Some(connector),
    ))
}

/// The process: serves over TCP on one thread until SIGTERM or SIGINT; `ready` gets the
/// bound address (the caller prints its start line).
pub fn run(
    config: &ControllerConfig,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ControllerError> {
    run_until_signalled(|stop| async move {
        // Opened on this thread's runtime: a disk backend's completions are on its reactor.
        // Every write of the controller is followed by a sync (Raft's contract).
        let disk = open_backend(IoChoice::Auto, DataWrites::Pwrite).map_err(|e| {
            ControllerError::Store {
                path: config.store_path.display().to_string(),
                why: format!("no disk backend: {e}"),
            }
        })?;
        let transport = crate::net::tcp::Tcp;
        let settings = RaftSettings::default();
        let clock = Clock::system();
        // Bound before the Raft starts, so a taken port stops the start with its address.
        let metrics_listener = match config.metrics_endpoint {
            Some(addr) => Some(
                std::net::TcpListener::bind(addr)
                    .map_err(|source| ControllerError::Bind { addr, source })?,
            ),
            None => None,
        };
        let mut endpoint = None;
        let served = serve(
            &transport,
            config,
            disk,
            settings,
            clock,
            stop,
            |node, addr| {
                if let Some(listener) = metrics_listener {
                    match MetricsServer::start(listener, node.metrics.clone()) {
                        Ok(server) => {
                            tracing::info!(addr = %server.addr(), "controller metrics endpoint serving");
                            endpoint = Some(server);
                        }
                        Err(error) => {
                            tracing::error!(%error, "the controller's metrics endpoint does not start")
                        }
                    }
                }
                ready(addr);
            },
        )
        .await;
        drop(endpoint);
        served
    })
    .map_err(ControllerError::Runtime)?
}
