//! `cluster` (mqadmin clusterList): GET_BROKER_CLUSTER_INFO (106) on the name server, then
//! GET_BROKER_RUNTIME_INFO (28) and GET_BROKER_HA_STATUS (907) on every broker address it
//! lists: each row has the broker's role (`SYNC_MASTER`, `ASYNC_MASTER`, `SLAVE`; Java
//! brokers `MASTER`/`SLAVE`) and, for a slave, its lag in bytes and seconds by its master's
//! answer ([`super::ha`]); and `broker-status`
//! (mqadmin brokerStatus): 28 on one broker, its KVTable sorted by key. With `--cluster`,
//! `cluster` lists that cluster only (mqadmin clusterList's `-c`).
//!
//! The table shows the runtime figures Java brokers and ringmq both give where they exist
//! (`brokerVersionDesc`, `putTps` and `getTransferedTps` as their first figure,
//! `msgPutTotalTodayNow` else `msgPutTotalSinceBoot`, `commitLogDiskRatio`), `-` where
//! not; `--json` has every key. A broker that does not answer 28 is still listed, with
//! its error; the command then exits with that error (3) after printing the table.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::json;

use crate::remoting::codes::request;

use super::super::bodies::{self, BrokerData};
use super::super::error::{not_found, AdminError, AdminResult};
use super::super::ha_body;
use super::super::output::{Output, Table};
use super::super::wire::{command, resolve};
use super::{ha, Ctx};

async fn runtime_info(ctx: &Ctx, addr: SocketAddr) -> AdminResult<BTreeMap<String, String>> {
    let answer = ctx
        .wire
        .call_ok(addr, command(request::GET_BROKER_RUNTIME_INFO, &[]))
        .await?;
    bodies::kv_table(&answer.body).map_err(AdminError::from)
}

/// The first figure of a RocketMQ TPS value (`"12.5 11.0 10.2"`: the last 10 s, 1 min,
/// 10 min).
fn first_figure(value: Option<&String>) -> String {
    value
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or("-")
        .to_owned()
}

pub async fn cluster(ctx: &Ctx) -> AdminResult<Output> {
    let brokers = brokers_of_the_cluster(ctx).await?;
    let mut table = Table::new(&[
        "cluster",
        "broker",
        "#id",
        "addr",
        "role",
        "version",
        "#in tps",
        "#out tps",
        "#msgs in",
        "#disk ratio",
        "#lag bytes",
        "#lag s",
    ]);
    let mut entries = Vec::new();
    let mut failure: Option<AdminError> = None;
    for broker in &brokers {
        let group = group_status(ctx, broker).await;
        for (id, addr) in &broker.broker_addrs {
            let runtime = match resolve(addr) {
                Ok(socket) => runtime_info(ctx, socket).await,
                Err(error) => Err(error),
            };
            let status = group.get(id).and_then(|status| status.as_ref().ok());
            let lag = slave_lag_in(&group, broker, *id);
            let mut cells = vec![
                broker.cluster.clone(),
                broker.broker_name.clone(),
                id.to_string(),
                addr.clone(),
                ha::role(status, *id),
            ];
            cells.extend(runtime_cells(&runtime));
            cells.extend(lag_cells(*id, lag));
            table.row(cells);
            entries.push(json!({
                "cluster": broker.cluster,
                "brokerName": broker.broker_name,
                "brokerId": id,
                "addr": addr,
                "role": ha::role(status, *id),
                "runtime": runtime.as_ref().ok(),
                "haStatus": status,
                "lag": lag.map(|lag| json!({ "bytes": lag.bytes, "millis": lag.millis })),
                "error": runtime.as_ref().err().map(|e| e.to_string()),
            }));
            if let Err(error) = runtime {
                failure.get_or_insert(error);
            }
        }
    }
    let mut output = Output::new(json!({ "brokers": entries }), table.render());
    output.failure = failure;
    Ok(output)
}

/// GET_BROKER_HA_STATUS (907) of every broker of a group, by broker id. A broker that
/// does not answer it (an older Java broker) still gets its row, without a lag.
async fn group_status(
    ctx: &Ctx,
    broker: &BrokerData,
) -> BTreeMap<i64, AdminResult<ha_body::HaStatus>> {
    let mut group = BTreeMap::new();
    for (id, addr) in &broker.broker_addrs {
        let status = match resolve(addr) {
            Ok(socket) => ha::ha_status_of(ctx, socket).await,
            Err(error) => Err(error),
        };
        group.insert(*id, status);
    }
    group
}

/// Slave `id`'s lag by its group's master (id 0); `None` for the master itself, or when
/// the master did not answer or lists no stream of it.
fn slave_lag_in(
    group: &BTreeMap<i64, AdminResult<ha_body::HaStatus>>,
    broker: &BrokerData,
    id: i64,
) -> Option<ha::SlaveLag> {
    if id == 0 {
        return None;
    }
    let master = group.get(&0)?.as_ref().ok()?;
    let slaves = broker.broker_addrs.keys().filter(|&&id| id != 0).count();
    ha::slave_lag(master, id, slaves)
}

/// The lag columns: `-` for a master; for a slave its lag, or `not streaming` when its
/// master lists no stream of it.
fn lag_cells(id: i64, lag: Option<ha::SlaveLag>) -> Vec<String> {
    match (id, lag) {
        (0, _) => vec!["-".into(), "-".into()],
        (_, None) => vec!["not streaming".into(), "-".into()],
        (_, Some(lag)) => vec![
            lag.bytes.to_string(),
            lag.millis.map_or("-".into(), ha::seconds),
        ],
    }
}

/// The brokers the name server lists, only those of `-c`'s cluster when it is given;
/// a cluster it does not list is not found, naming the ones it does.
async fn brokers_of_the_cluster(ctx: &Ctx) -> AdminResult<Vec<BrokerData>> {
    let mut brokers = ctx.cluster_brokers().await?;
    let Some(cluster) = ctx.cluster() else {
        return Ok(brokers);
    };
    let known: std::collections::BTreeSet<String> =
        brokers.iter().map(|b| b.cluster.clone()).collect();
    brokers.retain(|b| b.cluster == cluster);
    if brokers.is_empty() {
        let known: Vec<String> = known.into_iter().collect();
        return Err(not_found(format!(
            "the name server lists no cluster {cluster} (it lists: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }
    Ok(brokers)
}

/// The version, rates, messages and disk ratio columns of one broker's row.
fn runtime_cells(runtime: &AdminResult<BTreeMap<String, String>>) -> Vec<String> {
    let get = |key: &str| runtime.as_ref().ok().and_then(|r| r.get(key)).cloned();
    let dash = || "-".to_owned();
    match runtime {
        Ok(info) => vec![
            get("brokerVersionDesc").unwrap_or_else(dash),
            first_figure(info.get("putTps")),
            first_figure(info.get("getTransferedTps")),
            get("msgPutTotalTodayNow")
                .or_else(|| get("msgPutTotalSinceBoot"))
                .unwrap_or_else(dash),
            get("commitLogDiskRatio").unwrap_or_else(dash),
        ],
        Err(_) => vec!["(no answer)".into(), dash(), dash(), dash(), dash()],
    }
}

pub async fn broker_status(ctx: &Ctx) -> AdminResult<Output> {
    let broker = ctx.broker().await?;
    let info = runtime_info(ctx, broker).await?;
    let mut table = Table::new(&["key", "value"]);
    for (key, value) in &info {
        table.row(vec![key.clone(), value.clone()]);
    }
    Ok(Output::new(
        json!({ "broker": broker.to_string(), "table": info }),
        table.render(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tps_shows_its_first_figure() {
        assert_eq!(first_figure(Some(&"12.5 11.0 10.2".to_string())), "12.5");
        assert_eq!(first_figure(Some(&String::new())), "-");
        assert_eq!(first_figure(None), "-");
    }
}
