//! Replication as one shard runs it (D14): the shard service that serves its slaves'
//! streams when the shard is a master, or follows its master when it is a slave.
//!
//! Streams and shards: a node has one HA port (`haListenPort`) and one stream per shard.
//! Shard 0 accepts every stream, reads the slave's handshake far enough to know its shard
//! ([`shard_of_handshake`]) and hands the connection to that shard ([`HandedStream`],
//! through the shard's handoff inbox); every shard serves the streams of its own log. The
//! shards of a node on the simulated network share the caller's thread and their
//! connections have no kernel socket: shard 0 serves such a stream with its shard's side
//! directly, found in the thread's registry ([`serve_on_thread`]).
//!
//! A slave shard connects to its master's HA address, streams until the stream ends, and
//! connects again after [`RECONNECT_PAUSE`]; a failure is logged when the reason changes,
//! not on every attempt.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::master_link::serve_slave;
use super::master_side::MasterSide;
use super::slave_link::SlaveSide;
use super::wire::{HANDSHAKE_FIXED_BYTES, HANDSHAKE_ROCKETMQ_BYTES, RINGMQ_MAGIC};
use crate::net::{Listener, Transport};
use crate::shard::service::{ShardService, ShardTask};

/// How long a slave waits before connecting again after a stream ended. RocketMQ waits
/// 5 s; a shorter pause catches up sooner after a master restart, and a refused stream
/// costs one connection per pause.
pub const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// How long an accepted HA connection may take to send its handshake's fixed part.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A slave's stream accepted by shard 0 for another shard: the socket and the bytes
/// already read from it.
pub struct HandedStream {
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    pub already: Vec<u8>,
}

/// Where shard 0 sends the streams of each shard (index = shard id).
pub type HandoffSenders = Vec<mpsc::UnboundedSender<HandedStream>>;
/// Where a shard receives the streams shard 0 accepted for it.
pub type HandoffInbox = mpsc::UnboundedReceiver<HandedStream>;

/// The shard index a handshake's fixed part names, or `None` when the bytes are not a
/// ringmq handshake (the stream is then served where it landed, and refused there with
/// the decoder's reason).
pub fn shard_of_handshake(fixed: &[u8]) -> Option<u16> {
    let magic_at = HANDSHAKE_ROCKETMQ_BYTES;
    let magic = u32::from_be_bytes(fixed.get(magic_at..magic_at + 4)?.try_into().ok()?);
    if magic != RINGMQ_MAGIC {
        return None;
    }
    // After the magic: u16 version, then u16 shard index.
    let index_at = magic_at + 4 + 2;
    Some(u16::from_be_bytes(
        fixed.get(index_at..index_at + 2)?.try_into().ok()?,
    ))
}

/// A key no other start of a node in this process has: what a node's shards share, for
/// [`register_on_thread`]. Not an address (a node started again may get a stopped one's,
/// and shard 0 then served a slave's stream with the stopped node's side, which that
/// stream kept alive: a stream from a store that never grew again).
pub fn next_node_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

thread_local! {
    /// The master shards on this thread, by node and shard index: the sides shard 0 serves
    /// a stream with when its connection cannot cross threads (the simulated network,
    /// whose nodes run every shard on one thread). Weak: a stopped shard's side goes.
    static ON_THREAD: std::cell::RefCell<Vec<(u64, u16, std::rc::Weak<MasterSide>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Notes `side` as shard `side.identity.shard_index` of `node` ([`next_node_key`]) for
/// [`serve_on_thread`].
pub fn register_on_thread(node: u64, side: &Rc<MasterSide>) {
    ON_THREAD.with(|sides| {
        let mut sides = sides.borrow_mut();
        sides.retain(|(_, _, weak)| weak.strong_count() > 0);
        sides.push((node, side.identity.shard_index, Rc::downgrade(side)));
    });
}

/// Shard `shard` of `node`'s side, if it runs on this thread.
fn serve_on_thread(node: u64, shard: u16) -> Option<Rc<MasterSide>> {
    ON_THREAD.with(|sides| {
        sides
            .borrow()
            .iter()
            .rev()
            .filter(|(at, index, _)| *at == node && *index == shard)
            .find_map(|(_, _, weak)| weak.upgrade())
    })
}

/// A master shard's replication: its streams, the accept loop on shard 0, the handoff
/// inbox on every shard.
pub struct MasterService<L: Listener> {
    side: Rc<MasterSide>,
    /// This start of the node ([`next_node_key`]).
    node: u64,
    listener: std::cell::RefCell<Option<L>>,
    handoff: std::cell::RefCell<Option<(HandoffSenders, HandoffInbox)>>,
}

impl<L: Listener> MasterService<L> {
    pub fn new(
        side: Rc<MasterSide>,
        node: u64,
        listener: Option<L>,
        senders: HandoffSenders,
        inbox: HandoffInbox,
    ) -> MasterService<L> {
        register_on_thread(node, &side);
        MasterService {
            side,
            node,
            listener: std::cell::RefCell::new(listener),
            handoff: std::cell::RefCell::new(Some((senders, inbox))),
        }
    }

    pub fn side(&self) -> &Rc<MasterSide> {
        &self.side
    }
}

impl<L: Listener> ShardService for MasterService<L> {
    fn name(&self) -> &'static str {
        "replication (master)"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        let (senders, inbox) = self.handoff.borrow_mut().take().expect("tasks taken once");
        let mut tasks = vec![ShardTask::new(
            "replication handoff inbox",
            serve_handed(self.side.clone(), inbox),
        )];
        if let Some(listener) = self.listener.borrow_mut().take() {
            tasks.push(ShardTask::new(
                "replication listener",
                accept_streams(self.side.clone(), self.node, listener, senders),
            ));
        }
        tasks
    }
}

/// Accepts slaves' streams on the HA port (shard 0) and serves or hands each.
async fn accept_streams<L: Listener>(
    side: Rc<MasterSide>,
    node: u64,
    listener: L,
    senders: HandoffSenders,
) {
    let senders = Rc::new(senders);
    // The streams end with this task (a dropped set aborts its tasks): none outlives the
    // shard's stop.
    let mut streams = tokio::task::JoinSet::new();
    loop {
        while streams.try_join_next().is_some() {}
        let (connection, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "HA accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (side, senders) = (side.clone(), senders.clone());
        streams.spawn_local(async move {
            route_stream(side, node, connection, peer, &senders).await;
        });
    }
}

/// Reads the handshake's fixed part and serves the stream here or hands it to its shard.
async fn route_stream<C: crate::net::Connection>(
    side: Rc<MasterSide>,
    node: u64,
    mut connection: C,
    peer: SocketAddr,
    senders: &HandoffSenders,
) {
    let mut fixed = vec![0u8; HANDSHAKE_FIXED_BYTES];
    let read = tokio::time::timeout(HANDSHAKE_TIMEOUT, connection.read_exact(&mut fixed)).await;
    if !matches!(read, Ok(Ok(_))) {
        tracing::warn!(%peer, "HA connection closed or silent before its handshake");
        return;
    }
    let own = side.identity.shard_index;
    let target = shard_of_handshake(&fixed).filter(|&shard| shard != own);
    let handed = target.and_then(|shard| senders.get(usize::from(shard)).map(|to| (shard, to)));
    let Some((shard, to)) = handed else {
        finish(side, connection, peer, fixed).await;
        return;
    };
    match connection.into_std() {
        Ok(Err(error)) => tracing::warn!(%peer, shard, %error, "cannot hand an HA stream over"),
        Ok(Ok(stream)) => {
            if to
                .send(HandedStream {
                    stream,
                    peer,
                    already: fixed,
                })
                .is_err()
            {
                tracing::warn!(%peer, shard, "HA stream for a stopped shard dropped");
            }
        }
        // No kernel socket: the shard runs on this thread (or the stream is refused here,
        // naming the shard it asked for).
        Err(connection) => {
            let side = serve_on_thread(node, shard).unwrap_or(side);
            finish(side, connection, peer, fixed).await;
        }
    }
}

/// Serves one stream on this shard and logs how it ended.
async fn finish<C: crate::net::Connection>(
    side: Rc<MasterSide>,
    connection: C,
    peer: SocketAddr,
    already: Vec<u8>,
) {
    let shard = side.identity.shard_index;
    if let Err(error) = serve_slave(side, connection, peer, already).await {
        tracing::warn!(shard, %peer, "slave stream ended: {error}");
    }
}

/// Serves the streams shard 0 handed to this shard.
async fn serve_handed(side: Rc<MasterSide>, mut inbox: HandoffInbox) {
    let mut streams = tokio::task::JoinSet::new();
    while let Some(handed) = inbox.recv().await {
        while streams.try_join_next().is_some() {}
        let connection = match tokio::net::TcpStream::from_std(handed.stream) {
            Ok(connection) => connection,
            Err(error) => {
                tracing::warn!(peer = %handed.peer, %error, "cannot take a handed HA stream");
                continue;
            }
        };
        streams.spawn_local(finish(
            side.clone(),
            connection,
            handed.peer,
            handed.already,
        ));
    }
}

/// A slave shard's replication: one stream to its master at a time.
pub struct SlaveService<T: Transport> {
    side: Rc<SlaveSide>,
    transport: T,
    master: tokio::sync::watch::Receiver<Option<SocketAddr>>,
}

impl<T: Transport> SlaveService<T> {
    pub fn new(
        side: Rc<SlaveSide>,
        transport: T,
        master: tokio::sync::watch::Receiver<Option<SocketAddr>>,
    ) -> SlaveService<T> {
        SlaveService {
            side,
            transport,
            master,
        }
    }
}

impl<T: Transport> ShardService for SlaveService<T> {
    fn name(&self) -> &'static str {
        "replication (slave)"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        vec![ShardTask::new(
            "replication stream",
            follow_master(
                self.side.clone(),
                self.transport.clone(),
                self.master.clone(),
            ),
        )]
    }
}

/// Streams from the master, again after every end, for the shard's life.
async fn follow_master<T: Transport>(
    side: Rc<SlaveSide>,
    transport: T,
    mut master: tokio::sync::watch::Receiver<Option<SocketAddr>>,
) {
    let shard = side.config.identity.shard_index;
    let mut last_error = String::new();
    loop {
        let addr = match master.wait_for(Option::is_some).await {
            Ok(addr) => addr.expect("waited for an address"),
            Err(_) => return,
        };
        tracing::info!(shard, master = %addr, "slave connecting to its master");
        if let Err(error) = side.stream_from(&transport, addr).await {
            let text = error.to_string();
            if text != last_error {
                tracing::warn!(shard, master = %addr, "slave stream ended: {text}");
                last_error = text;
            }
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::wire::SlaveHandshake;

    #[test]
    fn the_shard_of_a_handshake_is_read_from_its_fixed_part() {
        let handshake = SlaveHandshake {
            sync_from_last_file: false,
            async_learner: false,
            slave_broker_id: 1,
            shard_index: 3,
            shard_count: 4,
            cluster: "C".into(),
            broker: "b".into(),
        };
        let mut out = Vec::new();
        handshake.encode(&mut out);
        assert_eq!(shard_of_handshake(&out[..HANDSHAKE_FIXED_BYTES]), Some(3));
        let mut java = out[..HANDSHAKE_ROCKETMQ_BYTES].to_vec();
        java.extend_from_slice(&[0u8; HANDSHAKE_FIXED_BYTES - HANDSHAKE_ROCKETMQ_BYTES]);
        assert_eq!(shard_of_handshake(&java), None, "no magic: not ringmq's");
    }
}
