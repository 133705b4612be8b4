//! A broker group shares a host with others only if each process opens just the ports its
//! file names: a master its `listenPort` and `haListenPort` (one HA port for every shard's
//! stream), a slave its `listenPort` alone (it connects out, it does not listen).

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::process_replication::StreamingPair;

const TOPIC: &str = "Replicated";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_master_opens_its_remoting_and_ha_ports_and_its_slave_only_its_remoting_port() {
    // Streaming on every shard: whatever the streams open is open now.
    let pair = StreamingPair::start(TOPIC, &QUEUES, LIMIT);
    pair.wait_caught_up(LIMIT);
    let cluster = &pair.cluster;

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
