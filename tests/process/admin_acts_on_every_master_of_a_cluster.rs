//! `ringmq admin` against standalone name servers (as processes): `-c CLUSTER topic-create`
//! creates the topic on every master the name servers list for the cluster, so its route
//! merges both groups on each name server; `cluster` lists every group with what each
//! broker reports; `-n` takes several name servers, `;`-separated, as mqadmin does;
//! `-c CLUSTER topic-delete` deletes the topic from every master and its route from every
//! name server (which keep it otherwise: `deleteTopicWithBrokerRegistration=false`).

use std::time::Duration;

use crate::common::process_cluster::{
    admin, route_groups, routed_to, topic_table, BrokerSpec, ProcessCluster,
};

/// How soon a topic change reaches the routes (the change poll, 1 s, and a round).
const CHANGE_BOUND: Duration = Duration::from_secs(10);

#[test]
fn a_cluster_topic_create_reaches_every_master_and_both_name_servers_route_it() {
    let groups = vec![
        BrokerSpec::master("broker-a"),
        BrokerSpec::master("broker-b"),
    ];
    let mut cluster = ProcessCluster::start(2, groups);
    let namesrv = cluster.namesrv_addr();
    let (ok, out, err) = admin(&[
        "-n",
        &namesrv,
        "-c",
        "DefaultCluster",
        "topic-create",
        "-t",
        "Orders",
        "-r",
        "4",
        "-w",
        "4",
    ]);
    assert!(ok, "{out}{err}");
    for broker in ["broker-a-0", "broker-b-0"] {
        let addr = cluster.broker(broker).addr;
        assert!(
            out.contains(&format!("created topic Orders on {addr}")),
            "{out}"
        );
        let table = topic_table(addr);
        assert_eq!(table["Orders"]["writeQueueNums"], 4, "{broker}: {table:?}");
    }
    for addr in cluster.name_servers.iter().map(|n| n.addr) {
        cluster.wait_until(CHANGE_BOUND, "Orders routed to both groups", || {
            routed_to(addr, "Orders", &["broker-a", "broker-b"])
        });
    }
    let (ok, out, err) = admin(&["-n", &namesrv, "cluster"]);
    assert!(ok, "{out}{err}");
    for broker in ["broker-a-0", "broker-b-0"] {
        let addr = cluster.broker(broker).addr.to_string();
        let name = broker.trim_end_matches("-0");
        assert!(
            out.lines()
                .any(|line| line.contains(name) && line.contains(&addr)),
            "{name} at {addr} not listed:\n{out}"
        );
    }
    let (ok, out, err) = admin(&[
        "-n",
        &namesrv,
        "-c",
        "DefaultCluster",
        "topic-delete",
        "-t",
        "Orders",
    ]);
    assert!(ok, "{out}{err}");
    for addr in cluster.name_servers.iter().map(|n| n.addr) {
        assert!(
            out.contains(&format!("deleted topic Orders from name server {addr}")),
            "{out}"
        );
        // At once: the delete answered only after each name server dropped the route.
        assert_eq!(
            route_groups(addr, "Orders"),
            (Vec::new(), Vec::new()),
            "Orders still routed by {addr}"
        );
    }
    for broker in ["broker-a-0", "broker-b-0"] {
        let table = topic_table(cluster.broker(broker).addr);
        assert!(table.get("Orders").is_none(), "{broker}: {table:?}");
    }
}
