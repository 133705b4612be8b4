//! Per-shard replication, the pure parts (issue 25, item 3): bytes in, bytes and decisions
//! out; no sockets, no runtime, no disk I/O. The node's HA service (a thin I/O layer)
//! reads and writes the sockets and the store and asks these modules what to do.
//!
//! - [`wire`]: the HA stream's messages (reference-2 §6.3 with ringmq's handshake
//!   extension), their encoding and limits; [`decode`]: incremental, bounded decoders for
//!   both directions.
//! - [`epochs`]: one shard store's epoch history and the consistent point of two of them;
//!   [`epoch_file`]: the text of the `epochFileCheckpoint` file that holds that history.
//! - [`master_state`] and [`slave_state`]: one stream's state machine on each side, fed
//!   decoded messages and the store's facts as plain numbers, answering what to send and
//!   what to do to the store. `sim_tests` drives the two against each other through the
//!   codec, with random chunking, disconnects, retention and failovers.
//!
//! ringmq keeps one epoch history (and epoch file) per shard store, and runs one stream per
//! shard: master and slave have the same shard count, and shard i of the slave copies
//! shard i of the master byte for byte, so physical offsets mean the same on both.

pub mod decode;
pub mod epoch_file;
pub mod epochs;
pub mod master_state;
pub mod slave_state;
pub mod wire;

#[cfg(test)]
mod sim_tests;
