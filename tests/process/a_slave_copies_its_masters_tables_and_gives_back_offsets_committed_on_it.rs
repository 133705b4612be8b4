//! A slave copies its master's tables (topics, subscription groups, consumer offsets)
//! within its `slaveMetadataSyncInterval`, so with the master killed consumers read the
//! acknowledged backlog from the slave (RocketMQ 5.5's slave never learned the topic and
//! served none of it, `docs/rocketmq-5.5-measured.md`), commit their offsets there, and
//! find those offsets on the master when it is back.
//!
//! Only the master is told of the topic, the group and the offsets: whatever the slave
//! knows of them it copied.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::process_cluster::{call, create_topic, send, topic_table, ProcessCluster};
use common::process_replication::{
    group_master, group_slave, read_topic, wait_logs_equal, wait_send_ok,
};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

const TOPIC: &str = "Copied";
const GROUP: &str = "copied-readers";
const QUEUES: [i32; 2] = [0, 1];
const SENT: usize = 30;
const LIMIT: Duration = Duration::from_secs(30);

fn commit(broker: SocketAddr, queue: i32, offset: i64) {
    let (queue, offset) = (queue.to_string(), offset.to_string());
    let command = RemotingCommand::request(
        request::UPDATE_CONSUMER_OFFSET,
        ExtFields::from([
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", queue.as_str()),
            ("commitOffset", offset.as_str()),
        ]),
    );
    let answer = call(broker, command).expect("the commit is answered");
    assert_eq!(
        answer.code,
        response::SUCCESS,
        "{broker}: {:?}",
        answer.remark
    );
}

/// The committed offset of queue `queue` on `broker`, `None` if it has none (or is down).
fn committed(broker: SocketAddr, queue: i32) -> Option<i64> {
    let queue = queue.to_string();
    let command = RemotingCommand::request(
        request::QUERY_CONSUMER_OFFSET,
        ExtFields::from([
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", queue.as_str()),
        ]),
    );
    let answer = call(broker, command).ok()?;
    (answer.code == response::SUCCESS).then(|| answer.ext_fields["offset"].parse().unwrap())
}

/// A POP_MESSAGE of queue 0 of the topic to `broker`, no long poll.
fn pop(broker: SocketAddr) -> RemotingCommand {
    let command = RemotingCommand::request(
        request::POP_MESSAGE,
        ExtFields::from([
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("maxMsgNums", "1"),
            ("invisibleTime", "60000"),
            ("pollTime", "0"),
            ("bornTime", "0"),
            ("initMode", "0"),
        ]),
    );
    call(broker, command).expect("the pop is answered")
}

fn groups(broker: SocketAddr) -> serde_json::Value {
    let command =
        RemotingCommand::request(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ExtFields::new());
    let answer = call(broker, command).expect("the groups are answered");
    serde_json::from_slice::<serde_json::Value>(&answer.body).unwrap()["subscriptionGroupTable"]
        .clone()
}

#[test]
fn a_slave_serves_the_backlog_with_its_masters_topics_and_gives_back_offsets_committed_on_it() {
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "SYNC_MASTER")]);
    let ha = cluster.broker("broker-a-0").ha_addr();
    cluster.add_broker(group_slave("broker-a", 1, ha));
    let master = cluster.broker("broker-a-0").addr;
    let slave = cluster.broker("broker-a-1").addr;

    create_topic(master, TOPIC, QUEUES.len() as u32, QUEUES.len() as u32, 6);
    let create_group = RemotingCommand::request(
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        ExtFields::new(),
    )
    .with_body(serde_json::to_vec(&serde_json::json!({"groupName": GROUP})).unwrap());
    let answer = call(master, create_group).unwrap();
    assert_eq!(answer.code, response::SUCCESS, "{:?}", answer.remark);
    // SYNC_MASTER: once the slave streams, every SEND_OK is on it too.
    wait_send_ok(&cluster, master, TOPIC, &QUEUES, LIMIT);
    for n in 0..SENT {
        let queue = QUEUES[n % QUEUES.len()];
        let answer = send(master, TOPIC, queue, format!("backlog-{n}").as_bytes());
        assert_eq!(answer.code, response::SUCCESS, "{n}: {:?}", answer.remark);
    }
    commit(master, 0, 4);
    cluster.wait_until(
        LIMIT,
        "the slave copies the topic, group and offset",
        || {
            topic_table(slave).contains_key(TOPIC)
                && groups(slave).get(GROUP).is_some()
                && committed(slave, 0) == Some(4)
        },
    );
    wait_logs_equal(&cluster, "broker-a-0", "broker-a-1", LIMIT, true);

    // The master dies; the backlog is read from the slave, and progress committed there.
    cluster.broker("broker-a-0").kill();
    let held = read_topic(slave, TOPIC, &QUEUES);
    let mut bodies: Vec<String> = held
        .into_values()
        .map(|body| String::from_utf8(body).unwrap())
        .filter(|body| body.starts_with("backlog-"))
        .collect();
    bodies.sort();
    let mut expected: Vec<String> = (0..SENT).map(|n| format!("backlog-{n}")).collect();
    expected.sort();
    assert_eq!(
        bodies, expected,
        "every acknowledged message, from the slave"
    );
    commit(slave, 0, 11);
    commit(slave, 1, 9);
    assert_eq!(committed(slave, 0), Some(11));

    // The master comes back: the offsets committed on the slave reach it, and the
    // slave keeps them while copying the master's table again.
    cluster.broker("broker-a-0").start();
    cluster.wait_until(LIMIT, "the master gets the slave's commits", || {
        committed(master, 0) == Some(11) && committed(master, 1) == Some(9)
    });
    assert_eq!(committed(slave, 0), Some(11));
    // Given back, the master's word is the slave's again: a later commit on the master
    // (a reset, say) reaches the slave.
    commit(master, 0, 2);
    cluster.wait_until(LIMIT, "the slave takes the master's later commit", || {
        committed(slave, 0) == Some(2)
    });
    // POP writes its state to the CommitLog, which a slave only copies: the slave says
    // to go to the master, and hands nothing out.
    let refused = pop(slave);
    assert_eq!(refused.code, response::SYSTEM_ERROR, "{refused:?}");
    let why = refused.remark.unwrap_or_default();
    assert!(why.contains("served by its master"), "{why}");
    let log = cluster.brokers[1].log_text();
    assert!(
        log.contains("copying the master's tables"),
        "the slave says it copies:\n{}",
        cluster.brokers[1].log_tail()
    );
}
