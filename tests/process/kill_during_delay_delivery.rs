//! A real `ringmq serve` process (two shards, SYNC_FLUSH, short delay levels
//! `200ms 500ms 1s`, delay cursors written every 50 ms) killed with SIGKILL at seeded
//! random moments while a producer sends delayed messages of every level and the
//! schedulers deliver them; each start recovers the last directory (a torn or unreadable
//! `config/delayOffset.json` would stop the start). At the end, with one more start:
//! - every acknowledged delayed message is delivered to the topic and queue it was sent
//!   to, with its body (pulled back);
//! - no delivered copy was stored before its scheduled record's store time plus its
//!   level's delay (the scheduled records are pulled from `SCHEDULE_TOPIC_XXXX`);
//! - nothing is delivered that was never sent; copies delivered twice (the cursor written
//!   behind the deliveries, at-least-once) are allowed and counted.
//!
//! `RINGMQ_KILL_SEED` picks the moments and the levels; the seed is printed, and named in
//! every failure.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use common::model::{pull_new, wait_until_delivered};
use common::raw::Raw;
use common::serve::{kill_seed, Serve};
use common::Rng;
use ringmq::broker::delay::DELAY;
use ringmq::remoting::codes::response;
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::RemotingCommand;
use ringmq::store::properties;
use ringmq::store::record::RecordView;
use ringmq::store::topic::SCHEDULE_TOPIC;

const TOPIC: &str = "Later";
const QUEUES: i32 = 4;
const LEVELS: &str = "200ms 500ms 1s";
const LEVEL_MS: [i64; 3] = [200, 500, 1000];
const KILLS: usize = 5;
/// Longest the final start may take to deliver everything still waiting.
const PATIENCE: Duration = Duration::from_secs(20);

fn start(dir: &Path, seed: u64) -> Serve {
    let levels = format!("messageDelayLevel={LEVELS}");
    let args = [
        "--flush",
        "sync",
        "--shards",
        "2",
        "--segment-size",
        "1048576",
        "--set",
        "maxMessageSize=8192",
        "--set",
        &levels,
        // Many cursor writes, so kills land inside them too.
        "--set",
        "flushDelayOffsetInterval=50",
    ];
    Serve::start(dir, &args, &format!("seed {seed}"))
}

fn delayed_send(queue: i32, body: &str, level: usize) -> RemotingCommand {
    let mut send = send_request_v1(TOPIC, queue, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, DELAY, &level.to_string());
    send.put_ext("properties", props);
    send
}

/// One stored record as the checks need it.
struct Stored {
    queue: i32,
    store_ms: i64,
}

fn stored(record: &RecordView<'_>) -> Stored {
    Stored {
        queue: record.queue_id,
        store_ms: record.store_timestamp,
    }
}

/// What the producer knows of one message it sent.
struct Sent {
    queue: i32,
    level: usize,
    acked: bool,
}

/// `KILLS` rounds of random delayed sends, each ended by a SIGKILL: every send made, and
/// whether it was acknowledged.
fn send_through_kills(dir: &Path, seed: u64, rng: &mut Rng) -> BTreeMap<String, Sent> {
    let mut sent: BTreeMap<String, Sent> = BTreeMap::new();
    let mut next_id = 0u64;
    for round in 0..KILLS {
        let serve = start(dir, seed);
        let addr = serve.addr;
        // Some rounds end with deliveries in flight, some right after sends.
        let run_for = Duration::from_millis(rng.range(300, 1500));
        let killer = serve.kill_after(run_for);
        let mut raw = Raw::connect(addr);
        let until = Instant::now() + run_for + Duration::from_secs(2);
        let mut acked_now = 0;
        while Instant::now() < until {
            let queue = rng.range(0, QUEUES as u64) as i32;
            let level = rng.range(1, LEVEL_MS.len() as u64 + 1) as usize;
            let body = format!("m{next_id}-r{round}");
            next_id += 1;
            // Recorded before the send: a kill may store it without acknowledging it.
            sent.insert(
                body.clone(),
                Sent {
                    queue,
                    level,
                    acked: false,
                },
            );
            let Some(answer) = raw.try_call(delayed_send(queue, &body, level)) else {
                break; // killed
            };
            assert_eq!(answer.code, response::SUCCESS, "seed {seed}: {answer:?}");
            assert_eq!(answer.opt_str("queueId"), Some(queue.to_string().as_str()));
            sent.get_mut(&body).unwrap().acked = true;
            acked_now += 1;
        }
        killer.join().unwrap();
        println!(
            "seed {seed}: round {round}: killed after {run_for:?}, {acked_now} sends acknowledged"
        );
    }
    sent
}

/// Every delivered message was sent, scheduled once on its level, and delivered on its
/// queue no earlier than due; (copies delivered twice, delivered but never acknowledged).
fn check_deliveries(
    seed: u64,
    sent: &BTreeMap<String, Sent>,
    scheduled: &HashMap<String, Vec<Stored>>,
    delivered: &HashMap<String, Vec<Stored>>,
) -> (usize, usize) {
    let mut duplicates = 0;
    let mut unacked_delivered = 0;
    for (body, copies) in delivered {
        let what = sent
            .get(body)
            .unwrap_or_else(|| panic!("seed {seed}: {body} delivered but never sent"));
        if !what.acked {
            unacked_delivered += 1;
        }
        let waiting = scheduled
            .get(body)
            .unwrap_or_else(|| panic!("seed {seed}: {body} delivered without a scheduled record"));
        assert_eq!(waiting.len(), 1, "seed {seed}: {body} scheduled twice");
        assert_eq!(
            waiting[0].queue as usize,
            what.level - 1,
            "seed {seed}: {body} scheduled on the wrong level"
        );
        let due = waiting[0].store_ms + LEVEL_MS[what.level - 1];
        for copy in copies {
            assert_eq!(
                copy.queue, what.queue,
                "seed {seed}: {body} on the wrong queue"
            );
            assert!(
                copy.store_ms >= due,
                "seed {seed}: {body} (level {}) stored at {}, before its due time {due}",
                what.level,
                copy.store_ms
            );
        }
        duplicates += copies.len() - 1;
    }
    (duplicates, unacked_delivered)
}

#[test]
fn sigkill_during_delay_delivery_loses_no_delayed_message_and_delivers_none_early() {
    let began = Instant::now();
    let seed = kill_seed(0xde1a_7ed5);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let sent = send_through_kills(dir.path(), seed, &mut rng);

    let serve = start(dir.path(), seed);
    let mut raw = Raw::connect(serve.addr);
    let acked: Vec<&String> = sent
        .iter()
        .filter(|(_, sent)| sent.acked)
        .map(|(body, _)| body)
        .collect();
    assert!(
        acked.len() > 50,
        "seed {seed}: only {} acknowledged",
        acked.len()
    );
    let delivered = wait_until_delivered(
        &mut raw,
        TOPIC,
        QUEUES,
        &acked,
        PATIENCE,
        "every acknowledged delayed message delivered",
        stored,
    );
    // The scheduled records, for their store times (nothing expires: no retention runs).
    let mut scheduled: HashMap<String, Vec<Stored>> = HashMap::new();
    for queue in 0..LEVEL_MS.len() as i32 {
        pull_new(
            &mut raw,
            SCHEDULE_TOPIC,
            queue,
            &mut 0,
            &mut scheduled,
            &stored,
        );
    }

    let (duplicates, unacked_delivered) = check_deliveries(seed, &sent, &scheduled, &delivered);
    println!(
        "seed {seed}: {} acknowledged, {} delivered ({unacked_delivered} of them never \
         acknowledged), {duplicates} delivered twice after a kill; {:?} in all",
        acked.len(),
        delivered.len(),
        began.elapsed()
    );
    serve.kill();
}
