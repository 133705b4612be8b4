//! The supervisor's role loop: learn the role from the controllers, run the node in it,
//! watch for a change, stop the run, start the next (reference-2 §6.4 by restart).
//!
//! Why a role change restarts the node instead of switching its parts in place: a clean
//! stop and start is the one path every part of the node already takes correctly, and it
//! does §6.4's steps in order by construction. Stopping a slave run ends its HA streams
//! (no more data taken), lets its appends finish and its dispatch catch up, and shuts its
//! store cleanly; opening the next run as master recovers nothing (the stop was clean),
//! fences each shard's log with the controller's epoch at its end before the shard
//! serves, and only then opens the master-only engines (delay levels, timers, POP revive,
//! transaction checks) from the cursors the slave copied. A master deposed the same way
//! stops acknowledging before it starts following.
//!
//! Invariants: at most one run at a time; a master run's epoch is the controller's and
//! above every epoch its shards' logs hold (a master that restarted asks for a new one);
//! a slave run follows the master the controllers name, never one it chose.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use super::quorum::Quorum;
use crate::config::BrokerRole;
use crate::controller::replicas::broker_calls::{BrokerName, GroupView, HeartbeatFacts};
use crate::net::Transport;
use crate::node::{Assignment, RoleAssignment};
use crate::node_config::NodeConfig;
use crate::remoting::codes::response as code;
use crate::replication::epoch_store::EpochStore;
use crate::store::{ReplicaGate, WriteLease};
use tokio::time::Instant;

/// How the supervisor ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Asked to stop (a signal): the run stopped cleanly.
    Stopped,
    /// The node stopped on its own.
    NodeExited,
}

/// One broker in controller mode, reaching its controllers through `T`.
pub struct Supervisor<T: Transport> {
    /// The config as loaded (`enable_controller_mode` on).
    config: NodeConfig,
    pub(super) name: BrokerName,
    /// `brokerIP1:listenPort`: how the controllers and other brokers know this one.
    pub(super) address: String,
    pub(super) quorum: Quorum<T>,
    /// The controller id, once applied.
    pub(super) id: Cell<i64>,
    /// What the heartbeats say of the log.
    pub(super) facts: Cell<(i32, i64)>,
    /// When the last heartbeat the controllers answered was sent.
    pub(super) last_beat: Cell<Option<Instant>>,
    /// Set before a run stops for a role change (its registration keeps the name servers'
    /// entries for the next run to replace).
    pub(super) role_change: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Woken by a NOTIFY_BROKER_ROLE_CHANGED a run's broker received.
    pub(super) role_notices: std::sync::Arc<tokio::sync::Notify>,
}

impl<T: Transport> Supervisor<T> {
    pub fn new(config: NodeConfig, transport: T) -> anyhow::Result<Supervisor<T>> {
        let controllers = resolve(config.controller_addr.as_deref().unwrap_or_default())?;
        let name = BrokerName {
            cluster_name: config.broker_cluster_name.clone(),
            broker_name: config.broker_name.clone(),
        };
        let address = SocketAddr::new(config.broker_ip, config.listen_port).to_string();
        let timeout = config.register_broker_timeout_mills.min(CALL_TIMEOUT);
        Ok(Supervisor {
            quorum: Quorum::new(transport, controllers, timeout),
            config,
            name,
            address,
            id: Cell::new(0),
            facts: Cell::new((0, 0)),
            last_beat: Cell::new(None),
            role_change: std::sync::Arc::default(),
            role_notices: std::sync::Arc::new(tokio::sync::Notify::new()),
        })
    }

    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The heartbeat this broker sends now.
    pub(super) fn heartbeat_facts(&self) -> HeartbeatFacts {
        let (epoch, max_offset) = self.facts.get();
        HeartbeatFacts {
            id: self.id.get(),
            address: self.address.clone(),
            epoch,
            max_offset,
            confirm_offset: 0,
            timeout_ms: millis(self.config.controller_heart_beat_timeout_mills),
            election_priority: 0,
        }
    }

    /// How long the controllers' word that this broker is master holds: the heartbeat
    /// timeout they count it dead after, less two heartbeat intervals, so the lease ends
    /// before they may elect another master (they count from a beat's arrival, the lease
    /// from its sending). The config relations keep it above one interval.
    pub(super) fn lease_length(&self) -> Duration {
        let interval = self.config.broker_heartbeat_interval;
        self.config
            .controller_heart_beat_timeout_mills
            .saturating_sub(interval * 2)
    }

    /// Extends `lease` after the controllers named this broker master in an answer to a
    /// request sent at `asked`: from the earlier of that and the last heartbeat they
    /// answered (both must be recent for the controllers to count it alive and master).
    pub(super) fn renew(&self, lease: &WriteLease, asked: Instant) {
        if let Some(beat) = self.last_beat.get() {
            lease.renew_until(beat.min(asked) + self.lease_length());
        }
    }

    /// The highest epoch any shard's log holds (0 for none), read from the epoch files
    /// while no run is open.
    fn stored_epoch(&self) -> anyhow::Result<u32> {
        let mut highest = 0;
        for shard in 0..self.config.shards {
            let dir = crate::shard::layout::shard_dir(&self.config.store_path_root_dir, shard);
            let epochs = EpochStore::load(&dir)
                .map_err(|error| anyhow::anyhow!("shard {shard}: {error}"))?;
            highest = highest.max(epochs.history().last_epoch().unwrap_or(0));
        }
        Ok(highest)
    }

    /// Registers and, while the group has no live master, asks to be elected, until the
    /// controllers give this broker a role (the caller bounds the wait by its stop).
    pub(super) async fn settle_role(&self) -> anyhow::Result<(RoleAssignment, GroupView)> {
        let id = self.id.get();
        let mut complained = false;
        // No run is open while the role settles: the epoch files do not change meanwhile.
        let stored = self.stored_epoch()?;
        self.facts.set((stored as i32, self.facts.get().1));
        loop {
            let asked = Instant::now();
            let view = match self.register().await {
                Ok(view) => view,
                Err(why) => {
                    if !complained {
                        tracing::warn!(
                            "controller mode: cannot learn this broker's role yet: {why}"
                        );
                        complained = true;
                    }
                    tokio::time::sleep(self.config.broker_heartbeat_interval).await;
                    continue;
                }
            };
            match (view.master, view.master_address.as_deref()) {
                (Some(master), _) if master == id => {
                    let epoch = u32::try_from(view.master_epoch).unwrap_or(0);
                    if epoch > stored {
                        // The gate starts up: the watch sets it from the set it holds.
                        let replicas = ReplicaGate::new(true);
                        let lease = WriteLease::new();
                        self.renew(&lease, asked);
                        return Ok((
                            RoleAssignment::Master {
                                epoch,
                                replicas,
                                lease,
                            },
                            view,
                        ));
                    }
                    anyhow::ensure!(
                        epoch == stored,
                        "the controllers name this broker master under epoch {epoch}, below \
                         epoch {stored} its log holds: the store ran without controllers \
                         (their epochs are drawn) or under another controller group"
                    );
                    // Master again after a restart: the epoch it wrote under before may
                    // label bytes a slave holds and this log lost, so it takes a new one.
                    let answer = self.elect().await;
                    tracing::info!(
                        epoch,
                        ?answer,
                        "controller mode: master again after a restart: asked for a new epoch"
                    );
                }
                (Some(_), Some(address)) => match address.parse() {
                    Ok(master) => return Ok((RoleAssignment::Slave { master }, view)),
                    Err(_) => anyhow::bail!(
                        "the controllers name master address {address:?}, which is not ip:port"
                    ),
                },
                _ => {
                    self.elect().await;
                }
            }
            tokio::time::sleep(ELECT_RETRY.min(self.config.broker_heartbeat_interval)).await;
        }
    }

    async fn register(&self) -> Result<GroupView, String> {
        let timeout = millis(self.config.controller_heart_beat_timeout_mills);
        let request = self
            .name
            .register(self.id.get(), &self.address, timeout, now_ms());
        let answer = self.quorum.call(request).await.map_err(|e| e.to_string())?;
        if answer.code != code::SUCCESS {
            return Err(format!(
                "register answered {} ({})",
                answer.code,
                answer.remark.unwrap_or_default()
            ));
        }
        GroupView::read(&answer).map_err(|e| e.to_string())
    }

    /// Asks to be elected; what the controllers decided shows at the next registration.
    /// Returns what they answered, for the caller's log.
    async fn elect(&self) -> String {
        let request = self.name.elect(self.id.get(), now_ms());
        match self.quorum.call(request).await {
            Ok(answer) if answer.code == code::SUCCESS => {
                tracing::info!(
                    master = ?answer.opt_i64("masterBrokerId").ok().flatten(),
                    epoch = ?answer.opt_i32("masterEpoch").ok().flatten(),
                    "controller mode: the controllers elected a master"
                );
                "elected".to_owned()
            }
            Ok(answer) => {
                let why = format!(
                    "code {}: {}",
                    answer.code,
                    answer.remark.unwrap_or_default()
                );
                tracing::debug!("controller mode: election not made: {why}");
                why
            }
            Err(why) => {
                tracing::debug!("controller mode: cannot ask for an election: {why}");
                why.to_string()
            }
        }
    }

    /// The group as the controllers see it now.
    pub(super) async fn replica_info(&self) -> Result<GroupView, String> {
        let answer = self
            .quorum
            .call(self.name.replica_info())
            .await
            .map_err(|e| e.to_string())?;
        if answer.code != code::SUCCESS {
            return Err(format!("replica info answered {}", answer.code));
        }
        GroupView::read(&answer).map_err(|e| e.to_string())
    }

    /// Whether `view` takes the role `run` has away.
    pub(super) fn role_changed(&self, run: &RoleAssignment, view: &GroupView) -> bool {
        let id = self.id.get();
        match run {
            RoleAssignment::Master { epoch, .. } => {
                view.master != Some(id) || view.master_epoch != *epoch as i32
            }
            // A group without a master keeps its slaves following the last one until the
            // controllers elect another.
            RoleAssignment::Slave { master } => match view.master {
                None => false,
                Some(m) if m == id => true,
                Some(_) => view.master_address.as_deref() != Some(master.to_string().as_str()),
            },
        }
    }

    /// The config of one run in `role`.
    pub(super) fn run_config(&self, role: &RoleAssignment) -> NodeConfig {
        let mut config = self.config.clone();
        config.enable_controller_mode = false;
        match role {
            RoleAssignment::Master { .. } => {
                config.broker_id = 0;
                config.broker_role = master_role(&self.config);
            }
            RoleAssignment::Slave { .. } => {
                config.broker_role = BrokerRole::Slave;
                config.broker_id = u64::try_from(self.id.get()).unwrap_or(0);
            }
        }
        config
    }

    /// Asks the controllers to make `set` the SyncStateSet; the view with the set they
    /// committed.
    pub(super) async fn alter_sync_state_set(
        &self,
        view: &GroupView,
        set: &BTreeSet<i64>,
    ) -> Result<GroupView, AlterError> {
        let request = self.name.alter_sync_state_set(
            self.id.get(),
            view.master_epoch,
            set,
            view.sync_state_set_epoch,
        );
        let answer = self
            .quorum
            .call(request)
            .await
            .map_err(|e| AlterError::Unknown(e.to_string()))?;
        if answer.code != code::SUCCESS {
            return Err(AlterError::Refused(format!(
                "answered {} ({})",
                answer.code,
                answer.remark.unwrap_or_default()
            )));
        }
        let body = crate::controller::replicas::bodies::SyncStateSetBody::decode(&answer.body)
            .map_err(|e| AlterError::Unknown(e.to_string()))?;
        let mut altered = view.clone();
        altered.sync_state_set = body.sync_state_set;
        altered.sync_state_set_epoch = body.sync_state_set_epoch;
        Ok(altered)
    }

    /// How a run in `role` is told of role changes, and tells the supervisor of notices.
    pub(super) fn assignment(&self, role: &RoleAssignment) -> Assignment {
        self.role_change
            .store(false, std::sync::atomic::Ordering::Release);
        Assignment {
            role: role.clone(),
            role_notices: self.role_notices.clone(),
            role_change: self.role_change.clone(),
        }
    }
}

/// Why a SyncStateSet proposal changed nothing that is known.
#[derive(Debug, thiserror::Error)]
pub enum AlterError {
    /// The controllers answered: nothing was committed.
    #[error("refused: {0}")]
    Refused(String),
    /// No answer: it may or may not have been committed.
    #[error("no answer: {0}")]
    Unknown(String),
}

/// How a master run acknowledges (RocketMQ's controller mode: a master always runs as
/// SYNC_MASTER and counts acknowledgements by `allAckInSyncStateSet`, else
/// `inSyncReplicas`, 1 by default): once the SyncStateSet holds a message when
/// `allAckInSyncStateSet` asks for it or `brokerRole` is SYNC_MASTER; on its own write
/// otherwise (ASYNC_MASTER, or SLAVE as RocketMQ's quick-start files say, without
/// `allAckInSyncStateSet`).
pub(super) fn master_role(config: &NodeConfig) -> BrokerRole {
    match config.all_ack_in_sync_state_set || config.broker_role == BrokerRole::SyncMaster {
        true => BrokerRole::SyncMaster,
        false => BrokerRole::AsyncMaster,
    }
}

/// The most one call to the controllers may take (also bounded by
/// `registerBrokerTimeoutMills`).
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// How soon a broker asks again after an election that named nobody.
const ELECT_RETRY: Duration = Duration::from_millis(200);

fn resolve(list: &str) -> anyhow::Result<Vec<SocketAddr>> {
    let mut controllers = Vec::new();
    for part in list.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        use std::net::ToSocketAddrs;
        let addr = part
            .to_socket_addrs()
            .map_err(|error| anyhow::anyhow!("controller_addr: cannot resolve {part}: {error}"))?
            .next()
            .ok_or_else(|| anyhow::anyhow!("controller_addr: {part} resolves to nothing"))?;
        controllers.push(addr);
    }
    anyhow::ensure!(
        !controllers.is_empty(),
        "controller_addr names no controller"
    );
    Ok(controllers)
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RocketMQ's controller-mode master counts acknowledgements by `allAckInSyncStateSet`
    /// (else `inSyncReplicas`, 1): the set when asked for, or when `brokerRole` says
    /// SYNC_MASTER; its own write otherwise.
    #[test]
    fn a_master_run_acknowledges_as_all_ack_or_the_broker_role_asks() {
        let mut config = NodeConfig::default();
        for (role, all_ack, run) in [
            (BrokerRole::Slave, true, BrokerRole::SyncMaster),
            (BrokerRole::Slave, false, BrokerRole::AsyncMaster),
            (BrokerRole::AsyncMaster, true, BrokerRole::SyncMaster),
            (BrokerRole::AsyncMaster, false, BrokerRole::AsyncMaster),
            (BrokerRole::SyncMaster, false, BrokerRole::SyncMaster),
            (BrokerRole::SyncMaster, true, BrokerRole::SyncMaster),
        ] {
            config.broker_role = role;
            config.all_ack_in_sync_state_set = all_ack;
            assert_eq!(master_role(&config), run, "{role:?}, allAck {all_ack}");
        }
    }
}
