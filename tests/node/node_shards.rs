//! A node of two shards in-process (D3): every queue of a topic is served
//! whichever shard a connection lands on (requests for the other shard's queues cross its
//! mailbox); each message is stored by the shard that owns its queue (the top byte of its
//! physical offset, D4); a send that leaves the queue to the broker gets a valid one; a
//! parked pull on another shard's queue wakes on a send; and a store root made with two
//! shards refuses to open with one, then reopens with two with every message in place.

use crate::common;

use std::time::{Duration, Instant};

use common::run_local;
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::client::{queue_request, send_request_v1, Client};
use ringmq::node::NodeHandle;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::RemotingCommand;
use ringmq::shard::routing::queue_owner;

const TOPIC: &str = "Sharded";
const QUEUES: i32 = 8;
const CONNECTIONS: usize = 4;
const PER_CONNECTION: usize = 3;

fn options(dir: &std::path::Path, shards: u8) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = shards;
    options
}

fn start(dir: &std::path::Path) -> NodeHandle {
    ringmq::node::start(options(dir, 2)).expect("node starts")
}

fn ext<'a>(cmd: &'a RemotingCommand, field: &str) -> &'a str {
    cmd.ext_fields
        .get(field)
        .unwrap_or_else(|| panic!("no {field} in {cmd:?}"))
}

/// The bodies of a pull response's records, in order.
fn bodies(answer: &RemotingCommand) -> Vec<String> {
    common::pull_bodies(&answer.body)
}

fn body(connection: usize, queue: i32, i: usize) -> String {
    format!("c{connection} q{queue} m{i}")
}

/// Sends PER_CONNECTION messages to every queue from each of CONNECTIONS connections;
/// checks each answer names the queue's owner shard in its msgId.
async fn send_everywhere(addr: std::net::SocketAddr) {
    let mut shards_seen = [0usize; 2];
    for connection in 0..CONNECTIONS {
        let client = Client::connect(addr).await.unwrap();
        for queue in 0..QUEUES {
            for i in 0..PER_CONNECTION {
                let answer = client
                    .request(send_request_v1(
                        TOPIC,
                        queue,
                        body(connection, queue, i).as_bytes(),
                        Some("TagA"),
                        None,
                    ))
                    .await
                    .unwrap();
                assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
                assert_eq!(ext(&answer, "queueId"), queue.to_string());
                let (_, phys) = decode_offset_msg_id(ext(&answer, "msgId")).unwrap();
                let shard = (phys >> 56) as u8;
                assert_eq!(
                    shard,
                    queue_owner(TOPIC, queue, 2),
                    "queue {queue} stored by shard {shard}"
                );
                shards_seen[shard as usize] += 1;
            }
        }
    }
    assert!(
        shards_seen.iter().all(|&n| n > 0),
        "both shards store messages: {shards_seen:?}"
    );
}

/// Every queue holds every connection's messages in send order, whichever connection
/// pulls it.
async fn check_every_queue(addr: std::net::SocketAddr) {
    let clients = [
        Client::connect(addr).await.unwrap(),
        Client::connect(addr).await.unwrap(),
    ];
    for queue in 0..QUEUES {
        let client = &clients[queue as usize % clients.len()];
        let max = client
            .request(queue_request(request::GET_MAX_OFFSET, TOPIC, queue))
            .await
            .unwrap();
        assert_eq!(max.code, response::SUCCESS, "{max:?}");
        assert_eq!(
            ext(&max, "offset"),
            (CONNECTIONS * PER_CONNECTION).to_string()
        );
        let answer = client.pull(TOPIC, queue, 0, 64, None).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "queue {queue}: {answer:?}");
        let expected: Vec<String> = (0..CONNECTIONS)
            .flat_map(|c| (0..PER_CONNECTION).map(move |i| body(c, queue, i)))
            .collect();
        assert_eq!(bodies(&answer), expected, "queue {queue}");
    }
}

#[test]
fn every_queue_is_served_and_stored_by_its_owner_whichever_shard_a_connection_lands_on() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    assert_eq!(node.shard_count(), 2);
    let addr = node.addr();
    run_local(false, async move {
        send_everywhere(addr).await;
        check_every_queue(addr).await;
    });
    node.shutdown().unwrap();
    for shard in ["shard-0", "shard-1"] {
        assert!(dir.path().join(shard).join("commitlog").is_dir(), "{shard}");
        assert!(!dir.path().join(shard).join("abort").exists(), "{shard}");
    }
}

#[test]
fn a_send_that_leaves_the_queue_to_the_broker_gets_a_queue_that_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for i in 0..16 {
            let text = format!("any queue {i}");
            let answer = client
                .request(send_request_v1(TOPIC, -1, text.as_bytes(), None, None))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            let queue: i32 = ext(&answer, "queueId").parse().unwrap();
            assert!((0..QUEUES).contains(&queue), "queue {queue}");
            let offset: u64 = ext(&answer, "queueOffset").parse().unwrap();
            let (_, phys) = decode_offset_msg_id(ext(&answer, "msgId")).unwrap();
            assert_eq!((phys >> 56) as u8, queue_owner(TOPIC, queue, 2));
            let pulled = client.pull(TOPIC, queue, offset, 1, None).await.unwrap();
            assert_eq!(bodies(&pulled), vec![text]);
        }
    });
    node.shutdown().unwrap();
}

#[test]
fn a_parked_pull_on_either_shards_queue_wakes_when_a_message_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        // Auto-create the topic first, so the parked pulls find it.
        let sender = Client::connect(addr).await.unwrap();
        let answer = sender
            .request(send_request_v1(TOPIC, 0, b"first", None, None))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let suspend = Duration::from_secs(20);
        // One queue owned by each shard.
        let queues: Vec<i32> = (0..2u8)
            .map(|shard| {
                (0..QUEUES)
                    .find(|&q| q != 0 && queue_owner(TOPIC, q, 2) == shard)
                    .unwrap()
            })
            .collect();
        for queue in queues {
            let puller = Client::connect(addr).await.unwrap();
            let started = Instant::now();
            let parked = tokio::task::spawn_local(async move {
                puller.pull(TOPIC, queue, 0, 32, Some(suspend)).await
            });
            tokio::task::yield_now().await;
            let text = format!("wake {queue}");
            let answer = sender
                .request(send_request_v1(TOPIC, queue, text.as_bytes(), None, None))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            let woken = parked.await.unwrap().unwrap();
            assert_eq!(woken.code, response::SUCCESS, "{woken:?}");
            assert_eq!(bodies(&woken), vec![text]);
            assert!(
                started.elapsed() < suspend / 2,
                "queue {queue} answered after {:?}",
                started.elapsed()
            );
        }
    });
    node.shutdown().unwrap();
}

#[test]
fn a_root_made_with_two_shards_refuses_one_and_reopens_with_two() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let addr = node.addr();
    run_local(false, async move { send_everywhere(addr).await });
    node.shutdown().unwrap();

    let error = match ringmq::node::start(options(dir.path(), 1)) {
        Ok(_) => panic!("a two-shard root opened with one shard"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("made with 2 shards"), "{error}");
    assert!(error.contains("shards = 2"), "{error}");

    let node = start(dir.path());
    let addr = node.addr();
    run_local(false, async move { check_every_queue(addr).await });
    node.shutdown().unwrap();
}

#[test]
fn sends_pipelined_past_a_one_slot_mailbox_are_all_stored_and_answered() {
    // With room for one forwarded request, a burst on one connection finds the other
    // shard's mailbox full most of the time: those sends must wait for room, not fail.
    const PER_QUEUE: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path(), 2);
    options.shard_mailbox_capacity = 1;
    let node = ringmq::node::start(options).expect("node starts");
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let mut sends = Vec::new();
        for i in 0..PER_QUEUE {
            for queue in 0..QUEUES {
                let client = client.clone();
                sends.push((
                    queue,
                    tokio::task::spawn_local(async move {
                        client
                            .request(send_request_v1(
                                TOPIC,
                                queue,
                                body(0, queue, i).as_bytes(),
                                None,
                                None,
                            ))
                            .await
                    }),
                ));
            }
        }
        let mut offsets = vec![Vec::new(); QUEUES as usize];
        for (queue, send) in sends {
            let answer = send.await.unwrap().expect("answered");
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            assert_eq!(ext(&answer, "queueId"), queue.to_string());
            offsets[queue as usize].push(ext(&answer, "queueOffset").parse::<u64>().unwrap());
        }
        for (queue, mut got) in offsets.into_iter().enumerate() {
            got.sort_unstable();
            let expected: Vec<u64> = (0..PER_QUEUE as u64).collect();
            assert_eq!(
                got, expected,
                "queue {queue}: one offset per send, none twice"
            );
        }
    });
    let forwarded: u64 = node
        .metrics()
        .shards()
        .iter()
        .map(|shard| shard.forwarded.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    assert!(forwarded > 0, "half the queues belong to the other shard");
    node.shutdown().unwrap();
}
