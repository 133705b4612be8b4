//! `allAckInSyncStateSet` with two slaves (D18): a group of three brokers in controller
//! mode (SYNC_MASTER), all three in the SyncStateSet. One slave is paused (SIGSTOP): a send
//! to the master is acknowledged only once the controllers took the paused slave out of
//! the set (after `haMaxTimeSlaveNotCatchup`), never on the other slave's copy alone, since
//! the controllers may elect any member of the set. Resumed, the slave catches up and
//! joins again, and every acknowledged message is on both slaves.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::remoting::codes::response;

use crate::common::process_cluster::{create_topic, BrokerSpec, ProcessCluster};
use crate::common::process_controllers::{controller_mode_broker, replica_info, ControllerGroup};
use crate::common::process_replication::logs_equal;
use crate::common::run_local;

const GROUP: &str = "broker-a";
const TOPIC: &str = "all-ack";
/// How long a set change may take here (debug builds, a shared machine).
const LIMIT: Duration = Duration::from_secs(30);
/// A member behind this long is asked out of the set.
const NOT_CATCHUP_MS: u64 = 2000;

fn spec(n: u64, controllers: &ControllerGroup) -> BrokerSpec {
    controller_mode_broker(GROUP, n, &controllers.controller_addr())
        .set("brokerHeartbeatInterval", 200)
        .set("haMaxTimeSlaveNotCatchup", NOT_CATCHUP_MS)
        // Longer than the set's shrink: the send below waits for it, not for a timeout.
        .set("slaveTimeout", 20_000)
}

/// One send on a fresh connection; its answer's code.
fn send(broker: SocketAddr, body: &str) -> i32 {
    let body = body.as_bytes().to_vec();
    run_local(false, async move {
        let client = Client::connect(broker).await.expect("the master accepts");
        client.set_timeout(Duration::from_secs(30));
        let answer = client
            .send_message(TOPIC, 0, &body, None, None)
            .await
            .expect("the master answers");
        answer.code
    })
}

/// Waits (bounded) until the controllers hold a set of `members` brokers; the master's
/// address index and the set.
fn wait_set(cluster: &ProcessCluster, controllers: &ControllerGroup, members: usize) -> Vec<i64> {
    let addrs = controllers.addrs();
    let mut found = Vec::new();
    cluster.wait_until(
        LIMIT,
        &format!("a SyncStateSet of {members}"),
        || match run_local(false, replica_info(&addrs, GROUP)) {
            Some((Some(_), _, set)) if set.len() == members => {
                found = set;
                true
            }
            _ => false,
        },
    );
    found
}

#[test]
fn a_master_acknowledges_only_what_every_member_of_its_set_holds() {
    let mut cluster = ProcessCluster::new(1);
    cluster.start_name_servers();
    let controllers = ControllerGroup::start(cluster.dir());
    let master = cluster.add_broker(spec(0, &controllers));
    wait_set(&cluster, &controllers, 1);
    let slaves = [
        cluster.add_broker(spec(1, &controllers)),
        cluster.add_broker(spec(2, &controllers)),
    ];
    let full = wait_set(&cluster, &controllers, 3);
    let addr = cluster.brokers[master].addr;
    create_topic(addr, TOPIC, 1, 1, 6);
    for n in 0..20 {
        assert_eq!(send(addr, &format!("before-{n}")), response::SUCCESS);
    }

    cluster.brokers[slaves[1]].pause();
    let paused = Instant::now();
    assert_eq!(send(addr, "while-paused"), response::SUCCESS);
    let waited = paused.elapsed();
    let addrs = controllers.addrs();
    let (_, _, set) =
        run_local(false, replica_info(&addrs, GROUP)).expect("the controllers answer");
    assert_eq!(
        set.len(),
        2,
        "SEND_OK {waited:?} after one slave of {full:?} paused, while the set is still {set:?}: \
         the master acknowledged what a member of its set may not hold"
    );
    eprintln!("acknowledged {waited:?} after the pause, once the set was {set:?}");

    cluster.brokers[slaves[1]].resume();
    wait_set(&cluster, &controllers, 3);
    for n in 0..20 {
        assert_eq!(send(addr, &format!("after-{n}")), response::SUCCESS);
    }
    let (m, s1, s2) = (
        &cluster.brokers[master],
        &cluster.brokers[slaves[0]],
        &cluster.brokers[slaves[1]],
    );
    cluster.wait_until(LIMIT, "both slaves hold the master's log", || {
        logs_equal(m, s1, false) && logs_equal(m, s2, false)
    });
}
