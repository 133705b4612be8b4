//! Requests the node sends to clients: NOTIFY_CONSUMER_IDS_CHANGED (40), so the members of
//! a consumer group rebalance as soon as the group changes instead of on their own timer
//! (20 s by default in the Rust client, 20 s in Java's `RebalanceService`).
//!
//! [`Links`] maps every open client connection of every shard (by peer address) to its
//! [`Outbound`] queue, filled by the connections' open/close hooks. A notification is a
//! oneway request with header `consumerGroup`, put on each member's queue with
//! `try_send`: it never waits, and a member whose queue is full (a stalled connection)
//! simply misses this one and rebalances on its timer, as it would have without it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::remoting::codes::request;
use crate::server::connection::Outbound;
use crate::server::outbound::NotQueued;

use crate::broker::state::client_calls::CallError;
use crate::remoting::{ExtFields, RemotingCommand, ONEWAY_FLAG};
use crate::sync::Locked;

use crate::broker::Broker;

/// The open client connections of the node, by peer address.
#[derive(Debug, Default)]
pub struct Links {
    open: Locked<HashMap<SocketAddr, Outbound>>,
    /// Opaques of the node's own requests: a call's answer is matched to it by opaque
    /// (and connection), so they never repeat while a call waits.
    next_opaque: AtomicI32,
    /// Calls waiting for a client's answer ([`crate::broker::state::client_calls`]).
    calls: crate::broker::state::client_calls::PendingCalls,
}

impl Links {
    pub fn open(&self, peer: SocketAddr, outbound: Outbound) {
        self.open.lock().insert(peer, outbound);
    }

    pub fn close(&self, peer: SocketAddr) {
        self.open.lock().remove(&peer);
        self.calls.connection_closed(peer);
    }

    /// Sends `command` to `peer` as a request and waits up to `timeout` for its answer.
    pub async fn call(
        &self,
        peer: SocketAddr,
        mut command: RemotingCommand,
        timeout: std::time::Duration,
    ) -> Result<RemotingCommand, CallError> {
        command.flag &= !ONEWAY_FLAG;
        command.opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        let opaque = command.opaque;
        let Some(outbound) = self.open.lock().get(&peer).cloned() else {
            return Err(CallError::NotSent("the consumer's connection is gone"));
        };
        // Registered before it is sent, so even an instant answer finds its call.
        let answer = self.calls.register(peer, opaque);
        if let Err(why) = outbound.try_send(command) {
            self.calls.forget(peer, opaque);
            return Err(CallError::NotSent(match why {
                NotQueued::Closed => "the consumer's connection is gone",
                NotQueued::Full => "the consumer's connection is not reading",
            }));
        }
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(CallError::Closed),
            Err(_) => {
                self.calls.forget(peer, opaque);
                Err(CallError::Timeout)
            }
        }
    }

    /// A response frame `peer` sent: the answer to one of the node's calls, or dropped.
    pub fn answered(&self, peer: SocketAddr, answer: RemotingCommand) {
        let opaque = answer.opaque;
        if !self.calls.answered(peer, answer) {
            tracing::debug!(%peer, opaque, "a response no call waits for dropped");
        }
    }

    /// Queues `command` (oneway) on the connection of `peer`; false if it is gone or full.
    pub fn send_oneway(&self, peer: SocketAddr, mut command: RemotingCommand) -> bool {
        command.flag |= ONEWAY_FLAG;
        command.opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        let Some(outbound) = self.open.lock().get(&peer).cloned() else {
            return false;
        };
        outbound.try_send(command).is_ok()
    }
}

/// NOTIFY_CONSUMER_IDS_CHANGED for `group`.
pub fn consumer_ids_changed(group: &str) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("consumerGroup".into(), group);
    RemotingCommand::request(request::NOTIFY_CONSUMER_IDS_CHANGED, fields)
}

impl Broker {
    /// Tells every current member of `group` that its membership changed.
    pub fn notify_consumer_ids_changed(&self, group: &str) {
        for peer in self.groups.consumer_peers(group) {
            if !self.links.send_oneway(peer, consumer_ids_changed(group)) {
                tracing::debug!(
                    %peer,
                    group = %crate::remoting::log_safe::log_safe(group),
                    "consumer ids change not delivered"
                );
            }
        }
    }
}
