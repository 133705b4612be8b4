//! The transaction engine's section of the metrics page (`broker::transaction`): what
//! each shard's transaction state counted, copied here whenever it changes.

use std::sync::Arc;

use crate::metrics::{family, seconds_family, ShardMetrics};

/// What one shard's transactions did since the start, and what waits now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransactionFigures {
    /// Undecided half messages (a gauge).
    pub pending: u64,
    pub prepared: u64,
    pub commits: u64,
    pub rollbacks: u64,
    /// Decisions for a half already resolved (answered SUCCESS, nothing changed).
    pub repeated_decisions: u64,
    pub checks_sent: u64,
    /// Checks due whose producer group had no live connection.
    pub checks_unsent: u64,
    /// Halves moved to TRANS_CHECK_MAX_TIME_TOPIC after their last check.
    pub discarded: u64,
    /// Commits of halves stored before this start: a commit written before a crash whose
    /// op record was lost is written again, so at most these many are duplicates.
    pub recommits: u64,
    /// Sum over decisions of (decision - the half's store time), ms.
    pub decision_ms_sum: u64,
    /// The longest of those, ms.
    pub decision_ms_max: u64,
}

/// The transaction families.
pub(in crate::metrics) fn render(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    type Pick = fn(&TransactionFigures) -> u64;
    let families: [(&str, &str, &str, Pick); 9] = [
        ("ringmq_transaction_halves_pending", "gauge", "Half messages waiting for a decision.", |f| f.pending),
        ("ringmq_transaction_prepared_total", "counter", "Prepared (half) messages stored.", |f| f.prepared),
        ("ringmq_transaction_commits_total", "counter", "Halves committed: their message written to its topic.", |f| f.commits),
        ("ringmq_transaction_rollbacks_total", "counter", "Halves rolled back.", |f| f.rollbacks),
        ("ringmq_transaction_repeated_decisions_total", "counter", "Decisions for a half already decided; nothing changed.", |f| f.repeated_decisions),
        ("ringmq_transaction_checks_sent_total", "counter", "CHECK_TRANSACTION_STATE requests sent to producers.", |f| f.checks_sent),
        ("ringmq_transaction_checks_unsent_total", "counter", "Checks due whose producer group had no live connection.", |f| f.checks_unsent),
        ("ringmq_transaction_checks_exhausted_total", "counter", "Halves moved to TRANS_CHECK_MAX_TIME_TOPIC after transactionCheckMax checks.", |f| f.discarded),
        ("ringmq_transaction_recommits_total", "counter", "Commits of halves stored before this start (each may duplicate a commit written before a crash).", |f| f.recommits),
    ];
    for (name, kind, help, pick) in families {
        family(out, shards, name, kind, help, |s| {
            i128::from(pick(&s.transactions()))
        });
    }
    seconds_family(
        out,
        shards,
        "ringmq_transaction_decision_seconds_total",
        "Time from each decided half's store time to its decision, summed (divide by commits plus rollbacks for the mean).",
        |s| s.transactions().decision_ms_sum.saturating_mul(1000),
    );
    family(
        out,
        shards,
        "ringmq_transaction_decision_max_seconds",
        "gauge",
        "The longest time from a half's store time to its decision since the start.",
        |s| i128::from(s.transactions().decision_ms_max / 1000),
    );
}
