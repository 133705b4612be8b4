//! `ringmq store verify` and `ringmq store dump` on real directories: a clean store
//! verifies with the right counts, a flipped byte below the durable point in the
//! CommitLog or in a ConsumeQueue makes verify exit 1 naming the damage, and dump prints
//! every record with the documented fields; both refuse a store a running node holds, and
//! a node's root given for a shard's store names the directory to pass.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");

fn ringmq(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run ringmq")
}

/// A cleanly stopped store of `messages` messages in 2 queues.
fn make_store(dir: &Path, messages: u64) {
    let output = Command::new(BIN)
        .args([
            "bench",
            "store",
            "--flush",
            "sync",
            "--producers",
            "4",
            "--size",
            "200",
            "--queues",
            "2",
        ])
        .args([
            "--quiet",
            "--segment-size",
            "65536",
            "--messages",
            &messages.to_string(),
            "--dir",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x5A;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_clean_store_verifies_and_dump_prints_every_record_with_its_fields() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("store");
    make_store(&dir, 500);
    let verify = ringmq(&["store", "verify", "--json"], &dir);
    assert!(verify.status.success());
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap();
    assert_eq!(report["records"], 500);
    assert_eq!(report["queue_entries"], 500);
    assert_eq!(report["queues"], 2);
    assert_eq!(report["crashed"], false);
    assert!(report["damage"].as_array().unwrap().is_empty());
    assert!(
        report["segments"].as_u64().unwrap() >= 2,
        "500 records of ~300 bytes span several 64 KiB segments"
    );

    let dump = ringmq(&["store", "dump"], &dir);
    assert!(dump.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(dump.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 500);
    let mut previous_end = 0;
    for line in &lines {
        for field in [
            "phys_offset",
            "topic",
            "queue_id",
            "queue_offset",
            "store_timestamp",
            "keys",
            "tags",
            "body_size",
            "body_crc",
        ] {
            assert!(line.get(field).is_some(), "dump line lacks {field}: {line}");
        }
        assert_eq!(line["body_size"], 200);
        assert_eq!(line["tags"], "TagA");
        let phys = line["phys_offset"].as_u64().unwrap();
        assert!(phys >= previous_end, "records are in log order");
        previous_end = phys + line["total_size"].as_u64().unwrap();
    }
}

#[test]
fn verify_exits_1_on_a_damaged_record_below_the_durable_point() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("store");
    make_store(&dir, 300);
    // Inside the body of a record in the first segment: only the CRCs can notice.
    flip_byte(&dir.join("commitlog/00000000000000000000"), 5000);
    let verify = ringmq(&["store", "verify"], &dir);
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "verify must fail:\n{text}");
    assert!(text.contains("DAMAGE"), "{text}");
    assert!(
        text.contains("CRC"),
        "the report names the check that failed:\n{text}"
    );
}

#[test]
fn verify_exits_1_on_a_consume_queue_entry_that_points_at_the_wrong_record() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("store");
    make_store(&dir, 300);
    let queue_dir = dir.join("consumequeue/BenchTopic0/1");
    // Entry 3's physical offset field: point it somewhere else.
    flip_byte(&queue_dir.join("00000000000000000000"), 3 * 20 + 6);
    let verify = ringmq(&["store", "verify"], &dir);
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "verify must fail:\n{text}");
    assert!(
        text.contains("BenchTopic0/1 entry 3"),
        "the report names the entry:\n{text}"
    );
}

#[test]
fn verify_and_dump_refuse_a_directory_that_is_not_a_store() {
    let scratch = tempfile::tempdir().unwrap();
    for command in [&["store", "verify"][..], &["store", "dump"][..]] {
        let output = ringmq(command, scratch.path());
        assert_eq!(output.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&output.stderr).contains("a ringmq store?"));
    }
}

#[test]
fn verify_and_dump_refuse_a_store_a_running_node_holds() {
    let root = tempfile::tempdir().unwrap();
    let node = common::start_node(root.path());
    let shard = root.path().join("shard-0");
    for command in [&["store", "verify"][..], &["store", "dump"][..]] {
        let run = ringmq(command, &shard);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            !run.status.success() && stderr.contains("open by a running node"),
            "{command:?} on a live store: {run:?}"
        );
    }
    node.shutdown().unwrap();
    let run = ringmq(&["store", "verify"], &shard);
    assert!(run.status.success(), "after the node stopped: {run:?}");
}

#[test]
fn a_store_root_given_for_a_shard_store_names_the_directory_to_pass() {
    let root = tempfile::tempdir().unwrap();
    common::start_node(root.path()).shutdown().unwrap();
    for command in [&["store", "verify"][..], &["store", "dump"][..]] {
        let run = ringmq(command, root.path());
        let stderr = String::from_utf8_lossy(&run.stderr);
        let expected = format!("--dir {}", root.path().join("shard-0").display());
        assert!(
            !run.status.success() && stderr.contains(&expected),
            "{command:?} on the root: {run:?}"
        );
    }
}
