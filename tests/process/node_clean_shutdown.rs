//! `ringmq serve` as a real process with two shards: messages sent with the client are
//! stored; SIGTERM stops it with exit code 0, no shard leaves an `abort` marker, and
//! `ringmq store verify` passes on every shard's store, which together hold every message
//! sent.
use crate::common;

use std::process::Command;
use std::time::Duration;

use common::serve::Serve;
use common::{run_local, wait_for};
use ringmq::client::Client;
use ringmq::remoting::codes::response;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
const MESSAGES: usize = 20;

#[test]
fn sigterm_stops_serve_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(
        dir.path(),
        &[
            "--flush",
            "sync",
            "--shards",
            "2",
            "--segment-size",
            "8388608",
        ],
        "clean shutdown",
    );
    let addr = serve.addr;

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

    serve.terminate();
    let mut status = None;
    wait_for(
        Duration::from_secs(30),
        "serve to exit after SIGTERM",
        || {
            status = serve.child.try_wait().unwrap();
            status.is_some()
        },
    );
    let log = serve.stderr_after_exit();
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
