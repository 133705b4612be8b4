//! A slave keeps a copy of its master's timer checkpoint, per shard, within its
//! `slaveMetadataSyncInterval` (issue 25 item 4/7), so a slave promoted by hand delivers
//! the timer messages its master had not delivered, and not again the ones it had.
//!
//! A master and its slave of two shards each: timer messages due soon and due in an hour,
//! on queues of both shards. Once the master delivered the due ones, each of the slave's
//! `shard-<n>/timer/checkpoint.json`, opened as the slave started as a master opens it
//! (the timer store's recovery over the slave's own timer queue), holds exactly the ones
//! due in an hour. Then the master dies and the slave is started again as a master: its
//! topic holds each due message once (the master's delivery, replicated), and timer
//! messages sent to it are delivered.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::model::max_offset;
use common::process_cluster::{create_topic, ProcessCluster};
use common::process_replication::{
    group_master, group_slave, read_topic, wait_logs_equal, GROUP_SHARDS,
};
use common::pull_records;
use common::raw::Raw;
use ringmq::broker::timer::store::{TimerKey, TimerLimits, TimerStore};
use ringmq::broker::timer::{queue_of_shard, TIMER_DELIVER_MS, TIMER_TOPIC};
use ringmq::io::meta::RealFiles;
use ringmq::remoting::codes::response;
use ringmq::remoting::requests::{pull_request, send_request_v1};
use ringmq::store::properties;
use ringmq::store::topic::timer_due;

const TOPIC: &str = "Timed";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
/// Timer messages due a moment after they are sent, and due in an hour.
const DUE_SOON: usize = 8;
const DUE_LATER: usize = 6;
const LIMIT: Duration = Duration::from_secs(30);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Sends `body` to `queue` of the topic, due at `due` (TIMER_DELIVER_MS).
fn send_timer(raw: &mut Raw, queue: i32, body: &str, due: i64) {
    let mut send = send_request_v1(TOPIC, queue, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, TIMER_DELIVER_MS, &due.to_string());
    send.put_ext("properties", props);
    let answer = raw.call(send);
    assert_eq!(answer.code, response::SUCCESS, "{body}: {answer:?}");
}

/// The bodies `broker` holds in the topic, each as often as it holds it.
fn delivered(broker: SocketAddr) -> Vec<String> {
    let mut bodies: Vec<String> = read_topic(broker, TOPIC, &QUEUES)
        .into_values()
        .map(|body| String::from_utf8(body).expect("text"))
        .collect();
    bodies.sort();
    bodies
}

/// Shard `shard`'s timer queue on the broker behind `raw`: each entry's key (its due time
/// as the ConsumeQueue keeps it, and its offset) and body.
fn timer_queue(raw: &mut Raw, shard: u8) -> Vec<(TimerKey, String)> {
    let queue = queue_of_shard(shard, GROUP_SHARDS);
    let end = max_offset(raw, TIMER_TOPIC, queue);
    let mut entries = Vec::new();
    while (entries.len() as u64) < end {
        let answer = raw.call(pull_request(
            TIMER_TOPIC,
            queue,
            entries.len() as u64,
            32,
            None,
            None,
        ));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        for record in pull_records(&answer.body) {
            assert_eq!(record.queue_offset as usize, entries.len(), "a gap");
            let key = TimerKey {
                due: timer_due(record.properties, record.store_timestamp),
                offset: record.queue_offset as u64,
            };
            entries.push((key, String::from_utf8(record.body.to_vec()).unwrap()));
        }
    }
    entries
}

/// The bodies a timer store opened from the checkpoint at `checkpoint` would deliver, its
/// timer queue being `queue`: what the broker that wrote it, started as a master, has still
/// to deliver. `None` while there is no checkpoint. Opened from a copy in `scratch`: the
/// store's open tidies its directory, and this one belongs to a running broker.
fn pending_in(
    checkpoint: &Path,
    scratch: &Path,
    queue: &[(TimerKey, String)],
) -> Option<BTreeSet<String>> {
    let bytes = std::fs::read(checkpoint).ok()?;
    let dir = scratch.join("timer");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("checkpoint.json"), bytes).unwrap();
    let mut store = TimerStore::open(Arc::new(RealFiles), &dir, TimerLimits::default())
        .expect("the copy opens as a master's checkpoint");
    if store.checkpoint_claims() > queue.len() as u64 {
        // Written after `queue` was read, for a longer one: look again.
        return None;
    }
    for (key, _) in &queue[store.indexed() as usize..] {
        store.index_recovered(*key);
    }
    let mut pending = BTreeSet::new();
    while let Some((key, lane)) = store.peek() {
        store.take(key, lane).unwrap();
        store.acknowledge(key, lane);
        let (_, body) = &queue[key.offset as usize];
        assert!(pending.insert(body.clone()), "{body} twice");
    }
    Some(pending)
}

fn checkpoint_of(root: &Path, shard: u8) -> PathBuf {
    root.join(format!("shard-{shard}/timer/checkpoint.json"))
}

/// Sends the timers to `master`: (the bodies due later, the bodies due soon, sorted).
fn send_timers(master: SocketAddr) -> (BTreeSet<String>, Vec<String>) {
    let sent_at = now_ms();
    let mut raw = Raw::connect(master);
    let mut later = BTreeSet::new();
    let mut soon = Vec::new();
    for n in 0..DUE_LATER + DUE_SOON {
        let queue = QUEUES[n % QUEUES.len()];
        if n % 2 == 0 && later.len() < DUE_LATER {
            let body = format!("later-{n}");
            send_timer(&mut raw, queue, &body, sent_at + 3_600_000);
            later.insert(body);
        } else {
            let body = format!("soon-{n}");
            send_timer(&mut raw, queue, &body, sent_at + 1_500);
            soon.push(body);
        }
    }
    soon.sort();
    (later, soon)
}

/// What the slave's copies (under `root`) have still to deliver, its shards' timer queues
/// being `queues`; `None` while a shard has no copy.
fn pending_in_copies(
    root: &Path,
    scratch: &Path,
    queues: &[Vec<(TimerKey, String)>],
) -> Option<BTreeSet<String>> {
    let mut waiting = BTreeSet::new();
    for (shard, queue) in queues.iter().enumerate() {
        waiting.extend(pending_in(
            &checkpoint_of(root, shard as u8),
            scratch,
            queue,
        )?);
    }
    Some(waiting)
}

/// Waits until the slave's copies, opened as they would be after a promotion, hold
/// exactly `later`; each shard's timer queue as the slave held it then.
fn wait_for_copies(
    cluster: &ProcessCluster,
    slave: SocketAddr,
    root: &Path,
    scratch: &Path,
    later: &BTreeSet<String>,
) -> Vec<Vec<(TimerKey, String)>> {
    let mut raw = Raw::connect(slave);
    let mut queues = Vec::new();
    cluster.wait_until(
        LIMIT,
        "the slave's timer checkpoints hold only the timers due later",
        || {
            queues = (0..GROUP_SHARDS)
                .map(|shard| timer_queue(&mut raw, shard))
                .collect();
            pending_in_copies(root, scratch, &queues).as_ref() == Some(later)
        },
    );
    let entries: Vec<usize> = queues.iter().map(Vec::len).collect();
    assert!(
        entries.iter().all(|&entries| entries > 0),
        "timers on every shard: {entries:?}"
    );
    queues
}

/// Sends a timer due in a moment to every queue of `promoted` and waits until they are
/// delivered: they are due after any it would deliver again (those were due at its
/// start), so once these are delivered, those would be too. Their bodies.
fn deliver_marks(cluster: &ProcessCluster, promoted: SocketAddr) -> Vec<String> {
    let mut raw = Raw::connect(promoted);
    let due = now_ms() + 300;
    let marks: Vec<String> = QUEUES.iter().map(|q| format!("mark-{q}")).collect();
    for (&queue, mark) in QUEUES.iter().zip(&marks) {
        send_timer(&mut raw, queue, mark, due);
    }
    cluster.wait_until(LIMIT, "the promoted slave delivers the new timers", || {
        let bodies = delivered(promoted);
        marks.iter().all(|mark| bodies.contains(mark))
    });
    marks
}

#[test]
fn a_promoted_slave_delivers_only_the_timers_its_master_had_not_delivered() {
    let mut cluster = ProcessCluster::start(1, vec![group_master("broker-a", "ASYNC_MASTER")]);
    let ha = cluster.broker("broker-a-0").ha_addr();
    cluster.add_broker(group_slave("broker-a", 1, ha));
    let master = cluster.broker("broker-a-0").addr;
    let slave = cluster.broker("broker-a-1").addr;
    let root = PathBuf::from(
        cluster.brokers[1]
            .props()
            .get("storePathRootDir")
            .expect("a store root"),
    );
    create_topic(master, TOPIC, QUEUES.len() as u32, QUEUES.len() as u32, 6);
    let (later, soon) = send_timers(master);
    cluster.wait_until(LIMIT, "the master delivers the timers due soon", || {
        delivered(master) == soon
    });
    let scratch = tempfile::tempdir().unwrap();
    let queues = wait_for_copies(&cluster, slave, &root, scratch.path(), &later);
    let log = cluster.brokers[1].log_text();
    assert!(
        log.contains("copying the master's timer checkpoints"),
        "the slave says it copies them:\n{}",
        cluster.brokers[1].log_tail()
    );
    wait_logs_equal(&cluster, "broker-a-0", "broker-a-1", LIMIT, true);

    // The master dies; the slave is stopped (its stop writes nothing over the copies) and
    // started as the group's master.
    cluster.broker("broker-a-0").kill();
    let promoted = cluster.broker("broker-a-1");
    promoted.stop();
    assert_eq!(
        pending_in_copies(&root, scratch.path(), &queues).as_ref(),
        Some(&later),
        "the copies after the slave's stop"
    );
    promoted.set("brokerId", 0);
    promoted.set("brokerRole", "ASYNC_MASTER");
    promoted.set("haMasterAddress", "");
    promoted.start();

    let marks = deliver_marks(&cluster, slave);
    let mut expected: Vec<String> = soon.iter().chain(&marks).cloned().collect();
    expected.sort();
    assert_eq!(
        delivered(slave),
        expected,
        "each timer the master delivered once, none due later, the new ones"
    );
}
