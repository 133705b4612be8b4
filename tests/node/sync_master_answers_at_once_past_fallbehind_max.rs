//! `haSlaveFallbehindMax` (issue 25 item 5): a SYNC_MASTER whose slave stopped confirming
//! (here, the path from master to slave cut one way: nothing reaches the slave, nothing comes
//! back to tell the master it fell behind) answers SLAVE_NOT_AVAILABLE at once as soon as
//! its written end is more than `haSlaveFallbehindMax` past what the slave confirmed,
//! instead of holding every send for `slaveTimeout`; with the path clear, SEND_OK resumes
//! and the slave holds the master's log.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::SimCluster;
use common::run_local;
use ringmq::config::BrokerRole;
use ringmq::net::sim::{Direction, NetConfig};
use ringmq::remoting::codes::response;

const TOPIC: &str = "FarBehind";
/// Above one message (`BODY` and its header) and below two: the second unconfirmed send
/// is past it.
const FALLBEHIND_MAX: u64 = 6 * 1024;
const SLAVE_TIMEOUT: Duration = Duration::from_millis(1500);
const BODY: usize = 4 * 1024;
const LIMIT: Duration = Duration::from_secs(20);

/// One send of a `BODY`-byte message: its code and how long it took.
async fn send(client: &ringmq::client::Client, n: usize) -> (i32, Duration) {
    let body = vec![b'a' + (n % 26) as u8; BODY];
    let began = Instant::now();
    let answer = client
        .send_message(TOPIC, 0, &body, None, None)
        .await
        .expect("the send is answered");
    (answer.code, began.elapsed())
}

#[test]
fn a_sync_master_answers_slave_not_available_at_once_once_its_slave_is_far_behind() {
    run_local(false, async {
        let mut cluster = SimCluster::start(1, NetConfig::default(), |_, config| {
            config.broker_role = BrokerRole::SyncMaster;
            config.ha_slave_fallbehind_max = FALLBEHIND_MAX;
            config.slave_timeout = SLAVE_TIMEOUT;
        })
        .await;
        let ha = cluster.ha_addr(0);
        cluster
            .add_node(|config| {
                config.broker_role = BrokerRole::Slave;
                config.broker_id = 1;
                config.ha_master_address = Some(ha.to_string());
                // Its reports are what used to tell the master it fell behind: rare here,
                // so only the sends' own check can answer at once.
                config.ha_send_heartbeat_interval = Duration::from_secs(60);
            })
            .await;
        let client = cluster.client(0, 0).await.expect("the client connects");
        client.set_timeout(Duration::from_secs(10));
        let began = Instant::now();
        let mut n = 0;
        while send(&client, n).await.0 != response::SUCCESS {
            assert!(began.elapsed() < LIMIT, "no SEND_OK within {LIMIT:?}");
            n += 1;
        }

        // Nothing reaches the slave any more, and no confirmation comes back.
        cluster
            .net
            .partition(cluster.ip(0), cluster.ip(1), Direction::OneWay);
        let mut answers = Vec::new();
        for _ in 0..8 {
            n += 1;
            answers.push(send(&client, n).await);
        }
        // haSlaveFallbehindMax holds one message: the first send after the cut waits for
        // slaveTimeout, the second is past it and every later one is answered at once.
        // One more may wait: bytes sent just before the cut may still be confirmed, late.
        let waited = answers
            .iter()
            .take_while(|(_, took)| *took >= SLAVE_TIMEOUT / 2)
            .count();
        assert!(
            (1..=2).contains(&waited),
            "past haSlaveFallbehindMax sends still waited for slaveTimeout: {answers:?}"
        );
        for (code, took) in &answers[waited..] {
            assert_eq!(*code, response::SLAVE_NOT_AVAILABLE, "{answers:?}");
            assert!(
                *took < SLAVE_TIMEOUT / 2,
                "answered at once, not {took:?}: {answers:?}"
            );
        }

        // The path heals: the slave catches up and SEND_OK comes back.
        cluster.net.heal(cluster.ip(0), cluster.ip(1));
        let healed = Instant::now();
        loop {
            n += 1;
            if send(&client, n).await.0 == response::SUCCESS {
                break;
            }
            assert!(
                healed.elapsed() < LIMIT,
                "no SEND_OK {LIMIT:?} after the heal"
            );
        }
        cluster.shutdown().await;
    });
}
