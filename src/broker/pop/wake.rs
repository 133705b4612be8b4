//! Wakes parked pops of any queue (POP_MESSAGE with `queueId` -1) when a message of their
//! topic becomes visible on another shard.
//!
//! A parked pop waits on its own shard's store ([`crate::store::Store::arrivals`]), which
//! hears only that shard's arrivals. A pop of any queue also serves the queues other shards
//! own (through their mailboxes, without parking there), so it registers a [`Watch`] on
//! its topic here while it is parked; every shard's store tells [`AnyQueueWakes::arrived`]
//! the topic of each record it makes visible ([`crate::store::Store::set_visible_hook`]),
//! and a watched topic's waiters are woken, on whatever shard they are parked. Nothing
//! polls: a parked pop costs nothing until an arrival of its topic or a deadline.
//!
//! ```text
//!   shard B store: record of T visible ─▶ arrived("T") ─▶ T watched? ─▶ notify_waiters
//!   shard A: pop(T, -1) parked on Watch("T") ─▶ woken ─▶ tries every queue again
//! ```
//!
//! Invariants:
//! - A topic is in the table iff a [`Watch`] of it is alive, and its count is the number
//!   of live watches (asserted when a watch ends); the node-wide `watches` total is the
//!   sum of the counts, so `arrived` with no watch anywhere is one atomic load.
//! - A waiter that created its `notified()` future before an arrival is woken by it (the
//!   tokio `Notify` contract), so a pop that takes its future before it looks at the
//!   queues misses no arrival between the look and the wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::sync::Locked;

/// The node's parked pops of any queue, by topic; shared by every shard.
#[derive(Debug, Default)]
pub struct AnyQueueWakes {
    /// Live watches, all topics.
    watches: AtomicUsize,
    /// Topic → (live watches, what wakes them).
    topics: Locked<HashMap<String, (usize, Arc<Notify>)>>,
}

impl AnyQueueWakes {
    /// Watches `topic` until the returned [`Watch`] is dropped.
    pub fn watch(self: &Arc<Self>, topic: &str) -> Watch {
        let notify = {
            let mut topics = self.topics.lock();
            let entry = topics
                .entry(topic.to_owned())
                .or_insert_with(|| (0, Arc::new(Notify::new())));
            entry.0 += 1;
            entry.1.clone()
        };
        self.watches.fetch_add(1, Ordering::AcqRel);
        Watch {
            wakes: self.clone(),
            topic: topic.to_owned(),
            notify,
        }
    }

    /// A record of `topic` became visible on some shard: wakes the watches of `topic`.
    pub fn arrived(&self, topic: &str) {
        if self.watches.load(Ordering::Acquire) == 0 {
            return;
        }
        let notify = self
            .topics
            .lock()
            .get(topic)
            .map(|(_, notify)| notify.clone());
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    /// Live watches, all topics (for tests and metrics).
    pub fn watches(&self) -> usize {
        self.watches.load(Ordering::Acquire)
    }
}

/// One parked pop's registration on its topic.
#[derive(Debug)]
pub struct Watch {
    wakes: Arc<AnyQueueWakes>,
    topic: String,
    notify: Arc<Notify>,
}

impl Watch {
    /// Resolves at the next arrival of the topic on any shard after this call.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.wakes.watches.fetch_sub(1, Ordering::AcqRel);
        let mut topics = self.wakes.topics.lock();
        let count = topics.get_mut(&self.topic).map(|(count, _)| {
            *count -= 1;
            *count
        });
        assert!(
            count.is_some(),
            "a watch of topic {:?} ended that the table does not hold",
            self.topic
        );
        if count == Some(0) {
            topics.remove(&self.topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrival_wakes_the_watches_of_its_topic_only_and_ended_watches_leave_nothing() {
        let wakes = Arc::new(AnyQueueWakes::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let a = wakes.watch("A");
            let a2 = wakes.watch("A");
            let b = wakes.watch("B");
            assert_eq!(wakes.watches(), 3);
            let woken_a = a.notified();
            let woken_a2 = a2.notified();
            let woken_b = b.notified();
            wakes.arrived("A");
            // Both watches of A were woken; B's was not.
            woken_a.await;
            woken_a2.await;
            let timed_out =
                tokio::time::timeout(std::time::Duration::from_millis(20), woken_b).await;
            assert!(timed_out.is_err(), "an arrival of A woke a watch of B");
            drop((a, a2, b));
        });
        assert_eq!(wakes.watches(), 0);
        assert!(wakes.topics.lock().is_empty());
    }
}
