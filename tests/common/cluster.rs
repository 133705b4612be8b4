//! The cluster harness: N nodes on one simulated network, each a [`LocalNode`] on a host of
//! its own with its own store directory, and clients on hosts of their own. A test cuts
//! and heals paths between any two hosts (one way or both), clogs them, resets their
//! connections, and stops, kills or restarts a node on its directory; every operation goes
//! into a [`History`], which [`History::check`] holds against what the nodes hold
//! afterwards. [`Producer`] is a workload's producer that records into one.
//!
//! Everything runs on the test's thread (the simulated network is single-threaded), in
//! real time (the stores are real ones in temporary directories). Host addresses:
//! node `i` is 10.0.1.(i+1), client `c` is 10.0.2.(c+1).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use ringmq::client::Client;
use ringmq::net::sim::{NetConfig, SimNet, SimTransport};
use ringmq::node::local::LocalNode;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::queue_request;

use super::{node_config, pull_records};

/// N nodes on one simulated network.
pub struct SimCluster {
    pub net: SimNet,
    nodes: Vec<Option<LocalNode>>,
    configs: Vec<NodeConfig>,
    _dirs: Vec<tempfile::TempDir>,
}

impl SimCluster {
    /// Starts `count` nodes with the test defaults ([`node_config`]), each changed by
    /// `configure(i, config)`, on a network made from `net`.
    pub async fn start(
        count: usize,
        net: NetConfig,
        configure: impl Fn(usize, &mut NodeConfig),
    ) -> SimCluster {
        let net = SimNet::new(net).expect("a valid network config");
        let mut cluster = SimCluster {
            net,
            nodes: Vec::new(),
            configs: Vec::new(),
            _dirs: Vec::new(),
        };
        for i in 0..count {
            cluster.add_node(|config| configure(i, config)).await;
        }
        cluster
    }

    /// Starts one more node (the next index) with the test defaults changed by
    /// `configure`, on a directory of its own.
    pub async fn add_node(&mut self, configure: impl FnOnce(&mut NodeConfig)) {
        let i = self.nodes.len();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut config = node_config(dir.path());
        config.bind_address = node_ip(i);
        config.broker_ip = node_ip(i);
        configure(&mut config);
        let node = LocalNode::start(config.clone(), &self.net.host(node_ip(i)))
            .await
            .unwrap_or_else(|error| panic!("node {i} starts: {error:#}"));
        // A restart listens where clients (and slaves) were told to connect.
        config.listen_port = node.addr().port();
        config.namesrv_port = node.namesrv_addr().port();
        // A slave has no HA port; promoted later, it takes a free one (its ports + 1 may be
        // another listener's on the simulated host).
        config.ha_listen_port = Some(node.ha_addr().map_or(0, |ha| ha.port()));
        self.nodes.push(Some(node));
        self.configs.push(config);
        self._dirs.push(dir);
    }

    /// Node `i`'s host address.
    pub fn ip(&self, i: usize) -> IpAddr {
        node_ip(i)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Where node `i` serves.
    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::new(node_ip(i), self.configs[i].listen_port)
    }

    /// A client on host `client_ip(c)` connected to node `node`.
    pub async fn client(&self, c: usize, node: usize) -> std::io::Result<Client> {
        Client::connect_over(&self.net.host(client_ip(c)), self.addr(node)).await
    }

    /// Stops node `i` cleanly and starts it again on its directory and port.
    pub async fn restart(&mut self, i: usize) {
        let node = self.nodes[i]
            .take()
            .unwrap_or_else(|| panic!("node {i} is not running"));
        node.shutdown()
            .await
            .unwrap_or_else(|error| panic!("node {i} stops cleanly: {error:#}"));
        let node = LocalNode::start(self.configs[i].clone(), &self.net.host(node_ip(i)))
            .await
            .unwrap_or_else(|error| panic!("node {i} restarts: {error:#}"));
        self.nodes[i] = Some(node);
    }

    /// Node `i`'s master HA address (its slaves' `haMasterAddress`).
    pub fn ha_addr(&self, i: usize) -> SocketAddr {
        let port = self.configs[i]
            .ha_listen_port
            .unwrap_or_else(|| panic!("node {i} has no HA port"));
        SocketAddr::new(node_ip(i), port)
    }

    /// Node `i`'s metrics page, as its Prometheus endpoint would serve it.
    pub fn metrics_page(&self, i: usize) -> String {
        self.nodes[i]
            .as_ref()
            .unwrap_or_else(|| panic!("node {i} is not running"))
            .metrics()
            .render()
    }

    /// Node `i`'s store root.
    pub fn store_dir(&self, i: usize) -> &std::path::Path {
        self._dirs[i].path()
    }

    /// Stops node `i` cleanly and leaves it stopped ([`SimCluster::start_again`]).
    pub async fn stop(&mut self, i: usize) {
        let node = self.nodes[i]
            .take()
            .unwrap_or_else(|| panic!("node {i} is not running"));
        node.shutdown()
            .await
            .unwrap_or_else(|error| panic!("node {i} stops cleanly: {error:#}"));
    }

    /// Starts node `i` again on its directory and ports, its config changed by `change`
    /// (a slave promoted, an old master made a slave).
    pub async fn start_again(&mut self, i: usize, change: impl FnOnce(&mut NodeConfig)) {
        assert!(self.nodes[i].is_none(), "node {i} is still running");
        change(&mut self.configs[i]);
        let node = LocalNode::start(self.configs[i].clone(), &self.net.host(node_ip(i)))
            .await
            .unwrap_or_else(|error| panic!("node {i} starts again: {error:#}"));
        if let Some(ha) = node.ha_addr() {
            self.configs[i].ha_listen_port = Some(ha.port());
        }
        self.nodes[i] = Some(node);
    }

    /// Kills node `i` as `kill -9` would ([`LocalNode::kill`]: nothing written on the way
    /// out, its directory left for crash recovery) and leaves it stopped
    /// ([`SimCluster::start_again`]).
    pub async fn kill(&mut self, i: usize) {
        let node = self.nodes[i]
            .take()
            .unwrap_or_else(|| panic!("node {i} is not running"));
        node.kill().await;
    }

    /// Whether node `i` runs (it was not stopped or killed, or was started again).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].is_some()
    }

    /// Stops every node cleanly.
    pub async fn shutdown(mut self) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if let Some(node) = node.take() {
                node.shutdown()
                    .await
                    .unwrap_or_else(|error| panic!("node {i} stops cleanly: {error:#}"));
            }
        }
    }

    /// What node `i` holds in `topic` queue `queue`: (offset, body) of every record, read
    /// with GET_MAX_OFFSET and pulls over a fresh connection from a reader host.
    pub async fn read_queue(&self, i: usize, topic: &str, queue: i32) -> Vec<(u64, String)> {
        let reader = Client::connect_over(&self.net.host(reader_ip()), self.addr(i))
            .await
            .expect("the reader connects");
        let max_offset = || async {
            let answer = reader
                .request(queue_request(request::GET_MAX_OFFSET, topic, queue))
                .await
                .expect("GET_MAX_OFFSET is answered");
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            answer.ext_fields["offset"].parse::<u64>().unwrap()
        };
        let mut max = max_offset().await;
        let mut held = Vec::new();
        while (held.len() as u64) < max {
            let next = held.len() as u64;
            let answer = reader.pull(topic, queue, next, 32, None).await.unwrap();
            if answer.code == response::PULL_NOT_FOUND {
                // The queue may have shrunk since its end was read: an old master started
                // again as a slave serves its unreplicated tail (recovery made it visible)
                // until it connects and truncates it (seed 1138 of the 2,000-seed sweep).
                // Then what was read is the queue up to its new end; anything else is a
                // record missing below the end.
                let now = max_offset().await;
                assert!(
                    now <= next,
                    "node {i} {topic}/{queue} at {next}: not found below the end {now}"
                );
                max = now;
                held.truncate(now as usize);
                continue;
            }
            assert_eq!(
                answer.code,
                response::SUCCESS,
                "node {i} {topic}/{queue} at {next}"
            );
            for record in pull_records(&answer.body) {
                let body = String::from_utf8(record.body.to_vec()).unwrap();
                held.push((record.queue_offset as u64, body));
            }
        }
        held
    }

    /// What nodes `a` and `b` both serve in `topic` queue `queue` once they serve the
    /// same, both read again every [`SAME_QUEUE_EVERY`] for up to `within`; the last reads
    /// of each when they never did. Both are read again each time because either may lag
    /// the other with nothing wrong: a SYNC_MASTER makes a record visible once a slave
    /// confirmed it (or once it gave up on the slave), while the slave makes it visible as
    /// it appends it; a slave dispatches a moment after its log grew.
    pub async fn same_queue(
        &self,
        (a, b): (usize, usize),
        topic: &str,
        queue: i32,
        within: Duration,
    ) -> Result<Vec<(u64, String)>, QueueDiff> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let on_a = self.read_queue(a, topic, queue).await;
            let on_b = self.read_queue(b, topic, queue).await;
            if on_a == on_b {
                return Ok(on_a);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(QueueDiff { on_a, on_b });
            }
            tokio::time::sleep(SAME_QUEUE_EVERY).await;
        }
    }
}

/// How often [`SimCluster::same_queue`] reads the two nodes again.
pub const SAME_QUEUE_EVERY: Duration = Duration::from_millis(10);

/// Two nodes' records of one queue that differ: (offset, body) each.
#[derive(Debug)]
pub struct QueueDiff {
    pub on_a: Vec<(u64, String)>,
    pub on_b: Vec<(u64, String)>,
}

impl std::fmt::Display for QueueDiff {
    /// Counts, the first difference and the last record of each: a queue may be long.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b) = (&self.on_a, &self.on_b);
        let differ = a.iter().zip(b).position(|(x, y)| x != y);
        write!(
            f,
            "{} records against {}; first difference at index {differ:?}: {:?} against \
             {:?}; last: {:?} against {:?}",
            a.len(),
            b.len(),
            differ.map(|at| &a[at]),
            differ.map(|at| &b[at]),
            a.last(),
            b.last()
        )
    }
}

/// The host of node `i`.
pub fn node_ip(i: usize) -> IpAddr {
    IpAddr::from([10, 0, 1, u8::try_from(i + 1).expect("at most 254 nodes")])
}

/// The host of client `c`.
pub fn client_ip(c: usize) -> IpAddr {
    IpAddr::from([10, 0, 2, u8::try_from(c + 1).expect("at most 254 clients")])
}

/// The host the checker reads from (never partitioned by a test).
pub fn reader_ip() -> IpAddr {
    IpAddr::from([10, 0, 3, 1])
}

/// What became of one send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered SUCCESS at this queue offset.
    Acked(u64),
    /// Answered with an error status: not stored.
    Refused(i32),
    /// No answer (a timeout, a broken connection): stored or not.
    Unknown(String),
}

/// One send: where it went, its unique body, and its outcome.
#[derive(Clone, Debug)]
pub struct Send {
    pub node: usize,
    pub topic: String,
    pub queue: i32,
    pub body: String,
    pub outcome: Outcome,
}

/// Every operation of a run, in the order they completed.
#[derive(Default)]
pub struct History {
    sends: RefCell<Vec<Send>>,
    /// Bumped by [`History::forget_acks`]: an answer to a send made in an earlier term is
    /// forgotten too, whenever it arrives (the network may deliver it after the failover).
    term: std::cell::Cell<u64>,
}

/// What the checker found; empty lists mean the history holds.
#[derive(Debug, Default)]
pub struct Report {
    /// Acknowledged sends missing from their node, or at another offset than acknowledged.
    pub lost: Vec<String>,
    /// Bodies held more than once (every body is sent once, never retried).
    pub duplicated: Vec<String>,
    /// Offsets two acknowledged sends both claim.
    pub shared_offsets: Vec<String>,
    /// Refused sends that were stored anyway.
    pub stored_though_refused: Vec<String>,
    /// Counts of the outcomes, for the log.
    pub acked: usize,
    pub refused: usize,
    pub unknown: usize,
}

impl Report {
    pub fn holds(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.shared_offsets.is_empty()
            && self.stored_though_refused.is_empty()
    }
}

/// What the nodes hold: (node, topic, queue) to (offset, body) pairs.
pub type Held = BTreeMap<(usize, String, i32), Vec<(u64, String)>>;

impl History {
    /// Records the outcome of sending `body` to `topic`/`queue` on `node`: `answer` as the
    /// client returned it.
    pub fn send(
        &self,
        node: usize,
        topic: &str,
        queue: i32,
        body: String,
        answer: &std::io::Result<ringmq::remoting::RemotingCommand>,
    ) -> Outcome {
        let outcome = match answer {
            Ok(answer) if answer.code == response::SUCCESS => Outcome::Acked(
                answer.ext_fields["queueOffset"]
                    .parse()
                    .expect("a numeric queueOffset"),
            ),
            // Stored, but not as durable or replicated as asked: it may stay.
            Ok(answer) if STORED_UNCONFIRMED.contains(&answer.code) => {
                Outcome::Unknown(format!("status {}", answer.code))
            }
            Ok(answer) => Outcome::Refused(answer.code),
            Err(error) => Outcome::Unknown(error.to_string()),
        };
        self.sends.borrow_mut().push(Send {
            node,
            topic: topic.to_string(),
            queue,
            body,
            outcome: outcome.clone(),
        });
        outcome
    }

    /// Turns every acknowledgement so far, and every later one to a send made before now
    /// ([`History::send_in_term`]), into an unknown outcome, saying `why`: an
    /// ASYNC_MASTER's acknowledged tail that its slave had not copied is lost at a
    /// failover (truncated on the old master), and its offsets are given to other sends.
    pub fn forget_acks(&self, why: &str) {
        self.term.set(self.term.get() + 1);
        for send in self.sends.borrow_mut().iter_mut() {
            if let Outcome::Acked(offset) = send.outcome {
                send.outcome = Outcome::Unknown(format!("acked at {offset}, then {why}"));
            }
        }
    }

    /// The current term: take it before a send, give it to [`History::send_in_term`].
    pub fn term(&self) -> u64 {
        self.term.get()
    }

    /// [`History::send`] for a send made in `term`: its acknowledgement is forgotten if
    /// [`History::forget_acks`] ran since.
    pub fn send_in_term(
        &self,
        term: u64,
        node: usize,
        topic: &str,
        queue: i32,
        body: String,
        answer: &std::io::Result<ringmq::remoting::RemotingCommand>,
    ) -> Outcome {
        let outcome = self.send(node, topic, queue, body, answer);
        if term == self.term.get() {
            return outcome;
        }
        let mut sends = self.sends.borrow_mut();
        let send = sends.last_mut().expect("just recorded");
        if let Outcome::Acked(offset) = send.outcome {
            send.outcome = Outcome::Unknown(format!("acked at {offset}, then a term ended"));
        }
        send.outcome.clone()
    }

    /// The bodies of the sends acknowledged so far.
    pub fn acked_bodies(&self) -> Vec<String> {
        let sends = self.sends.borrow();
        sends
            .iter()
            .filter(|send| matches!(send.outcome, Outcome::Acked(_)))
            .map(|send| send.body.clone())
            .collect()
    }

    /// How many sends ended each way: `acked`, `refused <code>`, `unknown: <why>`.
    pub fn outcomes(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for send in self.sends.borrow().iter() {
            let kind = match &send.outcome {
                Outcome::Acked(_) => "acked".to_string(),
                Outcome::Refused(code) => format!("refused {code}"),
                Outcome::Unknown(why) if why.starts_with("acked at") => "forgotten".to_string(),
                Outcome::Unknown(why) => format!("unknown: {why}"),
            };
            *counts.entry(kind).or_default() += 1;
        }
        counts
    }

    /// How many sends were acknowledged so far.
    pub fn acked(&self) -> usize {
        let sends = self.sends.borrow();
        sends
            .iter()
            .filter(|send| matches!(send.outcome, Outcome::Acked(_)))
            .count()
    }

    /// The queues the history sent to: (node, topic, queue).
    pub fn queues(&self) -> Vec<(usize, String, i32)> {
        let mut queues: Vec<_> = self
            .sends
            .borrow()
            .iter()
            .map(|send| (send.node, send.topic.clone(), send.queue))
            .collect();
        queues.sort();
        queues.dedup();
        queues
    }

    /// Holds the history against `held`: no acknowledged send lost or moved, no body held
    /// twice, no offset claimed by two acknowledged sends, no refused send stored.
    pub fn check(&self, held: &Held) -> Report {
        let mut report = Report::default();
        let mut where_held: HashMap<&str, Vec<(usize, &str, i32, u64)>> = HashMap::new();
        for ((node, topic, queue), records) in held {
            for (offset, body) in records {
                where_held.entry(body.as_str()).or_default().push((
                    *node,
                    topic.as_str(),
                    *queue,
                    *offset,
                ));
            }
        }
        for (body, places) in &where_held {
            if places.len() > 1 {
                report.duplicated.push(format!("{body} at {places:?}"));
            }
        }
        let mut claimed: HashMap<(usize, &str, i32, u64), &str> = HashMap::new();
        for send in self.sends.borrow().iter() {
            let places = where_held.get(send.body.as_str());
            match &send.outcome {
                Outcome::Acked(offset) => {
                    report.acked += 1;
                    let place = (send.node, send.topic.as_str(), send.queue, *offset);
                    if !places.is_some_and(|places| places.contains(&place)) {
                        report.lost.push(format!(
                            "{} acked at {place:?}, held at {places:?}",
                            send.body
                        ));
                    }
                    if let Some(other) = claimed.insert(place, &send.body) {
                        report
                            .shared_offsets
                            .push(format!("{place:?} acked to {other} and {}", send.body));
                    }
                }
                Outcome::Refused(code) => {
                    report.refused += 1;
                    if places.is_some() {
                        report.stored_though_refused.push(format!(
                            "{} refused with {code}, held at {places:?}",
                            send.body
                        ));
                    }
                }
                Outcome::Unknown(_) => report.unknown += 1,
            }
        }
        report
    }
}

/// Statuses of a send that was stored without the durability or replication asked for.
pub const STORED_UNCONFIRMED: [i32; 3] = [
    response::FLUSH_DISK_TIMEOUT,
    response::SLAVE_NOT_AVAILABLE,
    response::FLUSH_SLAVE_TIMEOUT,
];

/// A bound for a client's request in a faulty network: long enough for a retransmission,
/// short enough that a partition ends requests instead of the test.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(800);

/// One producer of a workload: sends up to `count` uniquely numbered messages (`[p{p}-m{n}]`)
/// to `topic`, queue `n % queues`, one at a time, `pause` apart, until `stop` is set, to
/// the node `target()` names when it (re)connects, and records each outcome in `history`
/// under node `label`.
/// Reconnects after a failure; never retries a send that went out (one that could not go
/// out, for want of a connection, is not one).
pub struct Producer {
    pub p: usize,
    pub host: SimTransport,
    pub topic: &'static str,
    pub queues: i32,
    pub count: usize,
    pub pause: Duration,
    pub label: usize,
    pub stop: Rc<std::cell::Cell<bool>>,
}

impl Producer {
    pub async fn run(self, target: impl Fn() -> SocketAddr, history: Rc<History>) {
        let mut client: Option<Client> = None;
        for n in 0..self.count {
            if self.stop.get() {
                return;
            }
            let connected = match client.take() {
                Some(open) if !open.is_closed() => open,
                _ => connect(&self.host, &target).await,
            };
            // Bracketed: no body is a substring of another, so a log can be searched.
            let body = format!("[p{}-m{n}]", self.p);
            let queue = n as i32 % self.queues;
            let term = history.term();
            let answer = connected
                .send_message(self.topic, queue, body.as_bytes(), None, None)
                .await;
            if answer.is_ok() {
                client = Some(connected);
            }
            history.send_in_term(term, self.label, self.topic, queue, body, &answer);
            tokio::time::sleep(self.pause).await;
        }
    }
}

/// How long a producer tries to connect before it fails the test: longer than any outage
/// a test makes (a partition, a restart, a failover).
const CONNECT_FOR: Duration = Duration::from_secs(30);

/// A connection to the node `target()` names, trying again every 20 ms while the path is
/// cut or the node is down; fails the test after [`CONNECT_FOR`].
async fn connect(host: &SimTransport, target: &impl Fn() -> SocketAddr) -> Client {
    let deadline = tokio::time::Instant::now() + CONNECT_FOR;
    loop {
        let addr = target();
        let attempt = tokio::time::timeout(REQUEST_TIMEOUT, Client::connect_over(host, addr));
        if let Ok(Ok(client)) = attempt.await {
            client.set_timeout(REQUEST_TIMEOUT);
            return client;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no connection to {addr} for {CONNECT_FOR:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
