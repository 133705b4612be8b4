//! The bounded channels between shards (ARCHITECTURE D3): a request for a queue another
//! shard owns is handed to that shard whole, answered there, and the response comes back
//! to the connection that received it.
//!
//! ```text
//!   shard A: connection ─▶ Broker::handle ─▶ forward ══ mailbox of B (bounded) ══▶
//!   shard B: serve_mailbox ─▶ spawn_local(Broker::handle_owned) ─▶ oneshot ══▶ shard A
//! ```
//!
//! Invariants:
//! - The mailbox is bounded (`shard_mailbox_capacity`): a sender whose target is full
//!   waits for room, so a slow shard slows its producers down instead of queueing
//!   without limit or answering "busy".
//! - Every forwarded request gets exactly one answer: the owner's response, or, when the
//!   owner is stopping or gone, a SERVICE_NOT_AVAILABLE response made by the sender.
//! - A forwarded request runs as its own task on the owner, like a local one, so a parked
//!   pull there holds up nothing else. If the asking connection goes away, the owner's
//!   task still finishes (bounded by the pull's timeout); its answer is dropped.

use std::net::SocketAddr;
use std::rc::Rc;

use tokio::sync::{mpsc, oneshot};

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

/// One request crossing to its owner shard.
pub struct Forwarded {
    pub request: RemotingCommand,
    pub peer: SocketAddr,
    pub reply: oneshot::Sender<Option<RemotingCommand>>,
}

/// The sending side of one shard's mailbox.
pub type MailboxSender = mpsc::Sender<Forwarded>;
/// The receiving side, drained by [`serve_mailbox`] on the owner.
pub type MailboxReceiver = mpsc::Receiver<Forwarded>;

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
    let opaque = request.opaque;
    let code = request.code;
    let flag = request.flag;
    let unavailable = move || {
        let mut stub = RemotingCommand::request(code, Default::default());
        stub.opaque = opaque;
        stub.flag = flag;
        Some(RemotingCommand::response_to(
            &stub,
            response::SERVICE_NOT_AVAILABLE,
            Some(format!("shard {owner}, which owns this queue, is stopping")),
        ))
    };
    if to
        .send(Forwarded {
            request,
            peer,
            reply,
        })
        .await
        .is_err()
    {
        return unavailable();
    }
    answer.await.unwrap_or_else(|_| unavailable())
}

/// What answers forwarded requests on their owner shard.
pub trait OwnerHandler: 'static {
    fn handle_owned(
        self: Rc<Self>,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> impl std::future::Future<Output = Option<RemotingCommand>> + 'static;
}

/// Drains this shard's mailbox until every sender is gone or the task is aborted (at
/// shutdown), running each request as its own local task.
pub async fn serve_mailbox<H: OwnerHandler>(mut inbox: MailboxReceiver, handler: Rc<H>) {
    while let Some(Forwarded {
        request,
        peer,
        reply,
    }) = inbox.recv().await
    {
        let handler = handler.clone();
        tokio::task::spawn_local(async move {
            let answer = handler.handle_owned(request, peer).await;
            let _ = reply.send(answer);
        });
    }
}
