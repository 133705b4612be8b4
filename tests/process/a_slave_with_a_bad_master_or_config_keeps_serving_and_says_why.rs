//! A slave pointed at something that is not its master keeps serving (it answers
//! requests), writes nothing to its store, and says in its log why, naming the peer:
//! - `haMasterAddress` naming itself or another slave (a slave opens no HA port), or the
//!   master's remoting port (not the HA wire);
//! - a shard count, a `brokerName` or a `brokerClusterName` other than its master's: the
//!   master refuses the stream and the slave's log names both values.

use crate::common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::process_cluster::{call, free_port, BrokerSpec, Proc, ProcessCluster};
use common::process_replication::{group_master, group_slave, GROUP_SHARDS};
use ringmq::remoting::codes::request;
use ringmq::remoting::requests::queue_request;

/// How long the slave may take to try its master and log why it failed (it tries at
/// start, again every second).
const LIMIT: Duration = Duration::from_secs(60);

/// Waits until `slave`'s log has a line holding every one of `parts`; then checks that it
/// answers a request and holds nothing.
fn says_why_and_keeps_serving(cluster: &ProcessCluster, slave: &str, parts: &[&str]) {
    let proc = cluster
        .brokers
        .iter()
        .find(|b| b.name == slave)
        .unwrap_or_else(|| panic!("no {slave}"));
    cluster.wait_until(LIMIT, &format!("{slave} logging {parts:?}"), || {
        proc.log_text()
            .lines()
            .any(|line| parts.iter().all(|part| line.contains(part)))
    });
    // Any answer will do: the slave's remoting port serves while its stream fails.
    call(
        proc.addr,
        queue_request(request::GET_MAX_OFFSET, "TBW102", 0),
    )
    .unwrap_or_else(|error| panic!("{slave} does not answer: {error}"));
    holds_nothing(proc);
}

fn holds_nothing(proc: &Proc) {
    for shard in 0..GROUP_SHARDS {
        assert!(
            proc.commit_log(shard).is_empty(),
            "{} wrote to shard {shard}'s CommitLog",
            proc.name
        );
    }
}

#[test]
fn a_slave_pointed_at_itself_another_slave_or_a_remoting_port_says_so_and_serves() {
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "ASYNC_MASTER")]);
    let ha = cluster.broker("broker-a-0").ha_addr();
    let remoting = cluster.broker("broker-a-0").addr;
    cluster.add_broker(group_slave("broker-a", 1, ha));
    let other_slave = cluster.broker("broker-a-1").ha_addr();
    cluster.add_broker(group_slave("broker-a", 2, other_slave));
    cluster.add_broker(group_slave("broker-a", 3, remoting).set("haHousekeepingInterval", 2000));

    // A slave named as its own master: its haListenPort, which a slave does not open.
    let own = free_port();
    let itself = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), own);
    cluster.add_broker(group_slave("broker-a", 4, itself).set("haListenPort", own));

    let to_itself = itself.to_string();
    says_why_and_keeps_serving(&cluster, "broker-a-4", &[&to_itself, "cannot connect"]);
    let to_slave = other_slave.to_string();
    says_why_and_keeps_serving(&cluster, "broker-a-2", &[&to_slave, "cannot connect"]);
    let to_remoting = remoting.to_string();
    says_why_and_keeps_serving(
        &cluster,
        "broker-a-3",
        &[
            &to_remoting,
            "without answering the handshake",
            "haListenPort",
        ],
    );
}

#[test]
fn a_master_refuses_a_slave_of_another_shard_count_broker_name_or_cluster_naming_both() {
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "ASYNC_MASTER")]);
    let ha = cluster.broker("broker-a-0").ha_addr();
    cluster.add_broker(group_slave("broker-a", 1, ha).set("shards", 1));
    cluster.add_broker(BrokerSpec {
        name: "broker-b".into(),
        ..group_slave("broker-a", 2, ha)
    });
    cluster.add_broker(group_slave("broker-a", 3, ha).cluster("OtherCluster"));

    says_why_and_keeps_serving(
        &cluster,
        "broker-a-1",
        &["refused", "master has 2 shards, slave has 1"],
    );
    says_why_and_keeps_serving(
        &cluster,
        "broker-b-2",
        &["refused", "'broker-a'", "'broker-b'"],
    );
    says_why_and_keeps_serving(
        &cluster,
        "broker-a-3",
        &["refused", "'DefaultCluster'", "'OtherCluster'"],
    );
}
