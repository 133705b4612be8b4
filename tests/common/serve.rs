//! A real `ringmq serve` process for the tests that kill it or set what only its command
//! line sets: spawned on ephemeral loopback ports, waited for until it says where it
//! listens, its stderr drained so it never blocks. (Older kill tests keep their own copy.)

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");

/// A running `ringmq serve`; killed (SIGKILL) when dropped if still running.
pub struct Serve {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Serve {
    /// Starts `ringmq serve` storing into `dir`, on ephemeral ports, with the portable disk
    /// backend and the extra arguments `args` (e.g. `--shards 2`, `--set key=value`); waits
    /// until it listens. `what` names the run in a failure (a seed, say).
    pub fn start(dir: &Path, args: &[&str], what: &str) -> Serve {
        let mut child = Command::new(BIN)
            .args(["serve", "--port", "0", "--namesrv-port", "0"])
            .args(["--metrics-port", "0", "--io", "portable", "--dir"])
            .arg(dir)
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ringmq serve");
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
        // Keep draining stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Serve { child, addr }
    }

    /// SIGKILLs the process and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL serve");
        self.child.wait().expect("reap serve");
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
    let mut child = Command::new(BIN)
        .args(["serve", "--port", &port.to_string(), "--namesrv-port", "0"])
        .args(["--metrics-port", "0", "--io", "portable", "--dir"])
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
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
