//! The node's persisted tables: one value in memory that every shard reads, and its whole
//! file under `<root>/config/`, each a [`persisted_table::PersistedTable`] written (temp
//! file, fsync, rename, directory fsync) on tokio's blocking pool, never on a shard's
//! reactor.
//!
//! - [`topics`]: which topics exist and their queues (`topics.json`).
//! - [`subscription_groups`]: the consumer groups' settings (`subscriptionGroup.json`).
//! - [`consumer_offsets`]: committed consumer offsets (`consumerOffset.json`).
//! - [`request_modes`]: which groups pop rather than pull (`messageRequestMode.json`).
//! - [`mirror`]: a slave's copies of its master's tables, and the offsets committed on it.
//! - [`persisted_table`]: the one type behind them (and behind the delay cursors and the
//!   POP replay mark, which live with their engines).
//!
//! What this folder owns: each table's value, its invariants, its file format (RocketMQ's
//! shapes) and its load checks (a file the requests would refuse stops the start, naming
//! the file and the entry). Tables whose callers may see a change before it is durable
//! (offsets, groups) change in memory first and are written by the next periodic or queued
//! write; the others (topics, request modes) change file first.
//!
//! May import: [`super::naming`] (the name rules the tables keep), `crate::io` (the disk
//! seam), and [`super::pop::wire`] for the request-mode body type it stores. Not
//! [`super::Broker`] nor any request folder: a table knows nothing of who asks.

pub mod consumer_offsets;
pub mod mirror;
pub mod persisted_table;
pub mod request_modes;
pub mod subscription_groups;
pub mod topics;
