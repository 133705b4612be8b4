//! A broker's calls to its controllers (`controllerAddr`, D18): one connection to the one
//! it believes leads, found again by asking each in turn when that one fails or answers
//! CONTROLLER_NOT_LEADER.
//!
//! The connection that carries the heartbeats carries every other call too: the
//! controller counts a broker dead the moment its heartbeat connection closes, so a
//! broker keeps one and closes it only when it moves to another controller.
//!
//! Every call is bounded: at most one attempt per controller, each within `timeout`.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Duration;

use crate::client::Client;
use crate::net::Transport;
use crate::remoting::codes::response as code;
use crate::remoting::RemotingCommand;

/// Why no controller answered a call.
#[derive(Debug, thiserror::Error)]
#[error("no controller of {controllers:?} answered as leader: {last}")]
pub struct QuorumError {
    pub controllers: Vec<SocketAddr>,
    pub last: String,
}

/// The controllers of one broker.
pub struct Quorum<T: Transport> {
    transport: T,
    controllers: Vec<SocketAddr>,
    timeout: Duration,
    /// The connection to the controller that answered last as leader.
    leader: RefCell<Option<Client>>,
}

impl<T: Transport> Quorum<T> {
    pub fn new(transport: T, controllers: Vec<SocketAddr>, timeout: Duration) -> Quorum<T> {
        assert!(!controllers.is_empty(), "a quorum of no controller");
        Quorum {
            transport,
            controllers,
            timeout,
            leader: RefCell::new(None),
        }
    }

    /// The controller the broker talks to now, if connected.
    pub fn leader(&self) -> Option<SocketAddr> {
        let leader = self.leader.borrow();
        leader.as_ref().filter(|c| !c.is_closed()).map(Client::peer)
    }

    /// Sends `request` to the leader and returns its answer, whatever its code but
    /// CONTROLLER_NOT_LEADER: the known leader first, then every controller in turn.
    pub async fn call(&self, request: RemotingCommand) -> Result<RemotingCommand, QuorumError> {
        let mut last = String::from("not tried");
        let known = self.leader.borrow().clone();
        if let Some(client) = known.filter(|c| !c.is_closed()) {
            match self.ask(&client, request.clone()).await {
                Ok(answer) => return Ok(answer),
                Err(why) => last = format!("{}: {why}", client.peer()),
            }
        }
        self.leader.replace(None);
        for &addr in &self.controllers {
            let connected =
                tokio::time::timeout(self.timeout, Client::connect_over(&self.transport, addr))
                    .await;
            let client = match connected {
                Ok(Ok(client)) => client,
                Ok(Err(error)) => {
                    last = format!("{addr}: cannot connect: {error}");
                    continue;
                }
                Err(_) => {
                    last = format!("{addr}: no connection within {:?}", self.timeout);
                    continue;
                }
            };
            client.set_timeout(self.timeout);
            match self.ask(&client, request.clone()).await {
                Ok(answer) => {
                    self.leader.replace(Some(client));
                    return Ok(answer);
                }
                Err(why) => last = format!("{addr}: {why}"),
            }
        }
        Err(QuorumError {
            controllers: self.controllers.clone(),
            last,
        })
    }

    async fn ask(
        &self,
        client: &Client,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, String> {
        let answer = client
            .request_with_timeout(request, self.timeout)
            .await
            .map_err(|error| error.to_string())?;
        if answer.code == code::CONTROLLER_NOT_LEADER {
            return Err(answer.remark.unwrap_or_else(|| "not the leader".into()));
        }
        Ok(answer)
    }
}
