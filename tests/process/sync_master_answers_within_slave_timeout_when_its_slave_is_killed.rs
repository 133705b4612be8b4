//! A SYNC_MASTER's slave killed (SIGKILL) under load from several senders: every send
//! after the kill is answered FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, each within
//! `slaveTimeout` and a margin, none hangs; the slave restarted from the same file
//! catches up until each shard's CommitLog equals the master's, and SEND_OK resumes.

use crate::common;

use std::time::{Duration, Instant};

use common::process_cluster::ProcessCluster;
use common::process_replication::{
    pair_master, wait_logs_equal, wait_send_ok, SendLoad, Sent, StreamingPair, PAIR_MASTER,
    PAIR_SLAVE,
};
use ringmq::remoting::codes::response;

const TOPIC: &str = "Replicated";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
const SENDERS: usize = 6;
const BODY: usize = 1024;
/// `slaveTimeout`'s default, which the master runs with.
const SLAVE_TIMEOUT: Duration = Duration::from_secs(3);
/// What a send may take beyond `slaveTimeout`: the request's trip both ways and the
/// shard's turn on a 2-core machine shared with other builds and tests. A hang shows as
/// the client's 10 s timeout, far above.
const MARGIN: Duration = Duration::from_secs(2);
/// Answers without a slave to collect after the kill: every sender past its timeout.
const REFUSED_AFTER_KILL: usize = 30;
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn sync_master_sends_answer_within_slave_timeout_after_the_slave_dies_and_resume_after() {
    let began = Instant::now();
    let StreamingPair {
        mut cluster,
        master,
        ..
    } = StreamingPair::start(TOPIC, &QUEUES, LIMIT);

    let load = SendLoad::start(master, TOPIC, &QUEUES, SENDERS, BODY);
    cluster.wait_until(LIMIT, "SEND_OK under load", || {
        load.count(Sent::is_ok) >= 100
    });
    cluster.broker(PAIR_SLAVE).kill();
    let killed = Instant::now();
    let without_slave = |s: &Sent| {
        matches!(
            s.code(),
            Some(response::FLUSH_SLAVE_TIMEOUT | response::SLAVE_NOT_AVAILABLE)
        )
    };
    cluster.wait_until(LIMIT, "answers without a slave", || {
        load.count(without_slave) >= REFUSED_AFTER_KILL
    });
    let sent = load.finish();

    let slowest = sent.iter().map(|s| s.took).max().expect("sends");
    for s in &sent {
        assert!(s.answer.is_ok(), "a send failed: {s:?}\n{}", cluster.logs());
        assert!(
            s.took < SLAVE_TIMEOUT + MARGIN,
            "a send took {:?} (code {:?}), past slaveTimeout {SLAVE_TIMEOUT:?} + {MARGIN:?}",
            s.took,
            s.code()
        );
        if s.started > killed {
            assert!(
                without_slave(s),
                "sent {:?} after the kill, answered {:?}",
                s.started - killed,
                s.code()
            );
        } else {
            assert!(s.is_ok() || without_slave(s), "answered {:?}", s.code());
        }
    }
    let timeouts = sent
        .iter()
        .filter(|s| s.code() == Some(response::FLUSH_SLAVE_TIMEOUT))
        .count();
    let unavailable = sent
        .iter()
        .filter(|s| s.code() == Some(response::SLAVE_NOT_AVAILABLE))
        .count();

    cluster.broker(PAIR_SLAVE).start();
    wait_send_ok(&cluster, master, TOPIC, &QUEUES, LIMIT);
    wait_logs_equal(&cluster, PAIR_MASTER, PAIR_SLAVE, LIMIT, true);
    eprintln!(
        "{} sends, slowest {slowest:?}; after the kill {timeouts} FLUSH_SLAVE_TIMEOUT, \
         {unavailable} SLAVE_NOT_AVAILABLE; {:?}",
        sent.len(),
        began.elapsed()
    );
}

/// The master's `haHousekeepingInterval` in the silent-slave test: short, so the test
/// sees the master drop the silent stream (20 s by default).
const HOUSEKEEPING: Duration = Duration::from_secs(5);
/// Answers at once (SLAVE_NOT_AVAILABLE) to collect once the master dropped the stream.
const AT_ONCE_AFTER_DROP: usize = 20;

/// A slave gone silent (SIGSTOP: its connection stays open, nothing is acknowledged):
/// sends wait `slaveTimeout` and answer FLUSH_SLAVE_TIMEOUT, never longer; once the
/// master drops the silent stream (`haHousekeepingInterval`) they answer
/// SLAVE_NOT_AVAILABLE at once; the slave resumed reconnects, catches up, and SEND_OK
/// resumes.
#[test]
fn sync_master_sends_wait_at_most_slave_timeout_while_the_slave_is_silent() {
    let began = Instant::now();
    let spec = pair_master().set("haHousekeepingInterval", HOUSEKEEPING.as_millis());
    let StreamingPair {
        mut cluster,
        master,
        ..
    } = StreamingPair::start_with(spec, TOPIC, &QUEUES, LIMIT);

    let load = SendLoad::start(master, TOPIC, &QUEUES, SENDERS, BODY);
    cluster.wait_until(LIMIT, "SEND_OK under load", || {
        load.count(Sent::is_ok) >= 100
    });
    cluster.broker(PAIR_SLAVE).pause();
    let paused = Instant::now();
    // The master has dropped the stream by then: silence for HOUSEKEEPING, noticed
    // within a heartbeat, and a send started just before the drop waits its timeout.
    let dropped_by = paused + HOUSEKEEPING + MARGIN;
    let at_once = |s: &Sent| s.started > dropped_by;
    cluster.wait_until(
        LIMIT,
        "answers after the master dropped the silent slave",
        || load.count(at_once) >= AT_ONCE_AFTER_DROP,
    );
    let sent = load.finish();
    cluster.broker(PAIR_SLAVE).resume();

    check_silent_answers(&cluster, &sent, paused, dropped_by);
    let timeouts: Vec<Duration> = sent
        .iter()
        .filter(|s| s.code() == Some(response::FLUSH_SLAVE_TIMEOUT))
        .map(|s| s.took)
        .collect();
    assert!(
        !timeouts.is_empty(),
        "a silent slave makes sends wait for slaveTimeout"
    );
    // FLUSH_SLAVE_TIMEOUT means the slave did not confirm within slaveTimeout: never
    // sooner (the store's watchdog counts whole tenths of it, store::flush).
    assert!(
        timeouts.iter().all(|&took| took >= SLAVE_TIMEOUT),
        "FLUSH_SLAVE_TIMEOUT answered before slaveTimeout: {timeouts:?}"
    );

    wait_send_ok(&cluster, master, TOPIC, &QUEUES, LIMIT);
    wait_logs_equal(&cluster, PAIR_MASTER, PAIR_SLAVE, LIMIT, true);
    eprintln!(
        "{} sends, {} FLUSH_SLAVE_TIMEOUT (slowest {:?}); {:?}",
        sent.len(),
        timeouts.len(),
        sent.iter().map(|s| s.took).max(),
        began.elapsed()
    );
}

/// Every send answered within `slaveTimeout` + [`MARGIN`]; those started after the master
/// dropped the silent stream (`dropped_by`) SLAVE_NOT_AVAILABLE, the others after the pause
/// FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE.
fn check_silent_answers(
    cluster: &ProcessCluster,
    sent: &[Sent],
    paused: Instant,
    dropped_by: Instant,
) {
    let at_once = |s: &Sent| s.started > dropped_by;
    let without_slave = |s: &Sent| {
        matches!(
            s.code(),
            Some(response::FLUSH_SLAVE_TIMEOUT | response::SLAVE_NOT_AVAILABLE)
        )
    };
    for s in sent {
        assert!(s.answer.is_ok(), "a send failed: {s:?}\n{}", cluster.logs());
        assert!(
            s.took < SLAVE_TIMEOUT + MARGIN,
            "a send took {:?} (code {:?}), past slaveTimeout {SLAVE_TIMEOUT:?} + {MARGIN:?}",
            s.took,
            s.code()
        );
        if at_once(s) {
            assert_eq!(
                s.code(),
                Some(response::SLAVE_NOT_AVAILABLE),
                "sent {:?} after the pause",
                s.started - paused
            );
        } else if s.started > paused {
            assert!(without_slave(s), "sent after the pause: {:?}", s.code());
        }
    }
}
