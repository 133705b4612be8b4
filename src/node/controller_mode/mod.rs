//! A broker in controller mode (`enableControllerMode=true`, D18): its supervisor, which
//! talks to the controllers of `controllerAddr` and runs the node in the role they
//! assign.
//!
//! - [`identity`]: the controller id, applied for once and kept in `brokerIdentity`;
//! - [`quorum`]: the calls to the controllers, on one connection to the leader;
//! - [`supervisor`]: registration, election requests, the role of each run;
//! - [`runs`]: what a run is (the real node, or a simulation's model), behind one seam;
//! - [`sync_state`]: which slaves a master adds to the SyncStateSet.
//!
//! The order of a start: apply for (or load) the id; start beating (the controllers count
//! a broker alive from its heartbeats, and elect only live ones); register and learn the
//! role, asking for an election while the group has no live master; run the node in that
//! role. Then, every `syncBrokerMetadataPeriod` and at once when the controllers send
//! NOTIFY_BROKER_ROLE_CHANGED to the broker, ask the controllers for the group: a change
//! of master or epoch stops the run and starts the next in the new role. A master
//! run also looks every `checkSyncStateSetPeriod` at which slaves caught up and asks to
//! add them to the SyncStateSet. A stop (SIGTERM, SIGINT) stops the run cleanly and ends
//! the beats, so the controllers see the broker go at once.

pub mod identity;
pub mod quorum;
pub mod runs;
pub mod supervisor;
pub mod sync_state;

use std::future::Future;
use std::rc::Rc;

use identity::Identity;
use quorum::QuorumError;
use std::collections::BTreeSet;
use supervisor::{now_ms, AlterError, Ended, Supervisor};
use sync_state::{GateKeeper, SetKeeper, Step};

use crate::controller::replicas::broker_calls::GroupView;
use crate::net::tcp::Tcp;
use crate::net::Transport;
use crate::node::{NodeHandle, RoleAssignment};
use crate::node_config::NodeConfig;
use crate::remoting::codes::response as code;
use crate::store::WriteLease;
use runs::{NodeRuns, Runs};

/// Runs a broker in controller mode until `stop` resolves (a clean stop) or a run's node
/// stops on its own. `on_run` is told of every run once it serves.
pub async fn run(
    config: NodeConfig,
    stop: impl Future<Output = ()>,
    on_run: impl Fn(&NodeHandle, &RoleAssignment),
) -> anyhow::Result<Ended> {
    run_with(config, Tcp, &NodeRuns, stop, on_run).await
}

/// [`run`] over any transport to the controllers and any [`Runs`]: what the
/// deterministic simulation runs on the simulated network with runs of its own.
pub async fn run_with<T: Transport, R: Runs>(
    config: NodeConfig,
    transport: T,
    runs: &R,
    stop: impl Future<Output = ()>,
    on_run: impl Fn(&R::Run, &RoleAssignment),
) -> anyhow::Result<Ended> {
    anyhow::ensure!(
        config.enable_controller_mode,
        "controller mode is not enabled"
    );
    if supervisor::master_role(&config) == crate::config::BrokerRole::AsyncMaster {
        tracing::warn!(
            "controller mode: as master this broker acknowledges on its own write \
             (brokerRole={}, allAckInSyncStateSet=false, RocketMQ's default): a failover may \
             lose what it acknowledged and its slave had not copied; set \
             allAckInSyncStateSet=true (or brokerRole=SYNC_MASTER) to acknowledge only what \
             the SyncStateSet holds",
            config.broker_role.as_str()
        );
    }
    let supervisor = Rc::new(Supervisor::new(config, transport)?);
    tokio::pin!(stop);
    let id = tokio::select! {
        _ = &mut stop => return Ok(Ended::Stopped),
        id = apply_for_id(&supervisor) => id?,
    };
    supervisor.id.set(id);
    tracing::info!(id, address = %supervisor.address, "controller mode: this broker's controller id");
    // Ended with this future, also when it is dropped (a simulated crash drops it).
    let beats = tokio::task::spawn_local(heartbeats(supervisor.clone()));
    let _beats = crate::server::closer::AbortOnDrop(beats.abort_handle());
    serve_runs(&supervisor, runs, &mut stop, &on_run).await
}

/// Runs the node in one role after the other until the stop.
async fn serve_runs<T: Transport, R: Runs>(
    supervisor: &Rc<Supervisor<T>>,
    runs: &R,
    stop: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    on_run: &impl Fn(&R::Run, &RoleAssignment),
) -> anyhow::Result<Ended> {
    loop {
        let (role, view) = tokio::select! {
            _ = stop.as_mut() => return Ok(Ended::Stopped),
            settled = supervisor.settle_role() => settled?,
        };
        tracing::info!(?role, master_epoch = view.master_epoch, sync_state_set = ?view.sync_state_set, "controller mode: starting a run");
        let keeper = role.replica_gate().map(|gate| {
            GateKeeper::new(
                gate.clone(),
                supervisor.id.get(),
                &view.sync_state_set,
                view.sync_state_set_epoch,
            )
        });
        let config = supervisor.run_config(&role);
        let mut node = runs.start(config, supervisor.assignment(&role)).await?;
        on_run(&node, &role);
        let exited = runs.exited(&mut node);
        let outcome = tokio::select! {
            _ = stop.as_mut() => Some(Ended::Stopped),
            () = exited => Some(Ended::NodeExited),
            () = watch_role(supervisor, || runs.figures(&node), &role, view, keeper) => None,
        };
        if outcome.is_none() {
            supervisor
                .role_change
                .store(true, std::sync::atomic::Ordering::Release);
        }
        runs.stop(node).await?;
        if let Some(ended) = outcome {
            return Ok(ended);
        }
    }
}

/// Returns once the controllers take the role `run` has away; meanwhile a master run
/// keeps its SyncStateSet ([`sync_state`]).
async fn watch_role<T: Transport>(
    supervisor: &Supervisor<T>,
    figures: impl Fn() -> Vec<crate::metrics::ReplicationFigures>,
    run: &RoleAssignment,
    mut view: GroupView,
    mut gate: Option<GateKeeper>,
) {
    let config = supervisor.config();
    // A master asks every heartbeat: each answer naming it master renews its lease.
    let period = match run.write_lease() {
        Some(_) => config
            .sync_broker_metadata_period
            .min(config.broker_heartbeat_interval),
        None => config.sync_broker_metadata_period,
    };
    let mut poll = tokio::time::interval(period);
    let mut check = tokio::time::interval(config.check_sync_state_set_period);
    for ticks in [&mut poll, &mut check] {
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    let mut keeper = SetKeeper::new(supervisor.id.get(), config.ha_max_time_slave_not_catchup);
    let mut expanding = false;
    // Transitions only are logged; a run may begin before its first renewal.
    let mut lease_held = run.write_lease().is_none_or(WriteLease::holds);
    loop {
        log_lease_change(run, &mut lease_held);
        tokio::select! {
            asked = async { tokio::select! { _ = poll.tick() => {}, () = supervisor.role_notices.notified() => {} }; tokio::time::Instant::now() } => match supervisor.replica_info().await {
                Ok(now) if supervisor.role_changed(run, &now) => {
                    tracing::info!(?run, master = ?now.master, master_epoch = now.master_epoch, "controller mode: the role changed");
                    return;
                }
                Ok(now) => {
                    if let Some(lease) = run.write_lease() {
                        supervisor.renew(lease, asked);
                    }
                    if let Some(gate) = gate.as_mut() {
                        gate.follow(&now.sync_state_set, now.sync_state_set_epoch, expanding);
                    }
                    if now.sync_state_set_epoch >= view.sync_state_set_epoch {
                        view = now;
                    }
                }
                Err(why) => tracing::debug!("controller mode: cannot ask for the group: {why}"),
            },
            _ = check.tick(), if gate.is_some() => {
                let Some(gate) = gate.as_mut() else { continue };
                let figures = figures();
                supervisor.facts.set((supervisor.facts.get().0, written_sum(&figures)));
                match keeper.look(&figures, &view.sync_state_set, tokio::time::Instant::now()) {
                    Step::Nothing => {}
                    Step::NeedReplicas(joining) => {
                        expanding = true;
                        gate.raise(&joining);
                        tracing::info!("controller mode: a slave caught up: batches wait for it before it joins the SyncStateSet");
                    }
                    Step::Abandon => {
                        expanding = false;
                        gate.follow(&view.sync_state_set, view.sync_state_set_epoch, false);
                    }
                    Step::Propose(set) => {
                        expanding = false;
                        keeper.proposed();
                        view = propose(supervisor, view, &set, gate).await;
                    }
                }
            }
        }
    }
}

/// Logs when a master run's write lease lapses or holds again (`held`: at the last look).
fn log_lease_change(run: &RoleAssignment, held: &mut bool) {
    let holds = run.write_lease().is_none_or(WriteLease::holds);
    if holds == *held {
        return;
    }
    *held = holds;
    match holds {
        true => tracing::info!("controller mode: the write lease holds: acknowledging"),
        false => tracing::warn!(
            "controller mode: the write lease lapsed (no answer from the controllers naming \
             this broker master): refusing sends and holding acknowledgements"
        ),
    }
}

/// Proposes `set` as the SyncStateSet; the view after, with the gate following it.
async fn propose<T: Transport>(
    supervisor: &Supervisor<T>,
    view: GroupView,
    set: &BTreeSet<i64>,
    gate: &mut GateKeeper,
) -> GroupView {
    match supervisor.alter_sync_state_set(&view, set).await {
        Ok(altered) => {
            tracing::info!(sync_state_set = ?altered.sync_state_set, epoch = altered.sync_state_set_epoch, "controller mode: the SyncStateSet changed");
            gate.follow(&altered.sync_state_set, altered.sync_state_set_epoch, false);
            altered
        }
        Err(AlterError::Refused(why)) => {
            tracing::warn!(
                ?set,
                "controller mode: the SyncStateSet was not changed: {why}"
            );
            gate.follow(&view.sync_state_set, view.sync_state_set_epoch, false);
            view
        }
        Err(AlterError::Unknown(why)) => {
            tracing::warn!(
                ?set,
                "controller mode: no answer to a SyncStateSet change: {why}"
            );
            gate.unsure(view.sync_state_set_epoch, set);
            view
        }
    }
}

/// The sum over shards of each log's written end within its shard: what ranks this
/// broker among election candidates.
fn written_sum(figures: &[crate::metrics::ReplicationFigures]) -> i64 {
    use crate::node::replication_sampler::WITHIN_SHARD;
    let sum: u64 = figures.iter().map(|f| f.written & WITHIN_SHARD).sum();
    i64::try_from(sum).unwrap_or(i64::MAX)
}

/// Beats to the controller leader every `brokerHeartbeatInterval`, on the connection every
/// call uses.
async fn heartbeats<T: Transport>(supervisor: Rc<Supervisor<T>>) {
    let interval = supervisor.config().broker_heartbeat_interval;
    let mut failing = false;
    loop {
        let beat = supervisor.name.heartbeat(&supervisor.heartbeat_facts());
        let sent = tokio::time::Instant::now();
        let outcome = supervisor.quorum.call(beat).await;
        // A beat no leader answered is tried again soon: while the controllers elect a
        // new leader, the lease runs from the last answered beat, and the first beat the
        // new leader answers renews it.
        let next = match &outcome {
            Ok(answer) if answer.code == code::SUCCESS => sent + interval,
            _ => tokio::time::Instant::now() + BEAT_RETRY.min(interval),
        };
        match outcome {
            Ok(answer) if answer.code == code::SUCCESS => {
                supervisor.last_beat.set(Some(sent));
                if failing {
                    tracing::info!(controller = ?supervisor.quorum.leader(), "controller mode: heartbeats answered again");
                }
                failing = false;
            }
            Ok(answer) if !failing => {
                failing = true;
                tracing::warn!(code = answer.code, remark = ?answer.remark, "controller mode: a heartbeat was refused");
            }
            Err(why) if !failing => {
                failing = true;
                tracing::warn!("controller mode: a heartbeat was not answered: {why}");
            }
            _ => {}
        }
        tokio::time::sleep_until(next).await;
    }
}

/// How soon a heartbeat no leader answered is sent again.
const BEAT_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// The controller id in the store's `brokerIdentity`, or one applied for now; while no
/// controller answers as leader (the controllers are starting), tried again every
/// heartbeat interval.
async fn apply_for_id<T: Transport>(supervisor: &Supervisor<T>) -> anyhow::Result<i64> {
    let mut complained = false;
    loop {
        match try_apply_for_id(supervisor).await {
            Ok(id) => return Ok(id),
            Err(error) if error.downcast_ref::<IdTaken>().is_some() => {
                // Another broker of the group applied for the same next id first (two
                // brokers starting together): ask again for the next one.
                tracing::warn!("controller mode: {error}; asking for another id");
                tokio::time::sleep(ID_RETRY.min(supervisor.config().broker_heartbeat_interval))
                    .await;
            }
            Err(error) => match error.downcast_ref::<QuorumError>() {
                Some(why) => {
                    if !complained {
                        tracing::warn!("controller mode: cannot apply for an id yet: {why}");
                        complained = true;
                    }
                    tokio::time::sleep(supervisor.config().broker_heartbeat_interval).await;
                }
                None => return Err(error),
            },
        }
    }
}

async fn try_apply_for_id<T: Transport>(supervisor: &Supervisor<T>) -> anyhow::Result<i64> {
    let root = supervisor.config().store_path_root_dir.clone();
    let name = &supervisor.name;
    let mut identity = match Identity::load(&root, name)? {
        Some(identity) if identity.applied => return Ok(identity.id),
        Some(pending) => pending,
        None => {
            let next = supervisor.quorum.call(name.next_broker_id()).await?;
            anyhow::ensure!(
                next.code == code::SUCCESS,
                "GET_NEXT_BROKER_ID answered {} ({})",
                next.code,
                next.remark.unwrap_or_default()
            );
            let id = next.get_i64("nextBrokerId")?;
            let identity = Identity {
                cluster: name.cluster_name.clone(),
                broker: name.broker_name.clone(),
                id,
                check_code: format!("{};{}", supervisor.address, now_ms()),
                applied: false,
            };
            identity.save(&root)?;
            identity
        }
    };
    let answer = supervisor
        .quorum
        .call(name.apply_broker_id(identity.id, &identity.check_code))
        .await?;
    if answer.code == code::CONTROLLER_BROKER_ID_INVALID {
        // The id was never this broker's, which applied for it with its check code: the
        // controllers answer a retry with the same code with success. So it is pending
        // here, and forgotten, so the next attempt asks for another.
        let path = identity::path(&root);
        std::fs::remove_file(&path)
            .map_err(|error| anyhow::anyhow!("cannot remove {}: {error}", path.display()))?;
        return Err(IdTaken {
            id: identity.id,
            why: answer.remark.unwrap_or_default(),
        }
        .into());
    }
    anyhow::ensure!(
        answer.code == code::SUCCESS,
        "APPLY_BROKER_ID {} answered {} ({}); if another broker took the id, remove {} and start again",
        identity.id,
        answer.code,
        answer.remark.unwrap_or_default(),
        identity::path(&root).display()
    );
    identity.applied = true;
    identity.save(&root)?;
    Ok(identity.id)
}

/// The id this broker asked for was applied for by another broker first.
#[derive(Debug, thiserror::Error)]
#[error("id {id} was taken by another broker of the group ({why})")]
struct IdTaken {
    id: i64,
    why: String,
}

/// How soon a broker whose id was taken asks for another.
const ID_RETRY: std::time::Duration = std::time::Duration::from_millis(100);
