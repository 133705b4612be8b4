//! The broker's side of the controller wire (reference-2 §6.2): the requests a broker in
//! controller mode sends, built with the header fields RocketMQ's broker sends, and the
//! group view it reads from the answers. Pure: the calls are made by
//! `node::controller_mode`.
//!
//! Every request here is parsed by the controller's own [`super::headers`], and every
//! view is read from answers [`super::responses`] builds; the tests hold the two sides
//! to each other.

use std::collections::BTreeSet;

use super::bodies::{ElectMasterResponseBody, SyncStateSetBody};
use super::state::BrokerId;
use crate::remoting::codes::request as code;
use crate::remoting::command::{ExtFields, FieldError, RemotingCommand};

/// Who a broker is in its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerName {
    pub cluster_name: String,
    pub broker_name: String,
}

fn request(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
    let fields: ExtFields = fields.iter().copied().collect();
    RemotingCommand::request(code, fields)
}

impl BrokerName {
    /// CONTROLLER_GET_NEXT_BROKER_ID (1012).
    pub fn next_broker_id(&self) -> RemotingCommand {
        request(code::CONTROLLER_GET_NEXT_BROKER_ID, &self.names())
    }

    /// CONTROLLER_APPLY_BROKER_ID (1013): `check_code` is RocketMQ's `registerCheckCode`,
    /// the broker's address, `;` and a number of its own that tells its apply from another
    /// broker's for the same id.
    pub fn apply_broker_id(&self, id: BrokerId, check_code: &str) -> RemotingCommand {
        let id = id.to_string();
        let mut fields = self.names();
        fields.extend([
            ("appliedBrokerId", id.as_str()),
            ("registerCheckCode", check_code),
        ]);
        request(code::CONTROLLER_APPLY_BROKER_ID, &fields)
    }

    /// CONTROLLER_REGISTER_BROKER (1003), with ringmq's `heartbeatTimeoutMills`: the
    /// controllers keep it, so a new leader knows how long this broker's lease may outlast
    /// its last answered beat.
    pub fn register(
        &self,
        id: BrokerId,
        address: &str,
        heartbeat_timeout_ms: u64,
        now_ms: u64,
    ) -> RemotingCommand {
        let (id, now) = (id.to_string(), now_ms.to_string());
        let timeout = heartbeat_timeout_ms.to_string();
        let mut fields = self.names();
        fields.extend([
            ("brokerId", id.as_str()),
            ("brokerAddress", address),
            ("heartbeatTimeoutMills", timeout.as_str()),
            ("invokeTime", now.as_str()),
        ]);
        request(code::CONTROLLER_REGISTER_BROKER, &fields)
    }

    /// CONTROLLER_ELECT_MASTER (1002) asked by broker `id` of the group, not designated.
    pub fn elect(&self, id: BrokerId, now_ms: u64) -> RemotingCommand {
        let (id, now) = (id.to_string(), now_ms.to_string());
        let mut fields = self.names();
        fields.extend([
            ("brokerId", id.as_str()),
            ("designateElect", "false"),
            ("invokeTime", now.as_str()),
        ]);
        request(code::CONTROLLER_ELECT_MASTER, &fields)
    }

    /// CONTROLLER_GET_REPLICA_INFO (1004).
    pub fn replica_info(&self) -> RemotingCommand {
        request(
            code::CONTROLLER_GET_REPLICA_INFO,
            &[("brokerName", self.broker_name.as_str())],
        )
    }

    /// CONTROLLER_ALTER_SYNC_STATE_SET (1001), from master `master` under `master_epoch`:
    /// the new set, with the set epoch the master last saw.
    pub fn alter_sync_state_set(
        &self,
        master: BrokerId,
        master_epoch: i32,
        set: &BTreeSet<BrokerId>,
        set_epoch: i32,
    ) -> RemotingCommand {
        let (master, epoch) = (master.to_string(), master_epoch.to_string());
        let fields = [
            ("brokerName", self.broker_name.as_str()),
            ("masterBrokerId", master.as_str()),
            ("masterEpoch", epoch.as_str()),
        ];
        let body = SyncStateSetBody {
            sync_state_set: set.clone(),
            sync_state_set_epoch: set_epoch,
        };
        request(code::CONTROLLER_ALTER_SYNC_STATE_SET, &fields).with_body(body.encode())
    }

    fn names(&self) -> Vec<(&str, &str)> {
        vec![
            ("clusterName", self.cluster_name.as_str()),
            ("brokerName", self.broker_name.as_str()),
        ]
    }
}

/// What a broker tells the controller with each BROKER_HEARTBEAT (904).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatFacts {
    pub id: BrokerId,
    pub address: String,
    /// The last epoch its log holds (the highest over its shards).
    pub epoch: i32,
    /// Its log's end (the sum over its shards, within each shard: what ranks candidates).
    pub max_offset: i64,
    pub confirm_offset: i64,
    pub timeout_ms: u64,
    pub election_priority: i32,
}

impl BrokerName {
    /// BROKER_HEARTBEAT (904).
    pub fn heartbeat(&self, facts: &HeartbeatFacts) -> RemotingCommand {
        let values = [
            facts.id.to_string(),
            facts.epoch.to_string(),
            facts.max_offset.to_string(),
            facts.confirm_offset.to_string(),
            facts.timeout_ms.to_string(),
            facts.election_priority.to_string(),
        ];
        let mut fields = self.names();
        fields.extend([
            ("brokerAddr", facts.address.as_str()),
            ("brokerId", values[0].as_str()),
            ("epoch", values[1].as_str()),
            ("maxOffset", values[2].as_str()),
            ("confirmOffset", values[3].as_str()),
            ("heartbeatTimeoutMills", values[4].as_str()),
            ("electionPriority", values[5].as_str()),
        ]);
        request(code::BROKER_HEARTBEAT, &fields)
    }
}

/// A group's master and SyncStateSet as an answer tells them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GroupView {
    /// The master, when the answer names one (a register answer leaves out a dead one).
    pub master: Option<BrokerId>,
    pub master_address: Option<String>,
    pub master_epoch: i32,
    pub sync_state_set: BTreeSet<BrokerId>,
    pub sync_state_set_epoch: i32,
}

/// Why an answer does not give a view.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Body(#[from] super::bodies::BodyError),
}

impl GroupView {
    /// From the answer to CONTROLLER_REGISTER_BROKER or CONTROLLER_GET_REPLICA_INFO (the
    /// set and its epoch in a SyncStateSet body), or a NOTIFY_BROKER_ROLE_CHANGED.
    pub fn read(answer: &RemotingCommand) -> Result<GroupView, ViewError> {
        let set = SyncStateSetBody::decode(&answer.body)?;
        let mut view = GroupView::master_fields(answer)?;
        view.sync_state_set = set.sync_state_set;
        view.sync_state_set_epoch = set.sync_state_set_epoch;
        Ok(view)
    }

    /// From the answer to CONTROLLER_ELECT_MASTER (the set in an
    /// `ElectMasterResponseBody`, its epoch in the header).
    pub fn read_election(answer: &RemotingCommand) -> Result<GroupView, ViewError> {
        let body = ElectMasterResponseBody::decode(&answer.body)?;
        let mut view = GroupView::master_fields(answer)?;
        view.sync_state_set = body.sync_state_set;
        view.sync_state_set_epoch = answer.opt_i32("syncStateSetEpoch")?.unwrap_or(0);
        Ok(view)
    }

    fn master_fields(answer: &RemotingCommand) -> Result<GroupView, ViewError> {
        Ok(GroupView {
            master: answer.opt_i64("masterBrokerId")?,
            master_address: answer.opt_str("masterAddress").map(str::to_owned),
            master_epoch: answer.opt_i32("masterEpoch")?.unwrap_or(0),
            ..GroupView::default()
        })
    }
}

#[cfg(test)]
#[path = "broker_calls_tests.rs"]
mod tests;
