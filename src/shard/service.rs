//! The shard service seam: how a feature engine (delay levels, timers, POP, consumer-aware
//! retention, and next replication and transactions) joins a shard without the shard's
//! start growing a hand-wired step per feature.
//!
//! A shard opens its store and its broker, then opens every engine of its list in order
//! (`node::shard`'s `SERVICES`). Opening is the engine's own function: it opens what it
//! keeps (its files, its state), adds the retention holds it needs to the store and hands
//! the broker what requests reach it through. It returns a [`ShardService`]: the tasks it
//! runs for the shard's life, and what it does at a clean stop. Its metrics are its own
//! section of the node's metrics ([`crate::metrics::sections`]).
//!
//! Invariants the shard keeps for every engine:
//! - engines open before the shard serves or runs its store's first retention pass, so
//!   a hold an engine adds counts from the start (nothing it needs is deleted first);
//! - an engine that fails to open fails the shard's start, naming the shard and the
//!   engine;
//! - every task runs under the store's watch: a panic poisons the store (D11);
//! - at a clean stop the connections end first, then every task is aborted, then the
//!   engines stop in the reverse of their opening order, then the store shuts down: an
//!   engine's stop sees no request and no task of its own still running.

use std::future::Future;
use std::pin::Pin;

/// A future a shard runs on its own thread.
pub type LocalFuture<T> = Pin<Box<dyn Future<Output = T>>>;

/// One long-running task of an engine, and the name a panic of it is reported under.
pub struct ShardTask {
    pub name: &'static str,
    pub future: LocalFuture<()>,
}

impl ShardTask {
    pub fn new(name: &'static str, future: impl Future<Output = ()> + 'static) -> ShardTask {
        ShardTask {
            name,
            future: Box::pin(future),
        }
    }
}

/// A feature engine as one shard runs it (see the module doc for the order of things).
pub trait ShardService {
    /// The engine's name, as errors and logs say it.
    fn name(&self) -> &'static str;

    /// The tasks to run until the shard stops. Called once, after every engine opened.
    fn tasks(&self) -> Vec<ShardTask> {
        Vec::new()
    }

    /// The tasks to run instead of [`ShardService::tasks`] on a slave's shard, whose log
    /// only copies its master's: what keeps the engine's state following that log.
    fn replica_tasks(&self) -> Vec<ShardTask> {
        Vec::new()
    }

    /// Called once at a clean stop, after the connections and every task stopped and
    /// before the store shuts down: write what must survive a restart. Failures are the
    /// engine's to log (the shard stops anyway).
    fn stop(&self) -> LocalFuture<()> {
        Box::pin(async {})
    }
}
