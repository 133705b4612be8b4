//! The campaign's cluster: three controllers, one name server, and two broker groups of two
//! brokers each in controller mode (SYNC_MASTER), every broker reaching each controller
//! through a [`FaultProxy`] of its own, so a master can be cut from the controllers while
//! its clients and its slave still reach it. Slaves reach a master's HA port through a
//! proxy too: the broker advertises it as its `brokerIP2` (127.0.0.(10 + its index), on
//! the HA port's number), as RocketMQ advertises `haServerAddr`. For a disk-stall episode
//! each broker's store is on a [`FrozenDisk`] of its own. What it offers the episode: who
//! is master of a group, and each fault's injection and heal.

use std::net::SocketAddr;
use std::time::Duration;

use super::faults::{Kind, Plan};
use super::frozen_disk::FrozenDisk;
use super::proxy::{FaultProxy, Link};
use super::workload::{master_of, QUEUES, TOPIC};
use crate::common::process_cluster::{create_topic, routed_to, BrokerSpec, ProcessCluster};
use crate::common::process_controllers::{
    controller_mode_broker, leader, replica_info, Controller, ControllerGroup,
};
use crate::common::run_local;

pub const GROUPS: [&str; 2] = ["broker-a", "broker-b"];
/// How long the cluster may take to form, or to form again after a heal: every group with
/// a master and both brokers in its SyncStateSet (debug builds, a shared machine).
pub const SETTLE_LIMIT: Duration = Duration::from_secs(90);

pub struct CampaignCluster {
    pub cluster: ProcessCluster,
    pub controllers: ControllerGroup,
    /// Per broker, at its index in `cluster.brokers`: its proxy to each controller.
    proxies: Vec<Vec<FaultProxy>>,
    /// Per broker: the proxy its slaves stream through while it is master.
    ha_proxies: Vec<FaultProxy>,
    /// Per group of [`GROUPS`]: its brokers' indexes.
    members: Vec<Vec<usize>>,
    /// Per broker, the disk its store is on, for a disk-stall episode; else none. Dropped
    /// (unmounted) after `cluster` ended its processes.
    disks: Vec<FrozenDisk>,
}

impl Drop for CampaignCluster {
    /// Thaws every disk before the fields drop: a process blocked on a frozen disk cannot
    /// be killed, and `cluster`'s drop kills and reaps them.
    fn drop(&mut self) {
        for disk in &mut self.disks {
            disk.thaw();
        }
    }
}

/// What undoes an injected fault.
pub enum Heal {
    StartBroker(usize),
    StartController(usize),
    Resume(usize),
    OpenLinks(usize),
    OpenHaLink(usize),
    Thaw(usize),
}

/// Flips one bit in the last 4 KiB of the written part of the last CommitLog segment in
/// `dir` that holds any (odd `draw`), or zeroes from a drawn point of them to the end
/// (even `draw`); the written part ends at its last byte that is not zero (segments are
/// made whole, zero-filled, ahead of the writes).
fn damage_tail(dir: &std::path::Path, draw: u64) {
    let mut segments: Vec<_> = std::fs::read_dir(dir)
        .expect("the slave's CommitLog directory")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    segments.sort();
    for segment in segments.iter().rev() {
        let mut bytes = std::fs::read(segment).expect("read a segment");
        let Some(last) = bytes.iter().rposition(|&b| b != 0) else {
            continue;
        };
        let end = last + 1;
        let span = end.min(4096) as u64;
        let at = end - 1 - (draw / 2 % span) as usize;
        if draw % 2 == 1 {
            bytes[at] ^= 1 << (draw / 8192 % 8);
        } else {
            bytes[at..end].fill(0);
        }
        std::fs::write(segment, &bytes).expect("write the damaged segment");
        return;
    }
}

/// Broker `n` of `group`: SYNC_MASTER in controller mode, reaching the controllers at
/// `controller_addr`, its HA port advertised at `ha`.
fn broker_spec(
    group: &str,
    n: u64,
    shards: u8,
    controller_addr: &[String],
    (ha_ip, ha_port): (std::net::Ipv4Addr, u16),
) -> BrokerSpec {
    controller_mode_broker(group, n, &controller_addr.join(";"))
        .set("shards", shards)
        .set("haListenPort", ha_port)
        .set("brokerIP2", ha_ip)
        // Short enough that an HA partition's hold may outlast it.
        .set("haMaxTimeSlaveNotCatchup", 3000)
}

impl CampaignCluster {
    /// Starts the cluster with `shards` shards per broker, each broker's store on a
    /// [`FrozenDisk`] if `freezable`, and waits until it formed, the topic created on every
    /// master and routed to both groups.
    pub fn start(shards: u8, freezable: bool) -> CampaignCluster {
        let mut cluster = ProcessCluster::new(1);
        let mut disks = Vec::new();
        cluster.start_name_servers();
        let controllers = ControllerGroup::start(cluster.dir());
        let mut proxies = Vec::new();
        let mut ha_proxies = Vec::new();
        let mut members = vec![Vec::new(); GROUPS.len()];
        for n in 0..2 {
            for (g, group) in GROUPS.iter().enumerate() {
                let links: Vec<FaultProxy> = controllers
                    .addrs()
                    .into_iter()
                    .map(FaultProxy::start)
                    .collect();
                let controller_addr: Vec<String> =
                    links.iter().map(|p| p.addr().to_string()).collect();
                let index = proxies.len();
                let ha_port = crate::common::process_cluster::free_port();
                let ha_ip = std::net::Ipv4Addr::new(127, 0, 0, 10 + index as u8);
                ha_proxies.push(FaultProxy::start_at(
                    SocketAddr::from((ha_ip, ha_port)),
                    SocketAddr::from(([127, 0, 0, 1], ha_port)),
                ));
                let spec = broker_spec(group, n, shards, &controller_addr, (ha_ip, ha_port));
                let spec = if freezable {
                    let disk = FrozenDisk::mount();
                    let root = disk.root().join("store");
                    disks.push(disk);
                    spec.set("storePathRootDir", root.display())
                } else {
                    spec
                };
                members[g].push(cluster.add_broker(spec));
                proxies.push(links);
            }
        }
        let mut formed = CampaignCluster {
            cluster,
            controllers,
            proxies,
            ha_proxies,
            members,
            disks,
        };
        formed.wait_settled("the cluster to form");
        for group in GROUPS {
            let master = formed.master(group);
            create_topic(
                formed.cluster.brokers[master].addr,
                TOPIC,
                4,
                QUEUES as u32,
                6,
            );
        }
        let namesrv = formed.cluster.name_servers[0].addr;
        formed
            .cluster
            .wait_until(SETTLE_LIMIT, "the topic routed to both groups", || {
                routed_to(namesrv, TOPIC, &GROUPS)
            });
        formed
    }

    pub fn namesrv(&self) -> SocketAddr {
        self.cluster.name_servers[0].addr
    }

    /// Waits until every broker runs and every group has a master and both brokers in its
    /// SyncStateSet; panics with the logs past [`SETTLE_LIMIT`].
    pub fn wait_settled(&mut self, what: &str) {
        let addrs = self.controllers.addrs();
        self.cluster.wait_until(SETTLE_LIMIT, what, || {
            GROUPS.iter().all(|group| {
                let info = run_local(false, replica_info(&addrs, group));
                matches!(info, Some((Some(_), _, set)) if set.len() == 2)
            })
        });
    }

    /// The index of `group`'s master, as the controllers name it; waits for one.
    pub fn master(&self, group: &str) -> usize {
        let addrs = self.controllers.addrs();
        let mut found = None;
        self.cluster
            .wait_until(SETTLE_LIMIT, &format!("a master of {group}"), || {
                found = run_local(false, master_of(&addrs, group))
                    .and_then(|(addr, _)| self.cluster.brokers.iter().position(|b| b.addr == addr));
                found.is_some()
            });
        found.expect("found")
    }

    /// The index of `group`'s other broker than `master`.
    pub fn other(&self, group: usize, master: usize) -> usize {
        let other = self.members[group].iter().find(|&&b| b != master);
        *other.expect("two brokers a group")
    }

    /// The index of the controllers' leader.
    fn controller_leader(&self) -> usize {
        let addrs = self.controllers.addrs();
        let at = run_local(false, leader(&addrs));
        addrs
            .iter()
            .position(|&a| a == at)
            .expect("a controller's address")
    }

    fn kill_controller(&mut self, i: usize) {
        let child = &mut self.controllers.controllers[i].child;
        child.kill().expect("SIGKILL a controller");
        child.wait().expect("reap a controller");
    }

    /// Injects `plan`'s fault; what heals it.
    pub fn inject(&mut self, plan: &Plan) -> Vec<Heal> {
        let group = GROUPS[plan.group];
        match plan.kind {
            Kind::KillMaster => {
                let master = self.master(group);
                self.cluster.brokers[master].kill();
                vec![Heal::StartBroker(master)]
            }
            Kind::KillSlave => {
                let slave = self.other(plan.group, self.master(group));
                self.cluster.brokers[slave].kill();
                vec![Heal::StartBroker(slave)]
            }
            Kind::KillControllerLeader => {
                let leader = self.controller_leader();
                self.kill_controller(leader);
                vec![Heal::StartController(leader)]
            }
            Kind::KillMasterAndControllerLeader => {
                let (master, leader) = (self.master(group), self.controller_leader());
                self.cluster.brokers[master].kill();
                self.kill_controller(leader);
                // The controller first: the broker's start waits for its role.
                vec![Heal::StartController(leader), Heal::StartBroker(master)]
            }
            Kind::PauseMaster => {
                let master = self.master(group);
                self.cluster.brokers[master].pause();
                vec![Heal::Resume(master)]
            }
            Kind::CutMasterFromControllers
            | Kind::MasterUnheardByControllers
            | Kind::ControllersUnheardByMaster => {
                let link = match plan.kind {
                    Kind::CutMasterFromControllers => Link::Cut,
                    Kind::MasterUnheardByControllers => Link::ClientSilenced,
                    _ => Link::TargetSilenced,
                };
                let master = self.master(group);
                self.set_links(master, link);
                vec![Heal::OpenLinks(master)]
            }
            Kind::DamageSlaveTail => {
                let slave = self.other(plan.group, self.master(group));
                self.cluster.brokers[slave].kill();
                let root = self.cluster.brokers[slave].props().get("storePathRootDir");
                let root = std::path::PathBuf::from(root.expect("a store root"));
                damage_tail(&root.join("shard-0").join("commitlog"), plan.draw);
                vec![Heal::StartBroker(slave)]
            }
            Kind::CutMasterFromSlave | Kind::SlaveUnheardByMaster => {
                let master = self.master(group);
                // The fault is on the path only if the slave streams through the proxy
                // (the master advertises it as `brokerIP2`).
                assert!(
                    self.ha_proxies[master].accepted() > 0,
                    "no slave connected through broker {master}'s HA proxy"
                );
                let link = match plan.kind {
                    Kind::CutMasterFromSlave => Link::Cut,
                    _ => Link::ClientSilenced,
                };
                self.ha_proxies[master].set(link);
                vec![Heal::OpenHaLink(master)]
            }
            Kind::DiskStall => self.stall_disk(plan),
        }
    }

    /// Freezes the disk of `plan`'s group's master or slave.
    fn stall_disk(&mut self, plan: &Plan) -> Vec<Heal> {
        let master = self.master(GROUPS[plan.group]);
        let broker = match plan.stalls_master() {
            true => master,
            false => self.other(plan.group, master),
        };
        assert!(
            !self.disks.is_empty(),
            "a DiskStall episode's cluster has no disks to freeze"
        );
        self.disks[broker].freeze();
        vec![Heal::Thaw(broker)]
    }

    pub fn heal(&mut self, heals: Vec<Heal>) {
        for heal in heals {
            match heal {
                Heal::StartBroker(broker) => self.cluster.brokers[broker].start(),
                Heal::StartController(i) => {
                    let conf = self.controllers.confs[i].clone();
                    self.controllers.controllers[i] = Controller::start(&conf);
                }
                Heal::Resume(broker) => self.cluster.brokers[broker].resume(),
                Heal::OpenLinks(broker) => self.set_links(broker, Link::Open),
                Heal::OpenHaLink(broker) => self.ha_proxies[broker].set(Link::Open),
                Heal::Thaw(broker) => self.disks[broker].thaw(),
            }
        }
    }

    /// Sets `broker`'s links to every controller to `link`.
    fn set_links(&self, broker: usize, link: Link) {
        for proxy in &self.proxies[broker] {
            proxy.set(link);
        }
    }
}
