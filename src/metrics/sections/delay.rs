//! The delay-level engine's section of the metrics page.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::metrics::{DelayFigures, ShardMetrics};

/// The delay level families: one sample per level, from the shard that schedules it.
pub(in crate::metrics) fn render(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    type Pick = fn(&DelayFigures) -> String;
    let families: [(&str, &str, &str, Pick); 4] = [
        (
            "ringmq_delay_pending",
            "gauge",
            "Delayed messages of the level waiting in SCHEDULE_TOPIC_XXXX.",
            |f| f.pending.to_string(),
        ),
        (
            "ringmq_delay_delivered_total",
            "counter",
            "Delayed messages of the level delivered.",
            |f| f.delivered.to_string(),
        ),
        (
            "ringmq_delay_lateness_seconds_total",
            "counter",
            "Time from each delivered delayed message's due time to its acknowledged copy, summed.",
            |f| format!("{}.{:03}", f.lateness_ms / 1000, f.lateness_ms % 1000),
        ),
        (
            "ringmq_delay_skipped_total",
            "counter",
            "Scheduled records of the level that could not be delivered and were skipped.",
            |f| f.skipped.to_string(),
        ),
    ];
    for (name, kind, help, pick) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for shard in shards {
            for figures in shard.delay.lock().iter() {
                let _ = writeln!(
                    out,
                    "{name}{{shard=\"{}\",level=\"{}\"}} {}",
                    shard.shard,
                    figures.level,
                    pick(figures)
                );
            }
        }
    }
}
