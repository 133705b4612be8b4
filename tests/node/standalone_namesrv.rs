//! The standalone name server (`ringmq::namesrv::standalone::serve`) in-process over TCP,
//! driven with the in-project client: brokers register with REGISTER_BROKER frames built by
//! the codec the broker uses, and the answers are read as a client reads them.

use crate::common::run_local;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::clock::Clock;
use ringmq::namesrv::config::NamesrvConfig;
use ringmq::namesrv::standalone;
use ringmq::net::tcp::Tcp;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::register_broker::{
    decode_register_response, encode_register_broker, encode_unregister_broker, RegisterBrokerBody,
    RegisterBrokerHeader, RegisteredTopic, UnregisterBrokerHeader,
};
use ringmq::remoting::{ExtFields, RemotingCommand};
use serde_json::Value;
use tokio::sync::watch;

/// A name server on a free loopback port, serving until `stop` is dropped.
struct Namesrv {
    addr: SocketAddr,
    _stop: watch::Sender<bool>,
}

async fn start(config: NamesrvConfig) -> Namesrv {
    let config = NamesrvConfig {
        listen_port: 0,
        bind_address: [127, 0, 0, 1].into(),
        ..config
    };
    let (stop_tx, stop) = watch::channel(false);
    let (ready_tx, ready) = tokio::sync::oneshot::channel();
    tokio::task::spawn_local(async move {
        standalone::serve(&Tcp, &config, Clock::system(), stop, |addr| {
            let _ = ready_tx.send(addr);
        })
        .await
        .expect("name server serves");
    });
    let addr = ready.await.expect("name server listening");
    Namesrv {
        addr,
        _stop: stop_tx,
    }
}

fn header(name: &str, id: i64, host: &str) -> RegisterBrokerHeader {
    RegisterBrokerHeader {
        broker_name: name.into(),
        broker_addr: format!("{host}:10911"),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: format!("{host}:10912"),
        broker_id: id,
        heartbeat_timeout_millis: None,
        enable_acting_master: false,
    }
}

fn body(topics: &[(&str, i32)]) -> RegisterBrokerBody {
    let mut body = RegisterBrokerBody::default();
    for (topic, queues) in topics {
        body.topics
            .insert((*topic).into(), RegisteredTopic::new(topic, *queues));
    }
    body.data_version.counter = 1;
    body
}

async fn call(client: &Client, code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
    let fields: ExtFields = fields.iter().copied().collect();
    client
        .request(RemotingCommand::request(code, fields))
        .await
        .expect("answered")
}

async fn route(client: &Client, topic: &str) -> (i32, Value) {
    let answer = call(client, request::GET_ROUTEINFO_BY_TOPIC, &[("topic", topic)]).await;
    let body = if answer.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&answer.body).expect("standard JSON")
    };
    (answer.code, body)
}

/// Waits until `condition` holds, polling every few milliseconds, for at most 5 s.
async fn eventually(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !condition().await {
        assert!(Instant::now() < deadline, "not within 5 s: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn routes_merge_two_groups_and_a_slave_learns_its_master() {
    run_local(false, async {
        let namesrv = start(NamesrvConfig::default()).await;
        let a0 = Client::connect(namesrv.addr).await.unwrap();
        let a1 = Client::connect(namesrv.addr).await.unwrap();
        let b0 = Client::connect(namesrv.addr).await.unwrap();
        let answer = a0
            .request(encode_register_broker(
                &header("a", 0, "10.0.0.1"),
                &body(&[("T", 4)]),
            ))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
        let answer = a1
            .request(encode_register_broker(
                &header("a", 1, "10.0.0.2"),
                &body(&[("T", 4)]),
            ))
            .await
            .unwrap();
        let master = decode_register_response(&answer);
        assert_eq!(master.master_addr.as_deref(), Some("10.0.0.1:10911"));
        assert_eq!(master.ha_server_addr.as_deref(), Some("10.0.0.1:10912"));
        b0.request(encode_register_broker(
            &header("b", 0, "10.0.1.1"),
            &body(&[("T", 8), ("OnlyB", 1)]),
        ))
        .await
        .unwrap();

        let (code, data) = route(&a0, "T").await;
        assert_eq!(code, response::SUCCESS);
        assert_eq!(data["brokerDatas"].as_array().unwrap().len(), 2);
        assert_eq!(
            data["brokerDatas"][0]["brokerAddrs"],
            serde_json::json!({"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"})
        );
        assert_eq!(data["queueDatas"][1]["brokerName"], "b");
        assert_eq!(data["queueDatas"][1]["writeQueueNums"], 8);
        let (code, _) = route(&a0, "Nope").await;
        assert_eq!(code, response::TOPIC_NOT_EXIST);

        let info = call(&a0, request::GET_BROKER_CLUSTER_INFO, &[]).await;
        let info: Value = serde_json::from_slice(&info.body).unwrap();
        assert_eq!(
            info["clusterAddrTable"]["DefaultCluster"],
            serde_json::json!(["a", "b"])
        );
        let all = call(&a0, request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[]).await;
        assert_eq!(&all.body[..], br#"{"topicList":["OnlyB","T"]}"#);
        let by_cluster = call(
            &a0,
            request::GET_TOPICS_BY_CLUSTER,
            &[("cluster", "DefaultCluster")],
        )
        .await;
        assert_eq!(&by_cluster.body[..], br#"{"topicList":["OnlyB","T"]}"#);
    });
}

#[test]
fn a_closed_connection_or_an_unregister_removes_the_broker_at_once() {
    run_local(false, async {
        let namesrv = start(NamesrvConfig::default()).await;
        let reader = Client::connect(namesrv.addr).await.unwrap();
        let a = Client::connect(namesrv.addr).await.unwrap();
        let b = Client::connect(namesrv.addr).await.unwrap();
        a.request(encode_register_broker(
            &header("a", 0, "10.0.0.1"),
            &body(&[("T", 4)]),
        ))
        .await
        .unwrap();
        b.request(encode_register_broker(
            &header("b", 0, "10.0.1.1"),
            &body(&[("T", 4)]),
        ))
        .await
        .unwrap();
        assert_eq!(
            route(&reader, "T").await.1["queueDatas"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        drop(b);
        eventually("b's route gone after its connection closed", async || {
            route(&reader, "T").await.1["queueDatas"]
                .as_array()
                .map(Vec::len)
                == Some(1)
        })
        .await;
        let answer = a
            .request(encode_unregister_broker(&UnregisterBrokerHeader {
                broker_name: "a".into(),
                broker_addr: "10.0.0.1:10911".into(),
                cluster_name: "DefaultCluster".into(),
                broker_id: 0,
            }))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS);
        assert_eq!(route(&reader, "T").await.0, response::TOPIC_NOT_EXIST);
    });
}

#[test]
fn a_silent_broker_expires_past_its_heartbeat_timeout() {
    run_local(false, async {
        let namesrv = start(NamesrvConfig {
            scan_not_active_broker_interval: Duration::from_millis(20),
            ..NamesrvConfig::default()
        })
        .await;
        let broker = Client::connect(namesrv.addr).await.unwrap();
        let mut quick = header("a", 0, "10.0.0.1");
        quick.heartbeat_timeout_millis = Some(100);
        let registered = Instant::now();
        broker
            .request(encode_register_broker(&quick, &body(&[("T", 4)])))
            .await
            .unwrap();
        eventually("the silent broker expired", async || {
            route(&broker, "T").await.0 == response::TOPIC_NOT_EXIST
        })
        .await;
        assert!(
            registered.elapsed() >= Duration::from_millis(100),
            "expired early"
        );
    });
}

#[test]
fn bad_registrations_are_refused_with_the_reason() {
    run_local(false, async {
        let namesrv = start(NamesrvConfig {
            max_brokers: 2,
            ..NamesrvConfig::default()
        })
        .await;
        let client = Client::connect(namesrv.addr).await.unwrap();
        let mut bad_crc = encode_register_broker(&header("a", 0, "10.0.0.1"), &body(&[("T", 4)]));
        bad_crc.put_ext("bodyCrc32", 12345);
        let answer = client.request(bad_crc).await.unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR);
        assert!(answer.remark.unwrap().contains("CRC32 mismatch"));
        let mut bad_json = encode_register_broker(&header("a", 0, "10.0.0.1"), &body(&[]));
        bad_json.body = bytes::Bytes::from_static(b"{\"topicConfigSerializeWrapper\":");
        bad_json.put_ext("bodyCrc32", 0);
        let answer = client.request(bad_json).await.unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR);
        assert!(answer.remark.unwrap().contains("not JSON"));
        // A flood of brokers stops at maxBrokers, and the connection stays usable.
        for i in 0..20 {
            let host = format!("10.0.2.{i}");
            let _ = client
                .request(encode_register_broker(
                    &header(&format!("g{i}"), 0, &host),
                    &body(&[("T", 1)]),
                ))
                .await
                .unwrap();
        }
        let (_, data) = route(&client, "T").await;
        assert_eq!(data["queueDatas"].as_array().unwrap().len(), 2);
        let refused = client
            .request(encode_register_broker(
                &header("late", 0, "10.0.3.1"),
                &body(&[]),
            ))
            .await
            .unwrap();
        assert!(refused.remark.unwrap().contains("maxBrokers"));
        let answer = call(&client, 9999, &[]).await;
        assert_eq!(answer.code, response::REQUEST_CODE_NOT_SUPPORTED);
    });
}

#[test]
fn admin_requests_wipe_and_add_write_perm_delete_topics_and_show_the_config() {
    run_local(false, async {
        let namesrv = start(NamesrvConfig::default()).await;
        let client = Client::connect(namesrv.addr).await.unwrap();
        client
            .request(encode_register_broker(
                &header("a", 0, "10.0.0.1"),
                &body(&[("T", 4), ("U", 4)]),
            ))
            .await
            .unwrap();
        let wiped = call(
            &client,
            request::WIPE_WRITE_PERM_OF_BROKER,
            &[("brokerName", "a")],
        )
        .await;
        assert_eq!(wiped.ext_fields.get("wipeTopicCount"), Some("2"));
        assert_eq!(route(&client, "T").await.1["queueDatas"][0]["perm"], 4);
        let added = call(
            &client,
            request::ADD_WRITE_PERM_OF_BROKER,
            &[("brokerName", "a")],
        )
        .await;
        assert_eq!(added.ext_fields.get("addTopicCount"), Some("2"));
        assert_eq!(route(&client, "T").await.1["queueDatas"][0]["perm"], 6);
        let deleted = call(&client, request::DELETE_TOPIC_IN_NAMESRV, &[("topic", "T")]).await;
        assert_eq!(deleted.code, response::SUCCESS);
        assert_eq!(route(&client, "T").await.0, response::TOPIC_NOT_EXIST);
        let config = call(&client, request::GET_NAMESRV_CONFIG, &[]).await;
        let text = String::from_utf8(config.body.to_vec()).unwrap();
        assert!(text.contains("listenPort=0\n"), "{text}");
        let kv = call(
            &client,
            request::GET_KV_CONFIG,
            &[("namespace", "ORDER_TOPIC_CONFIG"), ("key", "U")],
        )
        .await;
        assert_eq!(kv.code, response::QUERY_NOT_FOUND);
    });
}
