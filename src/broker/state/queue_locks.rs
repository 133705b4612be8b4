//! The orderly-consumption locks: which client of a consumer group holds each queue
//! (reference §9.11; Java's `RebalanceLockManager`). The wire side is
//! [`crate::broker::requests::lock_requests`].
//!
//! What this file owns: [`QueueLocks`], one per node, shared by every shard behind one lock
//! and in memory only (orderly clients renew their locks every 20 s, so a restart loses
//! nothing they do not take back within one renewal).
//!
//! Rules, as Java's:
//! - A lock on (group, topic, queue) is held by one client id. Locking it again renews it;
//!   it expires [`LOCK_MAX_LIVE`] after its last renewal, and then any client of the group
//!   may take it.
//! - A batch locks what it can and answers the queues the client now holds.
//! - An unlock releases only the caller's own locks.
//!
//! And ringmq's own: the locks taken over a connection go when it closes, at once, instead
//! of lingering until they expire, so another member can take the queues on its next
//! rebalance. Each connection holds at most [`MAX_LOCKS_PER_CONNECTION`] locks (past it a
//! batch locks nothing more), which bounds the table by the connections the node admits.
//!
//! Invariants (asserted where an operation relies on them): a lock is listed under exactly
//! the connection it names, and a connection's list names only locks that name it.
//!
//! Times are tokio `Instant`s, so paused-time tests control expiry.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;

use tokio::time::{Duration, Instant};

use crate::sync::Locked;

/// `rocketmq.broker.rebalance.lockMaxLiveTime`: a lock not renewed for this long expires.
pub const LOCK_MAX_LIVE: Duration = Duration::from_secs(60);
/// Most locks one connection may hold: far above any real consumer (a client holds one
/// lock per queue it consumes in order), low enough that a connection cannot grow the
/// table without bound.
pub const MAX_LOCKS_PER_CONNECTION: usize = 16_384;

/// (group, topic, queue id).
pub type LockKey = (String, String, i32);

#[derive(Debug)]
struct Lock {
    client_id: String,
    peer: SocketAddr,
    renewed: Instant,
}

#[derive(Debug, Default)]
struct Tables {
    locks: HashMap<LockKey, Lock>,
    by_peer: HashMap<SocketAddr, BTreeSet<LockKey>>,
}

impl Tables {
    fn remove(&mut self, key: &LockKey) {
        let Some(lock) = self.locks.remove(key) else {
            return;
        };
        let listed = self
            .by_peer
            .get_mut(&lock.peer)
            .map(|keys| keys.remove(key));
        assert_eq!(
            listed,
            Some(true),
            "lock {key:?} names connection {} but is not listed under it",
            lock.peer
        );
        if self.by_peer.get(&lock.peer).is_some_and(BTreeSet::is_empty) {
            self.by_peer.remove(&lock.peer);
        }
    }

    fn insert(&mut self, key: LockKey, lock: Lock) {
        self.by_peer
            .entry(lock.peer)
            .or_default()
            .insert(key.clone());
        self.locks.insert(key, lock);
    }
}

/// The node's orderly-consumption locks.
#[derive(Debug, Default)]
pub struct QueueLocks {
    tables: Locked<Tables>,
}

impl QueueLocks {
    pub fn new() -> QueueLocks {
        QueueLocks::default()
    }

    /// Locks (or renews) each of `queues` of `group` for `client_id`, asked over `peer`;
    /// returns the ones the client holds now, in the order asked.
    pub fn lock_batch(
        &self,
        group: &str,
        client_id: &str,
        peer: SocketAddr,
        queues: &[(String, i32)],
        now: Instant,
    ) -> Vec<(String, i32)> {
        let mut tables = self.tables.lock();
        let mut held = Vec::new();
        for (topic, queue_id) in queues {
            let key = (group.to_owned(), topic.clone(), *queue_id);
            let free = match tables.locks.get(&key) {
                None => true,
                Some(lock) if lock.client_id == client_id => true,
                Some(lock) => now.saturating_duration_since(lock.renewed) > LOCK_MAX_LIVE,
            };
            if !free {
                continue;
            }
            let already_ours = tables.locks.get(&key).is_some_and(|lock| lock.peer == peer);
            let count = tables.by_peer.get(&peer).map_or(0, BTreeSet::len);
            if !already_ours && count >= MAX_LOCKS_PER_CONNECTION {
                continue;
            }
            tables.remove(&key);
            let lock = Lock {
                client_id: client_id.to_owned(),
                peer,
                renewed: now,
            };
            tables.insert(key, lock);
            held.push((topic.clone(), *queue_id));
        }
        held
    }

    /// Releases each of `queues` of `group` that `client_id` holds.
    pub fn unlock_batch(&self, group: &str, client_id: &str, queues: &[(String, i32)]) {
        let mut tables = self.tables.lock();
        for (topic, queue_id) in queues {
            let key = (group.to_owned(), topic.clone(), *queue_id);
            if tables
                .locks
                .get(&key)
                .is_some_and(|lock| lock.client_id == client_id)
            {
                tables.remove(&key);
            }
        }
    }

    /// Drops every lock taken over the connection from `peer` (it closed); how many went.
    pub fn connection_closed(&self, peer: SocketAddr) -> usize {
        let mut tables = self.tables.lock();
        let keys = tables.by_peer.remove(&peer).unwrap_or_default();
        for key in &keys {
            let lock = tables.locks.remove(key);
            assert!(
                lock.as_ref().is_some_and(|lock| lock.peer == peer),
                "connection {peer} lists lock {key:?}, which names {:?}",
                lock.map(|lock| lock.peer)
            );
        }
        keys.len()
    }

    /// The client holding (group, topic, queue) at `now`, if the lock has not expired.
    pub fn holder(&self, group: &str, topic: &str, queue_id: i32, now: Instant) -> Option<String> {
        let tables = self.tables.lock();
        let lock = tables
            .locks
            .get(&(group.to_owned(), topic.to_owned(), queue_id))?;
        (now.saturating_duration_since(lock.renewed) <= LOCK_MAX_LIVE)
            .then(|| lock.client_id.clone())
    }

    /// Whether any client holds an unexpired lock on a queue of `group` (an orderly
    /// consumer is at work: its retries go to the dead-letter queue, part 2 §1.3). A scan
    /// of the table: only sends to a retry topic ask.
    pub fn group_holds_any(&self, group: &str, now: Instant) -> bool {
        let tables = self.tables.lock();
        tables.locks.iter().any(|((locked_group, _, _), lock)| {
            locked_group == group && now.saturating_duration_since(lock.renewed) <= LOCK_MAX_LIVE
        })
    }

    /// Locks held right now, expired ones included until they are taken or released.
    pub fn len(&self) -> usize {
        self.tables.lock().locks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn queues(ids: &[i32]) -> Vec<(String, i32)> {
        ids.iter().map(|id| ("T".to_string(), *id)).collect()
    }

    #[test]
    fn one_client_holds_a_queue_until_it_expires() {
        let locks = QueueLocks::new();
        let start = Instant::now();
        let a = locks.lock_batch("g", "a", peer(1), &queues(&[0, 1]), start);
        assert_eq!(a, queues(&[0, 1]));
        let b = locks.lock_batch("g", "b", peer(2), &queues(&[1, 2]), start);
        assert_eq!(b, queues(&[2]), "queue 1 is a's");
        // Another group is another lock.
        assert_eq!(
            locks.lock_batch("h", "b", peer(2), &queues(&[1]), start),
            queues(&[1])
        );
        // a renews queue 0 only; queue 1 expires and b takes it.
        let later = start + LOCK_MAX_LIVE;
        assert_eq!(
            locks.lock_batch("g", "a", peer(1), &queues(&[0]), later),
            queues(&[0])
        );
        let expired = start + LOCK_MAX_LIVE + Duration::from_millis(1);
        assert_eq!(locks.holder("g", "T", 1, expired), None);
        assert_eq!(locks.holder("g", "T", 0, expired).as_deref(), Some("a"));
        let b = locks.lock_batch("g", "b", peer(2), &queues(&[0, 1]), expired);
        assert_eq!(b, queues(&[1]));
        assert_eq!(locks.holder("g", "T", 1, expired).as_deref(), Some("b"));
    }

    #[test]
    fn unlock_releases_only_the_callers_locks() {
        let locks = QueueLocks::new();
        let now = Instant::now();
        locks.lock_batch("g", "a", peer(1), &queues(&[0]), now);
        locks.unlock_batch("g", "b", &queues(&[0]));
        assert_eq!(locks.holder("g", "T", 0, now).as_deref(), Some("a"));
        locks.unlock_batch("g", "a", &queues(&[0]));
        assert_eq!(locks.holder("g", "T", 0, now), None);
        assert!(locks.is_empty());
    }

    #[test]
    fn a_closed_connection_frees_its_locks_at_once() {
        let locks = QueueLocks::new();
        let now = Instant::now();
        locks.lock_batch("g", "a", peer(1), &queues(&[0, 1, 2]), now);
        locks.lock_batch("g", "b", peer(2), &queues(&[3]), now);
        assert_eq!(locks.connection_closed(peer(1)), 3);
        assert_eq!(locks.len(), 1);
        assert_eq!(
            locks.lock_batch("g", "b", peer(2), &queues(&[0]), now),
            queues(&[0])
        );
        assert_eq!(locks.connection_closed(peer(9)), 0);
    }

    #[test]
    fn a_connection_holds_at_most_its_share() {
        let locks = QueueLocks::new();
        let now = Instant::now();
        let many: Vec<i32> = (0..MAX_LOCKS_PER_CONNECTION as i32 + 10).collect();
        let held = locks.lock_batch("g", "a", peer(1), &queues(&many), now);
        assert_eq!(held.len(), MAX_LOCKS_PER_CONNECTION);
        // Renewing what it holds still works at the cap.
        assert_eq!(
            locks.lock_batch("g", "a", peer(1), &queues(&[0]), now),
            queues(&[0])
        );
        assert_eq!(locks.connection_closed(peer(1)), MAX_LOCKS_PER_CONNECTION);
    }
}
