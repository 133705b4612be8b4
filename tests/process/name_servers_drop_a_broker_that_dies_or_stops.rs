//! What the name servers do when a broker process goes, as real processes: a broker
//! killed with SIGKILL is dropped at once by every name server (its registration
//! connection closed), routes name only the other group and sends to it go on; restarted
//! from the same file it is routed again; a broker stopped with SIGTERM unregisters
//! (UNREGISTER_BROKER) before it exits, so the routes have dropped it when it is gone; a
//! broker gone silent with its connection open expires after its heartbeat timeout.

use std::time::Duration;

use ringmq::remoting::codes::response;

use crate::common::process_cluster::{
    cluster_info, create_topic, master_addr, route, routed_to, send, BrokerSpec, ProcessCluster,
};

/// The period the brokers register at: far past every bound below, so neither a
/// re-registration nor the name server's 120 s expiry explains what the tests see.
const LONG_PERIOD_MS: u64 = 60_000;
/// How soon a name server acts on a closed connection, and a restarted broker registers
/// (at once when it serves): room for a loaded machine, far under the expiry and period.
const AT_ONCE: Duration = Duration::from_secs(10);
const TOPIC: &str = "SpreadTopic";

fn two_groups() -> ProcessCluster {
    let master = |name| BrokerSpec::master(name).set("registerNameServerPeriod", LONG_PERIOD_MS);
    let mut cluster = ProcessCluster::start(2, vec![master("broker-a"), master("broker-b")]);
    for broker in ["broker-a-0", "broker-b-0"] {
        create_topic(cluster.broker(broker).addr, TOPIC, 4, 4, 6);
    }
    for namesrv in cluster.name_servers.iter().map(|n| n.addr) {
        cluster.wait_until(AT_ONCE, "both groups routed", || {
            routed_to(namesrv, TOPIC, &["broker-a", "broker-b"])
        });
    }
    cluster
}

#[test]
fn a_killed_broker_is_dropped_at_once_and_is_routed_again_after_a_restart() {
    let mut cluster = two_groups();
    cluster.broker("broker-a-0").kill();
    for namesrv in cluster.name_servers.iter().map(|n| n.addr) {
        cluster.wait_until(AT_ONCE, "broker-a dropped from the route", || {
            routed_to(namesrv, TOPIC, &["broker-b"])
        });
        let info = cluster_info(namesrv);
        assert_eq!(
            info["clusterAddrTable"]["DefaultCluster"],
            serde_json::json!(["broker-b"]),
            "{info}"
        );
    }
    for namesrv in &cluster.name_servers {
        let log = namesrv.log_text();
        assert!(
            log.contains("broker unregistered: its connection closed"),
            "{} dropped broker-a another way:\n{log}",
            namesrv.name
        );
    }
    // Producers follow the route to the group that is left; its sends go on.
    let found = route(cluster.name_servers[1].addr, TOPIC).expect("a route");
    let b = master_addr(&found, "broker-b").expect("broker-b's master");
    for queue in 0..4 {
        let answer = send(b.parse().unwrap(), TOPIC, queue, b"after broker-a died");
        assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    }
    let broker = cluster.broker("broker-a-0");
    broker.start();
    let a = broker.addr;
    for namesrv in cluster.name_servers.iter().map(|n| n.addr) {
        cluster.wait_until(AT_ONCE, "the restarted broker-a routed again", || {
            routed_to(namesrv, TOPIC, &["broker-a", "broker-b"])
        });
        let found = route(namesrv, TOPIC).unwrap();
        assert_eq!(
            master_addr(&found, "broker-a"),
            Some(a.to_string()),
            "{found}"
        );
    }
    let answer = send(a, TOPIC, 0, b"after the restart");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
}

#[test]
fn a_broker_stopped_with_sigterm_has_unregistered_when_it_exits() {
    let mut cluster = two_groups();
    let status = cluster.broker("broker-b-0").stop();
    assert!(status.success(), "{status}\n{}", cluster.logs());
    // No wait: the broker unregistered before it exited.
    for namesrv in cluster.name_servers.iter().map(|n| n.addr) {
        assert!(
            routed_to(namesrv, TOPIC, &["broker-a"]),
            "{:?}\n{}",
            route(namesrv, TOPIC),
            cluster.logs()
        );
    }
    for namesrv in &cluster.name_servers {
        let log = namesrv.log_text();
        assert!(
            log.lines()
                .any(|line| line.contains("broker unregistered") && !line.contains("closed")),
            "{} saw no UNREGISTER_BROKER:\n{log}",
            namesrv.name
        );
    }
}

/// The name servers' heartbeat timeout in the silent-broker test, ms: short, and three
/// registration periods, so a broker that registers is never expired by a late round.
const HEARTBEAT_MS: u64 = 3000;
const SHORT_PERIOD_MS: u64 = 1000;

/// A broker that goes silent with its connection open (a paused process: a host whose
/// network vanished, as the name servers see it) stays routed until its heartbeat timeout
/// passes, is then dropped by the expiry scan, and is routed again once it registers after
/// resuming.
#[test]
fn a_silent_broker_expires_after_its_heartbeat_timeout_and_returns_when_it_registers() {
    let mut cluster = ProcessCluster::new(1);
    cluster.name_servers[0].set("brokerHeartbeatTimeoutMillis", HEARTBEAT_MS);
    cluster.name_servers[0].set("scanNotActiveBrokerInterval", 200);
    cluster.start_name_servers();
    for name in ["broker-a", "broker-b"] {
        let spec = BrokerSpec::master(name).set("registerNameServerPeriod", SHORT_PERIOD_MS);
        let i = cluster.add_broker(spec);
        create_topic(cluster.brokers[i].addr, TOPIC, 4, 4, 6);
    }
    let namesrv = cluster.name_servers[0].addr;
    cluster.wait_until(AT_ONCE, "both groups routed", || {
        routed_to(namesrv, TOPIC, &["broker-a", "broker-b"])
    });
    let paused = std::time::Instant::now();
    cluster.broker("broker-a-0").pause();
    cluster.wait_until(AT_ONCE, "the silent broker-a expired", || {
        routed_to(namesrv, TOPIC, &["broker-b"])
    });
    // It was registered at most a period before the pause: not dropped before its timeout.
    let silent = paused.elapsed();
    assert!(
        silent >= Duration::from_millis(HEARTBEAT_MS - SHORT_PERIOD_MS),
        "dropped {silent:?} after going silent\n{}",
        cluster.logs()
    );
    let log = cluster.name_servers[0].log_text();
    assert!(log.contains("broker expired"), "{log}");
    cluster.broker("broker-a-0").resume();
    cluster.wait_until(AT_ONCE, "broker-a routed again after resuming", || {
        routed_to(namesrv, TOPIC, &["broker-a", "broker-b"])
    });
}
