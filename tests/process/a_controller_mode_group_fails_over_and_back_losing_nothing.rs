//! A broker group in controller mode (D18) as real processes: three controllers, one
//! name server, two brokers with the same broker.conf but their ports and stores
//! (`enableControllerMode=true`, SYNC_MASTER, two shards). The first becomes master, the
//! second its slave, which joins the SyncStateSet once it caught up. The master is
//! SIGKILLed under sends; the slave is elected and serves as master under a higher
//! epoch, holding every message the old master acknowledged. The old master comes back
//! as the new one's slave, joins the set, and the new master is killed in turn: the first
//! one serves again, with every message either master acknowledged.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ringmq::client::Client;
use ringmq::remoting::codes::response;

use crate::common::process_cluster::{create_topic, BrokerSpec, ProcessCluster, REQUEST_TIMEOUT};
use crate::common::process_controllers::{controller_mode_broker, replica_info, ControllerGroup};
use crate::common::process_replication::read_topic;
use crate::common::run_local;

const GROUP: &str = "broker-a";
const TOPIC: &str = "failover";
const QUEUES: [i32; 4] = [0, 1, 2, 3];
/// How long a failover or a set change may take here (debug builds, a shared machine).
const LIMIT: Duration = Duration::from_secs(30);

fn spec(n: u64, controllers: &ControllerGroup) -> BrokerSpec {
    controller_mode_broker(GROUP, n, &controllers.controller_addr())
        .set("shards", 2)
        .set("brokerHeartbeatInterval", 200)
}

/// One send on a fresh connection: the answer's code and queue offset, `None` if the
/// broker cannot be reached or does not answer (it is restarting in its new role).
fn try_send(broker: SocketAddr, queue: i32, body: &[u8]) -> Option<(i32, Option<u64>)> {
    let body = body.to_vec();
    run_local(false, async move {
        let client = Client::connect(broker).await.ok()?;
        client.set_timeout(REQUEST_TIMEOUT);
        let answer = client
            .send_message(TOPIC, queue, &body, None, None)
            .await
            .ok()?;
        let offset = answer
            .ext_fields
            .get("queueOffset")
            .and_then(|o| o.parse().ok());
        Some((answer.code, offset))
    })
}

/// Waits (bounded) until the controllers name a master and a set of `members` ids;
/// (master id, master epoch).
fn wait_group(
    cluster: &ProcessCluster,
    controllers: &ControllerGroup,
    members: usize,
    not: Option<i64>,
) -> (i64, i32) {
    let addrs = controllers.addrs();
    let mut found = None;
    cluster.wait_until(
        LIMIT,
        &format!("a master other than {not:?} and a SyncStateSet of {members}"),
        || {
            let info = run_local(false, replica_info(&addrs, GROUP));
            match info {
                Some((Some(master), epoch, set)) if set.len() == members && Some(master) != not => {
                    found = Some((master, epoch));
                    true
                }
                _ => false,
            }
        },
    );
    found.expect("found")
}

/// Sends `count` messages round the queues to `broker`, each until SEND_OK (a run
/// restarting in its role answers nothing for a moment); the bodies acknowledged.
fn send_all(
    cluster: &ProcessCluster,
    broker: SocketAddr,
    label: &str,
    count: usize,
) -> BTreeSet<Vec<u8>> {
    let mut acknowledged = BTreeSet::new();
    for n in 0..count {
        let queue = QUEUES[n % QUEUES.len()];
        let body = format!("{label}-{n}").into_bytes();
        cluster.wait_until(LIMIT, &format!("SEND_OK of {label}-{n}"), || {
            matches!(try_send(broker, queue, &body), Some((code, _)) if code == response::SUCCESS)
        });
        acknowledged.insert(body);
    }
    acknowledged
}

/// Every body the broker at `broker` holds in the topic.
fn held(broker: SocketAddr) -> BTreeSet<Vec<u8>> {
    read_topic(broker, TOPIC, &QUEUES).into_values().collect()
}

/// A name server, three controllers and the group's two brokers, the first elected
/// master and the second in its SyncStateSet, the topic created on the master.
struct Group {
    cluster: ProcessCluster,
    controllers: ControllerGroup,
    /// The first broker's controller id and master epoch.
    first_id: i64,
    first_epoch: i32,
}

/// The brokers' indexes in the cluster.
const FIRST: usize = 0;
const SECOND: usize = 1;

impl Group {
    fn start() -> Group {
        let mut cluster = ProcessCluster::new(1);
        cluster.start_name_servers();
        let controllers = ControllerGroup::start(cluster.dir());
        assert_eq!(cluster.add_broker(spec(0, &controllers)), FIRST);
        let (first_id, first_epoch) = wait_group(&cluster, &controllers, 1, None);
        assert_eq!(cluster.add_broker(spec(1, &controllers)), SECOND);
        let (master, epoch) = wait_group(&cluster, &controllers, 2, None);
        assert_eq!(
            (master, epoch),
            (first_id, first_epoch),
            "the first broker stays master"
        );
        create_topic(cluster.brokers[FIRST].addr, TOPIC, 4, 4, 6);
        Group {
            cluster,
            controllers,
            first_id,
            first_epoch,
        }
    }

    fn addrs(&self) -> (SocketAddr, SocketAddr) {
        let brokers = &self.cluster.brokers;
        (brokers[FIRST].addr, brokers[SECOND].addr)
    }
}

#[test]
fn a_group_in_controller_mode_fails_over_to_its_slave_and_back_losing_nothing() {
    let Group {
        mut cluster,
        controllers,
        first_id,
        first_epoch,
    } = Group::start();
    let (first, second) = (FIRST, SECOND);
    let (a, b) = (cluster.brokers[first].addr, cluster.brokers[second].addr);
    let mut acknowledged = send_all(&cluster, a, "first", 200);

    cluster.brokers[first].kill();
    let killed = Instant::now();
    let (promoted, promoted_epoch) = wait_group(&cluster, &controllers, 1, Some(first_id));
    assert!(
        promoted_epoch > first_epoch,
        "epoch {promoted_epoch} after {first_epoch}"
    );
    cluster.wait_until(LIMIT, "SEND_OK from the promoted master", || {
        matches!(try_send(b, 0, b"probe-after-kill"), Some((code, _)) if code == response::SUCCESS)
    });
    eprintln!(
        "the promoted master answered SEND_OK {:?} after the SIGKILL",
        killed.elapsed()
    );
    let on_b = held(b);
    let missing: Vec<_> = acknowledged.difference(&on_b).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged messages missing on the promoted master, e.g. {:?}",
        missing.len(),
        missing.first().map(|b| String::from_utf8_lossy(b))
    );
    acknowledged.extend(send_all(&cluster, b, "second", 200));

    cluster.brokers[first].start();
    let (master, _) = wait_group(&cluster, &controllers, 2, None);
    assert_eq!(master, promoted, "the old master comes back as a slave");
    acknowledged.extend(send_all(&cluster, b, "third", 100));

    cluster.brokers[second].kill();
    let (again, again_epoch) = wait_group(&cluster, &controllers, 1, Some(promoted));
    assert_eq!(again, first_id);
    assert!(again_epoch > promoted_epoch);
    cluster.wait_until(LIMIT, "SEND_OK from the first broker, master again", || {
        matches!(try_send(a, 1, b"probe-after-second-kill"), Some((code, _)) if code == response::SUCCESS)
    });
    let on_a = held(a);
    let missing: Vec<_> = acknowledged.difference(&on_a).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged messages missing on the first broker, e.g. {:?}",
        missing.len(),
        missing.first().map(|b| String::from_utf8_lossy(b))
    );
}

/// The master is paused (SIGSTOP: its sockets stay open, only its silence tells) with a
/// send waiting in its socket. The controllers count it dead after its heartbeat timeout
/// and elect the slave; resumed, the old master answers that send, and every later one,
/// with anything but SEND_OK (its write lease lapsed), then follows the new master.
#[test]
fn a_paused_master_is_replaced_and_acknowledges_nothing_after_its_lease() {
    let group = Group::start();
    let (a, b) = group.addrs();
    let Group {
        cluster,
        controllers,
        first_id,
        first_epoch,
    } = group;
    let first = FIRST;
    let acknowledged = send_all(&cluster, a, "before", 100);

    let connected = run_local(false, async move { Client::connect(a).await.is_ok() });
    assert!(connected);
    cluster.brokers[first].pause();
    let paused = Instant::now();
    // Sent into the paused master's socket: answered only once it runs again.
    let waiting = std::thread::spawn(move || try_send(a, 2, b"sent-into-the-pause"));
    let (promoted, promoted_epoch) = wait_group(&cluster, &controllers, 1, Some(first_id));
    assert!(promoted_epoch > first_epoch);
    cluster.wait_until(LIMIT, "SEND_OK from the promoted master", || {
        matches!(try_send(b, 0, b"probe-after-pause"), Some((code, _)) if code == response::SUCCESS)
    });
    eprintln!(
        "the promoted master answered SEND_OK {:?} after the SIGSTOP",
        paused.elapsed()
    );
    cluster.brokers[first].resume();
    let answer = waiting.join().expect("the waiting send");
    assert!(
        !matches!(answer, Some((code, _)) if code == response::SUCCESS),
        "the deposed master acknowledged a send after its lease: {answer:?}"
    );
    for n in 0..20 {
        let answer = try_send(a, n % 4, format!("to-the-zombie-{n}").as_bytes());
        assert!(
            !matches!(answer, Some((code, _)) if code == response::SUCCESS),
            "the deposed master acknowledged send {n}: {answer:?}"
        );
    }
    let on_b = held(b);
    let missing: Vec<_> = acknowledged.difference(&on_b).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged messages missing on the promoted master",
        missing.len()
    );
    let (master, _) = wait_group(&cluster, &controllers, 2, None);
    assert_eq!(master, promoted, "the old master follows the new one");
}
