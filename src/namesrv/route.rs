//! The name server's JSON answers, built from plain values (no I/O, no state), always as
//! standard JSON: `brokerAddrs` keys are quoted broker ids, `"0"` = master (reference §9.14,
//! §14 item 8). Keys come out sorted, as fastjson writes them. The embedded name server
//! answers with one [`BrokerData`] (its node); the standalone one with every broker group
//! its registry holds.
//!
//! TopicRouteData (GET_ROUTEINFO_BY_TOPIC):
//!
//! ```json
//! {"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.2:10911"},
//!    "brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],
//!  "filterServerTable":{},
//!  "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":8,"topicSysFlag":0,
//!    "writeQueueNums":8}]}
//! ```
//!
//! ClusterInfo (GET_BROKER_CLUSTER_INFO):
//!
//! ```json
//! {"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"127.0.0.1:10911"},
//!    "brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},
//!  "clusterAddrTable":{"DefaultCluster":["broker-a"]}}
//! ```
//!
//! TopicList (GET_ALL_TOPIC_LIST_FROM_NAMESERVER and the other topic lists):
//! `{"topicList":["T",…]}`, plus `"brokerAddr"` in the system topic list.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

/// One broker group as routes show it (Java's `BrokerData`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerData {
    pub cluster: String,
    pub broker_name: String,
    /// By broker id; 0 = master.
    pub addrs: BTreeMap<i64, String>,
    pub enable_acting_master: bool,
}

/// One broker group's queues of a topic (Java's `QueueData`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueData {
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    pub topic_sys_flag: i32,
}

fn broker_data(broker: &BrokerData) -> Value {
    let addrs: serde_json::Map<String, Value> = broker
        .addrs
        .iter()
        .map(|(id, addr)| (id.to_string(), Value::from(addr.as_str())))
        .collect();
    json!({
        "brokerAddrs": addrs,
        "brokerName": broker.broker_name,
        "cluster": broker.cluster,
        "enableActingMaster": broker.enable_acting_master,
    })
}

/// TopicRouteData for a topic served by `brokers`, with `queues` as (broker name, queue
/// data) pairs.
pub fn topic_route_json(brokers: &[BrokerData], queues: &[(&str, QueueData)]) -> String {
    let queue_datas: Vec<Value> = queues
        .iter()
        .map(|(broker_name, queue)| {
            json!({
                "brokerName": broker_name,
                "perm": queue.perm,
                "readQueueNums": queue.read_queue_nums,
                "topicSysFlag": queue.topic_sys_flag,
                "writeQueueNums": queue.write_queue_nums,
            })
        })
        .collect();
    json!({
        "brokerDatas": brokers.iter().map(broker_data).collect::<Vec<_>>(),
        "filterServerTable": {},
        "queueDatas": queue_datas,
    })
    .to_string()
}

/// ClusterInfo of `brokers`; each cluster lists its broker names in name order.
pub fn cluster_info_json(brokers: &[BrokerData]) -> String {
    let mut addr_table = serde_json::Map::new();
    let mut clusters: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for broker in brokers {
        addr_table.insert(broker.broker_name.clone(), broker_data(broker));
        clusters
            .entry(&broker.cluster)
            .or_default()
            .insert(&broker.broker_name);
    }
    json!({
        "brokerAddrTable": addr_table,
        "clusterAddrTable": clusters,
    })
    .to_string()
}

/// TopicList: `names` in the order given, and `brokerAddr` when there is one.
pub fn topic_list_json<'a>(
    names: impl IntoIterator<Item = &'a str>,
    broker_addr: Option<&str>,
) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    match broker_addr {
        Some(addr) => json!({ "brokerAddr": addr, "topicList": names }),
        None => json!({ "topicList": names }),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> BrokerData {
        BrokerData {
            cluster: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            addrs: BTreeMap::from([(0, "10.0.0.1:10911".to_owned())]),
            enable_acting_master: false,
        }
    }

    #[test]
    fn topic_route_has_the_exact_standard_json_shape() {
        let queue = QueueData {
            read_queue_nums: 8,
            write_queue_nums: 4,
            perm: 6,
            topic_sys_flag: 0,
        };
        assert_eq!(
            topic_route_json(&[entry()], &[("broker-a", queue)]),
            concat!(
                r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","#,
                r#""cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"#,
                r#""queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":8,"#,
                r#""topicSysFlag":0,"writeQueueNums":4}]}"#
            )
        );
    }

    #[test]
    fn cluster_info_has_the_exact_standard_json_shape() {
        assert_eq!(
            cluster_info_json(&[entry()]),
            concat!(
                r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"10.0.0.1:10911"},"#,
                r#""brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},"#,
                r#""clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#
            )
        );
    }

    #[test]
    fn many_groups_and_slaves_keep_quoted_ids_and_group_by_cluster() {
        let mut b = entry();
        b.broker_name = "broker-b".into();
        b.addrs.insert(1, "10.0.0.3:10911".into());
        let mut c = entry();
        c.broker_name = "broker-c".into();
        c.cluster = "Other".into();
        let info: Value = serde_json::from_str(&cluster_info_json(&[b, entry(), c])).unwrap();
        assert_eq!(
            info["brokerAddrTable"]["broker-b"]["brokerAddrs"]["1"],
            "10.0.0.3:10911"
        );
        assert_eq!(
            info["clusterAddrTable"],
            json!({"DefaultCluster":["broker-a","broker-b"],"Other":["broker-c"]})
        );
        assert_eq!(
            topic_list_json(["A", "B"], Some("h:1")),
            r#"{"brokerAddr":"h:1","topicList":["A","B"]}"#
        );
        assert_eq!(topic_list_json([], None), r#"{"topicList":[]}"#);
    }
}
