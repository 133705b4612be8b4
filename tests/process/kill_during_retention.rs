//! A real `ringmq serve` process killed with SIGKILL while retention deletes segments as
//! fast as they close (`fileReservedTime=0`, every hour a delete hour, the cleaner every
//! 10 ms, 64 KiB segments and small ConsumeQueue files), with a producer sending under
//! SYNC_FLUSH. Several kills over one directory, each start recovering the last. After
//! every restart: each queue's minimum is at most its maximum, every message acknowledged
//! at or above the minimum is pulled back with its body (nothing acknowledged and still
//! retained is lost, and nothing is served from a deleted file), and the minimum has
//! moved (retention really ran). A final clean stop leaves a store `store verify` passes.
//! `RINGMQ_KILL_SEED` picks the moments; the seed is printed.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::raw::Raw;
use common::serve::{kill_seed, Serve};
use common::Rng;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, queue_request, send_request_v1};

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
const TOPIC: &str = "Expiring";
const QUEUES: i32 = 2;
const BODY: usize = 1000;

fn start(dir: &Path) -> Serve {
    let all_hours: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    let delete_when = format!("deleteWhen={}", all_hours.join(";"));
    let args = [
        "--flush",
        "sync",
        "--shards",
        "1",
        "--segment-size",
        "65536",
        "--set",
        "maxMessageSize=8192",
        "--set",
        "mapedFileSizeConsumeQueue=2000",
        "--set",
        "fileReservedTime=0",
        "--set",
        &delete_when,
        "--set",
        "cleanResourceInterval=10",
        // Deletion by time is under test: the host's disk use must not force or refuse.
        "--set",
        "diskMaxUsedSpaceRatio=95",
        "--set",
        "diskSpaceCleanForciblyRatio=95",
        "--set",
        "diskSpaceWarningLevelRatio=95",
    ];
    Serve::start(dir, &args, "kill during retention")
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
    let seed = kill_seed(0x5eed_4e7e);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<(i32, u64), u64> = BTreeMap::new();
    let mut next_id = 0u64;
    let mut first_minimums = None;
    for round in 0..4 {
        let serve = start(dir.path());
        let addr = serve.addr;
        let minimums = check_retained(addr, &acked, seed);
        first_minimums.get_or_insert(minimums.clone());
        println!(
            "seed {seed}: round {round}: queue minimums {minimums:?}, acked {}",
            acked.len()
        );
        let run_for = Duration::from_millis(rng.range(300, 1000));
        let killer = serve.kill_after(run_for);
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

    let mut serve = start(dir.path());
    let last = check_retained(serve.addr, &acked, seed);
    let first = first_minimums.unwrap();
    assert!(
        last.iter().zip(&first).any(|(last, first)| last > first),
        "seed {seed}: retention never moved a queue's minimum ({first:?} to {last:?}); acked {}",
        acked.len()
    );
    // A clean stop, then the offline check of the whole store.
    serve.terminate();
    assert!(
        serve.child.wait().unwrap().success(),
        "seed {seed}: clean stop"
    );
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
