//! The failover controller (issue 31, D18): a small replicated service that decides, per
//! broker group, which broker is master, under which epoch, and which replicas are in sync.
//!
//! It is RocketMQ 5's controller mode (reference-2 §6) on an existing Raft library
//! (`openraft`, pinned exactly, reference-2 §7), in three layers:
//!
//! - [`replicated`]: the one seam between the two below: a deterministic state that applies
//!   committed commands (bytes) and snapshots itself. Nothing above it knows about Raft;
//!   nothing in the Raft adapter knows what a broker is.
//! - `replicas`: the controller's state per broker group (ids, addresses, master and its
//!   epoch, SyncStateSet and its epoch), the checks each broker request must pass (fencing
//!   by epoch) and the election rule; pure, no I/O.
//! - `raft`: the adapter that runs openraft over the disk seam ([`crate::io`]) and the
//!   network seam ([`crate::net`]), so the controller runs in the deterministic simulation.
//!
//! Invariants the layers keep together:
//! - every change of a group's state is a command committed through the Raft log; a node's
//!   state is the fold of its applied commands, so replicas that applied the same prefix
//!   hold the same state;
//! - liveness (broker heartbeats) is not replicated: it is the leader's view, measured on
//!   its own clock, and a command carries the decision it led to, never the clock reading.

pub mod config;
pub mod elections;
pub mod metrics;
pub mod node;
pub mod raft;
pub mod replicas;
pub mod replicated;
pub mod standalone;
