//! The real-process cluster harness: standalone name servers (`ringmq namesrv -c`) and
//! brokers (`ringmq serve --broker-conf`), each a child process started from a config file
//! of its own that the harness writes, on free loopback ports, with its own store directory
//! in one temporary directory. A test kills any of them (SIGKILL), stops one cleanly
//! (SIGTERM), and restarts it from the same file, so it comes back at the same address
//! with the same store.
//!
//! Every process opens only the ports its file names: brokers set `namesrvAddr` (so the
//! embedded name server does not run) and `metricsExporterType=DISABLE`. A broker's file
//! is built from [`BrokerSpec`]: the harness's keys, then the test's extra `key=value`
//! lines, which replace a harness key of the same name (`brokerRole`, `haListenPort`,
//! `haMasterAddress`, `registerNameServerPeriod`, ...).
//!
//! [`ProcessCluster::new`] writes the name servers' files without starting them, so a test
//! can add keys first ([`Proc::set`], e.g. a short `brokerHeartbeatTimeoutMillis`) or
//! start one late. A process can also be paused (SIGSTOP: a host gone silent, its
//! connections open) and resumed.
//!
//! Each process's stdout and stderr go to a log file of its own, every life appended after
//! a `==== start N ====` line, logging at [`LOG_LEVEL`]; [`ProcessCluster::logs`] gathers
//! them for failure messages, and [`ProcessCluster::wait_until`] prints them when a
//! condition is not met in time.
//!
//! Ports are picked free by binding port 0 and closing ([`free_port`]) before the file is
//! written: a file names every port it opens, and a process restarted from it listens
//! where the others were told it is. Another process's outgoing connection may hold such
//! a port for a while (the ports come from the ephemeral range); a start refused with
//! `Address already in use` is tried again until [`START_LIMIT`].

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};
use serde_json::Value;

use super::process_replication::commit_log_bytes;
use super::run_local;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");

/// How long a process may take to say it listens: a debug build on a shared 2-core
/// machine, with other test binaries starting processes at the same time.
pub const START_LIMIT: Duration = Duration::from_secs(60);
/// How long a process may take to exit after SIGTERM (a broker flushes and unregisters).
pub const STOP_LIMIT: Duration = Duration::from_secs(30);
/// How long one request of the harness may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of each log [`ProcessCluster::logs`] shows: the end is where a failure is.
const LOG_TAIL_LINES: usize = 60;
/// The `RINGMQ_LOG` of every process.
pub const LOG_LEVEL: &str = "info";
/// The prefix of the line a name server prints once it listens.
const NAMESRV_LISTENING: &str = "ringmq: name server ";
/// The prefix of the line a broker prints once it listens.
const BROKER_LISTENING: &str = "ringmq: listening on ";

/// A free port on the loopback interface, for a config file that must name its ports.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// `key=value` lines in order; setting a key again replaces its value where it stands.
#[derive(Clone, Debug, Default)]
pub struct Props(Vec<(String, String)>);

impl Props {
    pub fn set(&mut self, key: &str, value: impl ToString) {
        let value = value.to_string();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(pair) => pair.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The properties-file text.
    pub fn render(&self) -> String {
        self.0.iter().fold(String::new(), |mut out, (k, v)| {
            let _ = writeln!(out, "{k}={v}");
            out
        })
    }
}

/// What a broker of the cluster is: its group, its id, and the test's extra keys.
#[derive(Clone, Debug)]
pub struct BrokerSpec {
    pub name: String,
    pub cluster: String,
    pub id: u64,
    /// Applied after the harness's keys, replacing any of the same name.
    pub extra: Props,
}

impl BrokerSpec {
    /// A master (`brokerId=0`) of group `name` in `DefaultCluster`.
    pub fn master(name: &str) -> BrokerSpec {
        BrokerSpec {
            name: name.into(),
            cluster: "DefaultCluster".into(),
            id: 0,
            extra: Props::default(),
        }
    }

    pub fn cluster(mut self, cluster: &str) -> BrokerSpec {
        self.cluster = cluster.into();
        self
    }

    pub fn id(mut self, id: u64) -> BrokerSpec {
        self.id = id;
        self
    }

    /// An extra broker.conf line, `key=value` (e.g. `brokerRole`, `SLAVE`).
    pub fn set(mut self, key: &str, value: impl ToString) -> BrokerSpec {
        self.extra.set(key, value);
        self
    }
}

/// Which program a [`Proc`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Namesrv,
    Broker,
}

/// One process of the cluster: its config file, its log, and its child while it runs.
pub struct Proc {
    pub name: String,
    pub kind: Kind,
    pub conf: PathBuf,
    pub log: PathBuf,
    /// Where it listens (the port its file names), on loopback.
    pub addr: SocketAddr,
    /// What its file says.
    props: Props,
    child: Option<Child>,
    lives: u32,
}

impl Proc {
    fn new(dir: &Path, name: &str, kind: Kind, props: &Props) -> Proc {
        let port: u16 = props
            .get("listenPort")
            .and_then(|port| port.parse().ok())
            .expect("a listenPort in every file");
        let conf = dir.join(format!("{name}.conf"));
        std::fs::write(&conf, props.render()).expect("write the config file");
        Proc {
            name: name.into(),
            kind,
            conf,
            log: dir.join(format!("{name}.log")),
            addr: SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
            props: props.clone(),
            child: None,
            lives: 0,
        }
    }

    /// What its file says (`haListenPort`, `storePathRootDir`, ...).
    pub fn props(&self) -> &Props {
        &self.props
    }

    /// Sets `key` in its file, for its next start (an old master restarted as a slave, a
    /// changed period). `listenPort` stays: the others know it by that port.
    pub fn set(&mut self, key: &str, value: impl ToString) {
        assert_ne!(key, "listenPort", "{} keeps its port", self.name);
        self.props.set(key, value);
        std::fs::write(&self.conf, self.props.render()).expect("rewrite the config file");
    }

    fn command(&self) -> Command {
        let mut command = Command::new(BIN);
        match self.kind {
            Kind::Namesrv => command.args(["namesrv", "-c"]),
            Kind::Broker => command.args(["serve", "--broker-conf"]),
        };
        // Info, whatever the test runner's environment says: the logs are what a failure
        // message shows, and tests read the name servers' register/unregister lines.
        command
            .arg(&self.conf)
            .env("RINGMQ_LOG", LOG_LEVEL)
            .stdin(Stdio::null());
        command
    }

    /// Starts it from its file and waits until it says it listens where the file says.
    /// Panics (with its log) if it exits first or takes longer than [`START_LIMIT`]; a
    /// start refused because its port is held is tried again within that limit.
    pub fn start(&mut self) {
        assert!(!self.is_running(), "{} is already running", self.name);
        let deadline = Instant::now() + START_LIMIT;
        while let Err(status) = self.start_once(deadline) {
            let held = self
                .log_text()
                .lines()
                .last()
                .is_some_and(|line| line.contains("Address already in use"));
            if !held || Instant::now() >= deadline {
                panic!(
                    "{} exited ({status}) before listening:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One start: `Ok` once it listens where its file says, its exit status if it exits
    /// first; panics past `deadline`.
    fn start_once(&mut self, deadline: Instant) -> Result<(), ExitStatus> {
        self.lives += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the log file");
        writeln!(log, "==== start {} ====", self.lives).expect("write the log");
        let from = log.metadata().expect("the log's length").len() as usize;
        let out = log.try_clone().expect("the log for stdout");
        let child = self
            .command()
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {}: {error}", self.name));
        self.child = Some(child);
        loop {
            if let Some(bound) = self.listening_since(from) {
                assert_eq!(
                    bound.port(),
                    self.addr.port(),
                    "{} listens on another port than its file names:\n{}",
                    self.name,
                    self.log_tail()
                );
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(status);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen within {START_LIMIT:?}:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The address of this life's `listening on` line, if it was printed yet.
    fn listening_since(&self, from: usize) -> Option<SocketAddr> {
        let text = std::fs::read(&self.log).ok()?;
        let text = String::from_utf8_lossy(text.get(from..)?);
        text.lines().find_map(|line| match self.kind {
            Kind::Broker => line.strip_prefix(BROKER_LISTENING)?.trim().parse().ok(),
            Kind::Namesrv => {
                let rest = line.strip_prefix(NAMESRV_LISTENING)?;
                rest.contains("listening on")
                    .then(|| rest.rsplit(' ').next()?.trim().parse().ok())?
            }
        })
    }

    /// Its exit status, reaping it, if it has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let status = child.try_wait().expect("poll the child")?;
        self.child = None;
        Some(status)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    /// The pid of the running process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The TCP ports the running process listens on (its socket descriptors matched
    /// against the kernel's table of listening sockets).
    pub fn listening_ports(&self) -> BTreeSet<u16> {
        let pid = self.pid();
        let mut inodes = BTreeSet::new();
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("its descriptors") {
            let Ok(target) = std::fs::read_link(fd.expect("a descriptor").path()) else {
                continue; // closed meanwhile
            };
            let target = target.to_string_lossy().into_owned();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
            {
                inodes.insert(inode.to_string());
            }
        }
        let mut ports = BTreeSet::new();
        for table in ["tcp", "tcp6"] {
            let text =
                std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
            for line in text.lines().skip(1) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // sl local_address rem_address st ... inode; st 0A is LISTEN.
                if fields.len() > 9 && fields[3] == "0A" && inodes.contains(fields[9]) {
                    let port = fields[1].rsplit(':').next().expect("address:port");
                    ports.insert(u16::from_str_radix(port, 16).expect("a hex port"));
                }
            }
        }
        ports
    }

    /// The ports its file names (every value of a key ending in `Port`).
    pub fn named_ports(&self) -> BTreeSet<u16> {
        self.props
            .0
            .iter()
            .filter(|(key, _)| key.ends_with("Port"))
            .filter_map(|(_, value)| value.parse().ok())
            .collect()
    }

    /// Where it listens for its slaves as a master (`haListenPort`, on loopback).
    pub fn ha_addr(&self) -> SocketAddr {
        let port = self
            .props
            .get("haListenPort")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("{} names no haListenPort", self.name));
        SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)
    }

    /// Shard `shard`'s CommitLog as the files hold it now (see [`commit_log_bytes`]).
    pub fn commit_log(&self, shard: u8) -> Vec<u8> {
        let root = self
            .props
            .get("storePathRootDir")
            .unwrap_or_else(|| panic!("{} names no storePathRootDir", self.name));
        commit_log_bytes(Path::new(root), shard)
    }

    /// SIGKILL and reap: a crash, its sockets closed by the kernel.
    pub fn kill(&mut self) {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("{} is not running", self.name));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }

    /// Sends `signal` to the running process.
    #[allow(unsafe_code)]
    fn signal(&self, signal: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) takes plain integers; `pid` is this harness's child, not yet
        // reaped, so the pid cannot have been reused.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "signal {signal} to {} ({pid})", self.name);
    }

    /// SIGSTOP: a host gone silent. Its connections stay open and nothing arrives on them.
    /// Returns once every thread of it is stopped (the signal stops them one by one, and
    /// a thread still running could take a message the test means it to miss).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        while !self.all_threads_stopped() {
            assert!(
                Instant::now() < deadline,
                "{} not stopped {REQUEST_TIMEOUT:?} after SIGSTOP",
                self.name
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether every thread of the process is in state `T` (stopped by a signal).
    fn all_threads_stopped(&self) -> bool {
        let tasks = format!("/proc/{}/task", self.pid());
        std::fs::read_dir(tasks)
            .expect("its threads")
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
            // `pid (comm) S ...`: the state follows the command's closing parenthesis.
            .all(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
            })
    }

    /// SIGCONT after [`Proc::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGTERM, the operator's stop, and waits (at most [`STOP_LIMIT`]) for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + STOP_LIMIT;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} still runs {STOP_LIMIT:?} after SIGTERM:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Everything it wrote, every life.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of its log, under a header naming it.
    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
        format!(
            "---- {} ({}) ----\n{}\n",
            self.name,
            self.log.display(),
            tail.join("\n")
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGKILL ends a stopped (paused) process too.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Name servers and brokers as processes, in one temporary directory.
pub struct ProcessCluster {
    pub name_servers: Vec<Proc>,
    pub brokers: Vec<Proc>,
    dir: tempfile::TempDir,
}

impl ProcessCluster {
    /// `name_servers` name servers, their files written on free ports, none started yet.
    pub fn new(name_servers: usize) -> ProcessCluster {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let name_servers = (0..name_servers)
            .map(|i| {
                let mut props = Props::default();
                props.set("listenPort", free_port());
                props.set("bindAddress", Ipv4Addr::LOCALHOST);
                Proc::new(dir.path(), &format!("namesrv-{i}"), Kind::Namesrv, &props)
            })
            .collect();
        ProcessCluster {
            name_servers,
            brokers: Vec::new(),
            dir,
        }
    }

    /// `name_servers` name servers and the brokers of `brokers`, all started.
    pub fn start(name_servers: usize, brokers: Vec<BrokerSpec>) -> ProcessCluster {
        let mut cluster = ProcessCluster::new(name_servers);
        cluster.start_name_servers();
        for spec in brokers {
            cluster.add_broker(spec);
        }
        cluster
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts every name server that is not running.
    pub fn start_name_servers(&mut self) {
        for namesrv in &mut self.name_servers {
            if !namesrv.is_running() {
                namesrv.start();
            }
        }
    }

    /// `namesrvAddr` naming every name server, running or not.
    pub fn namesrv_addr(&self) -> String {
        let addrs: Vec<String> = self
            .name_servers
            .iter()
            .map(|n| n.addr.to_string())
            .collect();
        addrs.join(";")
    }

    /// The broker.conf of `spec`: the harness's keys, then `spec.extra`.
    pub fn broker_props(&self, spec: &BrokerSpec) -> Props {
        let store = self.dir().join(format!("store-{}-{}", spec.name, spec.id));
        let mut props = Props::default();
        props.set("brokerClusterName", &spec.cluster);
        props.set("brokerName", &spec.name);
        props.set("brokerId", spec.id);
        props.set("namesrvAddr", self.namesrv_addr());
        let port = free_port();
        props.set("listenPort", port);
        // Named in every file, not left to its default (listenPort + 1, which another
        // process may hold): a master opens it, and a slave restarted as a master too.
        // Two picks can return the same port (the first was closed before the second).
        let ha_port = std::iter::repeat_with(free_port)
            .find(|&other| other != port)
            .expect("an endless supply of free ports");
        props.set("haListenPort", ha_port);
        props.set("bindAddress", Ipv4Addr::LOCALHOST);
        props.set("brokerIP1", Ipv4Addr::LOCALHOST);
        props.set("storePathRootDir", store.display());
        props.set("metricsExporterType", "DISABLE");
        props.set("shards", 1);
        props.set("pinShardThreads", false);
        props.set("ioBackend", "portable");
        for (key, value) in super::small_log_keys()
            .into_iter()
            .chain(super::small_store_keys())
        {
            props.set(key, value);
        }
        for (key, value) in &spec.extra.0 {
            props.set(key, value);
        }
        props
    }

    /// Writes the broker's file and starts it; returns its index in `brokers`.
    pub fn add_broker(&mut self, spec: BrokerSpec) -> usize {
        let props = self.broker_props(&spec);
        let name = format!("{}-{}", spec.name, spec.id);
        let mut broker = Proc::new(self.dir(), &name, Kind::Broker, &props);
        broker.start();
        self.brokers.push(broker);
        self.brokers.len() - 1
    }

    /// Writes the broker's file and runs it, expecting a refusal: it must exit
    /// unsuccessfully within [`START_LIMIT`] (one that listens fails the test). Returns its
    /// exit status and everything it wrote.
    pub fn refused_broker(&self, spec: BrokerSpec) -> (ExitStatus, String) {
        let props = self.broker_props(&spec);
        let name = format!("refused-{}-{}", spec.name, spec.id);
        let mut broker = Proc::new(self.dir(), &name, Kind::Broker, &props);
        let log = File::create(&broker.log).expect("create the log");
        let out = log.try_clone().expect("the log for stdout");
        let child = broker
            .command()
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn ringmq serve");
        broker.child = Some(child);
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Some(status) = broker.exited() {
                let text = broker.log_text();
                assert!(!status.success(), "{name} exited successfully:\n{text}");
                return (status, text);
            }
            assert!(
                broker.listening_since(0).is_none() && Instant::now() < deadline,
                "{name} was not refused:\n{}",
                broker.log_tail()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The broker whose file is named `name` (`<brokerName>-<brokerId>`, e.g. `broker-a-0`).
    pub fn broker(&mut self, name: &str) -> &mut Proc {
        self.brokers
            .iter_mut()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("no broker {name}"))
    }

    /// The last lines of every process's log.
    pub fn logs(&self) -> String {
        self.name_servers
            .iter()
            .chain(&self.brokers)
            .map(Proc::log_tail)
            .collect()
    }

    /// Waits until `condition` holds, for at most `limit`; panics naming `what`, with
    /// every process's log, if it does not.
    pub fn wait_until(&self, limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !condition() {
            assert!(
                Instant::now() < deadline,
                "gave up after {limit:?} waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `ringmq admin` with `args` (its own flags, `-n`, `-b` or `-c`, first) to the end:
/// whether it exited successfully, what it wrote to stdout, what it wrote to stderr.
pub fn admin(args: &[&str]) -> (bool, String, String) {
    let (code, stdout, stderr) = admin_exit(args);
    (code == 0, stdout, stderr)
}

/// [`admin`] with its exit code (0 done, 1 not found, 2 bad input, 3 the node failed).
pub fn admin_exit(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BIN)
        .arg("admin")
        .args(args)
        .output()
        .expect("run ringmq admin");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (
        output.status.code().expect("exited, not killed"),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// One request to `addr` over a fresh connection of the in-project client.
pub fn call(addr: SocketAddr, command: RemotingCommand) -> std::io::Result<RemotingCommand> {
    run_local(false, async move {
        let client = Client::connect(addr).await?;
        client.set_timeout(REQUEST_TIMEOUT);
        client.request(command).await
    })
}

/// GET_ROUTEINFO_BY_TOPIC from the name server at `namesrv`: the route, or `None` when it
/// knows no broker serving `topic`.
pub fn route(namesrv: SocketAddr, topic: &str) -> Option<Value> {
    let command = RemotingCommand::request(
        request::GET_ROUTEINFO_BY_TOPIC,
        ExtFields::from([("topic", topic)]),
    );
    let answer = call(namesrv, command).expect("the route answered");
    match answer.code {
        response::SUCCESS => Some(serde_json::from_slice(&answer.body).expect("route JSON")),
        response::TOPIC_NOT_EXIST => None,
        code => panic!(
            "route of {topic} from {namesrv}: code {code}, {:?}",
            answer.remark
        ),
    }
}

/// The broker names a route serves `topic` from: `(brokerDatas names, queueDatas names)`,
/// each sorted.
pub fn route_groups(namesrv: SocketAddr, topic: &str) -> (Vec<String>, Vec<String>) {
    let Some(route) = route(namesrv, topic) else {
        return (Vec::new(), Vec::new());
    };
    let names = |list: &str| {
        let mut names: Vec<String> = route[list]
            .as_array()
            .unwrap_or_else(|| panic!("no {list} in {route}"))
            .iter()
            .map(|entry| {
                entry["brokerName"]
                    .as_str()
                    .expect("a brokerName")
                    .to_string()
            })
            .collect();
        names.sort();
        names
    };
    (names("brokerDatas"), names("queueDatas"))
}

/// Whether both lists of `topic`'s route from `namesrv` name exactly `groups` (sorted).
pub fn routed_to(namesrv: SocketAddr, topic: &str, groups: &[&str]) -> bool {
    let (brokers, queues) = route_groups(namesrv, topic);
    brokers == groups && queues == groups
}

/// GET_BROKER_CLUSTER_INFO from the name server at `namesrv`.
pub fn cluster_info(namesrv: SocketAddr) -> Value {
    let command = RemotingCommand::request(request::GET_BROKER_CLUSTER_INFO, ExtFields::new());
    let answer = call(namesrv, command).expect("cluster info answered");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    serde_json::from_slice(&answer.body).expect("cluster info JSON")
}

/// GET_ALL_TOPIC_LIST_FROM_NAMESERVER from the name server at `namesrv`, sorted.
pub fn topic_list(namesrv: SocketAddr) -> Vec<String> {
    let command = RemotingCommand::request(
        request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        ExtFields::new(),
    );
    let answer = call(namesrv, command).expect("the topic list answered");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    let body: Value = serde_json::from_slice(&answer.body).expect("topic list JSON");
    let mut topics: Vec<String> = body["topicList"]
        .as_array()
        .unwrap_or_else(|| panic!("no topicList in {body}"))
        .iter()
        .map(|topic| topic.as_str().expect("a topic name").to_string())
        .collect();
    topics.sort();
    topics
}

/// UPDATE_AND_CREATE_TOPIC on the broker at `broker`, as `mqadmin updateTopic` sends it.
pub fn create_topic(broker: SocketAddr, topic: &str, read: u32, write: u32, perm: u32) {
    let (read, write, perm) = (read.to_string(), write.to_string(), perm.to_string());
    let command = RemotingCommand::request(
        request::UPDATE_AND_CREATE_TOPIC,
        ExtFields::from([
            ("topic", topic),
            ("readQueueNums", read.as_str()),
            ("writeQueueNums", write.as_str()),
            ("perm", perm.as_str()),
            ("topicFilterType", "SINGLE_TAG"),
        ]),
    );
    let answer = call(broker, command).expect("create answered");
    assert_eq!(
        answer.code,
        response::SUCCESS,
        "create {topic} on {broker}: {:?}",
        answer.remark
    );
}

/// The broker's topic table (GET_ALL_TOPIC_CONFIG): `topicConfigTable`.
pub fn topic_table(broker: SocketAddr) -> serde_json::Map<String, Value> {
    let command = RemotingCommand::request(request::GET_ALL_TOPIC_CONFIG, ExtFields::new());
    let answer = call(broker, command).expect("topic table answered");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    let body: Value = serde_json::from_slice(&answer.body).expect("topic table JSON");
    body["topicConfigTable"]
        .as_object()
        .unwrap_or_else(|| panic!("no topicConfigTable in {body}"))
        .clone()
}

/// SEND_MESSAGE_V2 of `body` to `topic`'s queue `queue_id` on the broker at `broker`.
pub fn send(broker: SocketAddr, topic: &str, queue_id: i32, body: &[u8]) -> RemotingCommand {
    let body = body.to_vec();
    let topic = topic.to_string();
    run_local(false, async move {
        let client = Client::connect(broker)
            .await
            .expect("connect to the broker");
        client.set_timeout(REQUEST_TIMEOUT);
        client
            .send_message(&topic, queue_id, &body, None, None)
            .await
            .expect("the send answered")
    })
}

/// The master address of group `name` in a route or cluster-info entry list.
pub fn master_addr(route: &Value, name: &str) -> Option<String> {
    route["brokerDatas"]
        .as_array()?
        .iter()
        .find(|data| data["brokerName"] == name)?["brokerAddrs"]["0"]
        .as_str()
        .map(str::to_string)
}
