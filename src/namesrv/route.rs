//! The name server's JSON answers, built from plain values (no I/O, no state), always as
//! standard JSON: `brokerAddrs` keys are quoted broker ids, `"0"` = master (reference §9.14,
//! §14 item 8). Keys come out sorted, as fastjson writes them.
//!
//! TopicRouteData (GET_ROUTEINFO_BY_TOPIC):
//!
//! ```json
//! {"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",
//!    "cluster":"DefaultCluster","enableActingMaster":false}],
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

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::broker::tables::topics::TopicConfig;

/// The one broker a name server knows: this node, as master (broker id 0).
#[derive(Clone, Debug)]
pub struct BrokerEntry<'a> {
    pub cluster: &'a str,
    pub broker_name: &'a str,
    pub addr: SocketAddr,
}

fn broker_data(broker: &BrokerEntry<'_>) -> Value {
    json!({
        "brokerAddrs": { "0": broker.addr.to_string() },
        "brokerName": broker.broker_name,
        "cluster": broker.cluster,
        "enableActingMaster": false,
    })
}

/// TopicRouteData for `topic`, served by `broker` alone.
pub fn topic_route_json(broker: &BrokerEntry<'_>, topic: &TopicConfig) -> String {
    json!({
        "brokerDatas": [broker_data(broker)],
        "filterServerTable": {},
        "queueDatas": [{
            "brokerName": broker.broker_name,
            "perm": topic.perm,
            "readQueueNums": topic.read_queue_nums,
            "topicSysFlag": topic.topic_sys_flag,
            "writeQueueNums": topic.write_queue_nums,
        }],
    })
    .to_string()
}

/// ClusterInfo with `broker` as the cluster's one broker.
pub fn cluster_info_json(broker: &BrokerEntry<'_>) -> String {
    let mut addr_table = serde_json::Map::new();
    addr_table.insert(broker.broker_name.to_owned(), broker_data(broker));
    let mut cluster_table = serde_json::Map::new();
    cluster_table.insert(broker.cluster.to_owned(), json!([broker.broker_name]));
    json!({
        "brokerAddrTable": addr_table,
        "clusterAddrTable": cluster_table,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> BrokerEntry<'static> {
        BrokerEntry {
            cluster: "DefaultCluster",
            broker_name: "broker-a",
            addr: "10.0.0.1:10911".parse().unwrap(),
        }
    }

    #[test]
    fn topic_route_has_the_exact_standard_json_shape() {
        let mut topic = TopicConfig::new("TopicTest", 8);
        topic.write_queue_nums = 4;
        assert_eq!(
            topic_route_json(&entry(), &topic),
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
            cluster_info_json(&entry()),
            concat!(
                r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"10.0.0.1:10911"},"#,
                r#""brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},"#,
                r#""clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#
            )
        );
    }
}
