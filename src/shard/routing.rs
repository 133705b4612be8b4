//! Which shard owns a queue, and which requests name one (D3).
//!
//! Ownership is a pure function of `(topic, queueId)` and the shard count:
//! `(hash(topic) + queueId) mod shards`, with a stable 64-bit hash of the topic's bytes. It never depends on the process, the run or the platform, so a
//! queue's ConsumeQueue and CommitLog records stay in the same shard's directory across
//! restarts, as long as the shard count does not change (the store layout refuses a
//! changed count, see [`super::layout`]).

use crate::remoting::codes::request;
use crate::remoting::RemotingCommand;

/// The shard that owns `(topic, queue_id)` among `shards` shards.
pub fn queue_owner(topic: &str, queue_id: i32, shards: u8) -> u8 {
    if shards <= 1 {
        return 0;
    }
    // Consecutive queues of a topic go to consecutive shards, so a topic with at least as
    // many queues as shards loads every shard evenly; the topic's hash picks where its
    // queue 0 starts, so many small topics spread too.
    let start = topic_hash(topic) % shards as u64;
    ((start + queue_id.rem_euclid(shards as i32) as u64) % shards as u64) as u8
}

/// 64-bit FNV-1a of the topic's bytes with MurmurHash3's fmix64 finaliser (FNV's low
/// bits alone follow the last bytes too closely for a small modulus).
fn topic_hash(topic: &str) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET_BASIS;
    for byte in topic.bytes() {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(PRIME);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// Where a request names its queue: the header fields holding the topic and the queue id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueFields {
    pub topic: &'static str,
    pub queue_id: &'static str,
    /// A send may leave the queue to the broker (`queueId` below 0).
    pub is_send: bool,
}

/// The queue fields of a request that works on one queue's data (its CommitLog records,
/// its ConsumeQueue, its parked pulls); `None` for requests any shard answers (heartbeats,
/// topic admin, routes), which touch only node-wide tables.
pub fn queue_fields(code: i32) -> Option<QueueFields> {
    let long = QueueFields {
        topic: "topic",
        queue_id: "queueId",
        is_send: false,
    };
    match code {
        request::SEND_MESSAGE => Some(QueueFields {
            is_send: true,
            ..long
        }),
        request::SEND_MESSAGE_V2 | request::SEND_BATCH_MESSAGE => Some(QueueFields {
            topic: "b",
            queue_id: "e",
            is_send: true,
        }),
        request::PULL_MESSAGE
        | request::LITE_PULL_MESSAGE
        | request::GET_MAX_OFFSET
        | request::GET_MIN_OFFSET
        | request::SEARCH_OFFSET_BY_TIMESTAMP
        | request::GET_EARLIEST_MSG_STORETIME
        | request::QUERY_CONSUMER_OFFSET
        | request::UPDATE_CONSUMER_OFFSET
        | request::POP_MESSAGE
        | request::ACK_MESSAGE
        | request::CHANGE_MESSAGE_INVISIBLETIME => Some(long),
        _ => None,
    }
}

/// The `(topic, queueId)` a request names, if it is a per-queue request whose header
/// holds both; a malformed header gives `None` and is answered (with the handler's own
/// error) by the shard that received it.
pub fn named_queue(request: &RemotingCommand) -> Option<(QueueFields, &str, i32)> {
    let fields = queue_fields(request.code)?;
    let topic = request.opt_str(fields.topic)?;
    let queue_id = request.opt_i32(fields.queue_id).ok()??;
    Some((fields, topic, queue_id))
}

/// The lowest queue of `topic` that shard `shard` of `shards` owns: a system topic with
/// one queue per shard (the timer queue, the POP log) gives each shard this one.
pub fn queue_of_shard(topic: &str, shard: u8, shards: u8) -> i32 {
    (0..shards.max(1) as i32)
        .find(|&queue| queue_owner(topic, queue, shards) == shard)
        .unwrap_or_else(|| panic!("no queue of {topic} maps to shard {shard} of {shards}"))
}

/// Picks a queue of a topic with `queues` write queues for a send that left the choice to
/// the broker: round-robin from `counter`, preferring queues `shard` owns so the send needs
/// no hop. Returns the queue id; advances `counter`.
pub fn pick_queue(topic: &str, queues: u32, shard: u8, shards: u8, counter: &mut u32) -> i32 {
    let queues = queues.max(1);
    let start = *counter;
    *counter = counter.wrapping_add(1);
    (0..queues)
        .map(|step| (start.wrapping_add(step) % queues) as i32)
        .find(|&queue| queue_owner(topic, queue, shards) == shard)
        .unwrap_or((start % queues) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::ExtFields;

    #[test]
    fn one_shard_owns_everything() {
        for queue in 0..64 {
            assert_eq!(queue_owner("TopicTest", queue, 1), 0);
        }
    }

    #[test]
    fn ownership_is_stable_and_spread() {
        // Pinned values: a change here would strand the queues of existing stores.
        assert_eq!(
            queue_owner("TopicTest", 0, 2),
            queue_owner("TopicTest", 0, 2)
        );
        let owners: Vec<u8> = (0..8).map(|q| queue_owner("TopicTest", q, 2)).collect();
        assert_eq!(owners, PINNED_TOPICTEST_2);
        let mut per_shard = [0u32; 4];
        for topic in 0..200 {
            for queue in 0..8 {
                per_shard[queue_owner(&format!("topic-{topic}"), queue, 4) as usize] += 1;
            }
        }
        // 1600 queues over 4 shards: a topic's 8 queues go 2 to each shard.
        for count in per_shard {
            assert_eq!(count, 400, "uneven spread {per_shard:?}");
        }
    }

    const PINNED_TOPICTEST_2: [u8; 8] = [1, 0, 1, 0, 1, 0, 1, 0];

    #[test]
    fn requests_name_their_queue_under_their_own_field_names() {
        let mut v1 = RemotingCommand::request(request::SEND_MESSAGE, ExtFields::default());
        v1.put_ext("topic", "T");
        v1.put_ext("queueId", 3);
        let (fields, topic, queue) = named_queue(&v1).unwrap();
        assert!(fields.is_send);
        assert_eq!((topic, queue), ("T", 3));

        let mut v2 = RemotingCommand::request(request::SEND_BATCH_MESSAGE, ExtFields::default());
        v2.put_ext("b", "U");
        v2.put_ext("e", -1);
        assert_eq!(named_queue(&v2).map(|(_, t, q)| (t, q)), Some(("U", -1)));

        let heartbeat = RemotingCommand::request(request::HEART_BEAT, ExtFields::default());
        assert!(named_queue(&heartbeat).is_none());
        let mut bad = RemotingCommand::request(request::PULL_MESSAGE, ExtFields::default());
        bad.put_ext("topic", "T");
        bad.put_ext("queueId", "x");
        assert!(
            named_queue(&bad).is_none(),
            "a bad header is answered locally"
        );
    }

    #[test]
    fn picking_prefers_local_queues_and_falls_back_when_none_is_local() {
        let mut counter = 0;
        for _ in 0..16 {
            let queue = pick_queue("TopicTest", 8, 1, 2, &mut counter);
            assert_eq!(queue_owner("TopicTest", queue, 2), 1);
        }
        // One queue, owned by one of the two shards: the other shard still gets a queue.
        let owner = queue_owner("Solo", 0, 2);
        let mut counter = 5;
        assert_eq!(pick_queue("Solo", 1, 1 - owner, 2, &mut counter), 0);
    }
}
