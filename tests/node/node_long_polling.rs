//! Long polling: a pull with the suspend bit on an empty queue is parked and answered as
//! soon as a message is sent (well before its timeout), without holding up the other
//! requests of its connection; with nothing sent it is answered at its timeout with
//! PULL_NOT_FOUND and every header field the client unboxes. The first two run twice: over
//! loopback TCP, and with the node and its client on the seeded simulated network.

use crate::common;

use std::future::Future;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::{node_config, run_local, start_node};
use ringmq::client::Client;
use ringmq::net::sim::{NetConfig, SimNet};
use ringmq::node::local::LocalNode;
use ringmq::remoting::codes::response;

const SUSPEND: Duration = Duration::from_secs(15);

#[test]
fn a_parked_pull_is_answered_when_a_message_arrives() {
    over_tcp(parked_pull_answered_on_arrival);
}

#[test]
fn a_parked_pull_is_answered_when_a_message_arrives_over_the_simulated_network() {
    over_sim_net(0xA11CE, parked_pull_answered_on_arrival);
}

#[test]
fn a_parked_pull_times_out_with_pull_not_found_and_full_header() {
    over_tcp(parked_pull_times_out_with_full_header);
}

#[test]
fn a_parked_pull_times_out_with_pull_not_found_and_full_header_over_the_simulated_network() {
    over_sim_net(0xB0B, parked_pull_times_out_with_full_header);
}

/// Runs `scenario` with a client of a node started in-process on loopback TCP.
fn over_tcp<F: Future<Output = ()>>(scenario: impl FnOnce(Client) -> F) {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        scenario(Client::connect(addr).await.unwrap()).await;
    });
    node.shutdown().unwrap();
}

/// Runs `scenario` with the node (one shard, on this thread) and its client on the
/// simulated network: one-way delays of 0.05-0.5 ms, 10% of writes late by a
/// retransmission (200 ms), 3% clogging their path, from `seed` (or `RINGMQ_NET_SEED`),
/// printed so a failure can be rerun. The store is a real one in a temporary directory, so
/// time is real time, not paused.
fn over_sim_net<F: Future<Output = ()>>(default_seed: u64, scenario: impl FnOnce(Client) -> F) {
    let seed = std::env::var("RINGMQ_NET_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(default_seed);
    println!("seed {seed} (RINGMQ_NET_SEED)");
    let dir = tempfile::tempdir().unwrap();
    let node_ip = IpAddr::from([10, 0, 0, 1]);
    let mut config = node_config(dir.path());
    config.bind_address = node_ip;
    config.broker_ip = node_ip;
    run_local(false, async move {
        let net = SimNet::new(NetConfig {
            seed,
            loss_percent: 10,
            clog_percent: 3,
            ..NetConfig::default()
        })
        .unwrap();
        let node = LocalNode::start(config, &net.host(node_ip)).await.unwrap();
        let client_host = net.host(IpAddr::from([10, 0, 0, 2]));
        let client = Client::connect_over(&client_host, node.addr())
            .await
            .unwrap();
        assert_eq!(client.peer(), node.addr());
        scenario(client).await;
        node.shutdown().await.unwrap();
    });
}

/// A pull parked on an empty queue is answered as soon as a message arrives on it.
async fn parked_pull_answered_on_arrival(client: Client) {
    let started = Instant::now();
    let puller = client.clone();
    let parked =
        tokio::task::spawn_local(
            async move { puller.pull("Polled", 0, 0, 32, Some(SUSPEND)).await },
        );
    // Let the pull go out first; the send then shares its connection, which proves a
    // parked pull does not hold up the requests behind it.
    tokio::task::yield_now().await;
    let sent = client
        .send_message("Polled", 0, b"wake up", None, None)
        .await
        .unwrap();
    assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
    let answer = parked.await.unwrap().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert!(answer.body.windows(7).any(|w| w == b"wake up"));
    assert_eq!(&answer.ext_fields["nextBeginOffset"], "1");
    assert!(
        elapsed < SUSPEND / 3,
        "the parked pull took {elapsed:?}; it should be answered on arrival"
    );
}

/// A parked pull woken by another queue's message parks again and is answered at its
/// timeout with PULL_NOT_FOUND and every header field; without the suspend bit at once.
async fn parked_pull_times_out_with_full_header(client: Client) {
    // A message on another queue wakes the pull, which must park again.
    client
        .send_message("Other", 0, b"x", None, None)
        .await
        .unwrap();
    let suspend = Duration::from_millis(400);
    let started = Instant::now();
    let puller = client.clone();
    let parked =
        tokio::task::spawn_local(
            async move { puller.pull("Quiet", 0, 0, 32, Some(suspend)).await },
        );
    tokio::task::yield_now().await;
    client
        .send_message("Other", 0, b"y", None, None)
        .await
        .unwrap();
    let answer = parked.await.unwrap().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(answer.code, response::PULL_NOT_FOUND, "{answer:?}");
    for field in [
        "nextBeginOffset",
        "minOffset",
        "maxOffset",
        "suggestWhichBrokerId",
    ] {
        assert!(
            answer.ext_fields.contains_key(field),
            "{field} missing: {answer:?}"
        );
    }
    assert!(
        elapsed >= suspend,
        "answered after {elapsed:?}, before its timeout"
    );
    assert!(
        elapsed < suspend + Duration::from_secs(5),
        "answered after {elapsed:?}"
    );

    // Without the suspend bit the same pull is answered at once.
    let started = Instant::now();
    let answer = client.pull("Quiet", 0, 0, 32, None).await.unwrap();
    assert_eq!(answer.code, response::PULL_NOT_FOUND);
    assert!(started.elapsed() < suspend);
}

#[test]
fn parked_pulls_beyond_the_in_flight_bound_do_not_hold_up_a_send_on_their_connection() {
    // One client connection long-polling more idle queues than the connection may have
    // requests in flight, as a stock Java client does with 1024 queues.
    const MAX_IN_FLIGHT: usize = 4;
    const PULLS: usize = MAX_IN_FLIGHT + 2;
    let dir = tempfile::tempdir().unwrap();
    let mut options = node_config(dir.path());
    options.max_requests_in_flight_per_connection = MAX_IN_FLIGHT;
    let node = ringmq::node::start(options).unwrap();
    let addr = node.addr();
    let metrics = node.metrics();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let mut parked = Vec::new();
        for queue in 0..PULLS {
            let puller = client.clone();
            parked.push(tokio::task::spawn_local(async move {
                puller
                    .pull(&format!("Idle{queue}"), 0, 0, 32, Some(SUSPEND))
                    .await
            }));
        }
        // Bounded wait until the node has read at least the bound's worth of pulls, so
        // the send below comes after them on the connection.
        let deadline = Instant::now() + Duration::from_secs(10);
        while (metrics.traffic_total().requests_in_flight as usize) < MAX_IN_FLIGHT {
            assert!(Instant::now() < deadline, "the pulls were never read");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        let sent = tokio::time::timeout(
            SUSPEND / 3,
            client.send_message("Busy", 0, b"not held up", None, None),
        )
        .await
        .expect("a send behind parked pulls was answered only after they timed out")
        .unwrap();
        assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
        assert!(started.elapsed() < SUSPEND / 3);
        for pull in &parked {
            assert!(!pull.is_finished(), "a pull on an idle queue was answered");
        }
        for pull in parked {
            pull.abort();
        }
    });
    node.shutdown().unwrap();
}
