//! GET_BROKER_RUNTIME_INFO (28), `mqadmin brokerStatus`: the node's figures as a
//! `KVTable`, `{"table":{"key":"value",…}}`, every value a string.
//!
//! Keys that mean what they mean in Java keep Java's names (`brokerVersionDesc`,
//! `bootTimestamp`, `runtime`, `commitLogMinOffset`, `commitLogMaxOffset`,
//! `commitLogDiskRatio`, and the rates below); the rest are ringmq's and say so by their
//! names. Java's day-bucketed counters (`msgPutTotalTodayNow` and kin) are not given: the
//! node counts since it started (`msgPutTotalSinceBoot`), and a different meaning under
//! Java's name would mislead a dashboard.
//!
//! The rates are Java's `StoreStatsService` figures, `"<10 s> <1 min> <10 min>"` per
//! second ([`crate::metrics::rates`]), summed over the shards: `putTps` (messages
//! stored), `getFoundTps` and `getMissTps` (pulls that found messages and pulls that found
//! none), `getTotalTps` (the two together), and `getTransferredTps` (messages pulls and
//! pops returned; also under 4.x's spelling `getTransferedTps`, which older tools read).
//! `mqadmin clusterList` and `ringmq admin cluster` print the first figure of `putTps` and
//! `getTransferredTps` as in and out TPS.
//!
//! The CommitLog figures are the node's over all shards ([`crate::broker::admin::fan_out`]): the lowest
//! start, the highest end (each shard's offsets carry its id in the top byte, D4), the sum
//! of what was stored, and the highest disk usage any shard's last retention run saw.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::metrics::rates::{java_tps, RateFigures, Tps};
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::admin::fan_out::{gather, Gathered, Rows};
use crate::broker::Broker;

/// log start, log end, puts, put bytes, disk used percent, puts refused for space, then
/// the rates ([`RATES`] of three spans each, in thousandths).
const WIDTH: usize = 6 + 3 * RATES;
/// Rates each shard sends: put, get found, get missed, transferred.
const RATES: usize = 4;

/// This shard's rates as columns: each span of each rate, per second × 1000.
fn rate_columns(rates: &RateFigures) -> Vec<i64> {
    [
        rates.put,
        rates.get_found,
        rates.get_missed,
        rates.transferred,
    ]
    .iter()
    .flatten()
    .map(|tps| (tps * 1000.0).round() as i64)
    .collect()
}

pub async fn runtime_info(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let local: Rows = [(broker.shard.id() as i32, local_columns(broker))].into();
    let rows = match gather(broker, request, peer, WIDTH, local).await {
        Ok(Gathered::Answer(answer)) => return answer,
        Ok(Gathered::All(rows)) => rows,
        Err(answer) => return answer,
    };
    let mut table = BTreeMap::new();
    put_log_figures(&mut table, broker, &rows);
    put_rates(&mut table, &rows);
    put_node_figures(&mut table, broker);
    let body = serde_json::json!({ "table": table });
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(body.to_string().into_bytes())
}

/// This shard's row: its log's figures, then its rates ([`WIDTH`] columns).
fn local_columns(broker: &Broker) -> Vec<i64> {
    let stats = broker.store.stats();
    let log_end = broker.store.log_positions().write;
    let mut columns = vec![
        broker.store.log_start() as i64,
        log_end as i64,
        stats.puts as i64,
        stats.put_bytes as i64,
        stats.retention.used_percent as i64,
        stats.retention.puts_refused_for_space as i64,
    ];
    columns.extend(rate_columns(&broker.metrics.rates()));
    columns
}

/// Column `index` of every shard's row.
fn column(rows: &Rows, index: usize) -> impl Iterator<Item = i64> + '_ {
    rows.values().map(move |values| values[index])
}

/// The version, uptime and the CommitLogs' figures, over every shard.
fn put_log_figures(table: &mut BTreeMap<String, String>, broker: &Broker, rows: &Rows) {
    let mut put = |key: &str, value: String| {
        table.insert(key.to_owned(), value);
    };
    put(
        "brokerVersionDesc",
        format!("ringmq {}", env!("CARGO_PKG_VERSION")),
    );
    put("bootTimestamp", broker.started_ms.to_string());
    put("runtime", uptime(broker.now_ms() - broker.started_ms));
    put(
        "commitLogMinOffset",
        column(rows, 0).min().unwrap_or(0).to_string(),
    );
    put(
        "commitLogMaxOffset",
        column(rows, 1).max().unwrap_or(0).to_string(),
    );
    let used = column(rows, 4).max().unwrap_or(0);
    put("commitLogDiskRatio", format!("{:.2}", used as f64 / 100.0));
    put(
        "msgPutTotalSinceBoot",
        column(rows, 2).sum::<i64>().to_string(),
    );
    put(
        "msgPutBytesSinceBoot",
        column(rows, 3).sum::<i64>().to_string(),
    );
    put(
        "putsRefusedForDiskSpace",
        column(rows, 5).sum::<i64>().to_string(),
    );
}

/// The node's rates: every shard's added up.
fn put_rates(table: &mut BTreeMap<String, String>, rows: &Rows) {
    let rate = |index: usize| -> Tps {
        std::array::from_fn(|span| column(rows, 6 + 3 * index + span).sum::<i64>() as f64 / 1000.0)
    };
    let rates = RateFigures {
        put: rate(0),
        get_found: rate(1),
        get_missed: rate(2),
        transferred: rate(3),
    };
    let mut put = |key: &str, value: String| {
        table.insert(key.to_owned(), value);
    };
    put("putTps", java_tps(rates.put));
    put("getFoundTps", java_tps(rates.get_found));
    put("getMissTps", java_tps(rates.get_missed));
    put("getTotalTps", java_tps(rates.get_total()));
    put("getTransferredTps", java_tps(rates.transferred));
    put("getTransferedTps", java_tps(rates.transferred));
}

/// The node's shape, identity and load as `mqadmin clusterList` reads them.
fn put_node_figures(table: &mut BTreeMap<String, String>, broker: &Broker) {
    let mut put = |key: &str, value: String| {
        table.insert(key.to_owned(), value);
    };
    put("shardCount", broker.shard.count().to_string());
    put("topicCount", broker.topics.all().len().to_string());
    put(
        "consumerGroupsOnline",
        broker.groups.consumer_groups().len().to_string(),
    );
    put(
        "clientRegistrations",
        broker.groups.registrations().to_string(),
    );
    put("brokerName", broker.identity.broker_name.clone());
    put("clusterName", broker.identity.cluster_name.clone());
    // `mqadmin clusterList` prints these as each row's load (it shows "null" or "N" for a
    // missing one). Java's are the depth and head wait of its send, pull and ack thread
    // pools' queues, and how long the current put has held the CommitLog's lock; a shard
    // serves requests on its own thread with no such queue and appends without a lock,
    // so all are 0.
    for key in [
        "sendThreadPoolQueueSize",
        "sendThreadPoolQueueHeadWaitTimeMills",
        "pullThreadPoolQueueSize",
        "pullThreadPoolQueueHeadWaitTimeMills",
        "ackThreadPoolQueueSize",
        "ackThreadPoolQueueHeadWaitTimeMills",
        "pageCacheLockTimeMills",
    ] {
        put(key, "0".to_owned());
    }
    // clusterList's ACTIVATED column: a Java master in a controller-less cluster is always
    // active (it takes writes); so is a ringmq node, which has no other role.
    put("brokerActive", "true".to_owned());
}

/// Java's `runtime` format: `[ 0 days, 1 hours, 2 minutes, 3 seconds ]`.
fn uptime(ms: i64) -> String {
    let seconds = ms.max(0) / 1000;
    format!(
        "[ {} days, {} hours, {} minutes, {} seconds ]",
        seconds / 86_400,
        seconds % 86_400 / 3600,
        seconds % 3600 / 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn uptime_reads_as_java_writes_it() {
        assert_eq!(
            super::uptime(90_061_000),
            "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"
        );
        assert_eq!(
            super::uptime(-5),
            "[ 0 days, 0 hours, 0 minutes, 0 seconds ]"
        );
    }
}
