//! The standalone name server process (`ringmq namesrv -c namesrv.conf`): one thread, a
//! current-thread tokio runtime with a `LocalSet`, listening through the network seam on
//! the one port its config names (no metrics or other port, so several run side by side
//! on one host), serving every connection with one [`Standalone`] handler, and scanning
//! for expired brokers every `scanNotActiveBrokerInterval`. SIGTERM or SIGINT stops it:
//! the listener closes, every connection sees the stop, and [`run`] returns.
//!
//! Connections are bounded as the node's are ([`accept_loop`]: `maxConnections`,
//! `maxPartialFrameBytes`), with the per-connection limits of [`connection_limits`].

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::net::{Listener, Transport};
use crate::server::accept::{accept_loop, run_until_signalled, AcceptLimits, OneThreadError};
use crate::server::connection::{self, ConnectionLimits};

use super::config::NamesrvConfig;
use super::handler::Standalone;

/// Requests read and not yet answered on one connection before it stops reading: a
/// broker or client sends a few at a time; the node's default.
const MAX_REQUESTS_IN_FLIGHT_PER_CONNECTION: usize = 1024;
/// Bytes held for one connection before it stops reading (the node's default).
const MAX_QUEUED_RESPONSE_BYTES_PER_CONNECTION: usize = 4 * 1024 * 1024;
/// All connections together: the node's defaults for one shard.
const MAX_REQUESTS_IN_FLIGHT: usize = 131_072;
const MAX_QUEUED_RESPONSE_BYTES: usize = 1024 * 1024 * 1024;
/// How long a frame still arriving may go without 64 KiB more (the node's default).
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the name server could not run.
#[derive(Debug, thiserror::Error)]
pub enum StandaloneError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] OneThreadError),
}

/// The limits of one connection.
pub fn connection_limits(config: &NamesrvConfig) -> ConnectionLimits {
    ConnectionLimits {
        max_frame_len: config.max_frame_size,
        read_buffer: connection::READ_BUFFER,
        body_send: Default::default(),
        max_requests_in_flight: MAX_REQUESTS_IN_FLIGHT_PER_CONNECTION,
        // No request parks here.
        max_parked_requests: 1,
        max_queued_response_bytes: MAX_QUEUED_RESPONSE_BYTES_PER_CONNECTION,
        shard_max_requests_in_flight: MAX_REQUESTS_IN_FLIGHT,
        shard_max_queued_response_bytes: MAX_QUEUED_RESPONSE_BYTES,
        frame_timeout: FRAME_TIMEOUT,
        idle_timeout: config.server_channel_max_idle_time,
        warn_burst: connection::WARN_BURST,
        warn_interval: connection::WARN_INTERVAL,
        socket_send_buffer: 0,
    }
}

/// Serves on `transport` until `stop` turns true; `ready` gets the bound address once
/// the listener is open. Runs inside a `LocalSet`.
pub async fn serve<T: Transport>(
    transport: &T,
    config: &NamesrvConfig,
    clock: Clock,
    stop: watch::Receiver<bool>,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), StandaloneError> {
    let addr = SocketAddr::new(config.bind_address, config.listen_port);
    let listener = transport
        .bind(addr)
        .await
        .map_err(|source| StandaloneError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StandaloneError::Bind { addr, source })?;
    let handler = Rc::new(Standalone::new(
        config.registry_limits(),
        clock,
        config.properties_text(),
    ));
    let scan = tokio::task::spawn_local(scan_loop(
        handler.clone(),
        config.scan_not_active_broker_interval,
        stop.clone(),
    ));
    ready(bound);
    let bounds = AcceptLimits {
        max_connections: config.max_connections,
        max_partial_frame_bytes: config.max_partial_frame_bytes,
    };
    accept_loop(
        listener,
        handler,
        connection_limits(config),
        bounds,
        stop.clone(),
    )
    .await;
    scan.abort();
    // Let every connection see the stop before the runtime goes.
    tokio::task::yield_now().await;
    Ok(())
}

/// Unregisters expired brokers every `interval` until `stop`.
async fn scan_loop(handler: Rc<Standalone>, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                handler.expire();
            }
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
}

/// The process: serves over TCP on one thread until SIGTERM or SIGINT; `ready` gets the
/// bound address (the caller prints its start line).
pub fn run(config: &NamesrvConfig, ready: impl FnOnce(SocketAddr)) -> Result<(), StandaloneError> {
    run_until_signalled(|stop| serve(&crate::net::tcp::Tcp, config, Clock::system(), stop, ready))
        .map_err(StandaloneError::Runtime)?
}
