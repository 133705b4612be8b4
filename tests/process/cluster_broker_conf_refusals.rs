//! A broker.conf that cannot join its cluster is refused at start, naming what is wrong:
//! a `namesrvAddr` host that does not resolve (a broker that silently registers nowhere is
//! not in its cluster), a `registerNameServerPeriod` outside its range, a `namesrvAddr`
//! entry that is not `host:port`.

use crate::common::process_cluster::{BrokerSpec, ProcessCluster};

#[test]
fn a_name_server_host_that_does_not_resolve_fails_the_start_naming_it() {
    let cluster = ProcessCluster::new(1);
    let known = cluster.name_servers[0].addr;
    let spec = BrokerSpec::master("broker-a")
        .set("namesrvAddr", format!("{known};no-such-host.invalid:9876"));
    let (status, log) = cluster.refused_broker(spec);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("namesrvAddr: cannot resolve no-such-host.invalid:9876"),
        "{log}"
    );
    assert!(!log.contains("ringmq: listening on"), "{log}");
}

#[test]
fn a_register_period_below_its_range_is_refused_naming_the_key_and_range() {
    let cluster = ProcessCluster::new(1);
    let spec = BrokerSpec::master("broker-a").set("registerNameServerPeriod", 500);
    let (status, log) = cluster.refused_broker(spec);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("registerNameServerPeriod: 500 must be between 1000 and 60000 ms"),
        "{log}"
    );
}

#[test]
fn a_name_server_entry_without_a_port_is_refused_naming_it() {
    let cluster = ProcessCluster::new(1);
    let known = cluster.name_servers[0].addr;
    let spec = BrokerSpec::master("broker-a").set("namesrvAddr", format!("{known};127.0.0.1"));
    let (status, log) = cluster.refused_broker(spec);
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("namesrvAddr"), "{log}");
    assert!(log.contains("127.0.0.1"), "{log}");
}
