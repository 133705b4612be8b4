//! The real-process harness: `ringmq serve` as a child process for the tests that kill it
//! (SIGKILL at seeded moments, SIGTERM for a clean stop), restart it on the same directory,
//! or set what only its command line sets. One command line ([`serve_command`]: ephemeral
//! loopback ports, the portable disk backend); [`Serve::start`] waits until the process
//! says where it listens and keeps draining its stderr so it never blocks on a full pipe.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");

/// `ringmq serve` storing into `dir` on the remoting port `port` (0 picks a free one), its
/// name-server and metrics ports free ones, with the portable disk backend, the small
/// IndexFiles and ConsumeQueue files of [`super::small_store_keys`], the small segments of
/// [`super::small_log_keys`] unless `args` size them, and the extra arguments `args`
/// (which come after, so a test's own value of those keys wins); stderr piped. Callers
/// add what they need (stdout, environment).
pub fn serve_command(dir: &Path, port: u16, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--port", &port.to_string(), "--namesrv-port", "0"])
        .args(["--metrics-port", "0", "--io", "portable", "--dir"])
        .arg(dir);
    // Small segments too, unless the test sizes the segment or the message itself (a
    // smaller segment than the test's would refuse its largest message).
    let sizes_the_log = args.iter().any(|arg| {
        ["--segment-size", "mapedFileSizeCommitLog", "maxMessageSize"]
            .iter()
            .any(|name| arg.starts_with(name))
    });
    let log_keys = super::small_log_keys()
        .into_iter()
        .filter(|_| !sizes_the_log);
    for (key, value) in super::small_store_keys().into_iter().chain(log_keys) {
        command.args(["--set", &format!("{key}={value}")]);
    }
    command.args(args).stderr(Stdio::piped());
    command
}

/// The `RINGMQ_KILL_SEED` of a kill test, else `default`; printed, so a failure can be rerun.
pub fn kill_seed(default: u64) -> u64 {
    let seed = std::env::var("RINGMQ_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    println!("seed {seed} (RINGMQ_KILL_SEED)");
    seed
}

/// A running `ringmq serve`; killed (SIGKILL) when dropped if still running.
pub struct Serve {
    pub child: Child,
    pub addr: SocketAddr,
    /// What the process wrote on stderr before its `listening on` line.
    pub startup: String,
    /// Reads the rest of stderr after the `listening on` line, until the process exits.
    drain: Option<JoinHandle<String>>,
}

impl Serve {
    /// Starts `ringmq serve` storing into `dir`, on ephemeral ports, with the portable disk
    /// backend and the extra arguments `args` (e.g. `--shards 2`, `--set key=value`); waits
    /// until it listens. `what` names the run in a failure (a seed, say).
    pub fn start(dir: &Path, args: &[&str], what: &str) -> Serve {
        Serve::start_command(serve_command(dir, 0, args), what)
    }

    /// [`Serve::start`] with a command of the caller's making (a [`serve_command`] the
    /// test changed).
    pub fn start_command(mut command: Command, what: &str) -> Serve {
        let mut child = command.spawn().expect("spawn ringmq serve");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
        let mut line = String::new();
        let mut seen = String::new();
        let addr = loop {
            line.clear();
            let read = stderr.read_line(&mut line).expect("read serve's stderr");
            assert!(read > 0, "{what}: serve exited before listening:\n{seen}");
            if let Some(addr) = line.trim().strip_prefix("ringmq: listening on ") {
                // The bound address (often `0.0.0.0`): connect over loopback to its port.
                let bound: SocketAddr = addr.parse().expect("a socket address");
                break SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port());
            }
            seen.push_str(&line);
        };
        // Keep draining stderr so the child never blocks on a full pipe; what it says is
        // kept for a test that reads it after the process exits.
        let drain = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
            rest
        });
        Serve {
            child,
            addr,
            startup: seen,
            drain: Some(drain),
        }
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL serve");
        self.child.wait().expect("reap serve");
    }

    /// A thread that SIGKILLs the process after `after` and reaps it: one life of a kill
    /// sweep, while the test drives the node until its connection breaks.
    pub fn kill_after(self, after: Duration) -> JoinHandle<()> {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            self.kill();
        })
    }

    /// Sends SIGTERM, the operator's stop; the caller waits for the exit.
    #[allow(unsafe_code)]
    pub fn terminate(&self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) takes plain integers; `pid` is the child this harness spawned and
        // still owns (not yet reaped, so the pid cannot have been reused).
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0, "SIGTERM {pid}");
    }

    /// What the process wrote on stderr after its `listening on` line, once it has exited
    /// (it waits for the end of the pipe).
    pub fn stderr_after_exit(&mut self) -> String {
        let drain = self.drain.take().expect("stderr read once");
        drain.join().expect("the stderr reader")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What `ringmq serve` with `args` prints on stderr when it refuses to start: it must exit
/// unsuccessfully within `limit` (a start that listens instead fails the test).
pub fn refused(dir: &Path, args: &[&str], limit: std::time::Duration) -> String {
    refused_on(dir, 0, args, limit)
}

/// [`refused`] with the remoting port `port` (0 picks a free one).
pub fn refused_on(dir: &Path, port: u16, args: &[&str], limit: std::time::Duration) -> String {
    refused_command(serve_command(dir, port, args), limit)
}

/// [`refused`] for a command of the caller's making (a [`serve_command`] the test changed).
pub fn refused_command(mut command: Command, limit: std::time::Duration) -> String {
    let args: Vec<_> = command.get_args().map(|arg| arg.to_os_string()).collect();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn ringmq serve");
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll serve") {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve {args:?} was not refused: still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
        .expect("read serve's stderr");
    assert!(
        !status.success(),
        "serve {args:?} exited successfully: {stderr}"
    );
    stderr
}
