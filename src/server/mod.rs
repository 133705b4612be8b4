//! Serving connections on a shard: the part of the wire that does I/O, over any transport
//! of the network seam ([`crate::net`]), with the pure codec of [`crate::remoting`].
//!
//! - [`connection`]: serving one connection: bytes in, frames out, each request handed to
//!   a [`connection::RequestHandler`] (the broker, or the embedded name server), the
//!   responses written by one writer task (and by [`reply_batch`] at the end of a store
//!   turn).
//! - [`body_send`]: how the connection writer sends a response's file body (sendfile, or
//!   writev from an mmap; D8).
//! - [`traffic`]: byte counters of the connections (in, out, zero-copy, copied), and the
//!   counters of the connection limits.
//! - [`backlog`]: the per-connection bound on requests in flight and response bytes
//!   queued, which makes a connection stop reading (TCP backpressure); [`outbound`], the
//!   queue to the writer task.
//! - [`admission`]: the node-wide bounds: open connections, bytes held in partial frames;
//!   [`accept`], the accept loop of a one-thread server under those bounds.
//! - [`closer`]: ended connections' sockets closed a batch per turn.
//!
//! May import the codec ([`crate::remoting`]), the network seam, `io::file_body`, and
//! nothing above itself: the handler is a trait, implemented by the broker.

pub mod accept;
pub mod admission;
pub mod backlog;
pub mod body_send;
pub mod closer;
pub mod connection;
pub mod outbound;
pub mod reply_batch;
pub mod traffic;
