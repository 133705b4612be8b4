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

/// The master's HA address as a slave's shards see it: set at start from
/// `haMasterAddress`, or later from a name server's answer to the registration.
#[derive(Clone, Debug)]
pub struct MasterAddress {
    pub sender: std::sync::Arc<watch::Sender<Option<SocketAddr>>>,
    pub receiver: watch::Receiver<Option<SocketAddr>>,
}

impl MasterAddress {
    pub fn new(configured: Option<SocketAddr>) -> MasterAddress {
        let (sender, receiver) = watch::channel(configured);
        MasterAddress {
            sender: std::sync::Arc::new(sender),
            receiver,
        }
    }

    /// A name server named `addr` as the master's HA address; a configured address wins.
    pub fn learned(&self, addr: SocketAddr, configured: bool) {
        if configured {
            return;
        }
        self.sender.send_if_modified(|current| {
            let changed = *current != Some(addr);
            *current = Some(addr);
            changed
        });
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
}

/// Opens the shard's replication service for the node's role.
pub async fn open<L: Listener, T: Transport>(
    config: &NodeConfig,
    broker: &Rc<Broker>,
    start: ReplicationStart<L>,
    transport: T,
    master: &MasterAddress,
) -> anyhow::Result<Rc<dyn ShardService>> {
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
            },
        );
        let service = SlaveService::new(side, transport, master.receiver.clone());
        return Ok(Rc::new(service));
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
    };
    let side = MasterSide::become_master(store, &epochs, master_config)
        .await
        .map_err(|error| anyhow::anyhow!("shard {shard}: {error}"))?;
    let service = MasterService::new(side, start.listener, start.senders, start.inbox);
    Ok(Rc::new(service))
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
