//! A real `ringmq serve` process owned by a test: started on free ports in a temporary
//! directory, stopped (SIGTERM) or killed (SIGKILL) on request, and always killed when the
//! guard is dropped, so a failing test leaves no process behind.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to print its addresses, or to stop after SIGTERM.
const START_DEADLINE: Duration = Duration::from_secs(60);
const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// The `ringmq` binary: `RINGMQ_BIN`, else the main crate's debug build.
pub fn ringmq_bin() -> PathBuf {
    match std::env::var_os("RINGMQ_BIN") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/ringmq"),
    }
}

/// One node process and the directory it owns.
pub struct Node {
    child: Option<Child>,
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
    pub fn start_with(flush: &str, settings: &[&str]) -> Node {
        crate::init_process();
        let temp = tempfile::Builder::new()
            .prefix("ringmq-compat-")
            .tempdir()
            .expect("create the node's temporary directory");
        let mut node = Node {
            child: None,
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
    pub fn stop(&mut self) {
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
    pub fn kill(&mut self) {
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
    pub fn restart(&mut self) {
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

    /// The current start's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
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
