//! The writer queue of one connection: every frame bound for its socket that is not held
//! in a reply batch, each carrying the bytes it was charged to the connection's
//! [`Backlog`].
//!
//! The queue itself has no slot bound; the backlog is its bound. A response can only
//! exist for a request the reader took, and the reader stops taking requests while the
//! backlog is full, so the queue holds at most `max_queued_response_bytes` plus the
//! responses of `max_requests_in_flight` requests. Frames the node sends on its own
//! (NOTIFY_CONSUMER_IDS_CHANGED) are refused once the backlog's bytes are at their
//! bound, instead of queued: a client that does not read misses them, as it would miss
//! them had it gone.
//!
//! Why not a channel with a slot bound: a full one made whoever answered wait for room,
//! and waiting cost a task per answer (the answer's request task, or a spawned one when
//! the store's appender answered) that the backlog did not count. 200 connections that
//! never read held about 100,000 such tasks, 4.5 KiB each.
//!
//! Invariant: what an entry was charged is what the writer takes off the backlog once
//! the socket took it (or what is taken off here, when the queue is already closed), so
//! the backlog's bytes return to zero when nothing is queued.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::backlog::{response_cost, Backlog, InFlight};
use crate::remoting::command::RemotingCommand;

/// A frame on the writer queue and what it was charged.
#[derive(Debug)]
pub(crate) struct Queued {
    pub command: RemotingCommand,
    pub charged: usize,
}

/// Writes frames to one connection: responses, and requests the node itself sends to the
/// client. `Send` and cheap to clone, so any shard can write to any connection.
#[derive(Clone, Debug)]
pub struct Outbound {
    queue: mpsc::UnboundedSender<Queued>,
    backlog: Arc<Backlog>,
}

/// Why a frame the node sends on its own was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum NotQueued {
    /// The connection has gone.
    Closed,
    /// The connection's queued bytes are at their bound: it is not reading.
    Full,
}

impl Outbound {
    /// A queue charging `backlog`, and the writer's end of it.
    pub(crate) fn new(backlog: Arc<Backlog>) -> (Outbound, mpsc::UnboundedReceiver<Queued>) {
        let (queue, queued) = mpsc::unbounded_channel();
        (Outbound { queue, backlog }, queued)
    }

    /// Queues the response to the request `in_flight` counts, then ends that request:
    /// charged first, so the reader never sees the work vanish and come back. A response
    /// to a connection that has gone is dropped.
    pub(crate) fn respond(&self, response: RemotingCommand, in_flight: InFlight) {
        let charged = response_cost(&response);
        self.backlog.queued(charged);
        drop(in_flight);
        self.push(Queued {
            command: response,
            charged,
        });
    }

    /// Queues `request`, a frame the node sends on its own, unless the connection's queued
    /// bytes are at their bound or it has gone.
    pub fn try_send(&self, request: RemotingCommand) -> Result<(), NotQueued> {
        if self.queue.is_closed() {
            return Err(NotQueued::Closed);
        }
        if self.backlog.bytes_full() {
            return Err(NotQueued::Full);
        }
        let charged = response_cost(&request);
        self.backlog.queued(charged);
        if self.push(Queued {
            command: request,
            charged,
        }) {
            Ok(())
        } else {
            Err(NotQueued::Closed)
        }
    }

    /// True if it went on the queue; if the writer has gone, takes its charge back.
    fn push(&self, queued: Queued) -> bool {
        match self.queue.send(queued) {
            Ok(()) => true,
            Err(mpsc::error::SendError(dropped)) => {
                self.backlog.written(dropped.charged);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::remoting::frame::test_response as response;
    use crate::server::backlog::BacklogBounds;
    use crate::server::traffic::Traffic;

    #[test]
    fn a_response_is_charged_before_its_request_ends_and_the_charge_travels_with_it() {
        let backlog = Backlog::new(
            BacklogBounds::per_connection(8, 1 << 20),
            Arc::new(Traffic::new()),
        );
        let (outbound, mut queued) = Outbound::new(backlog.clone());
        let in_flight = backlog.start_request(0);
        let answer = response(1);
        let cost = response_cost(&answer);
        outbound.respond(answer, in_flight);
        assert_eq!((backlog.requests(), backlog.bytes()), (0, cost));
        let entry = queued.try_recv().expect("the response is queued");
        assert_eq!((entry.command.opaque, entry.charged), (1, cost));
    }

    #[test]
    fn the_nodes_own_frames_are_refused_at_the_bytes_bound_and_after_the_writer_is_gone() {
        let one = response_cost(&response(1));
        let backlog = Backlog::new(
            BacklogBounds::per_connection(8, one),
            Arc::new(Traffic::new()),
        );
        let (outbound, queued) = Outbound::new(backlog.clone());
        assert_eq!(outbound.try_send(response(1)), Ok(()));
        // At the bound: the next one is refused, and nothing more is charged.
        assert_eq!(outbound.try_send(response(2)), Err(NotQueued::Full));
        assert_eq!(backlog.bytes(), one);
        drop(queued);
        backlog.written(one);
        assert_eq!(outbound.try_send(response(3)), Err(NotQueued::Closed));
        // A response after the writer has gone is dropped and its charge taken back.
        outbound.respond(response(4), backlog.start_request(0));
        assert_eq!((backlog.requests(), backlog.bytes()), (0, 0));
    }
}
