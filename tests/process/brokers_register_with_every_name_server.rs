//! Brokers as real processes registering with standalone name servers (`namesrvAddr`):
//! two broker groups of one cluster behind two name servers are routed by each, a topic
//! created after the start reaches the routes within the change poll (not the period),
//! and what a broker registers is its whole topic table with each topic's queue counts,
//! perm and system flag as the broker holds them.

use std::time::{Duration, Instant};

use crate::common::process_cluster::{
    cluster_info, create_topic, master_addr, route, routed_to, send, topic_list, topic_table,
    BrokerSpec, ProcessCluster,
};

/// The period the brokers of these tests register at: far past every bound below, so
/// only the registration on a topic change can explain a route appearing in time.
const LONG_PERIOD_MS: u64 = 60_000;
/// How soon a topic change reaches the routes: the broker's change poll (1 s) plus a
/// registration round, with room for a loaded machine; far under [`LONG_PERIOD_MS`].
const CHANGE_BOUND: Duration = Duration::from_secs(10);

fn master(name: &str) -> BrokerSpec {
    BrokerSpec::master(name).set("registerNameServerPeriod", LONG_PERIOD_MS)
}

#[test]
fn two_groups_behind_two_name_servers_are_routed_and_listed_by_each() {
    // broker-b with two shards: one registration (shard 0's) describes the whole node.
    let groups = vec![master("broker-a"), master("broker-b").set("shards", 2)];
    let mut cluster = ProcessCluster::start(2, groups);
    let a = cluster.broker("broker-a-0").addr;
    let b = cluster.broker("broker-b-0").addr;
    let created = Instant::now();
    create_topic(a, "ClusterTopic", 4, 4, 6);
    create_topic(b, "ClusterTopic", 4, 4, 6);
    create_topic(a, "OnlyOnA", 2, 2, 6);
    for namesrv in cluster.name_servers.iter().map(|n| n.addr) {
        cluster.wait_until(CHANGE_BOUND, "both groups in ClusterTopic's route", || {
            routed_to(namesrv, "ClusterTopic", &["broker-a", "broker-b"])
        });
        cluster.wait_until(CHANGE_BOUND, "broker-a alone in OnlyOnA's route", || {
            routed_to(namesrv, "OnlyOnA", &["broker-a"])
        });
        let found = route(namesrv, "ClusterTopic").expect("a route");
        assert_eq!(
            master_addr(&found, "broker-a"),
            Some(a.to_string()),
            "{found}"
        );
        assert_eq!(
            master_addr(&found, "broker-b"),
            Some(b.to_string()),
            "{found}"
        );
        for queues in found["queueDatas"].as_array().unwrap() {
            assert_eq!(queues["writeQueueNums"], 4, "{found}");
            assert_eq!(queues["readQueueNums"], 4, "{found}");
            assert_eq!(queues["perm"], 6, "{found}");
        }
        let info = cluster_info(namesrv);
        assert_eq!(
            info["clusterAddrTable"]["DefaultCluster"],
            serde_json::json!(["broker-a", "broker-b"]),
            "{info}"
        );
        assert_eq!(
            info["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"],
            a.to_string()
        );
        assert_eq!(
            info["brokerAddrTable"]["broker-b"]["brokerAddrs"]["0"],
            b.to_string()
        );
        assert_eq!(
            info["brokerAddrTable"]["broker-b"]["cluster"],
            "DefaultCluster"
        );
    }
    // Not the period: the topics were created long before the next periodic round.
    assert!(
        created.elapsed() < Duration::from_millis(LONG_PERIOD_MS),
        "the routes took {:?}",
        created.elapsed()
    );
}

#[test]
fn a_registration_carries_every_topic_with_its_queue_counts_perm_and_flags() {
    let mut cluster = ProcessCluster::start(1, vec![master("broker-a")]);
    let broker = cluster.broker("broker-a-0").addr;
    let namesrv = cluster.name_servers[0].addr;
    // Read and write counts apart, and perms other than the default, so a swapped or
    // defaulted field shows.
    create_topic(broker, "WiderReads", 8, 4, 6);
    create_topic(broker, "ReadOnly", 2, 2, 4);
    create_topic(broker, "WriteOnly", 3, 3, 2);
    cluster.wait_until(CHANGE_BOUND, "the last topic created in the routes", || {
        routed_to(namesrv, "WriteOnly", &["broker-a"])
    });
    let table = topic_table(broker);
    // Every topic the broker holds, and no other but the auto-create template (see
    // below), is what the name server knows.
    let mut held: Vec<String> = table.keys().cloned().collect();
    held.push("TBW102".into());
    held.sort();
    assert_eq!(topic_list(namesrv), held);
    for (topic, config) in &table {
        let found = route(namesrv, topic)
            .unwrap_or_else(|| panic!("{topic} is not routed; the broker holds {config}"));
        let queues = found["queueDatas"].as_array().unwrap();
        assert_eq!(queues.len(), 1, "{topic}: {found}");
        let queues = &queues[0];
        assert_eq!(queues["brokerName"], "broker-a", "{topic}: {found}");
        for field in ["readQueueNums", "writeQueueNums", "perm", "topicSysFlag"] {
            assert_eq!(
                queues[field], config[field],
                "{topic}: {field} routed as {} but held as {} ({config})",
                queues[field], config[field]
            );
        }
    }
    let wide = &route(namesrv, "WiderReads").unwrap()["queueDatas"][0];
    assert_eq!(
        (
            wide["readQueueNums"].as_u64(),
            wide["writeQueueNums"].as_u64()
        ),
        (Some(8), Some(4))
    );
    assert_eq!(
        route(namesrv, "ReadOnly").unwrap()["queueDatas"][0]["perm"],
        4
    );
    assert_eq!(
        route(namesrv, "WriteOnly").unwrap()["queueDatas"][0]["perm"],
        2
    );
}

/// A Java producer sending to a topic no name server knows asks for the route of the
/// template topic `TBW102` and sends to the brokers it names, which create the topic
/// (`autoCreateTopicEnable`). So a broker that auto-creates registers `TBW102`, as Java's
/// does (perm 7: read, write, inherit), and one that does not, does not.
#[test]
fn brokers_that_auto_create_topics_are_routed_for_the_template_topic() {
    let cluster = ProcessCluster::start(
        1,
        vec![
            master("broker-a"),
            master("broker-b").set("autoCreateTopicEnable", false),
        ],
    );
    let namesrv = cluster.name_servers[0].addr;
    cluster.wait_until(CHANGE_BOUND, "TBW102 routed to broker-a alone", || {
        routed_to(namesrv, "TBW102", &["broker-a"])
    });
    let template = route(namesrv, "TBW102").unwrap();
    let queues = &template["queueDatas"][0];
    assert_eq!(queues["perm"], 7, "{template}");
    assert_eq!(
        queues["writeQueueNums"], queues["readQueueNums"],
        "{template}"
    );
    assert!(queues["writeQueueNums"].as_u64() > Some(0), "{template}");
    // What the producer does next: send to the unknown topic on a broker the template
    // names; the broker creates it and the routes have it within the change poll.
    let a = master_addr(&template, "broker-a").unwrap().parse().unwrap();
    assert_eq!(route(namesrv, "MadeBySending"), None);
    let answer = send(a, "MadeBySending", 0, b"first");
    assert_eq!(
        answer.code,
        ringmq::remoting::codes::response::SUCCESS,
        "{:?}",
        answer.remark
    );
    cluster.wait_until(CHANGE_BOUND, "the auto-created topic routed", || {
        routed_to(namesrv, "MadeBySending", &["broker-a"])
    });
}

/// Several name servers and brokers share a host only if each opens just the ports its
/// file names: a broker with `namesrvAddr` runs no embedded name server (no `namesrvPort`
/// listener), and one with `metricsExporterType=DISABLE` no metrics endpoint.
#[test]
fn every_process_of_a_cluster_listens_only_on_the_ports_its_file_names() {
    let mut cluster = ProcessCluster::start(2, vec![master("broker-a"), master("broker-b")]);
    for process in cluster.name_servers.iter().chain(&cluster.brokers) {
        let listening = process.listening_ports();
        assert!(
            listening.contains(&process.addr.port()),
            "{} does not listen on {}: {listening:?}",
            process.name,
            process.addr
        );
        assert!(
            listening.is_subset(&process.named_ports()),
            "{} listens on {listening:?}, its file names {:?}",
            process.name,
            process.named_ports()
        );
    }
    // The same after a restart from the same file.
    let broker = cluster.broker("broker-a-0");
    broker.kill();
    broker.start();
    // A master: its remoting port and its HA port (haListenPort).
    assert_eq!(
        broker.listening_ports(),
        [broker.addr.port(), broker.ha_addr().port()].into()
    );
}
