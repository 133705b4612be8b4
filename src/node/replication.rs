//! The node's side of replication (D14): what each shard's replication service is built
//! from (the role, the HA port, the master's address), and the service itself, opened
//! after the feature engines.
//!
//! - A master (`ASYNC_MASTER`, `SYNC_MASTER`) becomes master of each shard's stream (a new
//!   epoch, saved) and serves its slaves on `haListenPort`: shard 0 accepts, every shard
//!   serves the streams of its own log.
//! - A `SLAVE` follows its master's HA address: `haMasterAddress` when set, else the one
//!   the name servers answer its registration with (shared by every shard through
//!   [`MasterAddress`]).

use std::net::SocketAddr;
use std::rc::Rc;

use tokio::sync::{mpsc, watch};

use super::replication_sampler::{Sampler, Side};
use crate::broker::Broker;
use crate::config::BrokerRole;
use crate::net::{Listener, Transport};
use crate::node_config::NodeConfig;
use crate::replication::epoch_store::EpochStore;
use crate::replication::master_side::{MasterConfig, MasterSide};
use crate::replication::master_state::{MasterIdentity, MasterSettings};
use crate::replication::service::{HandoffInbox, HandoffSenders, MasterService, SlaveService};
use crate::replication::slave_link::{SlaveConfig, SlaveSide};
use crate::replication::slave_state::SlaveIdentity;
use crate::shard::service::ShardService;

/// The master's addresses as a slave's shards see them: its HA address, set at start from
/// `haMasterAddress` or later from a name server's answer to the registration, and its
/// broker address (where the slave copies its tables from, `node::metadata_sync`), from
/// the name servers' answers only, as RocketMQ's slave learns it.
#[derive(Clone, Debug)]
pub struct MasterAddress {
    pub sender: std::sync::Arc<watch::Sender<Option<SocketAddr>>>,
    pub receiver: watch::Receiver<Option<SocketAddr>>,
    pub broker_sender: std::sync::Arc<watch::Sender<Option<SocketAddr>>>,
    pub broker_receiver: watch::Receiver<Option<SocketAddr>>,
}

impl MasterAddress {
    pub fn new(configured: Option<SocketAddr>) -> MasterAddress {
        let (sender, receiver) = watch::channel(configured);
        let (broker_sender, broker_receiver) = watch::channel(None);
        MasterAddress {
            sender: std::sync::Arc::new(sender),
            receiver,
            broker_sender: std::sync::Arc::new(broker_sender),
            broker_receiver,
        }
    }

    /// A name server named `addr` as the master's broker address.
    pub fn learned_broker(&self, addr: SocketAddr) {
        self.broker_sender.send_if_modified(|current| {
            let changed = *current != Some(addr);
            *current = Some(addr);
            changed
        });
    }

    /// A name server named `addr` as the master's HA address; a configured address wins.
    pub fn learned(&self, addr: SocketAddr, configured: bool) {
        if configured {
            return;
        }
        let changed = self.sender.send_if_modified(|current| {
            let changed = *current != Some(addr);
            *current = Some(addr);
            changed
        });
        if changed {
            tracing::info!(master = %addr, "a name server named this slave's master");
        }
    }
}

/// One handoff channel per shard: the senders go to shard 0's accept loop, each receiver
/// to its shard.
pub fn handoff_channels(shards: u8) -> (HandoffSenders, Vec<HandoffInbox>) {
    (0..shards).map(|_| mpsc::unbounded_channel()).unzip()
}

/// The HA port a master listens on: `haListenPort`, else `listenPort` + 1 (0 stays 0: a
/// free one).
pub fn ha_port(config: &NodeConfig) -> u16 {
    config.ha_listen_port.unwrap_or(match config.listen_port {
        0 => 0,
        port => port.wrapping_add(1),
    })
}

/// What a shard's replication service needs from its start.
pub struct ReplicationStart<L> {
    /// Shard 0 of a master: the HA port's listener.
    pub listener: Option<L>,
    /// Shard 0 of a master: where to hand streams of other shards.
    pub senders: HandoffSenders,
    pub inbox: HandoffInbox,
    /// This start of the node, the same on every shard
    /// ([`crate::replication::service::next_node_key`]).
    pub node: u64,
}

/// Opens the shard's replication service for the node's role, and the sampler that puts
/// its figures on the metrics page once a second ([`super::replication_sampler`]). A
/// master's store tells the shard's metrics how long each batch waited for its replica.
/// In controller mode (D18) a master takes the `assignment`'s epoch and replica gate;
/// without one it draws its own epoch and always needs its replica under SYNC_MASTER.
pub async fn open<L: Listener, T: Transport>(
    config: &NodeConfig,
    broker: &Rc<Broker>,
    start: ReplicationStart<L>,
    transport: T,
    master: &MasterAddress,
    assignment: Option<&super::RoleAssignment>,
) -> anyhow::Result<Vec<Rc<dyn ShardService>>> {
    let epoch = assignment.and_then(|role| role.master_epoch());
    let (service, side) = open_role(config, broker, start, transport, master, epoch).await?;
    if let (Side::Master(side), Some(role)) = (&side, assignment) {
        if let Some(gate) = role.replica_gate() {
            side.store().set_replica_gate(gate.clone());
        }
        if let Some(lease) = role.write_lease() {
            side.store().set_write_lease(lease.clone());
        }
    }
    if let Side::Master(side) = &side {
        let metrics = broker.metrics().clone();
        side.store()
            .set_confirm_hook(Rc::new(move |waited| metrics.replica_confirmed(waited)));
    }
    let sampler = Rc::new(Sampler {
        broker: broker.clone(),
        side,
        master: master.receiver.clone(),
        fallbehind_max: config.ha_slave_fallbehind_max,
    });
    Ok(vec![service, sampler])
}

/// Opens the replication service of the node's role on this shard.
async fn open_role<L: Listener, T: Transport>(
    config: &NodeConfig,
    broker: &Rc<Broker>,
    start: ReplicationStart<L>,
    transport: T,
    master: &MasterAddress,
    epoch: Option<u32>,
) -> anyhow::Result<(Rc<dyn ShardService>, Side)> {
    let store = broker.store().clone();
    let shard = broker.shard().id();
    let epochs = EpochStore::load(&store.config().dir)
        .map_err(|error| anyhow::anyhow!("shard {shard}: {error}"))?;
    let shard_index = u16::from(shard);
    let shard_count = u16::from(config.shards);
    if config.broker_role == BrokerRole::Slave {
        let side = SlaveSide::new(
            store,
            epochs,
            SlaveConfig {
                identity: SlaveIdentity {
                    cluster: config.broker_cluster_name.clone(),
                    broker: config.broker_name.clone(),
                    shard_index,
                    shard_count,
                    slave_broker_id: config.broker_id,
                    sync_from_last_file: config.sync_from_last_file,
                    async_learner: false,
                },
                heartbeat: config.ha_send_heartbeat_interval,
                housekeeping: config.ha_housekeeping_interval,
                batch_bytes_max: config.ha_slave_batch_bytes_max,
            },
        );
        tracing::info!(
            shard,
            master = ?*master.receiver.borrow(),
            written = side.store().log_positions().written,
            "shard is a slave: it follows its master's stream"
        );
        broker.set_master_stream(side.stream_flag());
        let service = SlaveService::new(side.clone(), transport, master.receiver.clone());
        return Ok((Rc::new(service), Side::Slave(side)));
    }
    let master_config = MasterConfig {
        identity: MasterIdentity {
            cluster: config.broker_cluster_name.clone(),
            broker: config.broker_name.clone(),
            shard_index,
            shard_count,
        },
        stream: MasterSettings {
            batch_bytes: config.ha_transfer_batch_size,
            segment_bytes: config.maped_file_size_commit_log,
            heartbeat_interval_ms: millis(config.ha_send_heartbeat_interval),
        },
        heartbeat: config.ha_send_heartbeat_interval,
        housekeeping: config.ha_housekeeping_interval,
        fallbehind_max: config.ha_slave_fallbehind_max,
        send_bytes: config.ha_send_batch_bytes,
        epoch,
    };
    let side = MasterSide::become_master(store, &epochs, master_config)
        .await
        .map_err(|error| anyhow::anyhow!("shard {shard}: {error}"))?;
    let service = MasterService::new(
        side.clone(),
        start.node,
        start.listener,
        start.senders,
        start.inbox,
    );
    Ok((Rc::new(service), Side::Master(side)))
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
