//! What the supervisor runs in each role, behind one seam: the real node ([`NodeRuns`],
//! threads and stores, what `ringmq serve` runs) or a test's stand-in (the deterministic
//! failover simulation runs a model of the log in simulated time).
//!
//! The supervisor needs four things of a run: to start it in a role, to stop it cleanly,
//! each shard's replication figures (which slaves caught up, for the SyncStateSet), and
//! a signal when the run ended on its own.

use std::future::Future;

use crate::metrics::ReplicationFigures;
use crate::node::{Assignment, NodeHandle};
use crate::node_config::NodeConfig;

/// Starts and stops the runs of one broker.
pub trait Runs {
    type Run;

    /// Starts a run from `config` in the role `assignment` carries; returns once it serves.
    fn start(
        &self,
        config: NodeConfig,
        assignment: Assignment,
    ) -> impl Future<Output = anyhow::Result<Self::Run>>;

    /// Stops `run` cleanly.
    fn stop(&self, run: Self::Run) -> impl Future<Output = anyhow::Result<()>>;

    /// Each shard's replication figures now, in shard order.
    fn figures(&self, run: &Self::Run) -> Vec<ReplicationFigures>;

    /// Resolves when `run` ends on its own; never for a run that cannot. Called once per
    /// run.
    fn exited(&self, run: &mut Self::Run) -> impl Future<Output = ()> + 'static;
}

/// The real node: each run a [`NodeHandle`] on threads of its own, started and stopped off
/// the async thread (a start opens stores, a stop flushes and writes tables).
pub struct NodeRuns;

impl Runs for NodeRuns {
    type Run = NodeHandle;

    async fn start(
        &self,
        config: NodeConfig,
        assignment: Assignment,
    ) -> anyhow::Result<NodeHandle> {
        tokio::task::spawn_blocking(move || crate::node::start_assigned(config, Some(assignment)))
            .await
            .map_err(|error| anyhow::anyhow!("the run's start panicked: {error}"))?
    }

    async fn stop(&self, run: NodeHandle) -> anyhow::Result<()> {
        tokio::task::spawn_blocking(move || run.shutdown())
            .await
            .map_err(|error| anyhow::anyhow!("the run's stop panicked: {error}"))?
    }

    fn figures(&self, run: &NodeHandle) -> Vec<ReplicationFigures> {
        run.metrics()
            .shards()
            .iter()
            .map(|shard| shard.replication())
            .collect()
    }

    fn exited(&self, run: &mut NodeHandle) -> impl Future<Output = ()> + 'static {
        let exited = run.take_exit_signal();
        async move {
            match exited {
                Some(exited) => {
                    let _ = exited.await;
                }
                None => std::future::pending().await,
            }
        }
    }
}
