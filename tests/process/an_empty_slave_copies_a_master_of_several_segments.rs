//! An empty slave joining a master that holds several CommitLog segments per shard copies
//! the master's whole history (`syncFromLastFile=false`, the default) until each shard's
//! CommitLog is byte-identical to the master's, and serves the same messages. It finds
//! its master through the name server (no `haMasterAddress`): the master's HA address in
//! the answer to its registration.

use crate::common;

use std::time::{Duration, Instant};

use common::process_cluster::{send, BrokerSpec, ProcessCluster};
use common::process_replication::{
    create_topic_on, group_master, read_topic, wait_logs_equal, GROUP_SHARDS,
};
use common::TEST_SEGMENT;
use ringmq::remoting::codes::response;

const TOPIC: &str = "Replicated";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
/// Large bodies, so the segments fill with few sends.
const BODY: usize = 256 * 1024;
/// Segments each shard of the master holds before the slave starts: "several".
const SEGMENTS: usize = 4;
const LIMIT: Duration = Duration::from_secs(120);

/// How many CommitLog files shard `shard` of the store at `root` has.
fn segments(root: &str, shard: u8) -> usize {
    let dir = std::path::Path::new(root)
        .join(format!("shard-{shard}"))
        .join("commitlog");
    std::fs::read_dir(dir).map_or(0, Iterator::count)
}

#[test]
fn an_empty_slave_catches_up_with_a_master_of_several_segments_byte_for_byte() {
    let began = Instant::now();
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "ASYNC_MASTER")]);
    let master = cluster.broker("broker-a-0").addr;
    create_topic_on(&[master], TOPIC, QUEUES.len() as u32);
    // Enough for SEGMENTS full segments on each shard, and a part of the next.
    let per_segment = TEST_SEGMENT as usize / (BODY + 512);
    let count = (SEGMENTS * per_segment + 2) * usize::from(GROUP_SHARDS);
    for n in 0..count {
        let mut body = vec![(n % 251) as u8; BODY];
        body[..8].copy_from_slice(&(n as u64).to_be_bytes());
        let answer = send(master, TOPIC, QUEUES[n % QUEUES.len()], &body);
        assert_eq!(
            answer.code,
            response::SUCCESS,
            "send {n}: {:?}",
            answer.remark
        );
    }
    let root = cluster.brokers[0]
        .props()
        .get("storePathRootDir")
        .expect("a store")
        .to_string();
    for shard in 0..GROUP_SHARDS {
        assert!(
            segments(&root, shard) > SEGMENTS,
            "shard {shard} holds {} segments",
            segments(&root, shard)
        );
    }
    let wrote = began.elapsed();

    let slave = BrokerSpec::master("broker-a")
        .id(1)
        .set("shards", GROUP_SHARDS)
        .set("brokerRole", "SLAVE");
    cluster.add_broker(slave);
    let slave = cluster.broker("broker-a-1").addr;
    let joined = Instant::now();
    wait_logs_equal(&cluster, "broker-a-0", "broker-a-1", LIMIT, true);
    let caught_up = joined.elapsed();
    create_topic_on(&[slave], TOPIC, QUEUES.len() as u32);
    let on_master = read_topic(master, TOPIC, &QUEUES);
    assert_eq!(on_master.len(), count);
    assert!(
        read_topic(slave, TOPIC, &QUEUES) == on_master,
        "the slave serves other messages than its master"
    );
    let log = cluster.brokers[1].log_text();
    assert!(
        log.contains(&cluster.brokers[0].ha_addr().to_string()),
        "the slave names the master's HA address it learned:\n{}",
        cluster.brokers[1].log_tail()
    );
    eprintln!(
        "{count} messages of {BODY} bytes written in {wrote:?}; the slave caught up in \
         {caught_up:?}; {:?} in all",
        began.elapsed()
    );
}
