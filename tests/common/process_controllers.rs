//! Controllers as real processes (`ringmq controller -c controller.conf`), for the
//! real-process tests of failover: each on the one port its `controllerDLegerPeers` entry
//! names, with its own store directory, killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

use super::process_cluster::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
const LISTENING: &str = "ringmq: controller ";
/// How long any one condition of the controllers may take.
pub const BOUND: Duration = Duration::from_secs(20);

/// A `ringmq controller` process; killed when dropped if still running. Its stderr goes
/// to `<its file>.log`.
pub struct Controller {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Writes controller `i`'s file in `dir` for a group on `ports`; its path.
pub fn write_conf(dir: &Path, ports: &[u16], i: usize) -> PathBuf {
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

/// The command that runs a controller on `conf`.
pub fn command(conf: &Path) -> Command {
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
    pub fn start(conf: &Path) -> Controller {
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
        // Keep reading so the process never blocks on a full pipe, into a log beside its
        // file (appended: a restarted controller's next life follows).
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(conf.with_extension("log"));
        std::thread::spawn(move || match log {
            Ok(mut log) => {
                let _ = std::io::Write::write_all(&mut log, seen.as_bytes());
                std::io::copy(&mut stderr, &mut log)
            }
            Err(_) => std::io::copy(&mut stderr, &mut std::io::sink()),
        });
        Controller { child, addr }
    }
}

/// Three controllers on free ports in `dir`, started.
pub struct ControllerGroup {
    pub confs: Vec<PathBuf>,
    pub controllers: Vec<Controller>,
}

impl ControllerGroup {
    pub fn start(dir: &Path) -> ControllerGroup {
        let ports = [free_port(), free_port(), free_port()];
        let confs: Vec<PathBuf> = (0..3).map(|i| write_conf(dir, &ports, i)).collect();
        let controllers = confs.iter().map(|c| Controller::start(c)).collect();
        ControllerGroup { confs, controllers }
    }

    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.controllers.iter().map(|c| c.addr).collect()
    }

    /// The last `lines` lines of each controller's log, under a header naming it.
    pub fn logs(&self, lines: usize) -> String {
        let mut text = String::new();
        for conf in &self.confs {
            let log = conf.with_extension("log");
            let all = std::fs::read_to_string(&log).unwrap_or_default();
            let all: Vec<&str> = all.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            text.push_str(&format!(
                "---- {} ----\n{}\n",
                log.display(),
                tail.join("\n")
            ));
        }
        text
    }

    /// `controllerAddr` for a broker.conf.
    pub fn controller_addr(&self) -> String {
        let addrs: Vec<String> = self.addrs().iter().map(ToString::to_string).collect();
        addrs.join(";")
    }
}

/// One request to `addr` on a fresh connection; `None` if it cannot be made.
pub async fn call(addr: SocketAddr, code: i32, fields: &[(&str, &str)]) -> Option<RemotingCommand> {
    let client = Client::connect(addr).await.ok()?;
    client.set_timeout(Duration::from_secs(2));
    let fields: ExtFields = fields.iter().copied().collect();
    client
        .request(RemotingCommand::request(code, fields))
        .await
        .ok()
}

/// Waits (bounded) until one of `addrs` says it leads; its address.
pub async fn leader(addrs: &[SocketAddr]) -> SocketAddr {
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

/// A group's replica info as the controllers' leader answers it: (master id, master
/// epoch, SyncStateSet); `None` while no controller answers.
pub async fn replica_info(
    addrs: &[SocketAddr],
    group: &str,
) -> Option<(Option<i64>, i32, Vec<i64>)> {
    for addr in addrs {
        let fields = [("brokerName", group)];
        let Some(answer) = call(*addr, request::CONTROLLER_GET_REPLICA_INFO, &fields).await else {
            continue;
        };
        if answer.code != response::SUCCESS {
            continue;
        }
        let body: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
        let set = body["syncStateSet"]
            .as_array()?
            .iter()
            .filter_map(serde_json::Value::as_i64)
            .collect();
        return Some((
            answer.opt_i64("masterBrokerId").ok().flatten(),
            answer.get_i32("masterEpoch").ok()?,
            set,
        ));
    }
    None
}

/// Broker `n` of `group` in controller mode as the process tests run it: SYNC_MASTER
/// (acknowledging what the SyncStateSet holds), reaching the controllers at
/// `controller_addr` (`;`-separated), looking at its slaves every 200 ms.
pub fn controller_mode_broker(
    group: &str,
    n: u64,
    controller_addr: &str,
) -> crate::common::process_cluster::BrokerSpec {
    crate::common::process_cluster::BrokerSpec::master(group)
        .id(n)
        .set("brokerId", 0)
        .set("brokerRole", "SYNC_MASTER")
        .set("enableControllerMode", true)
        .set("controllerAddr", controller_addr)
        .set("checkSyncStateSetPeriod", 200)
}
