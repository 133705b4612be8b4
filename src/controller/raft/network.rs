//! The client side of Raft's RPCs: openraft's network factory over any
//! [`Transport`], each peer reached through a [`Client`] at the address its membership
//! entry names.
//!
//! A peer's connection is opened on first use and again after it fails: a failed or
//! timed-out request drops it, so the next RPC reconnects (a connection whose responses
//! were lost would otherwise stay matched to nothing). Every connect and request is
//! bounded by the RPC's hard timeout from openraft ([`RPCOption`]). A peer that cannot be
//! connected is `Unreachable` (openraft backs off); a request that fails on an open
//! connection is a `NetworkError` (openraft retries soon).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RaftNetworkFactory, RaftNetworkV2};

use super::rpc::{self, encode_snapshot};
use super::types::{RaftTypes, Snapshot, Vote};
use crate::client::Client;
use crate::net::Transport;
use crate::remoting::codes::response;
use crate::remoting::{ExtFields, RemotingCommand};

/// openraft's network factory: one [`PeerClient`] per replication stream or election.
pub struct Network<T: Transport> {
    transport: T,
}

impl<T: Transport> Network<T> {
    pub fn new(transport: T) -> Network<T> {
        Network { transport }
    }
}

/// The connection to one peer.
pub struct PeerClient<T: Transport> {
    transport: T,
    addr: SocketAddr,
    client: Option<Client>,
}

/// Why an RPC failed, before it is told in the error type the caller wants.
enum Failure {
    Unreachable(io::Error),
    Network(io::Error),
}

impl From<Failure> for RPCError<RaftTypes> {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Unreachable(error) => RPCError::Unreachable(Unreachable::new(&error)),
            Failure::Network(error) => RPCError::Network(NetworkError::new(&error)),
        }
    }
}

impl From<Failure> for StreamingError<RaftTypes> {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Unreachable(error) => StreamingError::Unreachable(Unreachable::new(&error)),
            Failure::Network(error) => StreamingError::Network(NetworkError::new(&error)),
        }
    }
}

impl<T: Transport> PeerClient<T> {
    async fn connection(&mut self, ttl: Duration) -> Result<Client, Failure> {
        if let Some(client) = self.client.as_ref().filter(|client| !client.is_closed()) {
            return Ok(client.clone());
        }
        self.client = None;
        let connect = Client::connect_over(&self.transport, self.addr);
        let client = match tokio::time::timeout(ttl, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(Failure::Unreachable(error)),
            Err(_) => {
                let error = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect to {} timed out after {ttl:?}", self.addr),
                );
                return Err(Failure::Unreachable(error));
            }
        };
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Sends one RPC and returns the SUCCESS response's body.
    async fn call(
        &mut self,
        code: i32,
        body: Vec<u8>,
        option: &RPCOption,
    ) -> Result<Bytes, Failure> {
        let ttl = option.hard_ttl();
        let client = self.connection(ttl).await?;
        let request = RemotingCommand::request(code, ExtFields::new()).with_body(body);
        let reply = match client.request_with_timeout(request, ttl).await {
            Ok(reply) => reply,
            Err(error) => {
                self.client = None;
                return Err(Failure::Network(error));
            }
        };
        if reply.code != response::SUCCESS {
            let remark = reply.remark.unwrap_or_default();
            let error = io::Error::other(format!(
                "raft RPC {code} to {} answered {}: {remark}",
                self.addr, reply.code
            ));
            return Err(Failure::Network(error));
        }
        Ok(reply.body)
    }

    async fn call_json<Q: serde::Serialize, A: serde::de::DeserializeOwned>(
        &mut self,
        code: i32,
        rpc: &Q,
        option: &RPCOption,
    ) -> Result<A, Failure> {
        let body = serde_json::to_vec(rpc).expect("a raft request encodes as JSON");
        let reply = self.call(code, body, option).await?;
        serde_json::from_slice(&reply).map_err(|error| {
            let error = io::Error::new(
                io::ErrorKind::InvalidData,
                format!("raft RPC {code} from {}: {error}", self.addr),
            );
            Failure::Network(error)
        })
    }
}

impl<T: Transport> RaftNetworkFactory<RaftTypes> for Network<T> {
    type Network = PeerClient<T>;

    async fn new_client(&mut self, _target: u64, node: &SocketAddr) -> PeerClient<T> {
        PeerClient {
            transport: self.transport.clone(),
            addr: *node,
            client: None,
        }
    }
}

impl<T: Transport> RaftNetworkV2<RaftTypes> for PeerClient<T> {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<RaftTypes>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<RaftTypes>, RPCError<RaftTypes>> {
        Ok(self
            .call_json(rpc::RAFT_APPEND_ENTRIES, &rpc, &option)
            .await?)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<RaftTypes>,
        option: RPCOption,
    ) -> Result<VoteResponse<RaftTypes>, RPCError<RaftTypes>> {
        Ok(self.call_json(rpc::RAFT_VOTE, &rpc, &option).await?)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<RaftTypes>,
        option: RPCOption,
    ) -> Result<VoteResponse<RaftTypes>, RPCError<RaftTypes>> {
        Ok(self.call_json(rpc::RAFT_PRE_VOTE, &rpc, &option).await?)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<RaftTypes>, StreamingError<RaftTypes>> {
        // One request carries the whole snapshot (the controller's state is small); the
        // request's own timeout bounds it, so the cancel signal is not awaited.
        let body = encode_snapshot(vote, snapshot);
        let reply = self.call(rpc::RAFT_FULL_SNAPSHOT, body, &option).await?;
        serde_json::from_slice(&reply).map_err(|error| {
            let error = io::Error::new(
                io::ErrorKind::InvalidData,
                format!("snapshot answer from {}: {error}", self.addr),
            );
            StreamingError::Network(NetworkError::new(&error))
        })
    }
}
