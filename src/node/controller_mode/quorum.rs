//! A broker's calls to its controllers (`controllerAddr`, D18): one connection to the one
//! it believes leads, found again by asking each in turn when that one fails or answers
//! CONTROLLER_NOT_LEADER.
//!
//! The connection that carries the heartbeats carries every other call too: the
//! controller counts a broker dead the moment its heartbeat connection closes, so a
//! broker keeps one and closes it only when it moves to another controller.
//!
//! Every call is bounded: at most one attempt per controller, each within `timeout`.
//!
//! Calls run concurrently (the heartbeats beside the role loop's), but only one at a time
//! looks for the leader: two searches would each open a connection, and the one replaced
//! second closes, which the controller takes for the broker's death if it carried the
//! latest beat. A call that waited for another's search uses what that one found.

use std::cell::{Cell, RefCell};
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
    /// Counts the connections `leader` has held, so a call can tell another's search
    /// replaced the one it saw fail.
    generation: Cell<u64>,
    /// Held while a call looks for the leader.
    searching: tokio::sync::Mutex<()>,
}

impl<T: Transport> Quorum<T> {
    pub fn new(transport: T, controllers: Vec<SocketAddr>, timeout: Duration) -> Quorum<T> {
        assert!(!controllers.is_empty(), "a quorum of no controller");
        Quorum {
            transport,
            controllers,
            timeout,
            leader: RefCell::new(None),
            generation: Cell::new(0),
            searching: tokio::sync::Mutex::new(()),
        }
    }

    /// The controller the broker talks to now, if connected.
    pub fn leader(&self) -> Option<SocketAddr> {
        self.open_leader().as_ref().map(Client::peer)
    }

    /// Sends `request` to the leader and returns its answer, whatever its code but
    /// CONTROLLER_NOT_LEADER: the known leader first, then every controller in turn.
    pub async fn call(&self, request: RemotingCommand) -> Result<RemotingCommand, QuorumError> {
        let mut last = String::from("not tried");
        let seen = self.generation.get();
        if let Some(client) = self.open_leader() {
            match self.ask(&client, request.clone()).await {
                Ok(answer) => return Ok(answer),
                Err(why) => last = format!("{}: {why}", client.peer()),
            }
        }
        let _searching = self.searching.lock().await;
        if self.generation.get() != seen {
            // Another call found a leader while this one asked the old or waited.
            if let Some(client) = self.open_leader() {
                match self.ask(&client, request.clone()).await {
                    Ok(answer) => return Ok(answer),
                    Err(why) => last = format!("{}: {why}", client.peer()),
                }
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
                    self.generation.set(self.generation.get() + 1);
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

    /// The connection to the leader, unless it closed.
    fn open_leader(&self) -> Option<Client> {
        let leader = self.leader.borrow();
        leader.as_ref().filter(|c| !c.is_closed()).cloned()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::sim::{NetConfig, SimNet};
    use crate::net::Listener;
    use crate::remoting::frame::{decode_frame, encode_frame};
    use std::rc::Rc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A controller that answers every request with `answer()`'s code, counting the
    /// connections it accepts.
    fn fake_controller(
        net: &SimNet,
        addr: SocketAddr,
        answer: Rc<dyn Fn() -> i32>,
        accepted: Rc<Cell<u32>>,
    ) {
        let host = net.host(addr.ip());
        tokio::task::spawn_local(async move {
            let listener = host.bind(addr).await.expect("binds");
            loop {
                let (mut connection, _) = listener.accept().await.expect("accepts");
                accepted.set(accepted.get() + 1);
                let answer = answer.clone();
                tokio::task::spawn_local(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(read) = connection.read(&mut chunk).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..read]);
                        while let Some((request, used)) = decode_frame(&buf, 1 << 20).unwrap() {
                            buf.drain(..used);
                            let reply = RemotingCommand::response_to(&request, answer(), None);
                            let mut out = Vec::new();
                            encode_frame(&reply, &mut out).unwrap();
                            if connection.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
    }

    /// When the leader stops leading, two calls at once find the next one over one
    /// connection between them: a second would replace the first and close it, and the
    /// controller takes a closed heartbeat connection for the broker's death.
    #[test]
    fn concurrent_calls_find_the_new_leader_over_one_connection() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&runtime, async {
            let net = SimNet::new(NetConfig::default()).unwrap();
            let old: SocketAddr = "10.0.3.1:9878".parse().unwrap();
            let new: SocketAddr = "10.0.3.2:9878".parse().unwrap();
            let old_leads = Rc::new(Cell::new(true));
            let (old_accepted, new_accepted) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
            let leads = old_leads.clone();
            let old_answer: Rc<dyn Fn() -> i32> = Rc::new(move || match leads.get() {
                true => code::SUCCESS,
                false => code::CONTROLLER_NOT_LEADER,
            });
            let leads = old_leads.clone();
            let new_answer: Rc<dyn Fn() -> i32> = Rc::new(move || match leads.get() {
                true => code::CONTROLLER_NOT_LEADER,
                false => code::SUCCESS,
            });
            fake_controller(&net, old, old_answer, old_accepted.clone());
            fake_controller(&net, new, new_answer, new_accepted.clone());
            tokio::task::yield_now().await;
            let broker = net.host("10.0.4.1".parse().unwrap());
            let quorum = Quorum::new(broker, vec![old, new], Duration::from_secs(3));
            let ask = || quorum.call(RemotingCommand::request(1, Default::default()));
            assert_eq!(ask().await.unwrap().code, code::SUCCESS);
            assert_eq!(quorum.leader(), Some(old));
            old_leads.set(false);
            let (first, second) = tokio::join!(ask(), ask());
            assert_eq!(first.unwrap().code, code::SUCCESS);
            assert_eq!(second.unwrap().code, code::SUCCESS);
            assert_eq!(quorum.leader(), Some(new));
            assert_eq!(
                new_accepted.get(),
                1,
                "the new leader got one connection from the two calls"
            );
            // The search asked the old leader again on a connection of its own, once.
            assert_eq!(
                old_accepted.get(),
                2,
                "the search asked each controller once"
            );
        });
    }
}
