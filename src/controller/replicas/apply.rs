//! What each committed [`Command`] does to [`ReplicasInfo`], checked against the state as
//! it is when the command is applied (the fencing that makes a stale decision harmless).
//!
//! RocketMQ's `ReplicasInfoManager` checks a request on the leader and then applies its
//! event unchecked; here every check the state alone can decide is made again at apply,
//! deterministically, so two decisions racing through the log cannot both take effect.
//! What needs liveness (is a replica alive, who may be elected) stays the leader's.
//!
//! Facts from RocketMQ's `ReplicasInfoManager`, `SyncStateInfo` and `BrokerReplicaInfo`
//! (apache/rocketmq develop, 2025-09) and where ringmq departs from them:
//! - an election with a winner raises `masterEpoch` by one and `syncStateSetEpoch` by one
//!   and sets the SyncStateSet to the winner alone;
//! - an election without a winner, when the controller triggered it (the master died and
//!   no candidate is alive), clears the master, raises `masterEpoch` by one and keeps the
//!   SyncStateSet and its epoch: its members stay the only clean candidates for later. A
//!   broker-triggered election without a winner changes nothing (no command);
//! - AlterSyncStateSet: Java refuses a set equal to the current one and a set without the
//!   master with CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, a wrong master with
//!   CONTROLLER_INVALID_MASTER, epochs that differ with the FENCED codes, unknown ids with
//!   CONTROLLER_INVALID_REPLICAS, and raises `syncStateSetEpoch` by one. ringmq checks the
//!   master and the epochs first, so a fenced master learns that it is fenced;
//! - ApplyBrokerId: the first id of a new group must be 1; an id already taken is refused
//!   unless the check code is the same (CONTROLLER_BROKER_ID_INVALID). Java then adds one
//!   to the next id whatever id was applied; ringmq moves it past the applied id, so an id
//!   applied out of turn is never handed out again;
//! - CleanBrokerData: Java removes the ids and leaves a removed master as the master;
//!   ringmq clears it and raises `masterEpoch`, keeping "the master is in the set".

use std::collections::BTreeSet;

use super::commands::{Command, Response};
use super::state::{BrokerEntry, BrokerId, GroupState, ReplicasInfo, FIRST_BROKER_ID};
use crate::remoting::codes::response as code;

/// A command's outcome: `Err` holds the refusal, so checks can use `?`.
pub(super) type Applied = Result<Response, Response>;

impl ReplicasInfo {
    /// Applies one command; a refusal leaves the state unchanged. Asserts the invariants
    /// after every change and that no epoch went down.
    pub fn apply_command(&mut self, command: &Command) -> Response {
        let before = self.clone();
        let applied = match command {
            Command::ApplyBrokerId {
                cluster_name,
                broker_name,
                broker_id,
                address,
                register_check_code,
            } => self.apply_broker_id(
                cluster_name,
                broker_name,
                *broker_id,
                BrokerEntry {
                    address: address.clone(),
                    register_check_code: register_check_code.clone(),
                    heartbeat_timeout_ms: None,
                },
            ),
            Command::UpdateBrokerAddress {
                cluster_name,
                broker_name,
                broker_id,
                address,
                heartbeat_timeout_ms,
            } => self.update_broker_address(
                (cluster_name, broker_name, *broker_id),
                address,
                *heartbeat_timeout_ms,
            ),
            Command::ElectMaster { .. } => self.elect_master(command),
            Command::AlterSyncStateSet { .. } => self.alter_sync_state_set(command),
            Command::CleanBrokerData {
                broker_name,
                broker_ids,
            } => self.clean_broker_data(broker_name, broker_ids.as_ref()),
        };
        let response = applied.unwrap_or_else(|refusal| refusal);
        if matches!(response, Response::Refused { .. }) {
            assert_eq!(
                *self, before,
                "a refused command changed the state: {command:?}"
            );
        }
        self.assert_invariants();
        assert_epochs_not_lowered(&before, self);
        response
    }

    pub(super) fn group_mut(
        &mut self,
        broker_name: &str,
        missing: i32,
    ) -> Result<&mut GroupState, Response> {
        self.groups.get_mut(broker_name).ok_or_else(|| {
            Response::refused(
                missing,
                format!("broker group {broker_name} is not registered"),
            )
        })
    }

    fn apply_broker_id(
        &mut self,
        cluster_name: &str,
        broker_name: &str,
        broker_id: BrokerId,
        entry: BrokerEntry,
    ) -> Applied {
        if broker_id < FIRST_BROKER_ID {
            return Err(Response::refused(
                code::CONTROLLER_BROKER_ID_INVALID,
                format!("broker id {broker_id} is below the first id {FIRST_BROKER_ID}"),
            ));
        }
        let Some(group) = self.groups.get_mut(broker_name) else {
            if broker_id != FIRST_BROKER_ID {
                return Err(Response::refused(
                    code::CONTROLLER_BROKER_ID_INVALID,
                    format!(
                        "broker group {broker_name} is not registered: its first broker must \
                         apply id {FIRST_BROKER_ID}, not {broker_id}"
                    ),
                ));
            }
            let epochs = self.retired_epochs.remove(broker_name).unwrap_or_default();
            let mut group = GroupState::new(cluster_name, epochs);
            group.brokers.insert(broker_id, entry);
            group.next_broker_id = broker_id + 1;
            self.groups.insert(broker_name.to_owned(), group);
            return Ok(Response::BrokerIdApplied { broker_id });
        };
        if group.cluster_name != cluster_name {
            return Err(Response::refused(
                code::CONTROLLER_INVALID_REQUEST,
                format!(
                    "broker group {broker_name} belongs to cluster {}, not {cluster_name}",
                    group.cluster_name
                ),
            ));
        }
        match group.brokers.get(&broker_id) {
            None => {
                group.brokers.insert(broker_id, entry);
                group.next_broker_id = group.next_broker_id.max(broker_id + 1);
                Ok(Response::BrokerIdApplied { broker_id })
            }
            Some(taken) if taken.register_check_code == entry.register_check_code => {
                Ok(Response::BrokerIdApplied { broker_id })
            }
            Some(taken) => Err(Response::refused(
                code::CONTROLLER_BROKER_ID_INVALID,
                format!(
                    "broker id {broker_id} of {broker_name} is taken by {} (check code {:?}, \
                     not {:?})",
                    taken.address, taken.register_check_code, entry.register_check_code
                ),
            )),
        }
    }

    fn update_broker_address(
        &mut self,
        (cluster_name, broker_name, broker_id): (&str, &str, BrokerId),
        address: &str,
        heartbeat_timeout_ms: Option<u64>,
    ) -> Applied {
        let group = self.group_mut(broker_name, code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)?;
        let entry = match group.brokers.get_mut(&broker_id) {
            Some(entry) if group.cluster_name == cluster_name => entry,
            _ => {
                return Err(Response::refused(
                    code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                    format!("broker {broker_id} of {cluster_name}/{broker_name} is not registered"),
                ))
            }
        };
        entry.address = address.to_owned();
        if heartbeat_timeout_ms.is_some() {
            entry.heartbeat_timeout_ms = heartbeat_timeout_ms;
        }
        Ok(Response::BrokerAddressUpdated {
            broker_id,
            address: address.to_owned(),
        })
    }

    fn clean_broker_data(
        &mut self,
        broker_name: &str,
        broker_ids: Option<&BTreeSet<BrokerId>>,
    ) -> Applied {
        let group = self.group_mut(broker_name, code::CONTROLLER_INVALID_CLEAN_BROKER_METADATA)?;
        if let Some(ids) = broker_ids.filter(|ids| !ids.is_empty()) {
            for id in ids {
                group.brokers.remove(id);
                group.sync_state_set.remove(id);
            }
            if group.master.is_some_and(|master| ids.contains(&master)) {
                group.master = None;
                group.master_epoch += 1;
            }
            if !group.brokers.is_empty() {
                return Ok(Response::BrokerDataCleaned {
                    group_removed: false,
                });
            }
        }
        let removed = self
            .groups
            .remove(broker_name)
            .expect("the group was found above");
        self.retired_epochs
            .insert(broker_name.to_owned(), removed.epochs());
        Ok(Response::BrokerDataCleaned {
            group_removed: true,
        })
    }
}

/// Panics if a group present before and after a command has a lower epoch after it, or
/// a re-created group starts below the epochs its name retired with.
fn assert_epochs_not_lowered(before: &ReplicasInfo, after: &ReplicasInfo) {
    for (name, group) in &after.groups {
        let earlier = before
            .groups
            .get(name)
            .map(GroupState::epochs)
            .or_else(|| before.retired_epochs.get(name).copied())
            .unwrap_or_default();
        let now = group.epochs();
        assert!(
            now.master_epoch >= earlier.master_epoch
                && now.sync_state_set_epoch >= earlier.sync_state_set_epoch,
            "group {name}: epochs went down from {earlier:?} to {now:?}"
        );
    }
}
