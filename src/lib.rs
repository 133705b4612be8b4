//! ringmq: a RocketMQ-compatible message storage node.
//!
//! `D1` ... `D18` in the docs of this crate are the decisions recorded in
//! `docs/architecture.md`; `reference §N` is a section of `docs/rocketmq-reference.md`.
//!
//! The crate is laid out along the path a message takes:
//!
//! - [`io`]: the disk I/O seam with its `uring`, `portable` and `sim` backends (D5).
//! - [`net`]: the network seam, real TCP and a seeded simulated network; every
//!   connection of the node and the client goes through it.
//! - [`store`]: one shard's embedded store: record codec, CommitLog, ConsumeQueues,
//!   flush, checkpoint, recovery and offline inspection (D2 to D11).
//! - [`remoting`]: the wire codec, pure (no I/O).
//! - [`server`]: serving connections: [`server::connection`] serves one connection (of
//!   any transport) on its shard. A pull's records travel as file ranges
//!   ([`io::file_body`], read by [`store::read`]) that the connection writer sends
//!   straight from the CommitLog files ([`server::body_send`], D8); every connection's
//!   bytes are counted in [`server::traffic`].
//! - [`broker`]: what each request means: send, pull (with long polling), offset queries.
//! - [`shard`]: what a shard is, which queues it owns, its mailboxes, and the shard service
//!   seam ([`shard::service`]) through which each feature engine joins a shard.
//! - [`node`]: the running node (`ringmq serve`): its start, one shard's life, and a
//!   one-shard node on the calling thread over any transport ([`node::local`]); the
//!   [`banner`] it prints; [`client`]: the in-project client.
//! - [`tools`]: programs built on the library, which nothing in the library imports:
//!   [`tools::admin`] (`ringmq admin`, mqadmin's everyday commands against a running node)
//!   and [`tools::bench`] (the load generators: `ringmq bench`, `bench produce|consume`,
//!   `bench store`). The floors every module keeps, and the check that holds them, are in
//!   `tests/alone/module_layering.rs`.
//! - [`controller`]: the failover controller (`ringmq controller`, D18): each broker
//!   group's master, epochs and SyncStateSet, decided over Raft (openraft).
//! - [`config`] and [`clock`]: validated store settings, and the one clock tests control;
//!   [`properties`]: Java properties syntax, as RocketMQ's config files use it, and
//!   [`key_table`]: the key tables of the standalone processes' files.
//! - [`node_config`]: the node's settings (one key table; TOML, RocketMQ `broker.conf`,
//!   overrides) and the per-shard store, broker and connection settings derived from
//!   them (D13).
//!
//! Everything in a store belongs to one thread (thread-per-core, D3): handles are `Rc`,
//! futures are not `Send`, and a store runs inside a tokio current-thread `LocalSet`.

pub mod banner;
pub mod broker;
pub mod client;
pub mod clock;
pub mod config;
pub mod controller;
pub mod io;
pub mod key_table;
pub mod metrics;
pub mod namesrv;
pub mod net;
pub mod node;
pub mod node_config;
pub mod properties;
pub mod quiet_pipe;
pub mod remoting;
pub mod replication;
pub mod rng;
pub mod server;
pub mod shard;
pub mod store;
pub mod sync;
pub mod tools;
pub mod typo;
