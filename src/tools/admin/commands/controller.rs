//! The controllers as the admin shows them (D18): `controller` asks every controller of
//! `-a` whether it leads (CONTROLLER_GET_METADATA_INFO, 1005) and the leader for each
//! group's replicas (CONTROLLER_GET_SYNC_STATE_DATA, 1006: master, epochs, SyncStateSet,
//! who is alive); `elect-master` asks the leader to make one broker master
//! (CONTROLLER_ELECT_MASTER, 1002, designated).
//!
//! The groups shown are those of `--broker-name`, else every group the name server's
//! cluster info lists; a group the controllers do not know is listed as such (a broker
//! not in controller mode). A controller that cannot be reached is a row saying why; no
//! leader among them is a failure (exit 3) after the rows are printed.

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::controller::replicas::bodies::{
    encode_broker_names, BrokerReplicasInfo, ElectMasterResponseBody, GroupReplicas,
    ReplicaIdentity,
};
use crate::remoting::codes::{request, response};

use super::super::args::{namesrv_list, ControllerAddrs, ControllerViewArgs, ElectMasterArgs};
use super::super::error::{bad_input, node_error, AdminResult};
use super::super::output::{cell, fields, Output, Table};
use super::super::wire::{command, refusal, resolve};
use super::Ctx;

/// One controller's answer to CONTROLLER_GET_METADATA_INFO.
struct Seen {
    addr: SocketAddr,
    /// Its answer's fields, or why there is none.
    answer: Result<Metadata, String>,
}

struct Metadata {
    is_leader: bool,
    leader_id: Option<String>,
    leader_address: Option<String>,
    peers: Option<String>,
}

async fn ask_each(ctx: &Ctx, controllers: &ControllerAddrs) -> AdminResult<Vec<Seen>> {
    let mut seen = Vec::new();
    for text in namesrv_list(&controllers.controller) {
        let addr = resolve(&text)?;
        let answer = match ctx
            .wire
            .call(addr, command(request::CONTROLLER_GET_METADATA_INFO, &[]))
            .await
        {
            Ok(answer) if answer.code == response::SUCCESS => Ok(Metadata {
                is_leader: answer.opt_bool("isLeader").ok().flatten() == Some(true),
                leader_id: answer.opt_str("controllerLeaderId").map(str::to_owned),
                leader_address: answer.opt_str("controllerLeaderAddress").map(str::to_owned),
                peers: answer.opt_str("peers").map(str::to_owned),
            }),
            Ok(answer) => {
                Err(refusal(request::CONTROLLER_GET_METADATA_INFO, addr, &answer).to_string())
            }
            Err(error) => Err(error.to_string()),
        };
        seen.push(Seen { addr, answer });
    }
    Ok(seen)
}

fn leader_of(seen: &[Seen]) -> Option<SocketAddr> {
    seen.iter()
        .find(|s| s.answer.as_ref().is_ok_and(|m| m.is_leader))
        .map(|s| s.addr)
}

fn controllers_json(seen: &[Seen]) -> Value {
    let rows: Vec<Value> = seen
        .iter()
        .map(|s| match &s.answer {
            Ok(m) => json!({
                "address": s.addr.to_string(),
                "isLeader": m.is_leader,
                "leaderId": m.leader_id,
                "leaderAddress": m.leader_address,
                "peers": m.peers,
            }),
            Err(why) => json!({ "address": s.addr.to_string(), "error": why }),
        })
        .collect();
    Value::Array(rows)
}

fn controllers_text(seen: &[Seen]) -> String {
    let mut table = Table::new(&["controller", "leads", "leader", "leader address"]);
    for s in seen {
        match &s.answer {
            Ok(m) => table.row(vec![
                s.addr.to_string(),
                if m.is_leader { "yes" } else { "no" }.to_owned(),
                cell(m.leader_id.as_deref()),
                cell(m.leader_address.as_deref()),
            ]),
            Err(why) => table.row(vec![
                s.addr.to_string(),
                format!("unreachable: {why}"),
                "-".into(),
                "-".into(),
            ]),
        }
    }
    table.render()
}

/// The error when no controller of `seen` leads.
fn no_leader(seen: &[Seen]) -> super::super::error::AdminError {
    let list: Vec<String> = seen.iter().map(|s| s.addr.to_string()).collect();
    node_error(format!(
        "no controller of {} says it leads (they may be electing one; try again)",
        list.join(";")
    ))
}

/// `controller`: which controller leads, and each group's replicas.
pub async fn view(ctx: &Ctx, args: &ControllerViewArgs) -> AdminResult<Output> {
    let seen = ask_each(ctx, &args.controllers).await?;
    let mut text = controllers_text(&seen);
    let Some(leader) = leader_of(&seen) else {
        let mut output = Output::new(json!({ "controllers": controllers_json(&seen) }), text);
        output.failure = Some(no_leader(&seen));
        return Ok(output);
    };
    let names = match args.broker_names.is_empty() {
        false => args.broker_names.clone(),
        true => {
            let mut names: Vec<String> = ctx
                .cluster_brokers()
                .await?
                .into_iter()
                .map(|b| b.broker_name)
                .collect();
            names.sort();
            names.dedup();
            names
        }
    };
    let ask = command(request::CONTROLLER_GET_SYNC_STATE_DATA, &[])
        .with_body(encode_broker_names(&names));
    let answer = ctx.wire.call_ok(leader, ask).await?;
    let info = BrokerReplicasInfo::decode(&answer.body)
        .map_err(|error| node_error(format!("{leader}: {error}")))?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&groups_text(&names, &info));
    let groups: serde_json::Map<String, Value> = names
        .iter()
        .map(|name| {
            let group = info.replicas_info_table.get(name);
            (name.clone(), group.map_or(Value::Null, group_json))
        })
        .collect();
    Ok(Output::new(
        json!({
            "controllers": controllers_json(&seen),
            "leader": leader.to_string(),
            "groups": groups,
        }),
        text,
    ))
}

fn replica_json(replica: &ReplicaIdentity) -> Value {
    json!({
        "brokerId": replica.broker_id,
        "address": replica.broker_address,
        "alive": replica.alive,
    })
}

fn group_json(group: &GroupReplicas) -> Value {
    json!({
        "masterBrokerId": group.master_broker_id,
        "masterAddress": group.master_address,
        "masterEpoch": group.master_epoch,
        "syncStateSetEpoch": group.sync_state_set_epoch,
        "inSyncReplicas": group.in_sync_replicas.iter().map(replica_json).collect::<Vec<_>>(),
        "notInSyncReplicas": group.not_in_sync_replicas.iter().map(replica_json).collect::<Vec<_>>(),
    })
}

/// `1@127.0.0.1:10911 (alive), 2@... (dead)`; `-` for none.
fn replicas_cell(replicas: &[ReplicaIdentity]) -> String {
    if replicas.is_empty() {
        return "-".to_owned();
    }
    let cells: Vec<String> = replicas
        .iter()
        .map(|r| {
            let state = if r.alive { "alive" } else { "dead" };
            format!("{}@{} ({state})", r.broker_id, r.broker_address)
        })
        .collect();
    cells.join(", ")
}

fn groups_text(names: &[String], info: &BrokerReplicasInfo) -> String {
    let mut table = Table::new(&[
        "group",
        "master",
        "master address",
        "master epoch",
        "set epoch",
        "in sync",
        "not in sync",
    ]);
    for name in names {
        match info.replicas_info_table.get(name) {
            Some(group) => table.row(vec![
                name.clone(),
                cell(group.master_broker_id),
                cell(group.master_address.as_deref()),
                group.master_epoch.to_string(),
                group.sync_state_set_epoch.to_string(),
                replicas_cell(&group.in_sync_replicas),
                replicas_cell(&group.not_in_sync_replicas),
            ]),
            None => table.row(vec![
                name.clone(),
                "unknown to the controllers".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]),
        }
    }
    table.render()
}

/// `elect-master`: a designated election on the leader.
pub async fn elect_master(ctx: &Ctx, args: &ElectMasterArgs) -> AdminResult<Output> {
    if args.broker_id < 1 {
        return Err(bad_input(format!(
            "--broker-id {} is not a controller id: they start at 1 (`controller` lists them)",
            args.broker_id
        )));
    }
    if args.broker_name.trim().is_empty() {
        return Err(bad_input("--broker-name is empty"));
    }
    let seen = ask_each(ctx, &args.controllers).await?;
    let leader = leader_of(&seen).ok_or_else(|| no_leader(&seen))?;
    let cluster = ctx.cluster().unwrap_or("");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    let ask = command(
        request::CONTROLLER_ELECT_MASTER,
        &[
            ("clusterName", &cluster),
            ("brokerName", &args.broker_name),
            ("brokerId", &args.broker_id),
            ("designateElect", &true),
            ("invokeTime", &now),
        ],
    );
    let answer = ctx.wire.call_ok(leader, ask).await?;
    let set = ElectMasterResponseBody::decode(&answer.body)
        .map(|body| body.sync_state_set.into_iter().collect::<Vec<_>>())
        .unwrap_or_default();
    let master = answer.opt_i64("masterBrokerId").ok().flatten();
    let address = answer.opt_str("masterAddress").map(str::to_owned);
    let epoch = answer.opt_i32("masterEpoch").ok().flatten();
    let text = fields(&[
        ("group", args.broker_name.clone()),
        ("master", cell(master)),
        ("master address", cell(address.as_deref())),
        ("master epoch", cell(epoch)),
        ("SyncStateSet", format!("{set:?}")),
    ]);
    Ok(Output::new(
        json!({
            "group": args.broker_name,
            "masterBrokerId": master,
            "masterAddress": address,
            "masterEpoch": epoch,
            "syncStateSet": set,
        }),
        text,
    ))
}
