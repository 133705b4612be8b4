//! Replication as an operator sees it, with real processes (a SYNC_MASTER and its slave, two
//! shards each): GET_BROKER_HA_STATUS (907) answers on both in `HARuntimeInfo`'s shape, the
//! master with one stream per shard of its slave; `ringmq admin cluster` lists both with
//! their roles and the slave's lag; `ringmq admin ha-status` on the master shows a slave
//! that stopped reading falling behind in bytes and in seconds, and catching up once it
//! runs again; both logs say when streams start, at the default level.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use crate::common::process_cluster::{admin, call, send, ProcessCluster};
use crate::common::process_replication::{StreamingPair, GROUP_SHARDS, PAIR_MASTER, PAIR_SLAVE};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::RemotingCommand;

const TOPIC: &str = "Watched";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
const LIMIT: Duration = Duration::from_secs(60);
/// The figures are sampled once a second; a few samples is plenty.
const SAMPLED: Duration = Duration::from_secs(10);

/// 907 on `broker`, its body as JSON.
fn ha_status(broker: std::net::SocketAddr) -> Value {
    let command = RemotingCommand::request(request::GET_BROKER_HA_STATUS, Default::default());
    let answer = call(broker, command).expect("907 answered");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    serde_json::from_slice(&answer.body).expect("907's body is JSON")
}

/// `ringmq admin ... --json`, parsed; panics with the output when it fails.
fn admin_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (ok, out, err) = admin(&all);
    assert!(ok, "{args:?}: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn admin_cluster_and_ha_status_show_roles_and_a_slaves_lag_in_bytes_and_seconds() {
    let pair = StreamingPair::start(TOPIC, &QUEUES, LIMIT);
    pair.wait_caught_up(LIMIT);
    let StreamingPair {
        mut cluster,
        master,
        slave,
        ha,
    } = pair;

    ha_status_answers_on_both(&cluster, master, slave, ha);
    cluster_lists_roles_and_the_slaves_lag(&cluster);
    a_paused_slave_falls_behind_then_catches_up(&mut cluster, master);

    // Streams starting are logged at the default level, with the shard and offsets.
    let master_log = cluster.broker(PAIR_MASTER).log_text();
    let slave_log = cluster.broker(PAIR_SLAVE).log_text();
    assert!(
        master_log.contains("slave streaming") && master_log.contains("from="),
        "{master_log}"
    );
    assert!(
        slave_log.contains("slave streaming from its master"),
        "{slave_log}"
    );
    assert!(slave_log.contains("shard is a slave"), "{slave_log}");
}

/// 907 on both, in HARuntimeInfo's shape: the master with one stream per shard.
fn ha_status_answers_on_both(
    cluster: &ProcessCluster,
    master: SocketAddr,
    slave: SocketAddr,
    ha: SocketAddr,
) {
    cluster.wait_until(SAMPLED, "907 lists one stream per shard", || {
        ha_status(master)["haConnectionInfo"]
            .as_array()
            .map(Vec::len)
            == Some(usize::from(GROUP_SHARDS))
    });
    let on_master = ha_status(master);
    assert_eq!(on_master["master"], true, "{on_master}");
    assert_eq!(on_master["brokerRole"], "SYNC_MASTER");
    let connections = on_master["haConnectionInfo"].as_array().unwrap();
    let shards: Vec<&Value> = connections.iter().map(|c| &c["shard"]).collect();
    assert_eq!(shards, [&Value::from(0), &Value::from(1)], "{on_master}");
    for connection in connections {
        assert_eq!(connection["slaveBrokerId"], 1, "{connection}");
        for key in [
            "addr",
            "slaveAckOffset",
            "diff",
            "inSync",
            "transferredByteInSecond",
        ] {
            assert!(connection.get(key).is_some(), "no {key} in {connection}");
        }
    }
    cluster.wait_until(SAMPLED, "the slave's 907 names its master", || {
        let on_slave = ha_status(slave);
        on_slave["master"] == false
            && on_slave["haClientRuntimeInfo"]["masterAddr"] == ha.to_string()
    });
}

/// `cluster`: both rows, their roles, the slave caught up.
fn cluster_lists_roles_and_the_slaves_lag(cluster: &ProcessCluster) {
    let namesrv = cluster.namesrv_addr();
    cluster.wait_until(SAMPLED, "cluster shows the slave caught up", || {
        let listed = admin_json(&["-n", &namesrv, "cluster"]);
        let rows = listed["brokers"].as_array().cloned().unwrap_or_default();
        rows.len() == 2
            && rows[0]["role"] == "SYNC_MASTER"
            && rows[1]["role"] == "SLAVE"
            && rows[1]["lag"]["bytes"] == 0
            && rows[1]["lag"]["millis"] == 0
    });
    let (ok, table, err) = admin(&["-n", &namesrv, "cluster"]);
    assert!(ok, "{table}{err}");
    for text in ["role", "lag bytes", "lag s", "SYNC_MASTER", "SLAVE"] {
        assert!(table.contains(text), "no {text:?} in:\n{table}");
    }
}

/// The master's streams to its slave, by `ha-status --json`.
fn streams(master: &str) -> Vec<Value> {
    let status = admin_json(&["-b", master, "ha-status"]);
    status["haStatus"]["haConnectionInfo"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The slave stops reading; a write it does not get makes it lag in bytes and seconds on
/// the master's `ha-status`, until it runs again.
fn a_paused_slave_falls_behind_then_catches_up(cluster: &mut ProcessCluster, master: SocketAddr) {
    let master_addr = master.to_string();
    cluster.broker(PAIR_SLAVE).pause();
    let answer = send(master, TOPIC, 0, b"unreplicated");
    assert_eq!(
        answer.code,
        response::FLUSH_SLAVE_TIMEOUT,
        "{:?}",
        answer.remark
    );
    cluster.wait_until(
        SAMPLED,
        "the master shows the slave a second behind",
        || {
            streams(&master_addr).iter().any(|c| {
                c["diff"].as_i64() > Some(0)
                    && c["lagMillis"].as_i64() >= Some(1_000)
                    && c["inSync"] == true
            })
        },
    );
    let (ok, text, err) = admin(&["-b", &master_addr, "ha-status"]);
    assert!(ok, "{text}{err}");
    assert!(
        text.contains("SYNC_MASTER") && text.contains("lag s"),
        "{text}"
    );
    cluster.broker(PAIR_SLAVE).resume();
    cluster.wait_until(LIMIT, "the slave catches up again", || {
        let all = streams(&master_addr);
        all.len() == usize::from(GROUP_SHARDS)
            && all.iter().all(|c| c["diff"] == 0 && c["lagMillis"] == 0)
    });
}
