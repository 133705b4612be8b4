//! `ringmq serve` as a real process with two shards: messages sent with the client are
//! stored; SIGTERM stops it with exit code 0, no shard leaves an `abort` marker, and
//! `ringmq store verify` passes on every shard's store, which together hold every message
//! sent.
// Allowed here only (Cargo.toml denies it crate-wide): kill(2) sends the node its SIGTERM.
#![allow(unsafe_code)]

use crate::common;

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
            "--metrics-port",
            "0",
            "--io",
            "portable",
            "--flush",
            "sync",
            "--shards",
            "2",
        ])
        .args(["--segment-size", "8388608", "--dir"])
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
            break loopback(addr);
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
    // SAFETY: kill takes plain integers; `pid` is the child this test spawned and still owns.
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
    let mut records = 0;
    for shard in ["shard-0", "shard-1"] {
        let store = dir.path().join(shard);
        assert!(
            !store.join("abort").exists(),
            "{shard}: abort marker left behind"
        );
        let verify = Command::new(BIN)
            .args(["store", "verify", "--json", "--dir"])
            .arg(&store)
            .output()
            .unwrap();
        assert!(
            verify.status.success(),
            "{shard}: {}",
            String::from_utf8_lossy(&verify.stdout)
        );
        let report: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap();
        assert_eq!(report["crashed"], false, "{shard}: {report}");
        let count = report["records"].as_u64().unwrap();
        // Queues 0..4 of one topic: two on each shard.
        assert_eq!(count, MESSAGES as u64 / 2, "{shard}: {report}");
        records += count;
    }
    assert_eq!(records, MESSAGES as u64);
}

/// The printed address is the bound one (often `0.0.0.0`): connect over loopback to its port.
fn loopback(printed: &str) -> std::net::SocketAddr {
    let bound: std::net::SocketAddr = printed.parse().expect("a socket address");
    std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port())
}
