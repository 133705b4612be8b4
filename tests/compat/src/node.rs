//! A real broker owned by a test: started on free ports in a temporary directory, stopped
//! (SIGTERM) or killed (SIGKILL) on request, and always killed when the guard is dropped,
//! so a failing test leaves no process behind.
//!
//! Which broker is the target (`COMPAT_TARGET`, see [`target`]): a `ringmq serve` process
//! (the default), or the real Apache RocketMQ 5.5.0 name server and broker, driven through
//! `scripts/rocketmq.sh` (`start`, `kill-broker`, `restart-broker`) with the same verbs.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a node may take to print its addresses, or to stop after SIGTERM.
const START_DEADLINE: Duration = Duration::from_secs(60);
const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// The broker a run drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `ringmq serve` (the default).
    Ringmq,
    /// The real Apache RocketMQ 5.5.0 name server and broker, through `scripts/rocketmq.sh`.
    Rocketmq,
}

/// `COMPAT_TARGET`: unset, empty or `ringmq` is [`Target::Ringmq`]; `rocketmq` is
/// [`Target::Rocketmq`]; anything else stops the run.
pub fn target() -> Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    *TARGET.get_or_init(|| match std::env::var("COMPAT_TARGET").as_deref() {
        Err(_) | Ok("") | Ok("ringmq") => Target::Ringmq,
        Ok("rocketmq") => Target::Rocketmq,
        Ok(other) => panic!("COMPAT_TARGET={other}: expected `ringmq` or `rocketmq`"),
    })
}

/// True when the run drives the real RocketMQ broker.
pub fn is_rocketmq() -> bool {
    target() == Target::Rocketmq
}

/// `scripts/rocketmq.sh` of this checkout.
fn rocketmq_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/rocketmq.sh")
}

/// The `ringmq` binary: `RINGMQ_BIN`, else the main crate's debug build.
pub fn ringmq_bin() -> PathBuf {
    match std::env::var_os("RINGMQ_BIN") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/ringmq"),
    }
}

/// One node process (or, under [`Target::Rocketmq`], a name server and a broker) and the
/// directory it owns.
pub struct Node {
    child: Option<Child>,
    /// Under [`Target::Rocketmq`]: the processes `scripts/rocketmq.sh` started (their pids
    /// from `DIR/env`, DIR being the temporary directory). `None` under ringmq.
    real: Option<RealPids>,
    /// Holds the store directory and the node's log; removed on drop.
    temp: tempfile::TempDir,
    flush: String,
    port: u16,
    namesrv_port: u16,
    /// Which start this is (0 first, then one more per restart): names the log file.
    generation: u32,
    /// `key=value` settings passed with `--set` on every start.
    settings: Vec<String>,
}

impl Node {
    /// Starts a node on free ports (`--port 0 --namesrv-port 0`) with the given flush mode.
    pub fn start(flush: &str) -> Node {
        Node::start_with(flush, &[])
    }

    /// [`Node::start`] with `settings` (`key=value`, either key spelling), each passed as
    /// `--set key=value`.
    ///
    /// Under [`Target::Rocketmq`] the settings become broker.conf lines
    /// ([`rocketmq_conf_lines`]); one with no RocketMQ equivalent stops the test.
    pub fn start_with(flush: &str, settings: &[&str]) -> Node {
        crate::init_process();
        let temp = tempfile::Builder::new()
            .prefix("ringmq-compat-")
            .tempdir()
            .expect("create the node's temporary directory");
        if is_rocketmq() {
            return Node::start_rocketmq(temp, flush, settings);
        }
        let mut node = Node {
            child: None,
            real: None,
            temp,
            flush: flush.to_string(),
            port: 0,
            namesrv_port: 0,
            generation: 0,
            settings: settings.iter().map(|setting| setting.to_string()).collect(),
        };
        node.spawn();
        node.wait_for_addresses()
            .unwrap_or_else(|log| panic!("node exited during start; log:\n{log}"));
        node
    }

    pub fn store_dir(&self) -> PathBuf {
        self.temp.path().join("store")
    }

    fn log_path(&self) -> PathBuf {
        self.temp
            .path()
            .join(format!("node-{}.log", self.generation))
    }

    /// The name server address clients are given.
    pub fn namesrv_addr(&self) -> String {
        format!("127.0.0.1:{}", self.namesrv_port)
    }

    /// The broker's remoting address.
    pub fn broker_addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let bin = ringmq_bin();
        assert!(
            bin.exists(),
            "ringmq binary not found at {} (build it, or set RINGMQ_BIN)",
            bin.display()
        );
        let log = File::create(self.log_path()).expect("create the node log");
        let mut command = Command::new(&bin);
        command.arg("serve");
        // The run's own settings first (scripts/compat.sh raises the disk guards there),
        // then the scenario's, which win.
        for setting in std::env::var("RINGMQ_SET")
            .unwrap_or_default()
            .split_whitespace()
        {
            command.arg("--set").arg(setting);
        }
        for setting in &self.settings {
            command.arg("--set").arg(setting);
        }
        let child = command
            .arg("--dir")
            .arg(self.store_dir())
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--namesrv-port")
            .arg(self.namesrv_port.to_string())
            .arg("--flush")
            .arg(&self.flush)
            // Two shards whatever the machine: a client's connection lands on one, and
            // requests for the other's queues cross the mailbox, which the suite covers.
            .arg("--shards")
            .arg("2")
            // Parallel tests run several nodes: none may claim the default metrics port.
            .arg("--metrics-port")
            .arg("0")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("start {}: {error}", bin.display()));
        println!(
            "node: pid {} started ({}), dir {}, log {}",
            child.id(),
            self.flush,
            self.store_dir().display(),
            self.log_path().display()
        );
        self.child = Some(child);
    }

    /// Reads the log until the node has printed both listening addresses; the log if the
    /// node exits first.
    fn wait_for_addresses(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            let broker = port_after(&log, "ringmq: listening on ");
            let namesrv = port_after(&log, "ringmq: name server listening on ");
            if let (Some(broker), Some(namesrv)) = (broker, namesrv) {
                self.port = broker;
                self.namesrv_port = namesrv;
                println!("node: broker 127.0.0.1:{broker}, name server 127.0.0.1:{namesrv}");
                return Ok(());
            }
            if let Some(status) = self.child_mut().try_wait().expect("poll the node") {
                self.child = None;
                return Err(format!("({status})\n{log}"));
            }
            assert!(
                Instant::now() < deadline,
                "node did not print its addresses within {START_DEADLINE:?}; log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the node is running")
    }

    fn signal(&mut self, signal: libc::c_int) {
        let pid = self.child_mut().id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let until = Instant::now() + deadline;
        loop {
            if let Some(status) = self.child_mut().try_wait().expect("poll the node") {
                self.child = None;
                return status;
            }
            if Instant::now() >= until {
                let log = self.log();
                panic!("node did not exit within {deadline:?}; log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and the node must exit 0 (a clean stop) within the deadline.
    ///
    /// Under [`Target::Rocketmq`]: SIGTERM to the broker only (the name server stays, as
    /// with `scripts/rocketmq.sh restart-broker`), which must exit within the deadline and
    /// leave no `store/abort` file (RocketMQ creates it at start and deletes it on a clean
    /// shutdown; the broker is not this process's child, so there is no exit status).
    pub fn stop(&mut self) {
        if self.real.is_some() {
            return self.stop_rocketmq_broker();
        }
        self.signal(libc::SIGTERM);
        let status = self.wait_exit(STOP_DEADLINE);
        let log = self.log();
        assert!(
            status.success(),
            "node did not stop cleanly: {status}; log:\n{log}"
        );
        println!("node: stopped cleanly (SIGTERM)");
    }

    /// SIGKILL: no chance to flush or to write anything.
    ///
    /// Under [`Target::Rocketmq`]: `scripts/rocketmq.sh kill-broker` (the name server
    /// stays).
    pub fn kill(&mut self) {
        if self.real.is_some() {
            return self.kill_rocketmq_broker();
        }
        self.signal(libc::SIGKILL);
        let status = self.wait_exit(STOP_DEADLINE);
        println!("node: killed ({status})");
    }

    /// Starts the node again on the same directory and the same ports (so clients that
    /// know the name server keep working).
    ///
    /// The ports were free when the node stopped, but the kernel may hand one of them to
    /// another test's outgoing connection meanwhile (its ephemeral range is the one
    /// `--port 0` picked from). A start that fails with "Address already in use" is tried
    /// again until [`START_DEADLINE`]: the connection holding the port ends.
    ///
    /// Under [`Target::Rocketmq`]: the start half of `scripts/rocketmq.sh restart-broker`
    /// (same store, same ports, same name server), after [`Node::stop`] or [`Node::kill`].
    pub fn restart(&mut self) {
        if self.real.is_some() {
            return self.restart_rocketmq_broker();
        }
        assert!(self.child.is_none(), "restart of a running node");
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            self.generation += 1;
            self.spawn();
            match self.wait_for_addresses() {
                Ok(()) => return,
                Err(log) if log.contains("Address already in use") && Instant::now() < deadline => {
                    println!("node: a port is still in use; starting again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(log) => panic!("node exited during start; log:\n{log}"),
            }
        }
    }

    /// The current start's log (under [`Target::Rocketmq`]: the broker's stdout and the
    /// end of its broker.log).
    pub fn log(&self) -> String {
        if self.real.is_some() {
            return self.rocketmq_log();
        }
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(real) = self.real.take() {
            // The store is thrown away with the directory: no clean stop needed.
            for (pid, what) in [(real.broker, "broker"), (real.namesrv, "name server")] {
                if process_running(pid) {
                    // SAFETY: kill(2) on a pid scripts/rocketmq.sh started for this node.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    println!("node: RocketMQ {what} (pid {pid}) killed at the end of the test");
                }
            }
            if std::thread::panicking() {
                eprintln!("---- RocketMQ broker log ----\n{}", self.rocketmq_log());
            }
            return;
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- node log (start {}) ----\n{}",
                self.generation,
                self.log()
            );
        }
    }
}

fn port_after(log: &str, prefix: &str) -> Option<u16> {
    let line = log.lines().find_map(|line| line.strip_prefix(prefix))?;
    let addr: std::net::SocketAddr = line.trim().parse().ok()?;
    Some(addr.port())
}

/// The pids of a RocketMQ name server and broker, from `DIR/env`.
#[derive(Clone, Copy, Debug)]
struct RealPids {
    namesrv: libc::pid_t,
    broker: libc::pid_t,
}

/// True while `pid` runs: it exists and is not a zombie. (The RocketMQ processes are
/// started with nohup by `scripts/rocketmq.sh` and outlive it; their new parent need not
/// reap them, so one that has exited may stay a zombie, which `kill -0` still finds.)
pub(crate) fn process_running(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits until `pid` no longer runs; false if it still runs at the deadline.
pub(crate) fn wait_gone(pid: libc::pid_t, deadline: Duration) -> bool {
    let until = Instant::now() + deadline;
    while process_running(pid) {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// The broker.conf lines (RocketMQ spelling) for ringmq `--set` settings the scenarios
/// pass. A setting the harness cannot map stops the test: a scenario that needs one is
/// ringmq-only and must say so itself (see [`crate::ringmq_specific`]).
///
/// - `messageDelayLevel` (`message_delay_level`): RocketMQ parses `s`, `m`, `h` and `d`
///   units only (ringmq also takes `ms`); a level in ms becomes the next whole second
///   (at least 1 s), which is printed.
/// - `transactionTimeOut`, `transactionCheckInterval`, `transactionCheckMax`,
///   `rejectTransactionMessage`: as they are (the same keys and units, ms, on both);
///   `transactionOpBatchInterval` (RocketMQ's alone) as it is.
pub fn rocketmq_conf_lines(settings: &[String]) -> Vec<String> {
    settings
        .iter()
        .map(|setting| {
            let (key, value) = setting
                .split_once('=')
                .unwrap_or_else(|| panic!("setting {setting:?} is not key=value"));
            match key.trim() {
                "messageDelayLevel" | "message_delay_level" => {
                    let levels: Vec<String> = value
                        .split_whitespace()
                        .map(delay_level_in_rocketmq_units)
                        .collect();
                    let mapped = levels.join(" ");
                    if mapped != value.trim() {
                        println!(
                            "node: RocketMQ takes messageDelayLevel in s/m/h/d only: \
                             {value:?} runs as {mapped:?}"
                        );
                    }
                    format!("messageDelayLevel={mapped}")
                }
                // The transaction check service's keys: RocketMQ's names and meanings, which
                // ringmq's broker.conf takes as they are.
                key @ ("transactionTimeOut"
                | "transactionCheckInterval"
                | "transactionCheckMax"
                | "rejectTransactionMessage"
                // RocketMQ only (ringmq has no op batching): how long decisions wait to be
                // written as op messages; a scenario passes it under the rocketmq target.
                | "transactionOpBatchInterval") => format!("{key}={}", value.trim()),
                other => panic!(
                    "setting {setting:?}: no RocketMQ broker.conf mapping for {other:?} in the \
                     harness (tests/compat/src/node.rs rocketmq_conf_lines); map it, or mark \
                     the scenario ringmq-only"
                ),
            }
        })
        .collect()
}

/// One delay level in RocketMQ's units: `100ms` → `1s`, `1500ms` → `2s`, others as given.
fn delay_level_in_rocketmq_units(level: &str) -> String {
    match level.strip_suffix("ms") {
        Some(ms) => {
            let ms: u64 = ms
                .parse()
                .unwrap_or_else(|_| panic!("delay level {level:?}: not a number of ms"));
            format!("{}s", ms.div_ceil(1000).max(1))
        }
        None => level.to_string(),
    }
}

/// What `scripts/rocketmq.sh` wrote to `DIR/env`.
pub(crate) fn read_env(dir: &Path) -> std::collections::HashMap<String, String> {
    std::fs::read_to_string(dir.join("env"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| {
            // A value the scripts quote for the shell (`CONTROLLER_ADDR='a;b;c'`).
            let v = v.trim();
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or(v);
            (k.trim().to_string(), v.to_string())
        })
        .collect()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("not host:port: {addr:?}"))
}

impl Node {
    fn dir(&self) -> &Path {
        self.temp.path()
    }

    fn start_rocketmq(temp: tempfile::TempDir, flush: &str, settings: &[&str]) -> Node {
        let mut node = Node {
            child: None,
            real: None,
            temp,
            flush: flush.to_string(),
            port: 0,
            namesrv_port: 0,
            generation: 0,
            settings: settings.iter().map(|setting| setting.to_string()).collect(),
        };
        let flush_type = match flush {
            "sync" => "SYNC_FLUSH",
            "async" => "ASYNC_FLUSH",
            other => panic!("flush mode {other:?}: expected sync or async"),
        };
        let mut args = vec!["start".to_string(), node.dir().display().to_string()];
        let lines = rocketmq_conf_lines(&node.settings);
        if !lines.is_empty() {
            let extra = node.dir().join("broker-extra.conf");
            std::fs::write(&extra, lines.join("\n") + "\n").expect("write broker-extra.conf");
            println!("node: broker.conf extra lines {lines:?}");
            args.push(extra.display().to_string());
        }
        node.run_script(&args, &[("FLUSH", flush_type)]);
        node.read_real_env();
        println!(
            "node: RocketMQ 5.5.0 ({flush_type}) broker {} (pid {}), name server {} (pid {}), dir {}",
            node.broker_addr(),
            node.real.unwrap().broker,
            node.namesrv_addr(),
            node.real.unwrap().namesrv,
            node.dir().display()
        );
        node.wait_registered();
        node
    }

    /// Runs `scripts/rocketmq.sh ARGS`; its output goes to the test's output, a failure
    /// stops the test with the broker's log.
    fn run_script(&self, args: &[String], env: &[(&str, &str)]) {
        let mut command = Command::new("bash");
        command.arg(rocketmq_sh()).args(args).stdin(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let output = command
            .output()
            .unwrap_or_else(|error| panic!("run scripts/rocketmq.sh {args:?}: {error}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if !output.status.success() {
            panic!(
                "scripts/rocketmq.sh {args:?} failed ({}):\n{text}\n{}",
                output.status,
                self.rocketmq_log()
            );
        }
        for line in text.lines() {
            println!("node: rocketmq.sh: {line}");
        }
    }

    fn read_real_env(&mut self) {
        let dir = self.dir().to_path_buf();
        let env = read_env(&dir);
        let get = |key: &str| {
            env.get(key)
                .unwrap_or_else(|| panic!("{key} missing in {}/env: {env:?}", dir.display()))
                .clone()
        };
        let pid = |key: &str| -> libc::pid_t {
            get(key)
                .parse()
                .unwrap_or_else(|_| panic!("{key} in env: {env:?}"))
        };
        let (namesrv, broker) = (port_of(&get("NAMESRV_ADDR")), port_of(&get("BROKER_ADDR")));
        if self.generation > 0 {
            assert_eq!(
                (namesrv, broker),
                (self.namesrv_port, self.port),
                "the restarted RocketMQ broker kept its ports"
            );
        }
        self.namesrv_port = namesrv;
        self.port = broker;
        self.real = Some(RealPids {
            namesrv: pid("NAMESRV_PID"),
            broker: pid("BROKER_PID"),
        });
    }

    /// Waits (bounded) until the name server lists this broker (GET_BROKER_CLUSTER_INFO):
    /// the broker prints "boot success" once it has registered, this makes sure.
    fn wait_registered(&self) {
        let (namesrv, broker) = (self.namesrv_addr(), self.broker_addr());
        let until = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(response) = crate::raw::request(&namesrv, 106, serde_json::json!({})) {
                if response.code == 0 && String::from_utf8_lossy(&response.body).contains(&broker) {
                    return;
                }
            }
            assert!(
                Instant::now() < until,
                "the RocketMQ name server {namesrv} did not list the broker {broker} within \
                 {START_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stop_rocketmq_broker(&mut self) {
        let pid = self.real.expect("a RocketMQ node").broker;
        assert!(
            process_running(pid),
            "stop of a RocketMQ broker that does not run"
        );
        // SAFETY: kill(2) on the broker pid scripts/rocketmq.sh started for this node.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill({pid}, SIGTERM) failed");
        assert!(
            wait_gone(pid, STOP_DEADLINE),
            "the RocketMQ broker (pid {pid}) did not exit within {STOP_DEADLINE:?} of SIGTERM; \
             log:\n{}",
            self.rocketmq_log()
        );
        let abort = self.store_dir().join("abort");
        assert!(
            !abort.exists(),
            "the RocketMQ broker did not stop cleanly: {} is still there; log:\n{}",
            abort.display(),
            self.rocketmq_log()
        );
        println!("node: RocketMQ broker stopped cleanly (SIGTERM; store/abort removed)");
    }

    fn kill_rocketmq_broker(&mut self) {
        let pid = self.real.expect("a RocketMQ node").broker;
        self.run_script(
            &["kill-broker".into(), self.dir().display().to_string()],
            &[],
        );
        assert!(
            wait_gone(pid, STOP_DEADLINE),
            "the RocketMQ broker (pid {pid}) survived SIGKILL for {STOP_DEADLINE:?}"
        );
        println!("node: RocketMQ broker killed (SIGKILL, pid {pid})");
    }

    fn restart_rocketmq_broker(&mut self) {
        let pid = self.real.expect("a RocketMQ node").broker;
        assert!(
            !process_running(pid),
            "restart of a running RocketMQ broker"
        );
        self.generation += 1;
        // restart-broker's stop half finds the broker gone (the script counts a zombie, an
        // exited broker its new parent has not reaped, as gone); 1 s bounds it regardless.
        println!("node: RocketMQ broker restarting (restart-broker: its stop half has nothing left to stop)");
        self.run_script(
            &["restart-broker".into(), self.dir().display().to_string()],
            &[("STOP_DEADLINE_S", "1")],
        );
        self.read_real_env();
        self.wait_registered();
        println!(
            "node: RocketMQ broker restarted (pid {}) on {}",
            self.real.unwrap().broker,
            self.broker_addr()
        );
    }

    fn rocketmq_log(&self) -> String {
        let out = std::fs::read_to_string(self.dir().join("broker.out")).unwrap_or_default();
        let log_path = self.dir().join("home/logs/rocketmqlogs/broker.log");
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(80)..].join("\n");
        format!(
            "broker.out:\n{out}\n{} (last 80 lines):\n{tail}",
            log_path.display()
        )
    }
}
