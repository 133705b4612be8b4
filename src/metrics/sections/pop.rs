//! The POP engine's section of the metrics page.

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::metrics::{family, relaxed, ShardMetrics};

/// The POP families.
pub(in crate::metrics) fn render(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    type Pick = fn(&ShardMetrics) -> &AtomicU64;
    let counters: [(&str, &str, Pick); 7] = [
        (
            "ringmq_pop_delivered_total",
            "Messages handed out by POP_MESSAGE, redeliveries included.",
            |s| &s.pop_delivered,
        ),
        (
            "ringmq_pop_redelivered_total",
            "POP deliveries of messages not acknowledged within their invisible time.",
            |s| &s.pop_redelivered,
        ),
        (
            "ringmq_pop_acks_total",
            "POP deliveries acknowledged.",
            |s| &s.pop_acks,
        ),
        (
            "ringmq_pop_stale_acks_total",
            "POP acks and invisible-time changes naming a delivery not in flight.",
            |s| &s.pop_stale_acks,
        ),
        (
            "ringmq_pop_dead_letters_total",
            "Popped messages past their group's retries sent to its DLQ.",
            |s| &s.pop_dead_letters,
        ),
        (
            "ringmq_subscription_groups_refused_total",
            "Subscription groups not auto-created: the table held maxSubscriptionGroups.",
            |s| &s.subscription_groups_refused,
        ),
        (
            "ringmq_heartbeats_refused_total",
            "Heartbeats refused: the client table held maxClientRegistrations.",
            |s| &s.heartbeats_refused,
        ),
    ];
    for (name, help, pick) in counters {
        family(out, shards, name, "counter", help, |s| relaxed(pick(s)));
    }
    let name = "ringmq_pop_inflight";
    let _ = writeln!(
        out,
        "# HELP {name} POP deliveries not yet acknowledged, by group.\n# TYPE {name} gauge"
    );
    for shard in shards {
        for (group, count) in shard.pop_inflight.lock().iter() {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{}\",group=\"{}\"}} {count}",
                shard.shard, group
            );
        }
    }
}
