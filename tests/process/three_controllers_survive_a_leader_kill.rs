//! `ringmq controller -c controller.conf` as three real processes on loopback, each on the
//! one port its `controllerDLegerPeers` entry names: they elect a leader, a broker applies
//! for its id, registers, beats and is elected master through it; the leader is SIGKILLed
//! and another controller leads with the same group state (read from its own disk); the
//! killed one restarts on its directory and follows. A store directory holding another
//! program's files is refused with exit code 2, naming what it holds.

use crate::common::process_cluster::free_port;
use crate::common::run_local;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
const LISTENING: &str = "ringmq: controller ";
/// How long any one condition may take.
const BOUND: Duration = Duration::from_secs(20);

/// A `ringmq controller` process; killed when dropped if still running.
struct Controller {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn write_conf(dir: &Path, ports: &[u16], i: usize) -> PathBuf {
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(j, port)| format!("n{j}-127.0.0.1:{port}"))
        .collect();
    let conf = dir.join(format!("n{i}.conf"));
    let text = format!(
        "controllerDLegerGroup=g1\ncontrollerDLegerPeers={}\ncontrollerDLegerSelfId=n{i}\n\
         controllerStorePath={}\nscanNotActiveBrokerInterval=500\n",
        peers.join(";"),
        dir.join(format!("store-n{i}")).display()
    );
    std::fs::write(&conf, text).unwrap();
    conf
}

fn command(conf: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["controller", "-c"])
        .arg(conf)
        .env("RINGMQ_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

impl Controller {
    /// Starts one on `conf` and waits for its start line.
    fn start(conf: &Path) -> Controller {
        let mut child = command(conf).spawn().expect("spawn ringmq controller");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
        let mut seen = String::new();
        let addr = loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).expect("read stderr");
            assert!(read > 0, "the controller exited before listening:\n{seen}");
            if line.starts_with(LISTENING) {
                let bound = line.trim().rsplit(' ').next().and_then(|a| a.parse().ok());
                break bound.unwrap_or_else(|| panic!("no address in {line:?}"));
            }
            seen.push_str(&line);
        };
        // Keep reading so the process never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Controller { child, addr }
    }
}

async fn call(addr: SocketAddr, code: i32, fields: &[(&str, &str)]) -> Option<RemotingCommand> {
    let client = Client::connect(addr).await.ok()?;
    client.set_timeout(Duration::from_secs(2));
    let fields: ExtFields = fields.iter().copied().collect();
    client
        .request(RemotingCommand::request(code, fields))
        .await
        .ok()
}

/// Waits (bounded) until one of `addrs` says it leads; its address.
async fn leader(addrs: &[SocketAddr]) -> SocketAddr {
    let deadline = Instant::now() + BOUND;
    loop {
        for addr in addrs {
            let answer = call(*addr, request::CONTROLLER_GET_METADATA_INFO, &[]).await;
            if answer.is_some_and(|a| a.opt_bool("isLeader").ok().flatten() == Some(true)) {
                return *addr;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no controller leads within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const GROUP: [(&str, &str); 2] = [
    ("clusterName", "DefaultCluster"),
    ("brokerName", "broker-a"),
];

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    GROUP.iter().chain(extra).copied().collect()
}

/// Broker 1 of broker-a applies, registers, beats and asks to be elected; its epoch.
async fn elect_a_master(leader: SocketAddr) -> i32 {
    let broker = "127.0.0.1:10911";
    let steps: [(i32, Vec<(&str, &str)>); 4] = [
        (
            request::CONTROLLER_APPLY_BROKER_ID,
            with(&[
                ("appliedBrokerId", "1"),
                ("registerCheckCode", "127.0.0.1:10911;1"),
            ]),
        ),
        (
            request::CONTROLLER_REGISTER_BROKER,
            with(&[("brokerId", "1"), ("brokerAddress", broker)]),
        ),
        (
            request::BROKER_HEARTBEAT,
            with(&[
                ("brokerId", "1"),
                ("brokerAddr", broker),
                ("heartbeatTimeoutMills", "60000"),
            ]),
        ),
        (
            request::CONTROLLER_ELECT_MASTER,
            with(&[("brokerId", "1"), ("designateElect", "false")]),
        ),
    ];
    let mut last = None;
    for (code, fields) in steps {
        let answer = call(leader, code, &fields)
            .await
            .expect("the leader answers");
        assert_eq!(answer.code, response::SUCCESS, "request {code}: {answer:?}");
        last = Some(answer);
    }
    let elected = last.unwrap();
    assert_eq!(elected.get_i64("masterBrokerId").unwrap(), 1);
    elected.get_i32("masterEpoch").unwrap()
}

async fn master_and_epoch(addr: SocketAddr) -> (i64, i32) {
    let answer = call(
        addr,
        request::CONTROLLER_GET_REPLICA_INFO,
        &[("brokerName", "broker-a")],
    )
    .await
    .expect("answered");
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    (
        answer.get_i64("masterBrokerId").unwrap(),
        answer.get_i32("masterEpoch").unwrap(),
    )
}

#[test]
fn three_controllers_keep_the_group_state_when_their_leader_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let confs: Vec<PathBuf> = (0..3).map(|i| write_conf(dir.path(), &ports, i)).collect();
    let mut controllers: Vec<Controller> = confs.iter().map(|c| Controller::start(c)).collect();
    let addrs: Vec<SocketAddr> = controllers.iter().map(|c| c.addr).collect();
    for (addr, port) in addrs.iter().zip(ports) {
        assert_eq!(*addr, SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port));
    }
    run_local(false, async {
        let first = leader(&addrs).await;
        let epoch = elect_a_master(first).await;
        let killed = addrs.iter().position(|a| *a == first).unwrap();
        let started = Instant::now();
        controllers[killed].child.kill().unwrap();
        controllers[killed].child.wait().unwrap();
        let others: Vec<SocketAddr> = addrs.iter().copied().filter(|a| *a != first).collect();
        let next = leader(&others).await;
        eprintln!(
            "a new controller leader answered {:?} after the SIGKILL",
            started.elapsed()
        );
        assert_eq!(master_and_epoch(next).await, (1, epoch));
        controllers[killed] = Controller::start(&confs[killed]);
        let deadline = Instant::now() + BOUND;
        loop {
            let answer = call(first, request::CONTROLLER_GET_METADATA_INFO, &[]).await;
            let told = answer.and_then(|a| a.opt_str("controllerLeaderAddress").map(str::to_owned));
            if told.as_deref() == Some(next.to_string().as_str()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the restarted controller follows no leader"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn a_store_directory_of_another_program_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), &[free_port()], 0);
    let store = dir.path().join("store-n0");
    std::fs::create_dir_all(store.join("dledger-n0")).unwrap();
    let output = command(&conf).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("dledger-n0") && stderr.contains("controllerStorePath"),
        "{stderr}"
    );
}
