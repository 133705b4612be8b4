//! A broker group shares a host with others only if each process opens just the ports its
//! file names: a master its `listenPort` and `haListenPort` (one HA port for every shard's
//! stream), a slave its `listenPort` alone (it connects out, it does not listen).

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::process_cluster::ProcessCluster;
use common::process_replication::{
    create_topic_on, group_master, group_slave, wait_logs_equal, wait_send_ok,
};

const TOPIC: &str = "Replicated";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_master_opens_its_remoting_and_ha_ports_and_its_slave_only_its_remoting_port() {
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "SYNC_MASTER")]);
    let ha = cluster.broker("broker-a-0").ha_addr();
    cluster.add_broker(group_slave("broker-a", 1, ha));
    let master = cluster.broker("broker-a-0").addr;
    let slave = cluster.broker("broker-a-1").addr;
    create_topic_on(&[master, slave], TOPIC, QUEUES.len() as u32);
    // Streaming on every shard: whatever the streams open is open now.
    wait_send_ok(&cluster, master, TOPIC, &QUEUES, LIMIT);
    wait_logs_equal(&cluster, "broker-a-0", "broker-a-1", LIMIT, true);

    let m = &cluster.brokers[0];
    let expected: BTreeSet<u16> = [m.addr.port(), m.ha_addr().port()].into();
    assert_eq!(m.listening_ports(), expected, "the master");
    assert!(
        expected.is_subset(&m.named_ports()),
        "{:?}",
        m.named_ports()
    );
    let s = &cluster.brokers[1];
    assert_eq!(s.listening_ports(), [s.addr.port()].into(), "the slave");
    for namesrv in &cluster.name_servers {
        assert_eq!(namesrv.listening_ports(), [namesrv.addr.port()].into());
    }
}
