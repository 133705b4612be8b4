//! Three controller nodes on the simulated network and simulated disks, replicating an
//! append-only list of `u64`, while a seeded driver proposes values, kills nodes (the
//! disk loses what was not synced, then the node restarts from it), kills the leader and
//! partitions a node away and back.
//!
//! Checked: at most one leader per term (sampled every 10 ms while the driver waits, and
//! after every step); after a
//! leader is killed another node leads within twice [`FAILOVER_BOUND`], and within it in
//! 95% of the kills over the sweep (the network loses 2% of segments, each costing a
//! 200 ms retransmission); after the faults heal
//! every node's list is the same, holds every value whose proposal was answered `Ok`, and
//! holds no value twice.
//!
//! Seeds: `RINGMQ_SIM_SEEDS=START..END cargo test --lib controller::raft::sim_tests`, else
//! a few.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{ControllerRaft, ProposeError, RaftSettings};
use crate::controller::replicated::ReplicatedState;
use crate::io::sim::{SimConfig, SimDisk};
use crate::io::Disk;
use crate::net::sim::{Direction, NetConfig, SimConnection, SimNet};
use crate::net::{Connection, Listener, Transport};
use crate::remoting::{encode_frame, take_frame, RemotingCommand, DEFAULT_MAX_FRAME_LEN};
use crate::rng::SplitMix64;

const NODES: u64 = 3;
const PORT: u16 = 9876;
const STEPS: usize = 80;
/// The bound on failover: a new leader within 1 s of the old one's death.
const FAILOVER_BOUND: Duration = Duration::from_secs(1);

/// The replicated state: values in commit order.
#[derive(Default)]
struct ListState(Vec<u64>);

impl ReplicatedState for ListState {
    fn apply(&mut self, command: &[u8]) -> Vec<u8> {
        match <[u8; 8]>::try_from(command) {
            Ok(bytes) => {
                self.0.push(u64::from_le_bytes(bytes));
                (self.0.len() as u64).to_le_bytes().to_vec()
            }
            Err(_) => b"bad command".to_vec(),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).expect("a list encodes")
    }

    fn restore(&mut self, snapshot: &[u8]) -> io::Result<()> {
        self.0 = serde_json::from_slice(snapshot).map_err(io::Error::other)?;
        Ok(())
    }
}

type Node = Rc<ControllerRaft<ListState>>;

/// One node: its disk survives its deaths; its Raft and server tasks do not.
struct SimNode {
    id: u64,
    disk: Rc<SimDisk>,
    raft: Option<Node>,
    tasks: Rc<RefCell<Vec<JoinHandle<()>>>>,
}

fn ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, id as u8))
}

fn addr(id: u64) -> SocketAddr {
    SocketAddr::new(ip(id), PORT)
}

fn settings(seed: u64) -> RaftSettings {
    RaftSettings {
        snapshot_every_logs: 20,
        logs_kept: 5,
        propose_timeout: Duration::from_secs(2),
        seed: Some(seed),
        ..RaftSettings::default()
    }
}

/// Answers the Raft RPCs of one connection, each request in a task of its own.
async fn serve_connection(
    connection: SimConnection,
    raft: Node,
    tasks: Rc<RefCell<Vec<JoinHandle<()>>>>,
) {
    let (mut reader, mut writer) = connection.into_split();
    let (answers, mut outgoing) = tokio::sync::mpsc::unbounded_channel::<RemotingCommand>();
    tasks
        .borrow_mut()
        .push(tokio::task::spawn_local(async move {
            while let Some(answer) = outgoing.recv().await {
                let mut frame = Vec::new();
                encode_frame(&answer, &mut frame).expect("an answer encodes");
                if writer.write_all(&frame).await.is_err() {
                    return;
                }
            }
        }));
    let mut buffer = BytesMut::new();
    loop {
        while let Ok(Some(request)) = take_frame(&mut buffer, DEFAULT_MAX_FRAME_LEN) {
            assert!(
                super::is_raft_rpc(request.code),
                "code {} is not a raft RPC",
                request.code
            );
            let (raft, answers) = (raft.clone(), answers.clone());
            tasks
                .borrow_mut()
                .push(tokio::task::spawn_local(async move {
                    let _ = answers.send(raft.handle_rpc(&request).await);
                }));
        }
        match reader.read_buf(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

impl SimNode {
    async fn start(&mut self, net: &SimNet, seed: u64) {
        assert!(self.raft.is_none(), "node {} is running", self.id);
        let peers: BTreeMap<u64, SocketAddr> = (1..=NODES).map(|id| (id, addr(id))).collect();
        let transport = net.host(ip(self.id));
        let disk = self.disk.clone() as Rc<dyn Disk>;
        let raft = ControllerRaft::start(
            self.id,
            peers,
            Path::new("/ctrl"),
            disk,
            transport.clone(),
            ListState::default(),
            settings(seed),
        )
        .await
        .unwrap_or_else(|error| panic!("node {} does not start: {error}", self.id));
        let raft = Rc::new(raft);
        let listener = transport
            .bind(addr(self.id))
            .await
            .expect("bind the node's port");
        let (served, tasks) = (raft.clone(), self.tasks.clone());
        self.tasks
            .borrow_mut()
            .push(tokio::task::spawn_local(async move {
                while let Ok((connection, _)) = listener.accept().await {
                    let task = serve_connection(connection, served.clone(), tasks.clone());
                    tasks.borrow_mut().push(tokio::task::spawn_local(task));
                }
            }));
        self.raft = Some(raft);
    }

    /// A SIGKILL: the disk loses power first, so nothing more reaches it.
    async fn kill(&mut self, net: &SimNet) {
        self.disk.crash_now();
        for task in self.tasks.borrow_mut().drain(..) {
            task.abort();
        }
        let raft = self.raft.take().expect("a running node");
        let _ = raft.shutdown().await;
        for other in (1..=NODES).filter(|other| *other != self.id) {
            net.reset(ip(self.id), ip(other));
        }
        // Aborted tasks (and the listener they hold) are dropped when next polled.
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.disk.restart();
    }
}

/// Term -> the leader seen in it; panics on a second leader for one term.
fn sample_leaders(nodes: &[SimNode], seen: &mut BTreeMap<u64, u64>, seed: u64) {
    use openraft::async_runtime::WatchReceiver;
    for node in nodes {
        let Some(raft) = &node.raft else { continue };
        let metrics = raft.raft().metrics();
        let metrics = metrics.borrow_watched();
        if metrics.state == openraft::ServerState::Leader {
            let leader = *seen.entry(metrics.current_term).or_insert(node.id);
            assert_eq!(
                leader, node.id,
                "seed {seed}: two leaders in term {}",
                metrics.current_term
            );
        }
    }
}

fn leader(nodes: &[SimNode]) -> Option<Node> {
    nodes
        .iter()
        .filter_map(|node| node.raft.clone())
        .find(|raft| raft.is_leader())
}

/// The driver's view of one run.
struct Run {
    seed: u64,
    net: SimNet,
    nodes: Vec<SimNode>,
    rng: SplitMix64,
    acked: BTreeSet<u64>,
    next_value: u64,
    leaders: BTreeMap<u64, u64>,
    down: Option<usize>,
    partitioned: Option<u64>,
    failovers: usize,
    slowest_failover: Duration,
    /// Failovers over [`FAILOVER_BOUND`] (a lost vote costs a 200 ms retransmission).
    slow_failovers: usize,
}

impl Run {
    async fn new(seed: u64) -> Run {
        let net = SimNet::new(NetConfig {
            seed,
            loss_percent: 2,
            ..NetConfig::default()
        })
        .expect("a valid network");
        let nodes = (1..=NODES)
            .map(|id| SimNode {
                id,
                disk: Rc::new(SimDisk::new(SimConfig::with_seed(seed ^ id))),
                raft: None,
                tasks: Rc::default(),
            })
            .collect();
        let mut run = Run {
            seed,
            net,
            nodes,
            rng: SplitMix64::new(seed),
            acked: BTreeSet::new(),
            next_value: 1,
            leaders: BTreeMap::new(),
            down: None,
            partitioned: None,
            failovers: 0,
            slowest_failover: Duration::ZERO,
            slow_failovers: 0,
        };
        for n in 0..run.nodes.len() {
            run.start(n).await;
        }
        run
    }

    async fn start(&mut self, n: usize) {
        let seed = self.rng.next_u64();
        self.nodes[n].start(&self.net, seed).await;
    }

    /// Waits up to `bound` for a leader other than `except`, sampling every 10 ms.
    async fn wait_for_leader(&mut self, except: Option<u64>, bound: Duration) -> Option<Node> {
        let deadline = Instant::now() + bound;
        loop {
            sample_leaders(&self.nodes, &mut self.leaders, self.seed);
            if let Some(raft) = leader(&self.nodes).filter(|raft| Some(raft.id()) != except) {
                return Some(raft);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn propose(&mut self) -> bool {
        let Some(raft) = leader(&self.nodes) else {
            return false;
        };
        let value = self.next_value;
        self.next_value += 1;
        match raft.propose(value.to_le_bytes().to_vec()).await {
            Ok(_) => {
                assert!(
                    raft.with_state(|list| list.0.contains(&value)),
                    "seed {}: value {value} acknowledged but not applied on the leader",
                    self.seed
                );
                self.acked.insert(value);
                true
            }
            Err(ProposeError::NotLeader { .. } | ProposeError::Unknown(_)) => false,
            Err(ProposeError::Failed(error)) => {
                panic!("seed {}: proposal failed: {error}", self.seed)
            }
        }
    }

    async fn kill_leader(&mut self) {
        let Some(old) = self.wait_for_leader(None, Duration::from_secs(5)).await else {
            return;
        };
        let n = self
            .nodes
            .iter()
            .position(|node| node.id == old.id())
            .expect("the leader is a node");
        drop(old);
        let killed = Instant::now();
        self.nodes[n].kill(&self.net).await;
        self.down = Some(n);
        let successor = self
            .wait_for_leader(Some(self.nodes[n].id), FAILOVER_BOUND * 3)
            .await;
        let took = killed.elapsed();
        assert!(
            successor.is_some(),
            "seed {}: no new leader {took:?} after leader {} was killed (bound {FAILOVER_BOUND:?}, twice that at most)",
            self.seed,
            self.nodes[n].id
        );
        self.failovers += 1;
        self.slowest_failover = self.slowest_failover.max(took);
        self.slow_failovers += usize::from(took > FAILOVER_BOUND);
    }

    /// One seeded action, then a seeded pause.
    async fn step(&mut self) {
        let calm = self.down.is_none() && self.partitioned.is_none();
        match self.rng.below(100) {
            0..=69 => {
                self.propose().await;
            }
            70..=77 if calm => self.kill_leader().await,
            78..=84 if calm => {
                let n = self.rng.below(self.nodes.len());
                self.nodes[n].kill(&self.net).await;
                self.down = Some(n);
            }
            85..=92 if calm => {
                let id = 1 + self.rng.below(NODES as usize) as u64;
                for other in (1..=NODES).filter(|other| *other != id) {
                    self.net.partition(ip(id), ip(other), Direction::Both);
                }
                self.partitioned = Some(id);
            }
            _ => self.heal().await,
        }
        sample_leaders(&self.nodes, &mut self.leaders, self.seed);
        tokio::time::sleep(Duration::from_millis(self.rng.below(100) as u64)).await;
    }

    async fn heal(&mut self) {
        self.net.heal_all();
        self.partitioned = None;
        if let Some(n) = self.down.take() {
            self.start(n).await;
        }
    }
}

impl Run {
    /// Heals everything, commits one more value, waits for every node to apply it, and
    /// checks the lists.
    async fn finish(&mut self) {
        self.heal().await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.propose().await {
            assert!(
                Instant::now() < deadline,
                "seed {}: no value commits after healing",
                self.seed
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let last = self.next_value - 1;
        let rafts: Vec<Node> = self
            .nodes
            .iter()
            .map(|node| node.raft.clone().expect("every node runs"))
            .collect();
        while !rafts
            .iter()
            .all(|raft| raft.with_state(|list| list.0.contains(&last)))
        {
            assert!(
                Instant::now() < deadline,
                "seed {}: value {last} does not reach every node",
                self.seed
            );
            sample_leaders(&self.nodes, &mut self.leaders, self.seed);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let lists: Vec<Vec<u64>> = rafts
            .iter()
            .map(|raft| raft.with_state(|list| list.0.clone()))
            .collect();
        for (n, list) in lists.iter().enumerate() {
            assert_eq!(
                list,
                &lists[0],
                "seed {}: node {} and node 1 differ",
                self.seed,
                n + 1
            );
        }
        let held: BTreeSet<u64> = lists[0].iter().copied().collect();
        assert_eq!(
            held.len(),
            lists[0].len(),
            "seed {}: a value applied twice: {:?}",
            self.seed,
            lists[0]
        );
        let lost: Vec<u64> = self.acked.difference(&held).copied().collect();
        assert!(
            lost.is_empty(),
            "seed {}: acknowledged values lost: {lost:?}",
            self.seed
        );
        // A node that was down while the others snapshotted may not have built one of its
        // own yet; the group as a whole must have exercised snapshot and purge.
        let snapshotted = rafts.iter().any(|raft| {
            use openraft::async_runtime::WatchReceiver;
            let metrics = raft.raft().metrics().borrow_watched().clone();
            metrics.snapshot.is_some() && metrics.purged.is_some()
        });
        assert!(
            snapshotted,
            "seed {}: no node snapshotted and purged: the bound on the log went untested",
            self.seed
        );
        for raft in rafts {
            raft.shutdown().await.expect("a clean shutdown");
        }
    }
}

/// Runs one seed; its failovers and how many were slower than [`FAILOVER_BOUND`].
async fn run(seed: u64) -> (usize, usize) {
    let mut run = Run::new(seed).await;
    assert!(
        run.wait_for_leader(None, Duration::from_secs(10))
            .await
            .is_some(),
        "seed {seed}: no first leader"
    );
    for _ in 0..STEPS {
        run.step().await;
    }
    run.finish().await;
    println!(
        "seed {seed}: {} acknowledged of {} proposed, {} terms with a leader, {} leader kills, slowest failover {:?}",
        run.acked.len(),
        run.next_value - 1,
        run.leaders.len(),
        run.failovers,
        run.slowest_failover
    );
    assert!(
        run.acked.len() >= STEPS / 4,
        "seed {seed}: only {} values acknowledged: the run tested little",
        run.acked.len()
    );
    (run.failovers, run.slow_failovers)
}

/// `RINGMQ_SIM_SEEDS=START..END`, else `default`.
fn seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    let Ok(text) = std::env::var("RINGMQ_SIM_SEEDS") else {
        return default;
    };
    let (start, end) = text
        .split_once("..")
        .unwrap_or_else(|| panic!("RINGMQ_SIM_SEEDS={text}: expected START..END"));
    start.trim().parse().expect("RINGMQ_SIM_SEEDS start")
        ..end.trim().parse().expect("RINGMQ_SIM_SEEDS end")
}

#[test]
fn acknowledged_proposals_survive_crashes_partitions_and_failovers() {
    for seed in seeds(0..4) {
        println!("seed {seed} (RINGMQ_SIM_SEEDS={seed}..{})", seed + 1);
        on_paused_time(run(seed));
    }
}

/// Runs `future` on one thread in paused time, as every test here does.
fn on_paused_time<F: Future>(future: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    tokio::task::LocalSet::new().block_on(&runtime, future)
}

/// A Raft RPC whose body does not decode is answered with an error, not a panic.
#[test]
fn a_bad_rpc_body_gets_an_error_response() {
    on_paused_time(async {
        let net = SimNet::new(NetConfig::default()).expect("a valid network");
        let mut node = SimNode {
            id: 1,
            disk: Rc::new(SimDisk::new(SimConfig::with_seed(1))),
            raft: None,
            tasks: Rc::default(),
        };
        node.start(&net, 1).await;
        let raft = node.raft.clone().expect("running");
        for code in [
            super::rpc::RAFT_APPEND_ENTRIES,
            super::rpc::RAFT_VOTE,
            super::rpc::RAFT_PRE_VOTE,
            super::rpc::RAFT_FULL_SNAPSHOT,
        ] {
            let request =
                RemotingCommand::request(code, Default::default()).with_body(&b"{not json"[..]);
            let answer = raft.handle_rpc(&request).await;
            assert_eq!(
                answer.code,
                crate::remoting::codes::response::SYSTEM_ERROR,
                "code {code}"
            );
            assert!(
                answer
                    .remark
                    .as_deref()
                    .unwrap_or_default()
                    .contains("decode"),
                "code {code}: {:?}",
                answer.remark
            );
        }
        assert!(!super::is_raft_rpc(30002) && super::is_raft_rpc(30010));
        node.kill(&net).await;
    });
}

/// A node restarted with other peers than the group its storage holds is refused, naming
/// both; with the same peers it starts.
#[test]
fn a_restart_with_other_peers_than_the_stored_group_is_refused() {
    on_paused_time(async {
        let net = SimNet::new(NetConfig::default()).expect("a valid network");
        let disk = Rc::new(SimDisk::new(SimConfig::with_seed(2)));
        let mut node = SimNode {
            id: 1,
            disk: disk.clone(),
            raft: None,
            tasks: Rc::default(),
        };
        // The lowest id initializes the group of every node.
        node.start(&net, 2).await;
        node.kill(&net).await;
        let alone = BTreeMap::from([(1, addr(1))]);
        let refused = ControllerRaft::start(
            1,
            alone,
            Path::new("/ctrl"),
            disk.clone() as Rc<dyn Disk>,
            net.host(ip(1)),
            ListState::default(),
            settings(2),
        )
        .await
        .err()
        .expect("a restart with other peers is refused");
        let why = refused.to_string();
        assert!(
            why.contains("controllerDLegerPeers") && why.contains(&addr(3).to_string()),
            "{why}"
        );
        node.start(&net, 3).await;
        node.kill(&net).await;
    });
}
