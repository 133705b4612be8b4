//! The timer engine's section of the metrics page.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::metrics::{family, relaxed, seconds_family, ShardMetrics};

/// Timer messages (the timer engine's section).
pub(in crate::metrics) fn render(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    family(
        out,
        shards,
        "ringmq_timer_pending",
        "gauge",
        "Timer messages waiting in the shard's timer store.",
        |s| relaxed(&s.timer_pending),
    );
    family(
        out,
        shards,
        "ringmq_timer_delivered_total",
        "counter",
        "Timer messages delivered.",
        |s| relaxed(&s.timer_delivered),
    );
    seconds_family(
        out,
        shards,
        "ringmq_timer_lateness_seconds_total",
        "Time from each delivered timer message's due time to its acknowledged copy, summed.",
        |s| {
            s.timer_lateness_ms
                .load(Ordering::Relaxed)
                .saturating_mul(1000)
        },
    );
    family(
        out,
        shards,
        "ringmq_timer_cancelled_total",
        "counter",
        "Timer messages cancelled (TIMER_DEL_UNIQKEY), and the cancellations.",
        |s| relaxed(&s.timer_cancelled),
    );
    family(
        out,
        shards,
        "ringmq_timer_skipped_total",
        "counter",
        "Timer records that could not be delivered and were skipped.",
        |s| relaxed(&s.timer_skipped),
    );
}
