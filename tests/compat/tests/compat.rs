//! The compatibility scenarios: the stock Rust RocketMQ client (`rocketmq-client-rust`)
//! against a real `ringmq serve` process, or with `COMPAT_TARGET=rocketmq` against the
//! real Apache RocketMQ 5.5.0 name server and broker (`ringmq_compat::node`). Each test
//! starts its own node. Where a scenario does something else on RocketMQ it prints why
//! (`SKIPPED`, `ADAPTED`, `rocketmq: ...`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringmq_compat::node::Node;
use ringmq_compat::{
    describe_allocations, group_settled, prepare_topic, raw, ringmq_specific, run_clients, seed,
    start_member, start_orderly_member, start_producer, timer_precision_ms, wait_until,
    ConsumerSpec, Delivery, Member, DELIVERY_DEADLINE, REBALANCE_DEADLINE,
};
use rocketmq_client_rust::{ClientRuntime, DefaultMQProducer};
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::result::SendStatus;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;

#[path = "compat/cluster.rs"]
mod cluster;
#[path = "compat/transactions.rs"]
mod transactions;

/// What a test expects one message to look like when it is delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expected {
    tags: String,
    keys: Vec<String>,
}

impl Expected {
    fn new(tags: &str, key: String) -> Expected {
        Expected {
            tags: tags.into(),
            keys: vec![key],
        }
    }
}

/// Message `i` of the run called `name`: its body (`{seed}-{name}-{i}`, unique across
/// runs) and its key.
fn numbered(seed: u64, name: &str, i: usize) -> (String, String) {
    (format!("{seed}-{name}-{i}"), format!("{name}-key-{i}"))
}

/// `count` numbered messages of the run `name`, all tagged `tags`, as expected deliveries.
fn numbered_batch(seed: u64, name: &str, count: usize, tags: &str) -> BTreeMap<String, Expected> {
    (0..count)
        .map(|i| {
            let (body, key) = numbered(seed, name, i);
            (body, Expected::new(tags, key))
        })
        .collect()
}

/// Sends every message of `batch` with its tags and key, one sync send after another.
async fn send_each(
    producer: &DefaultMQProducer,
    topic: &str,
    batch: &BTreeMap<String, Expected>,
    seed: u64,
) {
    for (body, want) in batch {
        producer
            .send(message(topic, body, &want.tags, &want.keys[0]))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: send {body}: {e}"));
    }
}

/// Starts `count` members, member `m` from `spec(m)`.
async fn start_members<'a>(
    runtime: &Arc<ClientRuntime>,
    count: usize,
    spec: impl Fn(usize) -> ConsumerSpec<'a>,
) -> Vec<Member> {
    let mut members = Vec::with_capacity(count);
    for m in 0..count {
        members.push(start_member(runtime, spec(m)).await);
    }
    members
}

fn message(topic: &str, body: &str, tags: &str, key: &str) -> Message {
    Message::builder()
        .topic(topic)
        .tags(tags)
        .key(key)
        .body_slice(body.as_bytes())
        .build()
        .expect("a valid message")
}

/// Every expected body delivered with the right tags and keys, and nothing else.
fn check_deliveries(deliveries: &[Delivery], expected: &BTreeMap<String, Expected>, seed: u64) {
    for delivery in deliveries {
        let Some(want) = expected.get(&delivery.body) else {
            panic!("seed {seed}: unexpected delivery {delivery:?}");
        };
        assert_eq!(
            delivery.tags.as_deref(),
            Some(want.tags.as_str()),
            "seed {seed}: tags of {delivery:?}"
        );
        assert_eq!(
            delivery.keys, want.keys,
            "seed {seed}: keys of {delivery:?}"
        );
    }
    let seen: BTreeSet<&String> = deliveries.iter().map(|d| &d.body).collect();
    let missing: Vec<&String> = expected.keys().filter(|b| !seen.contains(b)).collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: never delivered: {missing:?}"
    );
}

fn duplicates(deliveries: &[Delivery]) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for delivery in deliveries {
        *counts.entry(delivery.body.clone()).or_default() += 1;
    }
    counts.into_iter().filter(|(_, n)| *n > 1).collect()
}

/// Waits until `member` has delivered every body in `expected`.
async fn wait_for_all(what: &str, members: &[&Member], expected: &BTreeMap<String, Expected>) {
    wait_until(
        what,
        DELIVERY_DEADLINE,
        || {
            let seen: BTreeSet<String> = members
                .iter()
                .flat_map(|m| m.collector.deliveries())
                .map(|d| d.body)
                .collect();
            expected.keys().all(|body| seen.contains(body))
        },
        || {
            let seen: BTreeSet<String> = members
                .iter()
                .flat_map(|m| m.collector.deliveries())
                .map(|d| d.body)
                .collect();
            let missing: Vec<&String> = expected.keys().filter(|b| !seen.contains(*b)).collect();
            format!(
                "{} of {} missing: {missing:?}",
                missing.len(),
                expected.len()
            )
        },
    )
    .await;
}

/// After the expected messages arrived, a bounded look for anything that arrives late (a
/// redelivery or a filtered message): the delivery count must not move for `quiet`.
async fn settle_quietly(members: &[&Member], quiet: Duration) {
    let count = || members.iter().map(|m| m.collector.len()).sum::<usize>();
    let before = count();
    let until = std::time::Instant::now() + quiet;
    while std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if count() != before {
            return; // the caller's checks will report what arrived
        }
    }
}

/// Scenario 1: sync, async, oneway and batch sends with keys and tags; every acknowledged
/// message (and every oneway one) is consumable with its body, tags and keys.
#[test]
fn producer_send_modes_are_all_consumable() {
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatSend{seed}");
    run_clients("send-modes", |runtime| async move {
        let producer = start_producer(&runtime, &namesrv, &format!("PG_send_{seed}")).await;
        let mut expected: BTreeMap<String, Expected> = BTreeMap::new();

        for i in 0..10 {
            let (body, key) = numbered(seed, "sync", i);
            let result = producer
                .send(message(&topic, &body, "TagSync", &key))
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: sync send {i}: {e}"))
                .expect("a sync send has a result");
            assert_eq!(result.send_status, SendStatus::SendOk, "sync send {i}");
            assert!(result.msg_id.is_some(), "sync send {i} has a msgId");
            expected.insert(body, Expected::new("TagSync", key));
        }

        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let failed: Arc<Mutex<Vec<String>>> = Arc::default();
        for i in 0..10 {
            let (body, key) = numbered(seed, "async", i);
            let (acked, failed, done_body) = (acked.clone(), failed.clone(), body.clone());
            producer
                .send_with_callback(
                    message(&topic, &body, "TagAsync", &key),
                    move |r, e| match (r, e) {
                        (Some(r), None) if r.send_status == SendStatus::SendOk => {
                            acked.lock().unwrap().push(done_body.clone())
                        }
                        _ => failed.lock().unwrap().push(format!("{done_body}: {e:?}")),
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: async send {i}: {e}"));
            expected.insert(body, Expected::new("TagAsync", key));
        }
        wait_until(
            "every async send's callback",
            Duration::from_secs(30),
            || acked.lock().unwrap().len() + failed.lock().unwrap().len() == 10,
            || format!("acked {:?}", acked.lock().unwrap()),
        )
        .await;
        assert!(
            failed.lock().unwrap().is_empty(),
            "seed {seed}: async sends failed: {:?}",
            failed.lock().unwrap()
        );

        for i in 0..5 {
            let (body, key) = numbered(seed, "oneway", i);
            producer
                .send_oneway(message(&topic, &body, "TagOneway", &key))
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: oneway send {i}: {e}"));
            expected.insert(body, Expected::new("TagOneway", key));
        }

        let mut batch = Vec::new();
        for i in 0..8 {
            let (body, key) = numbered(seed, "batch", i);
            batch.push(message(&topic, &body, "TagBatch", &key));
            expected.insert(body, Expected::new("TagBatch", key));
        }
        let result = producer
            .send_batch(batch)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: batch send: {e}"));
        assert_eq!(result.send_status, SendStatus::SendOk, "batch send");

        let member = start_member(
            &runtime,
            ConsumerSpec {
                namesrv: &namesrv,
                group: &format!("CG_send_{seed}"),
                instance: &format!("send-consumer-{seed}"),
                topic: &topic,
                expression: "*",
                model: MessageModel::Clustering,
            },
        )
        .await;
        wait_for_all("every sent message", &[&member], &expected).await;
        settle_quietly(&[&member], Duration::from_secs(2)).await;
        let deliveries = member.collector.deliveries();
        check_deliveries(&deliveries, &expected, seed);
        assert_eq!(duplicates(&deliveries), vec![], "seed {seed}: duplicates");
        println!(
            "seed {seed}: {} messages sent and consumed (sync, async, oneway, batch)",
            expected.len()
        );
        member.shutdown().await;
        let mut producer = producer;
        producer.shutdown().await;
    });
    drop(node);
}

/// The clustering scenario's tag expression. ringmq: `TagA || TagB`, spaced as people write
/// it. The stock client (rocketmq-client-rust 1.0.0, FilterAPI::build_subscription_data)
/// hashes the untrimmed tags for the subscription's `codeSet` (`"TagA "`, `" TagB"`),
/// unlike Java's FilterAPI (trimmed). ringmq also hashes the trimmed tags of `subString`,
/// so it delivers; RocketMQ filters the ConsumeQueue by the client's `codeSet` alone and
/// delivers nothing (a client defect). Under the rocketmq target the expression is
/// `TagA||TagB`, for which the client's codes are right, so the scenario checks
/// RocketMQ's tag filtering rather than the client's hashing; the difference is printed.
/// `COMPAT_SPACED_TAGS=1` keeps the spaced expression there too (to reproduce it).
fn tag_expression() -> &'static str {
    if ringmq_compat::node::is_rocketmq() && std::env::var_os("COMPAT_SPACED_TAGS").is_none() {
        println!(
            "ADAPTED under COMPAT_TARGET=rocketmq: expression \"TagA||TagB\", not \"TagA || TagB\": \
             rocketmq-client-rust 1.0.0 sends codeSet [hash(\"TagA \"), hash(\" TagB\")] for the \
             spaced one, and RocketMQ filters by codeSet, so it would deliver nothing"
        );
        "TagA||TagB"
    } else {
        "TagA || TagB"
    }
}

/// Under the rocketmq target, `: a known RocketMQ 5.5.0 defect (WHAT)` for a failure
/// message; nothing under ringmq.
fn rocketmq_defect(what: &str) -> String {
    if ringmq_compat::node::is_rocketmq() {
        format!(" (a known RocketMQ 5.5.0 defect, {what})")
    } else {
        String::new()
    }
}

/// Scenario 2: a CLUSTERING group of two members splits the topic's queues, every
/// TagA/TagB message is delivered exactly once between them, and TagC is never delivered.
#[test]
fn clustering_group_delivers_each_message_once_with_tag_filter() {
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatCluster{seed}");
    let group = format!("CG_cluster_{seed}");
    let broker = node.broker_addr();
    run_clients("clustering", |runtime| async move {
        // The consumers start before the first send (see prepare_topic).
        prepare_topic(&runtime, &namesrv, &broker, &topic).await;
        let expression = tag_expression();
        let instances: Vec<String> = (0..2).map(|m| format!("cluster-{m}-{seed}")).collect();
        let members = start_members(&runtime, 2, |m| ConsumerSpec {
            namesrv: &namesrv,
            group: &group,
            instance: &instances[m],
            topic: &topic,
            expression,
            model: MessageModel::Clustering,
        })
        .await;
        let allocators: Vec<_> = members.iter().map(|m| m.allocator.clone()).collect();
        let refs: Vec<&_> = allocators.iter().map(|a| a.as_ref()).collect();
        wait_until(
            "both members to settle the queue split",
            REBALANCE_DEADLINE,
            || group_settled(&refs, &topic),
            || describe_allocations(&refs, &topic),
        )
        .await;
        println!(
            "seed {seed}: settled: {}",
            describe_allocations(&refs, &topic)
        );

        let producer = start_producer(&runtime, &namesrv, &format!("PG_cluster_{seed}")).await;
        let mut expected = BTreeMap::new();
        for i in 0..60 {
            let tags = ["TagA", "TagB", "TagC"][i % 3];
            let (body, key) = numbered(seed, "cluster", i);
            let result = producer
                .send(message(&topic, &body, tags, &key))
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: send {i}: {e}"))
                .expect("a result");
            assert_eq!(result.send_status, SendStatus::SendOk);
            if tags != "TagC" {
                expected.insert(body, Expected::new(tags, key));
            }
        }
        let member_refs: Vec<&Member> = members.iter().collect();
        wait_for_all("every TagA/TagB message", &member_refs, &expected).await;
        settle_quietly(&member_refs, Duration::from_secs(3)).await;
        let deliveries: Vec<Delivery> = members
            .iter()
            .flat_map(|m| m.collector.deliveries())
            .collect();
        check_deliveries(&deliveries, &expected, seed);
        assert_eq!(
            duplicates(&deliveries),
            vec![],
            "seed {seed}: delivered more than once across the group"
        );
        for member in &members {
            assert!(
                !member.collector.is_empty(),
                "seed {seed}: member got nothing; allocations {}",
                describe_allocations(&refs, &topic)
            );
        }
        println!(
            "seed {seed}: members got {} and {} of {}",
            members[0].collector.len(),
            members[1].collector.len(),
            expected.len()
        );
        for member in members {
            member.shutdown().await;
        }
        let mut producer = producer;
        producer.shutdown().await;
    });
    drop(node);
}

/// Scenario 3: two BROADCASTING members each receive every message.
#[test]
fn broadcasting_members_each_receive_everything() {
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatBroadcast{seed}");
    let group = format!("CG_broadcast_{seed}");
    let broker = node.broker_addr();
    run_clients("broadcasting", |runtime| async move {
        // The consumers start before the first send (see prepare_topic).
        prepare_topic(&runtime, &namesrv, &broker, &topic).await;
        let instances: Vec<String> = (0..2).map(|m| format!("broadcast-{m}-{seed}")).collect();
        let members = start_members(&runtime, 2, |m| ConsumerSpec {
            namesrv: &namesrv,
            group: &group,
            instance: &instances[m],
            topic: &topic,
            expression: "*",
            model: MessageModel::Broadcasting,
        })
        .await;
        let producer = start_producer(&runtime, &namesrv, &format!("PG_broadcast_{seed}")).await;
        let mut expected = BTreeMap::new();
        for i in 0..30 {
            let (body, key) = numbered(seed, "broadcast", i);
            producer
                .send(message(&topic, &body, "TagB", &key))
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: send {i}: {e}"));
            expected.insert(body, Expected::new("TagB", key));
        }
        for (m, member) in members.iter().enumerate() {
            wait_for_all(
                &format!("member {m} to get everything"),
                &[member],
                &expected,
            )
            .await;
        }
        let member_refs: Vec<&Member> = members.iter().collect();
        settle_quietly(&member_refs, Duration::from_secs(2)).await;
        for (m, member) in members.iter().enumerate() {
            let deliveries = member.collector.deliveries();
            check_deliveries(&deliveries, &expected, seed);
            assert_eq!(duplicates(&deliveries), vec![], "seed {seed}: member {m}");
        }
        for member in members {
            member.shutdown().await;
        }
        let mut producer = producer;
        producer.shutdown().await;
    });
    drop(node);
}

/// Scenario 4: a group's committed offsets survive a clean node restart: after the restart
/// the group gets exactly the messages produced after it, nothing twice, nothing skipped.
#[test]
fn committed_offsets_survive_a_clean_restart() {
    let seed = seed();
    println!("seed {seed}");
    let mut node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let broker = node.broker_addr();
    let topic = format!("CompatRestart{seed}");
    let group = format!("CG_restart_{seed}");
    let spec = |instance: &'static str| ConsumerSpec {
        namesrv: &namesrv,
        group: &group,
        instance,
        topic: &topic,
        expression: "*",
        model: MessageModel::Clustering,
    };

    // Phase 1: produce and consume a first batch; the group commits its offsets.
    let first = numbered_batch(seed, "first", 20, "TagA");
    let queues: Arc<Mutex<BTreeSet<i32>>> = Arc::default();
    run_clients("restart-1", |runtime| {
        let (first, queues) = (first.clone(), queues.clone());
        let spec = spec("restart-first");
        let (namesrv, topic, broker, group) = (&namesrv, &topic, &broker, &group);
        async move {
            let mut producer = start_producer(&runtime, namesrv, &format!("PG_r1_{seed}")).await;
            send_each(&producer, topic, &first, seed).await;
            producer.shutdown().await;
            let member = start_member(&runtime, spec).await;
            wait_for_all("the first batch", &[&member], &first).await;
            check_deliveries(&member.collector.deliveries(), &first, seed);
            let all = member
                .allocator
                .allocations(topic)
                .last()
                .map(|a| a.all.clone())
                .expect("the member allocated the topic's queues");
            *queues.lock().unwrap() = all.clone();
            member.shutdown().await;
            // Shutdown persists the offsets (possibly oneway): wait until the broker has
            // them all, so the node is stopped with every commit received.
            let ends: BTreeMap<i32, i64> = all
                .iter()
                .map(|q| (*q, raw::max_offset(broker, topic, *q)))
                .collect();
            wait_until(
                "the committed offsets to reach the queue ends",
                Duration::from_secs(30),
                || {
                    ends.iter().all(|(q, end)| {
                        *end == 0 || raw::committed_offset(broker, group, topic, *q) == Some(*end)
                    })
                },
                || {
                    ends.iter()
                        .map(|(q, end)| {
                            let c = raw::committed_offset(broker, group, topic, *q);
                            format!("q{q}: end {end} committed {c:?}")
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            )
            .await;
            println!("seed {seed}: first batch consumed and committed: {ends:?}");
        }
    });

    // Phase 2: clean stop, restart on the same directory and ports.
    node.stop();
    node.restart();
    assert_eq!(node.namesrv_addr(), namesrv);
    for q in queues.lock().unwrap().iter() {
        let end = raw::max_offset(&broker, &topic, *q);
        let committed = raw::committed_offset(&broker, &group, &topic, *q);
        println!("seed {seed}: after restart q{q}: end {end}, committed {committed:?}");
    }

    // Phase 3: more messages; the group restarts and gets exactly those.
    let second = numbered_batch(seed, "second", 15, "TagA");
    run_clients("restart-2", |runtime| {
        let second = second.clone();
        let spec = spec("restart-second");
        let (namesrv, topic) = (&namesrv, &topic);
        async move {
            let mut producer = start_producer(&runtime, namesrv, &format!("PG_r2_{seed}")).await;
            send_each(&producer, topic, &second, seed).await;
            producer.shutdown().await;
            let member = start_member(&runtime, spec).await;
            wait_for_all("the second batch", &[&member], &second).await;
            settle_quietly(&[&member], Duration::from_secs(3)).await;
            let deliveries = member.collector.deliveries();
            // check_deliveries rejects anything not in `second`: a redelivered first-batch
            // message fails here.
            check_deliveries(&deliveries, &second, seed);
            assert_eq!(duplicates(&deliveries), vec![], "seed {seed}: duplicates");
            println!("seed {seed}: after restart the group got exactly the 15 new messages");
            member.shutdown().await;
        }
    });
    drop(node);
}

/// Scenario 5: in SYNC_FLUSH every acknowledged message survives a SIGKILL mid-stream.
#[test]
fn sync_flush_acknowledged_messages_survive_sigkill() {
    let seed = seed();
    println!("seed {seed}");
    let mut node = Node::start("sync");
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatCrash{seed}");
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();

    run_clients("crash-produce", |runtime| {
        let acked = acked.clone();
        let (namesrv, topic, node) = (&namesrv, &topic, &mut node);
        async move {
            let producer =
                Arc::new(start_producer(&runtime, namesrv, &format!("PG_crash_{seed}")).await);
            let stop = Arc::new(AtomicBool::new(false));
            let sent = Arc::new(AtomicUsize::new(0));
            let stream = {
                let (producer, stop, sent, acked) =
                    (producer.clone(), stop.clone(), sent.clone(), acked.clone());
                let topic = topic.clone();
                tokio::spawn(async move {
                    let mut i = 0usize;
                    let mut errors = 0usize;
                    // Bounded: stops at 100_000 messages, or after the node is gone and
                    // sends have failed a few times.
                    while i < 100_000 && !(stop.load(Ordering::Acquire) && errors >= 3) {
                        let (body, key) = numbered(seed, "crash", i);
                        let msg = message(&topic, &body, "TagK", &key);
                        match producer.send_with_timeout(msg, 3_000).await {
                            Ok(Some(r)) if r.send_status == SendStatus::SendOk => {
                                acked.lock().unwrap().push(body)
                            }
                            Ok(_) => {}
                            Err(_) => errors += 1,
                        }
                        sent.fetch_add(1, Ordering::Release);
                        i += 1;
                    }
                })
            };
            wait_until(
                "200 acknowledged sends before the kill",
                Duration::from_secs(60),
                || acked.lock().unwrap().len() >= 200,
                || format!("acked {}", acked.lock().unwrap().len()),
            )
            .await;
            node.kill();
            stop.store(true, Ordering::Release);
            tokio::time::timeout(Duration::from_secs(120), stream)
                .await
                .expect("the send loop ends once the node is gone")
                .expect("the send loop does not panic");
            println!(
                "seed {seed}: {} sends attempted, {} acknowledged before/around the kill",
                sent.load(Ordering::Acquire),
                acked.lock().unwrap().len()
            );
            if let Ok(mut producer) = Arc::try_unwrap(producer) {
                producer.shutdown().await;
            }
        }
    });

    node.restart();
    let expected: BTreeMap<String, Expected> = acked
        .lock()
        .unwrap()
        .iter()
        .map(|body| {
            let i = body.rsplit('-').next().unwrap();
            (
                body.clone(),
                Expected::new("TagK", format!("crash-key-{i}")),
            )
        })
        .collect();
    run_clients("crash-consume", |runtime| {
        let (namesrv, topic) = (&namesrv, &topic);
        async move {
            let member = start_member(
                &runtime,
                ConsumerSpec {
                    namesrv,
                    group: &format!("CG_crash_{seed}"),
                    instance: "crash-consumer",
                    topic,
                    expression: "*",
                    model: MessageModel::Clustering,
                },
            )
            .await;
            wait_for_all("every acknowledged message", &[&member], &expected).await;
            let deliveries = member.collector.deliveries();
            // Unacknowledged sends may or may not have been stored; only they may be extra.
            for delivery in &deliveries {
                if !expected.contains_key(&delivery.body) {
                    assert!(
                        delivery.body.starts_with(&format!("{seed}-crash-")),
                        "seed {seed}: foreign delivery {delivery:?}"
                    );
                }
            }
            let relevant: Vec<Delivery> = deliveries
                .into_iter()
                .filter(|d| expected.contains_key(&d.body))
                .collect();
            check_deliveries(&relevant, &expected, seed);
            println!(
                "seed {seed}: all {} acknowledged messages consumed after SIGKILL + restart",
                expected.len()
            );
            member.shutdown().await;
        }
    });
    drop(node);
}

/// The CommitLog offset in an offsetMsgId (16 bytes as hex: IPv4, port, offset).
fn offset_of_msg_id(id: &str) -> u64 {
    assert_eq!(id.len(), 32, "an IPv4 offsetMsgId: {id}");
    u64::from_str_radix(&id[16..], 16).expect("hex offset")
}

/// Scenario 6: on a node of two shards, the stock producer finds every message by its key
/// (QUERY_MESSAGE, fanned out over the shards), by its offsetMsgId (VIEW_MESSAGE_BY_ID,
/// routed by the offset) and by its unique key (the producer's `view_message` falls back
/// to a `_UNIQUE_KEY_QUERY` when the id is not an offset id); an unknown key finds
/// nothing.
#[test]
fn messages_are_found_by_key_offset_id_and_unique_key() {
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatFind{seed}");
    run_clients("find", |runtime| async move {
        let mut producer = start_producer(&runtime, &namesrv, &format!("PG_find_{seed}")).await;
        let mut sent = Vec::new();
        for i in 0..16 {
            let (body, key) = numbered(seed, "find", i);
            let result = producer
                .send(message(&topic, &body, "TagF", &key))
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: send {i}: {e}"))
                .expect("a sync send has a result");
            sent.push((body, key, result));
        }
        // ringmq's offsetMsgId carries its shard in the offset's top byte; RocketMQ's is
        // the plain CommitLog offset of its one store.
        if ringmq_specific("both of ringmq's two shards store some (offsetMsgId's top byte)") {
            let shards: BTreeSet<u64> = sent
                .iter()
                .map(|(_, _, r)| offset_of_msg_id(r.offset_msg_id.as_deref().unwrap()) >> 56)
                .collect();
            assert_eq!(shards.len(), 2, "seed {seed}: both shards store some");
        }
        let body_of = |m: &rocketmq_model::common::message::message_ext::MessageExt| {
            String::from_utf8_lossy(m.message_inner().body_slice()).into_owned()
        };
        for (body, key, result) in &sent {
            let found = producer
                .query_message(&topic, key, 32, 0, i64::MAX as u64)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: query {key}: {e}"));
            let bodies: Vec<String> = found.message_list().iter().map(body_of).collect();
            assert_eq!(bodies, vec![body.clone()], "seed {seed}: by key {key}");
            let offset_id = result.offset_msg_id.as_deref().expect("an offsetMsgId");
            let viewed = producer
                .view_message(&topic, offset_id)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: view {offset_id}: {e}"));
            assert_eq!(body_of(&viewed), *body, "seed {seed}: by offset id");
        }
        let (body, _, result) = &sent[5];
        let uniq = result.msg_id.as_ref().expect("a msgId").to_string();
        let viewed = producer
            .view_message(&topic, &uniq)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: by unique key {uniq}: {e}"));
        assert_eq!(body_of(&viewed), *body, "seed {seed}: by unique key");
        let unknown = producer
            .query_message(&topic, "no-such-key", 32, 0, i64::MAX as u64)
            .await;
        assert!(
            unknown.is_err() || unknown.as_ref().unwrap().message_list().is_empty(),
            "seed {seed}: an unknown key found messages"
        );
        producer.shutdown().await;
    });
    drop(node);
}

/// Scenario 7: the stock admin client (`DefaultMQAdminExt`) reads the node's cluster,
/// runtime figures, a topic's queues, a live group's progress and connection
/// (GET_BROKER_CLUSTER_INFO, GET_BROKER_RUNTIME_INFO, GET_TOPIC_STATS_INFO,
/// GET_CONSUME_STATS, GET_CONSUMER_CONNECTION_LIST, all parsed by the client's own codecs),
/// then resets the group's offsets to a time before every message
/// (INVOKE_BROKER_TO_RESET_OFFSET): the node tells the live consumer
/// (RESET_CONSUMER_CLIENT_OFFSET), which receives the whole batch again. Last, a
/// subscription group the admin writes (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP) is stored
/// with what it set, and the admin's own GET_ALL_SUBSCRIPTIONGROUP_CONFIG reads it back
/// with those fields; the name server's topic list (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
/// has the topic; and after the admin's DELETE_SUBSCRIPTIONGROUP the group is gone from
/// the table (the live group stays).
#[test]
fn admin_client_reads_status_and_progress_and_resets_a_live_group() {
    use rocketmq_client_rust::{
        DefaultMQAdminExt, MQAdminMutationExt, MQAdminReadExt, MQAdminTopicStatsReadExt,
    };
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let broker = node.broker_addr();
    let topic = format!("CompatAdmin{seed}");
    let group = format!("CG_admin_{seed}");
    let batch = numbered_batch(seed, "admin", 12, "TagA");
    run_clients("admin", |runtime| {
        let (namesrv, broker, topic, group, batch) = (&namesrv, &broker, &topic, &group, &batch);
        async move {
            let mut producer = start_producer(&runtime, namesrv, &format!("PG_admin_{seed}")).await;
            send_each(&producer, topic, batch, seed).await;
            producer.shutdown().await;
            let member = start_member(
                &runtime,
                ConsumerSpec {
                    namesrv,
                    group,
                    instance: "admin-member",
                    topic,
                    expression: "*",
                    model: MessageModel::Clustering,
                },
            )
            .await;
            wait_for_all("the batch", &[&member], batch).await;

            let mut admin = DefaultMQAdminExt::new(Arc::clone(&runtime));
            admin.set_namesrv_addr(namesrv.as_str());
            admin.start().await.expect("start the admin client");
            let cluster = admin
                .examine_broker_cluster_info()
                .await
                .expect("cluster info");
            let brokers = cluster.broker_addr_table.expect("a broker table");
            assert!(
                brokers
                    .values()
                    .any(|data| data.broker_addrs().values().any(|a| a.as_str() == broker)),
                "seed {seed}: the cluster lists {broker}: {brokers:?}"
            );
            let figures = admin
                .fetch_broker_runtime_stats(broker.clone().into())
                .await
                .expect("runtime info");
            let version = figures
                .table
                .get("brokerVersionDesc")
                .map(|v| v.to_string());
            // Each broker names itself: ringmq its own version, RocketMQ 5.5.0 `V5_5_0`.
            let (prefix, target) = if ringmq_compat::node::is_rocketmq() {
                ("V5_5_0", "RocketMQ 5.5.0")
            } else {
                ("ringmq", "ringmq")
            };
            assert!(
                version.as_deref().is_some_and(|v| v.starts_with(prefix)),
                "seed {seed}: brokerVersionDesc of {target} starts with {prefix}: {figures:?}"
            );
            let stats = admin
                .topic_stats_at(broker.clone().into(), topic.clone().into())
                .await
                .expect("topic stats");
            let stored: i64 = stats
                .get_offset_table()
                .values()
                .map(|offset| offset.get_max_offset())
                .sum();
            assert_eq!(stored, batch.len() as i64, "seed {seed}: {stats:?}");

            // The member commits on its own timer: wait until the node has every commit.
            let queues: Vec<i32> = stats
                .get_offset_table()
                .keys()
                .map(|q| q.queue_id())
                .collect();
            wait_until(
                "the group's commits to reach the queue ends",
                Duration::from_secs(30),
                || {
                    queues.iter().all(|q| {
                        let end = raw::max_offset(broker, topic, *q);
                        end == 0 || raw::committed_offset(broker, group, topic, *q) == Some(end)
                    })
                },
                || format!("queues {queues:?}"),
            )
            .await;
            let progress = admin
                .examine_consume_stats(
                    group.clone().into(),
                    Some(topic.clone().into()),
                    None,
                    None,
                    None,
                )
                .await
                .expect("consume stats");
            assert_eq!(
                progress.get_offset_table().len(),
                queues.len(),
                "seed {seed}"
            );
            assert_eq!(progress.compute_total_diff(), 0, "seed {seed}: no lag left");
            let connection = admin
                .examine_consumer_connection_info(group.clone().into(), None)
                .await
                .expect("consumer connection");
            assert_eq!(connection.get_connection_set().len(), 1, "seed {seed}");

            let before = member.collector.len();
            let reset = admin
                .reset_consumer_offset(None, topic.clone().into(), group.clone().into(), 1, true)
                .await
                .expect("reset the group's offsets");
            assert_eq!(reset.len(), queues.len(), "seed {seed}: {reset:?}");
            assert!(
                reset.values().all(|offset| *offset == 0),
                "seed {seed}: {reset:?}"
            );
            wait_until(
                "the batch again after the reset",
                DELIVERY_DEADLINE,
                || {
                    let again: BTreeSet<String> = member.collector.deliveries()[before..]
                        .iter()
                        .map(|d| d.body.clone())
                        .collect();
                    batch.keys().all(|body| again.contains(body))
                },
                || {
                    format!(
                        "{} deliveries after the reset",
                        member.collector.len() - before
                    )
                },
            )
            .await;
            // A subscription group written by the stock admin (200) is stored as it sent it.
            let tuned_group = format!("CG_tuned_{seed}");
            let mut tuned = rocketmq_protocol::protocol::subscription::subscription_group_config::SubscriptionGroupConfig::new(tuned_group.clone().into());
            tuned.set_retry_max_times(5);
            tuned.set_consume_enable(false);
            admin
                .upsert_subscription_group(broker.clone().into(), tuned)
                .await
                .expect("upsert a subscription group");
            let table = raw::request(broker, 201, serde_json::json!({})).expect("201");
            assert_eq!(table.code, 0, "seed {seed}: {table:?}");
            let table: serde_json::Value = serde_json::from_slice(&table.body).unwrap();
            let stored = &table["subscriptionGroupTable"][tuned_group.as_str()];
            assert_eq!(stored["retryMaxTimes"], 5, "seed {seed}: {table}");
            assert_eq!(stored["consumeEnable"], false, "seed {seed}: {table}");
            assert_eq!(
                table["subscriptionGroupTable"][group.as_str()]["retryMaxTimes"],
                16,
                "seed {seed}: the live group was created with the defaults: {table}"
            );
            // The same table through the stock admin's own GET_ALL_SUBSCRIPTIONGROUP_CONFIG
            // (201) call and decoder. `ConsumerAdmin` is named, not imported: it shares
            // method names with `MQAdminReadExt`.
            let wrapper = rocketmq_client_rust::ConsumerAdmin::get_all_subscription_group(
                &admin,
                broker.clone().into(),
                5000,
            )
            .await
            .expect("201 through the admin");
            let decoded = wrapper
                .get_subscription_group_table()
                .get(tuned_group.as_str())
                .unwrap_or_else(|| panic!("seed {seed}: 201 lists {tuned_group}: {wrapper:?}"));
            assert_eq!(decoded.group_name().as_str(), tuned_group, "seed {seed}");
            assert_eq!(decoded.retry_max_times(), 5, "seed {seed}: {decoded:?}");
            assert!(!decoded.consume_enable(), "seed {seed}: {decoded:?}");
            assert_eq!(
                wrapper
                    .get_subscription_group_table()
                    .get(group.as_str())
                    .map(|live| live.retry_max_times()),
                Some(16),
                "seed {seed}: {wrapper:?}"
            );
            // The name server's topic list (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206).
            let topics = admin.fetch_all_topic_list().await.expect("206");
            assert!(
                topics.topic_list.iter().any(|t| t.as_str() == topic),
                "seed {seed}: the name server lists {topic}: {:?}",
                topics.topic_list
            );
            // DELETE_SUBSCRIPTIONGROUP (207) through the admin: 201 no longer lists it.
            rocketmq_client_rust::ConsumerAdmin::delete_subscription_group(
                &admin,
                broker.clone().into(),
                tuned_group.clone().into(),
                Some(true),
            )
            .await
            .expect("207 through the admin");
            let after = rocketmq_client_rust::ConsumerAdmin::get_all_subscription_group(
                &admin,
                broker.clone().into(),
                5000,
            )
            .await
            .expect("201 after the delete");
            assert!(
                !after
                    .get_subscription_group_table()
                    .contains_key(tuned_group.as_str()),
                "seed {seed}: {tuned_group} deleted: {after:?}"
            );
            assert!(
                after
                    .get_subscription_group_table()
                    .contains_key(group.as_str()),
                "seed {seed}: only {tuned_group} went: {after:?}"
            );
            admin.shutdown().await;
            member.shutdown().await;
        }
    });
    drop(node);
}

/// Scenario 8: an orderly push consumer (which consumes a queue only while it holds the
/// queue's lock, LOCK_BATCH_MQ) receives every message, each queue's in queue-offset order
/// with no gap and nothing twice; its shutdown releases the locks (UNLOCK_BATCH_MQ).
#[test]
fn an_orderly_consumer_receives_every_queue_in_order() {
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatOrderly{seed}");
    let group = format!("CG_orderly_{seed}");
    let batch = numbered_batch(seed, "orderly", 40, "TagO");
    run_clients("orderly", |runtime| {
        let (namesrv, topic, group, batch) = (&namesrv, &topic, &group, &batch);
        async move {
            let mut producer =
                start_producer(&runtime, namesrv, &format!("PG_orderly_{seed}")).await;
            send_each(&producer, topic, batch, seed).await;
            producer.shutdown().await;
            let member = start_orderly_member(
                &runtime,
                ConsumerSpec {
                    namesrv,
                    group,
                    instance: "orderly-member",
                    topic,
                    expression: "*",
                    model: MessageModel::Clustering,
                },
            )
            .await;
            wait_for_all("the batch, consumed orderly", &[&member], batch).await;
            settle_quietly(&[&member], Duration::from_secs(2)).await;
            let deliveries = member.collector.deliveries();
            check_deliveries(&deliveries, batch, seed);
            assert_eq!(duplicates(&deliveries), vec![], "seed {seed}: duplicates");
            let mut per_queue: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
            for delivery in &deliveries {
                per_queue
                    .entry(delivery.queue_id)
                    .or_default()
                    .push(delivery.queue_offset);
            }
            for (queue, offsets) in &per_queue {
                let expected: Vec<i64> = (0..offsets.len() as i64).collect();
                assert_eq!(offsets, &expected, "seed {seed}: queue {queue} in order");
            }
            println!("seed {seed}: {} queues consumed in order", per_queue.len());
            member.shutdown().await;
        }
    });
    drop(node);
}

/// Scenario: the stock producer sends with delay levels (`setDelayTimeLevel`) to a node
/// started with short `messageDelayLevel`s; a consumer gets each message once, with its
/// body, tags and keys, on its own topic, never before its level's delay has passed since
/// it was sent, without `DELAY` and with `REAL_TOPIC`.
#[test]
fn delayed_messages_arrive_no_earlier_than_their_level() {
    let seed = seed();
    println!("seed {seed}");
    // Level 1: 1 s, level 2: 3 s (ringmq also takes ms; Java's units are enough here).
    let node = Node::start_with("async", &["messageDelayLevel=1s 3s"]);
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatDelay{seed}");
    let group = format!("CG_delay_{seed}");
    let broker = node.broker_addr();
    run_clients("delay", |runtime| async move {
        // The consumers start before the first send (see prepare_topic).
        prepare_topic(&runtime, &namesrv, &broker, &topic).await;
        let instance = format!("delay-0-{seed}");
        let member = start_member(
            &runtime,
            ConsumerSpec {
                namesrv: &namesrv,
                group: &group,
                instance: &instance,
                topic: &topic,
                expression: "*",
                model: MessageModel::Clustering,
            },
        )
        .await;
        let producer = start_producer(&runtime, &namesrv, &format!("PG_delay_{seed}")).await;
        let mut expected = BTreeMap::new();
        let mut levels = BTreeMap::new();
        for i in 0..6 {
            let (body, key) = numbered(seed, "delay", i);
            // 1, 2, and 5 (above the last level: delayed by the last, 3 s).
            let level = [1, 2, 5][i % 3];
            let mut msg = message(&topic, &body, "TagD", &key);
            msg.set_delay_time_level(level);
            let result = producer
                .send(msg)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: send {i}: {e}"))
                .expect("a result");
            assert_eq!(result.send_status, SendStatus::SendOk);
            levels.insert(body.clone(), level);
            expected.insert(body, Expected::new("TagD", key));
        }
        wait_for_all("every delayed message", &[&member], &expected).await;
        settle_quietly(&[&member], Duration::from_secs(2)).await;
        let deliveries = member.collector.deliveries();
        check_deliveries(&deliveries, &expected, seed);
        assert_eq!(
            duplicates(&deliveries),
            vec![],
            "seed {seed}: delivered twice"
        );
        for delivery in &deliveries {
            let delay_ms = if levels[&delivery.body] == 1 {
                1000
            } else {
                3000
            };
            assert_eq!(delivery.topic, topic, "seed {seed}: {delivery:?}");
            assert_eq!(delivery.real_topic.as_deref(), Some(topic.as_str()));
            // Sent (born) before the node stored it: due at born + delay at the earliest.
            assert!(
                delivery.store_timestamp >= delivery.born_timestamp + delay_ms,
                "seed {seed}: stored for consumers {} ms after it was sent, its level waits {delay_ms}: {delivery:?}",
                delivery.store_timestamp - delivery.born_timestamp
            );
            assert!(
                delivery.received_ms >= delivery.born_timestamp + delay_ms,
                "seed {seed}: received early: {delivery:?}"
            );
        }
        // Last, so every other check has run: no delivered message still carries DELAY.
        // RocketMQ 5.5.0 fails this one (a RocketMQ defect: ScheduleMessageService#
        // messageTimeUp encodes the stored properties before it clears DELAY, so the clear
        // never reaches the message; apache/rocketmq#11037, open).
        let with_delay: Vec<&Delivery> = deliveries.iter().filter(|d| d.delay.is_some()).collect();
        assert!(
            with_delay.is_empty(),
            "seed {seed}: DELAY left on {} of {} delivered messages{}: {with_delay:?}",
            with_delay.len(),
            deliveries.len(),
            rocketmq_defect(
                "apache/rocketmq#11037: messageTimeUp encodes the properties before clearing DELAY"
            )
        );
        member.shutdown().await;
        let mut producer = producer;
        producer.shutdown().await;
    });
    drop(node);
}

/// How a timer message of the timer scenario asks for its due time.
#[derive(Clone, Copy, Debug)]
enum TimerAsk {
    DelayMillis(u64),
    DelaySecs(u64),
    /// `deliver_time_ms` this many ms after the send.
    DeliverIn(u64),
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Scenario 10 (5.x timer messages, reference-2 §1.5): the stock producer sends messages
/// with the builder's `delay_millis`, `delay_secs` and `deliver_time_ms` (due 0.3 to 2 s
/// ahead, out of order), after a plain message that shows the consumer is in place. A
/// stock push consumer gets each once, on its own topic and the queue it was sent to, with
/// its body, tags and keys, never before its due time: not before the time the producer
/// asked for (measured from just before its send), nor before the `TIMER_OUT_MS` it
/// carries, nor before the born time plus its delay. It carries Java's delivered-timer
/// properties: `TIMER_OUT_MS` and `TIMER_DEQUEUE_MS` (not before it), the sender's
/// `TIMER_*` property, no `REAL_TOPIC`/`REAL_QID`, and its msgId as `UNIQ_KEY`.
/// RocketMQ rounds a due time down to its timer precision (`timerPrecisionMs`, 1 s), so
/// there the due time and the store time may come up to 1 s before what was asked for
/// ([`timer_precision_ms`]); on ringmq, not at all.
#[test]
fn timer_messages_arrive_once_no_earlier_than_due() {
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let topic = format!("CompatTimer{seed}");
    let group = format!("CG_timer_{seed}");
    let broker = node.broker_addr();
    run_clients("timer", |runtime| async move {
        // The consumers start before the first send (see prepare_topic).
        prepare_topic(&runtime, &namesrv, &broker, &topic).await;
        let instance = format!("timer-0-{seed}");
        let member = start_member(
            &runtime,
            ConsumerSpec {
                namesrv: &namesrv,
                group: &group,
                instance: &instance,
                topic: &topic,
                expression: "*",
                model: MessageModel::Clustering,
            },
        )
        .await;
        let producer = start_producer(&runtime, &namesrv, &format!("PG_timer_{seed}")).await;
        // A plain message first: once it arrives, the topic exists and the consumer owns
        // its queues, so nothing below can be missed by a late rebalance.
        let mut expected = BTreeMap::new();
        let (body, key) = numbered(seed, "timer-plain", 0);
        producer
            .send(message(&topic, &body, "TagP", &key))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: plain send: {e}"))
            .expect("a result");
        expected.insert(body, Expected::new("TagP", key));
        wait_for_all("the plain message", &[&member], &expected).await;

        let asks = [
            TimerAsk::DelayMillis(1200),
            TimerAsk::DeliverIn(1800),
            TimerAsk::DelaySecs(1),
            TimerAsk::DelayMillis(300),
            TimerAsk::DeliverIn(700),
            TimerAsk::DelaySecs(2),
        ];
        // body → (what it asked, the earliest due time it asked for, its msgId, its queue)
        let mut sent = BTreeMap::new();
        for (i, ask) in asks.iter().enumerate() {
            let (body, key) = numbered(seed, "timer", i);
            let sent_ms = now_ms();
            let builder = Message::builder()
                .topic(topic.as_str())
                .tags("TagT")
                .key(key.as_str())
                .body_slice(body.as_bytes());
            let (builder, earliest) = match *ask {
                TimerAsk::DelayMillis(ms) => (builder.delay_millis(ms), sent_ms + ms as i64),
                TimerAsk::DelaySecs(s) => (builder.delay_secs(s), sent_ms + s as i64 * 1000),
                TimerAsk::DeliverIn(ms) => {
                    let at = sent_ms + ms as i64;
                    (builder.deliver_time_ms(at as u64), at)
                }
            };
            let result = producer
                .send(builder.build().expect("a valid message"))
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: timer send {i}: {e}"))
                .expect("a result");
            assert_eq!(result.send_status, SendStatus::SendOk, "seed {seed}: {i}");
            let msg_id = result.msg_id.as_ref().expect("a msgId").to_string();
            let queue = result.message_queue.as_ref().expect("a queue").queue_id();
            sent.insert(body.clone(), (*ask, earliest, msg_id, queue));
            expected.insert(body, Expected::new("TagT", key));
        }
        wait_for_all("every timer message", &[&member], &expected).await;
        settle_quietly(&[&member], Duration::from_secs(2)).await;
        let deliveries = member.collector.deliveries();
        check_deliveries(&deliveries, &expected, seed);
        assert_eq!(
            duplicates(&deliveries),
            vec![],
            "seed {seed}: delivered twice"
        );
        let mut latest = 0;
        for delivery in &deliveries {
            assert_eq!(delivery.topic, topic, "seed {seed}: {delivery:?}");
            let Some((ask, earliest, msg_id, queue)) = sent.get(&delivery.body) else {
                // The plain message: no timer properties.
                assert_eq!(delivery.picked.get("TIMER_OUT_MS"), None, "{delivery:?}");
                continue;
            };
            assert_eq!(delivery.queue_id, *queue, "seed {seed}: {delivery:?}");
            let prop = |key: &str| delivery.picked.get(key).map(String::as_str);
            let number = |key: &str| -> i64 {
                prop(key)
                    .unwrap_or_else(|| panic!("seed {seed}: no {key} on {delivery:?}"))
                    .parse()
                    .unwrap_or_else(|_| panic!("seed {seed}: {key} of {delivery:?}"))
            };
            let due = number("TIMER_OUT_MS");
            // ringmq: never before the time asked for. RocketMQ rounds the due time down to
            // its timer precision (1 s), so it may be due up to that much earlier.
            let precision = timer_precision_ms();
            assert!(
                due >= *earliest - precision,
                "seed {seed}: due at {due}, {} ms before the {earliest} asked for (timer \
                 precision {precision} ms): {delivery:?}",
                earliest - due
            );
            assert!(
                delivery.store_timestamp >= due,
                "seed {seed}: stored for consumers {} ms before its due time: {delivery:?}",
                due - delivery.store_timestamp
            );
            assert!(
                delivery.received_ms >= due,
                "seed {seed}: received before its due time: {delivery:?}"
            );
            assert!(
                number("TIMER_DEQUEUE_MS") >= due,
                "seed {seed}: dequeued before its due time: {delivery:?}"
            );
            let (sender_key, sender_value, delay_ms) = match *ask {
                TimerAsk::DelayMillis(ms) => ("TIMER_DELAY_MS", ms.to_string(), ms as i64),
                TimerAsk::DelaySecs(s) => ("TIMER_DELAY_SEC", s.to_string(), s as i64 * 1000),
                TimerAsk::DeliverIn(_) => ("TIMER_DELIVER_MS", earliest.to_string(), 0),
            };
            assert_eq!(
                prop(sender_key),
                Some(sender_value.as_str()),
                "seed {seed}: the sender's {sender_key} kept: {delivery:?}"
            );
            if !matches!(ask, TimerAsk::DeliverIn(_)) {
                assert!(
                    delivery.store_timestamp >= delivery.born_timestamp + delay_ms - precision,
                    "seed {seed}: stored {} ms after it was born, it asked for {delay_ms} \
                     (timer precision {precision} ms): {delivery:?}",
                    delivery.store_timestamp - delivery.born_timestamp
                );
            }
            // REAL_TOPIC/REAL_QID: checked last, below.
            assert_eq!(delivery.delay, None, "seed {seed}: {delivery:?}");
            assert_eq!(
                prop("UNIQ_KEY"),
                Some(msg_id.as_str()),
                "seed {seed}: the msgId the producer got: {delivery:?}"
            );
            latest = latest.max(delivery.store_timestamp - due);
        }
        println!("seed {seed}: latest delivery {latest} ms after its due time");
        // Last, so every other check has run: no delivered timer message still carries
        // REAL_TOPIC or REAL_QID. RocketMQ 5.5.0 fails this one (a RocketMQ defect:
        // TimerMessageStore#convertMessage encodes the stored properties before it clears
        // them; apache/rocketmq#10972, fixed after 5.5.0 by #10974).
        let with_real: Vec<&Delivery> = deliveries
            .iter()
            .filter(|d| d.real_topic.is_some() || d.picked.contains_key("REAL_QID"))
            .collect();
        assert!(
            with_real.is_empty(),
            "seed {seed}: REAL_TOPIC/REAL_QID left on {} of {} delivered messages{}: \
             {with_real:?}",
            with_real.len(),
            deliveries.len(),
            rocketmq_defect(
                "apache/rocketmq#10972: TimerMessageStore#convertMessage encodes the \
                 properties before clearing REAL_TOPIC/REAL_QID"
            )
        );
        member.shutdown().await;
        let mut producer = producer;
        producer.shutdown().await;
    });
    drop(node);
}

/// Records each delivery's body and reconsume count, and asks for every message again.
#[derive(Clone, Default)]
struct AlwaysLater {
    seen: Arc<Mutex<Vec<(String, i32)>>>,
}

impl rocketmq_client_rust::MessageListenerConcurrently for AlwaysLater {
    fn consume_message(
        &self,
        msgs: &[&rocketmq_model::common::message::message_ext::MessageExt],
        _context: &rocketmq_client_rust::ConsumeConcurrentlyContext,
    ) -> rocketmq_client_rust::ClientResult<rocketmq_client_rust::ConsumeConcurrentlyStatus> {
        let mut seen = self.seen.lock().unwrap();
        for msg in msgs {
            let body = String::from_utf8_lossy(msg.message_inner().body_slice()).into_owned();
            seen.push((body, msg.reconsume_times()));
        }
        Ok(rocketmq_client_rust::ConsumeConcurrentlyStatus::ReconsumeLater)
    }
}

/// Scenario 9: a push consumer that answers RECONSUME_LATER gets each message again
/// (CONSUMER_SEND_MSG_BACK, the node's delay levels, the retry topic) with its reconsume
/// count rising 0, 1, 2, and after `max_reconsume_times` (2) tries more the node parks it
/// in `%DLQ%<group>`. The node runs with delay levels of a few hundred ms
/// (`messageDelayLevel`), so the whole schedule takes seconds.
#[test]
fn a_consumer_that_keeps_failing_sees_rising_reconsume_times_then_the_dlq() {
    use rocketmq_client_rust::MQPushConsumer;
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start_with(
        "async",
        &["messageDelayLevel=100ms 200ms 300ms 400ms 500ms 600ms"],
    );
    let namesrv = node.namesrv_addr();
    let broker = node.broker_addr();
    let topic = format!("CompatRetry{seed}");
    let group = format!("CG_retry_{seed}");
    let batch = numbered_batch(seed, "retry", 3, "TagR");
    run_clients("retry", |runtime| {
        let (namesrv, broker, topic, group, batch) = (&namesrv, &broker, &topic, &group, &batch);
        async move {
            let mut producer = start_producer(&runtime, namesrv, &format!("PG_retry_{seed}")).await;
            send_each(&producer, topic, batch, seed).await;
            producer.shutdown().await;
            let listener = AlwaysLater::default();
            let mut consumer = rocketmq_client_rust::DefaultMQPushConsumer::builder(Arc::clone(&runtime))
                .client_config(ringmq_compat::client_config(namesrv, "retry-member"))
                .name_server_addr(namesrv.to_string())
                .consumer_group(group.to_string())
                .message_model(MessageModel::Clustering)
                .consume_from_where(
                    rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere::ConsumeFromFirstOffset,
                )
                .max_reconsume_times(2)
                .build();
            consumer
                .subscribe(topic.as_str(), "*")
                .await
                .expect("subscribe");
            consumer.register_message_listener_concurrently(listener.clone());
            consumer.start().await.expect("start the push consumer");
            let dlq = format!("%DLQ%{group}");
            wait_until(
                "every message tried 3 times and then in the DLQ",
                DELIVERY_DEADLINE,
                || {
                    let seen = listener.seen.lock().unwrap();
                    let all_tried = batch.keys().all(|body| {
                        let times: BTreeSet<i32> = seen
                            .iter()
                            .filter(|(b, _)| b == body)
                            .map(|(_, t)| *t)
                            .collect();
                        times == BTreeSet::from([0, 1, 2])
                    });
                    all_tried && raw::max_offset(broker, &dlq, 0) == batch.len() as i64
                },
                || {
                    format!(
                        "deliveries {:?}, DLQ holds {}",
                        listener.seen.lock().unwrap(),
                        raw::max_offset(broker, &dlq, 0)
                    )
                },
            )
            .await;
            let seen = listener.seen.lock().unwrap().clone();
            assert!(
                seen.iter().all(|(_, times)| *times <= 2),
                "seed {seed}: nothing is delivered after its last try: {seen:?}"
            );
            println!("seed {seed}: {} deliveries, then the DLQ", seen.len());
            consumer.shutdown().await;
        }
    });
    drop(node);
}

/// Records each delivery (body, reconsume times, when) and fails the first delivery of
/// every third message (its body ends in a multiple of 3), acknowledging the rest.
#[derive(Clone, Default)]
struct FailEveryThirdOnce {
    seen: Arc<Mutex<Vec<(String, i32, std::time::Instant)>>>,
}

impl FailEveryThirdOnce {
    fn fails(body: &str) -> bool {
        body.rsplit('-')
            .next()
            .and_then(|i| i.parse::<usize>().ok())
            .is_some_and(|i| i % 3 == 0)
    }
}

impl rocketmq_client_rust::MessageListenerConcurrently for FailEveryThirdOnce {
    fn consume_message(
        &self,
        msgs: &[&rocketmq_model::common::message::message_ext::MessageExt],
        _context: &rocketmq_client_rust::ConsumeConcurrentlyContext,
    ) -> rocketmq_client_rust::ClientResult<rocketmq_client_rust::ConsumeConcurrentlyStatus> {
        let mut seen = self.seen.lock().unwrap();
        let mut later = false;
        for msg in msgs {
            let body = String::from_utf8_lossy(msg.message_inner().body_slice()).into_owned();
            later |= msg.reconsume_times() == 0 && Self::fails(&body);
            seen.push((body, msg.reconsume_times(), std::time::Instant::now()));
        }
        Ok(if later {
            rocketmq_client_rust::ConsumeConcurrentlyStatus::ReconsumeLater
        } else {
            rocketmq_client_rust::ConsumeConcurrentlyStatus::ConsumeSuccess
        })
    }
}

/// Scenario 11: POP. The stock admin (`set_message_request_mode`, SET_MESSAGE_REQUEST_MODE)
/// switches a group to POP; a stock push consumer with server-side assignment
/// (`client_rebalance(false)`, QUERY_ASSIGNMENT answers `mode: "POP"`) then pops
/// (POP_MESSAGE), acknowledges what it consumed (BATCH_ACK_MESSAGE) and, for what it
/// fails, asks for it later (CHANGE_MESSAGE_INVISIBLETIME, 10 s: the client's first
/// `popDelayLevel`). Every message arrives; each failed one comes again with reconsume
/// times 1, no earlier than 10 s after its first delivery; no acknowledged one comes
/// twice; and the group's committed offsets reach the queue ends.
#[test]
fn a_group_switched_to_pop_consumes_and_gets_again_what_it_did_not_acknowledge() {
    use rocketmq_client_rust::TopicAdmin;
    use rocketmq_client_rust::{DefaultMQAdminExt, MQPushConsumer};
    use rocketmq_model::common::message::message_enum::MessageRequestMode;
    let seed = seed();
    println!("seed {seed}");
    let node = Node::start("async");
    let namesrv = node.namesrv_addr();
    let broker = node.broker_addr();
    let topic = format!("CompatPop{seed}");
    let group = format!("CG_pop_{seed}");
    let batch = numbered_batch(seed, "pop", 12, "TagP");
    run_clients("pop", |runtime| {
        let (namesrv, broker, topic, group, batch) = (&namesrv, &broker, &topic, &group, &batch);
        async move {
            let mut producer = start_producer(&runtime, namesrv, &format!("PG_pop_{seed}")).await;
            send_each(&producer, topic, batch, seed).await;
            producer.shutdown().await;

            let mut admin = DefaultMQAdminExt::new(Arc::clone(&runtime));
            admin.set_namesrv_addr(namesrv.as_str());
            admin.start().await.expect("start the admin client");
            admin
                .set_message_request_mode(
                    broker.clone().into(),
                    topic.clone().into(),
                    group.clone().into(),
                    MessageRequestMode::Pop,
                    -1,
                    3000,
                )
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: set_message_request_mode: {e}"));
            admin.shutdown().await;

            let listener = FailEveryThirdOnce::default();
            let mut consumer = rocketmq_client_rust::DefaultMQPushConsumer::builder(Arc::clone(&runtime))
                .client_config(ringmq_compat::client_config(namesrv, "pop-member"))
                .name_server_addr(namesrv.to_string())
                .consumer_group(group.to_string())
                .message_model(MessageModel::Clustering)
                .client_rebalance(false)
                .consume_from_where(
                    rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere::ConsumeFromFirstOffset,
                )
                .build();
            consumer
                .subscribe(topic.as_str(), "*")
                .await
                .expect("subscribe");
            consumer.register_message_listener_concurrently(listener.clone());
            consumer.start().await.expect("start the push consumer");
            let failing: BTreeSet<&String> = batch
                .keys()
                .filter(|body| FailEveryThirdOnce::fails(body))
                .collect();
            assert_eq!(failing.len(), 4);
            wait_until(
                "every message, and every failed one again",
                DELIVERY_DEADLINE,
                || {
                    let seen = listener.seen.lock().unwrap();
                    batch
                        .keys()
                        .all(|body| seen.iter().any(|(b, _, _)| b == body))
                        && failing
                            .iter()
                            .all(|body| seen.iter().any(|(b, t, _)| b == *body && *t >= 1))
                },
                || format!("deliveries {:?}", listener.seen.lock().unwrap()),
            )
            .await;
            // The acknowledgements reach the node: the committed offsets are the ends.
            let queues: Vec<i32> = (0..8)
                .filter(|q| raw::max_offset(broker, topic, *q) > 0)
                .collect();
            wait_until(
                "the group's committed offsets to reach the queue ends",
                Duration::from_secs(30),
                || {
                    queues.iter().all(|q| {
                        raw::committed_offset(broker, group, topic, *q)
                            == Some(raw::max_offset(broker, topic, *q))
                    })
                },
                || {
                    format!(
                        "committed {:?}",
                        queues
                            .iter()
                            .map(|q| (
                                raw::committed_offset(broker, group, topic, *q),
                                raw::max_offset(broker, topic, *q)
                            ))
                            .collect::<Vec<_>>()
                    )
                },
            )
            .await;
            let seen = listener.seen.lock().unwrap().clone();
            for body in batch.keys() {
                let deliveries: Vec<&(String, i32, std::time::Instant)> =
                    seen.iter().filter(|(b, _, _)| b == body).collect();
                if failing.contains(body) {
                    assert_eq!(
                        deliveries.iter().map(|(_, t, _)| *t).collect::<Vec<_>>(),
                        vec![0, 1],
                        "seed {seed}: {body}: {seen:?}"
                    );
                    let waited = deliveries[1].2 - deliveries[0].2;
                    // The client asked for 10 s; allow for its own clock's rounding.
                    assert!(
                        waited >= Duration::from_millis(9_500),
                        "seed {seed}: {body} came back after {waited:?}"
                    );
                } else {
                    assert_eq!(
                        deliveries.len(),
                        1,
                        "seed {seed}: acknowledged {body} came again: {seen:?}"
                    );
                }
            }
            println!("seed {seed}: {} POP deliveries", seen.len());
            consumer.shutdown().await;
        }
    });
    drop(node);
}
