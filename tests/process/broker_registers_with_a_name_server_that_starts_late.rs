//! A name server that is down when a broker starts delays nothing: the broker serves,
//! registers with the name server that is up, and registers with the late one within its
//! `registerNameServerPeriod` of that one starting.

use std::time::Duration;

use ringmq::remoting::codes::response;

use crate::common::process_cluster::{
    create_topic, route, routed_to, send, BrokerSpec, ProcessCluster,
};

const PERIOD_MS: u64 = 1000;
/// A period and a registration round, with room for a loaded machine.
const WITHIN_PERIOD: Duration = Duration::from_secs(10);

#[test]
fn a_broker_registers_with_a_name_server_that_starts_after_it() {
    let mut cluster = ProcessCluster::new(2);
    cluster.name_servers[0].start();
    let spec = BrokerSpec::master("broker-a").set("registerNameServerPeriod", PERIOD_MS);
    cluster.add_broker(spec);
    let broker = cluster.broker("broker-a-0").addr;
    create_topic(broker, "EarlyTopic", 2, 2, 6);
    let answer = send(broker, "EarlyTopic", 0, b"while a name server is down");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    let (up, late) = (cluster.name_servers[0].addr, cluster.name_servers[1].addr);
    cluster.wait_until(
        WITHIN_PERIOD,
        "the route on the name server that is up",
        || routed_to(up, "EarlyTopic", &["broker-a"]),
    );
    cluster.name_servers[1].start();
    cluster.wait_until(WITHIN_PERIOD, "the route on the late name server", || {
        routed_to(late, "EarlyTopic", &["broker-a"])
    });
    assert_eq!(
        route(late, "EarlyTopic").unwrap()["brokerDatas"][0]["brokerAddrs"]["0"],
        broker.to_string()
    );
    let log = cluster.broker("broker-a-0").log_text();
    assert!(
        log.contains("cannot register with the name server"),
        "the broker did not say the late name server was down:\n{log}"
    );
}
