//! Replication as the admin commands show it: `ha-status` (mqadmin haStatus) on one broker,
//! or with `--cluster` on every master of it; and the role and per-slave lag the `cluster`
//! command adds to its rows, all from GET_BROKER_HA_STATUS (907).
//!
//! A slave's lag comes from its master's answer: the master's connection entries whose
//! `slaveBrokerId` is the slave's id (a ringmq master lists one per shard; the lag shown is
//! the worst shard's). A Java master names no broker id: when its group has one slave, all
//! its entries are that slave's. Lag in bytes is the master's written end minus the slave's
//! ack; in seconds, the age of the first record the slave does not hold (0 when it holds
//! everything; see `node::replication_sampler`).

use std::net::SocketAddr;

use serde_json::json;

use crate::remoting::codes::request;

use super::super::error::AdminResult;
use super::super::ha_body::{self, HaConnection, HaStatus};
use super::super::output::{fields, Output, Table};
use super::super::time::format_utc;
use super::super::wire::command;
use super::Ctx;

/// GET_BROKER_HA_STATUS (907) on `addr`.
pub async fn ha_status_of(ctx: &Ctx, addr: SocketAddr) -> AdminResult<HaStatus> {
    let answer = ctx
        .wire
        .call_ok(addr, command(request::GET_BROKER_HA_STATUS, &[]))
        .await?;
    Ok(ha_body::ha_status(&answer.body)?)
}

/// `ha-status`: each target broker's replication.
pub async fn ha_status(ctx: &Ctx) -> AdminResult<Output> {
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        let status = ha_status_of(ctx, broker).await?;
        let text = match status.master {
            true => master_text(broker, &status),
            false => slave_text(&status),
        };
        outputs.push(Output::new(
            json!({ "broker": broker.to_string(), "haStatus": status }),
            text,
        ));
    }
    Ok(ctx.combine(outputs))
}

/// A broker's role: ringmq's `brokerRole`, else Java's `master` flag; without an answer,
/// what its broker id says (0 is the master).
pub fn role(status: Option<&HaStatus>, id: i64) -> String {
    match status {
        Some(HaStatus {
            broker_role: Some(role),
            ..
        }) => role.clone(),
        Some(status) if status.master => "MASTER".to_owned(),
        Some(_) => "SLAVE".to_owned(),
        None if id == 0 => "MASTER".to_owned(),
        None => "SLAVE".to_owned(),
    }
}

/// How far a slave is behind, by its master's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlaveLag {
    pub bytes: i64,
    /// `None` when the master could not say (a Java master, or a record it could not read).
    pub millis: Option<i64>,
}

/// Slave `id`'s lag in its master's answer: the worst of its streams (one per shard);
/// `None` when it has none there. `slaves` is how many slaves the group lists.
pub fn slave_lag(master: &HaStatus, id: i64, slaves: usize) -> Option<SlaveLag> {
    let named = master
        .ha_connection_info
        .iter()
        .any(|c| c.slave_broker_id.is_some());
    let streams: Vec<&HaConnection> = master
        .ha_connection_info
        .iter()
        .filter(|c| match named {
            true => c.slave_broker_id == Some(id),
            false => slaves == 1,
        })
        .collect();
    if streams.is_empty() {
        return None;
    }
    let millis: Option<Vec<i64>> = streams.iter().map(|c| c.lag_millis).collect();
    Some(SlaveLag {
        bytes: streams.iter().map(|c| c.diff).max().unwrap_or(0),
        millis: millis.map(|all| all.into_iter().max().unwrap_or(0)),
    })
}

/// Milliseconds as seconds with one decimal.
pub fn seconds(millis: i64) -> String {
    format!("{}.{}", millis / 1000, (millis % 1000) / 100)
}

fn master_text(broker: SocketAddr, status: &HaStatus) -> String {
    let role = role(Some(status), 0);
    let shards = status
        .shard_count
        .map_or_else(String::new, |n| format!(", {n} shards"));
    let mut text = fields(&[
        ("master", format!("{broker} ({role}{shards})")),
        (
            "commit log max offset",
            status.master_commit_log_max_offset.to_string(),
        ),
        ("slave streams", status.ha_connection_info.len().to_string()),
        ("slaves in sync", status.in_sync_slave_nums.to_string()),
    ]);
    let mut table = Table::new(&[
        "slave addr",
        "#id",
        "#shard",
        "#ack offset",
        "#diff",
        "#lag s",
        "#KB/s",
        "status",
        "#from",
    ]);
    for c in &status.ha_connection_info {
        table.row(vec![
            c.addr.clone(),
            c.slave_broker_id.map_or("-".into(), |id| id.to_string()),
            c.shard.map_or("-".into(), |shard| shard.to_string()),
            c.slave_ack_offset.to_string(),
            c.diff.to_string(),
            c.lag_millis.map_or("-".into(), seconds),
            format!("{:.2}", c.transferred_byte_in_second as f64 / 1024.0),
            if c.in_sync { "OK" } else { "Fall Behind" }.into(),
            c.transfer_from_where.to_string(),
        ]);
    }
    text.push('\n');
    text.push_str(&table.render());
    text
}

fn slave_text(status: &HaStatus) -> String {
    let client = &status.ha_client_runtime_info;
    let time = |ms: i64| if ms > 0 { format_utc(ms) } else { "-".into() };
    let mut text = fields(&[
        ("role", role(Some(status), 1)),
        (
            "master addr",
            client.master_addr.clone().unwrap_or_else(|| "-".into()),
        ),
        ("commit log max offset", client.max_offset.to_string()),
        (
            "transfer KB/s",
            format!("{:.2}", client.transferred_byte_in_second as f64 / 1024.0),
        ),
        ("last read", time(client.last_read_timestamp)),
        ("last write", time(client.last_write_timestamp)),
        (
            "master flush offset",
            client.master_flush_offset.to_string(),
        ),
    ]);
    if !client.shards.is_empty() {
        let mut table = Table::new(&[
            "#shard",
            "stream",
            "#max offset",
            "#KB/s",
            "last read",
            "last write",
        ]);
        for shard in &client.shards {
            table.row(vec![
                shard.shard.to_string(),
                if shard.connected { "up" } else { "down" }.into(),
                shard.max_offset.to_string(),
                format!("{:.2}", shard.transferred_byte_in_second as f64 / 1024.0),
                time(shard.last_read_timestamp),
                time(shard.last_write_timestamp),
            ]);
        }
        text.push('\n');
        text.push_str(&table.render());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(id: Option<i64>, shard: i64, diff: i64, lag: Option<i64>) -> HaConnection {
        HaConnection {
            addr: format!("10.0.0.2:{}", 40_000 + shard),
            diff,
            shard: Some(shard),
            slave_broker_id: id,
            lag_millis: lag,
            ..HaConnection::default()
        }
    }

    #[test]
    fn a_slaves_lag_is_its_worst_shard_in_its_masters_answer() {
        let master = HaStatus {
            master: true,
            ha_connection_info: vec![
                connection(Some(1), 0, 100, Some(20)),
                connection(Some(1), 1, 40, Some(2_500)),
                connection(Some(2), 0, 9_999, Some(99_000)),
            ],
            ..HaStatus::default()
        };
        assert_eq!(
            slave_lag(&master, 1, 2),
            Some(SlaveLag {
                bytes: 100,
                millis: Some(2_500)
            })
        );
        assert_eq!(slave_lag(&master, 3, 2), None, "not streaming");
    }

    #[test]
    fn a_java_masters_entries_are_its_only_slaves() {
        let master = HaStatus {
            master: true,
            ha_connection_info: vec![connection(None, 0, 64, None)],
            ..HaStatus::default()
        };
        assert_eq!(
            slave_lag(&master, 1, 1),
            Some(SlaveLag {
                bytes: 64,
                millis: None
            })
        );
        assert_eq!(slave_lag(&master, 1, 2), None, "which slave is unknown");
    }

    #[test]
    fn roles_come_from_the_answer_else_the_broker_id() {
        let sync = HaStatus {
            master: true,
            broker_role: Some("SYNC_MASTER".into()),
            ..HaStatus::default()
        };
        assert_eq!(role(Some(&sync), 0), "SYNC_MASTER");
        let java_slave = HaStatus::default();
        assert_eq!(role(Some(&java_slave), 1), "SLAVE");
        assert_eq!(role(None, 0), "MASTER");
        assert_eq!(role(None, 2), "SLAVE");
        assert_eq!(seconds(2_560), "2.5");
        assert_eq!(seconds(0), "0.0");
    }
}
