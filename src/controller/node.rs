//! One controller node's request handling: the brokers' controller requests (reference-2
//! §6.2) and the Raft RPCs between controllers, on the one port the node serves.
//!
//! What it owns: the Raft node ([`ControllerRaft`] over [`ReplicasInfo`]), the leader's
//! heartbeat table ([`BrokerLiveness`], not replicated), and which connection carries
//! which broker's heartbeats (so a closed connection counts as a dead broker at once, as
//! RocketMQ's controller counts it).
//!
//! Invariants:
//! - every change of a group goes through [`ControllerRaft::propose`]; a response that
//!   reports a change is built from the applied command's [`Response`], never from what
//!   the leader expected;
//! - broker requests other than the metadata query are answered by the leader only;
//!   another node answers CONTROLLER_NOT_LEADER naming the leader it knows;
//! - the heartbeat table is the view of this node's current term of leadership: it is
//!   emptied whenever the node is not the leader, and no broker is counted dead by a new
//!   leader before one heartbeat timeout of its leadership has passed (it has not heard
//!   from anyone yet).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::sync::Notify;

use super::config::ControllerConfig;
use super::elections::Connector;
use super::metrics::ControllerMetrics;
use super::raft::{is_raft_rpc, ControllerRaft, ProposeError};
use super::replicas::commands::{Command, Response};
use super::replicas::headers::{
    AlterSyncStateSetRequest, ApplyBrokerIdRequest, BrokerHeartbeatRequest, CleanBrokerDataRequest,
    ElectMasterRequest, GetNextBrokerIdRequest, RegisterBrokerRequest,
};
use super::replicas::liveness::{BrokerKey, BrokerLiveness, HeartbeatStatus, LivenessLimits};
use super::replicas::state::ReplicasInfo;
use super::replicas::{bodies, headers, responses};
use crate::clock::Clock;
use crate::remoting::codes::{request as req, response as code};
use crate::remoting::command::{bad_header, RemotingCommand};
use crate::server::connection::RequestHandler;

/// How recently a quorum must have acknowledged this leader for its answer to a heartbeat
/// to renew the broker's write lease. A deposed leader that does not know it yet answers
/// no later than this past its last acknowledgement, before which no other leader began;
/// the broker's lease is its heartbeat timeout less two beats, and a beat is at least
/// 50 ms apart (`brokerHeartbeatInterval`'s floor), so the lease ends before any leader
/// may count the broker dead. Raft's own heartbeats go every 50 ms.
pub const LEASE_CONFIRM: std::time::Duration = std::time::Duration::from_millis(100);

/// One controller node.
pub struct ControllerNode {
    pub(super) raft: ControllerRaft<ReplicasInfo>,
    pub(super) config: ControllerConfig,
    pub(super) clock: Clock,
    pub(super) liveness: RefCell<BrokerLiveness>,
    /// Which broker each connection's heartbeats came from.
    heartbeat_peers: RefCell<HashMap<SocketAddr, BrokerKey>>,
    /// When this node's current leadership began (clock ms); `None` when not the leader.
    pub(super) leader_since_ms: Cell<Option<u64>>,
    /// The term of that leadership.
    leader_term: Cell<Option<u64>>,
    /// Wakes the election scan before its interval (a broker's connection closed).
    pub(super) scan_now: Notify,
    /// How role changes reach brokers; `None` sends none (tests of the state alone).
    pub(super) notify_transport: Option<Rc<dyn Connector>>,
    /// What it answered and elected, and its state, for the metrics endpoint.
    pub metrics: ControllerMetrics,
}

impl ControllerNode {
    pub fn new(
        raft: ControllerRaft<ReplicasInfo>,
        config: ControllerConfig,
        clock: Clock,
        limits: LivenessLimits,
        notify_transport: Option<Rc<dyn Connector>>,
    ) -> ControllerNode {
        ControllerNode {
            raft,
            clock,
            liveness: RefCell::new(BrokerLiveness::new(limits)),
            heartbeat_peers: RefCell::new(HashMap::new()),
            leader_since_ms: Cell::new(None),
            leader_term: Cell::new(None),
            scan_now: Notify::new(),
            metrics: ControllerMetrics::new(&config.self_id),
            config,
            notify_transport,
        }
    }

    /// Sets the metrics' gauges from the node's state now.
    pub(super) fn refresh_metrics(&self) {
        let groups = self.raft.with_state(|state| state.groups().len());
        self.metrics.refresh(
            self.raft.leading_term(),
            self.raft.leader().is_some(),
            self.raft.applied_index().unwrap_or(0),
            groups,
            self.tracked_brokers(),
        );
    }

    pub fn raft(&self) -> &ControllerRaft<ReplicasInfo> {
        &self.raft
    }

    /// Brokers in the leader's heartbeat table (for metrics and the flood checks).
    pub fn tracked_brokers(&self) -> usize {
        self.liveness.borrow().len()
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.clock.elapsed_ms()
    }

    /// Whether this node leads now; keeps [`ControllerNode::leader_since_ms`] and the
    /// heartbeat table in step with it. A new term of leadership starts from an empty table
    /// even if no request saw the node lose the previous one: what it heard then may be
    /// stale, since brokers beat to another leader meanwhile.
    pub(super) fn check_leadership(&self) -> bool {
        let term = self.raft.leading_term();
        if term == self.leader_term.get() {
            return term.is_some();
        }
        match term {
            Some(term) => {
                tracing::info!(node = %self.config.self_id, term, "controller leadership began")
            }
            None => tracing::info!(node = %self.config.self_id, "controller leadership ended"),
        }
        self.leader_term.set(term);
        self.leader_since_ms.set(term.map(|_| self.now_ms()));
        *self.liveness.borrow_mut() = BrokerLiveness::new(self.liveness_limits());
        self.heartbeat_peers.borrow_mut().clear();
        term.is_some()
    }

    fn liveness_limits(&self) -> LivenessLimits {
        self.liveness.borrow().limits()
    }

    /// CONTROLLER_NOT_LEADER, naming the leader this node knows.
    fn not_leader(&self, request: &RemotingCommand) -> RemotingCommand {
        let leader = match self.raft.leader() {
            Some((id, addr)) => format!("the leader is node {id} at {addr}"),
            None => "no leader is known yet".to_owned(),
        };
        let message = format!(
            "controller {} is not the leader: {leader}",
            self.config.self_id
        );
        responses::refused(request, code::CONTROLLER_NOT_LEADER, &message)
    }

    /// Answers one broker or admin request, counting the answer.
    async fn answer(&self, request: RemotingCommand, peer: SocketAddr) -> RemotingCommand {
        let code = request.code;
        let answer = self.answer_request(request, peer).await;
        self.metrics.answered(code, answer.code);
        self.refresh_metrics();
        answer
    }

    async fn answer_request(&self, request: RemotingCommand, peer: SocketAddr) -> RemotingCommand {
        if request.code == req::CONTROLLER_GET_METADATA_INFO {
            return self.metadata(&request);
        }
        if !self.check_leadership() {
            return self.not_leader(&request);
        }
        let answer = match request.code {
            req::BROKER_HEARTBEAT => Ok(self.heartbeat(&request, peer)),
            req::CONTROLLER_GET_NEXT_BROKER_ID => self.next_broker_id(&request),
            req::CONTROLLER_APPLY_BROKER_ID => self.apply_broker_id(&request).await,
            req::CONTROLLER_REGISTER_BROKER => self.register_broker(&request).await,
            req::CONTROLLER_ELECT_MASTER => self.elect_master_request(&request).await,
            req::CONTROLLER_ALTER_SYNC_STATE_SET => self.alter_sync_state_set(&request).await,
            req::CONTROLLER_GET_REPLICA_INFO => self.replica_info(&request),
            req::CONTROLLER_GET_SYNC_STATE_DATA => self.sync_state_data(&request),
            req::CLEAN_BROKER_DATA => self.clean_broker_data(&request).await,
            other => Ok(RemotingCommand::response_to(
                &request,
                code::REQUEST_CODE_NOT_SUPPORTED,
                Some(format!(
                    "request code {other} is not served by a controller"
                )),
            )),
        };
        answer.unwrap_or_else(|error| bad_header(&request, error))
    }

    fn metadata(&self, request: &RemotingCommand) -> RemotingCommand {
        let leader = self.raft.leader();
        let leader_id = leader.and_then(|(id, _)| self.config.peers.get(id as usize));
        let peers: Vec<String> = self
            .config
            .peers
            .iter()
            .map(|p| format!("{}-{}", p.id, p.addr))
            .collect();
        responses::metadata_info(
            request,
            &self.config.group,
            leader_id.map(|p| p.id.as_str()),
            leader.map(|(_, addr)| addr.to_string()).as_deref(),
            self.check_leadership(),
            &peers.join(";"),
        )
    }

    fn heartbeat(&self, request: &RemotingCommand, peer: SocketAddr) -> RemotingCommand {
        let heartbeat = match BrokerHeartbeatRequest::parse(request) {
            Ok(heartbeat) => heartbeat,
            Err(error) => return bad_header(request, error),
        };
        let now = self.now_ms();
        let status = self
            .raft
            .with_state(|state| self.liveness.borrow_mut().record(state, &heartbeat, now));
        if let (HeartbeatStatus::Recorded, Some(id)) = (&status, heartbeat.broker_id) {
            let key = BrokerKey {
                cluster_name: heartbeat.cluster_name.clone(),
                broker_name: heartbeat.broker_name.clone(),
                broker_id: id,
            };
            self.heartbeat_peers.borrow_mut().insert(peer, key);
        }
        match status {
            HeartbeatStatus::Recorded if !self.raft.leadership_confirmed_within(LEASE_CONFIRM) => {
                // Recorded (a leader that is still one knows the broker lives), but not
                // answered SUCCESS: the answer renews the broker's write lease, and a
                // leader cut from its quorum may have been replaced already.
                let message = format!(
                    "this controller's leadership was not confirmed by a quorum within \
                     {LEASE_CONFIRM:?}: the beat renews no lease"
                );
                responses::refused(request, code::SYSTEM_BUSY, &message)
            }
            HeartbeatStatus::Recorded => RemotingCommand::response_to(request, code::SUCCESS, None),
            refused => responses::refused(request, refused.code(), &format!("{refused:?}")),
        }
    }

    fn next_broker_id(&self, request: &RemotingCommand) -> Result<RemotingCommand, String> {
        let ask = GetNextBrokerIdRequest::parse(request).map_err(|e| e.to_string())?;
        let next = self
            .raft
            .with_state(|state| state.next_broker_id(&ask.broker_name));
        Ok(responses::next_broker_id(
            request,
            &ask.cluster_name,
            &ask.broker_name,
            next,
        ))
    }

    async fn apply_broker_id(&self, request: &RemotingCommand) -> Result<RemotingCommand, String> {
        let ask = ApplyBrokerIdRequest::parse(request).map_err(|e| e.to_string())?;
        let command = Command::ApplyBrokerId {
            cluster_name: ask.cluster_name.clone(),
            broker_name: ask.broker_name.clone(),
            broker_id: ask.applied_broker_id,
            address: ask.address().to_owned(),
            register_check_code: ask.register_check_code.clone(),
        };
        Ok(match self.commit(command).await {
            Ok(applied) => {
                responses::apply_broker_id(request, &ask.cluster_name, &ask.broker_name, &applied)
            }
            Err(refusal) => refusal.answer(request),
        })
    }

    async fn register_broker(&self, request: &RemotingCommand) -> Result<RemotingCommand, String> {
        let ask = RegisterBrokerRequest::parse(request).map_err(|e| e.to_string())?;
        let known = self.raft.with_state(|state| {
            let group = state.group(&ask.broker_name)?;
            Some(group.brokers.get(&ask.broker_id).cloned())
        });
        match known {
            None | Some(None) => {
                let message = format!(
                    "broker {} of group {} has not applied for its id",
                    ask.broker_id, ask.broker_name
                );
                return Ok(responses::refused(
                    request,
                    code::CONTROLLER_INVALID_REQUEST,
                    &message,
                ));
            }
            Some(Some(entry))
                if entry.address != ask.broker_address
                    || ask
                        .heartbeat_timeout_ms
                        .is_some_and(|ms| entry.heartbeat_timeout_ms != Some(ms)) =>
            {
                let command = Command::UpdateBrokerAddress {
                    cluster_name: ask.cluster_name.clone(),
                    broker_name: ask.broker_name.clone(),
                    broker_id: ask.broker_id,
                    address: ask.broker_address.clone(),
                    heartbeat_timeout_ms: ask.heartbeat_timeout_ms,
                };
                if let Err(refusal) = self.commit(command).await {
                    return Ok(refusal.answer(request));
                }
            }
            Some(Some(_)) => {}
        }
        Ok(self.raft.with_state(|state| {
            let group = state.group(&ask.broker_name).expect("checked above");
            let master_alive = group
                .master
                .is_some_and(|master| self.is_alive(&ask.cluster_name, &ask.broker_name, master));
            responses::register_broker(
                request,
                &ask.cluster_name,
                &ask.broker_name,
                group,
                master_alive,
            )
        }))
    }

    pub(super) fn is_alive(&self, cluster: &str, group: &str, id: i64) -> bool {
        let key = BrokerKey {
            cluster_name: cluster.to_owned(),
            broker_name: group.to_owned(),
            broker_id: id,
        };
        self.liveness.borrow().is_alive(&key, self.now_ms())
    }

    async fn elect_master_request(
        &self,
        request: &RemotingCommand,
    ) -> Result<RemotingCommand, String> {
        let ask = ElectMasterRequest::parse(request).map_err(|e| e.to_string())?;
        Ok(self.elect(request, &ask).await)
    }

    async fn alter_sync_state_set(
        &self,
        request: &RemotingCommand,
    ) -> Result<RemotingCommand, String> {
        let ask = AlterSyncStateSetRequest::parse(request).map_err(|e| e.to_string())?;
        let cluster = self.raft.with_state(|state| {
            state
                .group(&ask.broker_name)
                .map(|group| group.cluster_name.clone())
        });
        let Some(cluster) = cluster else {
            let message = format!("no broker group {}", ask.broker_name);
            return Ok(responses::refused(
                request,
                code::CONTROLLER_INVALID_REQUEST,
                &message,
            ));
        };
        // Liveness is the leader's: a member that is not alive may not join (Java's check).
        let new_set = &ask.new_sync_state_set;
        if let Some(dead) = new_set
            .sync_state_set
            .iter()
            .find(|id| !self.is_alive(&cluster, &ask.broker_name, **id))
        {
            let message = format!("broker {dead} of {} is not alive", ask.broker_name);
            return Ok(responses::refused(
                request,
                code::CONTROLLER_BROKER_NOT_ALIVE,
                &message,
            ));
        }
        let command = Command::AlterSyncStateSet {
            broker_name: ask.broker_name.clone(),
            master_broker_id: ask.master_broker_id,
            master_epoch: ask.master_epoch,
            sync_state_set_epoch: new_set.sync_state_set_epoch,
            new_sync_state_set: new_set.sync_state_set.clone(),
        };
        Ok(match self.commit(command).await {
            Ok(applied) => responses::alter_sync_state_set(request, &applied),
            Err(refusal) => refusal.answer(request),
        })
    }

    fn replica_info(&self, request: &RemotingCommand) -> Result<RemotingCommand, String> {
        let name = headers::parse_get_replica_info(request).map_err(|e| e.to_string())?;
        Ok(self.raft.with_state(|state| match state.group(&name) {
            Some(group) => responses::replica_info(request, group),
            None => responses::refused(
                request,
                code::CONTROLLER_INVALID_REQUEST,
                &format!("no broker group {name}"),
            ),
        }))
    }

    fn sync_state_data(&self, request: &RemotingCommand) -> Result<RemotingCommand, String> {
        let names = headers::parse_get_sync_state_data(request).map_err(|e| e.to_string())?;
        let now = self.now_ms();
        let body = self.raft.with_state(|state| {
            let liveness = self.liveness.borrow();
            let is_alive = |cluster: &str, name: &str, id| {
                let key = BrokerKey {
                    cluster_name: cluster.to_owned(),
                    broker_name: name.to_owned(),
                    broker_id: id,
                };
                liveness.is_alive(&key, now)
            };
            bodies::BrokerReplicasInfo::of(state, &names, is_alive).encode()
        });
        Ok(RemotingCommand::response_to(request, code::SUCCESS, None).with_body(body))
    }

    async fn clean_broker_data(
        &self,
        request: &RemotingCommand,
    ) -> Result<RemotingCommand, String> {
        let ask = CleanBrokerDataRequest::parse(request).map_err(|e| e.to_string())?;
        if !ask.is_clean_living_broker {
            if let Some(alive) = self.living_among(&ask) {
                let message = format!(
                    "broker {alive} of {} is alive; set isCleanLivingBroker to clean it",
                    ask.broker_name
                );
                let refused = code::CONTROLLER_INVALID_CLEAN_BROKER_METADATA;
                return Ok(responses::refused(request, refused, &message));
            }
        }
        let command = Command::CleanBrokerData {
            broker_name: ask.broker_name.clone(),
            broker_ids: ask.broker_ids.clone(),
        };
        let answer = match self.commit(command).await {
            Ok(_) => RemotingCommand::response_to(request, code::SUCCESS, None),
            Err(refusal) => refusal.answer(request),
        };
        self.raft
            .with_state(|state| self.liveness.borrow_mut().retain_registered(state));
        Ok(answer)
    }

    /// A live broker among those `ask` would clean, if any.
    fn living_among(&self, ask: &CleanBrokerDataRequest) -> Option<i64> {
        self.raft.with_state(|state| {
            let group = state.group(&ask.broker_name)?;
            let mut ids = group.brokers.keys().copied();
            ids.find(|id| {
                let named = ask.broker_ids.as_ref().is_none_or(|ids| ids.contains(id));
                named && self.is_alive(&group.cluster_name, &ask.broker_name, *id)
            })
        })
    }

    /// Proposes `command`; its applied response, or why there is none.
    pub(super) async fn commit(&self, command: Command) -> Result<Response, Refusal> {
        let applied = self
            .raft
            .propose(command.encode())
            .await
            .map_err(Refusal::Raft)?;
        let response = Response::decode(&applied)
            .map_err(|error| Refusal::Raft(ProposeError::Failed(error.to_string())))?;
        match response {
            Response::Refused { code, message } => Err(Refusal::State { code, message }),
            applied => Ok(applied),
        }
    }
}

/// Why a proposed command changed nothing.
#[derive(Debug)]
pub(super) enum Refusal {
    /// Raft did not commit it (or its outcome is unknown).
    Raft(ProposeError),
    /// It was committed, and refused when applied (fenced, invalid).
    State { code: i32, message: String },
}

impl Refusal {
    pub(super) fn answer(&self, request: &RemotingCommand) -> RemotingCommand {
        match self {
            Refusal::Raft(ProposeError::NotLeader { leader }) => responses::refused(
                request,
                code::CONTROLLER_NOT_LEADER,
                &format!("not the controller leader (leader: {leader:?})"),
            ),
            Refusal::Raft(error) => {
                responses::refused(request, code::SYSTEM_ERROR, &error.to_string())
            }
            Refusal::State { code, message } => responses::refused(request, *code, message),
        }
    }
}

impl RequestHandler for ControllerNode {
    fn connection_closed(&self, peer: SocketAddr) {
        let Some(key) = self.heartbeat_peers.borrow_mut().remove(&peer) else {
            return;
        };
        tracing::info!(
            broker = key.broker_id,
            group = %key.broker_name,
            %peer,
            "a broker's heartbeat connection closed: counted dead"
        );
        self.liveness.borrow_mut().closed(&key);
        self.scan_now.notify_one();
    }

    async fn handle(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        if is_raft_rpc(request.code) {
            return Some(self.raft.handle_rpc(&request).await);
        }
        let oneway = request.is_oneway();
        let answer = self.answer(request, peer).await;
        (!oneway).then_some(answer)
    }
}
