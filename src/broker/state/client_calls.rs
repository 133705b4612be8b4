//! Requests the broker sends a client and waits for the answer to: [`PendingCalls`], the
//! calls waiting, and [`CallError`], why one got no answer. The admin request that uses
//! them is GET_CONSUMER_RUNNING_INFO ([`crate::broker::admin::consumer_running_info`]);
//! the sending side is [`crate::broker::state::notify::Links::call`].
//!
//! [`PendingCalls`] matches answers to calls by (connection, opaque): the connection's
//! reader hands every response frame it reads to [`crate::broker::state::notify::Links::answered`]. A
//! call's entry leaves the table when its answer comes, when it times out, or when its
//! connection closes, so the table holds only calls still waiting. Each waiting call is
//! one admin request in flight, so the connections' in-flight bounds
//! (`maxRequestsInFlightPerConnection`, `maxRequestsInFlight`) bound the table too.

use std::collections::HashMap;
use std::net::SocketAddr;

use tokio::sync::oneshot;

use crate::remoting::RemotingCommand;
use crate::sync::Locked;

/// Calls waiting for a client's answer, by (connection, opaque).
#[derive(Debug, Default)]
pub struct PendingCalls {
    waiting: Locked<HashMap<(SocketAddr, i32), oneshot::Sender<RemotingCommand>>>,
}

/// Why a call got no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum CallError {
    /// No answer within the timeout.
    Timeout,
    /// The connection is gone, or its queue is full (the client is not reading).
    NotSent(&'static str),
    /// The connection closed before the answer came.
    Closed,
}

impl PendingCalls {
    /// Registers a call; the receiver gets the answer.
    pub(super) fn register(
        &self,
        peer: SocketAddr,
        opaque: i32,
    ) -> oneshot::Receiver<RemotingCommand> {
        let (sender, receiver) = oneshot::channel();
        let previous = self.waiting.lock().insert((peer, opaque), sender);
        // Opaques come from one node-wide counter: two live calls never share one.
        assert!(
            previous.is_none(),
            "two calls to {peer} wait on opaque {opaque}"
        );
        receiver
    }

    /// Forgets a call (answered, timed out or never sent).
    pub(super) fn forget(&self, peer: SocketAddr, opaque: i32) {
        self.waiting.lock().remove(&(peer, opaque));
    }

    /// Hands `answer` to the call waiting on it; false if none is (late or unasked).
    pub(super) fn answered(&self, peer: SocketAddr, answer: RemotingCommand) -> bool {
        let waiting = self.waiting.lock().remove(&(peer, answer.opaque));
        match waiting {
            Some(sender) => sender.send(answer).is_ok(),
            None => false,
        }
    }

    /// Ends every call waiting on `peer`'s connection (their receivers see it closed).
    pub(super) fn connection_closed(&self, peer: SocketAddr) {
        self.waiting.lock().retain(|(on, _), _| *on != peer);
    }

    /// Calls waiting now.
    pub fn len(&self) -> usize {
        self.waiting.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reaches_only_the_call_on_its_connection_and_opaque() {
        let calls = PendingCalls::default();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut on_a = calls.register(a, 7);
        let mut on_b = calls.register(b, 8);
        let mut answer = RemotingCommand::request(0, Default::default());
        answer.opaque = 7;
        assert!(!calls.answered(b, answer.clone()), "b has no call 7");
        assert!(calls.answered(a, answer));
        assert_eq!(on_a.try_recv().unwrap().opaque, 7);
        assert!(on_b.try_recv().is_err());
        calls.connection_closed(b);
        assert!(calls.is_empty());
        assert!(matches!(
            on_b.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
    }
}
