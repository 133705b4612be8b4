//! `cluster` (mqadmin clusterList): GET_BROKER_CLUSTER_INFO (106) on the name server, then
//! GET_BROKER_RUNTIME_INFO (28) on every broker address it lists; and `broker-status`
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
use super::super::output::{Output, Table};
use super::super::wire::{command, resolve};
use super::Ctx;

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
        "version",
        "#in tps",
        "#out tps",
        "#msgs in",
        "#disk ratio",
    ]);
    let mut entries = Vec::new();
    let mut failure: Option<AdminError> = None;
    for broker in &brokers {
        for (id, addr) in &broker.broker_addrs {
            let runtime = match resolve(addr) {
                Ok(socket) => runtime_info(ctx, socket).await,
                Err(error) => Err(error),
            };
            let mut cells = vec![
                broker.cluster.clone(),
                broker.broker_name.clone(),
                id.to_string(),
                addr.clone(),
            ];
            cells.extend(runtime_cells(&runtime));
            table.row(cells);
            entries.push(json!({
                "cluster": broker.cluster,
                "brokerName": broker.broker_name,
                "brokerId": id,
                "addr": addr,
                "runtime": runtime.as_ref().ok(),
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
