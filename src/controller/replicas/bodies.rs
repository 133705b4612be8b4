//! The JSON bodies of the controller's requests and responses, in the shapes of
//! RocketMQ's `SyncStateSet`, `ElectMasterResponseBody` (with `BrokerMemberGroup`) and
//! `BrokerReplicasInfo` (`R/protocol/body/*`).
//!
//! Bodies are read through [`crate::remoting::fastjson`], which also takes fastjson's
//! unquoted integer keys (`{"brokerAddrs":{1:"..."}}`); they are written as standard JSON
//! (integer keys quoted, which fastjson reads back as numbers), fields in fastjson's
//! alphabetical order, absent values left out as fastjson leaves out nulls.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::state::{BrokerId, GroupState, ReplicasInfo};
use crate::remoting::fastjson;

/// Why a body cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad {what} body: {reason}")]
pub struct BodyError {
    pub what: &'static str,
    pub reason: String,
}

/// Reads a body of type `T`, in standard or fastjson form.
fn read<T: DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<T, BodyError> {
    if body.is_empty() {
        return Err(BodyError {
            what,
            reason: "the body is empty".to_owned(),
        });
    }
    let value = fastjson::parse(body).map_err(|error| BodyError {
        what,
        reason: error.to_string(),
    })?;
    serde_json::from_value(value).map_err(|error| BodyError {
        what,
        reason: error.to_string(),
    })
}

fn write(value: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(value).expect("a controller body always encodes as JSON")
}

/// `SyncStateSet`: `{"syncStateSet":[1,2],"syncStateSetEpoch":3}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncStateSetBody {
    pub sync_state_set: BTreeSet<BrokerId>,
    pub sync_state_set_epoch: i32,
}

impl SyncStateSetBody {
    pub fn of(group: &GroupState) -> SyncStateSetBody {
        SyncStateSetBody {
            sync_state_set: group.sync_state_set.clone(),
            sync_state_set_epoch: group.sync_state_set_epoch,
        }
    }

    pub fn decode(body: &[u8]) -> Result<SyncStateSetBody, BodyError> {
        read("SyncStateSet", body)
    }

    pub fn encode(&self) -> Vec<u8> {
        write(self)
    }
}

/// `BrokerMemberGroup`: a group's brokers by id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerMemberGroup {
    pub broker_addrs: BTreeMap<BrokerId, String>,
    pub broker_name: String,
    pub cluster: String,
}

/// `ElectMasterResponseBody`: the group's members and the new SyncStateSet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElectMasterResponseBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_member_group: Option<BrokerMemberGroup>,
    pub sync_state_set: BTreeSet<BrokerId>,
}

impl ElectMasterResponseBody {
    pub fn decode(body: &[u8]) -> Result<ElectMasterResponseBody, BodyError> {
        read("ElectMasterResponseBody", body)
    }

    pub fn encode(&self) -> Vec<u8> {
        write(self)
    }
}

/// The body of CONTROLLER_GET_SYNC_STATE_DATA's request: the broker names asked about.
pub fn decode_broker_names(body: &[u8]) -> Result<Vec<String>, BodyError> {
    read("broker name list", body)
}

pub fn encode_broker_names(names: &[String]) -> Vec<u8> {
    write(&names)
}

/// `BrokerReplicasInfo.ReplicaIdentity`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaIdentity {
    pub alive: bool,
    pub broker_address: String,
    pub broker_id: BrokerId,
    pub broker_name: String,
}

/// `BrokerReplicasInfo.ReplicasInfo`: one group's replicas, in sync or not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupReplicas {
    pub in_sync_replicas: Vec<ReplicaIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_broker_id: Option<BrokerId>,
    pub master_epoch: i32,
    pub not_in_sync_replicas: Vec<ReplicaIdentity>,
    pub sync_state_set_epoch: i32,
}

/// `BrokerReplicasInfo`: the answer to CONTROLLER_GET_SYNC_STATE_DATA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerReplicasInfo {
    pub replicas_info_table: BTreeMap<String, GroupReplicas>,
}

impl BrokerReplicasInfo {
    /// The replicas of each named group the state knows (unknown names are left out, as
    /// Java does); `is_alive(cluster, broker_name, id)` is the leader's liveness.
    pub fn of(
        state: &ReplicasInfo,
        broker_names: &[String],
        is_alive: impl Fn(&str, &str, BrokerId) -> bool,
    ) -> BrokerReplicasInfo {
        let mut table = BTreeMap::new();
        for name in broker_names {
            let Some(group) = state.group(name) else {
                continue;
            };
            let (mut in_sync, mut not_in_sync) = (Vec::new(), Vec::new());
            for (&id, entry) in &group.brokers {
                let replica = ReplicaIdentity {
                    alive: is_alive(&group.cluster_name, name, id),
                    broker_address: entry.address.clone(),
                    broker_id: id,
                    broker_name: name.clone(),
                };
                if group.sync_state_set.contains(&id) {
                    in_sync.push(replica);
                } else {
                    not_in_sync.push(replica);
                }
            }
            let replicas = GroupReplicas {
                in_sync_replicas: in_sync,
                master_address: group.master_address().map(str::to_owned),
                master_broker_id: group.master,
                master_epoch: group.master_epoch,
                not_in_sync_replicas: not_in_sync,
                sync_state_set_epoch: group.sync_state_set_epoch,
            };
            table.insert(name.clone(), replicas);
        }
        BrokerReplicasInfo {
            replicas_info_table: table,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        write(self)
    }

    pub fn decode(body: &[u8]) -> Result<BrokerReplicasInfo, BodyError> {
        read("BrokerReplicasInfo", body)
    }
}
