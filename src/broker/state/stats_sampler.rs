//! What the shard's metrics sampler reads off the broker, and the pull path's count
//! ([`crate::metrics::rates`] derives the rates).
//!
//! - [`count_pull`]: every pull's answer, into the shard's [`GetTable`] (found or not,
//!   and by topic and group the messages and bytes returned). `Cell`s only: the pull
//!   path takes no lock for it.
//! - [`sample`]: once a second, the broker's counters (messages stored, pulls found and
//!   missed, messages returned by pulls and pops) and the CommitLog's size and offsets;
//!   every 10 s, the per-topic puts (the store's ConsumeQueues count them), the pull
//!   table, and each group's lag on this shard's queues.
//!
//! The lag of a (group, topic) pair follows GET_CONSUME_STATS ([`crate::broker::admin::consume_stats`]):
//! over the topic's read queues this shard owns, the queue's end minus the group's
//! committed offset, a queue without a commit counting from 0. Only pairs with a commit
//! somewhere have a lag, as only they are in `consumerProgress`.

use crate::metrics::rates::{BrokerCounters, GetTable, KeyInputs, ShardSampler};
use crate::metrics::LogFigures;
use crate::store::read::RecordLoc;

use crate::broker::Broker;

/// Counts one pull's answer (`records` empty: it found nothing).
pub fn count_pull(broker: &Broker, topic: &str, group: &str, records: &[RecordLoc]) {
    let bytes = records.iter().map(|record| u64::from(record.size)).sum();
    broker.gets.count(topic, group, records.len() as u64, bytes);
}

/// Counts what a POP served `group` from `topic`, as a pull's get is counted.
pub fn count_pop(broker: &Broker, topic: &str, group: &str, messages: usize, bytes: u64) {
    broker.gets.count(topic, group, messages as u64, bytes);
}

/// One second's sample: the broker's rates and the CommitLog's figures, and the per-key
/// figures when they are due.
pub fn sample(broker: &Broker, sampler: &mut ShardSampler) {
    let now = broker.now_ms();
    let metrics = &broker.metrics;
    let (found, missed, _) = broker.gets.totals();
    let rates = sampler.sample_broker(
        now,
        BrokerCounters {
            puts: broker.store.stats().puts,
            gets_found: found,
            gets_missed: missed,
            // Pops too: Java's transferred count is every message a get returned.
            transferred: metrics
                .messages_out
                .load(std::sync::atomic::Ordering::Relaxed),
        },
    );
    metrics.set_rates(rates);
    let base = broker.store.config().offset_base();
    let written = broker.store.log_positions().written;
    metrics.set_log(LogFigures {
        file_bytes: broker.store.log_file_bytes(),
        min_offset: broker.store.log_start().saturating_sub(base),
        max_offset: written.saturating_sub(base),
    });
    metrics.gets_uncounted.store(
        broker.gets.uncounted(),
        std::sync::atomic::Ordering::Relaxed,
    );
    if sampler.keys_due(now) {
        let inputs = key_inputs(broker, &broker.gets);
        metrics.set_keys(sampler.sample_keys(now, inputs));
    }
}

fn key_inputs(broker: &Broker, gets: &GetTable) -> KeyInputs {
    // A deleted topic's pairs free their places in the table.
    gets.retain(|topic, _| broker.topics.get(topic).is_some());
    KeyInputs {
        puts: broker.store.topic_puts(),
        gets: gets.snapshot(),
        lags: lags(broker),
    }
}

/// `((topic, group), lag)` of every pair with a commit, over this shard's queues.
fn lags(broker: &Broker) -> Vec<((String, String), u64)> {
    let mut lags = Vec::new();
    for ((topic, group), committed) in broker.consumer_offsets.snapshot() {
        let Some(config) = broker.topics.get(&topic) else {
            continue;
        };
        let mut lag = 0u64;
        let mut owned = false;
        for queue_id in 0..config.read_queue_nums as i32 {
            if broker.shard.owner(&topic, queue_id) != broker.shard.id() {
                continue;
            }
            owned = true;
            let end = broker.store.max_offset(&topic, queue_id);
            let offset = committed.get(&queue_id).copied().unwrap_or(0).max(0) as u64;
            lag += end.saturating_sub(offset);
        }
        if owned {
            lags.push(((topic, group), lag));
        }
    }
    lags
}
