//! Replication's section of the metrics page (D14): each shard's role, its streams, how far
//! each slave is behind, and the bytes moved. The node samples the figures once a second
//! (`node::replication`); a master's lag per slave is the figure to alert on.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::metrics::{ReplicationFigures, ShardMetrics};

/// One sample: its labels after `shard`, and its value.
type Samples = Vec<(String, u64)>;

/// The samples of one shard's figures for one family.
type Pick = fn(&ReplicationFigures) -> Samples;

/// The families: name, kind, help, and the samples of one shard's figures.
const FAMILIES: &[(&str, &str, &str, Pick)] = &[
    (
        "ringmq_replication_role",
        "gauge",
        "1 for the shard's role (master or slave).",
        |f| {
            let role = if f.slave { "slave" } else { "master" };
            vec![(format!(",role=\"{role}\""), 1)]
        },
    ),
    (
        "ringmq_replication_streams",
        "gauge",
        "Streams up: a master's streaming slaves; 1 on a slave whose stream to its master is up.",
        |f| {
            let up = if f.slave { u64::from(f.connected) } else { f.peers.len() as u64 };
            vec![(String::new(), up)]
        },
    ),
    (
        "ringmq_replication_lag_bytes",
        "gauge",
        "Bytes of the master's written log a streaming slave does not hold yet.",
        |f| {
            f.peers
                .iter()
                .map(|(peer, lag)| (format!(",slave=\"{peer}\""), *lag))
                .collect()
        },
    ),
    (
        "ringmq_replication_bytes_total",
        "counter",
        "Bytes of log sent to slaves (master) or appended from the master (slave).",
        |f| vec![(String::new(), f.bytes)],
    ),
    (
        "ringmq_replication_offset",
        "gauge",
        "The replication watermark (master: what a slave holds) or the slave's acknowledged end, within the shard.",
        |f| vec![(String::new(), f.offset)],
    ),
    (
        "ringmq_replication_truncations_total",
        "counter",
        "Times a slave cut its log back to agree with its master.",
        |f| vec![(String::new(), f.truncations)],
    ),
];

pub(in crate::metrics) fn render(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    let figures: Vec<_> = shards
        .iter()
        .map(|shard| (shard.shard, shard.replication()))
        .collect();
    for (name, kind, help, samples) in FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (shard, f) in &figures {
            for (labels, value) in samples(f) {
                let _ = writeln!(out, "{name}{{shard=\"{shard}\"{labels}}} {value}");
            }
        }
    }
}
