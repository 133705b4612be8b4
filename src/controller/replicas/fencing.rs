//! The apply-time fencing of the two commands that move a group's epochs: an election
//! and a SyncStateSet change. Each is checked against the group as it is when the command
//! is applied, not as the leader saw it, so of two decisions made from the same state and
//! committed one after the other, the second is refused (its epochs are no longer the
//! group's) instead of overwriting the first.
//!
//! Invariants kept: an election or a set change applies only to the epochs it was decided
//! on; each one raises the epochs it changes by exactly one; a clean election never picks
//! a broker outside the SyncStateSet (unless the set is empty: the group's first master).

use std::collections::BTreeSet;

use super::apply::Applied;
use super::commands::{Command, Response};
use super::state::{BrokerId, GroupState, ReplicasInfo};
use crate::remoting::codes::response as code;

impl ReplicasInfo {
    /// Applies [`Command::ElectMaster`].
    pub(super) fn elect_master(&mut self, command: &Command) -> Applied {
        let Command::ElectMaster {
            broker_name,
            new_master,
            unclean,
            expected_master_epoch,
            expected_sync_state_set_epoch,
        } = command
        else {
            unreachable!("elect_master is given ElectMaster commands only");
        };
        let group = self.group_mut(broker_name, code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)?;
        check_epochs(
            broker_name,
            group,
            *expected_master_epoch,
            *expected_sync_state_set_epoch,
        )?;
        match *new_master {
            Some(winner) => {
                check_winner(broker_name, group, winner, *unclean)?;
                group.master = Some(winner);
                group.master_epoch += 1;
                group.sync_state_set = BTreeSet::from([winner]);
                group.sync_state_set_epoch += 1;
            }
            None => {
                if group.master.is_none() {
                    return Err(Response::refused(
                        code::CONTROLLER_MASTER_NOT_AVAILABLE,
                        format!("{broker_name} has no master to clear"),
                    ));
                }
                group.master = None;
                group.master_epoch += 1;
            }
        }
        Ok(Response::MasterElected {
            cluster_name: group.cluster_name.clone(),
            master: group.master,
            master_address: group.master_address().map(str::to_owned),
            master_epoch: group.master_epoch,
            sync_state_set: group.sync_state_set.clone(),
            sync_state_set_epoch: group.sync_state_set_epoch,
            members: group.member_addresses(),
        })
    }

    /// Applies [`Command::AlterSyncStateSet`].
    pub(super) fn alter_sync_state_set(&mut self, command: &Command) -> Applied {
        let Command::AlterSyncStateSet {
            broker_name,
            master_broker_id,
            master_epoch,
            sync_state_set_epoch,
            new_sync_state_set,
        } = command
        else {
            unreachable!("alter_sync_state_set is given AlterSyncStateSet commands only");
        };
        let group = self.group_mut(broker_name, code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)?;
        if group.master != Some(*master_broker_id) {
            return Err(Response::refused(
                code::CONTROLLER_INVALID_MASTER,
                format!(
                    "{broker_name}: the master is {:?}, not {master_broker_id}",
                    group.master
                ),
            ));
        }
        check_epochs(broker_name, group, *master_epoch, *sync_state_set_epoch)?;
        check_new_set(broker_name, group, *master_broker_id, new_sync_state_set)?;
        group.sync_state_set = new_sync_state_set.clone();
        group.sync_state_set_epoch += 1;
        Ok(Response::SyncStateSetAltered {
            sync_state_set: group.sync_state_set.clone(),
            sync_state_set_epoch: group.sync_state_set_epoch,
        })
    }
}

/// Refuses a decision made under epochs that are no longer the group's.
fn check_epochs(
    broker_name: &str,
    group: &GroupState,
    master_epoch: i32,
    sync_state_set_epoch: i32,
) -> Result<(), Response> {
    if master_epoch != group.master_epoch {
        return Err(Response::refused(
            code::CONTROLLER_FENCED_MASTER_EPOCH,
            format!(
                "{broker_name}: master epoch {master_epoch} is fenced, the current one is {}",
                group.master_epoch
            ),
        ));
    }
    if sync_state_set_epoch != group.sync_state_set_epoch {
        return Err(Response::refused(
            code::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            format!(
                "{broker_name}: SyncStateSet epoch {sync_state_set_epoch} is fenced, the current \
                 one is {}",
                group.sync_state_set_epoch
            ),
        ));
    }
    Ok(())
}

/// Refuses an election winner that is not registered or (for a clean election) is outside
/// a non-empty SyncStateSet. The master may win again: a master that restarted asks for a
/// new epoch (the expected epochs already refuse a decision made on an older state).
fn check_winner(
    broker_name: &str,
    group: &GroupState,
    winner: BrokerId,
    unclean: bool,
) -> Result<(), Response> {
    if !group.is_registered(winner) {
        return Err(Response::refused(
            code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            format!("{broker_name}: elected broker {winner} is not registered"),
        ));
    }
    let in_set = group.sync_state_set.contains(&winner) || group.sync_state_set.is_empty();
    if !unclean && !in_set {
        return Err(Response::refused(
            code::CONTROLLER_INVALID_REPLICAS,
            format!(
                "{broker_name}: broker {winner} is not in the SyncStateSet {:?} and the election \
                 was not unclean",
                group.sync_state_set
            ),
        ));
    }
    Ok(())
}

/// Refuses a new SyncStateSet equal to the current one, holding an unknown id, or
/// without the master.
fn check_new_set(
    broker_name: &str,
    group: &GroupState,
    master: BrokerId,
    new_set: &BTreeSet<BrokerId>,
) -> Result<(), Response> {
    if *new_set == group.sync_state_set {
        return Err(Response::refused(
            code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
            format!("{broker_name}: the SyncStateSet is {new_set:?} already"),
        ));
    }
    if let Some(unknown) = new_set.iter().find(|id| !group.is_registered(**id)) {
        return Err(Response::refused(
            code::CONTROLLER_INVALID_REPLICAS,
            format!(
                "{broker_name}: replica {unknown} of {new_set:?} is not a registered broker ({:?})",
                group.brokers.keys()
            ),
        ));
    }
    if !new_set.contains(&master) {
        return Err(Response::refused(
            code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
            format!(
                "{broker_name}: the new SyncStateSet {new_set:?} leaves out the master {master}"
            ),
        ));
    }
    Ok(())
}
