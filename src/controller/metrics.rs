//! A controller's metrics (D18): what it answered, what its elections did, and whether it
//! leads, as the Prometheus text its optional endpoint serves (`metricsExporterType=PROM`,
//! [`crate::metrics::http`]).
//!
//! Written on the controller's thread, read by the endpoint's: counters behind one mutex
//! each (a request's answer takes it once), gauges as atomics the controller refreshes at
//! every scan of its leader loop and at every answer. Label values come from closed sets:
//! request codes the controller serves by name (any other is `other`), response codes as
//! numbers (the controller answers a few dozen at most), election triggers and outcomes by
//! name.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::remoting::codes::request as req;

/// The controller's figures, cloned into its endpoint.
#[derive(Clone, Default)]
pub struct ControllerMetrics(Arc<Inner>);

#[derive(Default)]
struct Inner {
    node: String,
    answers: Mutex<BTreeMap<(&'static str, i32), u64>>,
    elections: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    leader: AtomicBool,
    leader_known: AtomicBool,
    term: AtomicU64,
    applied: AtomicU64,
    groups: AtomicU64,
    tracked_brokers: AtomicU64,
}

/// What started an election.
#[derive(Clone, Copy, Debug)]
pub enum Trigger {
    /// The leader's scan found a group without a live master.
    Scan,
    /// A broker of the group asked.
    Broker,
    /// An operator named the winner (`electMaster`).
    Admin,
}

/// How an election ended.
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Elected,
    /// No live member of the set could win: a broker outside it was elected.
    ElectedUnclean,
    MasterStays,
    /// Fenced at apply by a change committed first; decided again.
    Fenced,
    Refused,
}

/// Writes a counter family: its HELP and TYPE lines, then one sample per labels.
fn counter_family(
    out: &mut String,
    name: &str,
    help: &str,
    samples: impl Iterator<Item = (String, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (labels, count) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {count}");
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The name of a request code the controller serves; `other` for any other.
fn request_name(code: i32) -> &'static str {
    match code {
        req::BROKER_HEARTBEAT => "BROKER_HEARTBEAT",
        req::CONTROLLER_GET_NEXT_BROKER_ID => "CONTROLLER_GET_NEXT_BROKER_ID",
        req::CONTROLLER_APPLY_BROKER_ID => "CONTROLLER_APPLY_BROKER_ID",
        req::CONTROLLER_REGISTER_BROKER => "CONTROLLER_REGISTER_BROKER",
        req::CONTROLLER_ELECT_MASTER => "CONTROLLER_ELECT_MASTER",
        req::CONTROLLER_ALTER_SYNC_STATE_SET => "CONTROLLER_ALTER_SYNC_STATE_SET",
        req::CONTROLLER_GET_REPLICA_INFO => "CONTROLLER_GET_REPLICA_INFO",
        req::CONTROLLER_GET_SYNC_STATE_DATA => "CONTROLLER_GET_SYNC_STATE_DATA",
        req::CONTROLLER_GET_METADATA_INFO => "CONTROLLER_GET_METADATA_INFO",
        req::CLEAN_BROKER_DATA => "CLEAN_BROKER_DATA",
        _ => "other",
    }
}

impl ControllerMetrics {
    pub fn new(node: &str) -> ControllerMetrics {
        ControllerMetrics(Arc::new(Inner {
            node: node.to_owned(),
            ..Inner::default()
        }))
    }

    /// A broker or admin request with `request_code` was answered `response_code`.
    pub fn answered(&self, request_code: i32, response_code: i32) {
        *lock(&self.0.answers)
            .entry((request_name(request_code), response_code))
            .or_default() += 1;
    }

    /// An election started by `trigger` ended in `outcome`.
    pub fn election(&self, trigger: Trigger, outcome: Outcome) {
        let trigger = match trigger {
            Trigger::Scan => "scan",
            Trigger::Broker => "broker",
            Trigger::Admin => "admin",
        };
        let outcome = match outcome {
            Outcome::Elected => "elected",
            Outcome::ElectedUnclean => "elected_unclean",
            Outcome::MasterStays => "master_stays",
            Outcome::Fenced => "fenced",
            Outcome::Refused => "refused",
        };
        *lock(&self.0.elections)
            .entry((trigger, outcome))
            .or_default() += 1;
    }

    /// The controller's state now: whether it leads (and in which term), whether it knows
    /// a leader, its last applied log index, its groups and the brokers in its heartbeat
    /// table.
    pub fn refresh(
        &self,
        leading_term: Option<u64>,
        leader_known: bool,
        applied: u64,
        groups: usize,
        tracked: usize,
    ) {
        let inner = &self.0;
        inner
            .leader
            .store(leading_term.is_some(), Ordering::Relaxed);
        if let Some(term) = leading_term {
            inner.term.store(term, Ordering::Relaxed);
        }
        inner.leader_known.store(leader_known, Ordering::Relaxed);
        inner.applied.store(applied, Ordering::Relaxed);
        inner.groups.store(groups as u64, Ordering::Relaxed);
        inner
            .tracked_brokers
            .store(tracked as u64, Ordering::Relaxed);
    }

    /// The Prometheus text of every metric.
    pub fn render(&self) -> String {
        let inner = &self.0;
        let node = &inner.node;
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            let _ = writeln!(out, "{name}{{node=\"{node}\"}} {value}");
        };
        gauge(
            "ringmq_controller_leader",
            "1 while this controller leads its Raft group.",
            u64::from(inner.leader.load(Ordering::Relaxed)),
        );
        gauge(
            "ringmq_controller_leader_known",
            "1 while this controller knows a leader (itself or another).",
            u64::from(inner.leader_known.load(Ordering::Relaxed)),
        );
        gauge(
            "ringmq_controller_leader_term",
            "The Raft term of this controller's latest leadership (0 before any).",
            inner.term.load(Ordering::Relaxed),
        );
        gauge(
            "ringmq_controller_applied_index",
            "The last Raft log index applied to the group state.",
            inner.applied.load(Ordering::Relaxed),
        );
        gauge(
            "ringmq_controller_groups",
            "Broker groups in the replicated state.",
            inner.groups.load(Ordering::Relaxed),
        );
        gauge(
            "ringmq_controller_tracked_brokers",
            "Brokers in the leader's heartbeat table (0 on a follower).",
            inner.tracked_brokers.load(Ordering::Relaxed),
        );
        counter_family(
            &mut out,
            "ringmq_controller_requests_total",
            "Broker and admin requests answered, by request and response code.",
            lock(&inner.answers).iter().map(|((request, code), count)| {
                (
                    format!("node=\"{node}\",request=\"{request}\",code=\"{code}\""),
                    *count,
                )
            }),
        );
        counter_family(
            &mut out,
            "ringmq_controller_elections_total",
            "Elections this controller ran as leader, by trigger and outcome.",
            lock(&inner.elections)
                .iter()
                .map(|((trigger, outcome), count)| {
                    (
                        format!("node=\"{node}\",trigger=\"{trigger}\",outcome=\"{outcome}\""),
                        *count,
                    )
                }),
        );
        out
    }
}

impl crate::metrics::http::Page for ControllerMetrics {
    fn render(&self) -> String {
        ControllerMetrics::render(self)
    }

    /// Ready while it knows a leader: a controller that knows none cannot answer brokers.
    fn health(&self) -> (bool, String) {
        let leader = self.0.leader.load(Ordering::Relaxed);
        match (leader, self.0.leader_known.load(Ordering::Relaxed)) {
            (true, _) => (true, "ready: leading\n".to_owned()),
            (false, true) => (true, "ready: following a leader\n".to_owned()),
            (false, false) => (false, "not ready: no leader known\n".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_counts_answers_and_elections_and_shows_the_state() {
        let metrics = ControllerMetrics::new("n0");
        metrics.answered(req::BROKER_HEARTBEAT, 0);
        metrics.answered(req::BROKER_HEARTBEAT, 0);
        metrics.answered(99_999, 3);
        metrics.election(Trigger::Scan, Outcome::Elected);
        metrics.refresh(Some(7), true, 42, 2, 4);
        let page = metrics.render();
        for line in [
            "ringmq_controller_leader{node=\"n0\"} 1",
            "ringmq_controller_leader_term{node=\"n0\"} 7",
            "ringmq_controller_applied_index{node=\"n0\"} 42",
            "ringmq_controller_groups{node=\"n0\"} 2",
            "ringmq_controller_tracked_brokers{node=\"n0\"} 4",
            "ringmq_controller_requests_total{node=\"n0\",request=\"BROKER_HEARTBEAT\",code=\"0\"} 2",
            "ringmq_controller_requests_total{node=\"n0\",request=\"other\",code=\"3\"} 1",
            "ringmq_controller_elections_total{node=\"n0\",trigger=\"scan\",outcome=\"elected\"} 1",
        ] {
            assert!(page.contains(line), "missing {line} in\n{page}");
        }
        use crate::metrics::http::Page as _;
        assert!(metrics.health().0);
        metrics.refresh(None, false, 42, 2, 0);
        assert_eq!(
            metrics.health(),
            (false, "not ready: no leader known\n".to_owned())
        );
        assert!(metrics
            .render()
            .contains("ringmq_controller_leader_term{node=\"n0\"} 7"));
    }
}
