//! The stock Rust client against clusters of broker groups behind a standalone name server
//! (`ringmq_compat::cluster`): sends go on to the other group when a master is killed,
//! a consumer reads an acknowledged backlog from the slave of a killed SYNC_MASTER, and a
//! controller-mode group promotes its slave for a producer that keeps sending.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringmq_compat::cluster::{Cluster, Shape};
use ringmq_compat::{run_clients, seed, start_member, start_producer, wait_until, ConsumerSpec};
use rocketmq_client_rust::{
    BrokerAdmin, ClientRuntime, DefaultMQAdminExt, DefaultMQProducer, TopicAdmin,
};
use rocketmq_model::common::config::TopicConfig;
use rocketmq_model::result::SendStatus;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;

use super::{message, rocketmq_defect};

const QUEUES: u32 = 4;
/// Sends before and after the kill in the failover scenario.
const SENDS: usize = 40;
/// The acknowledged backlog read from the slave.
const BACKLOG: usize = 1000;
/// How long one message may be retried until it is answered SEND_OK, and how long the name
/// server may take to route a topic to (or away from) a group.
const SEND_DEADLINE: Duration = Duration::from_secs(60);
const ROUTE_DEADLINE: Duration = Duration::from_secs(60);
/// How long the consumer may take to read the backlog from the slave.
const READ_DEADLINE: Duration = Duration::from_secs(60);
/// One send's timeout: a send to a dead master fails within it and is retried elsewhere.
const SEND_TIMEOUT_MS: u64 = 3_000;

/// A started admin client of the cluster's name server.
async fn admin(runtime: &Arc<ClientRuntime>, namesrv: &str) -> DefaultMQAdminExt {
    let mut admin = DefaultMQAdminExt::new(Arc::clone(runtime));
    admin.set_namesrv_addr(namesrv);
    admin.start().await.expect("start the admin client");
    admin
}

/// Creates `topic` ([`QUEUES`] read and write queues) on each broker of `brokers`.
async fn create_topic(admin: &DefaultMQAdminExt, brokers: &[String], topic: &str) {
    for broker in brokers {
        let config = TopicConfig::with_perm(topic, QUEUES, QUEUES, 6);
        admin
            .create_and_update_topic_config(broker.clone().into(), config)
            .await
            .unwrap_or_else(|e| panic!("create topic {topic} on {broker}: {e}"));
    }
}

/// Waits (bounded) until `topic`'s route names exactly `groups`, with queues for each.
async fn await_groups(admin: &DefaultMQAdminExt, topic: &str, groups: &[&str]) {
    let want: BTreeSet<String> = groups.iter().map(|g| g.to_string()).collect();
    let until = Instant::now() + ROUTE_DEADLINE;
    loop {
        let seen = match admin
            .examine_topic_route_info(topic.to_string().into())
            .await
        {
            Ok(Some(route)) => format!(
                "{:?}",
                route
                    .queue_datas
                    .iter()
                    .map(|queues| queues.broker_name.to_string())
                    .collect::<BTreeSet<_>>()
            ),
            Ok(None) => "no route".to_string(),
            Err(e) => e.to_string(),
        };
        if seen == format!("{want:?}") {
            return;
        }
        assert!(
            Instant::now() < until,
            "the route of {topic} did not name {want:?} within {ROUTE_DEADLINE:?}: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `body`, retried (bounded by [`SEND_DEADLINE`]) until it is answered SEND_OK; the
/// group that stored it. A retried message may be stored twice, which consumers tolerate.
async fn send_until_ok(producer: &DefaultMQProducer, topic: &str, body: &str) -> String {
    let until = Instant::now() + SEND_DEADLINE;
    loop {
        let last = match producer
            .send_with_timeout(message(topic, body, "TagA", body), SEND_TIMEOUT_MS)
            .await
        {
            Ok(Some(result)) if result.send_status == SendStatus::SendOk => {
                let queue = result.message_queue.expect("a SEND_OK names its queue");
                return queue.broker_name().to_string();
            }
            Ok(other) => format!("{other:?}"),
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < until,
            "send {body} not answered SEND_OK within {SEND_DEADLINE:?}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends `count` messages `{prefix}-{i}`, each until SEND_OK; how many each group stored.
async fn send_all(
    producer: &DefaultMQProducer,
    topic: &str,
    prefix: &str,
    count: usize,
) -> BTreeMap<String, usize> {
    let mut by_group = BTreeMap::new();
    for i in 0..count {
        let group = send_until_ok(producer, topic, &format!("{prefix}-{i}")).await;
        *by_group.entry(group).or_default() += 1;
    }
    by_group
}

/// Starts a push consumer of the new group `group` on `topic` and waits (bounded by
/// [`READ_DEADLINE`]) until it read every one of `acked`, from `source`; `note` ends the
/// failure message.
async fn read_every(
    runtime: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
    topic: &str,
    acked: &BTreeSet<String>,
    source: &str,
    note: &str,
) {
    let member = start_member(
        runtime,
        ConsumerSpec {
            namesrv,
            group,
            instance: &format!("{group}-reader"),
            topic,
            expression: "*",
            model: MessageModel::Clustering,
        },
    )
    .await;
    let collector = member.collector.clone();
    wait_until(
        &format!("every acknowledged message read from {source}"),
        READ_DEADLINE,
        || acked.is_subset(&collector.body_counts().keys().cloned().collect()),
        || {
            let read = collector.body_counts();
            let missing: Vec<&String> = acked
                .iter()
                .filter(|body| !read.contains_key(*body))
                .collect();
            format!(
                "read {} of {}; missing (first 10): {:?}{note}",
                acked.len() - missing.len(),
                acked.len(),
                &missing[..missing.len().min(10)]
            )
        },
    )
    .await;
    member.shutdown().await;
}

/// Two groups behind one standalone name server: sends spread over both; once broker-a's
/// master is SIGKILLed and the name server dropped it, every send goes to broker-b.
#[test]
fn sends_go_on_to_the_other_group_when_a_master_is_killed() {
    let seed = seed();
    println!("seed {seed}");
    let cluster = Cluster::start(Shape::TwoGroups);
    let namesrv = cluster.namesrv_addr();
    let brokers = [
        cluster.broker_addr("broker-a"),
        cluster.broker_addr("broker-b"),
    ];
    let topic = format!("CompatSpread{seed}");
    run_clients("cluster-failover", |runtime| {
        let (namesrv, brokers, topic, cluster) = (&namesrv, &brokers, &topic, &cluster);
        async move {
            let admin = admin(&runtime, namesrv).await;
            create_topic(&admin, brokers, topic).await;
            await_groups(&admin, topic, &["broker-a", "broker-b"]).await;
            let mut producer =
                start_producer(&runtime, namesrv, &format!("PG_spread_{seed}")).await;

            let before = send_all(&producer, topic, "before", SENDS).await;
            let groups: Vec<&String> = before.keys().collect();
            assert_eq!(
                groups,
                ["broker-a", "broker-b"],
                "sends spread over both groups: {before:?}"
            );

            cluster.kill("broker-a");
            await_groups(&admin, topic, &["broker-b"]).await;
            let started = Instant::now();
            let after = send_all(&producer, topic, "after", SENDS).await;
            assert_eq!(
                after,
                BTreeMap::from([("broker-b".to_string(), SENDS)]),
                "every send after the kill went to broker-b"
            );
            println!(
                "cluster: {SENDS} sends after the kill took {:?}",
                started.elapsed()
            );
            producer.shutdown().await;
            let mut admin = admin;
            admin.shutdown().await;
        }
    });
}

/// A SYNC_MASTER and its slave: [`BACKLOG`] messages answered SEND_OK (so the slave
/// confirmed each), the master SIGKILLed, then a push consumer of a new group reads every
/// one of them from the slave. The topic is created on the master only: the slave learns it
/// from its master (RocketMQ 5.5's slave never does, so there this fails: a known defect).
#[test]
fn a_consumer_reads_every_acknowledged_message_from_the_slave_after_the_master_is_killed() {
    let seed = seed();
    println!("seed {seed}");
    let cluster = Cluster::start(Shape::MasterAndSlave);
    let namesrv = cluster.namesrv_addr();
    let master = cluster.broker_addr("broker-a");
    println!("cluster: slave {}", cluster.slave_addr("broker-a"));
    let topic = format!("CompatBacklog{seed}");
    run_clients("slave-read", |runtime| {
        let (namesrv, master, topic, cluster) = (&namesrv, &master, &topic, &cluster);
        async move {
            let mut admin = admin(&runtime, namesrv).await;
            create_topic(&admin, std::slice::from_ref(master), topic).await;
            await_groups(&admin, topic, &["broker-a"]).await;
            admin.shutdown().await;
            let mut producer =
                start_producer(&runtime, namesrv, &format!("PG_backlog_{seed}")).await;
            let acked: BTreeSet<String> = (0..BACKLOG).map(|i| format!("backlog-{i}")).collect();
            let stored = send_all(&producer, topic, "backlog", BACKLOG).await;
            producer.shutdown().await;
            println!("cluster: {BACKLOG} SEND_OK ({stored:?}); killing the master");

            cluster.kill("broker-a");
            let note = rocketmq_defect(
                "its slave never learns a topic from its master, so every pull from it \
                 answers topic not exist; rocketmq-5.5-measured.md",
            );
            let group = format!("CG_slave_read_{seed}");
            read_every(&runtime, namesrv, &group, topic, &acked, "the slave", &note).await;
        }
    });
}

/// How often the controller-mode scenario's producer asks the name server for routes: the
/// least the stock Rust client 1.0 accepts (it refuses less than 10 s; the default is 30 s).
/// The scenario with a 1 s poll is the Java client's (`ControllerFailoverTest`).
const POLL_NAME_SERVER_MS: u32 = 10_000;
/// Sends acknowledged before the master's kill, and again after it.
const CONTROLLER_SENDS: usize = 200;
/// How long the controllers may take to elect a master with both brokers in its set.
const FORM_DEADLINE: Duration = Duration::from_secs(90);

/// The controllers' view of `group`: its master's address and the addresses of its
/// SyncStateSet (asked of the controllers' leader, as mqadmin getSyncStateSet does).
async fn sync_state(
    admin: &DefaultMQAdminExt,
    controllers: &[String],
    group: &str,
) -> Result<(String, BTreeSet<String>), String> {
    let mut last = String::from("no controller");
    for controller in controllers {
        match admin
            .get_in_sync_state_data(controller.clone().into(), vec![group.to_string().into()])
            .await
        {
            Ok(info) => match info.get_replicas_info_table().get(group) {
                Some(replicas) if !replicas.get_master_address().is_empty() => {
                    let set = replicas
                        .get_in_sync_replicas()
                        .iter()
                        .map(|replica| replica.get_broker_address().to_string())
                        .collect();
                    return Ok((replicas.get_master_address().to_string(), set));
                }
                Some(_) => last = format!("{controller}: {group} has no master yet"),
                None => last = format!("{controller}: {group} is unknown"),
            },
            Err(e) => last = format!("{controller}: {e}"),
        }
    }
    Err(last)
}

/// Waits (bounded) until `group` has a master and every one of `members` is in its
/// SyncStateSet (so the other may be elected); the master's address.
async fn await_formed(
    admin: &DefaultMQAdminExt,
    controllers: &[String],
    group: &str,
    members: &[String],
) -> String {
    let want: BTreeSet<String> = members.iter().cloned().collect();
    let until = Instant::now() + FORM_DEADLINE;
    loop {
        let seen = sync_state(admin, controllers, group).await;
        if let Ok((master, set)) = &seen {
            if *set == want {
                return master.clone();
            }
        }
        assert!(
            Instant::now() < until,
            "{group} did not get a master with {want:?} in sync within {FORM_DEADLINE:?}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A controller-mode group (three controllers, two brokers from RocketMQ's controller
/// quick-start file): a producer that polls the name server every 10 s sends
/// [`CONTROLLER_SENDS`] messages, the master the controllers picked is SIGKILLed, the same
/// producer goes on until another [`CONTROLLER_SENDS`] are acknowledged (by the promoted
/// slave: the group has no other broker), and a consumer of a new group then reads every
/// acknowledged message. Prints the time from the kill to the first acknowledgement.
#[test]
fn a_controller_mode_group_fails_over_for_a_producer_that_keeps_sending() {
    let seed = seed();
    println!("seed {seed}");
    let cluster = Cluster::start(Shape::ControllerGroup);
    let namesrv = cluster.namesrv_addr();
    let controllers = cluster.controller_addrs();
    let members = cluster.member_addrs("broker-a");
    assert_eq!(members.len(), 2, "two brokers in the group: {members:?}");
    let topic = format!("CompatFailover{seed}");
    run_clients("controller-failover", |runtime| {
        let (namesrv, controllers, members, topic, cluster) =
            (&namesrv, &controllers, &members, &topic, &cluster);
        async move {
            let admin = admin(&runtime, namesrv).await;
            let master = await_formed(&admin, controllers, "broker-a", members).await;
            let slave = members
                .iter()
                .find(|m| **m != master)
                .expect("a slave")
                .clone();
            println!("cluster: master {master}, slave {slave}, both in the SyncStateSet");
            create_topic(&admin, std::slice::from_ref(&master), topic).await;
            if ringmq_compat::node::is_rocketmq() {
                // ADAPTED: RocketMQ 5.5's slave does not learn topics from its master
                // (rocketmq-5.5-measured.md), so the failover would be measured against a
                // route that never comes back; the topic is created on the slave too.
                println!("ADAPTED: rocketmq: the topic is created on the slave too");
                create_topic(&admin, std::slice::from_ref(&slave), topic).await;
            }
            await_groups(&admin, topic, &["broker-a"]).await;

            let mut config = ringmq_compat::client_config(namesrv, &format!("PG_failover_{seed}"));
            config.poll_name_server_interval = POLL_NAME_SERVER_MS;
            let mut producer = DefaultMQProducer::builder(Arc::clone(&runtime))
                .client_config(config)
                .producer_group(format!("PG_failover_{seed}"))
                .name_server_addr(namesrv.to_string())
                .send_msg_timeout(SEND_TIMEOUT_MS as u32)
                .build();
            producer.start().await.expect("start the producer");
            let mut acked = BTreeSet::new();
            for i in 0..CONTROLLER_SENDS {
                let body = format!("before-{i}");
                send_until_ok(&producer, topic, &body).await;
                acked.insert(body);
            }

            // From the signal: the kill waits until the process is gone, which the
            // promotion does not wait for.
            let killed = Instant::now();
            cluster.kill_member("broker-a", &master);
            let mut first_ok = None;
            for i in 0..CONTROLLER_SENDS {
                let body = format!("after-{i}");
                send_until_ok(&producer, topic, &body).await;
                first_ok.get_or_insert(killed.elapsed());
                acked.insert(body);
            }
            println!(
                "cluster: the first SEND_OK after the master's SIGKILL came {:?} later \
                 (the producer polls the name server every {POLL_NAME_SERVER_MS} ms, a send \
                 times out after {SEND_TIMEOUT_MS} ms); {CONTROLLER_SENDS} more took {:?}",
                first_ok.expect("sends were made"),
                killed.elapsed()
            );
            let (now_master, _) = sync_state(&admin, controllers, "broker-a")
                .await
                .expect("the controllers answer");
            assert_eq!(now_master, slave, "the slave was promoted");
            producer.shutdown().await;

            let group = format!("CG_failover_{seed}");
            read_every(
                &runtime,
                namesrv,
                &group,
                topic,
                &acked,
                "the promoted master",
                "",
            )
            .await;
            let mut admin = admin;
            admin.shutdown().await;
        }
    });
}
