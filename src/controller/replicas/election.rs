//! The election policy (RocketMQ's `DefaultElectPolicy` and the decision half of
//! `ReplicasInfoManager.electMaster`): from a group's state and which of its brokers are
//! alive with their last heartbeat facts, the [`Command::ElectMaster`] to propose, or why
//! there is none. Pure: the leader gathers the facts ([`super::liveness`]) and proposes.
//!
//! The rule, as RocketMQ's (apache/rocketmq develop, 2025-09):
//! - the group's first election (no master, empty SyncStateSet) makes the requesting
//!   broker master (Java: `masterEpoch == 0`; ringmq's epochs may survive a clean, so
//!   "never had a set" is the test);
//! - candidates are the alive members of the SyncStateSet; only when unclean elections are
//!   allowed and none of them is alive, every alive registered broker;
//! - the current master stays if it is a candidate (and no other broker is designated),
//!   except when the master itself asks: it restarted and lost its role, and must not
//!   write again under the epoch it wrote under before (its unsynced tail may be gone
//!   while a slave holds it), so it is elected again under a new epoch (ringmq's rule;
//!   RocketMQ's brokers never ask as the master, they take the master's role from the
//!   registration);
//! - a designated broker (admin `electMaster`) wins if it is a candidate, else the
//!   election fails: it is never replaced by another choice;
//! - otherwise the best candidate by (epoch desc, maxOffset desc, electionPriority asc),
//!   then the lowest id, so every leader picks the same one (Java's order among exact
//!   ties is a hash set's).
//!
//! Invariant: a clean outcome never names a broker outside the SyncStateSet; the proposed
//! command carries the epochs the decision was made on, so it is refused at apply if
//! anything moved them since.

use std::collections::BTreeMap;

use super::commands::Command;
use super::state::{BrokerId, GroupState};
use crate::remoting::codes::response as code;

/// A broker's last heartbeat facts that rank it as a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokerFacts {
    /// The last master epoch its log holds (`epoch` of BROKER_HEARTBEAT).
    pub epoch: i32,
    pub max_offset: i64,
    /// Lower is preferred.
    pub election_priority: i32,
}

/// Who asked for the election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectTrigger {
    /// The controller's liveness scan found the master dead (`brokerId` -1).
    Controller,
    /// A broker of the group asked (ELECT_MASTER without `designateElect`).
    Broker(BrokerId),
    /// The admin named the winner (ELECT_MASTER with `designateElect`).
    Designated(BrokerId),
}

/// What the election decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ElectionOutcome {
    /// Propose this [`Command::ElectMaster`]: a new master, or (controller-triggered, no
    /// candidate alive) the master cleared.
    Propose(Command),
    /// The current master is alive and valid: nothing to change
    /// (CONTROLLER_MASTER_STILL_EXIST with the current values).
    MasterStillExists { master: BrokerId },
    /// No master can be elected and there is nothing to commit; `code` is the answer
    /// (CONTROLLER_ELECT_MASTER_FAILED or CONTROLLER_MASTER_NOT_AVAILABLE).
    Failed { code: i32, message: String },
}

/// Decides the election of group `broker_name`. `alive` holds the group's brokers that
/// are alive now, with their facts; `allow_unclean` is `enableElectUncleanMaster`.
pub fn elect(
    broker_name: &str,
    group: &GroupState,
    alive: &BTreeMap<BrokerId, BrokerFacts>,
    trigger: ElectTrigger,
    allow_unclean: bool,
) -> ElectionOutcome {
    let propose = |winner: Option<BrokerId>, unclean: bool| {
        ElectionOutcome::Propose(Command::ElectMaster {
            broker_name: broker_name.to_owned(),
            new_master: winner,
            unclean,
            expected_master_epoch: group.master_epoch,
            expected_sync_state_set_epoch: group.sync_state_set_epoch,
        })
    };
    let first_election = group.master.is_none() && group.sync_state_set.is_empty();
    if let (true, ElectTrigger::Broker(id) | ElectTrigger::Designated(id)) =
        (first_election, trigger)
    {
        if group.is_registered(id) {
            return propose(Some(id), false);
        }
    }
    let registered_alive = |id: &BrokerId| group.is_registered(*id) && alive.contains_key(id);
    let clean: Vec<BrokerId> = group
        .sync_state_set
        .iter()
        .copied()
        .filter(registered_alive)
        .collect();
    let unclean: Vec<BrokerId> = if allow_unclean {
        alive.keys().copied().filter(registered_alive).collect()
    } else {
        Vec::new()
    };
    // The master itself asks: it restarted, and its log may have lost a tail a slave of
    // the set holds. The best live member of the set by its log wins, under a new epoch,
    // whoever it is: the master again if none is ahead of it.
    if let ElectTrigger::Broker(id) = trigger {
        if group.master == Some(id) && clean.contains(&id) {
            if let Choice::Elect(best) = choose(None, None, &clean, alive) {
                return propose(Some(best), false);
            }
        }
    }
    let designated = match trigger {
        ElectTrigger::Designated(id) => Some(id),
        _ => None,
    };
    match choose(group.master, designated, &clean, alive) {
        Choice::Keep(master) => return ElectionOutcome::MasterStillExists { master },
        Choice::Elect(winner) => return propose(Some(winner), false),
        Choice::None => {}
    }
    match choose(group.master, designated, &unclean, alive) {
        Choice::Keep(master) => ElectionOutcome::MasterStillExists { master },
        Choice::Elect(winner) => propose(Some(winner), true),
        Choice::None => nobody(broker_name, group, trigger, designated, propose),
    }
}

/// The outcome when no candidate can win.
fn nobody(
    broker_name: &str,
    group: &GroupState,
    trigger: ElectTrigger,
    designated: Option<BrokerId>,
    propose: impl Fn(Option<BrokerId>, bool) -> ElectionOutcome,
) -> ElectionOutcome {
    if trigger == ElectTrigger::Controller && group.master.is_some() {
        return propose(None, false);
    }
    let message = match designated {
        Some(id) => format!(
            "{broker_name}: designated broker {id} is not alive or not in the SyncStateSet {:?}",
            group.sync_state_set
        ),
        None => format!(
            "{broker_name}: no alive broker of the SyncStateSet {:?} can become master",
            group.sync_state_set
        ),
    };
    let code = if trigger == ElectTrigger::Controller {
        code::CONTROLLER_MASTER_NOT_AVAILABLE
    } else {
        code::CONTROLLER_ELECT_MASTER_FAILED
    };
    ElectionOutcome::Failed { code, message }
}

enum Choice {
    Keep(BrokerId),
    Elect(BrokerId),
    None,
}

/// One pass of the policy over `candidates` (Java's `tryElect`).
fn choose(
    master: Option<BrokerId>,
    designated: Option<BrokerId>,
    candidates: &[BrokerId],
    facts: &BTreeMap<BrokerId, BrokerFacts>,
) -> Choice {
    if candidates.is_empty() {
        return Choice::None;
    }
    if let Some(master) = master.filter(|m| candidates.contains(m)) {
        if designated.is_none_or(|id| id == master) {
            return Choice::Keep(master);
        }
    }
    if let Some(id) = designated {
        return if candidates.contains(&id) {
            Choice::Elect(id)
        } else {
            Choice::None
        };
    }
    let best = candidates.iter().copied().min_by_key(|id| {
        let fact = facts[id];
        (
            std::cmp::Reverse(fact.epoch),
            std::cmp::Reverse(fact.max_offset),
            fact.election_priority,
            *id,
        )
    });
    best.map_or(Choice::None, Choice::Elect)
}

#[cfg(test)]
#[path = "election_tests.rs"]
mod tests;
