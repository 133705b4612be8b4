//! Thread-per-core (D3): what a shard is, which queues it owns, and how
//! work for another shard's queue gets there.
//!
//! A node runs N shards. Each is one OS thread, pinned to a CPU ([`pin`]), running a tokio
//! current-thread runtime. A shard owns its `SO_REUSEPORT` listener and the connections
//! the kernel hands it, one store (its own CommitLog and the ConsumeQueues of the queues
//! it owns, in `<root>/shard-<n>`, see [`layout`]) and one broker. Queue `(topic, id)` is
//! owned by shard `hash(topic, id) mod N` ([`routing`]).
//!
//! A connection may land on any shard, so a request that works on a queue another shard
//! owns (send, pull, offset queries) crosses over that shard's bounded [`mailbox`] and is
//! answered there; requests about node-wide tables (heartbeats, topics, routes, committed
//! offsets) are answered where they arrive, from tables every shard shares behind a lock
//! ([`crate::sync::Locked`]). Nothing on the data path is shared: a CommitLog has exactly
//! one writer, its shard.

pub mod exclusive_port;
pub mod layout;
pub mod mailbox;
pub mod pin;
pub mod routing;
pub mod service;

use std::net::SocketAddr;

use crate::remoting::RemotingCommand;
use mailbox::MailboxSender;

/// What one shard knows about the node's shards.
#[derive(Clone)]
pub struct ShardContext {
    id: u8,
    mailboxes: Vec<MailboxSender>,
}

impl ShardContext {
    /// Shard `id` of the shards whose mailboxes are `mailboxes` (indexed by shard id).
    pub fn new(id: u8, mailboxes: Vec<MailboxSender>) -> ShardContext {
        assert!(
            (id as usize) < mailboxes.len(),
            "shard {id} is not among {} shards",
            mailboxes.len()
        );
        ShardContext { id, mailboxes }
    }

    /// A node of one shard, with no one to forward to (tests, embedded use).
    pub fn single() -> ShardContext {
        let (sender, _) = mailbox::mailbox(1);
        ShardContext {
            id: 0,
            mailboxes: vec![sender],
        }
    }

    pub fn id(&self) -> u8 {
        self.id
    }

    pub fn count(&self) -> u8 {
        self.mailboxes.len() as u8
    }

    /// The shard that owns `(topic, queue_id)`.
    pub fn owner(&self, topic: &str, queue_id: i32) -> u8 {
        routing::queue_owner(topic, queue_id, self.count())
    }

    /// Sends `request` to shard `owner` and waits for its answer.
    pub async fn forward(
        &self,
        owner: u8,
        request: RemotingCommand,
        peer: SocketAddr,
    ) -> Option<RemotingCommand> {
        mailbox::forward(&self.mailboxes[owner as usize], owner, request, peer).await
    }

    /// Stores `record` on shard `owner` (whose queue it is) and waits for its store's
    /// outcome; see [`mailbox::forward_put`].
    pub async fn put_on(
        &self,
        owner: u8,
        record: crate::store::record::RecordInput,
    ) -> Result<crate::store::PutResult, crate::store::StoreError> {
        mailbox::forward_put(&self.mailboxes[owner as usize], record).await
    }

    /// Hands `request` to shard `owner` without waiting; see [`mailbox::try_forward`].
    pub fn try_forward(
        &self,
        owner: u8,
        request: RemotingCommand,
        peer: SocketAddr,
        respond: impl FnOnce(RemotingCommand) + Send + 'static,
    ) -> Result<(), mailbox::NotForwarded> {
        mailbox::try_forward(
            &self.mailboxes[owner as usize],
            owner,
            request,
            peer,
            respond,
        )
    }
}
