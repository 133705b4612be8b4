//! What an operator reads of a broker group on the simulated network (D14, issue 25 item
//! 8): a SYNC_MASTER's confirm latency histogram counts every batch its slave confirmed
//! (and an ASYNC_MASTER's counts none: nothing waits there), the lag families are on the
//! master's page, and GET_BROKER_HA_STATUS (907) answers on master and slave.

use crate::common;

use std::time::Duration;

use common::cluster::SimCluster;
use common::run_local;
use ringmq::config::BrokerRole;
use ringmq::net::sim::NetConfig;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::RemotingCommand;

const TOPIC: &str = "Observed";
const MASTER: usize = 0;
const SLAVE: usize = 1;
const BOUND: Duration = Duration::from_secs(10);
const CONFIRM_COUNT: &str = "ringmq_replication_confirm_latency_seconds_count{shard=\"0\"}";

async fn group(role: BrokerRole) -> SimCluster {
    let mut cluster = SimCluster::start(1, NetConfig::default(), move |_, config| {
        config.broker_role = role;
        config.broker_id = 0;
    })
    .await;
    let ha = cluster.ha_addr(MASTER);
    cluster
        .add_node(move |config: &mut NodeConfig| {
            config.broker_role = BrokerRole::Slave;
            config.broker_id = 1;
            config.ha_master_address = Some(ha.to_string());
        })
        .await;
    cluster
}

/// Sends one message and returns its answer code.
async fn send_one(cluster: &SimCluster, body: &str) -> i32 {
    let client = cluster
        .client(0, MASTER)
        .await
        .expect("the client connects");
    client.set_timeout(BOUND);
    client
        .send_message(TOPIC, 0, body.as_bytes(), None, None)
        .await
        .expect("the send is answered")
        .code
}

/// Sends until one is SEND_OK (the slave attaches after it connects).
async fn wait_send_ok(cluster: &SimCluster) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while send_one(cluster, "probe").await != response::SUCCESS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no SEND_OK in {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of the sample `name` on node `node`'s page, if it has one.
fn sample(cluster: &SimCluster, node: usize, name: &str) -> Option<f64> {
    cluster.metrics_page(node).lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// Waits until node `node`'s page has a line starting with `prefix`.
async fn wait_for_line(cluster: &SimCluster, node: usize, prefix: &str) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while !cluster
        .metrics_page(node)
        .lines()
        .any(|line| line.starts_with(prefix))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no `{prefix}` on node {node}'s page:\n{}",
            cluster.metrics_page(node)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn ha_status(cluster: &SimCluster, node: usize) -> serde_json::Value {
    let client = cluster.client(0, node).await.expect("the client connects");
    client.set_timeout(BOUND);
    let answer = client
        .request(RemotingCommand::request(
            request::GET_BROKER_HA_STATUS,
            Default::default(),
        ))
        .await
        .expect("907 answered");
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    serde_json::from_slice(&answer.body).expect("907's body is JSON")
}

#[test]
fn a_sync_master_times_every_batch_its_slave_confirms() {
    run_local(false, async {
        let cluster = group(BrokerRole::SyncMaster).await;
        wait_send_ok(&cluster).await;
        let before = sample(&cluster, MASTER, CONFIRM_COUNT).expect("the family is on the page");
        for n in 0..20 {
            let code = send_one(&cluster, &format!("m-{n}")).await;
            assert_eq!(code, response::SUCCESS);
        }
        let after = sample(&cluster, MASTER, CONFIRM_COUNT).unwrap();
        // One batch per send here: each waits for its answer before the next.
        assert!(after >= before + 20.0, "{before} -> {after}");
        let page = cluster.metrics_page(MASTER);
        assert!(
            page.contains(
                "ringmq_replication_confirm_latency_seconds_bucket{shard=\"0\",le=\"+Inf\"}"
            ),
            "{page}"
        );
        wait_for_line(
            &cluster,
            MASTER,
            "ringmq_replication_lag_seconds{shard=\"0\",slave=",
        )
        .await;
        wait_for_line(
            &cluster,
            MASTER,
            "ringmq_replication_lag_bytes{shard=\"0\",slave=",
        )
        .await;
        assert_eq!(
            sample(&cluster, SLAVE, CONFIRM_COUNT),
            Some(0.0),
            "a slave waits on nobody"
        );

        let on_master = ha_status(&cluster, MASTER).await;
        assert_eq!(on_master["master"], true);
        assert_eq!(on_master["brokerRole"], "SYNC_MASTER");
        let on_slave = ha_status(&cluster, SLAVE).await;
        assert_eq!(on_slave["master"], false);
        assert_eq!(on_slave["brokerRole"], "SLAVE");
        assert_eq!(
            on_slave["haClientRuntimeInfo"]["masterAddr"],
            cluster.ha_addr(MASTER).to_string()
        );
        cluster.shutdown().await;
    });
}

#[test]
fn an_async_master_times_nothing_it_does_not_wait_for() {
    run_local(false, async {
        let cluster = group(BrokerRole::AsyncMaster).await;
        for n in 0..10 {
            assert_eq!(
                send_one(&cluster, &format!("a-{n}")).await,
                response::SUCCESS
            );
        }
        wait_for_line(
            &cluster,
            MASTER,
            "ringmq_replication_streams{shard=\"0\"} 1",
        )
        .await;
        assert_eq!(sample(&cluster, MASTER, CONFIRM_COUNT), Some(0.0));
        cluster.shutdown().await;
    });
}
