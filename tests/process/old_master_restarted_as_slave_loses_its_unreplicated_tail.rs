//! An old master restarted as the slave of its promoted slave, holding a tail it never
//! replicated, is repaired without hands: on connect it truncates each shard to the
//! point both histories agree on and copies the new master's log from there, so its
//! CommitLogs end equal to the new master's and the tail is gone from its queues.
//!
//! The tail: an ASYNC_MASTER takes sends while its slave is paused (SIGSTOP), then the
//! slave is killed before it reads them (a stopped process never does) and the master
//! stopped. The slave comes back as the master (`brokerId=0`, `ASYNC_MASTER`) and takes
//! sends of its own at the same offsets, under a new epoch.

use crate::common;

use std::time::{Duration, Instant};

use common::process_cluster::{send, ProcessCluster};
use common::process_replication::{
    create_topic_on, group_master, group_slave, read_topic, wait_logs_equal, GROUP_SHARDS,
};
use ringmq::remoting::codes::response;

const TOPIC: &str = "Replicated";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
const LIMIT: Duration = Duration::from_secs(60);

/// Sends `count` messages `<tag>-<n>` over every queue; each must be SEND_OK.
fn send_all(broker: std::net::SocketAddr, tag: &str, count: usize) {
    for n in 0..count {
        let queue = QUEUES[n % QUEUES.len()];
        let answer = send(broker, TOPIC, queue, format!("{tag}-{n}").as_bytes());
        assert_eq!(
            answer.code,
            response::SUCCESS,
            "{tag}-{n}: {:?}",
            answer.remark
        );
    }
}

/// The bodies of every message of the topic on `broker`, as text.
fn bodies(broker: std::net::SocketAddr) -> Vec<String> {
    read_topic(broker, TOPIC, &QUEUES)
        .into_values()
        .map(|body| String::from_utf8(body).expect("text"))
        .collect()
}

#[test]
fn an_old_master_with_an_unreplicated_tail_is_truncated_when_it_follows_the_promoted_slave() {
    let began = Instant::now();
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "ASYNC_MASTER")]);
    let ha = cluster.broker("broker-a-0").ha_addr();
    cluster.add_broker(group_slave("broker-a", 1, ha));
    let old_master = cluster.broker("broker-a-0").addr;
    let old_slave = cluster.broker("broker-a-1").addr;
    create_topic_on(&[old_master, old_slave], TOPIC, QUEUES.len() as u32);
    send_all(old_master, "shared", 40);
    wait_logs_equal(&cluster, "broker-a-0", "broker-a-1", LIMIT, true);

    // The slave goes silent; the master acknowledges a tail only it will hold.
    cluster.broker("broker-a-1").pause();
    send_all(old_master, "lost", 20);
    cluster.broker("broker-a-1").kill();
    cluster.broker("broker-a-0").stop();
    let old_logs: Vec<Vec<u8>> = (0..GROUP_SHARDS)
        .map(|shard| cluster.brokers[0].commit_log(shard))
        .collect();

    // The slave is promoted, and writes a different tail under a new epoch.
    let promoted = cluster.broker("broker-a-1");
    promoted.set("brokerId", 0);
    promoted.set("brokerRole", "ASYNC_MASTER");
    promoted.set("haMasterAddress", "");
    promoted.start();
    let new_ha = promoted.ha_addr();
    send_all(old_slave, "new", 12);

    // The old master follows it.
    let demoted = cluster.broker("broker-a-0");
    demoted.set("brokerId", 1);
    demoted.set("brokerRole", "SLAVE");
    demoted.set("haMasterAddress", new_ha);
    demoted.start();
    wait_logs_equal(&cluster, "broker-a-1", "broker-a-0", LIMIT, false);

    for (shard, old) in old_logs.iter().enumerate() {
        let new = cluster.brokers[1].commit_log(shard as u8);
        let shared = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
        assert!(
            shared < old.len() && shared < new.len(),
            "shard {shard}: the old tail and the new one differ ({shared} bytes shared, \
             old {} new {})",
            old.len(),
            new.len()
        );
    }
    let repaired = bodies(old_master);
    assert!(
        !repaired.iter().any(|body| body.starts_with("lost-")),
        "the unreplicated tail is gone: {repaired:?}"
    );
    assert_eq!(
        repaired.iter().filter(|b| b.starts_with("new-")).count(),
        12,
        "{repaired:?}"
    );
    assert_eq!(repaired, bodies(old_slave), "both serve the same messages");
    let log = cluster.brokers[0].log_text();
    assert!(
        log.contains("truncated"),
        "the old master says it truncated:\n{}",
        cluster.brokers[0].log_tail()
    );
    eprintln!("repaired in {:?}", began.elapsed());
}
