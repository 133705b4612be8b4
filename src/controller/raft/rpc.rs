//! Raft's RPCs as remoting frames: the ringmq-private request codes, the bodies, and the
//! server side, which hands a request to the local Raft and answers with its response.
//!
//! Bodies are serde JSON of openraft's request and response types. A full snapshot's body
//! is `json_len u32 | JSON {vote, meta} | state bytes`, so the state's bytes are not
//! spelled out as a JSON array. A response is SUCCESS with the JSON response, or
//! SYSTEM_ERROR with a remark saying why (a body that does not decode, a Raft that has
//! stopped); nothing a peer sends makes the handler panic.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::state_machine::StateMachine;
use super::types::{RaftTypes, Snapshot, SnapshotMeta, Vote};
use crate::controller::replicated::ReplicatedState;
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

/// AppendEntries (heartbeats too): body `AppendEntriesRequest`, answer `AppendEntriesResponse`.
pub const RAFT_APPEND_ENTRIES: i32 = 30010;
/// RequestVote: body `VoteRequest`, answer `VoteResponse`.
pub const RAFT_VOTE: i32 = 30011;
/// Pre-vote (a candidate asks whether it could win before it raises its term): as RAFT_VOTE.
pub const RAFT_PRE_VOTE: i32 = 30012;
/// A whole snapshot for a follower too far behind: body as the module doc says, answer
/// `SnapshotResponse`.
pub const RAFT_FULL_SNAPSHOT: i32 = 30013;

/// The Raft of one controller node, over state `S`.
pub type RaftHandle<S> = openraft::Raft<RaftTypes, StateMachine<S>>;

/// Whether `code` is one of the Raft RPCs this module serves.
pub fn is_raft_rpc(code: i32) -> bool {
    matches!(
        code,
        RAFT_APPEND_ENTRIES | RAFT_VOTE | RAFT_PRE_VOTE | RAFT_FULL_SNAPSHOT
    )
}

/// The JSON head of a full snapshot's body.
#[derive(Serialize, Deserialize)]
struct SnapshotHead {
    vote: Vote,
    meta: SnapshotMeta,
}

/// Encodes a full snapshot's body.
pub fn encode_snapshot(vote: Vote, snapshot: Snapshot) -> Vec<u8> {
    let head = serde_json::to_vec(&SnapshotHead {
        vote,
        meta: snapshot.meta,
    })
    .expect("a snapshot head encodes as JSON");
    let mut body = Vec::with_capacity(4 + head.len() + snapshot.snapshot.len());
    body.extend_from_slice(&(head.len() as u32).to_le_bytes());
    body.extend_from_slice(&head);
    body.extend_from_slice(&snapshot.snapshot);
    body
}

fn decode_snapshot(body: &[u8]) -> Result<(Vote, Snapshot), String> {
    let len = body
        .get(..4)
        .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize)
        .ok_or_else(|| format!("snapshot body of {} bytes has no head length", body.len()))?;
    let head = body
        .get(4..4 + len)
        .ok_or_else(|| format!("snapshot head of {len} bytes in a body of {}", body.len()))?;
    let head: SnapshotHead =
        serde_json::from_slice(head).map_err(|error| format!("snapshot head: {error}"))?;
    let snapshot = Snapshot {
        meta: head.meta,
        snapshot: body[4 + len..].to_vec(),
    };
    Ok((head.vote, snapshot))
}

fn decode<T: serde::de::DeserializeOwned>(request: &RemotingCommand) -> Result<T, String> {
    serde_json::from_slice(&request.body).map_err(|error| format!("body does not decode: {error}"))
}

fn answer<T: Serialize, E: std::fmt::Display>(
    request: &RemotingCommand,
    result: Result<T, E>,
) -> Result<RemotingCommand, String> {
    let value = result.map_err(|error| format!("raft refused: {error}"))?;
    let body = serde_json::to_vec(&value).expect("a raft response encodes as JSON");
    Ok(RemotingCommand::response_to(request, response::SUCCESS, None).with_body(Bytes::from(body)))
}

/// Answers a Raft RPC (`is_raft_rpc(request.code)`) with the local Raft's response.
pub async fn handle_raft_rpc<S: ReplicatedState>(
    raft: &RaftHandle<S>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let result = match request.code {
        RAFT_APPEND_ENTRIES => match decode(request) {
            Ok(rpc) => answer(request, raft.append_entries(rpc).await),
            Err(error) => Err(error),
        },
        RAFT_VOTE => match decode(request) {
            Ok(rpc) => answer(request, raft.vote(rpc).await),
            Err(error) => Err(error),
        },
        RAFT_PRE_VOTE => match decode(request) {
            Ok(rpc) => answer(request, raft.pre_vote(rpc).await),
            Err(error) => Err(error),
        },
        RAFT_FULL_SNAPSHOT => match decode_snapshot(&request.body) {
            Ok((vote, snapshot)) => {
                answer(request, raft.install_full_snapshot(vote, snapshot).await)
            }
            Err(error) => Err(format!("body does not decode: {error}")),
        },
        other => Err(format!("request code {other} is not a raft RPC")),
    };
    result.unwrap_or_else(|remark| {
        RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(remark))
    })
}
