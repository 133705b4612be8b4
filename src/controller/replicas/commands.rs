//! The commands the controller commits through its Raft log, their responses, and the
//! [`ReplicatedState`] implementation of [`ReplicasInfo`] that applies them.
//!
//! A command is a decision the leader made (RocketMQ's events: `ApplyBrokerIdEvent`,
//! `UpdateBrokerAddressEvent`, `ElectMasterEvent`, `AlterSyncStateSetEvent`,
//! `CleanBrokerDataEvent`), plus what the leader saw when it decided (the epochs). It is
//! small JSON; it never carries a clock reading or a liveness fact, only their outcome.
//!
//! Invariants:
//! - a command is checked again when applied ([`super::apply`]), against the state as it
//!   is then: another command may have been committed between the leader's check and this
//!   one's commit (apache/rocketmq#5663, a SyncStateSet race; #7689, two masters for one
//!   epoch). A command that no longer fits is refused, with the same answer on every node;
//! - bytes that do not decode are refused the same way, never a panic;
//! - a snapshot is the whole state as JSON; a restore that does not decode, or decodes to
//!   a state breaking an invariant, is refused and leaves the state as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use serde::{Deserialize, Serialize};

use super::state::{BrokerId, ReplicasInfo};
use crate::controller::replicated::ReplicatedState;
use crate::remoting::codes::response;

/// One committed change of the controller's state. Externally tagged JSON
/// (`{"electMaster":{...}}`): an internally tagged enum would buffer its fields, and the
/// buffer loses integer map keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Command {
    /// A broker claims `broker_id` in its group (CONTROLLER_APPLY_BROKER_ID); creates the
    /// group on its first id.
    ApplyBrokerId {
        cluster_name: String,
        broker_name: String,
        broker_id: BrokerId,
        address: String,
        register_check_code: String,
    },
    /// A registered broker came back with another address or heartbeat timeout
    /// (CONTROLLER_REGISTER_BROKER).
    UpdateBrokerAddress {
        cluster_name: String,
        broker_name: String,
        broker_id: BrokerId,
        address: String,
        /// Kept when `None` (a Java broker names none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heartbeat_timeout_ms: Option<u64>,
    },
    /// The outcome of an election ([`super::election`]): a new master, or none (the master
    /// is gone and no replica may take over). Refused unless the group's epochs are still
    /// the expected ones: the election must then be computed again.
    ElectMaster {
        broker_name: String,
        new_master: Option<BrokerId>,
        /// The winner was chosen outside the SyncStateSet (`enableElectUncleanMaster`).
        unclean: bool,
        expected_master_epoch: i32,
        expected_sync_state_set_epoch: i32,
    },
    /// The master's new SyncStateSet (CONTROLLER_ALTER_SYNC_STATE_SET), with the master id
    /// and the epochs its request carried.
    AlterSyncStateSet {
        broker_name: String,
        master_broker_id: BrokerId,
        master_epoch: i32,
        sync_state_set_epoch: i32,
        new_sync_state_set: BTreeSet<BrokerId>,
    },
    /// Forget some broker ids of a group, or the whole group when `broker_ids` is `None`
    /// (CLEAN_BROKER_DATA; the liveness checks were the leader's).
    CleanBrokerData {
        broker_name: String,
        broker_ids: Option<BTreeSet<BrokerId>>,
    },
}

/// What applying a command gave, for the proposer to answer with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Response {
    BrokerIdApplied {
        broker_id: BrokerId,
    },
    BrokerAddressUpdated {
        broker_id: BrokerId,
        address: String,
    },
    /// The group after an election: its master (none when no replica could take over),
    /// the new epochs, the set, and every member's address (the `brokerMemberGroup`).
    MasterElected {
        cluster_name: String,
        master: Option<BrokerId>,
        master_address: Option<String>,
        master_epoch: i32,
        sync_state_set: BTreeSet<BrokerId>,
        sync_state_set_epoch: i32,
        members: BTreeMap<BrokerId, String>,
    },
    SyncStateSetAltered {
        sync_state_set: BTreeSet<BrokerId>,
        sync_state_set_epoch: i32,
    },
    BrokerDataCleaned {
        /// Whether the whole group is gone.
        group_removed: bool,
    },
    /// Not applied: `code` is a RocketMQ response code (`codes::response`).
    Refused {
        code: i32,
        message: String,
    },
}

impl Response {
    /// A refusal with `code` and `message`.
    pub fn refused(code: i32, message: impl Into<String>) -> Response {
        Response::Refused {
            code,
            message: message.into(),
        }
    }

    /// The RocketMQ response code to answer with: SUCCESS unless refused.
    pub fn code(&self) -> i32 {
        match self {
            Response::Refused { code, .. } => *code,
            _ => response::SUCCESS,
        }
    }
}

impl Command {
    /// The command's JSON bytes, as proposed to the Raft log.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a command always encodes as JSON")
    }

    pub fn decode(bytes: &[u8]) -> Result<Command, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

impl Response {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a response always encodes as JSON")
    }

    pub fn decode(bytes: &[u8]) -> Result<Response, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

impl ReplicatedState for ReplicasInfo {
    fn apply(&mut self, command: &[u8]) -> Vec<u8> {
        let response = match Command::decode(command) {
            Ok(command) => self.apply_command(&command),
            Err(error) => Response::refused(
                response::CONTROLLER_INVALID_REQUEST,
                format!("command does not decode: {error}"),
            ),
        };
        response.encode()
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("the controller state always encodes as JSON")
    }

    fn restore(&mut self, snapshot: &[u8]) -> io::Result<()> {
        let restored: ReplicasInfo = serde_json::from_slice(snapshot).map_err(|error| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("controller snapshot does not decode: {error}"),
            )
        })?;
        if let Some(violation) = restored.invariant_violation() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("controller snapshot breaks an invariant: {violation}"),
            ));
        }
        *self = restored;
        Ok(())
    }
}

#[cfg(test)]
#[path = "commands_tests.rs"]
mod tests;
