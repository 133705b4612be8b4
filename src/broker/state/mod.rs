//! The node's shared state that is not persisted: what the shards know about the clients
//! connected right now, and what the shard's background tasks read off the broker.
//!
//! - [`groups`]: the client registry (which client is in which producer and consumer
//!   group, over which connection, until when), filled by heartbeats.
//! - [`queue_locks`]: the orderly-consumption queue locks.
//! - [`notify`]: every open client connection by peer ([`notify::Links`]) and the requests
//!   the node sends clients (NOTIFY_CONSUMER_IDS_CHANGED); [`client_calls`]: calls to a
//!   client that wait for its answer.
//! - [`live_settings`]: the node's settings as the admin requests read and change them.
//! - [`protected_groups`]: the retention holds of `retentionProtectedGroups`, registered on
//!   the shard's store.
//! - [`stats_sampler`]: what the metrics sampler reads off the broker, and the per-pull and
//!   per-pop counts it derives rates from.
//!
//! What this folder owns: these values and their invariants (each states its own), kept in
//! memory only: clients re-register and re-lock within seconds of a restart.
//!
//! May import: [`super::Broker`] (the tasks and hooks that read a shard's broker),
//! [`super::naming`], [`super::tables`], and the heartbeat body's types from
//! [`super::requests::consumers`] (the registry stores what a heartbeat said; the one
//! arrow into a request folder). Not [`super::admin`].

pub mod client_calls;
pub mod groups;
pub mod live_settings;
pub mod notify;
pub mod protected_groups;
pub mod queue_locks;
pub mod stats_sampler;
