//! GET_BROKER_RUNTIME_INFO (28), `mqadmin brokerStatus`: the node's figures as a
//! `KVTable`, `{"table":{"key":"value",…}}`, every value a string.
//!
//! Keys that mean what they mean in Java keep Java's names (`brokerVersionDesc`,
//! `bootTimestamp`, `runtime`, `commitLogMinOffset`, `commitLogMaxOffset`,
//! `commitLogDiskRatio`); the rest are ringmq's and say so by their names. Java's
//! day-bucketed counters (`msgPutTotalTodayNow` and kin) are not given: the node counts
//! since it started (`msgPutTotalSinceBoot`), and a different meaning under Java's name
//! would mislead a dashboard.
//!
//! The CommitLog figures are the node's over all shards ([`super::fan_out`]): the lowest
//! start, the highest end (each shard's offsets carry its id in the top byte, D4), the sum
//! of what was stored, and the highest disk usage any shard's last retention run saw.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use super::fan_out::{gather, Gathered, Rows};
use super::Broker;

/// log start, log end, puts, put bytes, disk used percent, puts refused for space.
const WIDTH: usize = 6;

pub async fn runtime_info(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let stats = broker.store.stats();
    let (_, _, log_end) = broker.store.log_positions();
    let local: Rows = [(
        broker.shard.id() as i32,
        vec![
            broker.store.log_start() as i64,
            log_end as i64,
            stats.puts as i64,
            stats.put_bytes as i64,
            stats.retention.used_percent as i64,
            stats.retention.puts_refused_for_space as i64,
        ],
    )]
    .into();
    let rows = match gather(broker, request, peer, WIDTH, local).await {
        Ok(Gathered::Answer(answer)) => return answer,
        Ok(Gathered::All(rows)) => rows,
        Err(answer) => return answer,
    };
    let column = |index: usize| rows.values().map(move |values| values[index]);
    let now = broker.now_ms();
    let mut table = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        table.insert(key.to_owned(), value);
    };
    put(
        "brokerVersionDesc",
        format!("ringmq {}", env!("CARGO_PKG_VERSION")),
    );
    put("bootTimestamp", broker.started_ms.to_string());
    put("runtime", uptime(now - broker.started_ms));
    put(
        "commitLogMinOffset",
        column(0).min().unwrap_or(0).to_string(),
    );
    put(
        "commitLogMaxOffset",
        column(1).max().unwrap_or(0).to_string(),
    );
    let used = column(4).max().unwrap_or(0);
    put("commitLogDiskRatio", format!("{:.2}", used as f64 / 100.0));
    put("msgPutTotalSinceBoot", column(2).sum::<i64>().to_string());
    put("msgPutBytesSinceBoot", column(3).sum::<i64>().to_string());
    put(
        "putsRefusedForDiskSpace",
        column(5).sum::<i64>().to_string(),
    );
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
    let body = serde_json::json!({ "table": table });
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(body.to_string().into_bytes())
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
