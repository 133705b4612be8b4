//! The admin's remoting calls: one connection per address, opened on first use, every
//! connect and request bounded by `--timeout`, and the response code turned into an
//! [`AdminError`] the way each request means it. Runs inside a `LocalSet` (the client is
//! shard-local, like everything else).
//!
//! An address that answers something else than what it was given as is named for what it
//! is, as bad input (exit 2), since the fix is in the arguments:
//!
//! - A request refused with REQUEST_CODE_NOT_SUPPORTED is followed by one request only
//!   the other side serves: GET_BROKER_RUNTIME_INFO (28) where a name-server request was
//!   refused, GET_BROKER_CLUSTER_INFO (106) where a broker request was. SUCCESS means the
//!   address is a broker given as the name server, or a name server given as the broker
//!   (a ringmq node serves its name server on a port of its own, and either side answers
//!   the other's requests with REQUEST_CODE_NOT_SUPPORTED, as Java's do).
//! - A connection that breaks before the answer (not one that times out) is probed once
//!   more on a plain TCP connection ([`probe`]): a request frame is written and the first
//!   bytes read. `HTTP/` is an HTTP server, such as the node's metrics endpoint, which
//!   answers a remoting frame with `400 Bad Request` and closes; bytes that are neither
//!   HTTP nor the start of a remoting frame are something else again.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use compact_str::ToCompactString;

use crate::client::Client;
use crate::remoting::codes::{request, response};
use crate::remoting::{ExtFields, RemotingCommand};

use super::error::{bad_input, node_error, not_found, AdminError, AdminResult};

/// What an address is asked as: the request code says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    NameServer,
    Broker,
}

impl Role {
    /// The role of the side that serves request `code`: the name-server requests the
    /// admin sends (and the others a name server serves) are [`Role::NameServer`].
    pub fn of(code: i32) -> Role {
        match code {
            request::GET_ROUTEINFO_BY_TOPIC
            | request::GET_BROKER_CLUSTER_INFO
            | request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
            | request::DELETE_TOPIC_IN_NAMESRV
            | request::WIPE_WRITE_PERM_OF_BROKER
            | request::ADD_WRITE_PERM_OF_BROKER
            | request::GET_NAMESRV_CONFIG
            | request::GET_KV_CONFIG
            | request::DELETE_KV_CONFIG => Role::NameServer,
            _ => Role::Broker,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::NameServer => "name server",
            Role::Broker => "broker",
        }
    }

    /// The flags that give an address this role.
    fn flag(self) -> &'static str {
        match self {
            Role::NameServer => "--namesrv/-n (or NAMESRV_ADDR)",
            Role::Broker => "--broker/-b",
        }
    }
}

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

    /// Opens (or reuses) the connection to `addr`.
    pub async fn connect(&self, addr: SocketAddr) -> AdminResult<()> {
        self.client(addr).await.map(|_| ())
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
        match client.request(cmd).await {
            Ok(answer) => Ok(answer),
            Err(error) => {
                // A connection that broke (rather than timed out) may be to something that
                // does not speak remoting at all: say what, if the probe can tell.
                if error.kind() != std::io::ErrorKind::TimedOut {
                    if let Some(what) = probe(addr, self.timeout).await {
                        return Err(bad_input(what.describe(addr, Role::of(code))));
                    }
                }
                Err(node_error(format!(
                    "{} ({code}) to {addr}: {error}",
                    request::name(code).unwrap_or("request")
                )))
            }
        }
    }

    /// Whether `addr`, asked as `role` and refused with REQUEST_CODE_NOT_SUPPORTED, is the
    /// other side: one request only the other side serves (see the module docs). The
    /// error names it and the flag to pass it with; `None` if it is not (or cannot say).
    pub async fn wrong_role(&self, addr: SocketAddr, role: Role) -> Option<AdminError> {
        let (code, is) = match role {
            Role::NameServer => (request::GET_BROKER_RUNTIME_INFO, Role::Broker),
            Role::Broker => (request::GET_BROKER_CLUSTER_INFO, Role::NameServer),
        };
        match self.call(addr, command(code, &[])).await {
            Ok(answer) if answer.code == response::SUCCESS => Some(bad_input(format!(
                "{addr} is a {}, not a {}: pass it as {}",
                is.name(),
                role.name(),
                is.flag()
            ))),
            _ => None,
        }
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
            return Ok(answer);
        }
        if answer.code == response::REQUEST_CODE_NOT_SUPPORTED {
            if let Some(error) = self.wrong_role(addr, Role::of(code)).await {
                return Err(error);
            }
        }
        Err(refusal(code, addr, &answer))
    }
}

/// What [`probe`] found at an address that is not a remoting server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotRemoting {
    /// An HTTP server; its status line.
    Http(String),
    /// Something else; its first bytes, escaped.
    Other(String),
}

impl NotRemoting {
    /// The error line for `addr`, asked as `role`.
    pub fn describe(&self, addr: SocketAddr, role: Role) -> String {
        match self {
            NotRemoting::Http(status) => format!(
                "{addr} answers HTTP ({status:?}; the metrics port?), not the RocketMQ remoting \
                 protocol: {} wants the {}'s remoting port",
                role.flag(),
                role.name()
            ),
            NotRemoting::Other(bytes) => format!(
                "{addr} does not speak the RocketMQ remoting protocol (it answered {bytes:?}): {} \
                 wants the {}'s remoting port",
                role.flag(),
                role.name()
            ),
        }
    }
}

/// Reads what `first` (the first bytes an address sent back to a request frame) says the
/// address is: `None` for the start of a remoting frame (a length the codec accepts, then
/// a header length whose high byte is a serialize type, JSON 0 or ROCKETMQ 1), or when
/// nothing came (cannot tell).
pub fn classify(first: &[u8]) -> Option<NotRemoting> {
    if first.is_empty() {
        return None;
    }
    if first.starts_with(b"HTTP/") {
        let line = first
            .split(|&b| b == b'\r' || b == b'\n')
            .next()
            .unwrap_or(first);
        let line = String::from_utf8_lossy(line);
        return Some(NotRemoting::Http(
            crate::remoting::log_safe::log_safe_max(&line, 80).to_string(),
        ));
    }
    if first.len() >= 5 {
        let length = u32::from_be_bytes([first[0], first[1], first[2], first[3]]) as usize;
        if (4..=crate::remoting::DEFAULT_MAX_FRAME_LEN).contains(&length) && first[4] <= 1 {
            return None;
        }
    } else if first.iter().all(|&b| b <= 1) {
        // Too few bytes to tell, and they could start a frame.
        return None;
    }
    let shown: String = first
        .iter()
        .take(16)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    Some(NotRemoting::Other(shown))
}

/// Connects to `addr` on a plain TCP connection, writes a GET_BROKER_CLUSTER_INFO (106)
/// frame (harmless to either side) and reads the first bytes of what comes back, each step
/// bounded by `timeout`: see [`classify`]. `None` also when the probe cannot connect or
/// nothing comes.
pub async fn probe(addr: SocketAddr, timeout: Duration) -> Option<NotRemoting> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let mut frame = Vec::new();
    crate::remoting::encode_frame(&command(request::GET_BROKER_CLUSTER_INFO, &[]), &mut frame)
        .ok()?;
    let _ = tokio::time::timeout(timeout, stream.write_all(&frame)).await;
    let mut first = Vec::with_capacity(64);
    let deadline = tokio::time::Instant::now() + timeout;
    while first.len() < 8 {
        let mut chunk = [0u8; 64];
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(read)) => first.extend_from_slice(&chunk[..read]),
        }
    }
    classify(&first)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_tell_http_and_other_protocols_from_remoting() {
        let http = classify(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        assert_eq!(
            http,
            Some(NotRemoting::Http("HTTP/1.1 400 Bad Request".into()))
        );
        let mut frame = Vec::new();
        crate::remoting::encode_frame(
            &RemotingCommand::response_to(
                &command(request::GET_BROKER_CLUSTER_INFO, &[]),
                response::SUCCESS,
                None,
            ),
            &mut frame,
        )
        .unwrap();
        assert_eq!(classify(&frame), None, "a JSON-header frame");
        assert_eq!(classify(&frame[..3]), None, "too little to tell");
        assert_eq!(classify(b""), None, "nothing came");
        assert_eq!(
            classify(b"-ERR unknown command\r\n"),
            Some(NotRemoting::Other("-ERR unknown com".into()))
        );
        assert!(matches!(
            classify(b"SSH-2.0-OpenSSH_9.6\r\n"),
            Some(NotRemoting::Other(_))
        ));
    }

    #[test]
    fn wrong_addresses_are_named_with_the_flag_to_use() {
        let addr: SocketAddr = "127.0.0.1:9100".parse().unwrap();
        let line =
            NotRemoting::Http("HTTP/1.1 400 Bad Request".into()).describe(addr, Role::Broker);
        assert!(
            line.starts_with("127.0.0.1:9100 answers HTTP (\"HTTP/1.1 400 Bad Request\"; the metrics port?), not the RocketMQ remoting protocol"),
            "{line}"
        );
        assert!(line.contains("--broker/-b"), "{line}");
        assert_eq!(Role::of(request::GET_BROKER_CLUSTER_INFO), Role::NameServer);
        assert_eq!(Role::of(request::GET_ROUTEINFO_BY_TOPIC), Role::NameServer);
        assert_eq!(Role::of(request::GET_ALL_TOPIC_CONFIG), Role::Broker);
        assert_eq!(Role::of(request::GET_BROKER_RUNTIME_INFO), Role::Broker);
    }
}
