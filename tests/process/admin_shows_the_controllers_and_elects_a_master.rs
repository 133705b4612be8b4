//! `ringmq admin controller` and `elect-master` against real processes: three controllers,
//! a name server and a group of two brokers in controller mode. The view names the leader
//! and the group's master, epochs and SyncStateSet (both alive, in sync), in both forms;
//! a designated election moves the master to the slave under a higher epoch; and the
//! refusals: an id that is no broker's (the controllers' status, exit 3), id 0 (exit 2,
//! before any request), controllers that cannot be reached (exit 3, each named).

use std::time::Duration;

use serde_json::Value;

use crate::common::process_cluster::{admin_exit as admin, free_port, BrokerSpec, ProcessCluster};
use crate::common::process_controllers::{controller_mode_broker, replica_info, ControllerGroup};
use crate::common::run_local;

const GROUP: &str = "broker-a";
const LIMIT: Duration = Duration::from_secs(60);

fn spec(n: u64, controllers: &ControllerGroup) -> BrokerSpec {
    controller_mode_broker(GROUP, n, &controllers.controller_addr())
}

/// Waits until the controllers name a master and a SyncStateSet of two; (master, epoch,
/// set).
fn wait_formed(cluster: &ProcessCluster, controllers: &ControllerGroup) -> (i64, i32, Vec<i64>) {
    let addrs = controllers.addrs();
    let mut found = None;
    cluster.wait_until(LIMIT, "a master and a SyncStateSet of two", || {
        found = match run_local(false, replica_info(&addrs, GROUP)) {
            Some((Some(master), epoch, set)) if set.len() == 2 => Some((master, epoch, set)),
            _ => None,
        };
        found.is_some()
    });
    found.expect("found")
}

#[test]
fn admin_shows_the_controllers_view_and_elects_a_designated_master() {
    let mut cluster = ProcessCluster::new(1);
    cluster.start_name_servers();
    let controllers = ControllerGroup::start(cluster.dir());
    cluster.add_broker(spec(0, &controllers));
    cluster.add_broker(spec(1, &controllers));
    let (master, epoch, set) = wait_formed(&cluster, &controllers);
    let namesrv = cluster.namesrv_addr();
    let controller_addr = controllers.controller_addr();

    let (code, out, err) = admin(&["-n", &namesrv, "controller", "-a", &controller_addr]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("yes"), "one controller leads:\n{out}");
    let row = out
        .lines()
        .find(|line| line.starts_with(GROUP))
        .unwrap_or_else(|| panic!("no row of {GROUP}:\n{out}"));
    assert!(row.contains(&format!(" {master} ")), "{row}");
    assert_eq!(row.matches("(alive)").count(), 2, "{row}");

    let (code, out, err) = admin(&[
        "-n",
        &namesrv,
        "--json",
        "controller",
        "-a",
        &controller_addr,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let view: Value = serde_json::from_str(&out).expect("JSON");
    let leaders = view["controllers"]
        .as_array()
        .expect("controllers")
        .iter()
        .filter(|c| c["isLeader"] == true)
        .count();
    assert_eq!(leaders, 1, "{view}");
    let group = &view["groups"][GROUP];
    assert_eq!(group["masterBrokerId"], master, "{view}");
    assert_eq!(group["masterEpoch"], epoch, "{view}");
    let in_sync: Vec<i64> = group["inSyncReplicas"]
        .as_array()
        .expect("inSyncReplicas")
        .iter()
        .map(|r| r["brokerId"].as_i64().expect("an id"))
        .collect();
    assert_eq!(in_sync, set, "{view}");

    // The slave, designated.
    let slave = *set.iter().find(|&&id| id != master).expect("a slave");
    let slave_text = slave.to_string();
    let elect = [
        "elect-master",
        "-a",
        &controller_addr,
        "--broker-name",
        GROUP,
    ];
    let (code, out, err) = admin(&[&elect[..], &["-i", &slave_text]].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&slave_text), "{out}");
    let (now_master, now_epoch, _) = wait_formed(&cluster, &controllers);
    assert_eq!(now_master, slave);
    assert!(now_epoch > epoch, "epoch {now_epoch} after {epoch}");

    // An id no broker has: the controllers refuse, and say so.
    let (code, out, err) = admin(&[&elect[..], &["-i", "99"]].concat());
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("CONTROLLER") || err.contains("99"), "{err}");
    // Id 0 is the name server's master id, never a controller id: refused before asking.
    let (code, _, err) = admin(&[&elect[..], &["-i", "0"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("start at 1"), "{err}");

    // Controllers that cannot be reached: each row says why, and no leader is a failure.
    let nowhere = format!("127.0.0.1:{};127.0.0.1:{}", free_port(), free_port());
    let (code, out, err) = admin(&["-n", &namesrv, "controller", "-a", &nowhere]);
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(out.matches("unreachable").count(), 2, "{out}");
    assert!(err.contains("says it leads"), "{err}");
}
