//! A cluster of broker processes owned by a test, started by the target's control script
//! (`scripts/ringmq-node.sh`, or `scripts/rocketmq.sh` under `COMPAT_TARGET=rocketmq`) in a
//! temporary directory, so the Rust suite and the Java suite start the same clusters:
//! `start-cluster DIR` (a standalone name server and two ASYNC_MASTER groups, broker-a and
//! broker-b), `start-cluster-ha DIR` (a name server and group broker-a as a SYNC_MASTER and
//! its slave) or `start-cluster-controller DIR` (three controllers, a name server and group
//! broker-a of two brokers in controller mode, RocketMQ's quick-start files). Dropping the
//! guard runs `stop-cluster DIR`, which stops every process the script started, so a failing
//! test leaves none behind.
//!
//! The processes are not this process's children (the script starts them with nohup and
//! exits): they are found by the pids the script wrote to `DIR/env`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::node::{is_rocketmq, process_running, read_env, wait_gone};

/// How long a SIGKILLed broker may take to be gone.
const KILL_DEADLINE: Duration = Duration::from_secs(30);

/// What the cluster is made of.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// `start-cluster`: a name server and two master groups, broker-a and broker-b.
    TwoGroups,
    /// `start-cluster-ha`: a name server and group broker-a as a SYNC_MASTER and its slave.
    MasterAndSlave,
    /// `start-cluster-controller`: three controllers, a name server and group broker-a of
    /// two brokers in controller mode; the controllers pick the master.
    ControllerGroup,
}

/// A started cluster and the directory its processes own.
pub struct Cluster {
    script: PathBuf,
    temp: tempfile::TempDir,
    env: HashMap<String, String>,
}

impl Cluster {
    /// Starts `shape` (bounded by the script's own start deadlines) and reads where its
    /// processes listen.
    pub fn start(shape: Shape) -> Cluster {
        crate::init_process();
        let temp = tempfile::Builder::new()
            .prefix("ringmq-compat-cluster-")
            .tempdir()
            .expect("create the cluster's temporary directory");
        let script_name = if is_rocketmq() {
            "rocketmq.sh"
        } else {
            "ringmq-node.sh"
        };
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts")
            .join(script_name);
        let verb = match shape {
            Shape::TwoGroups => "start-cluster",
            Shape::MasterAndSlave => "start-cluster-ha",
            Shape::ControllerGroup => "start-cluster-controller",
        };
        let mut cluster = Cluster {
            script,
            temp,
            env: HashMap::new(),
        };
        cluster
            .run(verb)
            .unwrap_or_else(|output| panic!("{verb} failed:\n{output}\n{}", cluster.logs()));
        cluster.env = read_env(cluster.temp.path());
        println!(
            "cluster: {shape:?} in {}: {:?}",
            cluster.temp.path().display(),
            cluster.env
        );
        cluster
    }

    pub fn namesrv_addr(&self) -> String {
        self.get("NAMESRV_ADDR")
    }

    /// The address of group `group`'s master (`broker-a`, `broker-b`).
    pub fn broker_addr(&self, group: &str) -> String {
        self.get(&key(group, "ADDR"))
    }

    /// The address of group `group`'s slave ([`Shape::MasterAndSlave`] only).
    pub fn slave_addr(&self, group: &str) -> String {
        self.get(&key(group, "SLAVE_ADDR"))
    }

    /// The controllers' addresses ([`Shape::ControllerGroup`] only).
    pub fn controller_addrs(&self) -> Vec<String> {
        self.get("CONTROLLER_ADDR")
            .split(';')
            .map(str::to_string)
            .collect()
    }

    /// The addresses of group `group`'s brokers in controller mode, in start order
    /// ([`Shape::ControllerGroup`] only).
    pub fn member_addrs(&self, group: &str) -> Vec<String> {
        (0..)
            .map_while(|n| self.env.get(&key(group, &format!("N{n}_ADDR"))).cloned())
            .collect()
    }

    /// SIGKILLs group `group`'s master and waits (bounded) until it is gone.
    pub fn kill(&self, group: &str) {
        self.kill_key(group, &key(group, "PID"));
    }

    /// SIGKILLs the broker of group `group` listening at `addr` (a member of a controller-mode
    /// group: whichever the controllers made master) and waits (bounded) until it is gone.
    pub fn kill_member(&self, group: &str, addr: &str) {
        let n = self
            .member_addrs(group)
            .iter()
            .position(|member| member == addr)
            .unwrap_or_else(|| panic!("{addr} is not a member of {group}: {:?}", self.env));
        self.kill_key(group, &key(group, &format!("N{n}_PID")));
    }

    fn kill_key(&self, group: &str, pid_key: &str) {
        let pid: libc::pid_t = self
            .get(pid_key)
            .parse()
            .unwrap_or_else(|_| panic!("{pid_key} of {group} in {:?}", self.env));
        assert!(process_running(pid), "{group} (pid {pid}) is not running");
        // SAFETY: kill(2) on a pid the control script started for this cluster.
        let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill({pid}, SIGKILL) failed");
        assert!(
            wait_gone(pid, KILL_DEADLINE),
            "{group} (pid {pid}) survived SIGKILL for {KILL_DEADLINE:?}"
        );
        println!("cluster: {group}'s broker {pid_key} killed (SIGKILL, pid {pid})");
    }

    /// The end of every process's output file in the directory, for failure messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        let Ok(entries) = std::fs::read_dir(self.temp.path()) else {
            return text;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|ext| ext == "out") {
                let log = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                text.push_str(&format!("--- {} (last 40 lines)\n{tail}\n", path.display()));
            }
        }
        text
    }

    fn get(&self, key: &str) -> String {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing in the cluster's env: {:?}", self.env))
            .clone()
    }

    /// Runs `SCRIPT VERB DIR`; its output if it failed.
    fn run(&self, verb: &str) -> Result<(), String> {
        let output = Command::new("bash")
            .arg(&self.script)
            .arg(verb)
            .arg(self.temp.path())
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("run {}: {error}", self.script.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("({}) {text}", output.status))
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Err(output) = self.run("stop-cluster") {
            eprintln!("cluster: stop-cluster failed: {output}");
        }
    }
}

/// The env key of `group`'s `what`: `broker-a`, `ADDR` → `BROKER_A_ADDR`.
fn key(group: &str, what: &str) -> String {
    let suffix = group
        .strip_prefix("broker-")
        .unwrap_or_else(|| panic!("not a group of the cluster: {group}"));
    format!("BROKER_{}_{what}", suffix.to_uppercase())
}
