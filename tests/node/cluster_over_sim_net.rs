//! The cluster harness (`common::cluster`) at work: three nodes on the simulated network,
//! a producer per node on a host of its own, and faults at seeded moments: partitions of
//! a producer from its node (both ways, or only the answers), clogged paths, connection
//! resets, and a clean restart of one node while its producer sends. After the network
//! heals, the history of every send is checked against what the nodes hold: nothing
//! acknowledged lost or moved, no body held twice, no offset claimed by two acknowledged
//! sends, nothing refused stored. The nodes do not replicate yet, so each send has one
//! copy; the replication tests hold the same checker against a group's copies.

use crate::common;

use std::rc::Rc;
use std::time::Duration;

use common::cluster::{client_ip, node_ip, History, SimCluster, REQUEST_TIMEOUT};
use common::{run_local, sim_seeds};
use ringmq::client::Client;
use ringmq::net::sim::{Direction, NetConfig, SimTransport};
use ringmq::rng::SplitMix64;

const NODES: usize = 3;
const SENDS_PER_PRODUCER: usize = 150;
const TOPIC: &str = "ClusterHistory";

#[test]
fn acknowledged_sends_survive_partitions_resets_and_a_restart() {
    for seed in sim_seeds(0..3) {
        println!("seed {seed} (RINGMQ_SIM_SEEDS={seed}..{})", seed + 1);
        run_local(false, run(seed));
    }
}

async fn run(seed: u64) {
    let net = NetConfig {
        seed,
        loss_percent: 5,
        clog_percent: 1,
        clog_mean: Duration::from_millis(30),
        ..NetConfig::default()
    };
    let mut cluster = SimCluster::start(NODES, net, |_, _| {}).await;
    let history = Rc::new(History::default());
    let producers: Vec<_> = (0..NODES)
        .map(|p| {
            let host = cluster.net.host(client_ip(p));
            let addr = cluster.addr(p);
            tokio::task::spawn_local(produce(host, addr, p, history.clone()))
        })
        .collect();
    inject_faults(&mut cluster, seed).await;
    for producer in producers {
        producer.await.expect("a producer finishes");
    }
    cluster.net.heal_all();
    let mut held = common::cluster::Held::new();
    for (node, topic, queue) in history.queues() {
        let records = cluster.read_queue(node, &topic, queue).await;
        held.insert((node, topic, queue), records);
    }
    let report = history.check(&held);
    println!(
        "seed {seed}: {} acked, {} refused, {} unknown",
        report.acked, report.refused, report.unknown
    );
    assert!(report.holds(), "seed {seed}: {report:#?}");
    assert!(
        report.acked >= SENDS_PER_PRODUCER,
        "seed {seed}: only {} sends acknowledged of {}: the run tested little",
        report.acked,
        NODES * SENDS_PER_PRODUCER
    );
    assert!(
        report.refused + report.unknown > 0,
        "seed {seed}: no send failed: the faults did not reach the producers"
    );
    cluster.shutdown().await;
}

/// Six faults at seeded moments while the producers run, then a restart of node 1.
async fn inject_faults(cluster: &mut SimCluster, seed: u64) {
    let mut rng = SplitMix64::new(seed ^ 0xFA17);
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(rng.range(10, 60))).await;
        let p = rng.below(NODES);
        let (producer, node) = (client_ip(p), node_ip(p));
        let lasts = Duration::from_millis(rng.range(100, 1200));
        match rng.below(4) {
            0 => cut_for(cluster, producer, node, Direction::Both, lasts).await,
            // Requests arrive and are stored; their answers do not come back.
            1 => cut_for(cluster, node, producer, Direction::OneWay, lasts).await,
            2 => cluster.net.clog(producer, node, lasts),
            _ => {
                cluster.net.reset(producer, node);
            }
        }
    }
    cluster.restart(1).await;
}

async fn cut_for(
    cluster: &SimCluster,
    from: std::net::IpAddr,
    to: std::net::IpAddr,
    direction: Direction,
    lasts: Duration,
) {
    cluster.net.partition(from, to, direction);
    tokio::time::sleep(lasts).await;
    cluster.net.heal(from, to);
}

/// Sends [`SENDS_PER_PRODUCER`] uniquely numbered messages to node `p` one at a time,
/// recording each outcome, reconnecting after a failure; never retries a send that went
/// out (a send that could not go out, for want of a connection, is not one).
async fn produce(host: SimTransport, addr: std::net::SocketAddr, p: usize, history: Rc<History>) {
    let mut client: Option<Client> = None;
    for n in 0..SENDS_PER_PRODUCER {
        let connected = match client.take() {
            Some(open) if !open.is_closed() => open,
            _ => connect(&host, addr).await,
        };
        let body = format!("p{p}-m{n}");
        let queue = (n % 4) as i32;
        let answer = connected
            .send_message(TOPIC, queue, body.as_bytes(), None, None)
            .await;
        if answer.is_ok() {
            client = Some(connected);
        }
        history.send(p, TOPIC, queue, body, &answer);
    }
}

/// A connection to `addr`, trying again every 20 ms while the path is cut or the node
/// restarts; gives up (fails the test) after 30 s.
async fn connect(host: &SimTransport, addr: std::net::SocketAddr) -> Client {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let attempt = tokio::time::timeout(REQUEST_TIMEOUT, Client::connect_over(host, addr));
        if let Ok(Ok(client)) = attempt.await {
            client.set_timeout(REQUEST_TIMEOUT);
            return client;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no connection to {addr} for 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The checker is not vacuous: each kind of violation in a made-up history is reported.
#[test]
fn the_history_checker_reports_each_kind_of_violation() {
    use ringmq::remoting::codes::response;
    use ringmq::remoting::RemotingCommand;
    let request = RemotingCommand::request(0, Default::default());
    let acked = |offset: u64| {
        let mut answer = RemotingCommand::response_to(&request, response::SUCCESS, None);
        answer.put_ext("queueOffset", offset);
        Ok(answer)
    };
    let refused = Ok(RemotingCommand::response_to(
        &request,
        response::SYSTEM_ERROR,
        None,
    ));
    let history = History::default();
    history.send(0, TOPIC, 0, "kept".into(), &acked(0));
    history.send(0, TOPIC, 0, "lost".into(), &acked(1));
    history.send(0, TOPIC, 0, "moved".into(), &acked(2));
    history.send(0, TOPIC, 0, "twice".into(), &acked(3));
    history.send(0, TOPIC, 0, "same-offset".into(), &acked(3));
    history.send(0, TOPIC, 0, "refused".into(), &refused);
    let held = common::cluster::Held::from([(
        (0, TOPIC.to_string(), 0),
        vec![
            (0, "kept".to_string()),
            (3, "twice".to_string()),
            (4, "twice".to_string()),
            (5, "moved".to_string()),
            (6, "refused".to_string()),
        ],
    )]);
    let report = history.check(&held);
    assert!(!report.holds());
    let names = |found: &[String]| -> Vec<String> {
        found
            .iter()
            .map(|line| line.split(' ').next().unwrap().to_string())
            .collect()
    };
    // "same-offset" is acked at 3, where "twice" is held: lost, and sharing its offset.
    assert_eq!(names(&report.lost), ["lost", "moved", "same-offset"]);
    assert_eq!(names(&report.duplicated), ["twice"]);
    assert_eq!(report.shared_offsets.len(), 1, "{report:#?}");
    assert_eq!(names(&report.stored_though_refused), ["refused"]);
    assert_eq!((report.acked, report.refused, report.unknown), (5, 1, 0));
}
