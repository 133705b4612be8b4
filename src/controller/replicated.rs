//! The seam between the Raft adapter and what it replicates: a state that applies
//! committed commands and can be saved and restored whole.
//!
//! Invariants an implementation keeps:
//! - [`ReplicatedState::apply`] is deterministic: the same state and command give the same
//!   new state and response on every node (no clock, no randomness, no I/O);
//! - a command is applied at most once per log index; the adapter guarantees the order;
//! - [`ReplicatedState::restore`] of [`ReplicatedState::snapshot`] gives back an equal
//!   state, and a snapshot that does not decode is refused, never half applied.

use std::io;

/// A deterministic state machine replicated by the controller's Raft group.
pub trait ReplicatedState: 'static {
    /// Applies one committed command (its encoded bytes) and returns the encoded response
    /// for the proposer. A command that does not decode or does not apply is answered with
    /// an error response, still deterministically: it was committed and every node sees it.
    fn apply(&mut self, command: &[u8]) -> Vec<u8>;

    /// The whole state, encoded.
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the state with a decoded snapshot; on an error the state is unchanged.
    fn restore(&mut self, snapshot: &[u8]) -> io::Result<()>;
}
