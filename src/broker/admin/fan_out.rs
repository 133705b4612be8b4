//! Asking every shard for its part of a node-wide answer (D3): the per-queue figures of a
//! topic (GET_TOPIC_STATS_INFO, GET_CONSUME_STATS, INVOKE_BROKER_TO_RESET_OFFSET) or the
//! per-shard figures of the node (GET_BROKER_RUNTIME_INFO).
//!
//! The shard a request reached computes its own rows, sends every other shard a copy of
//! the request marked [`SHARD_ONLY`] through its mailbox, and merges the rows the copies
//! bring back. A marked copy is answered with its rows in the [`ROWS`] field,
//! `key:v1:v2…` items separated by `,` (integers only), so no JSON is built twice.
//!
//! Invariants: a key is owned by exactly one shard, so merging never sees it twice (a
//! duplicate is an error naming the key, not a silent overwrite); every row of one answer
//! has the same number of values, which the caller names; an answer a shard could not
//! give (an error code, a mailbox that is gone) fails the whole request with a
//! SYSTEM_ERROR naming the shard, never a partial table presented as whole.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::Broker;

/// Set on the copies a shard sends the others: answer with your own rows only. A client
/// cannot set it: [`crate::broker::Broker::handle`] removes it from every request a connection
/// brings.
pub use crate::broker::requests::query::SHARD_ONLY;
/// In a shard's answer: its rows.
const ROWS: &str = "_ringmqRows";

/// Rows by key (a queue id, or a shard id), each the same number of integers.
pub type Rows = BTreeMap<i32, Vec<i64>>;

/// What [`gather`] leads to.
pub enum Gathered {
    /// The request was another shard's copy: this is the answer to send back.
    Answer(RemotingCommand),
    /// The request came from a client: every shard's rows, merged.
    All(Rows),
}

/// `local` (this shard's rows) merged with every other shard's, or, when `request` is
/// another shard's copy, the answer carrying `local`. `width` is the number of values of
/// every row. An error is the response to send the client.
pub async fn gather(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
    width: usize,
    local: Rows,
) -> Result<Gathered, RemotingCommand> {
    check_width(&local, width).map_err(|why| system_error(request, why))?;
    if request.opt_str(SHARD_ONLY) == Some("true") {
        return Ok(Gathered::Answer(shard_answer(request, local)));
    }
    let mut all = local;
    for shard in 0..broker.shard.count() {
        if shard == broker.shard.id() {
            continue;
        }
        let mut copy = request.clone();
        copy.put_ext(SHARD_ONLY, "true");
        let answer = Box::pin(broker.shard.forward(shard, copy, peer)).await;
        let rows = answer
            .ok_or(RowsError::NoAnswer { shard })
            .and_then(|answer| rows_of(shard, &answer, width))
            .map_err(|why| system_error(request, why))?;
        for (key, values) in rows {
            if all.insert(key, values).is_some() {
                return Err(system_error(request, RowsError::Owned { shard, key }));
            }
        }
    }
    Ok(Gathered::All(all))
}

/// The answer to another shard's copy of `request`: this shard's rows.
pub fn shard_answer(request: &RemotingCommand, local: Rows) -> RemotingCommand {
    let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
    answer.put_ext(ROWS, encode(&local));
    answer
}

fn system_error(request: &RemotingCommand, why: impl std::fmt::Display) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why.to_string()))
}

/// Why a shard's rows cannot be merged; the SYSTEM_ERROR remark names the shard and row.
#[derive(Debug, PartialEq, Eq)]
pub enum RowsError {
    /// A row with another number of values than every row has.
    Width {
        key: i32,
        values: usize,
        width: usize,
    },
    /// A row listed twice in one answer.
    Twice(i32),
    /// An item that is not `key:value:...`.
    Unreadable(String),
    /// Another shard gave no answer.
    NoAnswer { shard: u8 },
    /// Another shard answered with an error.
    Refused {
        shard: u8,
        code: i32,
        remark: String,
    },
    /// Another shard's answer has no rows field.
    NoRows { shard: u8 },
    /// Another shard's rows do not read.
    Shard { shard: u8, why: Box<RowsError> },
    /// Two shards answered for the same row.
    Owned { shard: u8, key: i32 },
}

impl std::fmt::Display for RowsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowsError::Width { key, values, width } => {
                write!(f, "row {key} has {values} values, not {width}")
            }
            RowsError::Twice(key) => write!(f, "row {key} is listed twice"),
            RowsError::Unreadable(item) => write!(f, "unreadable row {item:?}"),
            RowsError::NoAnswer { shard } => write!(f, "shard {shard} did not answer"),
            RowsError::Refused {
                shard,
                code,
                remark,
            } => write!(f, "shard {shard} answered with code {code}: {remark}"),
            RowsError::NoRows { shard } => write!(f, "shard {shard}'s answer carries no rows"),
            RowsError::Shard { shard, why } => write!(f, "shard {shard}'s answer: {why}"),
            RowsError::Owned { shard, key } => write!(
                f,
                "shard {shard} answered for {key}, which another shard owns"
            ),
        }
    }
}

impl std::error::Error for RowsError {}

fn check_width(rows: &Rows, width: usize) -> Result<(), RowsError> {
    match rows.iter().find(|(_, values)| values.len() != width) {
        Some((key, values)) => Err(RowsError::Width {
            key: *key,
            values: values.len(),
            width,
        }),
        None => Ok(()),
    }
}

fn encode(rows: &Rows) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|(key, values)| {
            let mut item = key.to_string();
            for value in values {
                item.push(':');
                item.push_str(&value.to_string());
            }
            item
        })
        .collect();
    items.join(",")
}

fn decode(text: &str) -> Result<Rows, RowsError> {
    let mut rows = Rows::new();
    for item in text.split(',').filter(|item| !item.is_empty()) {
        let mut parts = item.split(':');
        let key = parts.next().and_then(|key| key.parse().ok());
        let values: Option<Vec<i64>> = parts.map(|value| value.parse().ok()).collect();
        match (key, values) {
            (Some(key), Some(values)) => {
                if rows.insert(key, values).is_some() {
                    return Err(RowsError::Twice(key));
                }
            }
            _ => return Err(RowsError::Unreadable(item.to_owned())),
        }
    }
    Ok(rows)
}

fn rows_of(shard: u8, answer: &RemotingCommand, width: usize) -> Result<Rows, RowsError> {
    if answer.code != response::SUCCESS {
        return Err(RowsError::Refused {
            shard,
            code: answer.code,
            remark: answer.remark.clone().unwrap_or_default(),
        });
    }
    // An answer without the field is not a shard's rows (a handler answered another way):
    // never read it as "no rows", which would drop that shard's queues from the table.
    let listed = answer.opt_str(ROWS).ok_or(RowsError::NoRows { shard })?;
    let in_answer = |why| RowsError::Shard {
        shard,
        why: Box::new(why),
    };
    let rows = decode(listed).map_err(in_answer)?;
    check_width(&rows, width).map_err(in_answer)?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_exactly() {
        let rows: Rows = [(0, vec![1, -1, 7]), (5, vec![0, 0, i64::MAX])].into();
        assert_eq!(decode(&encode(&rows)).unwrap(), rows);
        assert_eq!(decode(&encode(&Rows::new())).unwrap(), Rows::new());
    }

    #[test]
    fn unreadable_or_repeated_rows_are_errors() {
        assert!(decode("1:2,x:3")
            .unwrap_err()
            .to_string()
            .contains("\"x:3\""));
        assert!(decode("1:2:y").is_err());
        assert!(decode("1:2,1:3").unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn a_row_of_the_wrong_width_is_named() {
        let rows: Rows = [(0, vec![1, 2]), (3, vec![1])].into();
        let why = check_width(&rows, 2).unwrap_err().to_string();
        assert!(why.contains("row 3 has 1 values, not 2"), "{why}");
    }
}
