//! The controller's replicated group state and the rules around it (issue 31, reference-2
//! §6): pure, no I/O, no clock, no Raft.
//!
//! - [`state`]: per broker group, its brokers, master, epochs and SyncStateSet, with their
//!   invariants;
//! - [`commands`]: the commands committed through the Raft log and their responses, and
//!   [`crate::controller::replicated::ReplicatedState`] for [`state::ReplicasInfo`];
//! - [`apply`]: what each command does, checked again at apply time against the state as
//!   it is then; `fencing`: those checks for elections and SyncStateSet changes;
//! - [`election`]: the election policy, which turns liveness facts into the command to
//!   propose;
//! - [`liveness`]: the leader's heartbeat table (not replicated, clock injected);
//! - [`headers`], [`responses`] and [`bodies`]: the controller's remoting requests,
//!   responses and JSON bodies.
//!
//! How a request flows on the leader: parse its header ([`headers`]), check what needs
//! liveness (is the broker alive, who can be elected: [`election`], [`liveness`]), turn it
//! into a [`commands::Command`], propose it; every node applies the committed command
//! ([`apply`]), which checks again what the state alone can decide (epochs, membership),
//! and the leader answers from the [`commands::Response`].

pub mod apply;
pub mod bodies;
pub mod broker_calls;
pub mod commands;
pub mod election;
mod fencing;
pub mod headers;
pub mod liveness;
pub mod responses;
pub mod state;

#[cfg(test)]
#[path = "property_tests.rs"]
mod property_tests;
