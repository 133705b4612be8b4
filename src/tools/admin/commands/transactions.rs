//! `tx-pending`: the undecided half messages of a producer group, from
//! RINGMQ_LIST_PENDING_HALVES (30002, `broker::transaction::pending`) on each target
//! broker. The body is JSON the node writes itself, read with `serde_json`.

use serde_json::{json, Value};

use crate::remoting::codes::request;

use super::super::args::TxPendingArgs;
use super::super::error::{bad_input, node_error, AdminResult};
use super::super::output::{Output, Table};
use super::super::time::format_utc;
use super::super::wire::command;
use super::Ctx;

/// `tx-pending`.
pub async fn pending(ctx: &Ctx, args: &TxPendingArgs) -> AdminResult<Output> {
    if !(1..=1000).contains(&args.limit) {
        return Err(bad_input(format!(
            "--limit {} is not between 1 and 1000",
            args.limit
        )));
    }
    let mut outputs = Vec::new();
    for broker in ctx.targets().await? {
        let answer = ctx
            .wire
            .call_ok(
                broker,
                command(
                    request::RINGMQ_LIST_PENDING_HALVES,
                    &[("producerGroup", &args.group), ("limit", &args.limit)],
                ),
            )
            .await?;
        let body: Value = serde_json::from_slice(&answer.body)
            .map_err(|error| node_error(format!("the broker's answer is not JSON: {error}")))?;
        let text = render(&body);
        outputs.push(Output::new(
            json!({ "broker": broker.to_string(), "producerGroup": args.group, "pending": body }),
            format!("broker {broker}, producer group {}\n{text}", args.group),
        ));
    }
    Ok(ctx.combine(outputs))
}

/// The shards' figures, then the halves listed, oldest first per shard.
fn render(body: &Value) -> String {
    let shards = body["shards"].as_array().cloned().unwrap_or_default();
    let mut figures = Table::new(&["#shard", "#undecided (all groups)", "#cursor", "#scanned"]);
    let mut halves = Table::new(&[
        "#shard",
        "topic",
        "#queue",
        "#half offset",
        "msgId",
        "stored",
        "#checks",
    ]);
    let cell = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    for shard in &shards {
        figures.row(vec![
            cell(&shard["shard"]),
            cell(&shard["pending"]),
            cell(&shard["cursor"]),
            cell(&shard["scanned"]),
        ]);
        for half in shard["halves"].as_array().into_iter().flatten() {
            halves.row(vec![
                cell(&shard["shard"]),
                cell(&half["topic"]),
                cell(&half["queueId"]),
                cell(&half["halfOffset"]),
                cell(&half["msgId"]),
                half["storeTimestamp"]
                    .as_i64()
                    .map_or_else(|| "-".to_owned(), format_utc),
                cell(&half["checks"]),
            ]);
        }
    }
    format!("{}\n{}", figures.render(), halves.render())
}
