//! The accept loop of a one-thread server (the standalone name server, the controller):
//! every connection its listener accepts is admitted against the process-wide bounds
//! ([`Admission`]: open connections, bytes in partial frames) and served by one shared
//! [`RequestHandler`] in a task of its own, until `stop` turns true.
//!
//! The node's shards accept through their own loop (`node::shard`), which also hands
//! connections between shards.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::admission::Admission;
use super::connection::{serve_admitted, ConnectionLimits, RequestHandler};
use super::traffic::Traffic;
use crate::net::Listener;

/// How long an `accept` failure (out of descriptors) pauses accepting.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The process-wide bounds of one server's connections.
#[derive(Clone, Copy, Debug)]
pub struct AcceptLimits {
    pub max_connections: usize,
    pub max_partial_frame_bytes: usize,
}

/// Accepts and serves connections until `stop` turns true; each connection sees the
/// stop too. Runs inside a `LocalSet`.
pub async fn accept_loop<L: Listener, H: RequestHandler>(
    listener: L,
    handler: Rc<H>,
    limits: ConnectionLimits,
    bounds: AcceptLimits,
    mut stop: watch::Receiver<bool>,
) {
    let admission = Admission::new(
        bounds.max_connections,
        bounds.max_partial_frame_bytes,
        limits.warn_interval,
    );
    let traffic = Arc::new(Traffic::new());
    let for_connections = stop.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(admitted) = admission.admit() else {
                        drop(stream);
                        if let Some(report) = admission.refused() {
                            tracing::warn!(
                                %peer,
                                refused = report.refused,
                                max_connections = report.max_connections,
                                "maxConnections are open; refusing connections"
                            );
                        }
                        continue;
                    };
                    tokio::task::spawn_local(serve_admitted(
                        stream,
                        peer,
                        handler.clone(),
                        limits,
                        traffic.clone(),
                        admitted,
                        for_connections.clone(),
                    ));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
}

/// Why a one-thread server's runtime could not run.
#[derive(Debug, thiserror::Error)]
pub enum OneThreadError {
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot watch for SIGTERM and SIGINT: {0}")]
    Signals(std::io::Error),
}

/// Runs `serve` on a current-thread runtime inside a `LocalSet` until it returns; SIGTERM
/// or SIGINT turns the `stop` it is given true (the process's clean stop).
pub fn run_until_signalled<F: std::future::Future>(
    serve: impl FnOnce(watch::Receiver<bool>) -> F,
) -> Result<F::Output, OneThreadError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(OneThreadError::Runtime)?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate()).map_err(OneThreadError::Signals)?;
        let mut interrupt = signal(SignalKind::interrupt()).map_err(OneThreadError::Signals)?;
        let (stop_tx, stop) = watch::channel(false);
        tokio::task::spawn_local(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            let _ = stop_tx.send(true);
        });
        Ok(serve(stop).await)
    })
}
