//! The Raft adapter: openraft running over the disk seam ([`crate::io`]) and the network
//! seam ([`crate::net`]), replicating any [`ReplicatedState`]. Nothing here knows what the
//! state means.
//!
//! - [`types`]: the openraft type configuration (ids `u64`, nodes their `SocketAddr`,
//!   commands and responses bytes, a seeded runtime);
//! - [`log_store`] over [`log_files`] and [`slots`]: the log, vote and commit point;
//! - [`state_machine`] over [`snapshot_files`]: applying entries and the last snapshot;
//! - [`rpc`] (codes, server side) and [`network`] (client side): Raft's RPCs as remoting
//!   frames on the controller's one port;
//! - [`settings`]: timing and log bounds.
//!
//! Invariants of [`ControllerRaft`]:
//! - a group is initialized once, by its lowest id, and only from storage that never
//!   held a vote, an entry or a snapshot: a node that restarts never initializes again,
//!   and starts only with the members its storage holds;
//! - every call into openraft runs inside the seeded runtime's scope, so a simulation
//!   with the same seeds replays the same elections;
//! - a proposal answered `Ok` was committed by a quorum and applied here.

pub mod log_files;
pub mod log_store;
pub mod network;
pub mod rpc;
pub mod settings;
pub mod slots;
pub mod snapshot_files;
pub mod state_machine;
pub mod types;

#[cfg(test)]
mod log_store_tests;
#[cfg(test)]
mod sim_tests;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::errors::ClientWriteError;
use openraft::ServerState;

use crate::controller::replicated::ReplicatedState;
use crate::io::Disk;
use crate::net::Transport;
use crate::remoting::RemotingCommand;
use crate::rng::SplitMix64;

pub use rpc::{is_raft_rpc, RaftHandle};
pub use settings::RaftSettings;
use state_machine::{Applied, StateMachine};
use types::SeededRuntime;

/// Why a proposal was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This node is not the leader; the leader it knows of, if any. Nothing was appended.
    #[error("not the controller leader (leader: {leader:?})")]
    NotLeader { leader: Option<(u64, SocketAddr)> },
    /// The outcome is unknown: the proposal may still commit (a leader change discarded
    /// it here, or it did not commit in time).
    #[error("proposal outcome unknown: {0}")]
    Unknown(String),
    /// Raft refused or stopped.
    #[error("raft failed: {0}")]
    Failed(String),
}

/// One controller node's Raft.
pub struct ControllerRaft<S: ReplicatedState> {
    id: u64,
    peers: BTreeMap<u64, SocketAddr>,
    raft: RaftHandle<S>,
    applied: Rc<RefCell<Applied<S>>>,
    settings: RaftSettings,
    /// Seeds for the runtime scope of each call into openraft.
    seeds: RefCell<SplitMix64>,
}

/// How long a restarted node waits for openraft to report what its storage holds before
/// comparing the stored group with the configured peers.
const STORAGE_REPORT_WAIT: Duration = Duration::from_secs(1);

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

impl<S: ReplicatedState> ControllerRaft<S> {
    /// Starts node `id` of the group `peers` (every voter's id and controller address),
    /// storing in `dir` through `disk`, reaching peers through `transport`, replicating
    /// `state` (restored from the last snapshot here, if any). A fresh group is
    /// initialized by its lowest id. Serving the Raft RPCs ([`ControllerRaft::handle_rpc`])
    /// on the node's address is the caller's. Must run inside a `LocalSet`.
    #[allow(clippy::too_many_arguments)]
    pub async fn start<T: Transport>(
        id: u64,
        peers: BTreeMap<u64, SocketAddr>,
        dir: &Path,
        disk: Rc<dyn Disk>,
        transport: T,
        state: S,
        settings: RaftSettings,
    ) -> io::Result<ControllerRaft<S>> {
        if !peers.contains_key(&id) {
            return Err(invalid(format!(
                "node {id} is not among the peers {peers:?}"
            )));
        }
        let config = Arc::new(settings.openraft_config().map_err(invalid)?);
        let log = log_store::LogStore::open(disk.clone(), &dir.join("log"))?;
        let machine = StateMachine::open(disk, &dir.join("snapshot"), state)?;
        let fresh = log.is_fresh() && !machine.has_snapshot().await;
        let applied = machine.applied();
        let seed = settings.seed.unwrap_or_else(|| types::os_seed(id));
        let mut seeds = SplitMix64::new(seed);
        let network = network::Network::new(transport);
        let raft = SeededRuntime::scope(
            seeds.next_u64(),
            openraft::Raft::new(id, config, network, log, machine),
        )
        .await
        .map_err(|error| io::Error::other(format!("raft node {id} does not start: {error}")))?;
        let node = ControllerRaft {
            id,
            peers,
            raft,
            applied,
            settings,
            seeds: RefCell::new(seeds),
        };
        if !fresh {
            node.check_stored_membership().await?;
        }
        let lowest = *node.peers.keys().next().expect("peers hold this node");
        if fresh && id == lowest {
            let members = node.peers.clone();
            node.scoped(node.raft.initialize(members))
                .await
                .map_err(|error| {
                    io::Error::other(format!("raft node {id} does not initialize: {error}"))
                })?;
        }
        Ok(node)
    }

    /// A restarted node's stored group must be the configured one: ringmq does not change
    /// a controller group's membership, and a node that followed its old members' addresses
    /// while the operator thinks it runs with the new ones would be a silent split. (A node
    /// that stored a vote but no membership entry yet has nothing to compare.)
    async fn check_stored_membership(&self) -> io::Result<()> {
        // The metrics show the storage once the core reported them; a node whose storage
        // holds a vote but no entry reports no log and has no membership to compare.
        let wait = self.raft.wait(Some(STORAGE_REPORT_WAIT));
        let reported = self.scoped(wait.metrics(
            |metrics| metrics.last_log_index.is_some(),
            "the stored log reported",
        ));
        let Ok(metrics) = reported.await else {
            return Ok(());
        };
        let stored: BTreeMap<u64, SocketAddr> = metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(id, addr)| (*id, *addr))
            .collect();
        if stored.is_empty() || stored == self.peers {
            return Ok(());
        }
        // Ids are places in the peer list: the addresses in id order read as the list.
        let listed = |members: &BTreeMap<u64, SocketAddr>| {
            members
                .values()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(";")
        };
        Err(invalid(format!(
            "the controller store holds the group {}, but controllerDLegerPeers names {} \
             (addresses in list order): a controller group's members do not change; start \
             with the peers it was created with, or with an empty controllerStorePath for a \
             new group",
            listed(&stored),
            listed(&self.peers)
        )))
    }

    /// Runs `future` (a call into openraft) inside the seeded runtime's scope.
    async fn scoped<F: Future>(&self, future: F) -> F::Output {
        let seed = self.seeds.borrow_mut().next_u64();
        SeededRuntime::scope(seed, future).await
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The openraft handle, for what this adapter does not wrap (metrics, waits in tests).
    pub fn raft(&self) -> &RaftHandle<S> {
        &self.raft
    }

    /// Commits `command` through the log and returns the state's response to it, once it
    /// is applied here (this node must be the leader).
    pub async fn propose(&self, command: Vec<u8>) -> Result<Vec<u8>, ProposeError> {
        let write = self.scoped(self.raft.client_write(types::Payload(command)));
        let result = match tokio::time::timeout(self.settings.propose_timeout, write).await {
            Ok(result) => result,
            Err(_) => {
                let waited = self.settings.propose_timeout;
                return Err(ProposeError::Unknown(format!(
                    "not applied within {waited:?}"
                )));
            }
        };
        match result {
            Ok(written) => Ok(written.data.0),
            Err(error) => Err(match error.api_error() {
                Some(ClientWriteError::ForwardToLeader(forward)) => ProposeError::NotLeader {
                    leader: forward.leader_id.and_then(|leader| self.peer(leader)),
                },
                Some(ClientWriteError::LogEntryDiscarded(_)) => {
                    ProposeError::Unknown(error.to_string())
                }
                _ => ProposeError::Failed(error.to_string()),
            }),
        }
    }

    fn peer(&self, id: u64) -> Option<(u64, SocketAddr)> {
        self.peers.get(&id).map(|addr| (id, *addr))
    }

    /// The leader this node knows of, and its address.
    pub fn leader(&self) -> Option<(u64, SocketAddr)> {
        let leader = self.raft.metrics().borrow_watched().current_leader;
        leader.and_then(|leader| self.peer(leader))
    }

    /// Whether this node is the leader now (as far as it knows: a deposed leader learns it
    /// from the next higher term it sees).
    pub fn is_leader(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        metrics.state == ServerState::Leader && metrics.current_leader == Some(self.id)
    }

    /// Whether this node leads and a quorum acknowledged it within `bound`: the
    /// acknowledged heartbeat was sent at most `bound` ago, so no other leader could have
    /// been elected before then (a voter of the new leader's quorum acknowledged this one
    /// first). A node alone in its group is its own quorum.
    pub fn leadership_confirmed_within(&self, bound: Duration) -> bool {
        if !self.is_leader() {
            return false;
        }
        let metrics = self.raft.metrics();
        let acked = metrics.borrow_watched().last_quorum_acked;
        self.peers.len() == 1
            || acked.is_some_and(|acked| openraft::Instant::elapsed(&*acked) <= bound)
    }

    /// The term this node leads in, if it leads now: two spells of leadership are told
    /// apart by their terms.
    pub fn leading_term(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let leads = metrics.state == ServerState::Leader && metrics.current_leader == Some(self.id);
        leads.then_some(metrics.current_term)
    }

    /// Reads the local applied state. On the leader it holds every proposal answered `Ok`.
    pub fn with_state<R>(&self, read: impl FnOnce(&S) -> R) -> R {
        read(&self.applied.borrow().state)
    }

    /// The index of the last entry applied here.
    pub fn applied_index(&self) -> Option<u64> {
        self.applied.borrow().last_applied.map(|id| id.index())
    }

    /// Answers a Raft RPC; `request.code` must satisfy [`is_raft_rpc`].
    pub async fn handle_rpc(&self, request: &RemotingCommand) -> RemotingCommand {
        self.scoped(rpc::handle_raft_rpc(&self.raft, request)).await
    }

    /// Stops Raft's tasks. Storage is left as the last completed I/O made it.
    pub async fn shutdown(&self) -> io::Result<()> {
        self.scoped(self.raft.shutdown()).await.map_err(|error| {
            io::Error::other(format!(
                "raft node {} did not stop cleanly: {error}",
                self.id
            ))
        })
    }
}
