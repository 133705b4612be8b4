//! The bounded channels between shards (D3): a request for a queue another
//! shard owns is handed to that shard whole, answered there, and the response comes back
//! to the connection that received it.
//!
//! ```text
//!   shard A: connection ─▶ Broker::handle ─▶ forward ══ mailbox of B (bounded) ══▶
//!   shard B: serve_mailbox ─▶ spawn_local(Broker::handle_owned) ─▶ oneshot ══▶ shard A
//!
//!   a single-message send (no task on either side):
//!   shard A: connection ─▶ Broker::handle_now ─▶ try_forward ══ mailbox of B ══▶
//!   shard B: serve_mailbox ─▶ Broker::handle_owned_now ─▶ store callback ─▶ DirectReply
//!            ══ the asking connection's writer queue (A) ══▶ socket
//! ```
//!
//! Invariants:
//! - The mailbox is bounded (`shard_mailbox_capacity`): a sender whose target is full
//!   waits for room, so a slow shard slows its producers down instead of queueing
//!   without limit or answering "busy".
//! - A put of a record the shard's own broker made (a delayed message coming due,
//!   `crate::broker::delay`) crosses the same mailbox as a [`Mail::Put`] and is answered
//!   with the owner store's outcome, or [`StoreError::ShuttingDown`] when the owner is
//!   stopping or gone.
//! - Every forwarded request gets exactly one answer: the owner's response, or, when the
//!   owner is stopping or gone, a SERVICE_NOT_AVAILABLE response made by the sender.
//! - A forwarded request runs as its own task on the owner, like a local one, so a parked
//!   pull there holds up nothing else; a single-message send forwarded by [`try_forward`]
//!   needs no task (the owner's store answers it through its [`DirectReply`]). If the
//!   asking connection goes away, the owner still finishes the request (a pull within its
//!   timeout); its answer is dropped.

use std::net::SocketAddr;
use std::rc::Rc;

use tokio::sync::{mpsc, oneshot};

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;
use crate::store::record::RecordInput;
use crate::store::{PutResult, StoreError};

/// One request crossing to its owner shard.
pub struct Forwarded {
    pub request: RemotingCommand,
    pub peer: SocketAddr,
    pub reply: ForwardReply,
}

/// What crosses a mailbox.
pub enum Mail {
    /// A client's request for a queue the owner holds.
    Request(Forwarded),
    /// A record for a queue the owner holds, from another shard's broker.
    Put(ForwardedPut),
}

/// A record to store on its queue's owner, and where the outcome goes.
pub struct ForwardedPut {
    pub record: RecordInput,
    pub reply: PutReply,
}

/// The outcome of a [`ForwardedPut`], once the owner's store decided.
pub type PutReply = oneshot::Sender<Result<PutResult, StoreError>>;

/// How a forwarded request's answer goes back.
pub enum ForwardReply {
    /// To the task on the asking shard that awaits it ([`forward`]).
    Await(oneshot::Sender<Option<RemotingCommand>>),
    /// Straight on to the asking connection ([`try_forward`]).
    Direct(DirectReply),
}

/// The asker's continuation for a forwarded request nobody awaits: called with the answer
/// on the owner shard. It is `Send`, so it holds only what may cross threads (the asking
/// connection's writer queue, its shard's metrics).
///
/// Exactly one answer, as for awaited requests: dropped unanswered (the owner stopped
/// before running it), it answers SERVICE_NOT_AVAILABLE itself.
pub struct DirectReply {
    /// The continuation and what it gets if the reply is dropped unanswered; taken by
    /// the one answer.
    pending: Option<(Respond, RemotingCommand)>,
}

/// Where a [`DirectReply`] delivers its answer.
type Respond = Box<dyn FnOnce(RemotingCommand) + Send>;

impl DirectReply {
    /// `respond` gets the answer; `unavailable` is sent through it if none comes.
    pub fn new(
        respond: impl FnOnce(RemotingCommand) + Send + 'static,
        unavailable: RemotingCommand,
    ) -> DirectReply {
        DirectReply {
            pending: Some((Box::new(respond), unavailable)),
        }
    }

    /// Hands over the answer; `None` (a request that takes no response) sends nothing.
    pub fn answer(mut self, answer: Option<RemotingCommand>) {
        let (respond, _) = self.pending.take().expect("answered once");
        if let Some(answer) = answer {
            respond(answer);
        }
    }
}

impl Drop for DirectReply {
    fn drop(&mut self) {
        if let Some((respond, unavailable)) = self.pending.take() {
            respond(unavailable);
        }
    }
}

/// Why [`try_forward`] did not hand the request over.
pub enum NotForwarded {
    /// The owner's mailbox is full: the request is given back, to be forwarded by a task
    /// that waits for room.
    Full(Box<RemotingCommand>),
    /// The owner is stopping or gone; the reply was answered SERVICE_NOT_AVAILABLE.
    Unavailable,
}

/// The response to `request` when shard `owner`, which should answer it, is stopping.
pub fn owner_unavailable(request: &RemotingCommand, owner: u8) -> RemotingCommand {
    RemotingCommand::response_to(
        request,
        response::SERVICE_NOT_AVAILABLE,
        Some(format!("shard {owner}, which owns this queue, is stopping")),
    )
}

/// Hands `request` to the shard behind `to` without waiting: for room (a full mailbox
/// gives the request back) or for the answer, which goes to `respond` on the owner.
pub fn try_forward(
    to: &MailboxSender,
    owner: u8,
    request: RemotingCommand,
    peer: SocketAddr,
    respond: impl FnOnce(RemotingCommand) + Send + 'static,
) -> Result<(), NotForwarded> {
    match to.try_reserve() {
        Ok(permit) => {
            let unavailable = owner_unavailable(&request, owner);
            permit.send(Mail::Request(Forwarded {
                request,
                peer,
                reply: ForwardReply::Direct(DirectReply::new(respond, unavailable)),
            }));
            Ok(())
        }
        Err(mpsc::error::TrySendError::Full(())) => Err(NotForwarded::Full(Box::new(request))),
        Err(mpsc::error::TrySendError::Closed(())) => {
            respond(owner_unavailable(&request, owner));
            Err(NotForwarded::Unavailable)
        }
    }
}

/// The sending side of one shard's mailbox.
pub type MailboxSender = mpsc::Sender<Mail>;
/// The receiving side, drained by [`serve_mailbox`] on the owner.
pub type MailboxReceiver = mpsc::Receiver<Mail>;

/// A mailbox of `capacity` requests.
pub fn mailbox(capacity: usize) -> (MailboxSender, MailboxReceiver) {
    mpsc::channel(capacity.max(1))
}

/// Hands `request` to the shard behind `to` and waits for its answer.
pub async fn forward(
    to: &MailboxSender,
    owner: u8,
    request: RemotingCommand,
    peer: SocketAddr,
) -> Option<RemotingCommand> {
    let (reply, answer) = oneshot::channel();
    let unavailable = owner_unavailable(&request, owner);
    if to
        .send(Mail::Request(Forwarded {
            request,
            peer,
            reply: ForwardReply::Await(reply),
        }))
        .await
        .is_err()
    {
        return Some(unavailable);
    }
    answer.await.unwrap_or(Some(unavailable))
}

/// Hands `record` to the shard behind `to` and waits until its store decided: the
/// outcome of its put, or [`StoreError::ShuttingDown`] when that shard is stopping.
pub async fn forward_put(to: &MailboxSender, record: RecordInput) -> Result<PutResult, StoreError> {
    let (reply, outcome) = oneshot::channel();
    if to
        .send(Mail::Put(ForwardedPut { record, reply }))
        .await
        .is_err()
    {
        return Err(StoreError::ShuttingDown);
    }
    outcome.await.unwrap_or(Err(StoreError::ShuttingDown))
}

/// What answers forwarded requests on their owner shard.
pub trait OwnerHandler: Sized + 'static {
    fn handle_owned(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> impl std::future::Future<Output = Option<RemotingCommand>> + 'static;

    /// Answers a request forwarded by [`try_forward`] through `reply`. The default runs
    /// [`OwnerHandler::handle_owned`] in a task, as for awaited requests.
    fn handle_owned_now(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
        reply: DirectReply,
    ) {
        run_owned(self, request, peer, reply);
    }

    /// Stores a record another shard sent ([`forward_put`]) and answers `reply` once the
    /// store decided.
    fn put_owned(self: Rc<Self>, record: RecordInput, reply: PutReply);
}

/// Runs `request` as its own task on the owner and hands its answer to `reply`.
pub fn run_owned<H: OwnerHandler>(
    handler: Rc<H>,
    request: RemotingCommand,
    peer: SocketAddr,
    reply: DirectReply,
) {
    tokio::task::spawn_local(async move {
        reply.answer(handler.handle_owned(request, peer).await);
    });
}

/// Drains this shard's mailbox until every sender is gone or the task is aborted (at
/// shutdown), running each request as its own local task.
pub async fn serve_mailbox<H: OwnerHandler>(mut inbox: MailboxReceiver, handler: Rc<H>) {
    while let Some(mail) = inbox.recv().await {
        let handler = handler.clone();
        let (request, peer, reply) = match mail {
            Mail::Request(Forwarded {
                request,
                peer,
                reply,
            }) => (request, peer, reply),
            Mail::Put(ForwardedPut { record, reply }) => {
                handler.put_owned(record, reply);
                continue;
            }
        };
        match reply {
            ForwardReply::Await(reply) => {
                tokio::task::spawn_local(async move {
                    let answer = handler.handle_owned(request, peer).await;
                    let _ = reply.send(answer);
                });
            }
            ForwardReply::Direct(reply) => handler.handle_owned_now(request, peer, reply),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn send_request(opaque: i32) -> RemotingCommand {
        let mut request = RemotingCommand::request(310, Default::default());
        request.opaque = opaque;
        request
    }

    type Answers = Arc<Mutex<Vec<RemotingCommand>>>;

    fn recorder(answers: &Answers) -> impl FnOnce(RemotingCommand) + Send + 'static {
        let answers = answers.clone();
        move |answer| answers.lock().unwrap().push(answer)
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn a_direct_reply_answers_exactly_once_and_unavailable_when_dropped_unanswered() {
        let answers = Answers::default();
        let request = send_request(7);
        let reply = DirectReply::new(recorder(&answers), owner_unavailable(&request, 1));
        reply.answer(Some(RemotingCommand::response_to(&request, 0, None)));
        let reply = DirectReply::new(recorder(&answers), owner_unavailable(&request, 1));
        reply.answer(None);
        let reply = DirectReply::new(recorder(&answers), owner_unavailable(&request, 1));
        drop(reply);
        let answers = answers.lock().unwrap();
        let codes: Vec<i32> = answers.iter().map(|answer| answer.code).collect();
        assert_eq!(codes, vec![0, response::SERVICE_NOT_AVAILABLE]);
        assert!(answers.iter().all(|answer| answer.opaque == 7));
        assert!(answers[1].remark.as_deref().unwrap().contains("shard 1"));
    }

    #[test]
    fn try_forward_gives_the_request_back_when_full_and_answers_unavailable_when_closed() {
        let answers = Answers::default();
        let (to, mut inbox) = mailbox(1);
        assert!(try_forward(&to, 1, send_request(1), peer(), recorder(&answers)).is_ok());
        match try_forward(&to, 1, send_request(2), peer(), recorder(&answers)) {
            Err(NotForwarded::Full(request)) => assert_eq!(request.opaque, 2),
            _ => panic!("a full mailbox gives the request back"),
        }
        assert!(answers.lock().unwrap().is_empty(), "nothing answered yet");
        // The owner goes away with the first request still queued: its reply answers.
        inbox.close();
        let queued = inbox.try_recv().expect("the first request is queued");
        drop(queued);
        drop(inbox);
        match try_forward(&to, 1, send_request(3), peer(), recorder(&answers)) {
            Err(NotForwarded::Unavailable) => {}
            _ => panic!("a closed mailbox is unavailable"),
        }
        let answers = answers.lock().unwrap();
        let got: Vec<(i32, i32)> = answers.iter().map(|a| (a.opaque, a.code)).collect();
        assert_eq!(
            got,
            vec![
                (1, response::SERVICE_NOT_AVAILABLE),
                (3, response::SERVICE_NOT_AVAILABLE)
            ]
        );
    }
}
