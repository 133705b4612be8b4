//! `ringmq serve` as a real process: messages sent with the client are stored; SIGTERM
//! stops it with exit code 0, no `abort` marker is left, and `ringmq store verify` passes
//! and counts every message sent.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{run_local, wait_for};
use ringmq::client::Client;
use ringmq::remoting::codes::response;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
const MESSAGES: usize = 20;

#[test]
fn sigterm_stops_serve_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--port",
            "0",
            "--namesrv-port",
            "0",
            "--io",
            "portable",
            "--flush",
            "sync",
        ])
        .args(["--segment-size", "4194304", "--dir"])
        .arg(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr: SocketAddr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "serve exited before listening"
        );
        if let Some(addr) = line.trim().strip_prefix("ringmq: listening on ") {
            break addr.parse().unwrap();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });

    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for i in 0..MESSAGES {
            let answer = client
                .send_message(
                    "Durable",
                    (i % 4) as i32,
                    format!("m{i}").as_bytes(),
                    None,
                    None,
                )
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
    });

    let pid = child.id() as libc::pid_t;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut status = None;
    wait_for(
        Duration::from_secs(30),
        "serve to exit after SIGTERM",
        || {
            status = child.try_wait().unwrap();
            status.is_some()
        },
    );
    let log = drain.join().unwrap();
    assert!(status.unwrap().success(), "exit {status:?}; stderr:\n{log}");
    assert!(
        !dir.path().join("abort").exists(),
        "abort marker left behind"
    );

    let verify = Command::new(BIN)
        .args(["store", "verify", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap();
    assert_eq!(report["records"], MESSAGES as u64, "{report}");
    assert_eq!(report["crashed"], false, "{report}");
}
