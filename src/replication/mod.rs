//! Per-shard replication (D14). The pure parts take bytes in and give bytes and decisions
//! out, with no sockets, runtime or disk I/O; the I/O parts (the HA service) read and write
//! the sockets, the store and the epoch file and ask the pure parts what to do.
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
//! The I/O parts:
//! - [`epoch_store`]: one shard's epoch history in its `epochFileCheckpoint`;
//! - [`master_side`] (a master shard's epoch, its slaves' acks and what they tell the
//!   store) and [`master_link`] (one slave's stream on the master);
//! - [`slave_link`]: one shard's stream from its master, applied to the replica store in
//!   steps ([`slave_batch`]: the frames received while the last step was on the disk go
//!   in one write and one sync, the slave's group commit);
//! - [`service`]: the shard services of both roles, the HA port's accept loop and the
//!   handoff of a stream to the shard whose log it carries.
//!
//! ringmq keeps one epoch history (and epoch file) per shard store, and runs one stream per
//! shard: master and slave have the same shard count, and shard i of the slave copies
//! shard i of the master byte for byte, so physical offsets mean the same on both.

pub mod decode;
pub mod epoch_file;
pub mod epoch_store;
pub mod epochs;
pub mod master_link;
pub mod master_side;
pub mod master_state;
pub mod service;
pub mod slave_batch;
pub mod slave_link;
pub mod slave_state;
pub mod wire;

#[cfg(test)]
mod sim_tests;
