//! What the controllers assigned to one run of a node in controller mode (D18): the
//! role the run has, with what that role needs from the controller and no config key
//! can say. A node started without one ([`super::start`]) has the role its config says.
//!
//! - A master takes the controller's master epoch on every shard (instead of drawing
//!   one), so every replica of the group labels the bytes written under this master with
//!   the same epoch the controller fenced with.
//! - A master's shards need a replica's confirmation only while the SyncStateSet holds a
//!   slave ([`ReplicaGate`], which the supervisor moves as the set changes).
//! - A master's stores refuse puts and hold acknowledgements while its write lease from
//!   the controllers is lapsed ([`WriteLease`], renewed by the supervisor).
//! - A slave knows its master's broker address from the controller; the name servers'
//!   answer to its registration, which carries the master's HA address, teaches it only
//!   when it names that master (until the promoted master registered, a name server
//!   still names the one it replaced).

use std::net::SocketAddr;

use crate::store::{ReplicaGate, WriteLease};

/// The role the controllers assigned to one run of the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoleAssignment {
    /// Master under the controller's `epoch`; `replicas` says whether its batches need a
    /// replica's confirmation (under SYNC_MASTER); `lease` is how long the controllers
    /// confirmed it as master (puts and acknowledgements stop when it lapses).
    Master {
        epoch: u32,
        replicas: ReplicaGate,
        lease: WriteLease,
    },
    /// Slave of the master at broker address `master`.
    Slave { master: SocketAddr },
}

impl RoleAssignment {
    /// The epoch a master run takes; `None` for a slave.
    pub fn master_epoch(&self) -> Option<u32> {
        match self {
            RoleAssignment::Master { epoch, .. } => Some(*epoch),
            RoleAssignment::Slave { .. } => None,
        }
    }

    /// A master run's replica gate; `None` for a slave.
    pub fn replica_gate(&self) -> Option<&ReplicaGate> {
        match self {
            RoleAssignment::Master { replicas, .. } => Some(replicas),
            RoleAssignment::Slave { .. } => None,
        }
    }

    /// A master run's write lease; `None` for a slave.
    pub fn write_lease(&self) -> Option<&WriteLease> {
        match self {
            RoleAssignment::Master { lease, .. } => Some(lease),
            RoleAssignment::Slave { .. } => None,
        }
    }

    /// The master a slave run follows; `None` for a master.
    pub fn expected_master(&self) -> Option<SocketAddr> {
        match self {
            RoleAssignment::Slave { master } => Some(*master),
            RoleAssignment::Master { .. } => None,
        }
    }
}

/// One run's assignment with the handle NOTIFY_BROKER_ROLE_CHANGED reaches its
/// supervisor through (the broker wakes it; it asks the controllers at once).
#[derive(Clone, Debug)]
pub struct Assignment {
    pub role: RoleAssignment,
    pub role_notices: std::sync::Arc<tokio::sync::Notify>,
    /// Set by the supervisor before it stops the run for a role change (the name-server
    /// registration then does not unregister, `node::registration`).
    pub role_change: std::sync::Arc<std::sync::atomic::AtomicBool>,
}
