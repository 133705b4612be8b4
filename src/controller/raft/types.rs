//! The one openraft type configuration of the controller's Raft group.
//!
//! Node ids are `u64`; a node's `Node` value is the address its controller port listens
//! on (Raft RPCs and brokers' requests share it). Commands and responses are opaque bytes:
//! what they mean is the replicated state's business ([`crate::controller::replicated`]).
//!
//! The async runtime is tokio wrapped in openraft's `DeterministicRng`: every random draw
//! openraft makes (election timeout jitter) comes from a seed held in a task-local, set by
//! [`super::ControllerRaft::start`]. Tests pass a fixed seed, so a seeded simulation
//! replays; production passes a seed drawn from the OS (`std`'s `RandomState` keys), so
//! controllers started together do not draw the same timeouts.

use std::net::SocketAddr;

/// A command or response: opaque bytes (openraft wants its app data `Display`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Payload(pub Vec<u8>);

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

openraft::declare_raft_types!(
    /// The controller group's types.
    pub RaftTypes:
        D = Payload,
        R = Payload,
        NodeId = u64,
        Node = SocketAddr,
        AsyncRuntime = openraft_rt::deterministic_rng::DeterministicRng<openraft::TokioRuntime>,
);

/// openraft's aliases, bound to [`RaftTypes`].
pub type Entry = openraft::type_config::alias::EntryOf<RaftTypes>;
pub type LogId = openraft::type_config::alias::LogIdOf<RaftTypes>;
pub type Vote = openraft::type_config::alias::VoteOf<RaftTypes>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<RaftTypes>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<RaftTypes>;
pub type Snapshot = openraft::type_config::alias::SnapshotOf<RaftTypes, Vec<u8>>;

/// The runtime wrapper whose task-local seed drives openraft's randomness.
pub type SeededRuntime = openraft_rt::deterministic_rng::DeterministicRng<openraft::TokioRuntime>;

/// A seed for a production node: drawn from the OS through `std`'s hasher keys, mixed
/// with the node id so two nodes of one host differ.
pub fn os_seed(id: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(id);
    hasher.finish()
}
