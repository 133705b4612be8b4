//! Per-shard replication, the pure parts (issue 25, item 3): bytes in, bytes and decisions
//! out; no sockets, no runtime, no disk I/O. The node's HA service (a thin I/O layer)
//! reads and writes the sockets and the store and asks these modules what to do.
//!
//! - [`wire`]: the HA stream's messages (reference-2 §6.3 with ringmq's handshake
//!   extension), their encoding and limits; [`decode`]: incremental, bounded decoders for
//!   both directions.
//! - [`epochs`]: one shard store's epoch history and the consistent point of two of them;
//!   [`epoch_file`]: the text of the `epochFileCheckpoint` file that holds that history.

pub mod decode;
pub mod epoch_file;
pub mod epochs;
pub mod master_state;
pub mod slave_state;
pub mod wire;
