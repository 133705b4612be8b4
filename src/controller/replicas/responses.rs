//! The controller's responses (and its one request to brokers, NOTIFY_BROKER_ROLE_CHANGED)
//! as [`RemotingCommand`]s: response header fields named as RocketMQ's response header
//! classes name them, absent values left out as Java leaves out nulls, bodies from
//! [`super::bodies`].

use super::bodies::{BrokerMemberGroup, ElectMasterResponseBody, SyncStateSetBody};
use super::commands::Response;
use super::state::{BrokerId, GroupState};
use crate::remoting::codes::{request as request_code, response as code};
use crate::remoting::command::{ExtFields, RemotingCommand, ONEWAY_FLAG};

/// A group's master as the response headers carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterView {
    pub master_broker_id: Option<BrokerId>,
    pub master_address: Option<String>,
    pub master_epoch: i32,
    pub sync_state_set_epoch: i32,
}

impl MasterView {
    pub fn of(group: &GroupState) -> MasterView {
        MasterView {
            master_broker_id: group.master,
            master_address: group.master_address().map(str::to_owned),
            master_epoch: group.master_epoch,
            sync_state_set_epoch: group.sync_state_set_epoch,
        }
    }

    /// Writes `masterBrokerId`, `masterAddress` (each when present), `masterEpoch` and,
    /// when `with_set_epoch`, `syncStateSetEpoch`.
    fn write(&self, command: &mut RemotingCommand, with_set_epoch: bool) {
        if let Some(id) = self.master_broker_id {
            command.put_ext("masterBrokerId", id);
        }
        if let Some(address) = &self.master_address {
            command.put_ext("masterAddress", address);
        }
        command.put_ext("masterEpoch", self.master_epoch);
        if with_set_epoch {
            command.put_ext("syncStateSetEpoch", self.sync_state_set_epoch);
        }
    }
}

/// A refusal: `code` with `message` as the remark.
pub fn refused(request: &RemotingCommand, code: i32, message: &str) -> RemotingCommand {
    RemotingCommand::response_to(request, code, Some(message.to_owned()))
}

fn success(request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(request, code::SUCCESS, None)
}

/// CONTROLLER_ALTER_SYNC_STATE_SET's answer from the applied command's response.
pub fn alter_sync_state_set(request: &RemotingCommand, applied: &Response) -> RemotingCommand {
    match applied {
        Response::SyncStateSetAltered {
            sync_state_set,
            sync_state_set_epoch,
        } => {
            let body = SyncStateSetBody {
                sync_state_set: sync_state_set.clone(),
                sync_state_set_epoch: *sync_state_set_epoch,
            };
            let mut response = success(request).with_body(body.encode());
            response.put_ext("newSyncStateSetEpoch", sync_state_set_epoch);
            response
        }
        other => unexpected(request, other),
    }
}

/// CONTROLLER_ELECT_MASTER's answer from the applied command's response: SUCCESS with a
/// new master, CONTROLLER_MASTER_NOT_AVAILABLE when the master was cleared (as Java).
pub fn elect_master(
    request: &RemotingCommand,
    broker_name: &str,
    applied: &Response,
) -> RemotingCommand {
    let Response::MasterElected {
        cluster_name,
        master,
        master_address,
        master_epoch,
        sync_state_set,
        sync_state_set_epoch,
        members,
    } = applied
    else {
        return unexpected(request, applied);
    };
    let (status, remark) = match master {
        Some(_) => (code::SUCCESS, None),
        None => (
            code::CONTROLLER_MASTER_NOT_AVAILABLE,
            Some("the master is down and no replica can take over".to_owned()),
        ),
    };
    let body = ElectMasterResponseBody {
        broker_member_group: Some(BrokerMemberGroup {
            broker_addrs: members.clone(),
            broker_name: broker_name.to_owned(),
            cluster: cluster_name.clone(),
        }),
        sync_state_set: sync_state_set.clone(),
    };
    let view = MasterView {
        master_broker_id: *master,
        master_address: master_address.clone(),
        master_epoch: *master_epoch,
        sync_state_set_epoch: *sync_state_set_epoch,
    };
    let mut response =
        RemotingCommand::response_to(request, status, remark).with_body(body.encode());
    view.write(&mut response, true);
    response
}

/// CONTROLLER_ELECT_MASTER's answer when the master stays (CONTROLLER_MASTER_STILL_EXIST,
/// with the current values, as Java answers).
pub fn master_still_exists(request: &RemotingCommand, group: &GroupState) -> RemotingCommand {
    let body = ElectMasterResponseBody {
        broker_member_group: None,
        sync_state_set: group.sync_state_set.clone(),
    };
    let remark = format!("the master {:?} is alive: no election needed", group.master);
    let mut response =
        RemotingCommand::response_to(request, code::CONTROLLER_MASTER_STILL_EXIST, Some(remark))
            .with_body(body.encode());
    MasterView::of(group).write(&mut response, true);
    response
}

/// CONTROLLER_REGISTER_BROKER's answer: the master's fields only when `master_alive`
/// (Java leaves them out for a dead master), the SyncStateSet in the body.
pub fn register_broker(
    request: &RemotingCommand,
    cluster_name: &str,
    broker_name: &str,
    group: &GroupState,
    master_alive: bool,
) -> RemotingCommand {
    let mut response = success(request).with_body(SyncStateSetBody::of(group).encode());
    response.put_ext("clusterName", cluster_name);
    response.put_ext("brokerName", broker_name);
    if master_alive && group.master.is_some() {
        MasterView::of(group).write(&mut response, true);
    }
    response
}

/// CONTROLLER_GET_REPLICA_INFO's answer.
pub fn replica_info(request: &RemotingCommand, group: &GroupState) -> RemotingCommand {
    let mut response = success(request).with_body(SyncStateSetBody::of(group).encode());
    MasterView::of(group).write(&mut response, false);
    response
}

/// CONTROLLER_GET_NEXT_BROKER_ID's answer.
pub fn next_broker_id(
    request: &RemotingCommand,
    cluster_name: &str,
    broker_name: &str,
    next: BrokerId,
) -> RemotingCommand {
    let mut response = success(request);
    response.put_ext("clusterName", cluster_name);
    response.put_ext("brokerName", broker_name);
    response.put_ext("nextBrokerId", next);
    response
}

/// CONTROLLER_APPLY_BROKER_ID's answer from the applied command's response.
pub fn apply_broker_id(
    request: &RemotingCommand,
    cluster_name: &str,
    broker_name: &str,
    applied: &Response,
) -> RemotingCommand {
    if !matches!(applied, Response::BrokerIdApplied { .. }) {
        return unexpected(request, applied);
    }
    let mut response = success(request);
    response.put_ext("clusterName", cluster_name);
    response.put_ext("brokerName", broker_name);
    response
}

/// CONTROLLER_GET_METADATA_INFO's answer (`GetMetaDataResponseHeader`).
pub fn metadata_info(
    request: &RemotingCommand,
    group: &str,
    leader_id: Option<&str>,
    leader_address: Option<&str>,
    is_leader: bool,
    peers: &str,
) -> RemotingCommand {
    let mut response = success(request);
    response.put_ext("group", group);
    if let Some(id) = leader_id {
        response.put_ext("controllerLeaderId", id);
    }
    if let Some(address) = leader_address {
        response.put_ext("controllerLeaderAddress", address);
    }
    response.put_ext("isLeader", is_leader);
    response.put_ext("peers", peers);
    response
}

/// NOTIFY_BROKER_ROLE_CHANGED (oneway), controller to each broker of `group`.
pub fn notify_broker_role_changed(group: &GroupState) -> RemotingCommand {
    let mut notice =
        RemotingCommand::request(request_code::NOTIFY_BROKER_ROLE_CHANGED, ExtFields::new())
            .with_body(SyncStateSetBody::of(group).encode());
    notice.flag |= ONEWAY_FLAG;
    MasterView::of(group).write(&mut notice, true);
    notice
}

/// A refusal answers as refused; any other response is not this request's (a caller's
/// bug, answered SYSTEM_ERROR naming it rather than a wrong success).
fn unexpected(request: &RemotingCommand, applied: &Response) -> RemotingCommand {
    match applied {
        Response::Refused { code, message } => refused(request, *code, message),
        other => refused(
            request,
            code::SYSTEM_ERROR,
            &format!("controller answered with an unexpected response: {other:?}"),
        ),
    }
}
