//! A slave's POP state follows its master's revive log, so with the master killed the
//! slave serves POP from where the master stood: deliveries the master handed out are
//! still invisible and their receipt handles still acknowledge on the slave, new pops
//! start at the master's cursor, and what is acknowledged on the slave reaches the master
//! as the group's committed offset when it is back (the master then hands out only what
//! follows). While the master's stream is up the slave sends POP to its master.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::process_cluster::{call, create_topic, send, topic_table, ProcessCluster};
use common::process_replication::{group_master, group_slave, wait_logs_equal, wait_send_ok};
use common::{command, pull_records};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

const TOPIC: &str = "PoppedOnSlave";
const GROUP: &str = "slave-poppers";
const SENT: u64 = 10;
const INVISIBLE_MS: &str = "60000";
const LIMIT: Duration = Duration::from_secs(30);

/// A pop of queue 0: its pop time and the queue offsets it handed out.
fn pop(broker: SocketAddr, max: u32) -> RemotingCommand {
    let max = max.to_string();
    let request = command(
        request::POP_MESSAGE,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("maxMsgNums", &max),
            ("invisibleTime", INVISIBLE_MS),
            ("pollTime", "0"),
            ("bornTime", "0"),
            ("initMode", "0"),
        ],
    );
    call(broker, request).expect("the pop is answered")
}

fn popped(answer: &RemotingCommand) -> (i64, Vec<u64>) {
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let pop_time = answer.ext_fields["popTime"].parse().unwrap();
    let offsets = pull_records(&answer.body)
        .iter()
        .map(|record| record.queue_offset as u64)
        .collect();
    (pop_time, offsets)
}

fn ack(broker: SocketAddr, offset: u64, pop_time: i64) -> RemotingCommand {
    let extra = format!("{offset} {pop_time} {INVISIBLE_MS} 0 0 broker-a 0 {offset}");
    let offset = offset.to_string();
    let request = command(
        request::ACK_MESSAGE,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("extraInfo", &extra),
            ("offset", &offset),
        ],
    );
    call(broker, request).expect("the ack is answered")
}

fn committed(broker: SocketAddr) -> Option<i64> {
    let request = command(
        request::QUERY_CONSUMER_OFFSET,
        &[("consumerGroup", GROUP), ("topic", TOPIC), ("queueId", "0")],
    );
    let answer = call(broker, request).ok()?;
    (answer.code == response::SUCCESS).then(|| answer.ext_fields["offset"].parse().unwrap())
}

fn has_group(broker: SocketAddr) -> bool {
    let request =
        RemotingCommand::request(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ExtFields::new());
    let answer = call(broker, request).expect("the groups are answered");
    serde_json::from_slice::<serde_json::Value>(&answer.body).unwrap()["subscriptionGroupTable"]
        .get(GROUP)
        .is_some()
}

/// The slave's refusal while its master's stream is up.
fn is_sent_to_master(answer: &RemotingCommand) -> bool {
    answer.code == response::SYSTEM_ERROR
        && answer
            .remark
            .as_deref()
            .is_some_and(|why| why.contains("its master's stream is up"))
}

#[test]
fn a_slave_serves_pop_from_where_its_master_stood_and_gives_back_what_was_acknowledged() {
    let (mut cluster, probe_end) = start_with_probes_consumed();
    let (master, slave) = (
        cluster.broker("broker-a-0").addr,
        cluster.broker("broker-a-1").addr,
    );
    for n in 0..SENT {
        let answer = send(master, TOPIC, 0, format!("pop-{n}").as_bytes());
        assert_eq!(answer.code, response::SUCCESS, "{n}: {:?}", answer.remark);
    }
    // The master hands out four and two of them are acknowledged there.
    let (master_pop, first) = popped(&pop(master, 4));
    let expected: Vec<u64> = (probe_end..probe_end + 4).collect();
    assert_eq!(first, expected, "the master's first pop");
    for offset in &first[..2] {
        assert_eq!(ack(master, *offset, master_pop).code, response::SUCCESS);
    }
    // While the master's stream is up the slave sends POP to it.
    assert!(
        is_sent_to_master(&pop(slave, 1)),
        "the slave refers POP to its master"
    );
    wait_logs_equal(&cluster, "broker-a-0", "broker-a-1", LIMIT, true);
    cluster.wait_until(LIMIT, "the slave copies the topic and the group", || {
        topic_table(slave).contains_key(TOPIC) && has_group(slave)
    });

    cluster.broker("broker-a-0").kill();
    let end = slave_serves(&cluster, slave, probe_end, master_pop, &first);

    // The master comes back: it has what was acknowledged on the slave, hands out only
    // what follows, and the slave sends POP to it again.
    cluster.broker("broker-a-0").start();
    cluster.wait_until(LIMIT, "the master gets the slave's commit", || {
        committed(master) == Some(end)
    });
    cluster.wait_until(LIMIT, "the slave refers POP to its master again", || {
        is_sent_to_master(&pop(slave, 1))
    });
    wait_send_ok(&cluster, master, TOPIC, &[0], LIMIT);
    let (_, third) = popped(&pop(master, 32));
    assert_eq!(
        third.first(),
        Some(&(end as u64)),
        "the master's pop after the switch back: {third:?}"
    );
    for said in ["serves POP, ACK", "follows the master's log again"] {
        cluster.wait_until(LIMIT, &format!("the slave says {said:?}"), || {
            cluster.brokers[1].log_text().contains(said)
        });
    }
}

/// With the master killed after handing out `first` at `master_pop` (two acknowledged):
/// the slave takes over from there. The queue's end, all of it acknowledged.
fn slave_serves(
    cluster: &ProcessCluster,
    slave: SocketAddr,
    probe_end: u64,
    master_pop: i64,
    first: &[u64],
) -> i64 {
    // The master's third delivery, still in flight, is acknowledged on the slave with the
    // handle the master gave (once the slave sees its stream is down).
    cluster.wait_until(LIMIT, "the slave serves acks", || {
        let answer = ack(slave, first[2], master_pop);
        assert!(
            answer.code == response::SUCCESS || is_sent_to_master(&answer),
            "{answer:?}"
        );
        answer.code == response::SUCCESS
    });
    // New pops on the slave start at the master's cursor: none of the master's
    // deliveries comes again before its invisible time.
    let (slave_pop, second) = popped(&pop(slave, 32));
    let rest: Vec<u64> = (probe_end + 4..probe_end + SENT).collect();
    assert_eq!(second, rest, "the slave's pop");
    assert_eq!(
        pop(slave, 32).code,
        response::POLLING_TIMEOUT,
        "nothing is visible"
    );
    assert_eq!(ack(slave, first[3], master_pop).code, response::SUCCESS);
    for offset in &second {
        assert_eq!(ack(slave, *offset, slave_pop).code, response::SUCCESS);
    }
    assert_eq!(
        ack(slave, second[0], slave_pop).code,
        response::NO_MESSAGE,
        "an ack counts once"
    );
    let end = (probe_end + SENT) as i64;
    assert_eq!(committed(slave), Some(end), "acknowledged on the slave");

    end
}

/// A SYNC_MASTER and its slave with the topic and group, the probes that waited for
/// SEND_OK popped and acknowledged on the master; the queue offset after them.
fn start_with_probes_consumed() -> (ProcessCluster, u64) {
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "SYNC_MASTER")]);
    let ha = cluster.broker("broker-a-0").ha_addr();
    cluster.add_broker(group_slave("broker-a", 1, ha));
    let master = cluster.broker("broker-a-0").addr;
    create_topic(master, TOPIC, 1, 1, 6);
    let create_group = RemotingCommand::request(
        request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        ExtFields::new(),
    )
    .with_body(serde_json::to_vec(&serde_json::json!({"groupName": GROUP})).unwrap());
    assert_eq!(call(master, create_group).unwrap().code, response::SUCCESS);
    wait_send_ok(&cluster, master, TOPIC, &[0], LIMIT);
    // The probes are popped and acknowledged first: the test's messages follow them.
    let mut probe_end = 0;
    loop {
        let answer = pop(master, 32);
        if answer.code == response::POLLING_TIMEOUT {
            break;
        }
        let (pop_time, offsets) = popped(&answer);
        for offset in &offsets {
            assert_eq!(ack(master, *offset, pop_time).code, response::SUCCESS);
            probe_end = probe_end.max(offset + 1);
        }
    }
    (cluster, probe_end)
}
