//! A real `ringmq serve` process killed with SIGKILL while retention deletes segments as
//! fast as they close (`fileReservedTime=0`, every hour a delete hour, the cleaner every
//! 10 ms, 64 KiB segments and small ConsumeQueue files), with a producer sending under
//! SYNC_FLUSH. Several kills over one directory, each start recovering the last. After
//! every restart: each queue's minimum is at most its maximum, every message acknowledged
//! at or above the minimum is pulled back with its body (nothing acknowledged and still
//! retained is lost, and nothing is served from a deleted file), and the minimum has
//! moved (retention really ran). A final clean stop leaves a store `store verify` passes.
//! `RINGMQ_KILL_SEED` picks the moments; the seed is printed.

// Allowed here only (Cargo.toml denies it crate-wide): kill(2) sends the node its SIGTERM.
#![allow(unsafe_code)]

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::raw::Raw;
use common::Rng;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, queue_request, send_request_v1};

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
const TOPIC: &str = "Expiring";
const QUEUES: i32 = 2;
const BODY: usize = 1000;

fn start(dir: &Path) -> (Child, SocketAddr) {
    let all_hours: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--port",
            "0",
            "--namesrv-port",
            "0",
            "--metrics-port",
            "0",
        ])
        .args(["--io", "portable", "--flush", "sync", "--shards", "1"])
        .args(["--segment-size", "65536", "--dir"])
        .arg(dir)
        .args(["--set", "maxMessageSize=8192"])
        .args(["--set", "mapedFileSizeConsumeQueue=2000"])
        .args(["--set", "fileReservedTime=0"])
        .args(["--set", &format!("deleteWhen={}", all_hours.join(";"))])
        .args(["--set", "cleanResourceInterval=10"])
        // Deletion by time is under test: the host's disk use must not force or refuse.
        .args(["--set", "diskMaxUsedSpaceRatio=95"])
        .args(["--set", "diskSpaceCleanForciblyRatio=95"])
        .args(["--set", "diskSpaceWarningLevelRatio=95"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
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
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, addr)
}

fn body(id: u64) -> String {
    format!("{id:0>width$}", width = BODY)
}

fn queue_offset(raw: &mut Raw, code: i32, queue: i32) -> u64 {
    let answer = raw.call(queue_request(code, TOPIC, queue));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    answer.ext_fields["offset"].parse().unwrap()
}

/// Checks every acknowledged message the store still retains; returns each queue's
/// minimum.
fn check_retained(addr: SocketAddr, acked: &BTreeMap<(i32, u64), u64>, seed: u64) -> Vec<u64> {
    let mut raw = Raw::connect(addr);
    let mut minimums = Vec::new();
    for queue in 0..QUEUES {
        let min = queue_offset(&mut raw, request::GET_MIN_OFFSET, queue);
        let max = queue_offset(&mut raw, request::GET_MAX_OFFSET, queue);
        assert!(
            min <= max,
            "seed {seed}: queue {queue}: min {min} > max {max}"
        );
        for (&(_, offset), &id) in acked.range((queue, min)..(queue, u64::MAX)) {
            let answer = raw.call(pull_request(TOPIC, queue, offset, 1, None, None));
            if answer.code != response::SUCCESS {
                // A segment that closed before the kill may expire right after the start.
                let now = queue_offset(&mut raw, request::GET_MIN_OFFSET, queue);
                assert!(
                    offset < now,
                    "seed {seed}: queue {queue} offset {offset} (min {min}, now {now}, max {max}): {answer:?}"
                );
                continue;
            }
            let bodies = common::pull_bodies(&answer.body);
            assert_eq!(
                bodies.first(),
                Some(&body(id)),
                "seed {seed}: queue {queue} offset {offset}"
            );
        }
        minimums.push(min);
    }
    minimums
}

#[test]
fn sigkill_during_retention_loses_nothing_retained_and_restarts_consistent() {
    let seed = std::env::var("RINGMQ_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_4e7e);
    println!("seed {seed} (RINGMQ_KILL_SEED)");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<(i32, u64), u64> = BTreeMap::new();
    let mut next_id = 0u64;
    let mut first_minimums = None;
    for round in 0..4 {
        let (mut child, addr) = start(dir.path());
        let minimums = check_retained(addr, &acked, seed);
        first_minimums.get_or_insert(minimums.clone());
        println!(
            "seed {seed}: round {round}: queue minimums {minimums:?}, acked {}",
            acked.len()
        );
        let run_for = Duration::from_millis(rng.range(300, 1000));
        let killer = std::thread::spawn(move || {
            std::thread::sleep(run_for);
            child.kill().unwrap();
            child.wait().unwrap();
        });
        let mut raw = Raw::connect(addr);
        let until = Instant::now() + run_for + Duration::from_secs(2);
        while Instant::now() < until {
            let queue = (next_id % QUEUES as u64) as i32;
            let Some(answer) = raw.try_call(send_request_v1(
                TOPIC,
                queue,
                body(next_id).as_bytes(),
                None,
                None,
            )) else {
                break; // killed
            };
            assert_eq!(answer.code, response::SUCCESS, "seed {seed}: {answer:?}");
            let offset: u64 = answer.ext_fields["queueOffset"].parse().unwrap();
            assert!(
                acked.insert((queue, offset), next_id).is_none(),
                "seed {seed}: queue {queue} offset {offset} acknowledged twice"
            );
            next_id += 1;
        }
        killer.join().unwrap();
    }

    let (mut child, addr) = start(dir.path());
    let last = check_retained(addr, &acked, seed);
    let first = first_minimums.unwrap();
    assert!(
        last.iter().zip(&first).any(|(last, first)| last > first),
        "seed {seed}: retention never moved a queue's minimum ({first:?} to {last:?}); acked {}",
        acked.len()
    );
    // A clean stop, then the offline check of the whole store.
    // SAFETY: kill(2) takes no pointers; the pid is our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert!(child.wait().unwrap().success(), "seed {seed}: clean stop");
    let verify = Command::new(BIN)
        .args(["store", "verify", "--dir"])
        .arg(dir.path().join("shard-0"))
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "seed {seed}: store verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// The printed address is the bound one (often `0.0.0.0`): connect over loopback to its port.
fn loopback(printed: &str) -> std::net::SocketAddr {
    let bound: std::net::SocketAddr = printed.parse().expect("a socket address");
    std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port())
}
