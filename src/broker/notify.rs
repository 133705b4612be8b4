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
use crate::remoting::connection::Outbound;
use crate::remoting::{ExtFields, RemotingCommand, ONEWAY_FLAG};
use crate::sync::Locked;

use super::Broker;

/// The open client connections of the node, by peer address.
#[derive(Debug, Default)]
pub struct Links {
    open: Locked<HashMap<SocketAddr, Outbound>>,
    /// Opaques of the node's own requests (clients only match responses by opaque, and a
    /// oneway request gets none, but distinct values keep traces readable).
    next_opaque: AtomicI32,
}

impl Links {
    pub fn open(&self, peer: SocketAddr, outbound: Outbound) {
        self.open.lock().insert(peer, outbound);
    }

    pub fn close(&self, peer: SocketAddr) {
        self.open.lock().remove(&peer);
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
