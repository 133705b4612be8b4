//! Group commit with producers that wait for each acknowledgement (issue 11): through the
//! simulated disk with a set fsync latency and producer think time, on tokio's paused
//! clock, so the batch sizes reached are exact and the same on every run.

use crate::common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::store::Store;
use tokio::time::Instant;

const FSYNC: Duration = Duration::from_millis(1);

fn config(max_wait: Duration) -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = FlushMode::Sync;
    config.commit_log_segment_size = 64 * 1024 * 1024;
    config.group_commit_max_wait = max_wait;
    config
}

struct Run {
    messages: u64,
    fsyncs: u64,
    /// Time the store counted in those fsyncs.
    sync_time: Duration,
    /// Longest time one put waited for its answer.
    longest: Duration,
}

/// `producers` closed-loop producers, starting one after another over one fsync time and
/// each putting `each` messages: a put, its answer, then `think` before the next (zero:
/// one turn of its own), as a client one round trip away does.
fn closed_loop(
    seed: u64,
    max_wait: Duration,
    producers: usize,
    each: usize,
    think: Duration,
) -> Run {
    let sim = sim_disk(seed);
    run_local(true, async {
        let store = Store::open(config(max_wait), as_disk(&sim), Clock::starting_at(0))
            .await
            .unwrap();
        sim.set_sync_latency(Some(FSYNC));
        let before = store.stats();
        let longest = Rc::new(Cell::new(Duration::ZERO));
        let mut tasks = Vec::new();
        for producer in 0..producers {
            let (store, longest) = (store.clone(), longest.clone());
            tasks.push(tokio::task::spawn_local(async move {
                // Producers connect at different times, spread over one fsync, as real
                // ones do; started together they would stay in step whatever the store did.
                tokio::time::sleep(FSYNC * producer as u32 / producers as u32).await;
                for index in 0..each {
                    let sent = Instant::now();
                    let body = format!("p{producer}-m{index}");
                    store
                        .put(message(
                            "T",
                            (producer % 4) as i32,
                            body.as_bytes(),
                            None,
                            None,
                        ))
                        .await
                        .expect("every put is stored");
                    longest.set(longest.get().max(sent.elapsed()));
                    if think.is_zero() {
                        // Back at once, after a turn of its own (a tokio timer would round
                        // up to its 1 ms granularity).
                        tokio::task::yield_now().await;
                    } else {
                        tokio::time::sleep(think).await;
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let after = store.stats();
        store.shutdown().await.unwrap();
        Run {
            messages: after.puts - before.puts,
            fsyncs: after.log_syncs - before.log_syncs,
            sync_time: Duration::from_micros(after.log_sync_micros - before.log_sync_micros),
            longest: longest.get(),
        }
    })
}

fn per_fsync(run: &Run) -> f64 {
    run.messages as f64 / run.fsyncs as f64
}

#[test]
fn sixteen_waiting_producers_share_each_fsync_instead_of_taking_turns_in_halves() {
    let think = Duration::ZERO;
    let without = closed_loop(1, Duration::ZERO, 16, 40, think);
    let with = closed_loop(1, Duration::from_millis(1), 16, 40, think);
    assert_eq!((without.messages, with.messages), (640, 640));
    // Without the wait, the producers answered by one fsync come back while the next one
    // runs: two halves take turns.
    assert!(
        per_fsync(&without) <= 9.0,
        "without the wait: {:.1} messages per fsync ({} fsyncs)",
        per_fsync(&without),
        without.fsyncs
    );
    // With it, nearly every fsync carries all 16.
    assert!(
        per_fsync(&with) >= 15.0,
        "with the wait: {:.1} messages per fsync ({} fsyncs)",
        per_fsync(&with),
        with.fsyncs
    );
    // A put waits at most an fsync it missed, the wait, and its own fsync.
    assert!(
        with.longest <= FSYNC * 2 + FSYNC / 2 + Duration::from_micros(1),
        "longest put {:?}",
        with.longest
    );
}

#[test]
fn a_lone_producer_waits_for_nothing_but_its_fsync() {
    for think in [Duration::ZERO, Duration::from_millis(5)] {
        let run = closed_loop(2, Duration::from_millis(1), 1, 30, think);
        assert_eq!((run.messages, run.fsyncs), (30, 30), "think {think:?}");
        // What the metrics report as fsync time is the fsyncs' own: 30 of 1 ms each.
        assert_eq!(run.sync_time, FSYNC * 30, "think {think:?}");
        assert!(
            run.longest <= FSYNC + Duration::from_micros(1),
            "think {think:?}: a put took {:?}, its fsync {FSYNC:?}",
            run.longest
        );
    }
}

#[test]
fn producers_that_stop_coming_back_delay_the_others_by_the_bounded_wait_only() {
    // 8 producers that put once each and 1 that keeps going: after the first batch the
    // store expects 9 back but gets 1, and waits at most half the fsync time for the rest.
    let sim = sim_disk(3);
    let longest = run_local(true, async {
        let store = Store::open(
            config(Duration::from_millis(1)),
            as_disk(&sim),
            Clock::starting_at(0),
        )
        .await
        .unwrap();
        sim.set_sync_latency(Some(FSYNC));
        let mut once = Vec::new();
        for producer in 0..8 {
            let store = store.clone();
            once.push(tokio::task::spawn_local(async move {
                let body = format!("once-{producer}");
                store
                    .put(message("T", 0, body.as_bytes(), None, None))
                    .await
                    .unwrap();
            }));
        }
        let steady = {
            let store = store.clone();
            tokio::task::spawn_local(async move {
                let mut longest = Duration::ZERO;
                for index in 0..20 {
                    let sent = Instant::now();
                    let body = format!("steady-{index}");
                    store
                        .put(message("T", 1, body.as_bytes(), None, None))
                        .await
                        .unwrap();
                    longest = longest.max(sent.elapsed());
                }
                longest
            })
        };
        for task in once {
            task.await.unwrap();
        }
        let longest = steady.await.unwrap();
        store.shutdown().await.unwrap();
        longest
    });
    assert!(
        longest <= FSYNC * 2 + FSYNC / 2 + Duration::from_micros(1),
        "the steady producer's longest put {longest:?}"
    );
}
