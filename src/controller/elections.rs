//! Elections on the controller leader: asked for by a broker or an admin
//! (CONTROLLER_ELECT_MASTER), or started by the leader's scan when a group's master is no
//! longer alive; and the push of each result to the group's brokers
//! (NOTIFY_BROKER_ROLE_CHANGED, oneway).
//!
//! Invariants:
//! - an election is decided from the state as applied here and the leader's liveness
//!   table, and committed as a command that names the epochs it was decided under; the
//!   apply step refuses it if another change came first, and it is decided again, at most
//!   `electMasterMaxRetryCount` times;
//! - a new leader starts no election before one default heartbeat timeout of its
//!   leadership has passed: until then its table is empty because nobody has reached it
//!   yet, not because anybody died.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::watch;

use super::metrics::{Outcome, Trigger};
use super::node::{ControllerNode, Refusal};
use super::replicas::commands::Command;
use super::replicas::election::{self, ElectTrigger, ElectionOutcome};
use super::replicas::headers::ElectMasterRequest;
use super::replicas::responses;
use crate::client::Client;
use crate::net::Transport;
use crate::remoting::codes::response as code;
use crate::remoting::command::RemotingCommand;

/// How long one NOTIFY_BROKER_ROLE_CHANGED may take to connect and be written; a broker
/// that misses it learns its role from its next register or replica-info poll.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(3);

impl ControllerNode {
    /// CONTROLLER_ELECT_MASTER's answer.
    pub(super) async fn elect(
        &self,
        request: &RemotingCommand,
        ask: &ElectMasterRequest,
    ) -> RemotingCommand {
        match self.run_election(&ask.broker_name, ask.trigger()).await {
            Ok(Elected::Applied(applied)) => {
                responses::elect_master(request, &ask.broker_name, &applied)
            }
            Ok(Elected::MasterStays) => {
                self.raft
                    .with_state(|state| match state.group(&ask.broker_name) {
                        Some(group) => responses::master_still_exists(request, group),
                        None => responses::refused(
                            request,
                            code::CONTROLLER_INVALID_REQUEST,
                            "no such group",
                        ),
                    })
            }
            Err(refusal) => refusal.answer(request),
        }
    }

    /// Decides and commits one election of `group`, deciding again when the apply step
    /// found the group changed meanwhile.
    async fn run_election(&self, group: &str, trigger: ElectTrigger) -> Result<Elected, Refusal> {
        let counted = match trigger {
            ElectTrigger::Controller => Trigger::Scan,
            ElectTrigger::Broker(_) => Trigger::Broker,
            ElectTrigger::Designated(_) => Trigger::Admin,
        };
        let attempts = self.config.elect_master_max_retry_count;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let command = match self.decide(group, trigger) {
                Ok(ElectionOutcome::Propose(command)) => command,
                Ok(ElectionOutcome::MasterStillExists { .. }) => {
                    self.metrics.election(counted, Outcome::MasterStays);
                    return Ok(Elected::MasterStays);
                }
                Ok(ElectionOutcome::Failed { code, message }) => {
                    self.metrics.election(counted, Outcome::Refused);
                    return Err(Refusal::State { code, message });
                }
                Err(refusal) => {
                    self.metrics.election(counted, Outcome::Refused);
                    return Err(refusal);
                }
            };
            let unclean = matches!(command, Command::ElectMaster { unclean: true, .. });
            match self.commit(command).await {
                Ok(applied) => {
                    tracing::info!(?applied, group, "election committed");
                    let outcome = match unclean {
                        true => Outcome::ElectedUnclean,
                        false => Outcome::Elected,
                    };
                    self.metrics.election(counted, outcome);
                    self.notify_group(group);
                    return Ok(Elected::Applied(applied));
                }
                Err(Refusal::State { code, message }) if is_fenced(code) && attempt < attempts => {
                    self.metrics.election(counted, Outcome::Fenced);
                    tracing::info!(group, attempt, %message, "election fenced; deciding again");
                }
                Err(refusal) => {
                    self.metrics.election(counted, Outcome::Refused);
                    return Err(refusal);
                }
            }
        }
    }

    /// Decides an election of `group`. Liveness is looked up under the cluster the group
    /// registered in, whatever `clusterName` the request named: an operator's
    /// `electMaster` without `-c` names none, and a wrong one would make every broker
    /// look dead.
    fn decide(&self, group: &str, trigger: ElectTrigger) -> Result<ElectionOutcome, Refusal> {
        let now = self.now_ms();
        self.raft.with_state(|state| match state.group(group) {
            Some(found) => Ok(election::elect(
                group,
                found,
                &self
                    .liveness
                    .borrow()
                    .alive_in_group(&found.cluster_name, group, now),
                trigger,
                self.config.enable_elect_unclean_master,
            )),
            None => Err(Refusal::State {
                code: code::CONTROLLER_INVALID_REQUEST,
                message: format!("no broker group {group}"),
            }),
        })
    }

    /// One pass of the leader's scan: every group whose master is not alive while another
    /// of its brokers is gets an election.
    pub(super) async fn scan(&self) {
        self.refresh_metrics();
        if !self.check_leadership() {
            return;
        }
        let since = self.leader_since_ms.get().unwrap_or(u64::MAX);
        let now = self.now_ms();
        let groups = self.raft.with_state(|state| {
            let liveness = self.liveness.borrow();
            let mut groups = Vec::new();
            for name in liveness.groups_to_reelect(state, now, since) {
                let cluster = state.group(&name).map(|g| g.cluster_name.clone());
                groups.extend(cluster.map(|cluster| (cluster, name)));
            }
            groups
        });
        for (cluster, group) in groups {
            tracing::info!(%cluster, %group, "the master is not alive: electing");
            if let Err(refusal) = self.run_election(&group, ElectTrigger::Controller).await {
                tracing::warn!(%group, ?refusal, "election failed");
            }
        }
    }

    /// Sends NOTIFY_BROKER_ROLE_CHANGED to every broker of `group`, in the background.
    fn notify_group(&self, group: &str) {
        if !self.config.notify_broker_role_changed {
            return;
        }
        let Some((notice, addresses)) = self.raft.with_state(|state| {
            let found = state.group(group)?;
            let addresses: Vec<String> =
                found.brokers.values().map(|b| b.address.clone()).collect();
            Some((responses::notify_broker_role_changed(found), addresses))
        }) else {
            return;
        };
        let Some(transport) = self.notify_transport.clone() else {
            return;
        };
        for address in addresses {
            let Ok(addr) = address.parse::<SocketAddr>() else {
                tracing::warn!(%address, "a broker address that does not parse: not notified");
                continue;
            };
            let notice = notice.clone();
            let transport = transport.clone();
            tokio::task::spawn_local(async move {
                let sent = tokio::time::timeout(NOTIFY_TIMEOUT, async {
                    let client = transport.connect(addr).await?;
                    client.oneway(notice).await
                })
                .await;
                if !matches!(sent, Ok(Ok(()))) {
                    tracing::info!(%addr, "role change not delivered; the broker will poll");
                }
            });
        }
    }
}

/// What an election came to.
enum Elected {
    Applied(super::replicas::commands::Response),
    MasterStays,
}

fn is_fenced(code: i32) -> bool {
    code == code::CONTROLLER_FENCED_MASTER_EPOCH
        || code == code::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
}

/// Runs the scan every `interval`, and at once when a broker's connection closed, until
/// `stop`.
pub async fn scan_loop(
    node: Rc<ControllerNode>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = node.scan_now.notified() => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
        node.scan().await;
    }
}

/// How the controller reaches brokers: over any transport of the network seam.
pub trait Connector: 'static {
    fn connect(
        &self,
        addr: SocketAddr,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Client>>>>;
}

impl<T: Transport> Connector for T {
    fn connect(
        &self,
        addr: SocketAddr,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Client>>>> {
        let transport = self.clone();
        Box::pin(async move { Client::connect_over(&transport, addr).await })
    }
}
