//! The admin's remoting calls: one connection per address, opened on first use, every
//! connect and request bounded by `--timeout`, and the response code turned into an
//! [`AdminError`] the way each request means it. Runs inside a `LocalSet` (the client is
//! shard-local, like everything else).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use compact_str::ToCompactString;

use crate::client::Client;
use crate::remoting::codes::{request, response};
use crate::remoting::{ExtFields, RemotingCommand};

use super::error::{node_error, not_found, AdminError, AdminResult};

/// Connections to the name server and brokers, by address.
pub struct Wire {
    timeout: Duration,
    clients: RefCell<HashMap<SocketAddr, Client>>,
}

/// Resolves `host:port` (an IP or a name).
pub fn resolve(addr: &str) -> AdminResult<SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|error| node_error(format!("cannot resolve {addr}: {error}")))?
        .next()
        .ok_or_else(|| node_error(format!("{addr} resolves to no address")))
}

impl Wire {
    pub fn new(timeout: Duration) -> Wire {
        Wire {
            timeout,
            clients: RefCell::new(HashMap::new()),
        }
    }

    async fn client(&self, addr: SocketAddr) -> AdminResult<Client> {
        if let Some(client) = self.clients.borrow().get(&addr) {
            if !client.is_closed() {
                return Ok(client.clone());
            }
        }
        let client = match tokio::time::timeout(self.timeout, Client::connect(addr)).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(node_error(format!("cannot reach {addr}: {error}"))),
            Err(_) => {
                return Err(node_error(format!(
                    "cannot reach {addr}: no connection within {:?}",
                    self.timeout
                )))
            }
        };
        client.set_timeout(self.timeout);
        self.clients.borrow_mut().insert(addr, client.clone());
        Ok(client)
    }

    /// Sends `cmd` to `addr` and returns the response, whatever its code.
    pub async fn call(
        &self,
        addr: SocketAddr,
        cmd: RemotingCommand,
    ) -> AdminResult<RemotingCommand> {
        let code = cmd.code;
        let client = self.client(addr).await?;
        client.request(cmd).await.map_err(|error| {
            node_error(format!(
                "{} ({code}) to {addr}: {error}",
                request::name(code).unwrap_or("request")
            ))
        })
    }

    /// Sends `cmd` and returns the SUCCESS response; any other code is an error, read by
    /// [`refusal`].
    pub async fn call_ok(
        &self,
        addr: SocketAddr,
        cmd: RemotingCommand,
    ) -> AdminResult<RemotingCommand> {
        let code = cmd.code;
        let answer = self.call(addr, cmd).await?;
        if answer.code == response::SUCCESS {
            Ok(answer)
        } else {
            Err(refusal(code, addr, &answer))
        }
    }
}

/// The error a non-SUCCESS answer to request `code` means: the "no such thing" codes are
/// not found (exit 1), everything else is the node failing (exit 3).
pub fn refusal(code: i32, addr: SocketAddr, answer: &RemotingCommand) -> AdminError {
    let remark = answer.remark.as_deref().unwrap_or("").trim();
    let request_name = request::name(code).unwrap_or("request");
    let response_name = response::name(answer.code).unwrap_or("an unknown code");
    let remark = if remark.is_empty() {
        String::new()
    } else {
        format!(": {}", crate::remoting::log_safe::log_safe_max(remark, 300))
    };
    match answer.code {
        response::TOPIC_NOT_EXIST
        | response::SUBSCRIPTION_GROUP_NOT_EXIST
        | response::CONSUMER_NOT_ONLINE
        | response::QUERY_NOT_FOUND => not_found(format!(
            "{response_name} ({}) from {addr}{remark}",
            answer.code
        )),
        response::REQUEST_CODE_NOT_SUPPORTED => {
            node_error(format!("{addr} does not support {request_name} ({code})"))
        }
        other => node_error(format!(
            "{addr} answered {request_name} ({code}) with {response_name} ({other}){remark}"
        )),
    }
}

/// A request with the given header fields.
pub fn command(code: i32, fields: &[(&str, &dyn std::fmt::Display)]) -> RemotingCommand {
    let ext: ExtFields = fields
        .iter()
        .map(|(key, value)| (*key, value.to_compact_string()))
        .collect();
    RemotingCommand::request(code, ext)
}

/// Runs `future` on a current-thread runtime inside a `LocalSet`.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    tokio::task::LocalSet::new().block_on(&runtime, future)
}
