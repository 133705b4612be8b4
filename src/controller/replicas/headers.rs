//! The controller's request headers (RocketMQ's `R/protocol/header/controller/**`,
//! `NotifyBrokerRoleChangedRequestHeader` and `BrokerHeartbeatRequestHeader`) parsed from
//! a [`RemotingCommand`]'s extFields, field names exactly as the Java classes spell them.
//! The responses are built in [`super::responses`].
//!
//! A field Java marks `@CFNotNull` or that the controller cannot act without is required
//! and its absence is an error naming it; a field Java fills with a default when absent
//! (`brokerId` -1 and `designateElect` false in ELECT_MASTER, `isCleanLivingBroker`
//! false) takes that default here; `invokeTime` is read when present and never needed.

use std::collections::BTreeSet;

use super::bodies::{self, BodyError, SyncStateSetBody};
use super::election::ElectTrigger;
use super::state::BrokerId;
use crate::remoting::command::{FieldError, RemotingCommand};

/// Why a controller request cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error(transparent)]
    Body(#[from] BodyError),
}

/// CONTROLLER_ALTER_SYNC_STATE_SET (1001): header plus the proposed set in the body, whose
/// `syncStateSetEpoch` is the epoch the master last saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterSyncStateSetRequest {
    pub broker_name: String,
    pub master_broker_id: BrokerId,
    pub master_epoch: i32,
    pub new_sync_state_set: SyncStateSetBody,
}

impl AlterSyncStateSetRequest {
    pub fn parse(request: &RemotingCommand) -> Result<AlterSyncStateSetRequest, RequestError> {
        Ok(AlterSyncStateSetRequest {
            broker_name: request.get_str("brokerName")?.to_owned(),
            master_broker_id: request.get_i64("masterBrokerId")?,
            master_epoch: request.get_i32("masterEpoch")?,
            new_sync_state_set: SyncStateSetBody::decode(&request.body)?,
        })
    }
}

/// CONTROLLER_ELECT_MASTER (1002).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectMasterRequest {
    pub cluster_name: String,
    pub broker_name: String,
    /// -1 when the controller itself triggers the election.
    pub broker_id: BrokerId,
    pub designate_elect: bool,
}

impl ElectMasterRequest {
    pub fn parse(request: &RemotingCommand) -> Result<ElectMasterRequest, RequestError> {
        Ok(ElectMasterRequest {
            cluster_name: request.opt_str("clusterName").unwrap_or("").to_owned(),
            broker_name: request.get_str("brokerName")?.to_owned(),
            broker_id: request.opt_i64("brokerId")?.unwrap_or(-1),
            designate_elect: request.opt_bool("designateElect")?.unwrap_or(false),
        })
    }

    /// Who asked, for [`super::election::elect`].
    pub fn trigger(&self) -> ElectTrigger {
        match (self.broker_id, self.designate_elect) {
            (id, _) if id < 0 => ElectTrigger::Controller,
            (id, true) => ElectTrigger::Designated(id),
            (id, false) => ElectTrigger::Broker(id),
        }
    }
}

/// CONTROLLER_REGISTER_BROKER (1003).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterBrokerRequest {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_id: BrokerId,
    pub broker_address: String,
    /// ringmq's addition (`heartbeatTimeoutMills`, as the heartbeat names it): the
    /// broker's heartbeat timeout, kept in the group's state.
    pub heartbeat_timeout_ms: Option<u64>,
}

impl RegisterBrokerRequest {
    pub fn parse(request: &RemotingCommand) -> Result<RegisterBrokerRequest, RequestError> {
        Ok(RegisterBrokerRequest {
            cluster_name: request.get_str("clusterName")?.to_owned(),
            broker_name: request.get_str("brokerName")?.to_owned(),
            broker_id: request.get_i64("brokerId")?,
            broker_address: request.get_str("brokerAddress")?.to_owned(),
            heartbeat_timeout_ms: positive_millis(request, "heartbeatTimeoutMills")?,
        })
    }
}

/// An optional field of milliseconds that must be above zero when present.
fn positive_millis(
    request: &RemotingCommand,
    field: &'static str,
) -> Result<Option<u64>, RequestError> {
    match request.opt_i64(field)? {
        None => Ok(None),
        Some(ms) if ms > 0 => Ok(Some(ms.unsigned_abs())),
        Some(ms) => Err(RequestError::Field(FieldError::Invalid {
            field: field.to_owned(),
            value: ms.to_string(),
            expected: "positive number of milliseconds",
        })),
    }
}

/// CONTROLLER_GET_REPLICA_INFO (1004): the group asked about.
pub fn parse_get_replica_info(request: &RemotingCommand) -> Result<String, RequestError> {
    Ok(request.get_str("brokerName")?.to_owned())
}

/// CONTROLLER_GET_SYNC_STATE_DATA (1006): the broker names in the body (a JSON list).
pub fn parse_get_sync_state_data(request: &RemotingCommand) -> Result<Vec<String>, RequestError> {
    Ok(bodies::decode_broker_names(&request.body)?)
}

/// NOTIFY_BROKER_ROLE_CHANGED (1008), controller to broker: the group's master and epochs,
/// the SyncStateSet in the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleChangedNotice {
    pub master_address: Option<String>,
    pub master_broker_id: Option<BrokerId>,
    pub master_epoch: i32,
    pub sync_state_set_epoch: i32,
    pub sync_state_set: BTreeSet<BrokerId>,
}

impl RoleChangedNotice {
    pub fn parse(request: &RemotingCommand) -> Result<RoleChangedNotice, RequestError> {
        let body = SyncStateSetBody::decode(&request.body)?;
        Ok(RoleChangedNotice {
            master_address: request.opt_str("masterAddress").map(str::to_owned),
            master_broker_id: request.opt_i64("masterBrokerId")?,
            master_epoch: request.get_i32("masterEpoch")?,
            sync_state_set_epoch: request.get_i32("syncStateSetEpoch")?,
            sync_state_set: body.sync_state_set,
        })
    }
}

/// CLEAN_BROKER_DATA (1011).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanBrokerDataRequest {
    pub cluster_name: Option<String>,
    pub broker_name: String,
    /// `brokerControllerIdsToClean` (`"1;2"`); `None` cleans the whole group.
    pub broker_ids: Option<BTreeSet<BrokerId>>,
    pub is_clean_living_broker: bool,
}

impl CleanBrokerDataRequest {
    pub fn parse(request: &RemotingCommand) -> Result<CleanBrokerDataRequest, RequestError> {
        let ids = match request.opt_str("brokerControllerIdsToClean") {
            Some(text) if !text.trim().is_empty() => Some(parse_id_list(text)?),
            _ => None,
        };
        Ok(CleanBrokerDataRequest {
            cluster_name: request.opt_str("clusterName").map(str::to_owned),
            broker_name: request.get_str("brokerName")?.to_owned(),
            broker_ids: ids,
            is_clean_living_broker: request.opt_bool("isCleanLivingBroker")?.unwrap_or(false),
        })
    }
}

/// `"1;2;3"` as ids; any part that is not an integer is an error naming the field.
fn parse_id_list(text: &str) -> Result<BTreeSet<BrokerId>, FieldError> {
    text.split(';')
        .map(|part| {
            part.trim().parse().map_err(|_| FieldError::Invalid {
                field: "brokerControllerIdsToClean".to_owned(),
                value: text.to_owned(),
                expected: "`;`-separated list of broker ids",
            })
        })
        .collect()
}

/// CONTROLLER_GET_NEXT_BROKER_ID (1012).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetNextBrokerIdRequest {
    pub cluster_name: String,
    pub broker_name: String,
}

impl GetNextBrokerIdRequest {
    pub fn parse(request: &RemotingCommand) -> Result<GetNextBrokerIdRequest, RequestError> {
        Ok(GetNextBrokerIdRequest {
            cluster_name: request.get_str("clusterName")?.to_owned(),
            broker_name: request.get_str("brokerName")?.to_owned(),
        })
    }
}

/// CONTROLLER_APPLY_BROKER_ID (1013).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyBrokerIdRequest {
    pub cluster_name: String,
    pub broker_name: String,
    pub applied_broker_id: BrokerId,
    /// `address;timestamp` from Java brokers.
    pub register_check_code: String,
}

impl ApplyBrokerIdRequest {
    pub fn parse(request: &RemotingCommand) -> Result<ApplyBrokerIdRequest, RequestError> {
        Ok(ApplyBrokerIdRequest {
            cluster_name: request.get_str("clusterName")?.to_owned(),
            broker_name: request.get_str("brokerName")?.to_owned(),
            applied_broker_id: request.get_i64("appliedBrokerId")?,
            register_check_code: request.get_str("registerCheckCode")?.to_owned(),
        })
    }

    /// The broker's address: the check code up to its first `;` (as Java's controller
    /// reads it).
    pub fn address(&self) -> &str {
        self.register_check_code
            .split(';')
            .next()
            .unwrap_or_default()
    }
}

/// BROKER_HEARTBEAT (904). Java reads every fact as nullable and fills the missing ones
/// ([`super::liveness`] does the same); `brokerId` may be absent on the wire, and such a
/// heartbeat is refused there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerHeartbeatRequest {
    pub cluster_name: String,
    pub broker_addr: String,
    pub broker_name: String,
    pub broker_id: Option<BrokerId>,
    pub epoch: Option<i32>,
    pub max_offset: Option<i64>,
    pub confirm_offset: Option<i64>,
    pub heartbeat_timeout_mills: Option<i64>,
    pub election_priority: Option<i32>,
}

impl BrokerHeartbeatRequest {
    pub fn parse(request: &RemotingCommand) -> Result<BrokerHeartbeatRequest, RequestError> {
        Ok(BrokerHeartbeatRequest {
            cluster_name: request.get_str("clusterName")?.to_owned(),
            broker_addr: request.get_str("brokerAddr")?.to_owned(),
            broker_name: request.get_str("brokerName")?.to_owned(),
            broker_id: request.opt_i64("brokerId")?,
            epoch: request.opt_i32("epoch")?,
            max_offset: request.opt_i64("maxOffset")?,
            confirm_offset: request.opt_i64("confirmOffset")?,
            heartbeat_timeout_mills: request.opt_i64("heartbeatTimeoutMills")?,
            election_priority: request.opt_i32("electionPriority")?,
        })
    }
}

#[cfg(test)]
#[path = "headers_tests.rs"]
mod tests;
