//! `ringmq controller -c controller.conf` as three real processes on loopback, each on the
//! one port its `controllerDLegerPeers` entry names: they elect a leader, a broker applies
//! for its id, registers, beats and is elected master through it; the leader is SIGKILLed
//! and another controller leads with the same group state (read from its own disk); the
//! killed one restarts on its directory and follows. A store directory holding another
//! program's files is refused with exit code 2, naming what it holds.

use crate::common::process_cluster::free_port;
use crate::common::process_controllers::{call, command, leader, write_conf, Controller, BOUND};
use crate::common::run_local;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ringmq::remoting::codes::{request, response};

const GROUP: [(&str, &str); 2] = [
    ("clusterName", "DefaultCluster"),
    ("brokerName", "broker-a"),
];

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    GROUP.iter().chain(extra).copied().collect()
}

/// Broker 1 of broker-a applies, registers, beats and asks to be elected; its epoch.
async fn elect_a_master(leader: SocketAddr) -> i32 {
    let broker = "127.0.0.1:10911";
    let steps: [(i32, Vec<(&str, &str)>); 4] = [
        (
            request::CONTROLLER_APPLY_BROKER_ID,
            with(&[
                ("appliedBrokerId", "1"),
                ("registerCheckCode", "127.0.0.1:10911;1"),
            ]),
        ),
        (
            request::CONTROLLER_REGISTER_BROKER,
            with(&[("brokerId", "1"), ("brokerAddress", broker)]),
        ),
        (
            request::BROKER_HEARTBEAT,
            with(&[
                ("brokerId", "1"),
                ("brokerAddr", broker),
                ("heartbeatTimeoutMills", "60000"),
            ]),
        ),
        (
            request::CONTROLLER_ELECT_MASTER,
            with(&[("brokerId", "1"), ("designateElect", "false")]),
        ),
    ];
    let mut last = None;
    for (code, fields) in steps {
        let answer = call(leader, code, &fields)
            .await
            .expect("the leader answers");
        assert_eq!(answer.code, response::SUCCESS, "request {code}: {answer:?}");
        last = Some(answer);
    }
    let elected = last.unwrap();
    assert_eq!(elected.get_i64("masterBrokerId").unwrap(), 1);
    elected.get_i32("masterEpoch").unwrap()
}

async fn master_and_epoch(addr: SocketAddr) -> (i64, i32) {
    let answer = call(
        addr,
        request::CONTROLLER_GET_REPLICA_INFO,
        &[("brokerName", "broker-a")],
    )
    .await
    .expect("answered");
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    (
        answer.get_i64("masterBrokerId").unwrap(),
        answer.get_i32("masterEpoch").unwrap(),
    )
}

#[test]
fn three_controllers_keep_the_group_state_when_their_leader_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let confs: Vec<PathBuf> = (0..3).map(|i| write_conf(dir.path(), &ports, i)).collect();
    let mut controllers: Vec<Controller> = confs.iter().map(|c| Controller::start(c)).collect();
    let addrs: Vec<SocketAddr> = controllers.iter().map(|c| c.addr).collect();
    for (addr, port) in addrs.iter().zip(ports) {
        assert_eq!(*addr, SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port));
    }
    run_local(false, async {
        let first = leader(&addrs).await;
        let epoch = elect_a_master(first).await;
        let killed = addrs.iter().position(|a| *a == first).unwrap();
        let started = Instant::now();
        controllers[killed].child.kill().unwrap();
        controllers[killed].child.wait().unwrap();
        let others: Vec<SocketAddr> = addrs.iter().copied().filter(|a| *a != first).collect();
        let next = leader(&others).await;
        eprintln!(
            "a new controller leader answered {:?} after the SIGKILL",
            started.elapsed()
        );
        assert_eq!(master_and_epoch(next).await, (1, epoch));
        controllers[killed] = Controller::start(&confs[killed]);
        let deadline = Instant::now() + BOUND;
        loop {
            let answer = call(first, request::CONTROLLER_GET_METADATA_INFO, &[]).await;
            let told = answer.and_then(|a| a.opt_str("controllerLeaderAddress").map(str::to_owned));
            if told.as_deref() == Some(next.to_string().as_str()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the restarted controller follows no leader"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn a_store_directory_of_another_program_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), &[free_port()], 0);
    let store = dir.path().join("store-n0");
    std::fs::create_dir_all(store.join("dledger-n0")).unwrap();
    let output = command(&conf).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("dledger-n0") && stderr.contains("controllerStorePath"),
        "{stderr}"
    );
}
