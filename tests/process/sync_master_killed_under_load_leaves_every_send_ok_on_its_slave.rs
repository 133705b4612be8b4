//! A SYNC_MASTER killed (SIGKILL) while several senders load it: every message it answered
//! SEND_OK is on its slave, byte for byte, at the queue offset the answer named, and each
//! shard's CommitLog on the slave is a byte prefix of the dead master's. Master and slave
//! run two shards each, so shard 1's stream is handed over by shard 0's HA listener.

use crate::common;

use std::time::{Duration, Instant};

use common::process_replication::{
    logs_equal, read_topic, SendLoad, Sent, StreamingPair, GROUP_SHARDS, PAIR_MASTER,
};
use ringmq::shard::routing::queue_owner;

const TOPIC: &str = "Replicated";
/// Four queues: two on each shard.
const QUEUES: [i32; 4] = [0, 1, 2, 3];
const SENDERS: usize = 6;
/// 1 KiB, as the benchmarks send.
const BODY: usize = 1024;
/// SEND_OK answers to collect before the kill: enough that the kill lands mid-stream.
const ACKED_BEFORE_KILL: usize = 2000;
/// How long the slave may take to stream, and the load to reach its count (a debug-ish
/// build on a shared 2-core machine).
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn every_send_ok_of_a_killed_sync_master_is_on_its_slave_byte_identical() {
    let began = Instant::now();
    let owners: std::collections::BTreeSet<u8> = QUEUES
        .iter()
        .map(|&q| queue_owner(TOPIC, q, GROUP_SHARDS))
        .collect();
    assert_eq!(
        owners.len(),
        usize::from(GROUP_SHARDS),
        "the queues cover every shard"
    );
    let StreamingPair {
        mut cluster,
        master,
        slave,
        ..
    } = StreamingPair::start(TOPIC, &QUEUES, LIMIT);

    let load = SendLoad::start(master, TOPIC, &QUEUES, SENDERS, BODY);
    cluster.wait_until(LIMIT, "SEND_OK answers under load", || {
        load.count(Sent::is_ok) >= ACKED_BEFORE_KILL
    });
    cluster.broker(PAIR_MASTER).kill();
    let sent = load.finish();
    let acked: Vec<&Sent> = sent.iter().filter(|s| s.is_ok()).collect();
    assert!(acked.len() >= ACKED_BEFORE_KILL, "{} SEND_OK", acked.len());

    let on_slave = read_topic(slave, TOPIC, &QUEUES);
    for s in &acked {
        let (_, offset) = s.answer.clone().expect("answered");
        let offset = u64::try_from(offset).expect("a SEND_OK names its queue offset");
        let held = on_slave.get(&(s.queue, offset)).unwrap_or_else(|| {
            panic!(
                "SEND_OK {}/{offset} (sender {}) is not on the slave, which holds {} messages\n{}",
                s.queue,
                s.sender,
                on_slave.len(),
                cluster.logs()
            )
        });
        assert!(
            *held == s.body,
            "{}/{offset}: the slave holds other bytes than the SEND_OK message",
            s.queue
        );
    }
    let (dead, follower) = (&cluster.brokers[0], &cluster.brokers[1]);
    // Every shard streamed: shard 1's through the handoff from shard 0's listener.
    for shard in 0..GROUP_SHARDS {
        let connected = format!("shard={shard}");
        assert!(
            dead.log_text()
                .lines()
                .any(|line| line.contains("slave connected") && line.contains(&connected)),
            "no stream of shard {shard}:\n{}",
            dead.log_tail()
        );
    }
    // Panics if a shard's log on the slave is not a prefix of the master's.
    logs_equal(dead, follower, true);
    eprintln!(
        "{} SEND_OK of {} sends all on the slave; {:?}",
        acked.len(),
        sent.len(),
        began.elapsed()
    );
}
