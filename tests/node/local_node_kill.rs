//! `LocalNode::kill`, the simulation's `kill -9`: a node killed under load while sends are
//! in flight leaves its directory for crash recovery (the abort marker stays) and
//! unlocked, stops serving at once, and started again on its directory it holds every
//! message it acknowledged, once each, at the offset it answered.

use crate::common;

use std::rc::Rc;
use std::time::Duration;

use common::cluster::{client_ip, History, Producer, SimCluster};
use common::run_local;
use ringmq::net::sim::NetConfig;

const TOPIC: &str = "Killed";
const PRODUCERS: usize = 3;
const SENDS_PER_PRODUCER: usize = 120;
/// Acknowledged sends before the kill: enough that the kill lands under load.
const ACKED_BEFORE_KILL: usize = 60;
/// Runs of the scenario, at most, until a kill cuts a send in flight: on a loaded machine
/// every producer may be between sends at the kill (the node answers on threads of its
/// own), and such a run checks recovery but not a cut.
const ATTEMPTS: usize = 5;

#[test]
fn a_killed_node_recovers_every_acknowledged_message_on_its_directory() {
    for attempt in 1..=ATTEMPTS {
        let cut = run_local(false, kill_under_load());
        if cut > 0 {
            return;
        }
        eprintln!("attempt {attempt}: the kill cut no send in flight; again");
    }
    panic!("no send was cut by the kill in {ATTEMPTS} runs: it never landed under load");
}

/// One run: the node killed after [`ACKED_BEFORE_KILL`] acknowledgements, started again,
/// every acknowledged send checked; how many sends the kill cut (refused or unknown).
async fn kill_under_load() -> usize {
    let mut cluster = SimCluster::start(1, NetConfig::default(), |_, _| {}).await;
    let history = Rc::new(History::default());
    let addr = cluster.addr(0);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let producer = Producer {
                p,
                host: cluster.net.host(client_ip(p)),
                topic: TOPIC,
                queues: 2,
                count: SENDS_PER_PRODUCER,
                pause: Duration::from_millis(1),
                label: 0,
                stop: Rc::default(),
            };
            tokio::task::spawn_local(producer.run(move || addr, history.clone()))
        })
        .collect();
    wait_for_acks(&history, ACKED_BEFORE_KILL).await;
    cluster.kill(0).await;
    let shard_dir = cluster.store_dir(0).join("shard-0");
    assert!(
        shard_dir.join(ringmq::store::ABORT_FILE).exists(),
        "a killed store keeps its abort marker, so its next start recovers"
    );
    assert!(
        cluster.client(PRODUCERS, 0).await.is_err(),
        "a killed node's listener is closed"
    );
    // Its directory is unlocked: the same directory and ports start again.
    cluster.start_again(0, |_| {}).await;
    for producer in producers {
        producer.await.expect("a producer finishes");
    }
    let mut held = common::cluster::Held::new();
    for (node, topic, queue) in history.queues() {
        held.insert(
            (node, topic.clone(), queue),
            cluster.read_queue(node, &topic, queue).await,
        );
    }
    let report = history.check(&held);
    assert!(report.holds(), "{report:#?}");
    assert!(report.acked > ACKED_BEFORE_KILL, "{report:#?}");
    cluster.shutdown().await;
    report.unknown + report.refused
}

/// Waits until `count` sends were acknowledged, polling the history (bounded).
async fn wait_for_acks(history: &History, count: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while history.acked() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {count} sends acknowledged after 30 s",
            history.acked()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
