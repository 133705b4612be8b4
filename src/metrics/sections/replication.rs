//! Replication's section of the metrics page (D14): each shard's role, its streams, how far
//! each slave is behind (bytes, and the age of the first record it does not hold), the
//! bytes moved, and how long SYNC_MASTER batches wait for their replica. The node samples
//! the figures once a second (`node::replication_sampler`); the confirm latency is
//! recorded as each confirmation arrives. A master's lag per slave is the figure to alert
//! on.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::metrics::{escape_label, histogram_samples, ReplicationFigures, ShardMetrics};

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
            let up = match f.slave {
                true => u64::from(f.connected),
                false => f.peers.iter().filter(|peer| peer.streaming).count() as u64,
            };
            vec![(String::new(), up)]
        },
    ),
    (
        "ringmq_replication_lag_bytes",
        "gauge",
        "Bytes of the master's written log a streaming slave does not hold yet.",
        |f| streaming(f, |peer| Some(peer.lag.bytes)),
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

/// One sample per streaming slave, labelled with its address; `None` leaves it out.
fn streaming(
    f: &ReplicationFigures,
    value: impl Fn(&crate::metrics::PeerFigures) -> Option<u64>,
) -> Samples {
    f.peers
        .iter()
        .filter(|peer| peer.streaming)
        .filter_map(|peer| {
            let label = format!(",slave=\"{}\"", escape_label(&peer.addr));
            value(peer).map(|value| (label, value))
        })
        .collect()
}

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
    render_lag_seconds(out, &figures);
    render_confirm_latency(out, shards);
}

/// `ringmq_replication_lag_seconds`, from the lag's milliseconds; a lag whose record could
/// not be read is left out rather than shown as 0.
fn render_lag_seconds(out: &mut String, figures: &[(u8, ReplicationFigures)]) {
    let name = "ringmq_replication_lag_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Age of the first record a streaming slave does not hold (now minus its store time); 0 when it holds everything written.\n# TYPE {name} gauge"
    );
    for (shard, f) in figures {
        for (labels, millis) in streaming(f, |peer| peer.lag.millis) {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{shard}\"{labels}}} {}.{:03}",
                millis / 1000,
                millis % 1000
            );
        }
    }
}

/// `ringmq_replication_confirm_latency_seconds`: a histogram per shard, with the request
/// latency's buckets so it sums over shards and nodes.
fn render_confirm_latency(out: &mut String, shards: &[Arc<ShardMetrics>]) {
    let name = "ringmq_replication_confirm_latency_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from a SYNC_MASTER batch's write to the replica's confirmation covering it.\n# TYPE {name} histogram"
    );
    for shard in shards {
        let labels = format!("shard=\"{}\"", shard.shard);
        histogram_samples(out, name, &labels, &shard.confirm_latency.lock());
    }
}
