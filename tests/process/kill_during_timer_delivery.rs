//! A real `ringmq serve` process (two shards, SYNC_FLUSH, `timerMemoryEntries=16` so each
//! shard's timer store writes sorted runs and checkpoints them) killed with SIGKILL at
//! seeded random moments while a producer sends timer messages (`TIMER_DELAY_MS`,
//! `TIMER_DELAY_SEC`, `TIMER_DELIVER_MS`, due 0.2 to 2 s after the send) and the timer
//! schedulers deliver them; each start recovers the timer stores from what the last kill
//! left. At the end, with one more start:
//! - every acknowledged timer message is delivered to the topic and queue it was sent to,
//!   with its body (pulled back);
//! - no delivered copy was stored before its due time: neither before the time the
//!   producer asked for (measured from just before its send) nor before the `TIMER_OUT_MS`
//!   of its waiting record in `rmq_sys_wheel_timer`, which the copy carries unchanged;
//! - nothing is delivered that was never sent; copies delivered twice (deliveries
//!   acknowledged after the last timer checkpoint, at-least-once) are allowed and counted.
//!
//! `RINGMQ_KILL_SEED` picks the moments, queues and delays; the seed is printed, and named
//! in every failure.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use common::model::{pull_new, wait_until_delivered};
use common::raw::Raw;
use common::serve::{kill_seed, Serve};
use common::Rng;
use ringmq::broker::timer::{
    queue_of_shard, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, TIMER_OUT_MS, TIMER_TOPIC,
};
use ringmq::remoting::codes::response;
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::RemotingCommand;
use ringmq::store::properties;
use ringmq::store::record::RecordView;

const TOPIC: &str = "Timed";
const QUEUES: i32 = 4;
const SHARDS: u8 = 2;
const KILLS: usize = 5;
/// Longest the final start may take to deliver everything still waiting.
const PATIENCE: Duration = Duration::from_secs(30);

const SERVE_ARGS: [&str; 10] = [
    "--flush",
    "sync",
    "--shards",
    "2",
    "--segment-size",
    "1048576",
    "--set",
    "maxMessageSize=8192",
    "--set",
    // Tiny: runs are written every 16 timers per shard.
    "timerMemoryEntries=16",
];

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// How a message asks for its due time.
#[derive(Clone, Copy, Debug)]
enum Ask {
    DelayMs(i64),
    DelaySec(i64),
    /// An absolute time this many ms after the send.
    DeliverIn(i64),
}

impl Ask {
    fn random(rng: &mut Rng) -> Ask {
        match rng.range(0, 3) {
            0 => Ask::DelayMs(rng.range(200, 2000) as i64),
            1 => Ask::DelaySec(1),
            _ => Ask::DeliverIn(rng.range(200, 2000) as i64),
        }
    }

    /// The property and its value for a send made at `now`.
    fn property(self, now: i64) -> (&'static str, String) {
        match self {
            Ask::DelayMs(ms) => (TIMER_DELAY_MS, ms.to_string()),
            Ask::DelaySec(sec) => (TIMER_DELAY_SEC, sec.to_string()),
            Ask::DeliverIn(ms) => (TIMER_DELIVER_MS, (now + ms).to_string()),
        }
    }

    fn delay_ms(self) -> i64 {
        match self {
            Ask::DelayMs(ms) | Ask::DeliverIn(ms) => ms,
            Ask::DelaySec(sec) => sec * 1000,
        }
    }
}

fn timer_send(queue: i32, body: &str, (key, value): (&str, String)) -> RemotingCommand {
    let mut send = send_request_v1(TOPIC, queue, body.as_bytes(), None, None);
    let mut props = properties::normalized(send.opt_str("properties").unwrap_or("")).into_owned();
    properties::push_pair(&mut props, key, &value);
    send.put_ext("properties", props);
    send
}

/// One stored record as the checks need it.
struct Stored {
    queue: i32,
    store_ms: i64,
    timer_out: Option<i64>,
}

fn stored(record: &RecordView<'_>) -> Stored {
    let timer_out = properties::get(record.properties, TIMER_OUT_MS)
        .map(|value| value.parse().expect("TIMER_OUT_MS is a number"));
    Stored {
        queue: record.queue_id,
        store_ms: record.store_timestamp,
        timer_out,
    }
}

/// What the producer knows of one message it sent.
struct Sent {
    queue: i32,
    ask: Ask,
    /// The wall clock just before the send went out.
    sent_ms: i64,
    acked: bool,
}

/// `KILLS` rounds of random timer sends, each ended by a SIGKILL: every send made, and
/// whether it was acknowledged.
fn send_through_kills(dir: &Path, seed: u64, rng: &mut Rng) -> BTreeMap<String, Sent> {
    let what = format!("seed {seed}");
    let mut sent: BTreeMap<String, Sent> = BTreeMap::new();
    let mut next_id = 0u64;
    for round in 0..KILLS {
        let serve = Serve::start(dir, &SERVE_ARGS, &what);
        let addr = serve.addr;
        // Some rounds end with deliveries in flight, some right after sends.
        let run_for = Duration::from_millis(rng.range(300, 1500));
        let killer = serve.kill_after(run_for);
        let mut raw = Raw::connect(addr);
        let until = Instant::now() + run_for + Duration::from_secs(2);
        let mut acked_now = 0;
        while Instant::now() < until {
            let queue = rng.range(0, QUEUES as u64) as i32;
            let ask = Ask::random(rng);
            let body = format!("m{next_id}-r{round}");
            next_id += 1;
            let sent_ms = now_ms();
            // Recorded before the send: a kill may store it without acknowledging it.
            sent.insert(
                body.clone(),
                Sent {
                    queue,
                    ask,
                    sent_ms,
                    acked: false,
                },
            );
            let Some(answer) = raw.try_call(timer_send(queue, &body, ask.property(sent_ms))) else {
                break; // killed
            };
            assert_eq!(answer.code, response::SUCCESS, "seed {seed}: {answer:?}");
            assert_eq!(answer.opt_str("queueId"), Some(queue.to_string().as_str()));
            sent.get_mut(&body).unwrap().acked = true;
            acked_now += 1;
        }
        killer.join().unwrap();
        println!(
            "seed {seed}: round {round}: killed after {run_for:?}, {acked_now} timer sends \
             acknowledged"
        );
    }
    sent
}

/// The sorted runs the timer stores wrote in all (each checkpoint counts them in `nextSeq`).
fn timer_runs_written(dir: &Path, seed: u64) -> u64 {
    (0..SHARDS)
        .map(|shard| {
            let path = dir.join(format!("shard-{shard}/timer/checkpoint.json"));
            let text = std::fs::read(&path)
                .unwrap_or_else(|error| panic!("seed {seed}: {}: {error}", path.display()));
            let checkpoint: serde_json::Value = serde_json::from_slice(&text).unwrap();
            checkpoint["nextSeq"].as_u64().expect("nextSeq")
        })
        .sum()
}

/// Every delivered message was sent, waited once with a due time no earlier than it
/// asked, and was delivered on its queue carrying that due time, no earlier; (copies
/// delivered twice, delivered but never acknowledged, the latest delivery past its due
/// time in ms).
fn check_deliveries(
    seed: u64,
    sent: &BTreeMap<String, Sent>,
    waiting: &HashMap<String, Vec<Stored>>,
    delivered: &HashMap<String, Vec<Stored>>,
) -> (usize, usize, i64) {
    let mut duplicates = 0;
    let mut unacked_delivered = 0;
    let mut latest = 0i64;
    for (body, copies) in delivered {
        let what = sent
            .get(body)
            .unwrap_or_else(|| panic!("seed {seed}: {body} delivered but never sent"));
        if !what.acked {
            unacked_delivered += 1;
        }
        let record = waiting
            .get(body)
            .unwrap_or_else(|| panic!("seed {seed}: {body} delivered without a timer record"));
        assert_eq!(record.len(), 1, "seed {seed}: {body} waited twice");
        let due = record[0]
            .timer_out
            .unwrap_or_else(|| panic!("seed {seed}: {body}'s timer record has no TIMER_OUT_MS"));
        let asked = what.sent_ms + what.ask.delay_ms();
        assert!(
            due >= asked,
            "seed {seed}: {body} ({:?}, sent at {}) due at {due}, before {asked}",
            what.ask,
            what.sent_ms
        );
        for copy in copies {
            assert_eq!(
                copy.queue, what.queue,
                "seed {seed}: {body} on the wrong queue"
            );
            assert_eq!(
                copy.timer_out,
                Some(due),
                "seed {seed}: {body}'s delivered copy does not carry its due time"
            );
            assert!(
                copy.store_ms >= due,
                "seed {seed}: {body} ({:?}) stored at {}, before its due time {due}",
                what.ask,
                copy.store_ms
            );
            latest = latest.max(copy.store_ms - due);
        }
        duplicates += copies.len() - 1;
    }
    (duplicates, unacked_delivered, latest)
}

#[test]
fn sigkill_during_timer_delivery_loses_no_timer_message_and_delivers_none_early() {
    let began = Instant::now();
    let seed = kill_seed(0x7113_e75d);
    let what = format!("seed {seed}");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let sent = send_through_kills(dir.path(), seed, &mut rng);

    // Runs the timer stores wrote in all (each checkpoint counts them in `nextSeq`).
    let runs = timer_runs_written(dir.path(), seed);
    assert!(runs > 0, "seed {seed}: the timer stores wrote no run");
    let serve = Serve::start(dir.path(), &SERVE_ARGS, &what);
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
        "every acknowledged timer message delivered",
        stored,
    );
    // The waiting records, for their due times (nothing expires: no retention runs).
    let mut waiting: HashMap<String, Vec<Stored>> = HashMap::new();
    for shard in 0..SHARDS {
        let queue = queue_of_shard(shard, SHARDS);
        pull_new(&mut raw, TIMER_TOPIC, queue, &mut 0, &mut waiting, &stored);
    }

    let (duplicates, unacked_delivered, latest) =
        check_deliveries(seed, &sent, &waiting, &delivered);
    println!(
        "seed {seed}: {} acknowledged, {} delivered ({unacked_delivered} of them never \
         acknowledged), {duplicates} delivered more than once after a kill, latest {latest} ms \
         after its due time, {runs} timer runs written; {:?} in all",
        acked.len(),
        delivered.len(),
        began.elapsed()
    );
    serve.kill();
}
