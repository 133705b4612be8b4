//! The failover fault campaign (issue 31, D18) on real processes: each episode starts
//! three controllers, a name server and two groups of a master and a slave in controller
//! mode ([`cluster`]), runs producers, a consumer and an observer of the controllers
//! ([`workload`]) that record every operation ([`history`]), injects one fault drawn from
//! its seed at a seeded moment ([`faults`]), heals it, waits until the cluster formed
//! again and the load flows, stops the clients, waits until every slave's CommitLogs equal
//! its master's, reads every queue from every master, and checks the history against what
//! is held.
//!
//! A failing episode prints its seed, its fault and the command that runs it alone. The
//! default is the few seeds of [`DEFAULT_SEEDS`] (CI's short version); the campaign
//! outside CI is `scripts/failover_campaign.sh`, or
//! `RINGMQ_CAMPAIGN_SEEDS=0..200 cargo test --release --test process failover_campaign`.
//! With `RINGMQ_CAMPAIGN_LOG=<file>` each episode appends its line of figures there.

mod cluster;
mod faults;
mod frozen_disk;
mod history;
mod proxy;
mod workload;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{CampaignCluster, GROUPS};
use faults::Plan;
use history::{check, Held, Outcome, Recorder};
use workload::{Clients, Targets, QUEUES, TOPIC};

use crate::common::process_replication::{logs_equal, read_topic};

/// CI's episodes: a master killed with the controllers' leader, a paused master, a master
/// cut from the controllers (seeds 3, 4, 5 of [`faults::KINDS`]'s order).
const DEFAULT_SEEDS: std::ops::Range<u64> = 3..6;
const PRODUCERS: usize = 3;
/// Acknowledgements the load must make before the fault, and again after the heal (the
/// producers found the masters again).
const ACKS_BEFORE: usize = 100;
const ACKS_AFTER: usize = 100;
/// How long the slaves may take to hold what their masters hold once the load stopped.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);

fn campaign_seeds() -> std::ops::Range<u64> {
    let Ok(text) = std::env::var("RINGMQ_CAMPAIGN_SEEDS") else {
        return DEFAULT_SEEDS;
    };
    let (start, end) = text
        .split_once("..")
        .unwrap_or_else(|| panic!("RINGMQ_CAMPAIGN_SEEDS={text}: expected START..END"));
    let parse = |n: &str| -> u64 { n.trim().parse().expect("RINGMQ_CAMPAIGN_SEEDS bound") };
    parse(start)..parse(end)
}

#[test]
fn failover_campaign_episodes_lose_nothing() {
    for seed in campaign_seeds() {
        episode(seed);
    }
}

/// What an episode measured besides the checker's findings.
struct Figures {
    /// The longest time the faulted group went without an acknowledgement, from the
    /// fault on.
    longest_gap: Duration,
    /// Master changes the observer saw in the faulted group.
    master_changes: usize,
    /// From the fault to the first acknowledgement in the faulted group by another broker
    /// than the one that acknowledged last before it; `None` if none did.
    failover: Option<Duration>,
    /// From the fault to the observer's first sight of another master of the group.
    elected: Option<Duration>,
    /// From the fault to the last acknowledgement by the broker that acknowledged last
    /// before it (for a paused master: what it acknowledged as a zombie, which its lease
    /// must end); `None` if it acknowledged nothing after the fault.
    last_ack_of_faulted: Option<Duration>,
}

fn episode(seed: u64) {
    let plan = Plan::of(seed, GROUPS.len());
    let shards = 1 + (seed / faults::KINDS.len() as u64 % 2) as u8;
    let started = Instant::now();
    let mut campaign = CampaignCluster::start(shards, plan.kind == faults::Kind::DiskStall);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_episode(seed, &plan, shards, started, &mut campaign);
    }));
    if let Err(panic) = ran {
        // A panic's message may carry one process's log, or none.
        eprintln!(
            "episode {seed} ({plan}) failed; the processes' logs:\n{}{}",
            campaign.cluster.logs(),
            campaign.controllers.logs(80)
        );
        std::panic::resume_unwind(panic);
    }
}

fn run_episode(
    seed: u64,
    plan: &Plan,
    shards: u8,
    started: Instant,
    campaign: &mut CampaignCluster,
) {
    let recorder = Arc::new(Recorder::new());
    let targets = Targets {
        namesrv: campaign.namesrv(),
        controllers: campaign.controllers.addrs(),
        groups: GROUPS.iter().map(ToString::to_string).collect(),
        episode: seed,
    };
    let clients = Clients::start(&targets, PRODUCERS, &recorder);
    campaign
        .cluster
        .wait_until(cluster::SETTLE_LIMIT, "the first acknowledgements", || {
            recorder.acked() >= ACKS_BEFORE
        });
    std::thread::sleep(plan.after);
    let fault_at = recorder.now();
    let heals = campaign.inject(plan);
    std::thread::sleep(plan.hold);
    campaign.heal(heals);
    campaign.wait_settled(&format!("the cluster to form again after {plan}"));
    let acked = recorder.acked();
    campaign.cluster.wait_until(
        cluster::SETTLE_LIMIT,
        "acknowledgements after the heal",
        || recorder.acked() >= acked + ACKS_AFTER,
    );
    clients.stop();

    let mut divergent = Vec::new();
    let held = drain(campaign, &mut divergent);
    let history = recorder.history();
    let mut report = check(&history, &held);
    report.divergent = divergent;
    let figures = figures(&history, GROUPS[plan.group], fault_at);
    let line = format!(
        "episode {seed} ({shards} shard(s)): {plan}: {}s; another master seen {:?} and its \
         first ack {:?} after the fault, the faulted master's last ack {:?} after it, longest \
         gap in acks {:?}, master changes {}; {}",
        started.elapsed().as_secs(),
        figures.elected,
        figures.failover,
        figures.last_ack_of_faulted,
        figures.longest_gap,
        figures.master_changes,
        report.summary()
    );
    eprintln!("{line}");
    if let Ok(path) = std::env::var("RINGMQ_CAMPAIGN_LOG") {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open the campaign log");
        writeln!(log, "{}", line.lines().next().unwrap_or_default()).expect("write it");
    }
    assert!(
        report.holds(),
        "episode {seed} failed ({plan}); run it alone with RINGMQ_CAMPAIGN_SEEDS={seed}..{} \
         cargo test --test process failover_campaign\n{}\n{}",
        seed + 1,
        report.summary(),
        campaign.cluster.logs()
    );
}

/// Waits until every group's slave holds its master's CommitLogs (naming those that never
/// do in `divergent`), and reads every queue from every master.
fn drain(campaign: &mut CampaignCluster, divergent: &mut Vec<String>) -> Held {
    let mut held = BTreeMap::new();
    for (g, group) in GROUPS.iter().enumerate() {
        let master = campaign.master(group);
        let slave = campaign.other(g, master);
        let (m, s) = (
            &campaign.cluster.brokers[master],
            &campaign.cluster.brokers[slave],
        );
        let deadline = Instant::now() + CATCH_UP_LIMIT;
        while !logs_equal(m, s, false) {
            if Instant::now() >= deadline {
                divergent.push(format!(
                    "{}'s CommitLogs differ from its master {}'s {CATCH_UP_LIMIT:?} after the load",
                    s.name, m.name
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let queues: Vec<i32> = (0..QUEUES).collect();
        for ((queue, offset), body) in read_topic(m.addr, TOPIC, &queues) {
            let body = String::from_utf8_lossy(&body).into_owned();
            held.insert((group.to_string(), queue, offset), body);
        }
    }
    held
}

fn figures(history: &history::History, group: &str, fault_at: Duration) -> Figures {
    let mut acks: Vec<(Duration, std::net::SocketAddr)> = history
        .sends
        .iter()
        .filter(|s| s.group == group && matches!(s.outcome, Outcome::Acked(_)))
        .map(|s| (s.ended, s.broker))
        .collect();
    acks.sort();
    let before = acks
        .iter()
        .rev()
        .find(|(at, _)| *at <= fault_at)
        .map(|(_, b)| *b);
    let failover = acks
        .iter()
        .find(|(at, broker)| *at > fault_at && Some(*broker) != before)
        .map(|(at, _)| *at - fault_at);
    let last_ack_of_faulted = acks
        .iter()
        .rev()
        .find(|(at, broker)| *at > fault_at && Some(*broker) == before)
        .map(|(at, _)| *at - fault_at);
    let mut longest_gap = Duration::ZERO;
    let mut last = fault_at;
    for (ended, _) in acks.into_iter().filter(|(at, _)| *at > fault_at) {
        longest_gap = longest_gap.max(ended - last);
        last = ended;
    }
    let seen: Vec<&history::MasterSeen> = history
        .masters
        .iter()
        .filter(|m| m.group == group)
        .collect();
    let master_before = seen
        .iter()
        .rev()
        .find(|m| m.at <= fault_at)
        .map(|m| m.master);
    let elected = seen
        .iter()
        .find(|m| m.at > fault_at && Some(m.master) != master_before)
        .map(|m| m.at - fault_at);
    let master_changes = history
        .masters
        .iter()
        .filter(|m| m.group == group)
        .count()
        .saturating_sub(1);
    Figures {
        longest_gap,
        master_changes,
        failover,
        elected,
        last_ack_of_faulted,
    }
}
