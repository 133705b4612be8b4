//! The controller's replicated state: per broker group (`brokerName`), its brokers, its
//! master and the master's epoch, its SyncStateSet and that set's epoch (RocketMQ's
//! `BrokerReplicaInfo` plus `SyncStateInfo`, reference-2 §6.1).
//!
//! This module owns the shape and the invariants; only [`super::apply`] changes a state,
//! one committed command at a time. Invariants, asserted after every change (always on)
//! and checked on every restored snapshot:
//! - the master, when there is one, is a registered broker and a member of the set;
//! - every member of the set is a registered broker;
//! - broker ids are at least [`FIRST_BROKER_ID`] and below `next_broker_id`;
//! - epochs are never negative, and never go down: a group removed by a clean leaves its
//!   epochs behind ([`ReplicasInfo::retired_epochs`]) and a group re-created under the
//!   same name continues from them, so a broker that kept an epoch file from the old
//!   group never sees an epoch it already passed (RocketMQ restarts at 0 there).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A controller broker id (Java `Long`): stable per broker, assigned by the controller.
pub type BrokerId = i64;

/// The first id of a group (`MixAll.FIRST_BROKER_CONTROLLER_ID`); 0 is the name
/// server's "master" id, never a controller id.
pub const FIRST_BROKER_ID: BrokerId = 1;

/// One registered broker of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerEntry {
    /// The broker's address as it last registered (`ip:port`).
    pub address: String,
    /// The code the broker applied its id with (`address;timestamp` in Java brokers): a
    /// re-application with the same code is the same broker retrying.
    pub register_check_code: String,
    /// The heartbeat timeout the broker said it runs with when it registered
    /// (`heartbeatTimeoutMills`, which ringmq brokers add to CONTROLLER_REGISTER_BROKER;
    /// Java brokers do not): its write lease is shorter. A new leader that has not heard
    /// from a master counts it dead this long after its leadership began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_ms: Option<u64>,
}

/// One broker group's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupState {
    pub cluster_name: String,
    pub brokers: BTreeMap<BrokerId, BrokerEntry>,
    /// The master, if the group has one.
    pub master: Option<BrokerId>,
    /// Raised by every election, including one that leaves the group without a master.
    pub master_epoch: i32,
    /// The replicas in sync with the master (ids); the only clean election candidates.
    pub sync_state_set: BTreeSet<BrokerId>,
    /// Raised by every change of the set.
    pub sync_state_set_epoch: i32,
    /// The id GET_NEXT_BROKER_ID answers.
    pub next_broker_id: BrokerId,
}

/// The epochs a group had, kept when the group is removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEpochs {
    pub master_epoch: i32,
    pub sync_state_set_epoch: i32,
}

impl GroupState {
    /// A group with no broker yet, continuing from `epochs` (zero for a new name).
    pub fn new(cluster_name: &str, epochs: GroupEpochs) -> GroupState {
        GroupState {
            cluster_name: cluster_name.to_owned(),
            brokers: BTreeMap::new(),
            master: None,
            master_epoch: epochs.master_epoch,
            sync_state_set: BTreeSet::new(),
            sync_state_set_epoch: epochs.sync_state_set_epoch,
            next_broker_id: FIRST_BROKER_ID,
        }
    }

    pub fn epochs(&self) -> GroupEpochs {
        GroupEpochs {
            master_epoch: self.master_epoch,
            sync_state_set_epoch: self.sync_state_set_epoch,
        }
    }

    pub fn is_registered(&self, id: BrokerId) -> bool {
        self.brokers.contains_key(&id)
    }

    /// The address of broker `id`, if it is registered.
    pub fn address(&self, id: BrokerId) -> Option<&str> {
        self.brokers.get(&id).map(|entry| entry.address.as_str())
    }

    /// The master's address, if there is a master.
    pub fn master_address(&self) -> Option<&str> {
        self.master.and_then(|id| self.address(id))
    }

    /// Every broker id with its address (the `brokerAddrs` of a `BrokerMemberGroup`).
    pub fn member_addresses(&self) -> BTreeMap<BrokerId, String> {
        self.brokers
            .iter()
            .map(|(&id, entry)| (id, entry.address.clone()))
            .collect()
    }

    /// The first invariant this state breaks, described with its values; `None` if it
    /// keeps them all.
    pub fn invariant_violation(&self, name: &str) -> Option<String> {
        if let Some(master) = self.master {
            if !self.is_registered(master) || !self.sync_state_set.contains(&master) {
                return Some(format!(
                    "group {name}: master {master} must be registered and in the SyncStateSet \
                     {:?} (brokers {:?})",
                    self.sync_state_set,
                    self.brokers.keys()
                ));
            }
        }
        if let Some(stray) = self
            .sync_state_set
            .iter()
            .find(|id| !self.is_registered(**id))
        {
            return Some(format!(
                "group {name}: SyncStateSet member {stray} is not a registered broker ({:?})",
                self.brokers.keys()
            ));
        }
        let ids_ok = self
            .brokers
            .keys()
            .all(|&id| id >= FIRST_BROKER_ID && id < self.next_broker_id);
        if !ids_ok {
            return Some(format!(
                "group {name}: broker ids {:?} must be in [{FIRST_BROKER_ID}, {})",
                self.brokers.keys(),
                self.next_broker_id
            ));
        }
        if self.master_epoch < 0 || self.sync_state_set_epoch < 0 {
            return Some(format!(
                "group {name}: negative epochs (master {}, SyncStateSet {})",
                self.master_epoch, self.sync_state_set_epoch
            ));
        }
        None
    }
}

/// Every broker group the controller knows, by `brokerName`, and the epochs of groups
/// that were removed. Ordered maps, so the snapshot bytes are the same on every node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicasInfo {
    pub(super) groups: BTreeMap<String, GroupState>,
    /// The last epochs of each removed group; one entry per name ever cleaned, taken back
    /// when the name registers again.
    pub(super) retired_epochs: BTreeMap<String, GroupEpochs>,
}

impl ReplicasInfo {
    pub fn new() -> ReplicasInfo {
        ReplicasInfo::default()
    }

    pub fn group(&self, broker_name: &str) -> Option<&GroupState> {
        self.groups.get(broker_name)
    }

    /// Every group, by name.
    pub fn groups(&self) -> &BTreeMap<String, GroupState> {
        &self.groups
    }

    /// Whether `(cluster_name, broker_name, id)` is a registered broker.
    pub fn is_registered(&self, cluster_name: &str, broker_name: &str, id: BrokerId) -> bool {
        self.group(broker_name)
            .is_some_and(|group| group.cluster_name == cluster_name && group.is_registered(id))
    }

    /// How many brokers are registered over all groups.
    pub fn registered_brokers(&self) -> usize {
        self.groups.values().map(|group| group.brokers.len()).sum()
    }

    /// The id GET_NEXT_BROKER_ID answers for `broker_name`: the group's next id, or the
    /// first id for a group not registered (Java's `getNextBrokerId`).
    pub fn next_broker_id(&self, broker_name: &str) -> BrokerId {
        self.group(broker_name)
            .map_or(FIRST_BROKER_ID, |group| group.next_broker_id)
    }

    /// The first invariant any group breaks.
    pub fn invariant_violation(&self) -> Option<String> {
        self.groups
            .iter()
            .find_map(|(name, group)| group.invariant_violation(name))
    }

    /// Panics, naming the values, if any group breaks an invariant.
    pub fn assert_invariants(&self) {
        if let Some(violation) = self.invariant_violation() {
            panic!("controller state invariant broken: {violation}");
        }
    }
}
