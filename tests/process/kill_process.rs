//! A real process killed with SIGKILL: `ringmq bench store --ack-log` is killed at random
//! moments, several times over the same directory (each start recovers the previous
//! crash). After every kill `store verify` passes and every message the acknowledgement
//! log recorded is in `store dump`, with the same offsets and body CRC. Under SYNC_FLUSH
//! an acknowledged message was fsynced; under ASYNC_FLUSH it was only in the page cache
//! (written through the segment's mapping), which a killed process does not take with it.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{wait_for, Rng};

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");

#[derive(Debug, PartialEq, Eq, Clone)]
struct Seen {
    topic: String,
    queue_id: i64,
    queue_offset: i64,
    body_crc: i64,
}

fn seen(value: &serde_json::Value) -> (u64, Seen) {
    let field = |name: &str| {
        value
            .get(name)
            .unwrap_or_else(|| panic!("no field {name} in {value}"))
    };
    (
        field("phys_offset").as_u64().unwrap(),
        Seen {
            topic: field("topic").as_str().unwrap().to_string(),
            queue_id: field("queue_id").as_i64().unwrap(),
            queue_offset: field("queue_offset").as_i64().unwrap(),
            body_crc: field("body_crc").as_i64().unwrap(),
        },
    )
}

/// Complete lines of the ack log (a line cut by the kill was never fully recorded).
fn acked_lines(path: &Path) -> Vec<(u64, Seen)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete
        .lines()
        .map(|line| {
            seen(
                &serde_json::from_str(line)
                    .unwrap_or_else(|error| panic!("bad ack line {line}: {error}")),
            )
        })
        .collect()
}

fn count_lines(path: &Path) -> usize {
    std::fs::read(path)
        .map(|bytes| bytes.iter().filter(|&&byte| byte == b'\n').count())
        .unwrap_or(0)
}

#[test]
fn acknowledged_messages_survive_sigkill_and_the_store_verifies() {
    kill_rounds("sync");
}

#[test]
fn async_flush_acknowledged_messages_survive_sigkill_and_the_store_verifies() {
    kill_rounds("async");
}

/// `ringmq bench store` on `dir`, its acknowledgements logged to `ack_log`.
fn start_store_bench(flush: &str, dir: &Path, ack_log: &Path) -> Child {
    Command::new(BIN)
        .args([
            "bench",
            "store",
            "--flush",
            flush,
            "--producers",
            "8",
            "--size",
            "700",
        ])
        .args([
            "--duration",
            "120",
            "--segment-size",
            "262144",
            "--queues",
            "4",
            "--topics",
            "2",
            "--quiet",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--ack-log")
        .arg(ack_log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ringmq bench store")
}

/// What `ringmq store dump` reads back from `dir`, by physical offset.
fn dumped(dir: &Path, flush: &str, seed: u64) -> HashMap<u64, Seen> {
    let dump = Command::new(BIN)
        .args(["store", "dump", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{flush} seed {seed}: dump failed: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    String::from_utf8(dump.stdout)
        .unwrap()
        .lines()
        .map(|line| seen(&serde_json::from_str(line).unwrap()))
        .collect()
}

/// Four kill-and-check rounds of `ringmq bench store --flush <flush>` over one directory.
fn kill_rounds(flush: &str) {
    let seed = std::env::var("RINGMQ_KILL_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0x5EED_u64);
    let mut rng = Rng::new(seed);
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("store");
    let mut all_acked: Vec<(u64, Seen)> = Vec::new();
    for round in 0..4 {
        let ack_log = scratch.path().join(format!("acks-{round}.jsonl"));
        let mut child = start_store_bench(flush, &dir, &ack_log);
        let target = rng.range(20, 20_000) as usize;
        wait_for(
            Duration::from_secs(60),
            "acknowledgements to accumulate",
            || count_lines(&ack_log) >= target,
        );
        std::thread::sleep(Duration::from_millis(rng.range(0, 30)));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        all_acked.extend(acked_lines(&ack_log));

        let verify = Command::new(BIN)
            .args(["store", "verify", "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&verify.stdout);
        assert!(
            verify.status.success(),
            "{flush} seed {seed} round {round}: verify failed:\n{report}"
        );

        let stored = dumped(&dir, flush, seed);
        for (phys, acked) in &all_acked {
            assert_eq!(
                stored.get(phys),
                Some(acked),
                "{flush} seed {seed} round {round}: acknowledged message at phys {phys} is missing or different"
            );
        }
        assert!(!all_acked.is_empty());
    }
}
